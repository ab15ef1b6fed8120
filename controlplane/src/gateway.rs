//! `portico run`: the dataplane on real interfaces, fed from a
//! `portico.toml`, with reloads on SIGHUP and a clean stop on SIGTERM/SIGINT.
//!
//! Drivers: every port of a gateway uses the same driver (`driver` of the
//! ports; nic-config refuses a mix), because one worker drives all its
//! ports through one [`Driver`]. The worker loop is generic over
//! [`GatewayDriver`] (how a worker opens its driver, sleeps when idle and
//! publishes its port counters); [`WorkerDriver`] picks the implementation
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
//! * one [`SnapshotBuilder`] lives as long as the gateway, so service and
//!   backend ids stay stable across reloads and established flows keep their
//!   backends;
//! * a reload either publishes a complete new snapshot or changes nothing:
//!   an invalid file, a spec the builder rejects, or a change only a restart
//!   can apply ([`restart_required`]) leaves the running configuration as it
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
//!   [`ControlPlaneMetrics`] handle other sources feed too
//!   ([`Gateway::control_plane_metrics`]); the control thread logs drop
//!   summaries at most once per interval, never per packet.
//!
//! With a `[kubernetes]` section the Kubernetes source
//! ([`crate::source::kube`]) starts after the workers, on its own thread
//! (pinned off the worker cores when `cores` is set), and takes over the
//! snapshot builder: it publishes through the same [`Publisher`]. The
//! file's standalone `[[service]]`s stay in force next to the cluster's
//! Services (the address pools cannot overlap their addresses; a Kubernetes
//! Service whose listener clashes with one is left out and gets a
//! `ServiceRejected` Event). SIGHUP does not reload such a configuration
//! (the cluster's Services live in the builder): it is refused as needing a
//! restart. On SIGTERM the source stops first, releasing its Lease, then the
//! workers.

use crate::admin::{
    AdminError, AdminServer, ControlPlaneMetrics, CounterReport, DEFAULT_DROP_LOG_INTERVAL_MS,
    DropLog, KernelTotals, LiveAdmin, MetricsError, MetricsServer, PortCounters, PortReport,
    PortStatsCell, SnapshotReport, StatsReport, WorkerReport, service_reports, snat_reports,
    sum_workers,
};
use crate::simulate::SimContext;
use crate::source::kube::{KubeSource, KubeSourceError, KubeSourceParts, KubeSourceStats};
use crate::source::static_file::{PortFacts, snapshot_spec, worker_config};
use dataplane::clock::{Clock, MonotonicClock};
use dataplane::counters::ServiceCounters;
use dataplane::counters::SharedCounters;
use dataplane::driver::Driver;
use dataplane::driver::afpacket::prepare::{kernel_owned_conflicts, prepare_interface};
use dataplane::driver::afpacket::{
    AfPacketConfig, AfPacketDriver, AfPacketError, AfPacketPortConfig,
};
use dataplane::driver::afxdp::{
    AfXdpConfig, AfXdpDriver, AfXdpError, AfXdpPortConfig, XdpAttachment, XdpMode, XdpRingConfig,
    ZeroCopy,
};
use dataplane::handoff::{HandoffMesh, WorkerHandoff};
use dataplane::inspect::{InspectClient, InspectServer};
use dataplane::neighbour::{NeighbourConfig, NeighbourTable};
use dataplane::snapshot::{BuildError, Publisher, SnapshotBuilder, SnapshotReader};
use dataplane::worker::{IdlePolicy, Worker, WorkerConfig};
use nic_config::{
    AfxdpPlan, ConfigError, DriverKind, ListenerKind, Plan, PortPlan, XdpModeSetting,
    ZeroCopySetting,
};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tracing::{debug, error, info, warn};

/// Frames each handoff ring between two workers holds.
const HANDOFF_RING_FRAMES: usize = 1024;
/// How often a worker copies its driver's port stats out.
const DRIVER_STATS_INTERVAL_MS: u64 = 100;
/// Polls between two clock reads for the driver stats timer while busy.
const POLLS_PER_STATS_CHECK: u32 = 64;
/// Idle polls an adaptive worker spins before it sleeps in `poll(2)`.
const ADAPTIVE_SPIN_POLLS: u32 = 1024;
/// How long the control thread sleeps between looks at signals and workers.
const CONTROL_TICK_MS: u64 = 50;
/// How often the control thread collects the neighbour table's garbage.
pub const NEIGHBOUR_GC_INTERVAL_MS: u64 = 1_000;
/// How long a worker may take to open its sockets and allocate its tables.
const WORKER_START_TIMEOUT_MS: u64 = 60_000;

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
}

/// What a reload did.
#[derive(Debug)]
pub enum ReloadOutcome {
    /// A new snapshot is in force.
    Applied { generation: u64 },
    /// The file describes the running configuration; nothing published.
    Unchanged,
    /// The file does not load; the old configuration stays.
    Invalid(ConfigError),
    /// The file changes settings only a restart applies; the old
    /// configuration stays.
    NeedsRestart(Vec<String>),
    /// The snapshot builder rejected the new spec; the old one stays.
    Rejected(BuildError),
}

