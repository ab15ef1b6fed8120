//! NDP through the whole pipeline (RFC 4861): the fixture gateway of
//! `common` with IPv6 addresses — a node address, a host address and two
//! VIPs (one elected elsewhere) on the outside port, an SNAT address and a
//! backend without static neighbour inside — on the mem driver (frame in →
//! verdict and frames out), and, as root, a worker on af_packet in
//! namespaces where real Linux neighbours (`ping -6`, `curl -6` to nginx
//! through the VIP, duplicate address detection) and the gateway resolve
//! each other by NDP.

mod common;

use common::*;
use dataplane::clock::MonotonicClock;
use dataplane::counters::{DropReason, SharedCounters};
use dataplane::driver::PortStatsCell;
use dataplane::driver::afpacket::{AfPacketConfig, AfPacketDriver};
use dataplane::flow::Proto;
use dataplane::neighbour::NeighbourTable;
use dataplane::packet::Verdict;
use dataplane::snapshot::{
    AddrRole, AnnounceFilter, Publisher, Route, ServiceSpec, Snapshot, SnapshotBuilder,
};
use dataplane::stage::ndp;
use dataplane::wire::tcp::flags as F;
use dataplane::wire::{MacAddr, build, checksum, ipv6};
use dataplane::worker::{IdlePolicy, Worker, WorkerConfig};
use portico_netns::{Netns, in_netns, require_programs, require_root};
use std::net::{Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const NODE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 1);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 0x10);
/// A VIP another instance is elected to announce.
const VIP6_ELSEWHERE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 0x11);
const HOST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 2);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 7);
const SNAT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 2, 0, 0, 0, 1);
/// A backend on the inside link, resolved by NDP (no static neighbour).
const BACKEND6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 2, 0, 0, 0, 0x20);
const BACKEND_MAC: [u8; 6] = [0x02, 0xbe, 0, 0, 0, 0x20];

/// `name`: `vip`:80 → BACKEND6:8080, full NAT.
fn web6(name: &str, vip: Ipv6Addr) -> ServiceSpec {
    ServiceSpec::new(name, Proto::Tcp, vip, 80).endpoint(SocketAddr::new(BACKEND6.into(), 8080))
}

/// The IPv4 fixture plus, on the outside link 2001:db8:0:1::/64, a node
/// address, a host address and two VIPs (one elected elsewhere); on the
/// inside link 2001:db8:0:2::/64 an SNAT address and the backend.
fn snapshot6() -> (SnapshotBuilder, Snapshot) {
    let mut s = spec(vec![
        web(&[0]),
        web6("web6", VIP6),
        web6("web6-elsewhere", VIP6_ELSEWHERE),
    ]);
    s.addresses.push((NODE6.into(), OUTSIDE, AddrRole::Node));
    s.addresses.push((HOST6.into(), OUTSIDE, AddrRole::Host));
    s.addresses.push((SNAT6.into(), INSIDE, AddrRole::Snat));
    s.routes.push(Route {
        dest: Ipv6Addr::new(0x2001, 0xdb8, 0, 2, 0, 0, 0, 0).into(),
        prefix_len: 64,
        port: INSIDE,
        via: None,
    });
    let mut builder = SnapshotBuilder::new();
    builder.set_announce(AnnounceFilter::only_ip(|vip| vip != VIP6_ELSEWHERE));
    let snapshot = builder.build(&s).expect("valid fixture spec");
    (builder, snapshot)
}

fn gateway6() -> Gateway {
    let (builder, snapshot) = snapshot6();
    Gateway::with_snapshot(
        builder,
        snapshot,
        pipeline_config(0, 1),
        Arc::new(NeighbourTable::default()),
    )
}

fn unsolicited(port_mac: MacAddr, addr: Ipv6Addr) -> Vec<u8> {
    let mut buf = [0u8; ndp::NDP_FRAME_BYTES];
    let len = ndp::write_unsolicited_advert(&mut buf, port_mac.0, addr);
    buf[..len].to_vec()
}

