//! Harness for Portico's end-to-end tests. The namespace, veth and process
//! guards live in the `portico-netns` crate, shared with `portico demo`
//! (which builds the same topology, [`portico::demo::topology`]) and the
//! drivers' namespace tests; this crate re-exports them so the suites read
//! `portico_tests::Netns`.
//!
//! Tests that need root call [`require_root`] first; without root (or
//! without `ip netns`) it prints a loud `SKIPPED` banner to stderr and the
//! test returns; with `PORTICO_REQUIRE_ROOT=1` (CI) it fails instead.

pub use portico_netns::*;

pub mod kube_cluster;
pub mod kube_source_rig;
pub mod tier;