/// Settings of `new` that differ from `old` and cannot change while the
/// gateway runs (ports, workers and everything the workers were built
/// with), each as `path (old -> new)`. Empty: `new` can be applied live.
pub fn restart_required(old: &Plan, new: &Plan) -> Vec<String> {
    let mut changed = Vec::new();
    let mut check = |path: &str, a: String, b: String| {
        if a != b {
            changed.push(format!("{path} ({a} -> {b})"));
        }
    };
    let (a, b) = (&old.dataplane, &new.dataplane);
    check(
        "dataplane.workers",
        a.workers.to_string(),
        b.workers.to_string(),
    );
    check(
        "dataplane.cores",
        format!("{:?}", a.cores),
        format!("{:?}", b.cores),
    );
    check(
        "dataplane.batch_size",
        a.batch_size.to_string(),
        b.batch_size.to_string(),
    );
    check("dataplane.idle", a.idle.to_string(), b.idle.to_string());
    check(
        "dataplane.conntrack.capacity",
        a.conntrack.capacity.to_string(),
        b.conntrack.capacity.to_string(),
    );
    check(
        "dataplane.conntrack.expiry_scan_per_poll",
        a.conntrack.expiry_scan_per_poll.to_string(),
        b.conntrack.expiry_scan_per_poll.to_string(),
    );
    check(
        "dataplane.conntrack.early_drop_scan",
        a.conntrack.early_drop_scan.to_string(),
        b.conntrack.early_drop_scan.to_string(),
    );
    for ((name, x), (_, y)) in a
        .conntrack
        .timeouts
        .named()
        .iter()
        .zip(b.conntrack.timeouts.named().iter())
    {
        check(
            &format!("dataplane.conntrack.timeouts.{name}"),
            x.to_string(),
            y.to_string(),
        );
    }
    check(
        "SNAT addresses",
        format!("{:?}", a.snat.addresses),
        format!("{:?}", b.snat.addresses),
    );
    check(
        "dataplane.snat.port_range",
        format!("{:?}", a.snat.port_range),
        format!("{:?}", b.snat.port_range),
    );
    check(
        "dataplane.snat.quarantine_ms",
        a.snat.quarantine_ms.to_string(),
        b.snat.quarantine_ms.to_string(),
    );
    check(
        "dataplane.affinity.capacity",
        a.affinity_capacity.to_string(),
        b.affinity_capacity.to_string(),
    );
    check(
        "dataplane.afxdp",
        format!("{:?}", a.afxdp),
        format!("{:?}", b.afxdp),
    );
    check(
        "dataplane.neighbour_table",
        format!("{:?}", a.neighbour_table),
        format!("{:?}", b.neighbour_table),
    );
    if old.ports.len() != new.ports.len() {
        check(
            "number of ports",
            old.ports.len().to_string(),
            new.ports.len().to_string(),
        );
    } else {
        for (i, (p, q)) in old.ports.iter().zip(&new.ports).enumerate() {
            check(&format!("port[{i}].name"), p.name.clone(), q.name.clone());
            check(
                &format!("port[{i}].driver"),
                p.driver.to_string(),
                q.driver.to_string(),
            );
            check(
                &format!("port[{i}].interface"),
                p.interface.clone(),
                q.interface.clone(),
            );
            check(
                &format!("port[{i}].role"),
                p.role.to_string(),
                q.role.to_string(),
            );
            check(
                &format!("port[{i}].mac"),
                format!("{:?}", p.mac.map(|m| m.to_string())),
                format!("{:?}", q.mac.map(|m| m.to_string())),
            );
            check(
                &format!("port[{i}].mtu"),
                format!("{:?}", p.mtu),
                format!("{:?}", q.mtu),
            );
        }
    }
    changed
}

/// Every address Portico answers for: node and SNAT addresses, VIPs and
/// external IPs.
pub fn owned_addresses(plan: &Plan) -> Vec<Ipv4Addr> {
    let mut owned: Vec<Ipv4Addr> = plan.addresses.iter().map(|a| a.address).collect();
    owned.extend(
        plan.services
            .iter()
            .flat_map(|s| &s.listeners)
            .filter(|l| matches!(l.kind, ListenerKind::Vip | ListenerKind::ExternalIp))
            .map(|l| l.address),
    );
    owned.sort_unstable();
    owned.dedup();
    owned
}

/// Warn about every owned address the kernel also has on a port's
/// interface.
fn warn_kernel_conflicts(plan: &Plan) {
    let owned = owned_addresses(plan);
    for port in &plan.ports {
        match kernel_owned_conflicts(&port.interface, &owned) {
            Ok(conflicts) => {
                for address in conflicts {
                    warn!(
                        %address,
                        interface = %port.interface,
                        "the kernel also has this Portico-owned address on the interface and \
                         will answer ARP and connections for it; remove it (ip addr del)"
                    );
                }
            }
            Err(e) => warn!(interface = %port.interface, error = %e,
                "cannot list the kernel's addresses of the interface"),
        }
    }
}

#[cfg(feature = "dpdk")]
mod dpdk;

/// The one driver every port of `plan` uses.
fn gateway_driver(plan: &Plan) -> Result<DriverKind, GatewayError> {
    let Some(first) = plan.ports.first() else {
        return Ok(DriverKind::Afpacket);
    };
    for port in &plan.ports {
        if port.driver != first.driver {
            return Err(GatewayError::MixedDrivers {
                port: port.name.clone(),
                driver: port.driver,
                first: first.name.clone(),
                first_driver: first.driver,
            });
        }
    }
    match first.driver {
        DriverKind::Afpacket | DriverKind::Afxdp => Ok(first.driver),
        #[cfg(feature = "dpdk")]
        DriverKind::Dpdk => Ok(first.driver),
        driver => Err(GatewayError::UnsupportedDriver {
            port: first.name.clone(),
            driver,
        }),
    }
}

/// Prepare one port's interface for `driver` and read its MAC and MTU.
/// For afxdp, also check that the interface has one RX queue per worker
/// and attach the redirect program (returned; it stays attached as long as
/// the attachment lives).
fn prepare_port(
    port: &PortPlan,
    driver: DriverKind,
    plan: &Plan,
) -> Result<(PortFacts, Option<XdpAttachment>), GatewayError> {
    match driver {
        DriverKind::Afpacket | DriverKind::Afxdp => {
            let prepared =
                prepare_interface(&port.interface).map_err(|source| GatewayError::Prepare {
                    port: port.name.clone(),
                    source,
                })?;
            if !prepared.offloads.all_off() {
                warn!(interface = %port.interface, offloads = ?prepared.offloads,
                    "some offloads stay on; frames above the MTU will be dropped");
            }
            let info = &prepared.info;
            info!(port = %port.name, interface = %port.interface, mac = %info.mac, mtu = info.mtu,
                role = %port.role, driver = %driver, "port prepared");
            let facts = PortFacts {
                mac: info.mac.0,
                mtu: u16::try_from(info.mtu).unwrap_or(u16::MAX),
            };
            let attachment = if driver == DriverKind::Afxdp {
                Some(attach_xdp(port, plan)?)
            } else {
                None
            };
            Ok((facts, attachment))
        }
        other => Err(GatewayError::UnsupportedDriver {
            port: port.name.clone(),
            driver: other,
        }),
    }
}

