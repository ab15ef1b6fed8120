//! The driver on vdevs over real veth pairs in throw-away namespaces.
//!
//! The EAL starts once per process, so one test exercises every vdev kind
//! over one EAL: a [`Topology`] of two namespaces a and b, veth pairs
//! `pa`—`pb` (port 0, `net_af_packet` on `pb`) and `qa`—`qb` (port 1,
//! `net_af_xdp` on `qb`, copy mode: veth has no zero-copy). The EAL, the
//! ports and the driver live on a thread that entered namespace b (vdevs
//! open their sockets and run their ioctls in the caller's namespace); a
//! raw `AF_PACKET` socket on the `a` end plays the peer. The namespace
//! guards delete both namespaces by name on drop (which destroys the veth
//! pairs).
//!
//! Needs root and `ip netns`; otherwise prints a loud SKIPPED banner (a
//! failure under `PORTICO_REQUIRE_ROOT=1`). An af_xdp vdev that cannot
//! start (old kernel, no BPF) is reported as a SKIPPED banner of its own;
//! the af_packet checks still run.

use super::*;
use crate::driver::test_frames::{is_udp_to, numbered_payload};
use crate::driver::{Driver, Frame};
use crate::packet::PortId;
use crate::wire::{MacAddr, build};
use portico_netns::{Netns, RawSocket, Veth, in_netns, require_root, skip};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const MAC_A: MacAddr = MacAddr([0x02, 0x50, 0x44, 0, 0, 0xa]);
const MAC_B: MacAddr = MacAddr([0x02, 0x50, 0x44, 0, 0, 0xb]);
const MAC_C: MacAddr = MacAddr([0x02, 0x50, 0x44, 0, 0, 0xc]);
const MAC_D: MacAddr = MacAddr([0x02, 0x50, 0x44, 0, 0, 0xd]);
const IP_A: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
/// UDP destination port of every test frame (the namespaces' IPv6 chatter
/// on link-up is filtered out by it).
const TEST_PORT: u16 = 9998;
const DEADLINE: Duration = Duration::from_secs(10);
const FRAMES: usize = 64;
/// Bytes after the IPv4 packet of each frame the peer sends (like Ethernet
/// padding), stripped with `truncate` before the frames go back.
const PADDING: usize = 8;

/// Two namespaces joined by two veth pairs; deleted on drop.
struct Topology {
    ns_a: Netns,
    ns_b: Netns,
}

impl Topology {
    fn new() -> Option<Topology> {
        if !require_root("dpdk vdev test") {
            return None;
        }
        let topo = Topology {
            ns_a: Netns::new("dpka").expect("namespace a"),
            ns_b: Netns::new("dpkb").expect("namespace b"),
        };
        for (a_if, b_if, a_mac, b_mac) in [("pa", "pb", MAC_A, MAC_B), ("qa", "qb", MAC_C, MAC_D)] {
            Veth::new(&topo.ns_a, a_if, &topo.ns_b, b_if)
                .macs(a_mac.0, b_mac.0)
                .create()
                .expect("building the test topology");
        }
        Some(topo)
    }
}

/// Test frames the peer's raw socket on `ifname` (in namespace a) receives
/// until `count` arrived or the deadline.
fn peer_test_frames(t: &Topology, ifname: &str, count: usize) -> Vec<Vec<u8>> {
    in_netns(&t.ns_a, || {
        RawSocket::open(ifname)
            .expect("peer socket")
            .recv_matching(count, DEADLINE, is_test_frame)
            .expect("peer receive")
    })
}

fn is_test_frame(frame: &[u8]) -> bool {
    is_udp_to(frame, TEST_PORT)
}

/// A UDP test frame from `src` to `dst` carrying `id`, `len` bytes long.
fn test_frame(src: MacAddr, dst: MacAddr, len: usize, id: u32) -> Vec<u8> {
    let payload = numbered_payload(len, id);
    build::eth_ipv4_udp(src, dst, IP_A, 40000, IP_B, TEST_PORT, &payload)
}

