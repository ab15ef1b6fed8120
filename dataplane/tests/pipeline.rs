//! Table-driven pipeline fixtures: frame in → verdict and exact frame out.
//!
//! Expected frames are built from scratch with `wire::build` (full checksum
//! computation), so every byte-exact comparison also checks the dataplane's
//! incremental checksum updates (RFC 1624) against full recomputation.

mod common;

use common::*;
use dataplane::conntrack::{Dir, TcpState};
use dataplane::counters::DropReason;
use dataplane::flow::{FlowKey, Proto};
use dataplane::packet::Verdict;
use dataplane::snapshot::BackendGonePolicy;
use dataplane::wire::tcp::flags as F;
use dataplane::wire::{MacAddr, build};
use std::net::Ipv4Addr;

fn client_tcp(dst: Ipv4Addr, dport: u16, flags: u8, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    build::eth_ipv4_tcp(
        ROUTER_MAC, OUT_MAC, CLIENT, CPORT, dst, dport, flags, seq, ack, payload,
    )
}

fn client_udp(sport: u16, payload: &[u8]) -> Vec<u8> {
    build::eth_ipv4_udp(ROUTER_MAC, OUT_MAC, CLIENT, sport, VIP, 53, payload)
}

/// The flow the gateway tracks for the client's `sport -> dst:dport`.
fn flow_of(
    gw: &Gateway,
    proto: Proto,
    sport: u16,
    dst: Ipv4Addr,
    dport: u16,
) -> dataplane::conntrack::Flow {
    let key = FlowKey::new(proto, CLIENT, sport, dst, dport);
    let ct = gw.worker.pipeline().conntrack();
    let (id, dir) = ct.lookup(&key, ct.hash(&key)).expect("flow tracked");
    assert_eq!(dir, Dir::Original);
    *ct.flow(id)
}

/// Expected frame the gateway sends to the backend for a client TCP segment.
fn to_backend_tcp(
    flow: &dataplane::conntrack::Flow,
    flags: u8,
    seq: u32,
    ack: u32,
    payload: &[u8],
) -> Vec<u8> {
    let r = *flow.reply();
    with_ttl(
        build::eth_ipv4_tcp(
            IN_MAC,
            backend_mac(r.src_ip),
            r.dst_ip,
            r.dst_port,
            r.src_ip,
            r.src_port,
            flags,
            seq,
            ack,
            payload,
        ),
        63,
    )
}

fn open_tcp(gw: &mut Gateway, dst: Ipv4Addr, dport: u16) -> dataplane::conntrack::Flow {
    let (v, _) = gw.send(OUTSIDE, &client_tcp(dst, dport, F::SYN, 100, 0, b""));
    assert_eq!(v, Verdict::Forward(INSIDE));
    let flow = flow_of(gw, Proto::Tcp, CPORT, dst, dport);
    let r = *flow.reply();
    let synack = build::eth_ipv4_tcp(
        backend_mac(r.src_ip),
        IN_MAC,
        r.src_ip,
        r.src_port,
        r.dst_ip,
        r.dst_port,
        F::SYN | F::ACK,
        900,
        101,
        b"",
    );
    let (v, _) = gw.send(INSIDE, &synack);
    assert_eq!(v, Verdict::Forward(OUTSIDE));
    let (v, _) = gw.send(OUTSIDE, &client_tcp(dst, dport, F::ACK, 101, 901, b""));
    assert_eq!(v, Verdict::Forward(INSIDE));
    flow
}

fn tcp_state(gw: &Gateway, dst: Ipv4Addr, dport: u16) -> Option<TcpState> {
    let key = FlowKey::new(Proto::Tcp, CLIENT, CPORT, dst, dport);
    let ct = gw.worker.pipeline().conntrack();
    ct.lookup(&key, ct.hash(&key))
        .and_then(|(id, _)| ct.flow(id).tcp_state())
}

#[test]
fn every_listener_kind_forwards_a_syn_with_full_nat_and_exact_checksums() {
    for (dst, dport) in [(VIP, 80), (NODE, NODE_PORT), (EXTERNAL_IP, 443)] {
        let mut gw = Gateway::new(vec![web(&[0, 1, 2])]);
        let (v, out) = gw.send(OUTSIDE, &client_tcp(dst, dport, F::SYN, 100, 0, b""));
        assert_eq!(v, Verdict::Forward(INSIDE), "{dst}:{dport}");
        let flow = flow_of(&gw, Proto::Tcp, CPORT, dst, dport);
        assert_eq!(flow.reply().dst_ip, SNAT);
        assert_eq!(flow.reply().src_port, 8080);
        assert_eq!(
            out,
            vec![(INSIDE, to_backend_tcp(&flow, F::SYN, 100, 0, b""))]
        );
        assert!(checksums_valid(&out[0].1));
    }
}

#[test]
fn reply_direction_is_translated_back_to_the_client() {
    let mut gw = Gateway::new(vec![web(&[0, 1, 2])]);
    gw.send(OUTSIDE, &client_tcp(VIP, 80, F::SYN, 100, 0, b""));
    let flow = flow_of(&gw, Proto::Tcp, CPORT, VIP, 80);
    let r = *flow.reply();
    let synack = build::eth_ipv4_tcp(
        backend_mac(r.src_ip),
        IN_MAC,
        r.src_ip,
        r.src_port,
        r.dst_ip,
        r.dst_port,
        F::SYN | F::ACK,
        900,
        101,
        b"",
    );
    let (v, out) = gw.send(INSIDE, &synack);
    assert_eq!(v, Verdict::Forward(OUTSIDE));
    let expected = with_ttl(
        build::eth_ipv4_tcp(
            OUT_MAC,
            ROUTER_MAC,
            VIP,
            80,
            CLIENT,
            CPORT,
            F::SYN | F::ACK,
            900,
            101,
            b"",
        ),
        63,
    );
    assert_eq!(out, vec![(OUTSIDE, expected)]);
    assert_eq!(tcp_state(&gw, VIP, 80), Some(TcpState::SynRecv));
}

