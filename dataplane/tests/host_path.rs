//! The host path's verdict on the mem driver (pipeline fixtures: frame in
//! → verdict, nothing answered by the dataplane), and, as root, a real TAP
//! behind the worker: the kernel's answers come back out of the port.
//!
//! The fixture gateway of `common` with a host address on the outside
//! port: ARP for it (on that port), ICMP echo to it, TCP and UDP to it and
//! ICMP errors about the kernel's packets get [`Verdict::Host`]; the
//! dataplane answers none of them and announces no host address. With
//! an IPv6 host address on the real TAP, NDP and ICMPv6 echo for it are
//! answered by the kernel too.

mod common;

use common::*;
use dataplane::counters::DropReason;
use dataplane::driver::hostpath::{HostInterfaceSpec, HostPath, create_host_interface};
use dataplane::packet::Verdict;
use dataplane::snapshot::AddrRole;
use dataplane::wire::tcp::flags as F;
use dataplane::wire::{MacAddr, build, ipv4};
use portico_netns::{Netns, in_netns, require_root};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

const HOST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const ASKER: MacAddr = MacAddr([0x02, 0xcc, 0, 0, 0, 9]);
const ASKER_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 254);

fn gateway() -> Gateway {
    let mut spec = spec(vec![web(&[0])]);
    spec.addresses.push((HOST.into(), OUTSIDE, AddrRole::Host));
    Gateway::with_spec(spec, pipeline_config(0, 1))
}

/// Frames addressed to the host address, each expected to go to the host
/// path.
fn host_frames() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("ARP request", build::arp_request(ASKER, ASKER_IP, HOST)),
        (
            "ARP reply",
            build::arp_reply(ASKER, ASKER_IP, OUT_MAC, HOST),
        ),
        (
            "echo request",
            build::eth_ipv4_icmp_echo(ROUTER_MAC, OUT_MAC, CLIENT, HOST, 8, 7, 1, b"ping"),
        ),
        (
            "echo reply",
            build::eth_ipv4_icmp_echo(ROUTER_MAC, OUT_MAC, CLIENT, HOST, 0, 7, 1, b"pong"),
        ),
        (
            "TCP SYN to BGP",
            build::eth_ipv4_tcp(
                ROUTER_MAC,
                OUT_MAC,
                CLIENT,
                40_000,
                HOST,
                179,
                F::SYN,
                1,
                0,
                b"",
            ),
        ),
        (
            "TCP ACK",
            build::eth_ipv4_tcp(
                ROUTER_MAC,
                OUT_MAC,
                CLIENT,
                40_000,
                HOST,
                179,
                F::ACK,
                2,
                9,
                b"x",
            ),
        ),
        (
            "UDP",
            build::eth_ipv4_udp(ROUTER_MAC, OUT_MAC, CLIENT, 5000, HOST, 161, b"snmp"),
        ),
    ]
}

/// A UDP frame to `dst` turned into a first fragment (MF set) or into
/// protocol `proto` (GRE: 47), its header checksum recomputed.
fn ipv4_variant(dst: Ipv4Addr, fragment: bool, proto: Option<u8>) -> Vec<u8> {
    let mut frame = build::eth_ipv4_udp(ROUTER_MAC, OUT_MAC, CLIENT, 5000, dst, 5000, b"x");
    if fragment {
        frame[14 + 6] |= 0x20;
    }
    if let Some(p) = proto {
        frame[14 + 9] = p;
    }
    let mut ip = ipv4::Packet::new_unchecked(&mut frame[14..]);
    ip.fill_checksum();
    frame
}

#[test]
fn fragments_and_other_protocols_go_to_a_host_address_and_are_dropped_elsewhere() {
    let mut gw = gateway();
    for (what, fragment, proto) in [("fragment", true, None), ("GRE", false, Some(47))] {
        let (v, out) = gw.send(OUTSIDE, &ipv4_variant(HOST, fragment, proto));
        assert_eq!(v, Verdict::Host, "{what} to the host address");
        assert!(out.is_empty());
        let reason = if fragment {
            DropReason::Ipv4Fragment
        } else {
            DropReason::UnsupportedProtocol
        };
        for dst in [VIP, NODE] {
            let (v, out) = gw.send(OUTSIDE, &ipv4_variant(dst, fragment, proto));
            assert_eq!(v, Verdict::Drop(reason), "{what} to {dst}");
            assert!(out.is_empty());
        }
    }
}

