//! One worker core: the run-to-completion poll loop.
//!
//! Each poll loads the current snapshot once (every batch of the poll, the
//! held frames and the ARP frames see one generation), then: for every
//! port, receive a burst, run the pipeline over the batch, send every frame
//! to its verdict's port (or hand it to its owning worker, or hold it for
//! its neighbour, or release it and count the drop reason); then drain
//! frames other workers handed over; then let the neighbour stage send the
//! held frames whose neighbour answered and the ARP requests the batches
//! asked for (see [`crate::stage::neighbour`]); then bounded housekeeping
//! (conntrack and affinity expiry: [`Pipeline::housekeeping`]) after every
//! poll that found no packets and, while packets keep coming, after the
//! first poll of each millisecond (see [`Worker::poll`]); then, when an [`InspectServer`] is
//! attached, one look at its mailbox (a flow listing advances by a bounded
//! chunk per poll). Counters are core-local and published to
//! [`SharedCounters`] at most once per millisecond (per-service and
//! per-SNAT-address tables every 100 ms).
//!
//! The worker only moves frames: between its driver, its pipeline, the
//! handoff rings and its tx queues. When a new snapshot generation appears
//! it re-keys the per-service counters and gives the snapshot to the
//! pipeline's neighbour stage (static neighbours; on worker 0, gratuitous
//! ARP for owned addresses not announced yet); worker 0 of several also
//! gives its driver the snapshot's [`SteeringRule`] when it changed
//! ([`Driver::install_steering`]: af_packet's fanout program).
//!
//! With a host path attached ([`Worker::attach_host_path`]), frames with
//! verdict [`Verdict::Host`] are written to the receiving port's TAP queue
//! (a full or down queue drops and counts, never waits), and each poll,
//! after the ports, sends up to [`HOST_BATCH`] frames the kernel wrote to
//! each port's queue out of that port (see [`crate::driver::hostpath`]).
//!
//! [`Worker::run`] is the one production loop around [`Worker::poll`]
//! (`portico run` runs it on every worker thread): the idle policy with the
//! driver's wait, and the driver's port counters published every
//! [`DRIVER_STATS_INTERVAL_MS`]. Tests and benches call `poll` directly.

use crate::clock::Clock;
use crate::counters::{Counters, DropReason, SharedCounters};
use crate::driver::hostpath::{HOST_BATCH, HostPath};
use crate::driver::{Driver, Frame, PortCounters, PortStatsCell};
use crate::handoff::{Doorbell, HandoffRx, HandoffTx, WorkerHandoff};
use crate::inspect::InspectServer;
use crate::neighbour::NeighbourTable;
use crate::packet::{Offload, PortId, Verdict};
use crate::snapshot::{Backend, ID_CHUNK, IdTable, Service, ServiceId, Snapshot, SnapshotReader};
use crate::stage::{Egress, HeldFrames, MAX_BATCH, Pipeline, PipelineConfig, PipelineError};
use crate::steering::SteeringRule;
use crate::wire;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What a worker does when a poll found no packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdlePolicy {
    /// Busy-poll: lowest latency, one full core per worker.
    Spin,
    /// Spin for `spin_polls` idle polls, then block in the driver
    /// ([`Driver::wait_idle`]: `poll(2)` on the rings' sockets, the host
    /// path's queues and the handoff doorbell) after each idle poll, waking
    /// on the first frame; the driver's timeout only bounds how late a stop,
    /// a new snapshot or the heartbeat is seen (shared machines, CI).
    /// `spin_polls = 0` blocks after the first idle poll.
    Adaptive { spin_polls: u32 },
}

impl IdlePolicy {
    /// [`IdlePolicy::Adaptive`] with the default budget,
    /// [`ADAPTIVE_SPIN_POLLS`].
    pub const ADAPTIVE: IdlePolicy = IdlePolicy::Adaptive {
        spin_polls: ADAPTIVE_SPIN_POLLS,
    };
}

impl Default for IdlePolicy {
    /// [`IdlePolicy::ADAPTIVE`].
    fn default() -> Self {
        Self::ADAPTIVE
    }
}

