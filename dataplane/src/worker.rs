//! Worker (stub).
