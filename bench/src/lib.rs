//! Shared fixtures of the benches (frame builders, flow populations).