/// Check the queue count of an afxdp port and attach the XDP program.
fn attach_xdp(port: &PortPlan, plan: &Plan) -> Result<XdpAttachment, GatewayError> {
    let err = |source| GatewayError::Afxdp {
        port: port.name.clone(),
        source,
    };
    let workers = plan.dataplane.workers;
    let queues = dataplane::driver::afxdp::rx_queue_count(&port.interface).map_err(err)?;
    if queues as usize != workers {
        return Err(err(AfXdpError::QueueCount {
            ifname: port.interface.clone(),
            queues,
            workers,
        }));
    }
    let mode = match plan.dataplane.afxdp.mode {
        XdpModeSetting::Native => XdpMode::Native,
        XdpModeSetting::Generic => XdpMode::Generic,
        XdpModeSetting::Auto => XdpMode::Auto,
    };
    let attachment = XdpAttachment::attach(&port.interface, queues, mode).map_err(err)?;
    for stale in attachment.stale_removed() {
        warn!(interface = %port.interface, id = stale.id, mode = %stale.mode,
            "removed a stale Portico XDP program left attached by an earlier run");
    }
    info!(interface = %port.interface, mode = %attachment.mode(), queues,
        "XDP redirect program attached");
    Ok(attachment)
}

/// The AF_XDP driver configuration of worker 0 (see
/// [`WorkerDriver::for_worker`]).
fn afxdp_config(a: &AfxdpPlan, attachments: &[XdpAttachment], workers: usize) -> AfXdpConfig {
    let mut config = AfXdpConfig::new(
        attachments
            .iter()
            .map(|att| AfXdpPortConfig {
                ifname: att.ifname().to_string(),
                queue_id: 0,
                xsk_map: Some(att.map()),
            })
            .collect(),
    );
    config.rings = XdpRingConfig {
        frame_size: a.frame_size,
        umem_frames: a.umem_frames,
        fill_ring: a.fill_ring_size,
        completion_ring: a.completion_ring_size,
        rx_ring: a.rx_ring_size,
        tx_ring: a.tx_ring_size,
    };
    config.zero_copy = match a.zero_copy {
        ZeroCopySetting::Auto => ZeroCopy::Auto,
        ZeroCopySetting::On => ZeroCopy::On,
        ZeroCopySetting::Off => ZeroCopy::Off,
    };
    config.need_wakeup = a.need_wakeup;
    config.shared_umem = a.shared_umem;
    if workers > 1 {
        // Frames handed over by other workers do not wake `poll(2)`.
        config.poll_timeout_ms = 1;
    }
    config
}

/// What one worker publishes for the admin thread.
#[derive(Debug)]
struct WorkerCells {
    /// The core the worker is pinned to, if any.
    core: Option<usize>,
    counters: Arc<SharedCounters>,
    /// One per port.
    ports: Vec<PortStatsCell>,
    /// The admin thread's end of the worker's inspect mailbox.
    inspect: Arc<Mutex<InspectClient>>,
}

/// What the admin thread builds reports from.
#[derive(Debug)]
struct StatsSource {
    started: Instant,
    config: String,
    publisher: Publisher,
    /// Milliseconds after `started` the current snapshot was published.
    published_at_ms: Arc<AtomicU64>,
    workers: Vec<Arc<WorkerCells>>,
    /// `(name, interface)` per port.
    ports: Vec<(String, String)>,
    control: ControlPlaneMetrics,
    neighbours: Arc<NeighbourTable>,
}

impl StatsSource {
    fn report(&self) -> StatsReport {
        let uptime_ms = self.started.elapsed().as_millis() as u64;
        let workers: Vec<WorkerReport> = self
            .workers
            .iter()
            .enumerate()
            .map(|(i, cells)| {
                let (c, g) = cells.counters.read();
                WorkerReport {
                    worker: i,
                    core: cells.core,
                    counters: CounterReport::new(&c, g),
                }
            })
            .collect();
        let ports = self
            .ports
            .iter()
            .enumerate()
            .map(|(i, (name, interface))| {
                let mut stats = PortCounters::default();
                for cells in &self.workers {
                    if let Some(cell) = cells.ports.get(i) {
                        stats.accumulate(&cell.load());
                    }
                }
                PortReport {
                    port: i,
                    name: name.clone(),
                    interface: interface.clone(),
                    stats,
                }
            })
            .collect();
        StatsReport {
            pid: std::process::id(),
            uptime_ms,
            config: self.config.clone(),
            snapshot: SnapshotReport {
                generation: self.publisher.current().generation,
                age_ms: uptime_ms.saturating_sub(self.published_at_ms.load(Ordering::Relaxed)),
            },
            total: sum_workers(&workers),
            workers,
            ports,
            services: {
                let mut counted = ServiceCounters::default();
                for cells in &self.workers {
                    counted.accumulate(&cells.counters.read_services());
                }
                service_reports(&self.publisher.current(), &counted)
            },
            snat: snat_reports(
                &self
                    .workers
                    .iter()
                    .map(|c| c.counters.read_snat())
                    .collect::<Vec<_>>(),
            ),
            control_plane: self.control.report(),
            neighbours: self.neighbours.stats().into(),
        }
    }

    /// The dataplane counters summed over the workers.
    fn totals(&self) -> dataplane::counters::Counters {
        let mut total = dataplane::counters::Counters::default();
        for cells in &self.workers {
            total.accumulate(&cells.counters.read().0);
        }
        total
    }
}

/// A running gateway.
#[derive(Debug)]
pub struct Gateway {
    plan: Plan,
    config_path: PathBuf,
    facts: Vec<PortFacts>,
    /// `None` while the Kubernetes source owns it.
    builder: Option<SnapshotBuilder>,
    publisher: Publisher,
    kube: Option<KubeSource>,
    started: Instant,
    published_at_ms: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
    /// The XDP programs of afxdp ports; detached (dropped) after the
    /// workers stopped.
    xdp: Vec<XdpAttachment>,
    admin: Option<AdminServer>,
    metrics: Option<MetricsServer>,
    /// The started DPDK ports (driver `dpdk`); the workers' drivers share
    /// them.
    #[cfg(feature = "dpdk")]
    dpdk_ports: Option<Arc<dataplane::driver::dpdk::DpdkPorts>>,
    /// The control plane's measurements (build times, event-to-live, …).
    control: ControlPlaneMetrics,
    /// What the admin endpoints report from (drop summaries read it too).
    stats: Option<Arc<StatsSource>>,
    drop_log: DropLog,
    /// The workers' clock (the neighbour table's times are on it).
    clock: MonotonicClock,
    /// One neighbour table for all workers: whichever worker receives an
    /// ARP reply teaches every other. Garbage-collected by the control
    /// thread.
    neighbours: Arc<NeighbourTable>,
    last_neighbour_gc: Instant,
}

