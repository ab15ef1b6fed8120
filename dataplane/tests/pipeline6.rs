//! IPv6 through the whole worker (issue 17), golden frames built
//! independently of the dataplane's incremental updates (every checksum
//! computed from scratch by `wire::build`): VIP → backend with full NAT
//! from an IPv6 SNAT address and the reply, NodePort, a service without
//! SNAT, ICMPv6 echo, Packet Too Big, Time Exceeded, and every IPv6 drop
//! of the parse stage with the service unaffected.

mod common;

use common::ipv6::*;
use common::*;
use dataplane::counters::DropReason;
use dataplane::flow::{FlowKey6, Proto};
use dataplane::packet::Verdict;
use dataplane::wire::icmpv6::msg_type;
use dataplane::wire::ipv6::next_header;
use dataplane::wire::tcp::flags as F;
use dataplane::wire::{build, checksum, ipv6};
use std::net::Ipv6Addr;

/// The IPv6 flow of a client key.
fn flow6(gw: &Gateway, key: &FlowKey6) -> dataplane::conntrack::Flow<Ipv6Addr> {
    let t = gw.worker.pipeline().ipv6().expect("IPv6 tables");
    let (id, _) = t.ct.lookup(key, t.ct.hash(key)).expect("flow");
    *t.ct.flow(id)
}

/// Every checksum of an Ethernet/IPv6 frame without extension headers,
/// from scratch.
fn checksums6_valid(frame: &[u8]) -> bool {
    let ip = ipv6::Packet::new_checked(&frame[14..]).unwrap();
    checksum::verify_l4_v6(ip.src_addr(), ip.dst_addr(), ip.next_header(), ip.payload())
}

#[test]
fn vip_to_backend_with_full_nat_from_an_ipv6_snat_address_and_back() {
    let mut gw = gateway6();
    let syn = client_syn6(VIP6, 80, CPORT, b"");
    let (verdict, out) = gw.send(OUTSIDE, &syn);
    assert_eq!(verdict, Verdict::Forward(INSIDE));
    let key = FlowKey6::new(Proto::Tcp, CLIENT6, CPORT, VIP6, 80);
    let flow = flow6(&gw, &key);
    let r = *flow.reply();
    assert_eq!((r.src_ip, r.src_port, r.dst_ip), (backend6(0), 8080, SNAT6));
    let expected = with_hop(
        build::eth_ipv6_tcp(
            IN_MAC,
            backend6_mac(0),
            (SNAT6, r.dst_port),
            (backend6(0), 8080),
            F::SYN,
            1000,
            0,
            b"",
        ),
        63,
    );
    assert_eq!(out, vec![(INSIDE, expected)]);
    assert!(checksums6_valid(&out[0].1));

    // The backend's SYN-ACK goes back to the client from the VIP.
    let synack = build::eth_ipv6_tcp(
        backend6_mac(0),
        IN_MAC,
        (backend6(0), 8080),
        (SNAT6, r.dst_port),
        F::SYN | F::ACK,
        5000,
        1001,
        b"",
    );
    let (verdict, out) = gw.send(INSIDE, &synack);
    assert_eq!(verdict, Verdict::Forward(OUTSIDE));
    let expected = with_hop(
        build::eth_ipv6_tcp(
            OUT_MAC,
            CLIENT_MAC6,
            (VIP6, 80),
            (CLIENT6, CPORT),
            F::SYN | F::ACK,
            5000,
            1001,
            b"",
        ),
        63,
    );
    assert_eq!(out, vec![(OUTSIDE, expected)]);
    // Data both ways.
    let ack = build::eth_ipv6_tcp(
        CLIENT_MAC6,
        OUT_MAC,
        (CLIENT6, CPORT),
        (VIP6, 80),
        F::ACK | F::PSH,
        1001,
        5001,
        b"GET / HTTP/1.1\r\n\r\n",
    );
    let (verdict, out) = gw.send(OUTSIDE, &ack);
    assert_eq!(verdict, Verdict::Forward(INSIDE));
    assert!(checksums6_valid(&out[0].1));
    let c = gw.counters();
    assert_eq!(c.flows_created, 1);
    assert_eq!(c.snat_allocations, 1);
    assert_eq!(c.total_drops(), 0);
    assert!(gw.worker.pipeline().conntrack().is_empty(), "not in IPv4's");
}

