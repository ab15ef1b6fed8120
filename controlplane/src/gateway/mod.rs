//! `portico run`: the dataplane on real interfaces, fed from a
//! `portico.toml`, with reloads on SIGHUP and a clean stop on SIGTERM/SIGINT.
//!
//! Drivers: every port of a gateway uses the same driver (`driver` of the
//! ports; nic-config refuses a mix), because one worker drives all its
//! ports through one [`Driver`](dataplane::driver::Driver). Every worker
//! thread runs the dataplane's one poll loop
//! ([`Worker::run`](dataplane::worker::Worker::run): idle policy, the
//! driver's wait, the driver's port counters) generic over its driver
//! type; the only per-driver glue here is opening the driver
//! (`workers::OpenDriver`), and `driver_plan::WorkerDriver` picks the type
//! once per worker thread, so nothing is dispatched per packet.
//!
//! Start-up, in order: every port's interface is prepared (offloads off) and
//! its MAC and MTU read; the kernel's addresses on the owned interfaces are
//! checked against the addresses Portico owns (a clash is logged as a
//! warning: the kernel would answer ARP and connections for them too); the
//! first snapshot is built and published; the worker threads start (each
//! pinned to its core when `cores` is set, each opening its own driver —
//! for af_packet its sockets, joined in one fanout group per port when there
//! are several workers — connected by a handoff mesh); then the admin socket and the
//! Prometheus endpoint (`--metrics-addr`, in the gateway's namespace).
//!
//! Invariants:
//! * one [`SnapshotBuilder`](dataplane::snapshot::SnapshotBuilder) lives as long as the gateway, so service and
//!   backend ids stay stable across reloads and established flows keep their
//!   backends;
//! * a reload either publishes a complete new snapshot or changes nothing:
//!   an invalid file, a spec the builder rejects, or a change only a restart
//!   can apply ([`decide`]) leaves the running configuration as it
//!   was, and every problem is logged;
//! * the workers own their drivers and pipelines; other threads see only
//!   what the workers publish (counters, driver stats), what they answer
//!   through their inspect mailboxes (flow listings, lookups; served once
//!   per poll loop) and the snapshots the control thread publishes;
//! * the neighbour table is shared by the workers and garbage-collected by
//!   the control thread once every [`NEIGHBOUR_GC_INTERVAL_MS`] (entries
//!   unused for `gc_stale_ms` are reclaimed by publishing a compacted
//!   generation, see [`dataplane::neighbour`]), so pods coming and going
//!   as next hops never fill it up;
//! * snapshot build times and reload-to-live latency go to the
//!   [`ControlPlaneMetrics`](crate::admin::ControlPlaneMetrics) handle other sources feed too
//!   ([`Gateway::control_plane_metrics`]); the control thread logs drop
//!   summaries at most once per interval, never per packet.
//!
//! With a `[kubernetes]` section the Kubernetes source
//! ([`crate::source::kube`]) starts after the workers, on its own thread
//! (pinned off the worker cores when `cores` is set), and takes over the
//! snapshot builder: it publishes through the same [`Publisher`](dataplane::snapshot::Publisher). The
//! file's standalone `[[service]]`s stay in force next to the cluster's
//! Services (the address pools cannot overlap their addresses; a Kubernetes
//! Service whose listener clashes with one is left out and gets a
//! `ServiceRejected` Event). SIGHUP does not reload such a configuration
//! (the cluster's Services live in the builder): it is refused as needing a
//! restart. On SIGTERM the source stops first, releasing its Lease, then the
//! workers.
//!
//! With `[[bgp.peer]]`s the BGP speaker ([`bgp`]) starts after the workers
//! and follows every published snapshot from the control thread's tick.
//! SIGTERM then withdraws every route first (and waits for the routers to
//! have the withdrawal), releases the Lease, keeps forwarding for
//! `[bgp] shutdown_drain_s`, and only then sends Cease and stops the
//! workers.
//!
//! Layout, one file per role: `lifecycle` (start, serve, reload entry
//! point, shutdown, signals), `reload` (which changes need a restart),
//! `driver_plan` (the plan's ports and settings mapped to driver
//! configurations; interface preparation and the XDP attachment),
//! `workers` (the worker threads: open the driver, run the loop), `stats` (what
//! the admin socket and `/metrics` report from), `bgp/` (announcing the
//! VIPs: sessions, desired routes, the worker watchdog), `privileges` (the
//! capabilities and `no_new_privs` after start-up, per driver) and `dpdk`
//! (the same for `driver = "dpdk"`, cargo feature `dpdk`).

pub mod bgp;
#[cfg(feature = "dpdk")]
mod dpdk;
mod driver_plan;
mod host_path;
mod lifecycle;
pub mod privileges;
mod reload;
mod stats;
mod workers;

pub use driver_plan::owned_addresses;
pub use lifecycle::{Gateway, NEIGHBOUR_GC_INTERVAL_MS, signals};
pub use reload::{ReloadDecision, ReloadOutcome, decide, restart_required};

use crate::admin::{AdminError, MetricsError};
use crate::source::kube::KubeSourceError;
use dataplane::driver::afpacket::AfPacketError;
use dataplane::driver::afxdp::AfXdpError;
use dataplane::snapshot::BuildError;
use nic_config::DriverKind;
use std::path::PathBuf;

/// What `portico run` was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunOptions {
    /// The configuration file (re-read on SIGHUP).
    pub config_path: PathBuf,
    pub admin_socket: PathBuf,
}

/// Why the gateway could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(
        "port {port:?}: driver {driver} is not supported by `portico run` (use afpacket or afxdp)"
    )]
    UnsupportedDriver { port: String, driver: DriverKind },
    #[error(
        "port {port:?}: driver {driver} differs from port {first:?}'s {first_driver}; \
         every port of a gateway uses the same driver"
    )]
    MixedDrivers {
        port: String,
        driver: DriverKind,
        first: String,
        first_driver: DriverKind,
    },
    #[error("port {port:?}: preparing the interface failed: {source}")]
    Prepare { port: String, source: AfPacketError },
    #[error("port {port:?}: {source}")]
    Afxdp { port: String, source: AfXdpError },
    #[cfg(feature = "dpdk")]
    #[error("starting DPDK: {0}")]
    Dpdk(#[from] dataplane::driver::dpdk::DpdkError),
    #[error("host path: {0}")]
    HostPath(#[from] dataplane::driver::hostpath::HostPathError),
    #[error("the configuration does not build into forwarding tables: {0}")]
    Build(#[from] BuildError),
    #[error("admin socket: {0}")]
    Admin(#[from] AdminError),
    #[error("metrics endpoint: {0}")]
    Metrics(#[from] MetricsError),
    #[error("installing signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("starting worker {worker}: {reason}")]
    WorkerStart { worker: usize, reason: String },
    #[error("worker {worker} stopped unexpectedly")]
    WorkerDied { worker: usize },
    #[error("Kubernetes source: {0}")]
    Kube(#[from] KubeSourceError),
    #[error("the Kubernetes source stopped unexpectedly")]
    KubeSourceDied,
    #[error("reading /dev/urandom for the flow tables' hash key: {0}")]
    Random(#[source] std::io::Error),
    #[error("dropping privileges: {0}")]
    Privileges(#[from] privileges::PrivilegeError),
    #[error("starting the BGP speaker's runtime: {0}")]
    BgpRuntime(std::io::Error),
}