#[test]
fn udp_request_and_reply_round_trip_with_payload() {
    let mut gw = Gateway::new(vec![dns(&[0, 1])]);
    let (v, out) = gw.send(OUTSIDE, &client_udp(5000, b"query"));
    assert_eq!(v, Verdict::Forward(INSIDE));
    let flow = flow_of(&gw, Proto::Udp, 5000, VIP, 53);
    let r = *flow.reply();
    let expected = with_ttl(
        build::eth_ipv4_udp(
            IN_MAC,
            backend_mac(r.src_ip),
            SNAT,
            r.dst_port,
            r.src_ip,
            5353,
            b"query",
        ),
        63,
    );
    assert_eq!(out, vec![(INSIDE, expected)]);
    let answer = build::eth_ipv4_udp(
        backend_mac(r.src_ip),
        IN_MAC,
        r.src_ip,
        5353,
        SNAT,
        r.dst_port,
        b"answer",
    );
    let (v, out) = gw.send(INSIDE, &answer);
    assert_eq!(v, Verdict::Forward(OUTSIDE));
    let expected = with_ttl(
        build::eth_ipv4_udp(OUT_MAC, ROUTER_MAC, VIP, 53, CLIENT, 5000, b"answer"),
        63,
    );
    assert_eq!(out, vec![(OUTSIDE, expected)]);
    assert!(flow_of(&gw, Proto::Udp, 5000, VIP, 53).replied());
}

#[test]
fn arp_requests_are_answered_only_for_owned_addresses_on_their_port() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    let asker = MacAddr([0x02, 0xcc, 0, 0, 0, 9]);
    let asker_ip = Ipv4Addr::new(203, 0, 113, 1);
    let cases = [
        (OUTSIDE, VIP, Some(OUT_MAC)),
        (OUTSIDE, NODE, Some(OUT_MAC)),
        (INSIDE, SNAT, Some(IN_MAC)),
        (INSIDE, VIP, None),
        (OUTSIDE, SNAT, None),
        (OUTSIDE, Ipv4Addr::new(203, 0, 113, 99), None),
    ];
    for (port, target, answer) in cases {
        let (v, out) = gw.send(port, &build::arp_request(asker, asker_ip, target));
        match answer {
            Some(mac) => {
                assert_eq!(v, Verdict::Reply, "{target} on {port}");
                assert_eq!(
                    out,
                    vec![(port, build::arp_reply(mac, target, asker, asker_ip))]
                );
            }
            None => {
                assert_eq!(
                    v,
                    Verdict::Drop(DropReason::ArpNotOwned),
                    "{target} on {port}"
                );
                assert!(out.is_empty());
            }
        }
    }
}

#[test]
fn icmp_echo_to_owned_addresses_is_answered() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    for dst in [VIP, NODE] {
        let ping =
            build::eth_ipv4_icmp_echo(ROUTER_MAC, OUT_MAC, CLIENT, dst, 8, 77, 3, b"abcdefgh");
        let (v, out) = gw.send(OUTSIDE, &ping);
        assert_eq!(v, Verdict::Reply);
        let pong =
            build::eth_ipv4_icmp_echo(OUT_MAC, ROUTER_MAC, dst, CLIENT, 0, 77, 3, b"abcdefgh");
        assert_eq!(out, vec![(OUTSIDE, pong)]);
    }
    let stray = build::eth_ipv4_icmp_echo(
        ROUTER_MAC,
        OUT_MAC,
        CLIENT,
        Ipv4Addr::new(8, 8, 8, 8),
        8,
        1,
        1,
        b"",
    );
    assert_eq!(
        gw.send(OUTSIDE, &stray).0,
        Verdict::Drop(DropReason::NotOwned)
    );
    assert_eq!(gw.counters().local_replies, 2);
}

#[test]
fn icmp_errors_about_a_flow_are_translated_to_the_client() {
    let mut gw = Gateway::new(vec![dns(&[0])]);
    gw.send(OUTSIDE, &client_udp(5000, b"query"));
    let flow = flow_of(&gw, Proto::Udp, 5000, VIP, 53);
    let r = *flow.reply();
    // The backend answers the datagram the gateway sent it with
    // "port unreachable", and a router with "fragmentation needed".
    let sent_inner = build::ipv4_udp(SNAT, r.dst_port, r.src_ip, 5353, b"query");
    let client_inner = build::ipv4_udp(CLIENT, 5000, VIP, 53, b"query");
    for (ty, code) in [(3u8, 3u8), (3, 4), (11, 0)] {
        let err = build::eth_ipv4_icmp_error(
            backend_mac(r.src_ip),
            IN_MAC,
            r.src_ip,
            SNAT,
            ty,
            code,
            &sent_inner,
        );
        let (v, out) = gw.send(INSIDE, &err);
        assert_eq!(v, Verdict::Forward(OUTSIDE), "type {ty} code {code}");
        let expected = with_ttl(
            build::eth_ipv4_icmp_error(OUT_MAC, ROUTER_MAC, VIP, CLIENT, ty, code, &client_inner),
            63,
        );
        assert_eq!(out, vec![(OUTSIDE, expected)]);
        assert!(checksums_valid(&out[0].1));
    }
    // An error quoting a packet of no tracked flow is dropped.
    let unknown = build::ipv4_udp(SNAT, 1, r.src_ip, 5353, b"x");
    let err = build::eth_ipv4_icmp_error(
        backend_mac(r.src_ip),
        IN_MAC,
        r.src_ip,
        SNAT,
        3,
        3,
        &unknown,
    );
    assert_eq!(
        gw.send(INSIDE, &err).0,
        Verdict::Drop(DropReason::IcmpErrorNoFlow)
    );
    assert_eq!(gw.counters().icmp_errors_translated, 3);
}