#[test]
fn nodeport_and_a_service_without_snat_forward_over_ipv6() {
    let mut gw = gateway6();
    let (verdict, out) = gw.send(OUTSIDE, &client_syn6(NODE6, NODE_PORT, 40001, b""));
    assert_eq!(verdict, Verdict::Forward(INSIDE));
    let ip = ipv6::Packet::new_checked(&out[0].1[14..]).unwrap();
    assert_eq!((ip.src_addr(), ip.dst_addr()), (SNAT6, backend6(0)));
    assert!(checksums6_valid(&out[0].1));

    // UDP without SNAT: the client's address reaches the backend.
    let q = build::eth_ipv6_udp(CLIENT_MAC6, OUT_MAC, (CLIENT6, 5353), (VIP6, 53), b"query");
    let (verdict, out) = gw.send(OUTSIDE, &q);
    assert_eq!(verdict, Verdict::Forward(INSIDE));
    let expected = with_hop(
        build::eth_ipv6_udp(
            IN_MAC,
            backend6_mac(1),
            (CLIENT6, 5353),
            (backend6(1), 5353),
            b"query",
        ),
        63,
    );
    assert_eq!(out, vec![(INSIDE, expected)]);
    let answer = build::eth_ipv6_udp(
        backend6_mac(1),
        IN_MAC,
        (backend6(1), 5353),
        (CLIENT6, 5353),
        b"answer",
    );
    let (verdict, out) = gw.send(INSIDE, &answer);
    assert_eq!(verdict, Verdict::Forward(OUTSIDE));
    let expected = with_hop(
        build::eth_ipv6_udp(OUT_MAC, CLIENT_MAC6, (VIP6, 53), (CLIENT6, 5353), b"answer"),
        63,
    );
    assert_eq!(out, vec![(OUTSIDE, expected)]);
}

#[test]
fn echo_requests_to_owned_ipv6_addresses_are_answered() {
    let mut gw = gateway6();
    let ping = build::eth_ipv6_echo(
        CLIENT_MAC6,
        OUT_MAC,
        (CLIENT6, NODE6),
        msg_type::ECHO_REQUEST,
        (7, 1),
        b"abcdefgh",
    );
    let (verdict, out) = gw.send(OUTSIDE, &ping);
    assert_eq!(verdict, Verdict::Reply);
    let expected = build::eth_ipv6_echo(
        OUT_MAC,
        CLIENT_MAC6,
        (NODE6, CLIENT6),
        msg_type::ECHO_REPLY,
        (7, 1),
        b"abcdefgh",
    );
    assert_eq!(out, vec![(OUTSIDE, expected)]);
    // Not owned: dropped.
    let stray = build::eth_ipv6_echo(
        CLIENT_MAC6,
        OUT_MAC,
        (CLIENT6, "2001:db8:9::1".parse().unwrap()),
        msg_type::ECHO_REQUEST,
        (7, 2),
        b"",
    );
    assert_eq!(
        gw.send(OUTSIDE, &stray).0,
        Verdict::Drop(DropReason::NotOwned)
    );
}

/// The ICMPv6 error the gateway should send about `offending`: from the
/// outside port's IPv6 address, quoting the IPv6 header and 8 bytes of
/// the upper layer, hop limit 64, checksum from scratch.
fn expected_error6(offending: &[u8], t: u8, word: u32) -> Vec<u8> {
    let quote = &offending[14..14 + 40 + 8];
    build::eth_ipv6_icmpv6(
        (OUT_MAC, CLIENT_MAC6),
        (NODE6, CLIENT6),
        (t, 0, word),
        quote,
    )
}

