//! SNAT tuple allocation (stub, being written).
