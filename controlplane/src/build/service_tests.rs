//! Table-driven cases of the Kubernetes semantics.
