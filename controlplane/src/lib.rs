//! Portico's control plane: configuration sources, the mapping onto the
//! dataplane's snapshot, the running gateway (`portico run`), its admin
//! socket (`portico stats`) and the demo. The `portico` binary
//! (src/main.rs) is a thin CLI over this library.

pub mod admin;
pub mod demo;
pub mod gateway;
pub mod source;