#[test]
fn traffic_without_a_listener_or_flow_is_dropped_with_its_reason() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    let cases: Vec<(u8, Vec<u8>, DropReason)> = vec![
        (
            OUTSIDE,
            client_tcp(VIP, 81, F::SYN, 1, 0, b""),
            DropReason::NoListener,
        ),
        (
            OUTSIDE,
            client_tcp(Ipv4Addr::new(8, 8, 8, 8), 80, F::SYN, 1, 0, b""),
            DropReason::NotOwned,
        ),
        (
            OUTSIDE,
            client_tcp(VIP, 80, F::ACK, 1, 1, b""),
            DropReason::NoFlow,
        ),
        (
            INSIDE,
            build::eth_ipv4_tcp(
                backend_mac(backend_ip(0)),
                IN_MAC,
                backend_ip(0),
                8080,
                SNAT,
                5555,
                F::ACK,
                1,
                1,
                b"",
            ),
            DropReason::NoFlow,
        ),
        (
            OUTSIDE,
            build::eth_ipv4_udp(ROUTER_MAC, OUT_MAC, CLIENT, 1, VIP, 53, b""),
            DropReason::NoListener,
        ),
    ];
    for (port, frame, reason) in cases {
        let (v, out) = gw.send(port, &frame);
        assert_eq!(v, Verdict::Drop(reason));
        assert!(out.is_empty());
    }
    let c = gw.counters();
    assert_eq!(c.dropped(DropReason::NoListener), 2);
    assert_eq!(c.dropped(DropReason::NoFlow), 2);
    assert_eq!(c.dropped(DropReason::NotOwned), 1);
    assert_eq!(
        gw.worker.driver_mut().pool_free(),
        4096,
        "dropped buffers return to the pool"
    );
}

#[test]
fn service_without_endpoints_drops_new_flows_as_no_backend() {
    let mut gw = Gateway::new(vec![web(&[])]);
    let (v, _) = gw.send(OUTSIDE, &client_tcp(VIP, 80, F::SYN, 1, 0, b""));
    assert_eq!(v, Verdict::Drop(DropReason::NoBackend));
}

#[test]
fn tcp_states_follow_the_connection_and_closed_flows_expire() {
    let mut gw = Gateway::new(vec![web(&[0, 1])]);
    let flow = open_tcp(&mut gw, VIP, 80);
    assert_eq!(tcp_state(&gw, VIP, 80), Some(TcpState::Established));
    // Counted as a new and active flow of its service and backend.
    let (s, b) = (flow.service as usize, flow.backend as usize);
    let counted = |gw: &Gateway| {
        let c = gw.worker.pipeline().services();
        (
            c.service_flows_created[s],
            c.service_flows_active[s],
            c.backend_flows_created[b],
            c.backend_flows_active[b],
        )
    };
    assert_eq!(counted(&gw), (1, 1, 1, 1));
    let other = 1 - b;
    assert_eq!(
        gw.worker.pipeline().services().backend_flows_created[other],
        0
    );
    let r = *flow.reply();
    let from_backend = |flags: u8| {
        build::eth_ipv4_tcp(
            backend_mac(r.src_ip),
            IN_MAC,
            r.src_ip,
            r.src_port,
            SNAT,
            r.dst_port,
            flags,
            901,
            102,
            b"",
        )
    };
    // Client closes first.
    gw.send(
        OUTSIDE,
        &client_tcp(VIP, 80, F::FIN | F::ACK, 101, 901, b""),
    );
    assert_eq!(tcp_state(&gw, VIP, 80), Some(TcpState::FinWait));
    gw.send(INSIDE, &from_backend(F::ACK));
    assert_eq!(tcp_state(&gw, VIP, 80), Some(TcpState::CloseWait));
    gw.send(INSIDE, &from_backend(F::FIN | F::ACK));
    assert_eq!(tcp_state(&gw, VIP, 80), Some(TcpState::LastAck));
    gw.send(OUTSIDE, &client_tcp(VIP, 80, F::ACK, 102, 902, b""));
    assert_eq!(tcp_state(&gw, VIP, 80), Some(TcpState::TimeWait));
    // TIME_WAIT lasts 120 s, then the flow is gone.
    gw.clock.advance_ms(119_000);
    gw.worker.poll();
    assert_eq!(tcp_state(&gw, VIP, 80), Some(TcpState::TimeWait));
    gw.clock.advance_ms(2_000);
    for _ in 0..32 {
        gw.worker.poll();
    }
    assert_eq!(tcp_state(&gw, VIP, 80), None);
    assert_eq!(
        gw.worker.pipeline().snat().stats().in_use,
        0,
        "SNAT tuple released"
    );
    assert_eq!(counted(&gw), (1, 0, 1, 0), "expired: no longer active");
}

#[test]
fn rst_closes_and_established_flows_live_24_hours() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    open_tcp(&mut gw, VIP, 80);
    gw.clock.advance_ms(24 * 3_600_000 - 1_000);
    let (v, _) = gw.send(
        OUTSIDE,
        &client_tcp(VIP, 80, F::ACK | F::PSH, 101, 901, b"GET /"),
    );
    assert_eq!(
        v,
        Verdict::Forward(INSIDE),
        "established flow alive before 24 h idle"
    );
    gw.clock.advance_ms(24 * 3_600_000 + 1);
    let (v, _) = gw.send(OUTSIDE, &client_tcp(VIP, 80, F::ACK, 106, 901, b""));
    assert_eq!(
        v,
        Verdict::Drop(DropReason::NoFlow),
        "expired after 24 h idle"
    );

    let mut gw = Gateway::new(vec![web(&[0])]);
    open_tcp(&mut gw, VIP, 80);
    gw.send(OUTSIDE, &client_tcp(VIP, 80, F::RST, 101, 0, b""));
    assert_eq!(tcp_state(&gw, VIP, 80), Some(TcpState::Close));
}

#[test]
fn unanswered_syn_expires_after_syn_sent_timeout() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    gw.send(OUTSIDE, &client_tcp(VIP, 80, F::SYN, 100, 0, b""));
    assert_eq!(tcp_state(&gw, VIP, 80), Some(TcpState::SynSent));
    gw.clock.advance_ms(121_000);
    let (v, _) = gw.send(OUTSIDE, &client_tcp(VIP, 80, F::ACK, 101, 1, b""));
    assert_eq!(v, Verdict::Drop(DropReason::NoFlow));
}

