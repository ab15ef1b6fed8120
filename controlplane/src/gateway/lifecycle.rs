//! The gateway's lifecycle: start (ports, first snapshot, workers, admin
//! socket, metrics, Kubernetes source), serve (signals, drop log,
//! neighbour garbage collection, watching the workers), the reload entry
//! point and shutdown.

use super::GatewayError;
use super::bgp::Speaker;
#[cfg(feature = "dpdk")]
use super::dpdk;
use super::driver_plan::{gateway_driver, neighbour_config, prepare_port, warn_kernel_conflicts};
use super::reload::{ReloadDecision, ReloadOutcome, decide};
use super::stats::StatsSource;
use super::workers::StartGate;
use crate::admin::live::TEST_HOOKS_ENV;
use crate::admin::{
    AdminAccess, AdminLimits, AdminServer, BgpReport, ControlPlaneMetrics,
    DEFAULT_DROP_LOG_INTERVAL_MS, DropLog, LiveAdmin, MetricsServer,
};
use crate::simulate::SimContext;
use crate::source::kube::{KubeSource, KubeSourceParts, KubeSourceStats};
use crate::source::static_file::{PortFacts, snapshot_spec};
use dataplane::clock::{Clock, MonotonicClock};
use dataplane::driver::afxdp::XdpAttachment;
use dataplane::neighbour::NeighbourTable;
use dataplane::snapshot::{AnnounceFilter, Publisher, SnapshotBuilder};
#[cfg(feature = "dpdk")]
use nic_config::DriverKind;
use nic_config::Plan;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tracing::{debug, error, info};

/// How long the control thread sleeps between looks at signals and workers.
const CONTROL_TICK_MS: u64 = 50;
/// How often the control thread collects the neighbour table's garbage.
pub const NEIGHBOUR_GC_INTERVAL_MS: u64 = 1_000;

/// A running gateway.
#[derive(Debug)]
pub struct Gateway {
    pub(super) plan: Plan,
    pub(super) config_path: PathBuf,
    pub(super) facts: Vec<PortFacts>,
    /// `None` while the Kubernetes source owns it.
    pub(super) builder: Option<SnapshotBuilder>,
    pub(super) publisher: Publisher,
    pub(super) kube: Option<KubeSource>,
    pub(super) started: Instant,
    pub(super) published_at_ms: Arc<AtomicU64>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) workers: Vec<JoinHandle<()>>,
    /// The XDP programs of afxdp ports; detached (dropped) after the
    /// workers stopped.
    pub(super) xdp: Vec<XdpAttachment>,
    pub(super) admin: Option<AdminServer>,
    pub(super) metrics: Option<MetricsServer>,
    /// The started DPDK ports (driver `dpdk`); the workers' drivers share
    /// them.
    #[cfg(feature = "dpdk")]
    pub(super) dpdk_ports: Option<Arc<dataplane::driver::dpdk::DpdkPorts>>,
    /// The control plane's measurements (build times, event-to-live, …).
    pub(super) control: ControlPlaneMetrics,
    /// What the admin endpoints report from (drop summaries read it too).
    pub(super) stats: Option<Arc<StatsSource>>,
    pub(super) drop_log: DropLog,
    /// The workers' clock (the neighbour table's times are on it).
    pub(super) clock: MonotonicClock,
    /// One neighbour table for all workers: whichever worker receives an
    /// ARP reply teaches every other. Garbage-collected by the control
    /// thread.
    pub(super) neighbours: Arc<NeighbourTable>,
    pub(super) last_neighbour_gc: Instant,
    /// The BGP speaker (`None` without `[[bgp.peer]]`).
    pub(super) bgp: Option<Speaker>,
    /// What the speaker reports (`portico bgp`, `/metrics`); default while
    /// there is no speaker.
    pub(super) bgp_report: Arc<Mutex<BgpReport>>,
    /// Where the ready workers wait until [`Gateway::release_workers`].
    pub(super) start_gate: Arc<StartGate>,
}