#[test]
fn announced_ipv6_addresses_are_advertised_once_at_start() {
    let mut gw = gateway6();
    for (port, addr, mac) in [
        (OUTSIDE, NODE6, OUT_MAC),
        (OUTSIDE, VIP6, OUT_MAC),
        (INSIDE, SNAT6, IN_MAC),
    ] {
        assert!(
            gw.announcements.contains(&(port, unsolicited(mac, addr))),
            "{addr} on port {port}"
        );
    }
    let adverts = |gw: &Gateway| {
        gw.announcements
            .iter()
            .filter(|(_, f)| f.get(12..14) == Some(&[0x86, 0xdd][..]))
            .count()
    };
    assert_eq!(
        adverts(&gw),
        3,
        "none for the host address or the VIP announced elsewhere"
    );
    assert_eq!(gw.counters().unsolicited_adverts_sent, 3);
    // A new snapshot announcing the same addresses advertises nothing.
    let (_, again) = snapshot6();
    gw.publisher.publish(again);
    let (_, out) = gw.send(OUTSIDE, &build::ndp_solicit(ROUTER_MAC, CLIENT6, NODE6));
    assert_eq!(out.len(), 1, "only the answer: {out:?}");
    assert_eq!(gw.counters().unsolicited_adverts_sent, 3);
}

#[test]
fn solicitations_are_answered_through_the_pipeline_for_announced_addresses_only() {
    let mut gw = gateway6();
    for target in [NODE6, VIP6] {
        let (v, out) = gw.send(OUTSIDE, &build::ndp_solicit(ROUTER_MAC, CLIENT6, target));
        assert_eq!(v, Verdict::Reply, "{target}");
        assert_eq!(
            out,
            vec![(
                OUTSIDE,
                build::ndp_advert(OUT_MAC, target, ROUTER_MAC, CLIENT6)
            )],
            "{target}"
        );
    }
    let c = gw.counters();
    assert_eq!(c.local_replies, 2);
    for (port, target, verdict) in [
        (
            OUTSIDE,
            VIP6_ELSEWHERE,
            Verdict::Drop(DropReason::NdpNotAnnounced),
        ),
        (INSIDE, NODE6, Verdict::Drop(DropReason::NdpNotOwned)),
        (OUTSIDE, SNAT6, Verdict::Drop(DropReason::NdpNotOwned)),
        (OUTSIDE, CLIENT6, Verdict::Drop(DropReason::NdpNotOwned)),
    ] {
        let (v, out) = gw.send(port, &build::ndp_solicit(ROUTER_MAC, CLIENT6, target));
        assert_eq!(v, verdict, "{target} on port {port}");
        assert!(out.is_empty());
    }
    // The host address's solicitation is the kernel's (no host path here:
    // dropped as such).
    let (v, out) = gw.send(OUTSIDE, &build::ndp_solicit(ROUTER_MAC, CLIENT6, HOST6));
    assert_eq!(v, Verdict::Host);
    assert!(out.is_empty());
    // A solicitation that is not from the link (hop limit 254): dropped by
    // the parse stage, nothing answered, and the next one still is.
    let mut off_link = build::ndp_solicit(ROUTER_MAC, CLIENT6, NODE6);
    off_link[14 + 7] = 254;
    let (v, out) = gw.send(OUTSIDE, &off_link);
    assert_eq!(v, Verdict::Drop(DropReason::NdpBadHopLimit));
    assert!(out.is_empty());
    let (v, _) = gw.send(OUTSIDE, &build::ndp_solicit(ROUTER_MAC, CLIENT6, NODE6));
    assert_eq!(v, Verdict::Reply);
}

/// A failover moves a VIP to this instance: one unsolicited advertisement
/// at once and its solicitations answered; losing the election silences
/// it again (and winning it back advertises it again).
#[test]
fn an_ipv6_vip_is_advertised_when_this_instance_is_elected_for_it() {
    let mut gw = gateway6();
    let ask = |gw: &mut Gateway| {
        gw.send(
            OUTSIDE,
            &build::ndp_solicit(ROUTER_MAC, CLIENT6, VIP6_ELSEWHERE),
        )
        .0
    };
    assert_eq!(ask(&mut gw), Verdict::Drop(DropReason::NdpNotAnnounced));
    for round in 0..2 {
        let before = gw.counters().unsolicited_adverts_sent;
        let snap = gw
            .builder
            .set_announce(AnnounceFilter::all())
            .expect("the VIP's flag flips");
        gw.publisher.publish(snap);
        gw.worker.poll();
        assert_eq!(
            gw.worker.driver_mut().take_tx(OUTSIDE),
            vec![unsolicited(OUT_MAC, VIP6_ELSEWHERE)],
            "round {round}"
        );
        assert_eq!(gw.counters().unsolicited_adverts_sent, before + 1);
        assert_eq!(ask(&mut gw), Verdict::Reply);
        let snap = gw
            .builder
            .set_announce(AnnounceFilter::only_ip(|vip| vip != VIP6_ELSEWHERE))
            .expect("flips back");
        gw.publisher.publish(snap);
        gw.worker.poll();
        assert!(gw.worker.driver_mut().take_tx(OUTSIDE).is_empty());
        assert_eq!(ask(&mut gw), Verdict::Drop(DropReason::NdpNotAnnounced));
    }
}