#[test]
fn udp_flow_lives_30_s_unreplied_and_120_s_once_replied() {
    let mut gw = Gateway::new(vec![dns(&[0])]);
    gw.send(OUTSIDE, &client_udp(5000, b"q"));
    gw.clock.advance_ms(31_000);
    let first = flow_of(&gw, Proto::Udp, 5000, VIP, 53);
    assert!(first.is_expired(gw.clock_now()));
    // A new datagram after expiry starts a new flow.
    gw.send(OUTSIDE, &client_udp(5000, b"q"));
    let flow = flow_of(&gw, Proto::Udp, 5000, VIP, 53);
    let r = *flow.reply();
    gw.send(
        INSIDE,
        &build::eth_ipv4_udp(
            backend_mac(r.src_ip),
            IN_MAC,
            r.src_ip,
            5353,
            SNAT,
            r.dst_port,
            b"a",
        ),
    );
    gw.clock.advance_ms(119_000);
    assert!(!flow_of(&gw, Proto::Udp, 5000, VIP, 53).is_expired(gw.clock_now()));
    gw.clock.advance_ms(2_000);
    assert!(flow_of(&gw, Proto::Udp, 5000, VIP, 53).is_expired(gw.clock_now()));
}

#[test]
fn syn_meeting_time_wait_starts_a_fresh_flow_with_a_fresh_backend_choice() {
    let mut gw = Gateway::new(vec![web(&[0, 1, 2])]);
    let first = open_tcp(&mut gw, VIP, 80);
    gw.send(OUTSIDE, &client_tcp(VIP, 80, F::RST, 101, 0, b""));
    assert_eq!(tcp_state(&gw, VIP, 80), Some(TcpState::Close));
    // The old backend leaves; a new SYN on the same client tuple must not be
    // sent to it.
    let old = first.reply().src_ip.octets()[3] - 10;
    let remaining: Vec<u8> = [0u8, 1, 2].into_iter().filter(|&b| b != old).collect();
    gw.swap(vec![web(&remaining)]);
    let (v, _) = gw.send(OUTSIDE, &client_tcp(VIP, 80, F::SYN, 5_000, 0, b""));
    assert_eq!(v, Verdict::Forward(INSIDE));
    let second = flow_of(&gw, Proto::Tcp, CPORT, VIP, 80);
    assert_ne!(second.reply().src_ip, first.reply().src_ip);
    assert_eq!(second.tcp_state(), Some(TcpState::SynSent));
    assert_eq!(gw.counters().flows_recycled, 1);
}

#[test]
fn snapshot_swap_keeps_established_flows_on_their_backend() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    let flow = open_tcp(&mut gw, VIP, 80);
    // Many new backends: Maglev would now pick another one for most flows.
    gw.swap(vec![web(&[0, 1, 2, 3, 4, 5, 6, 7])]);
    for i in 0..5 {
        let (v, out) = gw.send(OUTSIDE, &client_tcp(VIP, 80, F::ACK, 101 + i, 901, b""));
        assert_eq!(v, Verdict::Forward(INSIDE));
        assert_eq!(out[0].1, to_backend_tcp(&flow, F::ACK, 101 + i, 901, b""));
    }
}

#[test]
fn removed_backend_drops_or_resets_tcp_and_reselects_udp() {
    // TCP, policy drop.
    let mut gw = Gateway::new(vec![web(&[0])]);
    open_tcp(&mut gw, VIP, 80);
    gw.swap(vec![web(&[1])]);
    let (v, _) = gw.send(OUTSIDE, &client_tcp(VIP, 80, F::ACK, 101, 901, b"x"));
    assert_eq!(v, Verdict::Drop(DropReason::BackendGone));
    assert_eq!(tcp_state(&gw, VIP, 80), None);

    // TCP, policy reset: the client gets an exact RST from the VIP.
    let mut with_reset = web(&[0]);
    with_reset.tcp_backend_gone = BackendGonePolicy::Reset;
    let mut gw = Gateway::new(vec![with_reset.clone()]);
    open_tcp(&mut gw, VIP, 80);
    let mut moved = web(&[1]);
    moved.tcp_backend_gone = BackendGonePolicy::Reset;
    gw.swap(vec![moved]);
    let (v, out) = gw.send(
        OUTSIDE,
        &client_tcp(VIP, 80, F::ACK | F::PSH, 101, 901, b"GET /"),
    );
    assert_eq!(v, Verdict::Reply);
    let rst = build::eth_ipv4_tcp(
        OUT_MAC,
        ROUTER_MAC,
        VIP,
        80,
        CLIENT,
        CPORT,
        F::RST,
        901,
        0,
        b"",
    );
    let mut rst = rst;
    dataplane::wire::tcp::Packet::new_unchecked(&mut rst[34..]).set_window(0);
    let (c, s) = (VIP, CLIENT);
    dataplane::wire::tcp::Packet::new_unchecked(&mut rst[34..]).fill_checksum(c, s);
    assert_eq!(out, vec![(OUTSIDE, rst)]);
    assert_eq!(gw.counters().resets_sent, 1);

    // UDP: re-selected to a live backend, no black hole.
    let mut gw = Gateway::new(vec![dns(&[0])]);
    gw.send(OUTSIDE, &client_udp(5000, b"q"));
    gw.swap(vec![dns(&[1])]);
    let (v, out) = gw.send(OUTSIDE, &client_udp(5000, b"q2"));
    assert_eq!(v, Verdict::Forward(INSIDE));
    let flow = flow_of(&gw, Proto::Udp, 5000, VIP, 53);
    assert_eq!(flow.reply().src_ip, backend_ip(1));
    assert!(checksums_valid(&out[0].1));
    assert_eq!(gw.counters().flows_reselected, 1);
}

#[test]
fn terminating_endpoints_serve_only_when_nothing_is_ready() {
    let mut gw = Gateway::new(vec![terminating(web(&[0, 1]), &[0])]);
    for sport in 0..50u16 {
        let f = build::eth_ipv4_tcp(
            ROUTER_MAC,
            OUT_MAC,
            CLIENT,
            20_000 + sport,
            VIP,
            80,
            F::SYN,
            1,
            0,
            b"",
        );
        gw.send(OUTSIDE, &f);
        assert_eq!(
            flow_of_port(&gw, 20_000 + sport).reply().src_ip,
            backend_ip(1)
        );
    }
    let mut gw = Gateway::new(vec![terminating(web(&[0, 1]), &[0, 1])]);
    let mut seen = std::collections::HashSet::new();
    for sport in 0..50u16 {
        let f = build::eth_ipv4_tcp(
            ROUTER_MAC,
            OUT_MAC,
            CLIENT,
            20_000 + sport,
            VIP,
            80,
            F::SYN,
            1,
            0,
            b"",
        );
        assert_eq!(gw.send(OUTSIDE, &f).0, Verdict::Forward(INSIDE));
        seen.insert(flow_of_port(&gw, 20_000 + sport).reply().src_ip);
    }
    assert_eq!(
        seen.len(),
        2,
        "all serving endpoints are used when none is ready"
    );
}