impl Gateway {
    /// Prepare the ports, publish the first snapshot, start the workers and
    /// the admin socket. Must run in the network namespace of the
    /// interfaces. On error everything started so far is stopped.
    pub fn start(
        plan: Plan,
        config_path: &Path,
        admin_socket: &Path,
        metrics_addr: Option<SocketAddr>,
    ) -> Result<Self, GatewayError> {
        let driver = gateway_driver(&plan)?;
        let mut facts = Vec::with_capacity(plan.ports.len());
        let mut xdp = Vec::new();
        // DPDK ports start here, in the control thread (vdevs open their
        // sockets in its namespace); the facts come from the devices.
        #[cfg(feature = "dpdk")]
        let dpdk_ports = if driver == DriverKind::Dpdk {
            let ports = dpdk::start_ports(&plan)?;
            facts = dpdk::port_facts(&ports);
            Some(ports)
        } else {
            None
        };
        if facts.is_empty() {
            for port in &plan.ports {
                let (f, attachment) = prepare_port(port, driver, &plan)?;
                facts.push(f);
                xdp.extend(attachment);
            }
        }
        warn_kernel_conflicts(&plan);

        let started = Instant::now();
        let control = ControlPlaneMetrics::new();
        let mut builder = control_plane_builder(&plan.dataplane.cores);
        let snapshot = builder.build(&snapshot_spec(&plan, &facts))?;
        control.observe_build_ms(started.elapsed().as_secs_f64() * 1000.0);
        info!(
            generation = snapshot.generation,
            services = plan.services.len(),
            build_threads = builder.threads(),
            "forwarding tables published"
        );
        let publisher = Publisher::new(snapshot);
        let published_at_ms = Arc::new(AtomicU64::new(0));

        let stop = Arc::new(AtomicBool::new(false));
        let plan_neighbour_table = plan.dataplane.neighbour_table;
        let mut gateway = Gateway {
            plan,
            config_path: config_path.to_path_buf(),
            facts,
            builder: Some(builder),
            publisher,
            kube: None,
            started,
            published_at_ms,
            stop,
            workers: Vec::new(),
            xdp,
            admin: None,
            metrics: None,
            #[cfg(feature = "dpdk")]
            dpdk_ports,
            control: control.clone(),
            stats: None,
            drop_log: DropLog::new(DEFAULT_DROP_LOG_INTERVAL_MS),
            clock: MonotonicClock::new(),
            neighbours: Arc::new(NeighbourTable::new(neighbour_config(&plan_neighbour_table))),
            last_neighbour_gc: Instant::now(),
        };
        let cells = gateway.start_workers()?;
        let live = LiveAdmin::new(
            gateway.publisher.clone(),
            cells.iter().map(|c| Arc::clone(&c.inspect)).collect(),
            SimContext::from_plan(&gateway.plan),
        )
        .with_neighbours(Arc::clone(&gateway.neighbours));

        let source = Arc::new(StatsSource {
            started,
            config: config_path.display().to_string(),
            publisher: gateway.publisher.clone(),
            published_at_ms: Arc::clone(&gateway.published_at_ms),
            workers: cells,
            ports: gateway
                .plan
                .ports
                .iter()
                .map(|p| (p.name.clone(), p.interface.clone()))
                .collect(),
            control,
            neighbours: Arc::clone(&gateway.neighbours),
        });
        gateway.stats = Some(Arc::clone(&source));
        let admin = {
            let source = Arc::clone(&source);
            AdminServer::start(admin_socket, move |request| {
                crate::admin::handle(request, || source.report(), &live)
            })?
        };
        info!(socket = %admin.path().display(), "admin socket listening");
        gateway.admin = Some(admin);
        if let Some(addr) = metrics_addr {
            let metrics = MetricsServer::start(addr, move || source.report())?;
            info!(addr = %metrics.addr(), "metrics listening on /metrics");
            gateway.metrics = Some(metrics);
        }
        if gateway.plan.kubernetes.is_some()
            && let Some(builder) = gateway.builder.take()
            && let Some(mut parts) =
                KubeSourceParts::from_plan(&gateway.plan, builder, gateway.publisher.clone())
        {
            parts.metrics = Some(gateway.control.clone());
            let source = KubeSource::start(parts)?;
            info!("Kubernetes source started");
            gateway.kube = Some(source);
        }
        Ok(gateway)
    }

    /// The Kubernetes source's numbers (per-generation build time and
    /// event-to-live latency, leadership, writes), when it runs.
    pub fn kube_stats(&self) -> Option<Arc<KubeSourceStats>> {
        self.kube.as_ref().map(KubeSource::stats)
    }