fn solicit(port_mac: MacAddr, source: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let mut buf = [0u8; ndp::NDP_FRAME_BYTES];
    let len = ndp::write_solicit(&mut buf, port_mac.0, source, target);
    buf[..len].to_vec()
}

/// The first packets to an IPv6 backend wait while the gateway solicits
/// it from the inside port's SNAT address; its advertisement releases
/// them, translated, to its MAC; later packets go straight out.
#[test]
fn an_ipv6_backend_is_resolved_by_ndp_while_its_first_packets_wait() {
    let mut gw = gateway6();
    let syn6 = |sport| {
        build::eth_ipv6_tcp(
            ROUTER_MAC,
            OUT_MAC,
            (CLIENT6, sport),
            (VIP6, 80),
            F::SYN,
            1,
            0,
            b"",
        )
    };
    let (v, out) = gw.send(OUTSIDE, &syn6(40_000));
    assert_eq!(v, Verdict::AwaitNeighbour(INSIDE));
    assert_eq!(
        out,
        vec![(INSIDE, solicit(IN_MAC, SNAT6, BACKEND6))],
        "one solicitation, to the backend's solicited-node group"
    );
    let (v, out) = gw.send(OUTSIDE, &syn6(40_001));
    assert_eq!(v, Verdict::AwaitNeighbour(INSIDE));
    assert!(out.is_empty(), "no second solicitation within retrans_ms");
    let na = build::ndp_advert(MacAddr(BACKEND_MAC), BACKEND6, IN_MAC, SNAT6);
    let (v, out) = gw.send(INSIDE, &na);
    assert_eq!(v, Verdict::Consumed);
    assert_eq!(out.len(), 2, "both held SYNs leave");
    for (port, frame) in &out {
        assert_eq!(*port, INSIDE);
        assert_eq!(&frame[..12], &[BACKEND_MAC, IN_MAC.0].concat()[..]);
        let ip = ipv6::Packet::new_checked(&frame[14..]).unwrap();
        assert_eq!((ip.src_addr(), ip.dst_addr()), (SNAT6, BACKEND6));
        assert_eq!(&ip.payload()[2..4], &8080u16.to_be_bytes());
        assert!(checksum::verify_l4_v6(
            ip.src_addr(),
            ip.dst_addr(),
            ip.next_header(),
            ip.payload()
        ));
    }
    let c = gw.counters();
    assert_eq!(
        (c.ndp_learned, c.ndp_solicits_sent, c.neighbour_held_sent),
        (1, 1, 2)
    );
    assert_eq!(gw.send(OUTSIDE, &syn6(40_002)).0, Verdict::Forward(INSIDE));
}

