//! Zero-copy header views and checksums (stub, being written).
