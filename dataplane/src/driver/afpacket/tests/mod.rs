//! The driver on real veth pairs in throw-away network namespaces.
//!
//! Each test builds its own [`Topology`]: two namespaces (a, b) with a veth
//! pair `pa` (in a) — `pb` (in b); the driver runs on `pb`, a raw
//! `AF_PACKET` socket (or a local TCP/UDP socket) plays the peer on `pa`.
//! Sockets are opened from a thread that entered the namespace
//! ([`in_netns`]); a socket stays in its namespace wherever it is used
//! later. The namespace guards delete both namespaces by name on drop
//! (which also destroys the veth pair), on success and on panic alike.
//!
//! They need root and `ip netns`; without them they print a loud SKIPPED
//! banner to stderr and return (CI runs them as root, with
//! `PORTICO_REQUIRE_ROOT=1`: then a skip fails the test).

use super::*;

mod rx_path;
mod tx_path;
use crate::driver::test_frames::{is_udp_to, numbered_payload};
use crate::wire::{MacAddr, build, ipv4, tcp, udp};
use portico_netns::{Netns, RawSocket, Veth, in_netns, require_root};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAC_A: MacAddr = MacAddr([0x02, 0x50, 0x54, 0, 0, 0xa]);
const MAC_B: MacAddr = MacAddr([0x02, 0x50, 0x54, 0, 0, 0xb]);
const IP_A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// UDP destination port of every test frame (filters out the IPv6
/// neighbour discovery / MLD chatter the namespaces produce on link-up).
const TEST_PORT: u16 = 9999;
const DEADLINE: Duration = Duration::from_secs(10);

/// Two namespaces joined by a veth pair; deleted on drop (of the last
/// reference: a test may lend namespace a to a thread of its own).
struct Topology {
    ns_a: Arc<Netns>,
    ns_b: Netns,
}

impl Topology {
    /// `None` (after a SKIPPED banner) when not root or `ip netns` fails.
    /// `mtu_a`/`mtu_b` set the two ends' MTUs.
    fn new(mtu_a: u32, mtu_b: u32) -> Option<Topology> {
        if !require_root("af_packet namespace test") {
            return None;
        }
        let topo = Topology {
            ns_a: Arc::new(Netns::new("afpa").expect("namespace a")),
            ns_b: Netns::new("afpb").expect("namespace b"),
        };
        Veth::new(&topo.ns_a, "pa", &topo.ns_b, "pb")
            .macs(MAC_A.0, MAC_B.0)
            .mtus(mtu_a, mtu_b)
            .create()
            .expect("building the test topology");
        Some(topo)
    }
}

/// The peer's raw socket on `pa`, opened in namespace a.
fn open_peer(topo: &Topology) -> RawSocket {
    in_netns(&topo.ns_a, || RawSocket::open("pa")).expect("peer socket")
}

/// Frames addressed to [`TEST_PORT`] that `peer` receives until `count`
/// arrived or the deadline.
fn peer_test_frames(peer: &RawSocket, count: usize) -> Vec<Vec<u8>> {
    peer.recv_matching(count, DEADLINE, is_test_frame)
        .expect("peer receive")
}

/// A UDP frame to [`TEST_PORT`] (tagged or not).
fn is_test_frame(frame: &[u8]) -> bool {
    is_udp_to(frame, TEST_PORT)
}

/// A test frame from a to b, `len` bytes long in total (>= 42), tagging
/// source port `sport` and carrying `id` in its payload.
fn test_frame(len: usize, sport: u16, id: u32) -> Vec<u8> {
    let payload = numbered_payload(len, id);
    let f = build::eth_ipv4_udp(MAC_A, MAC_B, IP_A, sport, IP_B, TEST_PORT, &payload);
    assert_eq!(f.len(), len.max(46));
    f
}