fn flow_of_port(gw: &Gateway, sport: u16) -> dataplane::conntrack::Flow {
    let key = FlowKey::new(Proto::Tcp, CLIENT, sport, VIP, 80);
    let ct = gw.worker.pipeline().conntrack();
    let (id, _) = ct.lookup(&key, ct.hash(&key)).expect("tracked");
    *ct.flow(id)
}

#[test]
fn client_ip_affinity_pins_all_connections_of_a_client() {
    let mut svc = web(&[0, 1, 2, 3]);
    svc.affinity_timeout_ms = Some(10_800_000);
    let mut gw = Gateway::new(vec![svc]);
    let mut backends = std::collections::HashSet::new();
    for sport in 0..40u16 {
        let f = build::eth_ipv4_tcp(
            ROUTER_MAC,
            OUT_MAC,
            CLIENT,
            30_000 + sport,
            VIP,
            80,
            F::SYN,
            1,
            0,
            b"",
        );
        gw.send(OUTSIDE, &f);
        backends.insert(flow_of_port(&gw, 30_000 + sport).reply().src_ip);
    }
    assert_eq!(backends.len(), 1, "one client, one backend");
    assert_eq!(gw.counters().affinity_hits, 39);
    // Without affinity the same 40 connections spread.
    let mut gw = Gateway::new(vec![web(&[0, 1, 2, 3])]);
    let mut backends = std::collections::HashSet::new();
    for sport in 0..40u16 {
        let f = build::eth_ipv4_tcp(
            ROUTER_MAC,
            OUT_MAC,
            CLIENT,
            30_000 + sport,
            VIP,
            80,
            F::SYN,
            1,
            0,
            b"",
        );
        gw.send(OUTSIDE, &f);
        backends.insert(flow_of_port(&gw, 30_000 + sport).reply().src_ip);
    }
    assert!(backends.len() >= 3);
}

#[test]
fn affinity_survives_backend_set_changes_until_its_backend_leaves() {
    let mut svc = web(&[0, 1, 2]);
    svc.affinity_timeout_ms = Some(60_000);
    let mut gw = Gateway::new(vec![svc.clone()]);
    gw.send(OUTSIDE, &syn(1000));
    let pinned = flow_of_port(&gw, 1000).reply().src_ip;
    let pinned_idx = pinned.octets()[3] - 10;
    // Add backends: the client stays pinned.
    let mut bigger = web(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    bigger.affinity_timeout_ms = Some(60_000);
    gw.swap(vec![bigger]);
    gw.send(OUTSIDE, &syn(1001));
    assert_eq!(flow_of_port(&gw, 1001).reply().src_ip, pinned);
    // Remove the pinned backend: the client moves.
    let others: Vec<u8> = (0..10).filter(|&b| b != pinned_idx).collect();
    let mut smaller = web(&others);
    smaller.affinity_timeout_ms = Some(60_000);
    gw.swap(vec![smaller]);
    gw.send(OUTSIDE, &syn(1002));
    assert_ne!(flow_of_port(&gw, 1002).reply().src_ip, pinned);
}

#[test]
fn malformed_frames_are_dropped_by_reason_through_the_worker() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    let good = client_tcp(VIP, 80, F::SYN, 1, 0, b"");
    let mut bad_ip_csum = good.clone();
    bad_ip_csum[24] ^= 0xff;
    let mut bad_tcp_csum = good.clone();
    bad_tcp_csum[50] ^= 0xff;
    let mut synfin = client_tcp(VIP, 80, F::SYN | F::FIN, 1, 0, b"");
    synfin.truncate(synfin.len());
    let mut frag = good.clone();
    {
        let mut ip = dataplane::wire::ipv4::Packet::new_unchecked(&mut frag[14..]);
        ip.set_flags_frag(false, true, 0);
        ip.fill_checksum();
    }
    let cases: Vec<(Vec<u8>, DropReason)> = vec![
        (good[..10].to_vec(), DropReason::EthTruncated),
        (good[..30].to_vec(), DropReason::Ipv4Truncated),
        (bad_ip_csum, DropReason::Ipv4BadChecksum),
        (bad_tcp_csum, DropReason::TcpBadChecksum),
        (frag, DropReason::Ipv4Fragment),
        (
            client_tcp(VIP, 80, F::SYN | F::FIN, 1, 0, b""),
            DropReason::TcpBadFlags,
        ),
    ];
    for (frame, reason) in cases {
        assert_eq!(gw.send(OUTSIDE, &frame).0, Verdict::Drop(reason));
    }
    let c = gw.counters();
    assert_eq!(c.total_drops(), 6);
    assert_eq!(c.flows_created, 0);
}

/// The ICMP error the gateway should send back to the client about
/// `offending` (an Ethernet frame from the client), built independently of
/// the dataplane: from the node address of the outside port, quoting the
/// offending IP header and 8 bytes of its payload, DF clear, TTL 64, every
/// checksum computed from scratch.
fn expected_icmp_error(offending: &[u8], icmp_type: u8, code: u8, mtu: u16) -> Vec<u8> {
    let quote = &offending[14..14 + 20 + 8];
    let mut frame =
        build::eth_ipv4_icmp_error(OUT_MAC, ROUTER_MAC, NODE, CLIENT, icmp_type, code, quote);
    {
        let mut msg = dataplane::wire::icmp::Packet::new_unchecked(&mut frame[34..]);
        msg.set_next_hop_mtu(mtu);
        msg.fill_checksum();
    }
    let mut ip = dataplane::wire::ipv4::Packet::new_unchecked(&mut frame[14..34]);
    ip.set_flags_frag(false, false, 0);
    ip.fill_checksum();
    frame
}

