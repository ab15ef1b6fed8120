//! Portico's control plane: configuration sources, the mapping onto the
//! dataplane's snapshot, and the demo. The `portico` binary (src/main.rs) is
//! a thin CLI over this library.

pub mod demo;
pub mod source;