#[test]
fn oversized_packets_get_packet_too_big_and_expiring_ones_time_exceeded() {
    let mut gw = gateway6();
    // Establish a flow, then send 1500 bytes of payload (1560 > MTU 1500).
    gw.send(OUTSIDE, &client_syn6(VIP6, 80, 40002, b""));
    let big = build::eth_ipv6_tcp(
        CLIENT_MAC6,
        OUT_MAC,
        (CLIENT6, 40002),
        (VIP6, 80),
        F::ACK,
        1001,
        1,
        &[0x55; 1500],
    );
    let (verdict, out) = gw.send(OUTSIDE, &big);
    assert_eq!(verdict, Verdict::Reply);
    assert_eq!(
        out,
        vec![(
            OUTSIDE,
            expected_error6(&big, msg_type::PACKET_TOO_BIG, 1500)
        )]
    );

    // A SYN with hop limit 1: no flow, Time Exceeded.
    let probe = with_hop(client_syn6(VIP6, 80, 40003, &[7; 16]), 1);
    let probe = {
        // The hop limit is outside the TCP checksum: the frame stays valid.
        probe
    };
    let (verdict, out) = gw.send(OUTSIDE, &probe);
    assert_eq!(verdict, Verdict::Reply);
    assert_eq!(
        out,
        vec![(OUTSIDE, expected_error6(&probe, msg_type::TIME_EXCEEDED, 0))]
    );
    let c = gw.counters();
    assert_eq!(c.dropped(DropReason::TooBig), 1);
    assert_eq!(c.dropped(DropReason::Ipv6HopLimitExpired), 1);
    assert_eq!(c.icmp_errors_sent, 2);
    assert_eq!(c.flows_created, 1);
}

/// Frames the parse stage drops, by reason.
fn bad_frames() -> Vec<(Vec<u8>, DropReason)> {
    let good = client_syn6(VIP6, 80, 41000, b"");
    let with_first_ext = |kind: u8, ext: &[u8]| {
        let mut f = good.clone();
        let upper = f[20];
        f[20] = kind;
        let mut e = ext.to_vec();
        e[0] = upper;
        let tail = f.split_off(54);
        f.extend_from_slice(&e);
        f.extend_from_slice(&tail);
        let len = u16::from_be_bytes([f[18], f[19]]) + e.len() as u16;
        f[18..20].copy_from_slice(&len.to_be_bytes());
        f
    };
    let mut nine = good.clone();
    {
        let upper = nine[20];
        nine[20] = next_header::DEST_OPTS;
        let tail = nine.split_off(54);
        for i in 0..9 {
            let next = if i < 8 { next_header::DEST_OPTS } else { upper };
            nine.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
        }
        nine.extend_from_slice(&tail);
        let len = u16::from_be_bytes([nine[18], nine[19]]) + 72;
        nine[18..20].copy_from_slice(&len.to_be_bytes());
    }
    let mut truncated = with_first_ext(next_header::ROUTING, &[0, 0, 0, 0, 0, 0, 0, 0]);
    truncated[55] = 9; // claims 80 bytes
    let fragment = with_first_ext(next_header::FRAGMENT, &[0, 0, 0, 1, 0, 0, 0, 9]);
    let mut ns = build::ndp_solicit(CLIENT_MAC6, CLIENT6, NODE6);
    ns[21] = 64;
    let mut ns_option = build::ndp_solicit(CLIENT_MAC6, CLIENT6, NODE6);
    ns_option[14 + 40 + 25] = 0;
    {
        let ip = ipv6::Packet::new_checked(&ns_option[14..]).unwrap();
        let (s, d) = (ip.src_addr(), ip.dst_addr());
        let mut m = dataplane::wire::icmpv6::Packet::new_unchecked(&mut ns_option[54..]);
        m.fill_checksum(s, d);
    }
    vec![
        (nine, DropReason::Ipv6ExtChainTooLong),
        (truncated, DropReason::Ipv6ExtTruncated),
        (good[..14 + 30].to_vec(), DropReason::Ipv6Truncated),
        (fragment, DropReason::Ipv6Fragment),
        (ns, DropReason::NdpBadHopLimit),
        (ns_option, DropReason::NdpBadOption),
    ]
}