fn config(ring: RingConfig) -> AfPacketConfig {
    let mut c = AfPacketConfig::new(&["pb"]);
    c.ring = ring;
    c.pool_frames = 512;
    c
}

/// Receive from port 0 until `count` test frames arrived or the deadline.
fn rx_test_frames(driver: &mut AfPacketDriver, count: usize) -> Vec<(Vec<u8>, bool)> {
    let end = Instant::now() + DEADLINE;
    let mut batch = Vec::with_capacity(64);
    let mut got = Vec::new();
    while got.len() < count && Instant::now() < end {
        driver.wait(50);
        driver.rx_burst(0, &mut batch, 64);
        for f in batch.drain(..) {
            if is_test_frame(f.data()) {
                got.push((f.data().to_vec(), f.checksum_verified()));
            }
            driver.release(f);
        }
    }
    got
}

/// The driver on `topo`'s side B with the default rings and `rx_mode`.
fn open_in_ns_b(topo: &Topology, rx_mode: RxMode) -> AfPacketDriver {
    in_netns(&topo.ns_b, || {
        AfPacketDriver::open(&config(RingConfig {
            rx_mode,
            ..RingConfig::default()
        }))
    })
    .expect("open driver")
}

#[test]
fn frames_sent_into_the_peer_arrive_intact_through_rx_burst() {
    frames_sent_into_the_peer_arrive_intact_through_rx_burst_in(RxMode::Frames);
}

#[test]
fn frames_sent_into_the_peer_arrive_intact_through_rx_burst_with_v3_blocks() {
    frames_sent_into_the_peer_arrive_intact_through_rx_burst_in(RxMode::Blocks);
}

fn frames_sent_into_the_peer_arrive_intact_through_rx_burst_in(rx_mode: RxMode) {
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let peer = open_peer(&topo);
    let mut driver = open_in_ns_b(&topo, rx_mode);
    let port = driver.port(0).expect("port 0");
    assert_eq!((port.mac(), port.mtu(), port.ifname()), (MAC_B, 1500, "pb"));

    let mut sent: Vec<Vec<u8>> = (0..40u32)
        .map(|i| test_frame(46 + (i as usize * 37) % 1468, 1000 + i as u16, i))
        .collect();
    sent.push(test_frame(1514, 2000, 40));
    // A tagged frame: the kernel moves the tag to ring metadata; the driver
    // must put it back.
    sent.push(build::with_vlan(&test_frame(300, 2001, 41), 42));
    for f in &sent {
        peer.send(f).expect("peer send");
    }
    let got = rx_test_frames(&mut driver, sent.len());
    // Frames from a raw socket are CHECKSUM_NONE on veth: nobody verified
    // them, so the driver must not claim it did.
    assert!(got.iter().all(|(_, verified)| !verified));
    let got_frames: Vec<Vec<u8>> = got.iter().map(|(f, _)| f.clone()).collect();
    assert_eq!(got_frames, sent, "frames arrive intact and in order");
    let stats = driver.total_stats();
    assert_eq!(stats.rx_vlan_restored, 1);
    assert_eq!((stats.rx_too_big, stats.rx_truncated), (0, 0));
    assert_eq!(driver.pool_free(), 512, "every buffer back in the pool");
}

#[test]
fn tx_burst_frames_arrive_on_the_peer_and_bursts_do_not_allocate() {
    tx_burst_frames_arrive_on_the_peer_and_bursts_do_not_allocate_in(RxMode::Frames);
}

#[test]
fn tx_burst_frames_arrive_on_the_peer_and_bursts_do_not_allocate_with_v3_blocks() {
    tx_burst_frames_arrive_on_the_peer_and_bursts_do_not_allocate_in(RxMode::Blocks);
}

