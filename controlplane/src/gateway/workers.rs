//! The worker threads: each pins itself, opens its driver, builds its
//! pipeline and runs the dataplane's poll loop ([`Worker::run`]: idle
//! policy, driver wait, counters and the driver's port counters published
//! for [`super::stats`]) until the gateway stops.
//!
//! Invariant: no worker polls before the gateway has released them
//! ([`StartGate`]): `portico run` drops its privileges first, so no frame is
//! ever forwarded by a process that could still do more than the running
//! gateway needs.
//!
//! The only per-driver code here is opening the driver ([`OpenDriver`]);
//! waiting and port counters are the dataplane [`Driver`]'s.

use super::GatewayError;
use super::driver_plan::WorkerDriver;
use super::lifecycle::Gateway;
use super::stats::WorkerCells;
use crate::source::static_file::worker_config;
use dataplane::clock::MonotonicClock;
use dataplane::counters::SharedCounters;
use dataplane::driver::Driver;
use dataplane::driver::PortStatsCell;
use dataplane::driver::afpacket::{AfPacketConfig, AfPacketDriver, AfPacketError};
use dataplane::driver::afxdp::{AfXdpConfig, AfXdpDriver, AfXdpError, BusyPollState};
use dataplane::driver::hostpath::HostPath;
use dataplane::handoff::{HandoffMesh, WorkerHandoff};
use dataplane::inspect::InspectServer;
use dataplane::neighbour::NeighbourTable;
use dataplane::snapshot::SnapshotReader;
use dataplane::stage::PipelineError;
use dataplane::worker::{Worker, WorkerConfig};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// Frames each handoff ring between two workers holds.
const HANDOFF_RING_FRAMES: usize = 1024;
/// How long a worker may take to open its sockets and allocate its tables.
const WORKER_START_TIMEOUT_MS: u64 = 60_000;

impl Gateway {
    /// Start one thread per worker and wait until each has opened its
    /// sockets and built its pipeline. `self.workers` holds every thread
    /// started, so that dropping `self` on error stops them.
    pub(super) fn start_workers(&mut self) -> Result<Vec<Arc<WorkerCells>>, GatewayError> {
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
                .map_err(|e| GatewayError::WorkerStart {
                    worker: 0,
                    reason: format!("creating the workers' handoff doorbells: {e}"),
                })?
                .into_iter()
                .map(Some)
                .collect()
        } else {
            vec![None]
        };
        let driver = self.worker_driver()?;
        let clock = self.clock.clone();
        let neighbours = Arc::clone(&self.neighbours);
        let (ready_tx, ready_rx) = mpsc::channel::<(usize, Result<(), WorkerStartError>)>();
        let mut cells = Vec::with_capacity(workers);
        // One secret per process for every worker's tables: the conntrack,
        // affinity and quarantine placement nobody outside can predict.
        let table_hasher = dataplane::flow::TableHasher::random().map_err(GatewayError::Random)?;
        let mut host_paths = super::host_path::open(&self.plan, &self.facts, workers)?;
        let open_turns = Arc::new(OpenTurns::default());
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
            config.pipeline.table_hasher = table_hasher;
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
                host: host_paths.get_mut(w).and_then(Option::take),
                open_turns: Arc::clone(&open_turns),
                start_gate: Arc::clone(&self.start_gate),
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
                Ok((worker, Err(e))) => {
                    return Err(GatewayError::WorkerStart {
                        worker,
                        reason: e.to_string(),
                    });
                }
                Err(_) => {
                    return Err(GatewayError::WorkerStart {
                        worker: workers,
                        reason: "workers did not report ready in time".into(),
                    });
                }
            }
        }
        info!(workers, cores = ?self.plan.dataplane.cores, idle = %self.plan.dataplane.idle, idle_spin_polls = self.plan.dataplane.idle_spin_polls,
            "workers running");
        Ok(cells)
    }
}

/// Everything a worker thread starts from.
pub(super) struct WorkerContext {
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
    /// The worker's queues of the ports' host interfaces, if any port has
    /// host addresses.
    host: Option<HostPath>,
    /// Whose turn it is to open its driver.
    open_turns: Arc<OpenTurns>,
    /// Where the worker waits, ready, until the gateway lets it poll.
    start_gate: Arc<StartGate>,
}

/// Where ready workers wait until [`Gateway::release_workers`]: their
/// drivers are open and their pipelines built, but they poll nothing yet.
#[derive(Debug, Default)]
pub(super) struct StartGate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl StartGate {
    /// How often a waiting worker checks the stop flag.
    const STOP_CHECK_MS: u64 = 50;

    /// Let every waiting (and later) worker through.
    pub(super) fn open(&self) {
        if let Ok(mut open) = self.open.lock() {
            *open = true;
        }
        self.opened.notify_all();
    }

    /// Whether [`Self::open`] has been called.
    pub(super) fn is_open(&self) -> bool {
        self.open.lock().is_ok_and(|open| *open)
    }

