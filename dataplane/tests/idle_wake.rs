//! The adaptive idle policy on real sockets: a worker that spun, found
//! nothing and went to sleep in its driver (`poll(2)` on the rings) wakes
//! on the first packet and forwards it. The driver's idle timeout is set to
//! an hour, so a forwarded packet proves the packet woke the worker (a
//! timeout never could within the test); the test stops the worker through
//! a descriptor registered with `wake_on_readable`.
//!
//! Topology (`common::Topology`: unique namespaces per test, removed on drop):
//!
//! ```text
//! [client ns] cl --veth-- go [gateway ns: worker on go, gi] gi --veth-- be [backend ns]
//! ```
//!
//! The client's raw socket sends a SYN to the VIP; the backend's raw socket
//! must see it translated (SNAT address to backend 0). Needs root and `ip netns`
//! (skips loudly otherwise; `PORTICO_REQUIRE_ROOT=1` makes a skip fail).

mod common;

use common::*;
use dataplane::clock::MonotonicClock;
use dataplane::counters::SharedCounters;
use dataplane::driver::afpacket::{AfPacketConfig, AfPacketDriver, RingConfig, RxMode};
use dataplane::driver::{Driver, PortCounters, PortStatsCell};
use dataplane::packet::PortId;
use dataplane::snapshot::{Publisher, SnapshotBuilder};
use dataplane::wire::{build, ipv4, tcp};
use dataplane::worker::{IdlePolicy, Worker, WorkerConfig};
use portico_netns::{RawSocket, in_netns, require_root};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A guard against a hang, not a speed bound: the driver would sleep an
/// hour without the packet.
const DEADLINE: Duration = Duration::from_secs(20);

/// The af_packet driver, counting the idle waits the worker entered and
/// the ones that returned.
struct Watched {
    inner: AfPacketDriver,
    entered: Arc<AtomicU64>,
    returned: Arc<AtomicU64>,
}

impl Driver for Watched {
    type Frame = <AfPacketDriver as Driver>::Frame;

    fn port_count(&self) -> usize {
        self.inner.port_count()
    }
    fn rx_burst(&mut self, port: PortId, out: &mut Vec<Self::Frame>, max: usize) -> usize {
        self.inner.rx_burst(port, out, max)
    }
    fn tx_burst(&mut self, port: PortId, frames: &mut Vec<Self::Frame>) -> usize {
        self.inner.tx_burst(port, frames)
    }
    fn release(&mut self, frame: Self::Frame) {
        self.inner.release(frame);
    }
    fn frame_from(&mut self, bytes: &[u8]) -> Option<Self::Frame> {
        self.inner.frame_from(bytes)
    }
    fn wait_idle(&mut self) -> bool {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let ready = self.inner.wait_idle();
        self.returned.fetch_add(1, Ordering::SeqCst);
        ready
    }
    fn wake_on_readable(&mut self, fds: &[std::os::fd::RawFd]) {
        self.inner.wake_on_readable(fds);
    }
    fn port_counters(&mut self, out: &mut [PortCounters]) {
        self.inner.port_counters(out);
    }
}

fn syn(sport: u16) -> Vec<u8> {
    build::eth_ipv4_tcp(
        ROUTER_MAC,
        OUT_MAC,
        CLIENT,
        sport,
        VIP,
        80,
        tcp::flags::SYN,
        1,
        0,
        b"",
    )
}

/// A SYN as the backend sees it: from the SNAT address to backend 0's
/// port 8080.
fn is_forwarded_syn(frame: &[u8]) -> bool {
    let Ok(ip) = ipv4::Packet::new_checked(frame.get(14..).unwrap_or_default()) else {
        return false;
    };
    let ports = ip.payload().get(..4).unwrap_or_default();
    ip.protocol() == ipv4::protocol::TCP
        && ip.src_addr() == SNAT
        && ip.dst_addr() == backend_ip(0)
        && ports.get(2..4) == Some(&8080u16.to_be_bytes()[..])
}