/// Idle polls an adaptive worker spins before it waits in its driver, by
/// default (`[dataplane] idle_spin_polls`). Chosen by measurement
/// (bench/RESULTS.md, "The idle spin budget"): with 1,024 the spin took the
/// CPU the endpoints on the same cores needed (a single GSO flow 0.71× the
/// kernel NAT, 1.04× with 64), and keep-alive HTTP and its p50 latency did
/// not change between 0 and 16,384.
pub const ADAPTIVE_SPIN_POLLS: u32 = 64;
/// How often [`Worker::run`] copies its driver's port counters out.
pub const DRIVER_STATS_INTERVAL_MS: u64 = 100;
/// Busy polls between two looks at the port-counter timer (a clock read).
pub const POLLS_PER_STATS_CHECK: u32 = 64;

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub pipeline: PipelineConfig,
    /// Frames per rx burst, at most [`MAX_BATCH`].
    pub batch_size: usize,
    pub idle: IdlePolicy,
}

/// A worker: its driver queues, its pipeline, its counters.
#[derive(Debug)]
pub struct Worker<D: Driver, C: Clock> {
    driver: D,
    clock: C,
    snapshots: SnapshotReader,
    pipeline: Pipeline,
    /// Rings to every other worker, indexed by worker id.
    handoff_tx: Vec<Option<HandoffTx>>,
    /// Rings from every other worker.
    handoff_rx: Vec<HandoffRx>,
    /// Rung by the other workers when they hand this one frames while it
    /// sleeps.
    doorbell: Option<Arc<Doorbell>>,
    /// Workers (bit per id) handed frames this poll: their doorbells are
    /// rung once, after the poll's batches.
    handed_to: u64,
    shared: Arc<SharedCounters>,
    batch_size: usize,
    idle: IdlePolicy,
    /// Handoff ring drained first next time (rotates for fairness).
    handoff_first: usize,
    rx: Vec<D::Frame>,
    tx: Vec<Vec<D::Frame>>,
    last_publish_ms: u64,
    /// Frames translated and waiting for their next hop's MAC (handled by
    /// the pipeline's neighbour stage).
    held: HeldFrames<D::Frame>,
    /// Snapshot generation the worker last applied.
    seen_generation: u64,
    /// The millisecond of the last housekeeping (`u64::MAX`: none yet).
    housekept_ms: u64,
    /// Who each service / backend id belonged to when last seen.
    service_identity: Vec<Option<Arc<str>>>,
    backend_identity: Vec<Option<(ServiceId, SocketAddr)>>,
    /// The admin thread's mailbox, if attached.
    inspect: Option<InspectServer>,
    /// This worker's queues of the ports' host interfaces, if attached.
    host: Option<HostPath>,
    /// The service and backend tables the identities were last taken from:
    /// chunks still shared with the next snapshot are skipped (unchanged).
    bound_services: IdTable<Service>,
    bound_backends: IdTable<Backend>,
    /// The steering rule last given to the driver (worker 0 only).
    steering_rule: Option<SteeringRule>,
    /// Where a super-packet bound for a handoff ring or the host path is
    /// cut into segments ([`crate::wire::gso::segment`]).
    gso_buf: Box<[u8]>,
}

/// Bytes of [`Worker`]'s segment buffer: the largest frame a driver
/// delivers (an IPv4 packet of 65535 bytes behind a tagged Ethernet header).
const GSO_BUF_BYTES: usize = 65535 + 18;

impl<D: Driver, C: Clock> Worker<D, C> {
    pub fn new(
        config: &WorkerConfig,
        driver: D,
        clock: C,
        snapshots: SnapshotReader,
        shared: Arc<SharedCounters>,
        handoff: Option<WorkerHandoff>,
        neighbours: Arc<NeighbourTable>,
    ) -> Result<Self, PipelineError> {
        let batch_size = config.batch_size.clamp(1, MAX_BATCH);
        let ports = driver.port_count();
        let (handoff_tx, handoff_rx, doorbell) = match handoff {
            Some(h) => (h.tx, h.rx, Some(h.doorbell)),
            None => (Vec::new(), Vec::new(), None),
        };
        let mut driver = driver;
        if let Some(d) = &doorbell {
            driver.wake_on_readable(&[d.fd()]);
        }
        Ok(Worker {
            pipeline: Pipeline::new(&config.pipeline, neighbours)?,
            driver,
            clock,
            snapshots,
            handoff_tx,
            handoff_rx,
            doorbell,
            handed_to: 0,
            shared,
            batch_size,
            idle: config.idle,
            handoff_first: 0,
            rx: Vec::with_capacity(MAX_BATCH),
            tx: (0..ports).map(|_| Vec::with_capacity(MAX_BATCH)).collect(),
            last_publish_ms: u64::MAX,
            held: HeldFrames::new(),
            seen_generation: u64::MAX,
            housekept_ms: u64::MAX,
            service_identity: Vec::new(),
            backend_identity: Vec::new(),
            inspect: None,
            host: None,
            bound_services: IdTable::new(),
            bound_backends: IdTable::new(),
            steering_rule: None,
            gso_buf: vec![0u8; GSO_BUF_BYTES].into_boxed_slice(),
        })
    }