#[test]
fn ttl_expiring_on_forward_is_answered_with_time_exceeded() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    // A probe with some payload (as traceroute sends): answered.
    let probe = with_ttl(client_tcp(VIP, 80, F::SYN, 1, 0, &[7u8; 32]), 1);
    let (verdict, out) = gw.send(OUTSIDE, &probe);
    assert_eq!(verdict, Verdict::Reply);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, OUTSIDE);
    assert_eq!(out[0].1, expected_icmp_error(&probe, 11, 0, 0));
    assert!(checksums_valid(&out[0].1));
    let c = gw.counters();
    assert_eq!(
        c.dropped(DropReason::Ipv4TtlExpired),
        1,
        "still not forwarded"
    );
    assert_eq!(c.icmp_errors_sent, 1);
    assert_eq!(c.flows_created, 0, "no flow for a packet that cannot go on");
    // A bare 40-byte SYN in a minimum-size frame has no room for the error:
    // dropped silently (frames do not grow).
    let bare = with_ttl(client_tcp(VIP, 80, F::SYN, 1, 0, b""), 1);
    let (verdict, out) = gw.send(OUTSIDE, &bare);
    assert_eq!(verdict, Verdict::Drop(DropReason::Ipv4TtlExpired));
    assert!(out.is_empty());
}

#[test]
fn icmp_errors_are_rate_limited_per_worker() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    let probe = with_ttl(client_tcp(VIP, 80, F::SYN, 1, 0, &[7u8; 32]), 1);
    let frames = vec![probe.clone(); 60];
    let (verdicts, out) = gw.send_batch(OUTSIDE, &frames);
    let answered = verdicts.iter().filter(|v| **v == Verdict::Reply).count();
    assert_eq!(answered, 50, "the burst");
    assert_eq!(out.len(), 50);
    let c = gw.counters();
    assert_eq!((c.icmp_errors_sent, c.icmp_errors_rate_limited), (50, 10));
    assert_eq!(c.dropped(DropReason::Ipv4TtlExpired), 60);
    // Tokens come back at 1,000 per second.
    gw.clock.advance_ms(5);
    let (verdicts, _) = gw.send_batch(OUTSIDE, &frames[..10]);
    assert_eq!(verdicts.iter().filter(|v| **v == Verdict::Reply).count(), 5);
}

#[test]
fn counters_are_published_for_other_threads() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    gw.send(OUTSIDE, &client_tcp(VIP, 80, F::SYN, 1, 0, b""));
    gw.send(OUTSIDE, &client_tcp(VIP, 81, F::SYN, 1, 0, b""));
    gw.clock.advance_ms(1);
    gw.worker.poll();
    let (c, g) = gw.shared.read();
    assert_eq!(c.rx_packets, 2);
    assert_eq!(
        c.garp_sent, 4,
        "VIP, externalIP, node and SNAT addresses announced at start"
    );
    assert_eq!(c.tx_packets, 1 + c.garp_sent);
    assert_eq!(c.dropped(DropReason::NoListener), 1);
    assert_eq!(g.live_flows, 1);
    assert_eq!(g.snat_in_use, 1);
}

#[test]
fn snat_off_preserves_the_client_address_and_matches_replies_by_conntrack() {
    let mut svc = web(&[0]);
    svc.snat = false;
    let mut gw = Gateway::new(vec![svc]);
    let (v, out) = gw.send(OUTSIDE, &client_tcp(VIP, 80, F::SYN, 100, 0, b""));
    assert_eq!(v, Verdict::Forward(INSIDE));
    let be = backend_ip(0);
    let expected = with_ttl(
        build::eth_ipv4_tcp(
            IN_MAC,
            backend_mac(be),
            CLIENT,
            CPORT,
            be,
            8080,
            F::SYN,
            100,
            0,
            b"",
        ),
        63,
    );
    assert_eq!(
        out,
        vec![(INSIDE, expected)],
        "only the destination changes"
    );
    // The backend answers the client directly (the gateway is its route).
    let reply = build::eth_ipv4_tcp(
        backend_mac(be),
        IN_MAC,
        be,
        8080,
        CLIENT,
        CPORT,
        F::SYN | F::ACK,
        7,
        101,
        b"",
    );
    let (v, out) = gw.send(INSIDE, &reply);
    assert_eq!(v, Verdict::Forward(OUTSIDE));
    let expected = with_ttl(
        build::eth_ipv4_tcp(
            OUT_MAC,
            ROUTER_MAC,
            VIP,
            80,
            CLIENT,
            CPORT,
            F::SYN | F::ACK,
            7,
            101,
            b"",
        ),
        63,
    );
    assert_eq!(out, vec![(OUTSIDE, expected)]);
    assert_eq!(
        gw.worker.pipeline().snat().stats().in_use,
        0,
        "no SNAT tuple used"
    );
}

#[test]
fn icmp_errors_from_the_client_side_are_translated_to_the_backend() {
    let mut gw = Gateway::new(vec![dns(&[0])]);
    gw.send(OUTSIDE, &client_udp(5000, b"query"));
    let flow = flow_of(&gw, Proto::Udp, 5000, VIP, 53);
    let r = *flow.reply();
    // The client's host rejects the answer the gateway sent it (VIP -> client).
    let answer_as_sent = build::ipv4_udp(VIP, 53, CLIENT, 5000, b"answer");
    let err = build::eth_ipv4_icmp_error(ROUTER_MAC, OUT_MAC, CLIENT, VIP, 3, 3, &answer_as_sent);
    let (v, out) = gw.send(OUTSIDE, &err);
    assert_eq!(v, Verdict::Forward(INSIDE));
    // The backend sees an error about the datagram it sent (backend -> SNAT),
    // from the SNAT address.
    let answer_as_backend_sent = build::ipv4_udp(r.src_ip, r.src_port, SNAT, r.dst_port, b"answer");
    let expected = with_ttl(
        build::eth_ipv4_icmp_error(
            IN_MAC,
            backend_mac(r.src_ip),
            SNAT,
            r.src_ip,
            3,
            3,
            &answer_as_backend_sent,
        ),
        63,
    );
    assert_eq!(out, vec![(INSIDE, expected)]);
}