fn tx_burst_frames_arrive_on_the_peer_and_bursts_do_not_allocate_in(rx_mode: RxMode) {
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let peer = open_peer(&topo);
    let mut driver = open_in_ns_b(&topo, rx_mode);
    let sent: Vec<Vec<u8>> = (0..32u32)
        .map(|i| test_frame(60 + i as usize * 41, 3000 + i as u16, i))
        .collect();
    let mut batch: Vec<AfPacketFrame> = Vec::with_capacity(64);
    // frame_from + tx_burst (and its send) allocate nothing.
    let info = allocation_counter::measure(|| {
        for f in &sent {
            batch.push(driver.frame_from(f).expect("pool buffer"));
        }
        assert_eq!(driver.tx_burst(0, &mut batch), sent.len());
    });
    assert_eq!(info.count_total, 0, "tx path allocated: {info:?}");
    assert!(batch.is_empty());
    let got = peer_test_frames(&peer, sent.len());
    assert_eq!(got, sent);
    let stats = driver.total_stats();
    assert_eq!(stats.tx_frames, sent.len() as u64);
    assert_eq!(stats.tx_send_errors, 0);
    assert_eq!(driver.pool_free(), 512);

    // The same frames back through rx_burst + release: no allocation either.
    for f in &sent {
        peer.send(f).expect("peer send");
    }
    let end = Instant::now() + DEADLINE;
    let mut received = 0;
    while received < sent.len() && Instant::now() < end {
        driver.wait(50);
        let info = allocation_counter::measure(|| {
            driver.rx_burst(0, &mut batch, 64);
            for f in batch.drain(..) {
                received += usize::from(is_test_frame(f.data()));
                driver.release(f);
            }
        });
        assert_eq!(info.count_total, 0, "rx path allocated: {info:?}");
    }
    assert_eq!(received, sent.len());
    assert_eq!(driver.pool_free(), 512);
}