    /// Start one thread per worker and wait until each has opened its
    /// sockets and built its pipeline. `self.workers` holds every thread
    /// started, so that dropping `self` on error stops them.
    fn start_workers(&mut self) -> Result<Vec<Arc<WorkerCells>>, GatewayError> {
        let workers = self.plan.dataplane.workers;
        let frame_capacity = self
            .facts
            .iter()
            .map(|f| usize::from(f.mtu) + 18)
            .max()
            .unwrap_or(1518)
            .max(64);
        let mut mesh: Vec<Option<WorkerHandoff>> = if workers > 1 {
            HandoffMesh::new(workers, HANDOFF_RING_FRAMES, frame_capacity)
                .into_iter()
                .map(Some)
                .collect()
        } else {
            vec![None]
        };
        let driver = self.worker_driver()?;
        let clock = self.clock.clone();
        let neighbours = Arc::clone(&self.neighbours);
        let (ready_tx, ready_rx) = mpsc::channel::<(usize, Result<(), String>)>();
        let mut cells = Vec::with_capacity(workers);
        for w in 0..workers {
            let core = self.plan.dataplane.cores.get(w).copied();
            let (inspect_client, inspect_server) = dataplane::inspect::mailbox(w as u8);
            let shared = Arc::new(WorkerCells {
                core,
                counters: Arc::new(SharedCounters::default()),
                ports: (0..self.plan.ports.len())
                    .map(|_| PortStatsCell::default())
                    .collect(),
                inspect: Arc::new(Mutex::new(inspect_client)),
            });
            cells.push(Arc::clone(&shared));
            let mut config = worker_config(&self.plan, w);
            // A fresh SNAT start-port sequence per process: after a restart
            // the same tuples do not come back in the same order and land on
            // the backends' TIME_WAIT sockets of the previous run.
            config.pipeline.seed ^= process_seed();
            let ctx = WorkerContext {
                worker: w,
                core,
                config,
                clock: clock.clone(),
                snapshots: self.publisher.reader(),
                cells: shared,
                handoff: mesh.get_mut(w).and_then(Option::take),
                neighbours: Arc::clone(&neighbours),
                stop: Arc::clone(&self.stop),
                inspect: inspect_server,
            };
            let ready = ready_tx.clone();
            let driver = driver.for_worker(w);
            let handle = std::thread::Builder::new()
                .name(format!("portico-w{w}"))
                .spawn(move || worker_main(ctx, driver, &ready))
                .map_err(|e| GatewayError::WorkerStart {
                    worker: w,
                    reason: e.to_string(),
                })?;
            self.workers.push(handle);
        }
        drop(ready_tx);
        let deadline = Instant::now() + Duration::from_millis(WORKER_START_TIMEOUT_MS);
        for _ in 0..workers {
            let left = deadline.saturating_duration_since(Instant::now());
            match ready_rx.recv_timeout(left) {
                Ok((_, Ok(()))) => {}
                Ok((worker, Err(reason))) => {
                    return Err(GatewayError::WorkerStart { worker, reason });
                }
                Err(_) => {
                    return Err(GatewayError::WorkerStart {
                        worker: workers,
                        reason: "workers did not report ready in time".into(),
                    });
                }
            }
        }
        info!(workers, cores = ?self.plan.dataplane.cores, idle = %self.plan.dataplane.idle,
            "workers running");
        Ok(cells)
    }

    /// The driver configuration the workers open (worker 0's; see
    /// [`WorkerDriver::for_worker`]).
    fn worker_driver(&self) -> Result<WorkerDriver, GatewayError> {
        let workers = self.plan.dataplane.workers;
        let ifnames: Vec<&str> = self
            .plan
            .ports
            .iter()
            .map(|p| p.interface.as_str())
            .collect();
        match gateway_driver(&self.plan)? {
            DriverKind::Afpacket => {
                // Fanout group ids are per network namespace: derive them
                // from the process id so two gateways in one namespace do
                // not join each other's groups.
                let fanout_base = std::process::id() as u16;
                let mut config = AfPacketConfig::new(&ifnames);
                if workers > 1 {
                    config.ports = ifnames
                        .iter()
                        .enumerate()
                        .map(|(i, name)| AfPacketPortConfig {
                            ifname: (*name).to_string(),
                            fanout_group_id: Some(fanout_base.wrapping_add(i as u16)),
                        })
                        .collect();
                    // Frames handed over by other workers do not wake
                    // `poll(2)`: sleep in short slices.
                    config.poll_timeout_ms = 1;
                }
                Ok(WorkerDriver::Afpacket(config))
            }
            DriverKind::Afxdp => Ok(WorkerDriver::Afxdp(afxdp_config(
                &self.plan.dataplane.afxdp,
                &self.xdp,
                workers,
            ))),
            #[cfg(feature = "dpdk")]
            DriverKind::Dpdk if self.dpdk_ports.is_some() => Ok(WorkerDriver::Dpdk {
                ports: self.dpdk_ports.clone().ok_or(GatewayError::WorkerStart {
                    worker: 0,
                    reason: "the DPDK ports are not started".into(),
                })?,
                worker: 0,
            }),
            driver => Err(GatewayError::UnsupportedDriver {
                port: self
                    .plan
                    .ports
                    .first()
                    .map(|p| p.name.clone())
                    .unwrap_or_default(),
                driver,
            }),
        }
    }

    /// The control plane's metrics handle, for sources to feed (build
    /// times, API-event-to-live latency, watch restarts, pools, leader).
    pub fn control_plane_metrics(&self) -> ControlPlaneMetrics {
        self.control.clone()
    }

    /// Log a summary of the drops at most every `interval_ms` (0: never);
    /// default [`DEFAULT_DROP_LOG_INTERVAL_MS`].
    pub fn set_drop_log_interval_ms(&mut self, interval_ms: u64) {
        self.drop_log = DropLog::new(interval_ms);
    }

    /// Generation of the snapshot in force.
    pub fn generation(&self) -> u64 {
        self.publisher.current().generation
    }

    /// Re-read the configuration file and apply it if it can be applied
    /// live; log what happened.
    pub fn reload(&mut self) -> ReloadOutcome {
        info!(config = %self.config_path.display(), "reloading configuration");
        let outcome = self.try_reload();
        match &outcome {
            ReloadOutcome::Applied { generation } => {
                info!(
                    generation,
                    "configuration reloaded; new forwarding tables published"
                );
            }
            ReloadOutcome::Unchanged => {
                info!(generation = self.generation(), "configuration unchanged");
            }
            ReloadOutcome::Invalid(e) => {
                if e.problems().is_empty() {
                    error!(error = %e, "reload rejected, the running configuration stays");
                } else {
                    for p in e.problems() {
                        error!(path = %p.path, problem = %p.reason,
                            "reload rejected: invalid configuration");
                    }
                    error!(
                        problems = e.problems().len(),
                        "reload rejected, the running configuration stays"
                    );
                }
            }
            ReloadOutcome::NeedsRestart(changes) => {
                for c in changes {
                    error!(change = %c, "reload rejected: this change needs a restart");
                }
                error!(
                    "reload rejected, the running configuration stays; restart portico to apply {}",
                    changes.join(", ")
                );
            }
            ReloadOutcome::Rejected(e) => {
                for p in &e.problems {
                    error!(problem = %p, "reload rejected: forwarding tables do not build");
                }
                error!("reload rejected, the running configuration stays");
            }
        }
        outcome
    }

