//! Sources of the desired model: the static TOML file now, Kubernetes
//! (Services + EndpointSlices) with the control-plane issue.

pub mod kube;
pub mod static_file;