    /// Serve flow listings and lookups from `server` (see [`crate::inspect`]).
    pub fn attach_inspect(&mut self, server: InspectServer) {
        self.inspect = Some(server);
    }

    /// Pass frames for host addresses to `host` and send what the kernel
    /// writes there (see [`crate::driver::hostpath`]); the driver's idle
    /// wait also wakes when a queue is readable.
    pub fn attach_host_path(&mut self, host: HostPath) {
        self.driver.wake_on_readable(&host.fds());
        self.host = Some(host);
    }

    pub fn driver_mut(&mut self) -> &mut D {
        &mut self.driver
    }

    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    pub fn pipeline_mut(&mut self) -> &mut Pipeline {
        &mut self.pipeline
    }

    /// One poll over every port and the handoff rings; returns the number of
    /// frames processed.
    ///
    /// Housekeeping ([`Pipeline::housekeeping`]: one bounded expiry slice)
    /// runs after every poll that found no frames, and after a busy poll
    /// only when the millisecond changed since the last slice: a loaded
    /// worker sweeps `expiry_scan_per_poll` flow slots per millisecond
    /// instead of per poll (tens of thousands of polls a second, each
    /// slice cache misses over the slab), and an idle one as before.
    pub fn poll(&mut self) -> usize {
        let now_ms = self.clock.now_ms();
        let snap = self.snapshots.load();
        if snap.generation != self.seen_generation {
            self.on_new_snapshot(&snap);
        } else {
            self.pipeline.check_neighbour_generation(&snap);
        }
        let mut work = 0;
        for port in 0..self.driver.port_count() {
            let port = port as PortId;
            self.rx.clear();
            let n = self.driver.rx_burst(port, &mut self.rx, self.batch_size);
            if n > 0 {
                work += n;
                self.run_batch(&snap, port, now_ms, true);
            }
        }
        work += self.drain_handoff(&snap, now_ms);
        if self.host.is_some() {
            work += self.drain_host();
        }
        let mut tx = Tx {
            driver: &mut self.driver,
            queues: &mut self.tx,
        };
        self.pipeline
            .release_held(&mut self.held, &snap, now_ms, &mut tx);
        self.pipeline.send_arp_requests(&snap, &mut tx);
        drop(snap);
        self.flush_tx();
        if self.handed_to != 0 {
            self.ring_doorbells();
        }
        if work == 0 || now_ms != self.housekept_ms {
            self.housekept_ms = now_ms;
            self.pipeline.housekeeping(now_ms);
        }
        if let Some(inspect) = self.inspect.as_mut() {
            let p = &self.pipeline;
            let tables = crate::inspect::Tables {
                ct: p.conntrack(),
                affinity: p.affinity(),
                v6: p.ipv6().map(|t| (&t.ct, &t.affinity)),
            };
            work += inspect.serve(tables, now_ms);
        }
        if now_ms != self.last_publish_ms {
            self.shared.beat(now_ms);
            self.publish_scalars();
            if now_ms / 100 != self.last_publish_ms / 100 {
                self.shared.publish_services(self.pipeline.services());
                self.publish_snat();
            }
            self.last_publish_ms = now_ms;
        }
        work
    }