    fn try_reload(&mut self) -> ReloadOutcome {
        // The SIGHUP is the event; the new snapshot being published is live.
        let event = Instant::now();
        let plan = match nic_config::load(&self.config_path) {
            Ok(plan) => plan,
            Err(e) => return ReloadOutcome::Invalid(e),
        };
        let changes = restart_required(&self.plan, &plan);
        if !changes.is_empty() {
            return ReloadOutcome::NeedsRestart(changes);
        }
        if plan == self.plan {
            return ReloadOutcome::Unchanged;
        }
        let Some(builder) = self.builder.as_mut() else {
            return ReloadOutcome::NeedsRestart(vec![
                "the configuration of a gateway with [kubernetes] (its tables are built from the \
                 cluster)"
                    .to_owned(),
            ]);
        };
        let build = Instant::now();
        let snapshot = match builder.build(&snapshot_spec(&plan, &self.facts)) {
            Ok(s) => s,
            Err(e) => return ReloadOutcome::Rejected(e),
        };
        self.control
            .observe_build_ms(build.elapsed().as_secs_f64() * 1000.0);
        let generation = snapshot.generation;
        self.publisher.publish(snapshot);
        self.control
            .observe_event_to_live_ms(event.elapsed().as_secs_f64() * 1000.0);
        self.published_at_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.plan = plan;
        warn_kernel_conflicts(&self.plan);
        ReloadOutcome::Applied { generation }
    }

    /// Serve until SIGTERM or SIGINT (reloading on SIGHUP), then stop.
    /// `signals` is registered before [`Gateway::start`] so that a signal
    /// during start-up is not lost (or fatal, for SIGHUP).
    pub fn serve(mut self, signals: &mut Signals) -> Result<(), GatewayError> {
        info!(
            pid = std::process::id(),
            "portico running; SIGHUP reloads, SIGTERM stops"
        );
        loop {
            for signal in signals.pending() {
                match signal {
                    SIGHUP => {
                        self.reload();
                    }
                    SIGTERM | SIGINT => {
                        info!(signal, "stopping (a second signal exits at once)");
                        if let Some(armed) = FORCE_EXIT.get() {
                            armed.store(true, Ordering::Relaxed);
                        }
                        self.shutdown();
                        return Ok(());
                    }
                    _ => {}
                }
            }
            if let Some(stats) = &self.stats {
                self.drop_log.tick(Instant::now(), || stats.totals());
            }
            self.collect_neighbour_garbage();
            if self.kube.as_ref().is_some_and(KubeSource::is_finished) {
                error!("the Kubernetes source stopped unexpectedly; stopping");
                self.shutdown();
                return Err(GatewayError::KubeSourceDied);
            }
            if let Some(worker) = self.workers.iter().position(JoinHandle::is_finished) {
                error!(worker, "a worker stopped unexpectedly; stopping");
                self.shutdown();
                return Err(GatewayError::WorkerDied { worker });
            }
            std::thread::sleep(Duration::from_millis(CONTROL_TICK_MS));
        }
    }

    /// Reclaim neighbour entries unused for `gc_stale_ms`, at most once
    /// every [`NEIGHBOUR_GC_INTERVAL_MS`].
    fn collect_neighbour_garbage(&mut self) {
        if self.last_neighbour_gc.elapsed() < Duration::from_millis(NEIGHBOUR_GC_INTERVAL_MS) {
            return;
        }
        self.last_neighbour_gc = Instant::now();
        let gc = self.neighbours.collect_garbage(self.clock.now_ms());
        // Under steady churn this can be every second: counters (stats,
        // /metrics) carry it, the log only at debug level.
        if gc.compacted {
            debug!(
                entries = gc.entries,
                reclaimed = gc.reclaimed,
                "neighbour table compacted"
            );
        }
    }

    /// Stop the Kubernetes source (no more writes, Lease released), the
    /// workers (each publishes its final counters), then the admin socket
    /// and the metrics endpoint.
    pub fn shutdown(&mut self) {
        if let Some(kube) = self.kube.take() {
            kube.stop();
        }
        self.stop.store(true, Ordering::Relaxed);
        for (w, handle) in self.workers.drain(..).enumerate() {
            if handle.join().is_err() {
                error!(worker = w, "worker panicked");
            }
        }
        // Detach the XDP programs (the workers' sockets are closed).
        self.xdp.clear();
        if let Some(admin) = self.admin.take() {
            admin.stop();
        }
        drop(self.metrics.take());
        info!("stopped");
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if !self.workers.is_empty()
            || !self.xdp.is_empty()
            || self.admin.is_some()
            || self.metrics.is_some()
            || self.kube.is_some()
        {
            self.shutdown();
        }
    }
}

/// Armed by the first SIGTERM/SIGINT: a second one ends the process at once
/// (exit status 1) even if a worker does not stop.
static FORCE_EXIT: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();

/// Install the handlers `portico run` serves: SIGHUP, SIGTERM, SIGINT (a
/// second SIGTERM/SIGINT while stopping exits immediately).
pub fn signals() -> Result<Signals, GatewayError> {
    let armed = FORCE_EXIT.get_or_init(|| Arc::new(AtomicBool::new(false)));
    for signal in [SIGTERM, SIGINT] {
        signal_hook::flag::register_conditional_shutdown(signal, 1, Arc::clone(armed))
            .map_err(GatewayError::Signals)?;
    }
    Signals::new([SIGHUP, SIGTERM, SIGINT]).map_err(GatewayError::Signals)
}

/// Everything a worker thread starts from.
struct WorkerContext {
    worker: usize,
    core: Option<usize>,
    config: WorkerConfig,
    clock: MonotonicClock,
    snapshots: SnapshotReader,
    cells: Arc<WorkerCells>,
    handoff: Option<WorkerHandoff>,
    neighbours: Arc<NeighbourTable>,
    stop: Arc<AtomicBool>,
    /// The worker's end of its inspect mailbox (`portico flows`, `simulate
    /// --live`).
    inspect: InspectServer,
}