#[test]
fn independently_built_gateways_pick_the_same_backend_for_the_same_flow() {
    let mut a = Gateway::new(vec![web(&[0, 1, 2, 3, 4, 5])]);
    let mut b = Gateway::new(vec![web(&[5, 3, 1, 0, 2, 4])]);
    let mut spread = std::collections::HashSet::new();
    for sport in 0..200u16 {
        let syn = build::eth_ipv4_tcp(
            ROUTER_MAC,
            OUT_MAC,
            CLIENT,
            50_000 + sport,
            VIP,
            80,
            F::SYN,
            1,
            0,
            b"",
        );
        a.send(OUTSIDE, &syn);
        b.send(OUTSIDE, &syn);
        let (fa, fb) = (
            flow_of_port(&a, 50_000 + sport),
            flow_of_port(&b, 50_000 + sport),
        );
        assert_eq!(fa.reply().src_ip, fb.reply().src_ip, "sport {sport}");
        spread.insert(fa.reply().src_ip);
    }
    assert_eq!(spread.len(), 6);
}

#[test]
fn segments_conntrack_calls_invalid_are_dropped_and_do_not_advance_state() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    open_tcp(&mut gw, VIP, 80);
    // A SYN/ACK from the client side of an established connection.
    let (v, out) = gw.send(OUTSIDE, &client_tcp(VIP, 80, F::SYN | F::ACK, 5, 5, b""));
    assert_eq!(v, Verdict::Drop(DropReason::TcpInvalid));
    assert!(out.is_empty());
    assert_eq!(tcp_state(&gw, VIP, 80), Some(TcpState::Established));
}

#[test]
fn reset_policy_answers_every_retransmission_after_the_backend_left() {
    let mut svc = web(&[0]);
    svc.tcp_backend_gone = BackendGonePolicy::Reset;
    let mut gw = Gateway::new(vec![svc]);
    open_tcp(&mut gw, VIP, 80);
    let mut moved = web(&[1]);
    moved.tcp_backend_gone = BackendGonePolicy::Reset;
    gw.swap(vec![moved]);
    for _ in 0..3 {
        let (v, out) = gw.send(
            OUTSIDE,
            &client_tcp(VIP, 80, F::ACK | F::PSH, 101, 901, b"GET /"),
        );
        assert_eq!(v, Verdict::Reply, "each retransmission gets its RST");
        assert_eq!(out[0].1[47], F::RST);
    }
    assert_eq!(gw.counters().resets_sent, 3);
}

#[test]
fn draining_endpoints_keep_their_flows_but_take_no_new_ones() {
    use dataplane::snapshot::EndpointCondition;
    let mut gw = Gateway::new(vec![web(&[0])]);
    let flow = open_tcp(&mut gw, VIP, 80);
    let mut draining = web(&[0, 1]);
    draining.endpoints[0].condition = EndpointCondition::Draining;
    gw.swap(vec![draining]);
    let (v, out) = gw.send(OUTSIDE, &client_tcp(VIP, 80, F::ACK, 101, 901, b""));
    assert_eq!(v, Verdict::Forward(INSIDE), "established flow continues");
    assert_eq!(out[0].1, to_backend_tcp(&flow, F::ACK, 101, 901, b""));
    for sport in 0..20u16 {
        let syn = build::eth_ipv4_tcp(
            ROUTER_MAC,
            OUT_MAC,
            CLIENT,
            60_000 + sport,
            VIP,
            80,
            F::SYN,
            1,
            0,
            b"",
        );
        gw.send(OUTSIDE, &syn);
        assert_eq!(
            flow_of_port(&gw, 60_000 + sport).reply().src_ip,
            backend_ip(1)
        );
    }
}

#[test]
fn oversize_and_vlan_crossing_packets_are_dropped_before_creating_a_flow() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    // DF set (the builder's default): "fragmentation needed" with the
    // inside port's MTU goes back to the client (RFC 1191).
    let big = client_tcp(VIP, 80, F::SYN, 1, 0, &[0u8; 1600]);
    let (verdict, out) = gw.send(OUTSIDE, &big);
    assert_eq!(verdict, Verdict::Reply);
    assert_eq!(out, vec![(OUTSIDE, expected_icmp_error(&big, 3, 4, 1500))]);
    assert_eq!(gw.counters().dropped(DropReason::TooBig), 1);
    // Without DF the gateway would have to fragment, which it does not:
    // dropped, silently.
    let mut big_no_df = big.clone();
    {
        let mut ip = dataplane::wire::ipv4::Packet::new_unchecked(&mut big_no_df[14..]);
        ip.set_flags_frag(false, false, 0);
        ip.fill_checksum();
    }
    let (verdict, out) = gw.send(OUTSIDE, &big_no_df);
    assert_eq!(verdict, Verdict::Drop(DropReason::TooBig));
    assert!(out.is_empty());
    let tagged = build::with_vlan(&client_tcp(VIP, 80, F::SYN, 1, 0, b""), 42);
    assert_eq!(
        gw.send(OUTSIDE, &tagged).0,
        Verdict::Drop(DropReason::VlanMismatch)
    );
    assert_eq!(gw.counters().flows_created, 0);
    assert_eq!(gw.worker.pipeline().snat().stats().in_use, 0);
}

/// Without SNAT, the same client port towards two services on one backend
/// gives both flows the same backend-side tuple.
fn two_services_one_backend_no_snat() -> Gateway {
    let mut web = web(&[0]);
    web.snat = false;
    let mut other = dataplane::snapshot::ServiceSpec::new("other", Proto::Tcp, EXTERNAL_IP, 8443)
        .endpoint(std::net::SocketAddrV4::new(backend_ip(0), 8080));
    other.snat = false;
    web.listeners.retain(|l| l.0 != EXTERNAL_IP);
    Gateway::new(vec![web, other])
}

#[test]
fn without_snat_a_closed_flow_gives_its_backend_tuple_to_a_new_syn() {
    let mut gw = two_services_one_backend_no_snat();
    open_tcp(&mut gw, VIP, 80);
    gw.send(OUTSIDE, &client_tcp(VIP, 80, F::RST, 101, 0, b""));
    let (v, out) = gw.send(OUTSIDE, &client_tcp(EXTERNAL_IP, 8443, F::SYN, 7, 0, b""));
    assert_eq!(v, Verdict::Forward(INSIDE));
    assert_eq!(
        src_port(&out[0].1),
        CPORT,
        "tuple taken over, client port kept"
    );
    assert_eq!(gw.counters().flows_recycled, 1);
}