    /// The production poll loop (`portico run`'s worker threads): [`poll`]
    /// until `stop` is set. After a poll that found work the next one
    /// follows at once; after an idle one the worker spins
    /// ([`IdlePolicy::Spin`], and the first `spin_polls` idle polls of
    /// [`IdlePolicy::Adaptive`]) or waits in its driver
    /// ([`Driver::wait_idle`]: `poll(2)` on the sockets, or a sleep for
    /// poll-mode devices), unless another worker handed it frames
    /// meanwhile; those workers ring its [`Doorbell`] while it waits. Every
    /// [`DRIVER_STATS_INTERVAL_MS`] (looked at after an idle poll, or every
    /// [`POLLS_PER_STATS_CHECK`] busy ones) the driver's port counters are
    /// copied into `ports` (one cell per port). On stop, the final counters
    /// and port counters are published. Allocates once, before the loop.
    ///
    /// [`poll`]: Worker::poll
    pub fn run(&mut self, stop: &AtomicBool, ports: &[PortStatsCell]) {
        let mut port_counters = vec![PortCounters::default(); ports.len()];
        let mut idle_polls: u32 = 0;
        let mut polls_since_check: u32 = 0;
        let mut last_stats_ms = self.clock.now_ms();
        while !stop.load(Ordering::Relaxed) {
            let work = self.poll();
            polls_since_check += 1;
            if work == 0 || polls_since_check >= POLLS_PER_STATS_CHECK {
                polls_since_check = 0;
                let now_ms = self.clock.now_ms();
                if now_ms.saturating_sub(last_stats_ms) >= DRIVER_STATS_INTERVAL_MS {
                    self.publish_port_counters(&mut port_counters, ports);
                    last_stats_ms = now_ms;
                }
            }
            if work > 0 {
                idle_polls = 0;
                continue;
            }
            idle_polls = idle_polls.saturating_add(1);
            match self.idle {
                IdlePolicy::Spin => std::hint::spin_loop(),
                IdlePolicy::Adaptive { spin_polls } if idle_polls <= spin_polls => {
                    std::hint::spin_loop();
                }
                IdlePolicy::Adaptive { .. } => self.sleep_in_driver(),
            }
        }
        self.publish_counters();
        self.publish_port_counters(&mut port_counters, ports);
    }

    /// Wake the workers this poll handed frames to, if they sleep.
    #[cold]
    fn ring_doorbells(&mut self) {
        let mut handed = std::mem::take(&mut self.handed_to);
        while handed != 0 {
            let w = handed.trailing_zeros() as usize;
            handed &= handed - 1;
            if let Some(tx) = self.handoff_tx.get(w).and_then(Option::as_ref) {
                tx.ring();
            }
        }
    }

    /// Sleep in the driver's idle wait unless frames were handed over
    /// meanwhile; with a doorbell, other workers' handoffs end the wait.
    /// The scalar counters are published first: `poll` publishes once per
    /// millisecond, so the packets of the worker's last millisecond of work
    /// would otherwise stay invisible to `portico stats` and metrics until
    /// the wait ends (up to the driver's timeout). One copy of the counters
    /// per sleep, beside the wait's syscall.
    fn sleep_in_driver(&mut self) {
        self.publish_scalars();
        if let Some(d) = &self.doorbell {
            d.going_to_sleep();
        }
        if self.handoff_rx.iter().all(HandoffRx::is_empty) {
            self.driver.wait_idle();
        }
        if let Some(d) = &self.doorbell {
            d.awake();
        }
    }

    /// Copy the driver's port counters into `cells` (`scratch` holds one
    /// per cell; no allocation).
    fn publish_port_counters(&mut self, scratch: &mut [PortCounters], cells: &[PortStatsCell]) {
        self.driver.port_counters(scratch);
        for (counters, cell) in scratch.iter().zip(cells) {
            cell.store(*counters);
        }
    }

    /// Copy every core-local counter (scalars, gauges, per-service and
    /// per-backend) out for readers.
    pub fn publish_counters(&self) {
        self.publish_scalars();
        self.shared.publish_services(self.pipeline.services());
        self.publish_snat();
    }

    fn publish_snat(&self) {
        let v6 = self
            .pipeline
            .ipv6()
            .and_then(|t| t.snat.as_ref())
            .map_or(&[][..], |s| s.addr_stats());
        self.shared
            .publish_snat(self.pipeline.snat().addr_stats(), v6);
    }

    fn publish_scalars(&self) {
        let p = &self.pipeline;
        self.shared.publish(p.counters(), p.gauges());
    }