/// The text of `ip -6 neigh show <addr> dev <dev>` in `ns`.
fn neigh(ns: &Netns, addr: Ipv6Addr, dev: &str) -> String {
    let out = ns
        .exec_unchecked(
            "ip",
            &["-6", "neigh", "show", &addr.to_string(), "dev", dev],
        )
        .expect("ip -6 neigh");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Poll `probe` every 100 ms for up to `timeout`.
fn eventually(timeout: Duration, mut probe: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if probe() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Real Linux neighbours and the gateway resolve each other by NDP, end to
/// end: `curl -6` in the client namespace fetches from nginx in the backend
/// namespace through the VIP (the client resolves the VIP, the gateway
/// resolves the backend while the SYN waits, the backend resolves the SNAT
/// address); `ip -6 neigh` on both sides shows the port's MAC, the
/// gateway's table the backend's; and the client's duplicate address
/// detection of the VIP finds the address taken.
#[test]
fn linux_neighbours_and_the_gateway_resolve_each_other_by_ndp() {
    let test = "ndp::linux_neighbours_and_the_gateway_resolve_each_other_by_ndp";
    if !require_root(test)
        || !require_programs(
            test,
            &["ip", "ping", "curl", "nginx", "ethtool"],
            "apt-get install iproute2 iputils-ping curl nginx-light ethtool",
        )
    {
        return;
    }
    // The gateway namespace's kernel keeps out of IPv6 on the ports.
    let Topology {
        client,
        gateway,
        backend,
    } = Topology::new("ndp", BACKEND_MAC, [false, true, false]);
    for (ns, dev, addr) in [(&client, "cl", CLIENT6), (&backend, "be", BACKEND6)] {
        let cidr = format!("{addr}/64");
        ns.exec("ip", &["-6", "addr", "add", &cidr, "dev", dev, "nodad"])
            .expect("address");
        // Full checksums on the wire: the af_packet driver completes the
        // partial (offloaded) checksums of IPv4 only so far.
        ns.exec("ethtool", &["-K", dev, "tx", "off"])
            .expect("ethtool tx off");
    }
    let (_nginx, _nginx_dir) =
        portico_netns::nginx(&backend, "be6", &format!("[{BACKEND6}]:8080")).expect("nginx");

    let driver = in_netns(&gateway, || {
        let mut c = AfPacketConfig::new(&["go", "gi"]);
        c.pool_frames = 512;
        c.poll_timeout_ms = 10;
        AfPacketDriver::open(&c)
    })
    .expect("open the driver");
    let (_, snapshot) = snapshot6();
    let publisher = Publisher::new(snapshot);
    let shared = Arc::new(SharedCounters::default());
    let table = Arc::new(NeighbourTable::default());
    let mut worker = Worker::new(
        &WorkerConfig {
            pipeline: pipeline_config(0, 1),
            batch_size: 64,
            idle: IdlePolicy::ADAPTIVE,
        },
        driver,
        MonotonicClock::new(),
        publisher.reader(),
        Arc::clone(&shared),
        None,
        Arc::clone(&table),
    )
    .expect("valid pipeline config");
    let stop = Arc::new(AtomicBool::new(false));
    let runner = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let cells: Vec<PortStatsCell> = (0..2).map(|_| PortStatsCell::default()).collect();
            worker.run(&stop, &cells);
        })
    };

    // The node address: solicited by a ping, answered by the gateway (the
    // echo reply too).
    let ping = client
        .exec_unchecked("ping", &["-6", "-c", "1", "-W", "2", &NODE6.to_string()])
        .expect("ping");
    let node_entry = neigh(&client, NODE6, "cl");
    // The VIP, end to end (nginx may take a moment to listen: a few tries).
    let url = format!("http://[{VIP6}]:80/");
    let mut body = String::new();
    let fetched = eventually(Duration::from_secs(10), || {
        let out = client
            .exec_unchecked("curl", &["-6", "-sS", "--max-time", "2", &url])
            .expect("curl");
        body = String::from_utf8_lossy(&out.stdout).into_owned();
        out.status.success()
    });
    let vip_entry = neigh(&client, VIP6, "cl");
    let snat_entry = neigh(&backend, SNAT6, "be");
    let learned = table.peek(INSIDE, BACKEND6);
    // Duplicate address detection of the VIP: the gateway defends it.
    client
        .exec("sysctl", &["-qw", "net.ipv6.conf.cl.accept_dad=1"])
        .expect("accept_dad");
    let vip_cidr = format!("{VIP6}/64");
    client
        .exec("ip", &["-6", "addr", "add", &vip_cidr, "dev", "cl"])
        .expect("add the VIP for DAD");
    let dad_failed = eventually(Duration::from_secs(10), || {
        let out = client
            .exec_unchecked("ip", &["-6", "addr", "show", "dev", "cl"])
            .expect("ip addr");
        String::from_utf8_lossy(&out.stdout).contains("dadfailed")
    });

    stop.store(true, Ordering::SeqCst);
    runner.join().expect("worker thread");
    let counters = shared.read().0;
    let resolved = |entry: &str, mac: &str| {
        entry.contains(mac) && !entry.contains("FAILED") && !entry.contains("INCOMPLETE")
    };
    let (out_mac, in_mac) = ("02:00:00:00:00:01", "02:00:00:00:00:02");
    assert!(
        resolved(&node_entry, out_mac),
        "the node address: `{node_entry}`"
    );
    assert!(
        ping.status.success(),
        "ping -6 of the node address: {ping:?}"
    );
    assert!(
        fetched && body == format!("backend be6 saw {SNAT6}\n"),
        "curl -6 through the VIP, full NAT from the SNAT address: `{body}` {counters:?}"
    );
    assert!(resolved(&vip_entry, out_mac), "the VIP: `{vip_entry}`");
    assert!(
        resolved(&snat_entry, in_mac),
        "the backend resolved the SNAT address: `{snat_entry}`"
    );
    assert_eq!(
        learned,
        Some(BACKEND_MAC),
        "the gateway learned the backend"
    );
    assert!(counters.ndp_solicits_sent >= 1, "{counters:?}");
    assert!(counters.neighbour_held_sent >= 1, "{counters:?}");
    assert!(dad_failed, "DAD of the VIP was answered: {counters:?}");
}
