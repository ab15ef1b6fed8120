//! Portico's BGP speaker (issue 13).
//!
//! Placeholder: filled in by the following commits.

pub mod wire;
