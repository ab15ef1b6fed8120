//! The Kubernetes source as `portico run` starts it, without the drivers:
//! the configuration the measuring binaries (`kube-latency`, `kube-scale`)
//! share, and the start-up they share (a snapshot of the file's static part,
//! a [`Publisher`], then [`KubeSource::start`]).
//!
//! The plan: two af_packet ports (never opened here), a `[kubernetes]`
//! section serving unclassed Services with the given debounce (its maximum
//! ten times that) and Lease identity, and one auto-assigned address pool.

use dataplane::snapshot::{BuildError, Publisher, SnapshotBuilder};
use portico::source::kube::{KubeSource, KubeSourceError, KubeSourceParts};
use portico::source::static_file::{PortFacts, snapshot_spec};
use std::path::Path;

/// Why the source could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SourceRigError {
    #[error("the benchmark's configuration is invalid: {0}")]
    Config(#[from] nic_config::ConfigError),
    #[error("the first snapshot failed to build: {0}")]
    Build(#[from] BuildError),
    #[error("the plan has no [kubernetes] section")]
    NoKubernetes,
    #[error("the Kubernetes source did not start: {0}")]
    Start(#[from] KubeSourceError),
}

/// The plan: `pool` is the address pool's `addresses` list as TOML (e.g.
/// `["100.96.0.0/16"]`).
pub fn plan(
    kubeconfig: &Path,
    debounce_ms: u64,
    identity: &str,
    pool: &str,
) -> Result<nic_config::Plan, SourceRigError> {
    let text = format!(
        r#"
        [[port]]
        name = "outside"
        driver = "afpacket"
        interface = "o0"
        role = "outside"
        node_addresses = ["192.0.2.1/24"]
        [[port]]
        name = "inside"
        driver = "afpacket"
        interface = "i0"
        role = "inside"
        snat_addresses = ["10.0.0.1/8"]
        [kubernetes]
        kubeconfig = "{}"
        serve_unclassed = true
        debounce_ms = {debounce_ms}
        debounce_max_ms = {}
        identity = "{identity}"
        [[address_pool]]
        name = "public"
        addresses = {pool}
        "#,
        kubeconfig.display(),
        debounce_ms.max(1) * 10,
    );
    Ok(nic_config::parse(&text)?)
}

/// Starts the source of `plan` (which has a `[kubernetes]` section, as
/// [`plan`] makes it), publishing into a fresh [`Publisher`].
pub fn start(plan: &nic_config::Plan) -> Result<(KubeSource, Publisher), SourceRigError> {
    let facts = vec![
        PortFacts {
            mac: [2, 0, 0, 0, 0, 1],
            mtu: 1500
        };
        plan.ports.len()
    ];
    let mut builder = SnapshotBuilder::new();
    let publisher = Publisher::new(builder.build(&snapshot_spec(plan, &facts))?);
    let parts = KubeSourceParts::from_plan(plan, builder, publisher.clone())
        .ok_or(SourceRigError::NoKubernetes)?;
    Ok((KubeSource::start(parts)?, publisher))
}