    fn run_batch(&mut self, snap: &Snapshot, in_port: PortId, now_ms: u64, may_hand_off: bool) {
        self.pipeline
            .process(snap, in_port, &mut self.rx, now_ms, may_hand_off);
        // Frames held for a neighbour go before newer frames of their flows
        // (this batch may have carried the ARP reply).
        let mut tx = Tx {
            driver: &mut self.driver,
            queues: &mut self.tx,
        };
        self.pipeline
            .release_held(&mut self.held, snap, now_ms, &mut tx);
        self.dispatch(in_port, now_ms);
    }

    /// Send each frame of the last batch where its verdict says.
    fn dispatch(&mut self, in_port: PortId, now_ms: u64) {
        for (i, mut frame) in self.rx.drain(..).enumerate() {
            // A driver that returned more frames than a batch holds gets the
            // extras dropped, never a stale verdict.
            let verdict = self
                .pipeline
                .metas()
                .get(i)
                .map_or(Verdict::Drop(DropReason::Internal), |m| m.verdict);
            let counters = self.pipeline.counters_mut();
            let out = match verdict {
                Verdict::Forward(port) => port,
                Verdict::Reply => {
                    // Rebuilt by a stage with complete checksums.
                    frame.clear_offload();
                    in_port
                }
                Verdict::Handoff(owner) => {
                    let offload = frame.offload();
                    let pushed = self
                        .handoff_tx
                        .get_mut(owner as usize)
                        .and_then(Option::as_mut)
                        .map(|tx| {
                            if offload.is_none() {
                                tx.push(in_port, frame.data())
                                    .map_err(|_| DropReason::HandoffFull)
                            } else {
                                hand_off_segments(
                                    tx,
                                    in_port,
                                    frame.data(),
                                    &offload,
                                    &mut self.gso_buf,
                                )
                            }
                        });
                    match pushed {
                        Some(Ok(())) => {
                            counters.handoff_out += 1;
                            self.handed_to |= 1u64.checked_shl(u32::from(owner)).unwrap_or(0);
                        }
                        Some(Err(reason)) => counters.drop(reason),
                        None => counters.drop(DropReason::HandoffFull),
                    }
                    self.driver.release(frame);
                    continue;
                }
                Verdict::Drop(reason) => {
                    counters.drop(reason);
                    self.driver.release(frame);
                    continue;
                }
                Verdict::Consumed => {
                    self.driver.release(frame);
                    continue;
                }
                Verdict::Host => {
                    let host = (&mut self.host, &mut self.gso_buf[..]);
                    to_host(host, &mut self.driver, counters, in_port, frame);
                    continue;
                }
                Verdict::AwaitNeighbour(port) => {
                    if let Err(frame) = self.pipeline.hold(&mut self.held, i, port, frame, now_ms) {
                        self.driver.release(frame);
                    }
                    continue;
                }
                Verdict::Pending => {
                    debug_assert!(false, "packet left the pipeline without a verdict");
                    counters.drop(DropReason::Internal);
                    self.driver.release(frame);
                    continue;
                }
            };
            match self.tx.get_mut(out as usize) {
                Some(q) => q.push(frame),
                None => {
                    counters.drop(DropReason::NoRoute);
                    self.driver.release(frame);
                }
            }
        }
        self.flush_tx();
    }

    /// Apply a new snapshot generation: re-key the per-service counters,
    /// then the neighbour stage (static neighbours, announcements). Cold
    /// path.
    fn on_new_snapshot(&mut self, snap: &Snapshot) {
        self.seen_generation = snap.generation;
        self.rebind_service_counters(snap);
        let mut tx = Tx {
            driver: &mut self.driver,
            queues: &mut self.tx,
        };
        self.pipeline.on_snapshot(snap, &mut tx);
        self.flush_tx();
        self.steer_driver(snap);
    }

    /// On worker 0 of several: give the driver the steering rule of `snap`
    /// when it changed (see [`Driver::install_steering`]). Cold path: a
    /// snapshot change.
    fn steer_driver(&mut self, snap: &Snapshot) {
        let steering = self.pipeline.steering();
        if steering.worker != 0 || steering.workers <= 1 {
            return;
        }
        let rule = steering.rule(snap);
        if self.steering_rule.as_ref() == Some(&rule) {
            return;
        }
        let counters = self.pipeline.counters_mut();
        match self.driver.install_steering(&rule) {
            Ok(true) => counters.steering_installs += 1,
            Ok(false) => {}
            Err(_) => counters.steering_install_failures += 1,
        }
        self.steering_rule = Some(rule);
    }