/// The driver-specific parts of a worker: how it opens its driver, sleeps
/// when idle and publishes its port counters. The worker loop is generic
/// over it, so the packet path is monomorphised per driver.
trait GatewayDriver: Driver + Sized {
    /// What one worker opens its driver from.
    type Config;
    fn open(config: &Self::Config) -> Result<Self, String>;
    /// Sleep until frames may be waiting or the driver's idle timeout
    /// passes (the adaptive idle policy).
    fn wait_idle(&mut self);
    /// Copy the driver's counters of every port into `cells` (one per
    /// port); `kernel` accumulates counters the kernel resets on read.
    fn publish_stats(&mut self, kernel: &mut [KernelTotals], cells: &[PortStatsCell]);
}

impl GatewayDriver for AfPacketDriver {
    type Config = AfPacketConfig;

    fn open(config: &AfPacketConfig) -> Result<Self, String> {
        AfPacketDriver::open(config).map_err(|e| e.to_string())
    }

    fn wait_idle(&mut self) {
        AfPacketDriver::wait_idle(self);
    }

    fn publish_stats(&mut self, kernel: &mut [KernelTotals], cells: &[PortStatsCell]) {
        for ((port, totals), cell) in self.ports().iter().zip(kernel.iter_mut()).zip(cells) {
            if let Ok(read) = port.kernel_stats() {
                totals.add(read);
            }
            cell.store(PortCounters::new(port.stats(), *totals));
        }
    }
}

impl GatewayDriver for AfXdpDriver {
    type Config = AfXdpConfig;

    fn open(config: &AfXdpConfig) -> Result<Self, String> {
        let driver = AfXdpDriver::open(config).map_err(|e| e.to_string())?;
        for p in driver.ports() {
            info!(
                interface = p.ifname(),
                queue = p.queue_id(),
                zero_copy = p.zero_copy(),
                umem = p.umem_index(),
                "AF_XDP socket bound"
            );
        }
        Ok(driver)
    }

    fn wait_idle(&mut self) {
        AfXdpDriver::wait_idle(self);
    }

    fn publish_stats(&mut self, _kernel: &mut [KernelTotals], cells: &[PortStatsCell]) {
        for (port, cell) in self.ports().iter().zip(cells) {
            let s = port.stats();
            // XDP_STATISTICS are cumulative: no accumulation needed.
            let k = port.kernel_stats().unwrap_or_default();
            cell.store(PortCounters {
                rx_frames: s.rx_frames,
                rx_bytes: s.rx_bytes,
                tx_frames: s.tx_frames,
                tx_bytes: s.tx_bytes,
                rx_too_big: s.rx_too_big,
                rx_pool_empty: s.rx_pool_empty,
                rx_ring_errors: s.rx_ring_errors + k.rx_invalid_descs,
                tx_too_big: s.tx_too_big,
                tx_ring_full: s.tx_ring_full,
                tx_send_errors: s.tx_send_errors,
                socket_errors: s.socket_errors,
                kernel_rx_drops: k.rx_dropped + k.rx_ring_full,
                ..PortCounters::default()
            });
        }
    }
}

/// The driver a worker runs, with its configuration; matched once when the
/// worker thread starts.
#[derive(Clone, Debug)]
enum WorkerDriver {
    Afpacket(AfPacketConfig),
    Afxdp(AfXdpConfig),
    /// Queue `worker` of every started DPDK port.
    #[cfg(feature = "dpdk")]
    Dpdk {
        ports: Arc<dataplane::driver::dpdk::DpdkPorts>,
        worker: usize,
    },
}

impl WorkerDriver {
    /// The configuration worker `worker` opens: af_packet workers share
    /// one (fanout spreads the frames), AF_XDP worker `w` binds RX queue
    /// `w` of every port, DPDK worker `w` takes queue `w` of every port.
    fn for_worker(&self, worker: usize) -> WorkerDriver {
        match self {
            WorkerDriver::Afpacket(c) => WorkerDriver::Afpacket(c.clone()),
            WorkerDriver::Afxdp(c) => {
                let mut c = c.clone();
                for p in &mut c.ports {
                    p.queue_id = worker as u32;
                }
                WorkerDriver::Afxdp(c)
            }
            #[cfg(feature = "dpdk")]
            WorkerDriver::Dpdk { ports, .. } => WorkerDriver::Dpdk {
                ports: Arc::clone(ports),
                worker,
            },
        }
    }
}

/// The dataplane's neighbour table settings from `[dataplane.neighbour_table]`.
fn neighbour_config(n: &nic_config::NeighbourTablePlan) -> NeighbourConfig {
    NeighbourConfig {
        capacity: n.capacity,
        reachable_ms: n.reachable_ms,
        retrans_ms: n.retrans_ms,
        max_probes: n.max_probes,
        failed_hold_ms: n.failed_hold_ms,
        gc_stale_ms: n.gc_stale_ms,
        gc_min_entries: n.gc_min_entries,
    }
}

/// The control plane's snapshot builder. A build of many Maglev tables (the
/// start-up build, the first Kubernetes window, a resync) runs on every core
/// no worker is pinned to, one helper thread pinned to each; with unpinned
/// workers, on as many threads as the process may use (the scheduler
/// shares them). The tables do not depend on the thread count.
fn control_plane_builder(worker_cores: &[usize]) -> SnapshotBuilder {
    let builder = SnapshotBuilder::new();
    if worker_cores.is_empty() {
        let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        return builder.with_threads(threads);
    }
    let free: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .filter(|id| !worker_cores.contains(id))
        .collect();
    if free.is_empty() {
        return builder;
    }
    builder
        .with_threads(free.len())
        .with_thread_start(move |index| {
            if let Some(&id) = free.get(index % free.len())
                && !core_affinity::set_for_current(core_affinity::CoreId { id })
            {
                debug!(core = id, "pinning a table-building thread failed");
            }
        })
}

/// A worker thread: pin, open the driver, build the pipeline (all on the
/// worker's own core, so its memory is local), report ready, then poll until
/// stopped.
fn worker_main(
    ctx: WorkerContext,
    driver: WorkerDriver,
    ready: &mpsc::Sender<(usize, Result<(), String>)>,
) {
    let w = ctx.worker;
    if let Some(core) = ctx.core {
        if core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
            info!(worker = w, core, "worker pinned");
        } else {
            warn!(
                worker = w,
                core, "pinning the worker to its core failed; it runs unpinned"
            );
        }
    }
    match driver {
        WorkerDriver::Afpacket(config) => run_worker::<AfPacketDriver>(ctx, &config, ready),
        WorkerDriver::Afxdp(config) => run_worker::<AfXdpDriver>(ctx, &config, ready),
        #[cfg(feature = "dpdk")]
        WorkerDriver::Dpdk { ports, worker } => {
            run_worker::<dataplane::driver::dpdk::DpdkDriver>(ctx, &(ports, worker), ready);
        }
    }
}

