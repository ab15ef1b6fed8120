//! Pipeline stages.

pub mod parse;
