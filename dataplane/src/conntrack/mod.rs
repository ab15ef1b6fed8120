//! Per-core connection tracking (stub, being written).