#[test]
fn a_burst_larger_than_the_tx_ring_leaves_the_excess_with_the_caller() {
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let peer = open_peer(&topo);
    let ring = RingConfig {
        tx_frame_size: 2048,
        tx_frame_count: 4,
        ..RingConfig::default()
    };
    let mut driver =
        in_netns(&topo.ns_b, || AfPacketDriver::open(&config(ring))).expect("open driver");
    let slots = driver.port(0).expect("port").tx_ring_frames();
    assert!(
        (4..10).contains(&slots),
        "ring of {slots} slots is smaller than the burst"
    );
    let sent: Vec<Vec<u8>> = (0..10u32)
        .map(|i| test_frame(200, 4000 + i as u16, i))
        .collect();
    let mut batch: Vec<AfPacketFrame> = sent
        .iter()
        .map(|f| driver.frame_from(f).expect("pool buffer"))
        .collect();
    let taken = driver.tx_burst(0, &mut batch);
    assert_eq!(taken, slots, "an empty ring takes exactly its size");
    assert_eq!(
        batch.len(),
        sent.len() - slots,
        "the rest stays with the caller"
    );
    assert_eq!(
        batch[0].data(),
        &sent[slots][..],
        "from the front, in order"
    );
    assert_eq!(
        driver.total_stats().tx_ring_full,
        (sent.len() - slots) as u64
    );
    // The kernel frees slots as the peer consumes; the rest goes out later.
    let end = Instant::now() + DEADLINE;
    while !batch.is_empty() && Instant::now() < end {
        driver.tx_burst(0, &mut batch);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(batch.is_empty(), "ring never drained");
    assert_eq!(peer_test_frames(&peer, sent.len()), sent);
    assert_eq!(driver.pool_free(), 512);
}

#[test]
fn two_workers_with_fanout_share_a_port_and_together_see_everything() {
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let peer = open_peer(&topo);
    let mut cfg = config(RingConfig::default());
    cfg.ports[0].fanout_group_id = Some(0x77);
    cfg.fanout_mode = FanoutMode::Hash;
    let (mut w0, mut w1) = in_netns(&topo.ns_b, || {
        (
            AfPacketDriver::open(&cfg).expect("worker 0"),
            AfPacketDriver::open(&cfg).expect("worker 1"),
        )
    });
    const FLOWS: u32 = 200;
    for i in 0..FLOWS {
        peer.send(&test_frame(100, 10_000 + i as u16, i))
            .expect("peer send");
    }
    let end = Instant::now() + DEADLINE;
    let mut seen: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    let mut batch = Vec::with_capacity(64);
    while seen[0].len() + seen[1].len() < FLOWS as usize && Instant::now() < end {
        for (w, ids) in [&mut w0, &mut w1].into_iter().zip(seen.iter_mut()) {
            w.wait(10);
            w.rx_burst(0, &mut batch, 64);
            for f in batch.drain(..) {
                if is_test_frame(f.data()) {
                    let id = f.data().get(42..46).expect("id");
                    ids.push(u32::from_be_bytes([id[0], id[1], id[2], id[3]]));
                }
                w.release(f);
            }
        }
    }
    assert!(
        !seen[0].is_empty() && !seen[1].is_empty(),
        "each worker gets a share: {} / {}",
        seen[0].len(),
        seen[1].len()
    );
    let mut all: Vec<u32> = seen.concat();
    all.sort_unstable();
    assert_eq!(all, (0..FLOWS).collect::<Vec<_>>(), "together all, once");
}

#[test]
fn frames_above_the_mtu_are_counted_and_dropped() {
    // pa may send up to 1600; veth lets frames up to pb's MTU + 18 through,
    // so untagged frames of 1515..=1518 bytes reach pb's driver.
    let Some(topo) = Topology::new(1600, 1500) else {
        return;
    };
    let peer = open_peer(&topo);
    let mut driver = in_netns(&topo.ns_b, || {
        AfPacketDriver::open(&config(RingConfig::default()))
    })
    .expect("open driver");
    let fits = test_frame(1514, 5000, 1);
    let tagged_fits = build::with_vlan(&test_frame(1514, 5001, 2), 7);
    assert_eq!(tagged_fits.len(), 1518);
    for f in [
        test_frame(1515, 5002, 3),
        fits.clone(),
        test_frame(1518, 5003, 4),
        tagged_fits.clone(),
    ] {
        peer.send(&f).expect("peer send");
    }
    let got: Vec<Vec<u8>> = rx_test_frames(&mut driver, 2)
        .into_iter()
        .map(|(f, _)| f)
        .collect();
    assert_eq!(got, vec![fits, tagged_fits]);
    // The oversized ones were walked before the last good frame.
    assert_eq!(driver.total_stats().rx_too_big, 2);
}

#[test]
fn preparation_turns_offloads_off_and_reports_kernel_addresses() {
    let Some(topo) = Topology::new(1500, 1400) else {
        return;
    };
    topo.ns_b
        .exec("ip", &["addr", "add", "10.77.0.2/24", "dev", "pb"])
        .expect("addr add");
    let (before, prepared, after, conflicts) = in_netns(&topo.ns_b, || {
        let before = prepare::set_gro("pb", true).expect("GRO on");
        let prepared = prepare::prepare_interface("pb", false).expect("prepare");
        let after = prepare::offload_state("pb").expect("read back");
        let conflicts = prepare::kernel_owned_conflicts("pb", &[IP_A, IP_B]).expect("conflicts");
        (before, prepared, after, conflicts)
    });
    assert!(before.gro, "GRO could be turned on first");
    assert!(before.tso, "veth starts with TSO on");
    assert_eq!(prepared.offloads, after);
    assert!(
        !after.gro && !after.tso && !after.gso && !after.lro,
        "{after:?}"
    );
    assert!(after.all_off());
    assert_eq!(prepared.info.mac, MAC_B);
    assert_eq!(prepared.info.mtu, 1400);
    assert!(prepared.info.ifindex > 0);
    assert_eq!(prepared.kernel_ipv4_addrs, vec![IP_B]);
    assert_eq!(conflicts, vec![IP_B]);

    let missing = in_netns(&topo.ns_b, || prepare::interface_info("nope0"));
    match missing {
        Err(AfPacketError::NoSuchInterface { ifname, source }) => {
            assert_eq!(ifname, "nope0");
            assert_eq!(source.raw_os_error(), Some(libc::ENODEV));
        }
        other => panic!("expected NoSuchInterface, got {other:?}"),
    }
}

#[test]
fn locally_sent_tcp_and_udp_arrive_with_completed_checksums() {
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let ns_a = Arc::clone(&topo.ns_a);
    ns_a.exec("ip", &["addr", "add", "10.77.0.1/24", "dev", "pa"])
        .expect("addr");
    ns_a.exec(
        "ip",
        &[
            "neigh",
            "add",
            "10.77.0.2",
            "lladdr",
            &MAC_B.to_string(),
            "dev",
            "pa",
            "nud",
            "permanent",
        ],
    )
    .expect("neigh");
    let mut driver = in_netns(&topo.ns_b, || {
        AfPacketDriver::open(&config(RingConfig::default()))
    })
    .expect("open driver");

    // Local senders with checksum offload: veth's skbs stay CHECKSUM_PARTIAL.
    in_netns(&ns_a, || {
        let s = UdpSocket::bind(SocketAddrV4::new(IP_A, 0)).expect("udp bind");
        s.send_to(b"partial please", SocketAddrV4::new(IP_B, TEST_PORT))
            .expect("udp send");
    });
    // Nobody answers the SYN (b has no address): connect times out, but the
    // SYN has gone out by then.
    let connector = std::thread::spawn(move || {
        in_netns(&ns_a, || {
            let _ = TcpStream::connect_timeout(
                &SocketAddrV4::new(IP_B, 80).into(),
                Duration::from_millis(1500),
            );
        })
    });

    let end = Instant::now() + DEADLINE;
    let (mut udp_ok, mut syn_ok) = (false, false);
    let mut batch = Vec::with_capacity(64);
    while !(udp_ok && syn_ok) && Instant::now() < end {
        driver.wait(50);
        driver.rx_burst(0, &mut batch, 64);
        for f in batch.drain(..) {
            let data = f.data();
            if let Ok(ip_pkt) = ipv4::Packet::new_checked(data.get(14..).unwrap_or(&[])) {
                let (src, dst) = (ip_pkt.src_addr(), ip_pkt.dst_addr());
                if (src, dst) == (IP_A, IP_B) {
                    match ip_pkt.protocol() {
                        ipv4::protocol::UDP => {
                            let u = udp::Packet::new_checked(ip_pkt.payload()).expect("udp");
                            assert!(u.verify_checksum(src, dst), "UDP checksum completed");
                            assert_eq!(u.payload(), b"partial please");
                            assert!(f.checksum_verified());
                            udp_ok = true;
                        }
                        ipv4::protocol::TCP => {
                            let t = tcp::Packet::new_checked(ip_pkt.payload()).expect("tcp");
                            assert_eq!(t.dst_port(), 80);
                            assert!(t.verify_checksum(src, dst), "TCP checksum completed");
                            assert!(f.checksum_verified());
                            syn_ok = true;
                        }
                        _ => {}
                    }
                }
            }
            driver.release(f);
        }
    }
    connector.join().expect("connector thread");
    assert!(udp_ok && syn_ok, "udp {udp_ok} syn {syn_ok}");
    let stats = driver.total_stats();
    assert!(
        stats.rx_csum_completed >= 2,
        "the kernel left them partial (CSUMNOTREADY): {stats:?}"
    );
}

#[test]
fn invalid_ring_configuration_is_refused_with_the_interface_name() {
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let ring = RingConfig {
        tx_frame_size: 1000,
        ..RingConfig::default()
    };
    let err = in_netns(&topo.ns_b, || AfPacketDriver::open(&config(ring))).expect_err("refused");
    match err {
        AfPacketError::InvalidConfig { ifname, .. } => assert_eq!(ifname, "pb"),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

/// Receive on both workers until `count` test frames arrived (or the
/// deadline): `(worker, source address)` of each.
fn rx_by_worker(workers: [&mut AfPacketDriver; 2], count: usize) -> Vec<(usize, Ipv4Addr)> {
    let end = Instant::now() + DEADLINE;
    let mut batch = Vec::with_capacity(64);
    let mut got = Vec::new();
    let [w0, w1] = workers;
    while got.len() < count && Instant::now() < end {
        for (w, d) in [(0usize, &mut *w0), (1, &mut *w1)] {
            d.wait(5);
            d.rx_burst(0, &mut batch, 64);
            for f in batch.drain(..) {
                if is_test_frame(f.data()) {
                    let src = f.data().get(26..30).expect("source address");
                    got.push((w, Ipv4Addr::new(src[0], src[1], src[2], src[3])));
                }
                d.release(f);
            }
        }
    }
    got
}

#[test]
fn the_kernel_runs_the_steering_program_and_delivers_to_the_owner() {
    use crate::flow::{FlowKey, Proto};
    use crate::steering::SteeringRule;
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let peer = open_peer(&topo);
    let mut cfg = config(RingConfig::default());
    cfg.ports[0].fanout_group_id = Some(0x78);
    cfg.fanout_mode = FanoutMode::Steered;
    // Worker order is join order: member w is worker w.
    let (mut w0, mut w1) = in_netns(&topo.ns_b, || {
        (
            AfPacketDriver::open(&cfg).expect("worker 0"),
            AfPacketDriver::open(&cfg).expect("worker 1"),
        )
    });
    let sources: Vec<Ipv4Addr> = (1..=64).map(|i| Ipv4Addr::new(10, 77, 1, i)).collect();
    let send_all = || {
        for (i, src) in sources.iter().enumerate() {
            let f = build::eth_ipv4_udp(
                MAC_A,
                MAC_B,
                *src,
                20_000,
                IP_B,
                TEST_PORT,
                &numbered_payload(100, i as u32),
            );
            peer.send(&f).expect("peer send");
        }
    };
    // Client side: IP_B is owned, so each frame belongs to its source's hash.
    let clients = SteeringRule::new(2, 1024..=65535, vec![IP_B], Vec::new(), Vec::new());
    assert!(w0.install_steering(&clients).expect("install"));
    send_all();
    let got = rx_by_worker([&mut w0, &mut w1], sources.len());
    assert_eq!(got.len(), sources.len(), "every frame arrived once");
    for &(w, src) in &got {
        let key = FlowKey::new(Proto::Udp, src, 20_000, IP_B, TEST_PORT);
        assert_eq!(w, usize::from(clients.owner(&key)), "{key}");
    }
    assert!(
        got.iter().any(|&(w, _)| w == 0) && got.iter().any(|&(w, _)| w == 1),
        "the sources spread over both workers"
    );
    // A link flap unlinks the members and links them again: the member
    // order (and so worker w = member w) survives it.
    for state in ["down", "up"] {
        topo.ns_b
            .exec("ip", &["link", "set", "pb", state])
            .expect("ip link set");
    }
    let end = Instant::now() + DEADLINE;
    while Instant::now() < end {
        let out = topo.ns_b.exec("ip", &["-o", "link", "show", "pb"]);
        if out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("state UP")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    send_all();
    let got = rx_by_worker([&mut w0, &mut w1], sources.len());
    assert_eq!(got.len(), sources.len(), "every frame arrived once");
    for &(w, src) in &got {
        let key = FlowKey::new(Proto::Udp, src, 20_000, IP_B, TEST_PORT);
        assert_eq!(w, usize::from(clients.owner(&key)), "after a flap: {key}");
    }
    // A reply to an SNAT tuple: the port's slice decides (9998 is worker
    // 0's, 9999 worker 1's), whatever the source; worker 1's install
    // replaces the group's program.
    let snat = SteeringRule::new(2, 9998..=9999, vec![IP_B], vec![IP_B], Vec::new());
    assert!(w1.install_steering(&snat).expect("install"));
    send_all();
    let got = rx_by_worker([&mut w0, &mut w1], sources.len());
    assert_eq!(got.len(), sources.len(), "every frame arrived once");
    assert!(got.iter().all(|&(w, _)| w == 1), "{got:?}");
}

/// The IPv6 part of the steering program in the kernel: UDP frames from 64
/// IPv6 clients to an owned address reach the worker
/// [`SteeringRule::owner6`](crate::steering::SteeringRule::owner6) names,
/// replies to an IPv6 SNAT tuple the port slice's worker.
#[test]
fn the_kernel_steers_ipv6_frames_to_the_owner() {
    use crate::flow::{FlowKey6, Proto};
    use crate::steering::SteeringRule;
    use std::net::Ipv6Addr;
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let peer = open_peer(&topo);
    let mut cfg = config(RingConfig::default());
    cfg.ports[0].fanout_group_id = Some(0x79);
    cfg.fanout_mode = FanoutMode::Steered;
    let (mut w0, mut w1) = in_netns(&topo.ns_b, || {
        (
            AfPacketDriver::open(&cfg).expect("worker 0"),
            AfPacketDriver::open(&cfg).expect("worker 1"),
        )
    });
    let vip: Ipv6Addr = "2001:db8:77::2".parse().unwrap();
    let sources: Vec<Ipv6Addr> = (1..=64u16)
        .map(|i| Ipv6Addr::new(0x2001, 0xdb8, 0x77, 1, 0, 0, i, 0x10))
        .collect();
    let send_all = || {
        for (i, src) in sources.iter().enumerate() {
            let f = build::eth_ipv6_udp(
                MAC_A,
                MAC_B,
                (*src, 20_000),
                (vip, TEST_PORT),
                &numbered_payload(100, i as u32),
            );
            peer.send(&f).expect("peer send");
        }
    };
    let rx6 = |w0: &mut AfPacketDriver, w1: &mut AfPacketDriver| {
        let end = Instant::now() + DEADLINE;
        let mut batch = Vec::with_capacity(64);
        let mut got = Vec::new();
        while got.len() < sources.len() && Instant::now() < end {
            for (w, d) in [(0usize, &mut *w0), (1, &mut *w1)] {
                d.wait(5);
                d.rx_burst(0, &mut batch, 64);
                for f in batch.drain(..) {
                    let b = f.data();
                    let to_test_port = b.get(12..14) == Some(&[0x86, 0xdd])
                        && b.get(20) == Some(&17)
                        && b.get(56..58) == Some(&TEST_PORT.to_be_bytes());
                    if to_test_port {
                        let src: [u8; 16] = b[22..38].try_into().expect("source");
                        got.push((w, Ipv6Addr::from(src)));
                    }
                    d.release(f);
                }
            }
        }
        got
    };
    let clients = SteeringRule::new(2, 1024..=65535, Vec::new(), Vec::new(), Vec::new()).with_ipv6(
        vec![vip],
        Vec::new(),
        Vec::new(),
    );
    assert!(w0.install_steering(&clients).expect("install"));
    send_all();
    let got = rx6(&mut w0, &mut w1);
    assert_eq!(got.len(), sources.len(), "every frame arrived once");
    for &(w, src) in &got {
        let key = FlowKey6::new(Proto::Udp, src, 20_000, vip, TEST_PORT);
        assert_eq!(w, usize::from(clients.owner6(&key)), "{key}");
    }
    assert!(
        got.iter().any(|&(w, _)| w == 0) && got.iter().any(|&(w, _)| w == 1),
        "the sources spread over both workers"
    );
    // Replies to an IPv6 SNAT tuple: port 9999 is worker 1's slice.
    let snat = SteeringRule::new(2, 9998..=9999, Vec::new(), Vec::new(), Vec::new()).with_ipv6(
        vec![vip],
        vec![vip],
        Vec::new(),
    );
    assert!(w1.install_steering(&snat).expect("install"));
    send_all();
    let got = rx6(&mut w0, &mut w1);
    assert_eq!(got.len(), sources.len(), "every frame arrived once");
    assert!(got.iter().all(|&(w, _)| w == 1), "{got:?}");
}

/// `Ip: InReceives` of namespace b's kernel (`/proc/net/snmp`).
fn ns_b_ip_in_receives(topo: &Topology) -> u64 {
    let out = topo.ns_b.exec("cat", &["/proc/net/snmp"]).expect("snmp");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut ip = text.lines().filter(|l| l.starts_with("Ip:"));
    let (names, values) = (ip.next().expect("Ip header"), ip.next().expect("Ip values"));
    let column = names
        .split_whitespace()
        .position(|n| n == "InReceives")
        .expect("InReceives column");
    values
        .split_whitespace()
        .nth(column)
        .and_then(|v| v.parse().ok())
        .expect("InReceives value")
}

/// Send `count` test frames to b's address; returns how many of them the
/// driver received and by how much b's kernel `InReceives` grew once
/// they all went through (its IP stack runs in the sender's `send` on
/// veth; a short wait covers a deferred backlog).
fn send_and_count_kernel_rx(
    topo: &Topology,
    peer: &RawSocket,
    driver: Option<&mut AfPacketDriver>,
    count: u32,
) -> (usize, u64) {
    let before = ns_b_ip_in_receives(topo);
    for i in 0..count {
        peer.send(&test_frame(100, 3000 + i as u16, i))
            .expect("peer send");
    }
    let received = driver.map_or(0, |d| rx_test_frames(d, count as usize).len());
    std::thread::sleep(Duration::from_millis(200));
    (received, ns_b_ip_in_receives(topo) - before)
}

#[test]
fn with_kernel_stack_rx_off_the_port_kernel_stack_sees_no_frame_until_the_driver_closes() {
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    topo.ns_b
        .exec("ip", &["addr", "add", "10.77.0.2/24", "dev", "pb"])
        .expect("addr");
    let peer = open_peer(&topo);
    let open = |kernel_stack_rx: bool| {
        in_netns(&topo.ns_b, || {
            let mut c = config(RingConfig::default());
            c.kernel_stack_rx = kernel_stack_rx;
            AfPacketDriver::open(&c)
        })
        .expect("open driver")
    };

    // The default: the kernel's IP stack sees every frame the driver gets.
    let mut driver = open(true);
    assert!(!driver.port(0).expect("port").kernel_stack_bypassed());
    let (received, kernel) = send_and_count_kernel_rx(&topo, &peer, Some(&mut driver), 20);
    assert_eq!(received, 20);
    assert!(kernel >= 20, "the kernel saw {kernel} of 20");
    drop(driver);

    // Off: the driver still gets every frame, the kernel's stack none.
    let mut driver = open(false);
    assert!(
        driver.port(0).expect("port").kernel_stack_bypassed(),
        "tcx ingress link attached (Linux 6.6+)"
    );
    let (received, kernel) = send_and_count_kernel_rx(&topo, &peer, Some(&mut driver), 20);
    assert_eq!((received, kernel), (20, 0));
    assert_eq!(driver.pool_free(), 512, "every buffer back in the pool");

    // Closing the driver detaches the program: nothing stays behind.
    drop(driver);
    let (_, kernel) = send_and_count_kernel_rx(&topo, &peer, None, 20);
    assert!(kernel >= 20, "after close the kernel saw {kernel} of 20");
}