/// Test frames of `port` until `count` arrived or the deadline; everything
/// else is released.
fn rx_test_frames(d: &mut DpdkDriver, port: PortId, count: usize) -> Vec<DpdkFrame> {
    let end = Instant::now() + DEADLINE;
    let mut got = Vec::with_capacity(count);
    let mut batch = Vec::with_capacity(MAX_BURST);
    while got.len() < count && Instant::now() < end {
        if d.rx_burst(port, &mut batch, MAX_BURST) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        for f in batch.drain(..) {
            if is_test_frame(f.data()) && got.len() < count {
                got.push(f);
            } else {
                d.release(f);
            }
        }
    }
    got
}

/// RX from the peer, TX (with an in-place rewrite and a truncation) back to
/// it, `frame_from` + TX, on `port` whose kernel end is `peer` (namespace a,
/// MAC `peer_mac`; the vdev's end has `own_mac`).
fn exchange(
    t: &Topology,
    d: &mut DpdkDriver,
    port: PortId,
    peer: &str,
    peer_mac: MacAddr,
    own_mac: MacAddr,
) {
    let kind = d.ports().ports()[usize::from(port)].driver_name.clone();
    // Peer -> rx_burst, byte for byte and in order. Each frame carries
    // PADDING bytes of trailer after its IPv4 packet.
    let sent: Vec<Vec<u8>> = (0..FRAMES)
        .map(|i| {
            let mut f = test_frame(peer_mac, own_mac, 60 + i * 20, i as u32);
            f.extend_from_slice(&[0xee; PADDING]);
            f
        })
        .collect();
    in_netns(&t.ns_a, || {
        let s = RawSocket::open(peer).expect("peer socket");
        for f in &sent {
            s.send(f).expect("peer send");
        }
    });
    let got = rx_test_frames(d, port, FRAMES);
    assert_eq!(got.len(), FRAMES, "{kind}: frames the driver received");
    for (f, want) in got.iter().zip(&sent) {
        assert_eq!(f.data(), &want[..], "{kind}: received bytes");
    }

    // Rewrite in place (swap the MACs), strip the trailer, send back.
    let echoed = std::thread::scope(|s| {
        let listener = s.spawn(|| peer_test_frames(t, peer, FRAMES));
        // Give the peer's socket time to bind before sending.
        std::thread::sleep(Duration::from_millis(200));
        let mut queue = got;
        for f in &mut queue {
            let data = f.data_mut();
            data[..6].copy_from_slice(&peer_mac.0);
            data[6..12].copy_from_slice(&own_mac.0);
        }
        for f in &mut queue {
            let len = f.data().len();
            f.truncate(len - PADDING);
        }
        let end = Instant::now() + DEADLINE;
        while !queue.is_empty() && Instant::now() < end {
            if d.tx_burst(port, &mut queue) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert!(queue.is_empty(), "{kind}: TX ring never drained");
        listener.join().expect("peer listener")
    });
    assert_eq!(echoed.len(), FRAMES, "{kind}: frames the peer got back");
    for (i, f) in echoed.iter().enumerate() {
        assert_eq!(&f[..6], &peer_mac.0, "{kind}: destination MAC rewritten");
        assert_eq!(&f[6..12], &own_mac.0, "{kind}: source MAC rewritten");
        let want = sent[i].len() - PADDING;
        assert_eq!(f.len(), want, "{kind}: frame {i} length after truncate");
        assert_eq!(&f[12..want], &sent[i][12..want], "{kind}: frame {i} bytes");
    }

    // frame_from (copies into a pool mbuf), grown into the mbuf's tailroom
    // (Frame::extend, rte_pktmbuf_append), + TX.
    let fresh = test_frame(own_mac, peer_mac, 128, 4242);
    let echoed = std::thread::scope(|s| {
        let listener = s.spawn(|| peer_test_frames(t, peer, 1));
        std::thread::sleep(Duration::from_millis(200));
        let mut frame = d.frame_from(&fresh[..100]).expect("a pool mbuf");
        assert!(!frame.extend(70_000), "{kind}: beyond any mbuf");
        assert_eq!(frame.data(), &fresh[..100], "{kind}: a refused extend");
        assert!(frame.extend(fresh.len()), "{kind}: into the tailroom");
        frame.data_mut()[100..].copy_from_slice(&fresh[100..]);
        assert_eq!(frame.data(), &fresh[..]);
        let mut queue = vec![frame];
        let end = Instant::now() + DEADLINE;
        while !queue.is_empty() && Instant::now() < end {
            d.tx_burst(port, &mut queue);
        }
        listener.join().expect("peer listener")
    });
    assert_eq!(echoed, vec![fresh], "{kind}: frame_from + tx_burst");
}

#[test]
fn vdevs_receive_and_send_frames_on_veth_pairs() {
    let Some(t) = Topology::new() else {
        return;
    };
    in_netns(&t.ns_b, || {
        let devices = vec![
            DpdkDevice::af_packet(0, "pb", 1),
            DpdkDevice::af_xdp(1, "qb", 1),
        ];
        let mut eal_config = EalConfig::vdevs(devices.clone());
        eal_config.memory_mb = 256;
        let eal = Eal::init(&eal_config).expect("EAL on vdevs");
        // The same configuration again is the same EAL; another is refused.
        assert!(std::ptr::eq(eal, Eal::init(&eal_config).expect("again")));
        let mut other = eal_config.clone();
        other.memory_mb = 128;
        assert!(matches!(
            Eal::init(&other),
            Err(DpdkError::AlreadyInitialized { .. })
        ));
        let have_af_xdp = eal.port_count() == 2;
        if !have_af_xdp {
            skip(
                "dpdk af_xdp vdev test",
                "the net_af_xdp vdev did not probe on this kernel (see the EAL log above)",
            );
        }
        let devices: Vec<DpdkDevice> = devices.into_iter().take(eal.port_count().into()).collect();
        let mut config = DpdkPortsConfig::new(&devices, 1);
        config.rx_desc = 256;
        config.tx_desc = 256;
        let ports = DpdkPorts::start(eal, &config).expect("ports start");
        assert_eq!(ports.ports()[0].mac, MAC_B, "the vdev reports pb's MAC");
        assert_eq!(ports.ports()[0].driver_name, "net_af_packet");
        let mut d = ports.driver(0).expect("worker 0's queues");
        assert!(matches!(
            ports.driver(0),
            Err(DpdkError::QueueTaken { worker: 0 })
        ));
        assert!(matches!(
            ports.driver(1),
            Err(DpdkError::NoSuchQueue { worker: 1, .. })
        ));
        assert_eq!(d.port_count(), devices.len());
        // Too long for an mbuf: refused, not truncated.
        assert!(d.frame_from(&[0u8; 4000]).is_none());
        assert!(d.frame_from(&[0u8; 70_000]).is_none());

        let in_use_at_start = ports.pool_in_use(0).expect("pool");
        exchange(&t, &mut d, 0, "pa", MAC_A, MAC_B);
        let s = ports.port_stats(0).expect("port stats");
        assert!(s.rx_packets >= FRAMES as u64, "{s:?}");
        assert!(s.tx_packets > FRAMES as u64, "{s:?}");
        if have_af_xdp {
            assert_eq!(ports.ports()[1].mac, MAC_D);
            exchange(&t, &mut d, 1, "qa", MAC_C, MAC_D);
        }
        // Every frame went back to the PMDs or the pool: what is in use
        // now is what the RX rings held before the exchanges (plus TX
        // completions not reaped yet, fewer than one exchange's frames).
        let in_use = ports.pool_in_use(0).expect("pool");
        assert!(
            in_use < in_use_at_start + FRAMES as u32,
            "{in_use} mbufs in use after the exchanges, {in_use_at_start} before"
        );
        drop(d);
        // The queues are free again once the driver is gone.
        let d = ports.driver(0).expect("worker 0's queues again");
        drop(d);
    });
}