/// Open `D`, build the worker, report ready, poll until stopped.
fn run_worker<D: GatewayDriver>(
    ctx: WorkerContext,
    config: &D::Config,
    ready: &mpsc::Sender<(usize, Result<(), String>)>,
) {
    let w = ctx.worker;
    let driver = match D::open(config) {
        Ok(d) => d,
        Err(e) => {
            let _ = ready.send((w, Err(e)));
            return;
        }
    };
    let mut worker = match Worker::new(
        &ctx.config,
        driver,
        ctx.clock,
        ctx.snapshots,
        Arc::clone(&ctx.cells.counters),
        ctx.handoff,
        Arc::clone(&ctx.neighbours),
    ) {
        Ok(worker) => worker,
        Err(e) => {
            let _ = ready.send((w, Err(e.to_string())));
            return;
        }
    };
    worker.attach_inspect(ctx.inspect);
    let _ = ready.send((w, Ok(())));
    poll_loop(&mut worker, ctx.config.idle, &ctx.cells, &ctx.stop);
}

/// [`Worker::run`] with the driver's idle sleep as the adaptive policy's
/// back-off and a periodic copy of the driver's port stats.
fn poll_loop<D: GatewayDriver>(
    worker: &mut Worker<D, MonotonicClock>,
    idle: IdlePolicy,
    cells: &WorkerCells,
    stop: &AtomicBool,
) {
    let mut kernel = vec![KernelTotals::default(); cells.ports.len()];
    let mut idle_polls: u32 = 0;
    let mut polls_since_check: u32 = 0;
    let mut last_stats = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let work = worker.poll();
        polls_since_check += 1;
        if work == 0 || polls_since_check >= POLLS_PER_STATS_CHECK {
            polls_since_check = 0;
            if last_stats.elapsed() >= Duration::from_millis(DRIVER_STATS_INTERVAL_MS) {
                worker.driver_mut().publish_stats(&mut kernel, &cells.ports);
                last_stats = Instant::now();
            }
        }
        if work > 0 {
            idle_polls = 0;
            continue;
        }
        idle_polls = idle_polls.saturating_add(1);
        match idle {
            IdlePolicy::Spin => std::hint::spin_loop(),
            IdlePolicy::Adaptive if idle_polls < ADAPTIVE_SPIN_POLLS => std::hint::spin_loop(),
            IdlePolicy::Adaptive => worker.driver_mut().wait_idle(),
        }
    }
    worker.publish_counters();
    worker.driver_mut().publish_stats(&mut kernel, &cells.ports);
}

/// A random value per process (std's hash keys come from the OS's random
/// source), for the SNAT allocators' start ports.
fn process_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(u64::from(std::process::id()));
        h.finish()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> Plan {
        nic_config::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    const BASE: &str = r#"
        [dataplane]
        workers = 1
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
        snat_addresses = ["10.1.0.1/24"]
        [[service]]
        name = "web"
        protocol = "tcp"
        vip = "192.0.2.10"
        port = 80
        backends = [{ address = "10.1.0.10", port = 8080 }]
    "#;

    #[test]
    fn service_and_address_changes_apply_live() {
        let old = plan(BASE);
        let new = plan(
            &BASE
                .replace("port = 80\n", "port = 8080\n")
                .replace("192.0.2.1/24", "192.0.2.2/24")
                .replace(
                    r#"{ address = "10.1.0.10", port = 8080 }"#,
                    r#"{ address = "10.1.0.10", port = 8080 }, { address = "10.1.0.11", port = 8080 }"#,
                ),
        );
        assert_ne!(old, new);
        assert_eq!(restart_required(&old, &new), Vec::<String>::new());
    }

    #[test]
    fn worker_and_port_changes_need_a_restart() {
        let old = plan(BASE);
        let cases = [
            ("workers = 1", "workers = 2", "dataplane.workers (1 -> 2)"),
            (
                "interface = \"i0\"",
                "interface = \"i1\"",
                "port[1].interface (i0 -> i1)",
            ),
            (
                "10.1.0.1/24",
                "10.1.0.2/24",
                "SNAT addresses ([10.1.0.1] -> [10.1.0.2])",
            ),
            (
                "workers = 1",
                "workers = 1\n[dataplane.conntrack]\ncapacity = 4096",
                "dataplane.conntrack.capacity",
            ),
            (
                "workers = 1",
                "workers = 1\n[dataplane.snat]\nport_range = \"2000-3000\"",
                "dataplane.snat.port_range",
            ),
        ];
        for (from, to, expected) in cases {
            let new = plan(&BASE.replace(from, to));
            let changes = restart_required(&old, &new);
            assert_eq!(changes.len(), 1, "{to}: {changes:?}");
            assert!(changes[0].starts_with(expected), "{to}: {changes:?}");
        }
        let one_port = plan(
            r#"
            [[port]]
            name = "lan"
            driver = "afpacket"
            interface = "o0"
            role = "both"
            node_addresses = ["192.0.2.1/24"]
            snat_addresses = ["192.0.2.2/24"]
        "#,
        );
        let changes = restart_required(&old, &one_port);
        assert!(
            changes
                .iter()
                .any(|c| c.starts_with("number of ports (2 -> 1)")),
            "{changes:?}"
        );
    }

    #[test]
    fn owned_addresses_cover_node_snat_vip_and_external_ips() {
        let p = plan(&BASE.replace(
            "vip = \"192.0.2.10\"",
            "vip = \"192.0.2.10\"\nexternal_ips = [\"192.0.2.11\"]",
        ));
        let owned = owned_addresses(&p);
        for a in ["192.0.2.1", "10.1.0.1", "192.0.2.10", "192.0.2.11"] {
            assert!(owned.contains(&a.parse().expect("addr")), "{a}: {owned:?}");
        }
        assert!(
            !owned.contains(&"10.1.0.10".parse().expect("addr")),
            "backends are not owned"
        );
    }
}
