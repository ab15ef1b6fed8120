//! Maglev consistent hashing (stub, being written).
