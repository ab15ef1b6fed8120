//! NDP through the whole pipeline (RFC 4861): the fixture gateway of
//! `common` with IPv6 addresses — node address on the outside port, a VIP
//! there, an SNAT address inside, a host address — on the mem driver
//! (frame in → verdict and frames out), and, as root, a worker on af_packet
//! in a namespace that real Linux neighbours resolve by NDP.

mod common;

use common::*;
use dataplane::clock::MonotonicClock;
use dataplane::counters::{DropReason, SharedCounters};
use dataplane::driver::PortStatsCell;
use dataplane::driver::afpacket::{AfPacketConfig, AfPacketDriver};
use dataplane::neighbour::NeighbourTable;
use dataplane::packet::{PortId, Verdict};
use dataplane::snapshot::{OwnedAddr, Publisher, Snapshot, SnapshotBuilder};
use dataplane::stage::ndp;
use dataplane::wire::{MacAddr, build};
use dataplane::worker::{IdlePolicy, Worker, WorkerConfig};
use portico_netns::{Netns, Veth, in_netns, require_programs, require_root};
use std::net::Ipv6Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const NODE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 1);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 0x10);
/// A VIP another instance is elected to announce.
const VIP6_ELSEWHERE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 0x11);
const HOST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 2);
const SNAT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 2, 0, 0, 0, 1);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 7);

/// The IPv6 addresses of the fixture (the snapshot's builder takes IPv4
/// only here, so the test adds them to the snapshot it publishes).
fn owned6() -> Vec<(Ipv6Addr, OwnedAddr)> {
    let own = |port: PortId| OwnedAddr {
        port,
        announce: true,
        ..OwnedAddr::default()
    };
    vec![
        (
            NODE6,
            OwnedAddr {
                node: true,
                ..own(OUTSIDE)
            },
        ),
        (
            VIP6,
            OwnedAddr {
                vip: true,
                ..own(OUTSIDE)
            },
        ),
        (
            VIP6_ELSEWHERE,
            OwnedAddr {
                vip: true,
                announce: false,
                ..own(OUTSIDE)
            },
        ),
        (
            HOST6,
            OwnedAddr {
                port: OUTSIDE,
                host: true,
                ..OwnedAddr::default()
            },
        ),
        (
            SNAT6,
            OwnedAddr {
                snat: true,
                ..own(INSIDE)
            },
        ),
    ]
}

fn snapshot6() -> (SnapshotBuilder, Snapshot) {
    let mut builder = SnapshotBuilder::new();
    let mut snapshot = builder
        .build(&spec(vec![web(&[0])]))
        .expect("valid fixture spec");
    for (addr, o) in owned6() {
        snapshot.owned6.insert(addr, o);
    }
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

/// A real Linux neighbour resolves the gateway's IPv6 node address and VIP
/// by NDP (its neighbour cache holds the port's MAC), and its duplicate
/// address detection of the VIP finds the address taken.
#[test]
fn a_linux_neighbour_resolves_the_gateways_ipv6_addresses_by_ndp() {
    let test = "ndp::a_linux_neighbour_resolves_the_gateways_ipv6_addresses_by_ndp";
    if !require_root(test)
        || !require_programs(
            test,
            &["ip", "ping"],
            "apt-get install iproute2 iputils-ping",
        )
    {
        return;
    }
    let client = Netns::new("ndpc").expect("client namespace");
    let gateway = Netns::new("ndpg").expect("gateway namespace");
    let backend = Netns::new("ndpb").expect("backend namespace");
    // The gateway namespace's kernel keeps out of IPv6 on the ports.
    gateway
        .exec(
            "sysctl",
            &[
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ],
        )
        .expect("sysctl disable_ipv6");
    Veth::new(&client, "cl", &gateway, "go")
        .macs(ROUTER_MAC.0, OUT_MAC.0)
        .create()
        .expect("client veth");
    Veth::new(&gateway, "gi", &backend, "be")
        .macs(IN_MAC.0, [2, 0xbe, 0, 0, 0, 1])
        .create()
        .expect("backend veth");
    client
        .exec(
            "ip",
            &[
                "-6",
                "addr",
                "add",
                &format!("{CLIENT6}/64"),
                "dev",
                "cl",
                "nodad",
            ],
        )
        .expect("client address");

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
    let mut worker = Worker::new(
        &WorkerConfig {
            pipeline: pipeline_config(0, 1),
            batch_size: 64,
            idle: IdlePolicy::Adaptive,
        },
        driver,
        MonotonicClock::new(),
        publisher.reader(),
        Arc::clone(&shared),
        None,
        Arc::new(NeighbourTable::default()),
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

    let mac = "02:00:00:00:00:01";
    let mut resolved = Vec::new();
    for addr in [NODE6, VIP6] {
        // A ping makes the kernel solicit the address (whether or not an
        // echo reply comes: the neighbour entry is what is checked).
        let _ = client.exec_unchecked("ping", &["-6", "-c", "1", "-W", "1", &addr.to_string()]);
        let ok = eventually(Duration::from_secs(5), || {
            let n = neigh(&client, addr, "cl");
            n.contains(mac) && !n.contains("FAILED") && !n.contains("INCOMPLETE")
        });
        resolved.push((addr, ok, neigh(&client, addr, "cl")));
    }
    // Duplicate address detection of the VIP: the gateway defends it.
    client
        .exec("sysctl", &["-qw", "net.ipv6.conf.cl.accept_dad=1"])
        .expect("accept_dad");
    client
        .exec(
            "ip",
            &["-6", "addr", "add", &format!("{VIP6}/64"), "dev", "cl"],
        )
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
    for (addr, ok, entry) in resolved {
        assert!(ok, "{addr} resolved to {mac}: `{entry}` {counters:?}");
    }
    assert!(dad_failed, "DAD of the VIP was answered: {counters:?}");
    assert!(counters.local_replies >= 3, "{counters:?}");
}