#[test]
fn bad_ipv6_input_is_dropped_by_reason_and_the_service_is_unaffected() {
    let mut gw = gateway6();
    let cases = bad_frames();
    for (frame, reason) in &cases {
        assert_eq!(
            gw.send(OUTSIDE, frame).0,
            Verdict::Drop(*reason),
            "{reason}"
        );
    }
    let c = gw.counters();
    for (_, reason) in &cases {
        assert_eq!(c.dropped(*reason), 1, "{reason}");
    }
    assert_eq!(c.flows_created, 0);
    let (verdict, _) = gw.send(OUTSIDE, &client_syn6(VIP6, 80, 41001, b""));
    assert_eq!(verdict, Verdict::Forward(INSIDE));
    assert_eq!(gw.counters().flows_created, 1);
}

#[test]
fn ipv4_and_ipv6_flows_live_side_by_side() {
    let mut gw = gateway6();
    let (v4, _) = gw.send(OUTSIDE, &syn(50000));
    let (v6, _) = gw.send(OUTSIDE, &client_syn6(VIP6, 80, 50000, b""));
    assert_eq!(
        (v4, v6),
        (Verdict::Forward(INSIDE), Verdict::Forward(INSIDE))
    );
    assert_eq!(gw.worker.pipeline().conntrack().len(), 1);
    assert_eq!(gw.worker.pipeline().ipv6().unwrap().ct.len(), 1);
}