    /// Ids are reused after a service or backend is removed: zero the
    /// counters of every id whose identity (service name; service and
    /// address) changed, so a new service never shows an old one's traffic.
    fn rebind_service_counters(&mut self, snap: &Snapshot) {
        let services = self.pipeline.services_mut();
        services.ensure(snap.services.len(), snap.backends.len());
        self.service_identity.resize(snap.services.len(), None);
        for (id, s) in changed_entries(&snap.services, &self.bound_services) {
            if let Some(known) = self.service_identity.get_mut(id)
                && known.as_deref() != Some(&*s.name)
            {
                *known = Some(s.name.clone());
                services.reset_service(id);
            }
        }
        self.backend_identity.resize(snap.backends.len(), None);
        for (id, b) in changed_entries(&snap.backends, &self.bound_backends) {
            let identity = Some((b.service, b.addr));
            if let Some(known) = self.backend_identity.get_mut(id)
                && *known != identity
            {
                *known = identity;
                services.reset_backend(id);
            }
        }
        self.bound_services = snap.services.clone();
        self.bound_backends = snap.backends.clone();
    }

    fn flush_tx(&mut self) {
        let mut tx = Tx {
            driver: &mut self.driver,
            queues: &mut self.tx,
        };
        tx.flush(self.pipeline.counters_mut());
    }

    /// Send what the kernel wrote to this worker's host-path queues out of
    /// their ports: at most [`HOST_BATCH`] frames per port, each copied
    /// into a driver buffer (none free: `pool_exhausted`). Out of line, as
    /// the frames are few: the poll loop carries only the call.
    #[inline(never)]
    fn drain_host(&mut self) -> usize {
        let Some(host) = self.host.as_mut() else {
            return 0;
        };
        let mut work = 0;
        let ports = host.ports().min(self.driver.port_count());
        for port in 0..ports {
            let port = port as PortId;
            for _ in 0..HOST_BATCH {
                let Some(bytes) = host.recv(port) else {
                    break;
                };
                work += 1;
                let counters = self.pipeline.counters_mut();
                let Some(frame) = self.driver.frame_from(bytes) else {
                    counters.drop(DropReason::PoolExhausted);
                    continue;
                };
                counters.from_host += 1;
                let mut tx = Tx {
                    driver: &mut self.driver,
                    queues: &mut self.tx,
                };
                tx.send(port, frame, counters);
            }
        }
        work
    }

    /// Process frames other workers handed over, in batches per ingress
    /// port. Each ring gets its own budget per poll and the first ring
    /// rotates, so no producer starves another.
    fn drain_handoff(&mut self, snap: &Snapshot, now_ms: u64) -> usize {
        let rings_len = self.handoff_rx.len();
        if rings_len == 0 {
            return 0;
        }
        // Taking the Vec moves three words; no allocation.
        let mut rings = std::mem::take(&mut self.handoff_rx);
        let first = self.handoff_first % rings_len;
        self.handoff_first = first + 1;
        let mut work = 0;
        for r in 0..rings_len {
            let Some(ring) = rings.get_mut((first + r) % rings_len) else {
                continue;
            };
            let mut batch_port: Option<PortId> = None;
            for _ in 0..2 * MAX_BATCH {
                let driver = &mut self.driver;
                let Some((port, frame)) =
                    ring.pop_with(|port, bytes| (port, driver.frame_from(bytes)))
                else {
                    break;
                };
                work += 1;
                let counters = self.pipeline.counters_mut();
                counters.handoff_in += 1;
                let Some(frame) = frame else {
                    counters.drop(DropReason::PoolExhausted);
                    continue;
                };
                if let Some(p) = batch_port
                    && (p != port || self.rx.len() >= self.batch_size)
                {
                    self.run_batch(snap, p, now_ms, false);
                }
                batch_port = Some(port);
                self.rx.push(frame);
            }
            if let Some(p) = batch_port
                && !self.rx.is_empty()
            {
                self.run_batch(snap, p, now_ms, false);
            }
        }
        self.handoff_rx = rings;
        work
    }
}

