//! Snapshot (stub).