#[test]
fn an_icmpv6_error_about_a_translated_flow_reaches_the_client_translated_back() {
    let mut gw = gateway6();
    let syn = client_syn6(VIP6, 80, CPORT, b"");
    let (_, out) = gw.send(OUTSIDE, &syn);
    let sent = &out[0].1;
    // A router on the backends' side: the gateway's packet is too big.
    let router: Ipv6Addr = "fd00:1::fe".parse().unwrap();
    let ptb = build::eth_ipv6_icmpv6(
        (backend6_mac(0), IN_MAC),
        (router, SNAT6),
        (msg_type::PACKET_TOO_BIG, 0, 1400),
        &sent[14..],
    );
    let (verdict, out) = gw.send(INSIDE, &ptb);
    assert_eq!(verdict, Verdict::Forward(OUTSIDE));
    // To the client, from the VIP, quoting the client's own SYN (as it
    // arrived here: hop limit 63 after our decrement).
    let expected = with_hop(
        build::eth_ipv6_icmpv6(
            (OUT_MAC, CLIENT_MAC6),
            (VIP6, CLIENT6),
            (msg_type::PACKET_TOO_BIG, 0, 1400),
            &with_hop(syn, 63)[14..],
        ),
        63,
    );
    assert_eq!(out, vec![(OUTSIDE, expected)]);
    assert_eq!(gw.counters().icmp_errors_translated, 1);
    // An error about no flow is dropped.
    let mut stray = sent[14..].to_vec();
    stray[40..42].copy_from_slice(&1u16.to_be_bytes());
    let stray = build::eth_ipv6_icmpv6(
        (backend6_mac(0), IN_MAC),
        (router, SNAT6),
        (msg_type::DEST_UNREACHABLE, 4, 0),
        &stray,
    );
    assert_eq!(
        gw.send(INSIDE, &stray).0,
        Verdict::Drop(DropReason::IcmpErrorNoFlow)
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Any IPv6 client tuple and payload: the SYN leaves towards a backend
    /// from the SNAT address with every checksum valid, and the backend's
    /// answer reaches the client from the VIP with the client's tuple and
    /// its checksum valid, hop limits decremented.
    #[test]
    fn any_ipv6_client_is_translated_both_ways(
        client in proptest::prelude::any::<u128>(),
        sport in 1u16..,
        payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
    ) {
        let client = Ipv6Addr::from(client);
        proptest::prop_assume!(
            !client.is_multicast() && !client.is_loopback() && !client.is_unspecified()
        );
        let mut gw = gateway6();
        let syn = build::eth_ipv6_tcp(
            CLIENT_MAC6, OUT_MAC, (client, sport), (VIP6, 80), F::SYN, 7, 0, &payload,
        );
        let (verdict, out) = gw.send(OUTSIDE, &syn);
        proptest::prop_assert_eq!(verdict, Verdict::Forward(INSIDE));
        let fwd = &out[0].1;
        proptest::prop_assert!(checksums6_valid(fwd));
        let ip = ipv6::Packet::new_checked(&fwd[14..]).unwrap();
        proptest::prop_assert_eq!((ip.src_addr(), ip.dst_addr(), ip.hop_limit()), (SNAT6, backend6(0), 63));
        let seg = ip.payload();
        let snat_port = u16::from_be_bytes([seg[0], seg[1]]);
        let answer = build::eth_ipv6_tcp(
            backend6_mac(0), IN_MAC, (backend6(0), 8080), (SNAT6, snat_port),
            F::SYN | F::ACK, 100, 8, &payload,
        );
        let (verdict, out) = gw.send(INSIDE, &answer);
        proptest::prop_assert_eq!(verdict, Verdict::Forward(OUTSIDE));
        let expected = with_hop(
            build::eth_ipv6_tcp(
                OUT_MAC, CLIENT_MAC6, (VIP6, 80), (client, sport), F::SYN | F::ACK, 100, 8, &payload,
            ),
            63,
        );
        proptest::prop_assert_eq!(&out[0].1, &expected);
    }
}

/// Two workers: an IPv6 client's packets go to the worker its address
/// hashes to, a backend's reply to an IPv6 SNAT tuple to the worker whose
/// port slice holds the port; the owner forwards them.
#[test]
fn ipv6_packets_are_handed_to_the_worker_owning_their_flow() {
    // The owner of a client's connection: `client_port_hash6` of its
    // address and port, what af_packet's fanout program computes too.
    let owner = |a: Ipv6Addr| dataplane::steering::client_port_hash6(a, 40000, 2);
    let mut w0 = Gateway::with_spec(spec6(vec![web6(&[0])]), pipeline_config(0, 2));
    let mut w1 = Gateway::with_spec(spec6(vec![web6(&[0])]), pipeline_config(1, 2));
    let mut seen = [false; 2];
    for i in 1..40u16 {
        let client = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 1, i);
        let syn = build::eth_ipv6_tcp(
            CLIENT_MAC6,
            OUT_MAC,
            (client, 40000),
            (VIP6, 80),
            F::SYN,
            1,
            0,
            b"",
        );
        let o = owner(client);
        seen[usize::from(o)] = true;
        let (gw, other) = if o == 0 {
            (&mut w0, &mut w1)
        } else {
            (&mut w1, &mut w0)
        };
        assert_eq!(other.send(OUTSIDE, &syn).0, Verdict::Handoff(o));
        let (verdict, out) = gw.send(OUTSIDE, &syn);
        assert_eq!(verdict, Verdict::Forward(INSIDE));
        // The reply, to the owner's SNAT port, is steered to that owner.
        let seg = &out[0].1[54..];
        let port = u16::from_be_bytes([seg[0], seg[1]]);
        let reply = build::eth_ipv6_tcp(
            backend6_mac(0),
            IN_MAC,
            (backend6(0), 8080),
            (SNAT6, port),
            F::SYN | F::ACK,
            9,
            2,
            b"",
        );
        assert_eq!(other.send(INSIDE, &reply).0, Verdict::Handoff(o));
        assert_eq!(gw.send(INSIDE, &reply).0, Verdict::Forward(OUTSIDE));
    }
    assert_eq!(seen, [true, true], "both workers own some clients");
    let (c0, c1) = (w0.counters(), w1.counters());
    assert_eq!(c0.handoff_client + c1.handoff_client, 39);
    assert_eq!(c0.handoff_snat_reply + c1.handoff_snat_reply, 39);
}