impl Gateway {
    /// Prepare the ports, publish the first snapshot, start the workers and
    /// the admin socket. Must run in the network namespace of the
    /// interfaces. On error everything started so far is stopped.
    pub fn start(
        plan: Plan,
        config_path: &Path,
        admin_socket: &Path,
        admin_access: AdminAccess,
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
        if plan.kubernetes.is_some() || !plan.vips_by_arp {
            // With Kubernetes the tier's election decides which VIPs this
            // instance announces; until its first view, none (never grab a
            // VIP another instance holds). A tier without Kubernetes
            // announces its VIPs by BGP only: none by ARP, ever. Otherwise
            // this is the one instance: it announces every VIP.
            let _ = builder.set_announce(AnnounceFilter::none());
        }
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
            bgp: None,
            bgp_report: Arc::new(Mutex::new(BgpReport::default())),
            start_gate: Arc::new(StartGate::default()),
        };
        let cells = gateway.start_workers()?;
        let live = LiveAdmin::new(
            gateway.publisher.clone(),
            cells.iter().map(|c| Arc::clone(&c.inspect)).collect(),
            SimContext::from_plan(&gateway.plan),
        )
        .with_neighbours(Arc::clone(&gateway.neighbours))
        .with_test_hooks(std::env::var(TEST_HOOKS_ENV).is_ok_and(|v| v == "1"));

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
            bgp: Arc::clone(&gateway.bgp_report),
        });
        gateway.stats = Some(Arc::clone(&source));
        let admin = {
            let source = Arc::clone(&source);
            AdminServer::start_with(
                admin_socket,
                AdminLimits::default(),
                admin_access,
                move |request| crate::admin::handle(request, || source.report(), &live),
            )?
        };
        info!(socket = %admin.path().display(), "admin socket listening");
        gateway.admin = Some(admin);
        if let Some(addr) = metrics_addr {
            let metrics = MetricsServer::start(addr, move || source.report())?;
            info!(addr = %metrics.addr(), "metrics listening on /metrics");
            gateway.metrics = Some(metrics);
        }
        gateway.bgp = Speaker::start(&gateway.plan, Arc::clone(&gateway.bgp_report))?;
        if gateway.bgp.is_some() {
            info!(peers = gateway.plan.bgp.peers.len(), "BGP sessions started");
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
        // The same instance as at start (its own addresses).
        let choice = match &self.plan.instance {
            Some(name) => nic_config::InstanceChoice::Named(name),
            None => nic_config::InstanceChoice::Unnamed,
        };
        let plan = match nic_config::load_instance(&self.config_path, choice) {
            Ok(plan) => plan,
            Err(e) => return ReloadOutcome::Invalid(e),
        };
        match decide(&self.plan, &plan) {
            ReloadDecision::NeedsRestart(changes) => return ReloadOutcome::NeedsRestart(changes),
            ReloadDecision::Unchanged => return ReloadOutcome::Unchanged,
            ReloadDecision::Live => {}
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
        if let Err(e) = self.reload_bgp() {
            error!(error = %e, "BGP: the reloaded sessions could not start");
        }
        ReloadOutcome::Applied { generation }
    }

    /// Serve until SIGTERM or SIGINT (reloading on SIGHUP), then stop.
    /// `signals` is registered before [`Gateway::start`] so that a signal
    /// during start-up is not lost (or fatal, for SIGHUP).
    pub fn serve(mut self, signals: &mut Signals) -> Result<(), GatewayError> {
        self.release_workers();
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
                        self.shutdown_gracefully();
                        return Ok(());
                    }
                    _ => {}
                }
            }
            if let Some(stats) = &self.stats {
                self.drop_log.tick(Instant::now(), || stats.totals());
            }
            self.collect_neighbour_garbage();
            self.tick_bgp();
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

    /// The BGP speaker's tick: the watchdog, the desired routes of the
    /// snapshot in force.
    fn tick_bgp(&mut self) {
        let (Some(speaker), Some(stats)) = (self.bgp.as_mut(), self.stats.as_ref()) else {
            return;
        };
        let heartbeats: Vec<u64> = stats
            .workers
            .iter()
            .map(|w| w.counters.heartbeat_ms())
            .collect();
        speaker.tick(
            &self.plan,
            &self.publisher.current(),
            &heartbeats,
            Instant::now(),
        );
    }

    /// Apply a reloaded `[bgp]`: start the speaker when the first peer
    /// appears, stop it when the last goes, else restart the changed
    /// sessions.
    fn reload_bgp(&mut self) -> Result<(), GatewayError> {
        match (self.bgp.as_mut(), self.plan.bgp.peers.is_empty()) {
            (Some(speaker), false) => speaker.reload(&self.plan),
            (Some(_), true) => {
                if let Some(speaker) = self.bgp.take() {
                    speaker.stop();
                }
                if let Ok(mut r) = self.bgp_report.lock() {
                    *r = BgpReport::default();
                }
            }
            (None, false) => {
                self.bgp = Speaker::start(&self.plan, Arc::clone(&self.bgp_report))?;
            }
            (None, true) => {}
        }
        Ok(())
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

    /// A graceful stop (SIGTERM): with BGP, withdraw every route first and
    /// keep forwarding for `[bgp] shutdown_drain_s` after the routers have
    /// the withdrawal (see [`super::bgp`]); then [`Gateway::shutdown`].
    pub fn shutdown_gracefully(&mut self) {
        if let Some(speaker) = self.bgp.as_mut() {
            speaker.withdraw_for_stop();
            // The Lease goes now: another instance can lead while this one
            // drains.
            if let Some(kube) = self.kube.take() {
                kube.stop();
            }
            let drain = Duration::from_secs(u64::from(self.plan.bgp.shutdown_drain_s));
            info!(
                drain_s = drain.as_secs(),
                "draining: forwarding established flows before stopping"
            );
            std::thread::sleep(drain);
        }
        self.shutdown();
    }

    /// Let the workers poll: until now they have waited, drivers open and
    /// pipelines built (the workers' start gate). `portico run` calls it right after
    /// [`Gateway::drop_privileges`], so nothing is forwarded with the
    /// start-up privileges; [`Gateway::serve`] calls it too. Idempotent.
    pub fn release_workers(&self) {
        if !self.start_gate.is_open() {
            self.start_gate.open();
            info!("workers released: forwarding");
        }
    }

    /// Stop the BGP sessions (Cease; at once: [`Gateway::shutdown_gracefully`]
    /// withdraws and drains first), the Kubernetes source (no more writes,
    /// Lease released), the workers (each publishes its final counters),
    /// then the admin socket and the metrics endpoint.
    pub fn shutdown(&mut self) {
        if let Some(speaker) = self.bgp.take() {
            speaker.stop();
        }
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
            || self.bgp.is_some()
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

/// The control plane's snapshot builder. A build of many Maglev tables (the
/// start-up build, the first Kubernetes window, a resync) runs on every core
/// no worker is pinned to, one helper thread pinned to each; with unpinned
/// workers, on as many threads as the process may use (the scheduler
/// shares them). The tables do not depend on the thread count.
pub(super) fn control_plane_builder(worker_cores: &[usize]) -> SnapshotBuilder {
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
