//! Per-core connection tracking (stub, being written).
pub mod affinity;