#[test]
fn frames_for_a_host_address_get_the_host_verdict_and_no_answer() {
    let mut gw = gateway();
    assert!(
        !gw.announcements.is_empty()
            && gw
                .announcements
                .iter()
                .all(|(_, f)| !f.windows(4).any(|w| w == HOST.octets())),
        "no gratuitous ARP for a host address: {:?}",
        gw.announcements
    );
    let frames = host_frames();
    for (what, frame) in &frames {
        let (v, out) = gw.send(OUTSIDE, frame);
        assert_eq!(v, Verdict::Host, "{what}");
        assert!(out.is_empty(), "{what}: the dataplane answers nothing");
    }
    let c = gw.counters();
    assert_eq!(c.local_replies, 0);
    // Without a host path attached, each is dropped and counted.
    assert_eq!(c.dropped(DropReason::HostPathDown), frames.len() as u64);
    assert_eq!(c.to_host, 0);

    // ARP for the host address on the other port is not ours.
    let (v, _) = gw.send(INSIDE, &build::arp_request(ASKER, ASKER_IP, HOST));
    assert_eq!(v, Verdict::Drop(DropReason::ArpNotOwned));
    // The node address is still answered by the dataplane, the VIP still
    // forwarded.
    let (v, out) = gw.send(OUTSIDE, &build::arp_request(ASKER, ASKER_IP, NODE));
    assert_eq!(v, Verdict::Reply);
    assert_eq!(
        out,
        vec![(OUTSIDE, build::arp_reply(OUT_MAC, NODE, ASKER, ASKER_IP))]
    );
    let syn = build::eth_ipv4_tcp(
        ROUTER_MAC,
        OUT_MAC,
        CLIENT,
        40_001,
        VIP,
        80,
        F::SYN,
        1,
        0,
        b"",
    );
    let (v, out) = gw.send(OUTSIDE, &syn);
    assert_eq!(v, Verdict::Forward(INSIDE));
    assert_eq!(out.len(), 1);
}

/// The frames the worker sent out of the outside port, `first` and then
/// polling until one is an IPv4 or ARP frame (the kernel answers from its
/// softirq, a moment after the write), up to 5 s.
fn kernel_answer(gw: &mut Gateway, first: Vec<(u8, Vec<u8>)>) -> Option<Vec<u8>> {
    let ours = |f: &Vec<u8>| f.get(12..14).is_some_and(|t| t == [8, 0] || t == [8, 6]);
    let mut sent: Vec<Vec<u8>> = first.into_iter().map(|(_, f)| f).collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        assert!(
            sent.iter().all(ours),
            "only IPv4 and ARP leave the host path (no IPv6 on it): {sent:?}"
        );
        if let Some(f) = sent.into_iter().next() {
            return Some(f);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
        gw.worker.poll();
        sent = gw.worker.driver_mut().take_tx(OUTSIDE);
    }
}

#[test]
fn a_real_tap_answers_arp_and_ping_for_the_host_address_through_the_port() {
    let test = "host_path::a_real_tap_answers_arp_and_ping_for_the_host_address_through_the_port";
    if !require_root(test) {
        return;
    }
    let ns = Netns::new("hp").expect("namespace");
    let queues = in_netns(&ns, || {
        create_host_interface(
            &HostInterfaceSpec {
                name: "tap-hp0".into(),
                mac: OUT_MAC.0,
                mtu: 1500,
                addresses: vec![(HOST.into(), 24)],
            },
            1,
        )
    })
    .expect("the TAP is created");
    let mut gw = gateway();
    gw.worker.attach_host_path(HostPath::new(
        queues.into_iter().map(Some).chain([None]).collect(),
    ));

    // ARP: the kernel's reply, from the port's MAC, out of the port.
    let (v, out) = gw.send(OUTSIDE, &build::arp_request(ASKER, ASKER_IP, HOST));
    assert_eq!(v, Verdict::Host);
    let reply = kernel_answer(&mut gw, out).expect("the kernel answers ARP");
    assert_eq!(reply, build::arp_reply(OUT_MAC, HOST, ASKER, ASKER_IP));

    // Ping: the kernel's echo reply (it learned the asker's MAC from the
    // request), out of the port.
    let ping = build::eth_ipv4_icmp_echo(ASKER, OUT_MAC, ASKER_IP, HOST, 8, 7, 1, b"abcdefgh");
    let (v, out) = gw.send(OUTSIDE, &ping);
    assert_eq!(v, Verdict::Host);
    let pong = kernel_answer(&mut gw, out).expect("the kernel answers the ping");
    let expected = build::eth_ipv4_icmp_echo(OUT_MAC, ASKER, HOST, ASKER_IP, 0, 7, 1, b"abcdefgh");
    // The kernel picks its own IP id and TTL: compare all but those.
    assert_eq!(pong.len(), expected.len());
    assert_eq!(&pong[..18], &expected[..18], "L2 and IP header start");
    assert_eq!(&pong[26..], &expected[26..], "addresses and ICMP message");
    assert!(checksums_valid(&pong));
    let c = gw.counters();
    assert_eq!((c.to_host, c.from_host), (2, 2), "{c:?}");
    assert_eq!(c.local_replies, 0);
}