    /// Wait until the gate opens or `stop` is set; whether it opened.
    fn wait(&self, stop: &AtomicBool) -> bool {
        let Ok(mut open) = self.open.lock() else {
            return false;
        };
        while !*open {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return false;
            }
            match self
                .opened
                .wait_timeout(open, Duration::from_millis(Self::STOP_CHECK_MS))
            {
                Ok((guard, _)) => open = guard,
                Err(_) => return false,
            }
        }
        true
    }
}

/// The workers open their drivers one after the other, in worker order
/// (the rest of their start runs in parallel): af_packet sockets join a
/// port's fanout group in that order, and the steering program names the
/// group's members by it (member `w` must be worker `w`).
#[derive(Default)]
pub(super) struct OpenTurns {
    next: Mutex<usize>,
    turn: Condvar,
}

impl OpenTurns {
    /// Wait until the workers before `worker` have opened their drivers
    /// (or failed to), at most [`WORKER_START_TIMEOUT_MS`].
    fn wait(&self, worker: usize) {
        let Ok(next) = self.next.lock() else { return };
        let _ = self.turn.wait_timeout_while(
            next,
            Duration::from_millis(WORKER_START_TIMEOUT_MS),
            |next| *next < worker,
        );
    }

    /// This worker's driver is open (or failed): the next one's turn.
    fn done(&self) {
        if let Ok(mut next) = self.next.lock() {
            *next += 1;
        }
        self.turn.notify_all();
    }
}

/// Why a worker thread could not start.
#[derive(Debug, thiserror::Error)]
pub(super) enum WorkerStartError {
    #[error(transparent)]
    AfPacket(#[from] AfPacketError),
    #[error(transparent)]
    AfXdp(#[from] AfXdpError),
    #[cfg(feature = "dpdk")]
    #[error(transparent)]
    Dpdk(#[from] dataplane::driver::dpdk::DpdkError),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
}

/// How a worker opens its driver, the one per-driver part of a worker
/// thread. The worker is generic over it, so the packet path is
/// monomorphised per driver.
pub(super) trait OpenDriver: Driver + Sized {
    /// What one worker opens its driver from.
    type Config;
    fn open(config: &Self::Config) -> Result<Self, WorkerStartError>;
}

impl OpenDriver for AfPacketDriver {
    type Config = AfPacketConfig;

    fn open(config: &AfPacketConfig) -> Result<Self, WorkerStartError> {
        Ok(AfPacketDriver::open(config)?)
    }
}

impl OpenDriver for AfXdpDriver {
    type Config = AfXdpConfig;

    fn open(config: &AfXdpConfig) -> Result<Self, WorkerStartError> {
        let driver = AfXdpDriver::open(config)?;
        for (port, queue) in driver.queue_sockets() {
            info!(
                port,
                queue, "AF_XDP socket on another worker's queue (steering)"
            );
        }
        for e in driver.queue_socket_errors() {
            warn!(error = %e, "the kernel refused a socket on another worker's queue; \
                frames of this worker's flows arriving there are handed off");
        }
        for p in driver.ports() {
            info!(
                interface = p.ifname(),
                queue = p.queue_id(),
                zero_copy = p.zero_copy(),
                need_wakeup = p.need_wakeup(),
                multi_buffer = p.multi_buffer(),
                busy_poll = ?p.busy_poll(),
                umem = p.umem_index(),
                "AF_XDP socket bound"
            );
            if let BusyPollState::Refused { option, errno } = p.busy_poll() {
                warn!(
                    interface = p.ifname(),
                    queue = p.queue_id(),
                    option,
                    error = %std::io::Error::from_raw_os_error(errno),
                    "the kernel refused busy polling; the socket runs without it \
                     (waits for the softirq)"
                );
            }
        }
        Ok(driver)
    }
}

/// A worker thread: pin, open the driver, build the pipeline (all on the
/// worker's own core, so its memory is local), report ready, then poll until
/// stopped.
pub(super) fn worker_main(
    ctx: WorkerContext,
    driver: WorkerDriver,
    ready: &mpsc::Sender<(usize, Result<(), WorkerStartError>)>,
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
pub(super) fn run_worker<D: OpenDriver>(
    ctx: WorkerContext,
    config: &D::Config,
    ready: &mpsc::Sender<(usize, Result<(), WorkerStartError>)>,
) {
    let w = ctx.worker;
    ctx.open_turns.wait(w);
    let opened = D::open(config);
    ctx.open_turns.done();
    let driver = match opened {
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
            let _ = ready.send((w, Err(e.into())));
            return;
        }
    };
    worker.attach_inspect(ctx.inspect);
    if let Some(host) = ctx.host {
        worker.attach_host_path(host);
    }
    let _ = ready.send((w, Ok(())));
    if ctx.start_gate.wait(&ctx.stop) {
        worker.run(&ctx.stop, &ctx.cells.ports);
    }
}

/// A random value per process (std's hash keys come from the OS's random
/// source), for the SNAT allocators' start ports.
pub(super) fn process_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(u64::from(std::process::id()));
        h.finish()
    })
}