/// Write a frame with verdict [`Verdict::Host`] to `in_port`'s queue of
/// `host` (counted as `to_host`, or dropped and counted) and release it.
/// Out of line: the forwarding loop carries only the branch to it.
/// A super-packet (or a frame with a partial checksum) is cut into
/// segments with complete checksums first: the TAP takes no offloads.
#[cold]
#[inline(never)]
fn to_host<D: Driver>(
    (host, gso_buf): (&mut Option<HostPath>, &mut [u8]),
    driver: &mut D,
    counters: &mut Counters,
    in_port: PortId,
    frame: D::Frame,
) {
    let offload = frame.offload();
    let sent = host.as_mut().map_or(Err(DropReason::HostPathDown), |h| {
        if offload.is_none() {
            return h.send(in_port, frame.data());
        }
        let mut sent = Ok(());
        wire::gso::segment(frame.data(), &offload, gso_buf, |seg| {
            sent = sent.and(h.send(in_port, seg));
        })
        .map_err(|_| DropReason::GsoMalformed)?;
        sent
    });
    match sent {
        Ok(()) => counters.to_host += 1,
        Err(reason) => counters.drop(reason),
    }
    driver.release(frame);
}

/// Hand a frame with offloads to another worker as the segments of
/// wire size the ring's buffers hold (ordinary frames go as they are).
/// All of them or the reason the first one failed.
#[cold]
#[inline(never)]
fn hand_off_segments(
    tx: &mut HandoffTx,
    in_port: PortId,
    frame: &[u8],
    offload: &Offload,
    buf: &mut [u8],
) -> Result<(), DropReason> {
    let mut pushed = Ok(());
    wire::gso::segment(frame, offload, buf, |seg| {
        if pushed.is_ok() {
            pushed = tx.push(in_port, seg).map_err(|_| DropReason::HandoffFull);
        }
    })
    .map_err(|_| DropReason::GsoMalformed)?;
    pushed
}

/// A worker's way out: its per-port tx queues over its driver.
struct Tx<'a, D: Driver> {
    driver: &'a mut D,
    queues: &'a mut [Vec<D::Frame>],
}

impl<D: Driver> Tx<'_, D> {
    /// Send every queued frame; count what was sent, and drop (counted as
    /// `tx_full`) what the ring did not take.
    fn flush(&mut self, counters: &mut Counters) {
        for (port, queue) in self.queues.iter_mut().enumerate() {
            if queue.is_empty() {
                continue;
            }
            let queued_bytes: u64 = queue.iter().map(|f| f.data().len() as u64).sum();
            let sent = self.driver.tx_burst(port as PortId, queue);
            let left_bytes: u64 = queue.iter().map(|f| f.data().len() as u64).sum();
            counters.tx_packets += sent as u64;
            counters.tx_bytes += queued_bytes - left_bytes;
            for frame in queue.drain(..) {
                counters.drop(DropReason::TxFull);
                self.driver.release(frame);
            }
        }
    }
}

impl<D: Driver> Egress<D::Frame> for Tx<'_, D> {
    fn frame_from(&mut self, bytes: &[u8]) -> Option<D::Frame> {
        self.driver.frame_from(bytes)
    }

    /// Queue a frame for tx on `port`, flushing the queues first when the
    /// port's is full. False (frame released, counted) only for a port that
    /// does not exist or a ring that stays full.
    fn send(&mut self, port: PortId, frame: D::Frame, counters: &mut Counters) -> bool {
        if self
            .queues
            .get(port as usize)
            .is_some_and(|q| q.len() >= q.capacity())
        {
            self.flush(counters);
        }
        match self.queues.get_mut(port as usize) {
            Some(q) if q.len() < q.capacity() => {
                q.push(frame);
                true
            }
            _ => {
                counters.drop(DropReason::TxFull);
                self.driver.release(frame);
                false
            }
        }
    }

    fn release(&mut self, frame: D::Frame) {
        self.driver.release(frame);
    }
}

/// The entries of `table` (with their ids) in chunks not shared with
/// `before`: every entry that may differ from `before`'s.
fn changed_entries<'a, T>(
    table: &'a IdTable<T>,
    before: &'a IdTable<T>,
) -> impl Iterator<Item = (usize, &'a T)> + 'a {
    (0..table.len())
        .step_by(ID_CHUNK)
        .filter(move |&start| !table.same_chunk(before, start as u32))
        .flat_map(move |start| {
            (start..start + ID_CHUNK).filter_map(move |id| Some((id, table.get(id as u32)?)))
        })
}