fn a_sleeping_worker_wakes_on_the_first_packet_and_forwards_it(rx_mode: RxMode) {
    if !require_root("idle wake namespace test") {
        return;
    }
    // No IPv6 link-local chatter (router solicitations, MLD) to wake the
    // worker before the test's packet does.
    let Topology {
        client,
        gateway,
        backend,
    } = Topology::new("idl", backend_mac(backend_ip(0)).0, [true; 3]);
    let client_raw = in_netns(&client, || RawSocket::open("cl")).expect("client socket");
    let backend_raw = in_netns(&backend, || RawSocket::open("be")).expect("backend socket");

    let driver = in_netns(&gateway, || {
        let mut c = AfPacketConfig::new(&["go", "gi"]);
        c.ring = RingConfig {
            rx_mode,
            ..RingConfig::default()
        };
        c.pool_frames = 512;
        // Only a packet (or the stop descriptor) can end a wait.
        c.poll_timeout_ms = 3_600_000;
        AfPacketDriver::open(&c)
    })
    .expect("open the driver");
    let (entered, returned) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let watched = Watched {
        inner: driver,
        entered: Arc::clone(&entered),
        returned: Arc::clone(&returned),
    };
    let publisher = Publisher::new(
        SnapshotBuilder::new()
            .build(&spec(vec![web(&[0])]))
            .expect("valid fixture spec"),
    );
    let shared = Arc::new(SharedCounters::default());
    let mut worker = Worker::new(
        &WorkerConfig {
            pipeline: pipeline_config(0, 1),
            batch_size: 64,
            idle: IdlePolicy::ADAPTIVE,
        },
        watched,
        MonotonicClock::new(),
        publisher.reader(),
        Arc::clone(&shared),
        None,
        Arc::new(dataplane::neighbour::NeighbourTable::new(Default::default())),
    )
    .expect("valid pipeline config");
    let (wake, wake_peer) = UnixStream::pair().expect("socket pair");
    worker.driver_mut().wake_on_readable(&[wake.as_raw_fd()]);
    let stop = Arc::new(AtomicBool::new(false));
    let runner = {
        let stop = Arc::clone(&stop);
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || {
            let cells: Vec<PortStatsCell> = (0..2).map(|_| PortStatsCell::default()).collect();
            worker.run(&stop, &cells);
            (cells[usize::from(OUTSIDE)].load(), shared.read().0)
        })
    };

    // Wait until the worker is asleep: a wait entered and not returned.
    // (Waits before the first snapshot's gratuitous ARP went out may
    // return; with an hour's timeout the last one entered stays.)
    let end = Instant::now() + DEADLINE;
    let asleep = || {
        let e = entered.load(Ordering::SeqCst);
        e > 0 && returned.load(Ordering::SeqCst) < e
    };
    while !asleep() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(asleep(), "the worker never went to sleep in its driver");
    let sleeping_in = entered.load(Ordering::SeqCst);

    client_raw.send(&syn(41_000)).expect("send the SYN");
    let got = backend_raw
        .recv_matching(1, DEADLINE, is_forwarded_syn)
        .expect("backend receive");
    let woke = returned.load(Ordering::SeqCst) >= sleeping_in;

    stop.store(true, Ordering::SeqCst);
    (&wake_peer).write_all(b"x").expect("wake the worker");
    let (port, counters) = runner.join().expect("worker thread");
    assert_eq!(
        got.len(),
        1,
        "the SYN was not forwarded to the backend: {port:?} {counters:?}"
    );
    assert!(
        woke,
        "the wait the worker slept in (timeout: an hour) ended with the packet"
    );
    assert!(port.rx_frames >= 1, "{port:?}");
    assert_eq!(port.kernel_rx_drops, 0, "{port:?}");
}

#[test]
fn a_sleeping_worker_wakes_on_the_first_packet_and_forwards_it_v2_frames() {
    a_sleeping_worker_wakes_on_the_first_packet_and_forwards_it(RxMode::Frames);
}

#[test]
fn a_sleeping_worker_wakes_on_the_first_packet_and_forwards_it_v3_blocks() {
    a_sleeping_worker_wakes_on_the_first_packet_and_forwards_it(RxMode::Blocks);
}
