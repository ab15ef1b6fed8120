//! `Worker::run`, the production poll loop: the idle policy waits in the
//! driver (adaptive) or never (spin), the driver's port counters reach the
//! cells every `DRIVER_STATS_INTERVAL_MS` and once more at stop, and the
//! worker's own counters are published when it stops.

mod common;

use common::*;
use dataplane::clock::ManualClock;
use dataplane::counters::SharedCounters;
use dataplane::driver::mem::{MemConfig, MemDriver, MemFrame};
use dataplane::driver::{Driver, PortCounters, PortStatsCell};
use dataplane::packet::PortId;
use dataplane::snapshot::{Publisher, SnapshotBuilder};
use dataplane::wire::build;
use dataplane::wire::tcp::flags as F;
use dataplane::worker::{
    ADAPTIVE_SPIN_POLLS, DRIVER_STATS_INTERVAL_MS, IdlePolicy, Worker, WorkerConfig,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The mem driver plus what the loop asked of it. Every poll (one RX burst
/// on port 0) advances the clock by `ms_per_poll`; poll `syn_at_poll` finds
/// the client's SYN; after `stop_after_polls` polls it sets `stop`.
struct Scripted {
    mem: MemDriver,
    clock: ManualClock,
    stop: Arc<AtomicBool>,
    stop_after_polls: u32,
    ms_per_poll: u64,
    syn: Vec<u8>,
    syn_at_poll: u32,
    polls: u32,
    waits: u32,
    /// The published `rx_packets` each time the worker went to sleep.
    shared: Arc<SharedCounters>,
    rx_packets_at_waits: Vec<u64>,
    counter_reads: u32,
    /// Frames received per port (what `port_counters` reports).
    rx_frames: [u64; 2],
}

impl Driver for Scripted {
    type Frame = MemFrame;

    fn port_count(&self) -> usize {
        self.mem.port_count()
    }

    fn rx_burst(&mut self, port: PortId, out: &mut Vec<MemFrame>, max: usize) -> usize {
        if port == 0 {
            self.polls += 1;
            self.clock.advance_ms(self.ms_per_poll);
            if self.polls == self.syn_at_poll {
                self.mem.inject(OUTSIDE, &self.syn).expect("inject");
            }
            if self.polls >= self.stop_after_polls {
                self.stop.store(true, Ordering::Relaxed);
            }
        }
        let n = self.mem.rx_burst(port, out, max);
        self.rx_frames[usize::from(port)] += n as u64;
        n
    }

    fn tx_burst(&mut self, port: PortId, frames: &mut Vec<MemFrame>) -> usize {
        self.mem.tx_burst(port, frames)
    }

    fn release(&mut self, frame: MemFrame) {
        self.mem.release(frame);
    }

    fn frame_from(&mut self, bytes: &[u8]) -> Option<MemFrame> {
        self.mem.frame_from(bytes)
    }

    fn wait_idle(&mut self) -> bool {
        self.waits += 1;
        self.rx_packets_at_waits
            .push(self.shared.read().0.rx_packets);
        false
    }

    /// No host path in these runs: nothing to wake on.
    fn wake_on_readable(&mut self, fds: &[std::os::fd::RawFd]) {
        assert!(fds.is_empty(), "no host path is attached here");
    }

    fn port_counters(&mut self, out: &mut [PortCounters]) {
        self.counter_reads += 1;
        for (slot, &rx_frames) in out.iter_mut().zip(&self.rx_frames) {
            *slot = PortCounters {
                rx_frames,
                ..PortCounters::default()
            };
        }
    }
}

/// Run a worker with `idle` until its driver has seen `polls` polls, with
/// one client SYN for the VIP waiting on the outside port, 1 ms per poll.
fn run(
    idle: IdlePolicy,
    polls: u32,
) -> (
    Worker<Scripted, ManualClock>,
    Arc<SharedCounters>,
    Vec<PortStatsCell>,
) {
    run_with(idle, polls, 1, 1)
}

/// [`run`] with `ms_per_poll` and the SYN arriving at poll `syn_at_poll`.
fn run_with(
    idle: IdlePolicy,
    polls: u32,
    ms_per_poll: u64,
    syn_at_poll: u32,
) -> (
    Worker<Scripted, ManualClock>,
    Arc<SharedCounters>,
    Vec<PortStatsCell>,
) {
    let publisher = Publisher::new(
        SnapshotBuilder::new()
            .build(&spec(vec![web(&[0])]))
            .expect("valid fixture spec"),
    );
    let clock = ManualClock::new(1_000);
    let stop = Arc::new(AtomicBool::new(false));
    let mem = MemDriver::new(MemConfig::default());
    let syn = build::eth_ipv4_tcp(
        ROUTER_MAC,
        OUT_MAC,
        CLIENT,
        40_000,
        VIP,
        80,
        F::SYN,
        1,
        0,
        b"",
    );
    let shared = Arc::new(SharedCounters::default());
    let driver = Scripted {
        mem,
        clock: clock.clone(),
        stop: Arc::clone(&stop),
        stop_after_polls: polls,
        ms_per_poll,
        syn: syn.to_vec(),
        syn_at_poll,
        polls: 0,
        waits: 0,
        shared: Arc::clone(&shared),
        rx_packets_at_waits: Vec::new(),
        counter_reads: 0,
        rx_frames: [0; 2],
    };
    let mut worker = Worker::new(
        &WorkerConfig {
            pipeline: pipeline_config(0, 1),
            batch_size: 64,
            idle,
        },
        driver,
        clock,
        publisher.reader(),
        Arc::clone(&shared),
        None,
        Arc::new(dataplane::neighbour::NeighbourTable::new(Default::default())),
    )
    .expect("valid pipeline config");
    let cells: Vec<PortStatsCell> = (0..2).map(|_| PortStatsCell::default()).collect();
    worker.run(&stop, &cells);
    (worker, shared, cells)
}

/// IPv4 frames sent on `port` (worker 0 also announces its addresses with
/// gratuitous ARP).
fn ipv4_sent(d: &mut Scripted, port: PortId) -> usize {
    d.mem
        .take_tx(port)
        .iter()
        .filter(|f| f[12..14] == [0x08, 0x00])
        .count()
}

#[test]
fn adaptive_workers_wait_in_the_driver_after_spinning_and_publish_at_stop() {
    let polls = ADAPTIVE_SPIN_POLLS + 100;
    let (mut worker, shared, cells) = run(IdlePolicy::ADAPTIVE, polls);
    let d = worker.driver_mut();
    assert_eq!(d.polls, polls);
    // The first poll found the SYN; of the idle polls after it (the last
    // one, which set the stop flag, included) the first
    // ADAPTIVE_SPIN_POLLS spin and every later one waits.
    assert_eq!(d.waits, polls - 1 - ADAPTIVE_SPIN_POLLS);
    assert_eq!(ipv4_sent(d, INSIDE), 1, "the SYN went to the backend");
    assert_eq!(cells[usize::from(OUTSIDE)].load().rx_frames, 1);
    assert_eq!(cells[usize::from(INSIDE)].load().rx_frames, 0);
    assert_eq!(shared.read().0.rx_packets, 1, "final counters published");
}

#[test]
fn the_spin_budget_is_the_configured_one() {
    for spin_polls in [0, 1, 10, 300] {
        let polls = spin_polls + 50;
        let (mut worker, shared, _) = run(IdlePolicy::Adaptive { spin_polls }, polls);
        let d = worker.driver_mut();
        assert_eq!(d.polls, polls);
        // The first poll found the SYN; of the idle polls after it,
        // exactly `spin_polls` spin and every later one waits.
        assert_eq!(d.waits, polls - 1 - spin_polls, "spin_polls = {spin_polls}");
        assert_eq!(shared.read().0.rx_packets, 1);
    }
}

#[test]
fn counters_are_published_before_the_worker_sleeps() {
    // The clock never moves, so the once-per-millisecond publication in
    // `poll` has run only once (the first, empty poll) when the SYN
    // arrives at poll 2: a reader would not see the SYN until the worker
    // woke from its wait, unless it publishes before it sleeps.
    let (mut worker, _, _) = run_with(IdlePolicy::Adaptive { spin_polls: 0 }, 6, 0, 2);
    let d = worker.driver_mut();
    assert_eq!(d.polls, 6);
    assert_eq!(
        d.rx_packets_at_waits,
        [0, 1, 1, 1, 1],
        "the published rx_packets at each sleep"
    );
}

#[test]
fn spinning_workers_never_wait_in_the_driver() {
    let (mut worker, shared, cells) = run(IdlePolicy::Spin, ADAPTIVE_SPIN_POLLS + 100);
    let d = worker.driver_mut();
    assert_eq!(d.waits, 0);
    assert_eq!(ipv4_sent(d, INSIDE), 1);
    assert_eq!(cells[usize::from(OUTSIDE)].load().rx_frames, 1);
    assert_eq!(shared.read().0.rx_packets, 1);
}

#[test]
fn port_counters_are_read_every_interval_not_every_poll() {
    // 1 ms per poll: 2000 ms of polling.
    let polls = 2_000;
    let (mut worker, _, _) = run(IdlePolicy::Spin, polls);
    let reads = worker.driver_mut().counter_reads;
    let periodic = u64::from(polls) / DRIVER_STATS_INTERVAL_MS;
    // One read per interval while running (the last may fall on the stop
    // poll), plus the final one.
    assert!(
        (periodic..=periodic + 1).contains(&u64::from(reads)),
        "{reads} reads for {polls} polls"
    );
}