#[test]
fn without_snat_a_live_tuple_clash_remaps_the_client_port_and_keeps_the_address() {
    let mut gw = two_services_one_backend_no_snat();
    open_tcp(&mut gw, VIP, 80);
    let (v, out) = gw.send(OUTSIDE, &client_tcp(EXTERNAL_IP, 8443, F::SYN, 7, 0, b""));
    assert_eq!(v, Verdict::Forward(INSIDE));
    let remapped = src_port(&out[0].1);
    assert_ne!(remapped, CPORT);
    assert_eq!(
        &out[0].1[26..30],
        &CLIENT.octets(),
        "client address preserved"
    );
    assert!(checksums_valid(&out[0].1));
    // The backend's answer to the remapped port reaches the client on its
    // own port, from the service it called.
    let be = backend_ip(0);
    let answer = build::eth_ipv4_tcp(
        backend_mac(be),
        IN_MAC,
        be,
        8080,
        CLIENT,
        remapped,
        F::SYN | F::ACK,
        1,
        8,
        b"",
    );
    let (v, out) = gw.send(INSIDE, &answer);
    assert_eq!(v, Verdict::Forward(OUTSIDE));
    let expected = with_ttl(
        build::eth_ipv4_tcp(
            OUT_MAC,
            ROUTER_MAC,
            EXTERNAL_IP,
            8443,
            CLIENT,
            CPORT,
            F::SYN | F::ACK,
            1,
            8,
            b"",
        ),
        63,
    );
    assert_eq!(out, vec![(OUTSIDE, expected)]);
    assert_eq!(gw.counters().client_ports_remapped, 1);
}

fn src_port(frame: &[u8]) -> u16 {
    u16::from_be_bytes([frame[34], frame[35]])
}

#[test]
fn packets_and_bytes_are_counted_per_service_and_per_backend() {
    let mut gw = Gateway::new(vec![web(&[0, 1]), dns(&[0])]);
    let flow = open_tcp(&mut gw, VIP, 80); // 3 packets, both directions
    gw.send(OUTSIDE, &client_udp(5000, b"q"));
    gw.send(OUTSIDE, &client_tcp(VIP, 81, F::SYN, 1, 0, b"")); // no listener: not counted
    gw.worker.publish_counters();
    let counted = gw.shared.read_services();
    let snap = gw.publisher.current();
    let web_id = snap.service_by_name("web").unwrap().id as usize;
    let dns_id = snap.service_by_name("dns").unwrap().id as usize;
    assert_eq!(counted.service_packets[web_id], 3);
    assert_eq!(counted.service_bytes[web_id], 3 * 40);
    assert_eq!(counted.service_packets[dns_id], 1);
    assert_eq!(counted.backend_packets[flow.backend as usize], 3);
    let total: u64 = counted.backend_packets.iter().sum();
    assert_eq!(total, 4);
}

/// per-service counters follow ids, and ids are reused: a new service
/// inherits the totals of a removed one.
#[test]
fn a_new_service_does_not_inherit_a_removed_services_counters() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    for i in 0..5u16 {
        gw.send(
            OUTSIDE,
            &build::eth_ipv4_tcp(
                ROUTER_MAC,
                OUT_MAC,
                CLIENT,
                41_000 + i,
                VIP,
                80,
                F::SYN,
                1,
                0,
                b"",
            ),
        );
    }
    gw.swap(vec![]);
    gw.worker.poll();
    gw.swap(vec![dns(&[1])]);
    gw.worker.poll();
    let snap = gw.publisher.current();
    let dns_id = snap
        .services
        .iter()
        .flatten()
        .find(|s| &*s.name == "dns")
        .unwrap()
        .id;
    let p = gw
        .worker
        .pipeline()
        .services()
        .service_packets
        .get(dns_id as usize)
        .copied();
    assert_eq!(p.unwrap_or(0), 0, "dns (id {dns_id}) shows web's packets");
}

/// Expiry slices run after every poll that found no packets, but while
/// packets keep coming only after the first poll of each millisecond
/// (`Worker::poll`): a loaded worker does not pay a slab sweep per poll.
#[test]
fn a_busy_worker_runs_one_expiry_slice_per_millisecond_and_one_per_idle_poll() {
    let mut cfg = pipeline_config(0, 1);
    // Every slot holds a flow, and a slice examines one slot: each slice
    // removes exactly one expired flow.
    cfg.conntrack.capacity = 64;
    cfg.conntrack.expiry_scan_per_poll = 1;
    let mut gw = Gateway::with_config(vec![dns(&[0])], cfg);
    for sport in 0..64 {
        gw.send(OUTSIDE, &client_udp(5000 + sport, b"q"));
    }
    assert_eq!(gw.worker.pipeline().conntrack().len(), 64);
    gw.clock.advance_ms(31_000);
    // A frame that is work for the poll but creates no flow (no service
    // listens on VIP:9).
    let no_service = build::eth_ipv4_udp(ROUTER_MAC, OUT_MAC, CLIENT, 7, VIP, 9, b"x");
    let expired = |gw: &Gateway| gw.counters().flows_expired;
    let before = expired(&gw);
    for _ in 0..20 {
        gw.send(OUTSIDE, &no_service);
    }
    assert_eq!(
        expired(&gw) - before,
        1,
        "20 busy polls in one ms: one slice"
    );
    gw.worker.poll();
    gw.worker.poll();
    assert_eq!(expired(&gw) - before, 3, "every idle poll runs a slice");
    gw.clock.advance_ms(1);
    for _ in 0..20 {
        gw.send(OUTSIDE, &no_service);
    }
    assert_eq!(expired(&gw) - before, 4, "the next millisecond: one more");
    for _ in 0..64 {
        gw.worker.poll();
    }
    assert_eq!(
        gw.worker.pipeline().conntrack().len(),
        0,
        "idle polls finish the sweep"
    );
}
