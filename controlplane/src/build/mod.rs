//! The Kubernetes model, pure and deterministic: a Service, its
//! EndpointSlices and its assigned addresses become the dataplane's
//! [`ServiceSpec`](dataplane::snapshot::ServiceSpec)s ([`service_specs`]);
//! [`SpecCache`] tells which Services changed so unchanged ones cost
//! nothing; [`Debouncer`] coalesces bursts of API events.
//!
//! No I/O and no clock here: the Kubernetes source (kube-rs watchers) feeds
//! objects in and publishes what comes out.

mod cache;
mod debounce;
mod service;

pub use cache::{SpecCache, SpecChange, specs_changed};
pub use debounce::Debouncer;
pub use service::{
    ANNOTATION_SYN_PROXY, IgnoreReason, LABEL_SERVICE_NAME, ModelConfig, SYN_PROXY_VALUES,
    ServiceOutcome, Skip, is_served_class, service_specs, wants_load_balancer_address,
};