/// The frames the worker sent out of the outside port, polling (up to
/// 5 s) until one satisfies `want` (the kernel also sends its own IPv6
/// frames: MLD reports, a router solicitation). Returns that frame.
fn kernel_frame_where(
    gw: &mut Gateway,
    first: Vec<(u8, Vec<u8>)>,
    want: impl Fn(&[u8]) -> bool,
) -> Option<Vec<u8>> {
    let mut sent: Vec<Vec<u8>> = first.into_iter().map(|(_, f)| f).collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(f) = sent.into_iter().find(|f| want(f)) {
            return Some(f);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
        gw.worker.poll();
        sent = gw.worker.driver_mut().take_tx(OUTSIDE);
    }
}

/// ICMPv6 type of an untagged IPv6 frame without extension headers.
fn icmpv6_type(f: &[u8]) -> Option<u8> {
    (f.get(12..14)? == [0x86, 0xdd] && *f.get(14 + 6)? == 58).then(|| f.get(54).copied())?
}

#[test]
fn a_real_tap_answers_ndp_and_ping_for_an_ipv6_host_address_through_the_port() {
    let test =
        "host_path::a_real_tap_answers_ndp_and_ping_for_an_ipv6_host_address_through_the_port";
    if !require_root(test) {
        return;
    }
    let host6: Ipv6Addr = "2001:db8:2::2".parse().unwrap();
    let asker6: Ipv6Addr = "2001:db8:2::fe".parse().unwrap();
    let ns = Netns::new("hp6").expect("namespace");
    let queues = in_netns(&ns, || {
        create_host_interface(
            &HostInterfaceSpec {
                name: "tap-hp6".into(),
                mac: OUT_MAC.0,
                mtu: 1500,
                addresses: vec![(HOST.into(), 24), (host6.into(), 64)],
            },
            1,
        )
    })
    .expect("the TAP is created");
    let mut spec = spec(vec![web(&[0])]);
    spec.addresses.push((HOST.into(), OUTSIDE, AddrRole::Host));
    spec.addresses.push((host6.into(), OUTSIDE, AddrRole::Host));
    let mut gw = Gateway::with_spec(spec, pipeline_config(0, 1));
    gw.worker.attach_host_path(HostPath::new(
        queues.into_iter().map(Some).chain([None]).collect(),
    ));

    // NDP: the solicitation goes to the kernel, whose advertisement of the
    // host address (at the port's MAC) leaves through the port. No DAD:
    // the address answers at once.
    let (v, out) = gw.send(OUTSIDE, &build::ndp_solicit(ASKER, asker6, host6));
    assert_eq!(v, Verdict::Host, "NDP for a host address is the kernel's");
    let na = kernel_frame_where(&mut gw, out, |f| icmpv6_type(f) == Some(136))
        .expect("the kernel advertises the host address");
    assert_eq!(&na[0..6], &ASKER.0, "to the asker");
    assert_eq!(&na[6..12], &OUT_MAC.0, "from the port's MAC");
    assert_eq!(&na[22..38], &host6.octets(), "from the host address");
    assert_eq!(&na[62..78], &host6.octets(), "target: the host address");

    // Echo: the kernel's reply, out of the port.
    let ping = build::eth_ipv6_echo(ASKER, OUT_MAC, (asker6, host6), 128, (7, 1), b"abcdefgh");
    let (v, out) = gw.send(OUTSIDE, &ping);
    assert_eq!(v, Verdict::Host);
    let pong = kernel_frame_where(&mut gw, out, |f| icmpv6_type(f) == Some(129))
        .expect("the kernel answers ping -6");
    assert_eq!(&pong[0..6], &ASKER.0);
    assert_eq!(&pong[22..38], &host6.octets());
    assert_eq!(&pong[38..54], &asker6.octets());
    let c = gw.counters();
    assert_eq!(c.to_host, 2, "{c:?}");
    assert!(c.from_host >= 2, "{c:?}");
    assert_eq!(c.local_replies, 0, "the dataplane answered nothing");
}
