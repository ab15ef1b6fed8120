//! Portico's control plane: configuration sources, the mapping onto the
//! dataplane's snapshot, the running gateway (`portico run`), its admin
//! socket (`portico stats`, `services`, `flows`, `simulate --live`) and Prometheus endpoint,
//! `portico simulate`, the demo with its namespace topology, and the
//! helpers (`portico tool`, [`netns`]) shared with the end-to-end tests;
//! for Kubernetes, the pure model ([`build`]: Services + EndpointSlices →
//! service specs, the debouncer) and the LoadBalancer address allocator
//! ([`ipam`]). The `portico` binary
//! (src/main.rs) is a thin CLI over this library.

pub mod admin;
pub mod build;
pub mod cli;
pub mod demo;
pub mod gateway;
pub mod ipam;
pub mod mirror;
pub mod netns;
pub mod simulate;
pub mod source;
pub mod tool;
