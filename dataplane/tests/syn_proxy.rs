//! SYN flood defences through the whole pipeline: the SYN proxy (cookie
//! SYN-ACK, validated ACK -> backend SYN, the splice of the two sequence
//! spaces), its failure modes, `auto` mode, and SNAT exhaustion evicting
//! the oldest half-open flow of the tuple space.
//!
//! Expected frames are built from scratch (full checksum computation), so
//! every byte-exact comparison also checks the incremental updates.

mod common;

use common::handshake::*;
use common::*;
use dataplane::conntrack::{ConntrackConfig, Timeouts};
use dataplane::counters::DropReason;
use dataplane::flow::Proto;
use dataplane::packet::Verdict;
use dataplane::snapshot::{ServiceSpec, SynProxyMode};
use dataplane::snat::SnatConfig;
use dataplane::stage::PipelineConfig;
use dataplane::wire::build;
use dataplane::wire::tcp::flags as F;
use std::net::{Ipv4Addr, SocketAddrV4};

/// MSS 1460, NOP, window scale 7, NOP NOP SACK-permitted: what Linux sends.
const CLIENT_SYN_OPTS: &[u8] = &[2, 4, 0x05, 0xb4, 1, 3, 3, 7, 1, 1, 4, 2];
/// What the cookie SYN-ACK offers (and the cookie remembers): MSS 1460
/// (of the ingress port, and the client's), window scale 7.
const SYNACK_OPTS: &[u8] = &[2, 4, 0x05, 0xb4, 1, 3, 3, 7];

/// Send the client's SYN; returns the cookie of the SYN-ACK (checked).
fn syn(gw: &mut Gateway) -> u32 {
    cookie_syn(V4, gw, CLIENT_SYN_OPTS, SYNACK_OPTS)
}

/// SYN, then the ACK of the cookie: returns the cookie and the frame sent
/// to the backend (checked).
fn handshake(gw: &mut Gateway) -> (u32, Vec<(u8, Vec<u8>)>) {
    let cookie = syn(gw);
    cookie_ack(V4, gw, cookie, SYNACK_OPTS, SNAT.into());
    let backend_syn = V4.backend_gets(gw, F::SYN, (ISN, 0), u16::MAX, SYNACK_OPTS, b"", 63);
    (cookie, vec![(INSIDE, backend_syn)])
}

/// The backend's SYN-ACK: window 29200, MSS 1400, window scale 5.
fn backend_synack_frame(gw: &Gateway) -> Vec<u8> {
    V4.backend_sends(
        gw,
        F::SYN | F::ACK,
        (BACKEND_ISN, ISN + 1),
        29200,
        &[2, 4, 0x05, 0x78, 1, 3, 3, 5],
        b"",
    )
}

#[test]
fn a_syn_is_answered_with_a_cookie_and_leaves_no_state() {
    let mut gw = Gateway::new(vec![proxied_web(SynProxyMode::On)]);
    // MSS of the ingress port (1500 - 40), our window scale, window 0, no
    // SACK or timestamps offered.
    syn(&mut gw);
    let c = gw.counters();
    assert_eq!(c.syn_cookies_sent, 1);
    assert_eq!(c.flows_created, 0);
    assert_eq!(gw.worker.pipeline().conntrack().len(), 0);
    assert_eq!(gw.worker.pipeline().snat().stats().in_use, 0);
}

#[test]
fn a_syn_without_options_gets_an_answer_without_window_scaling() {
    let mut gw = Gateway::new(vec![proxied_web(SynProxyMode::On)]);
    let (v, out) = gw.send(OUTSIDE, &from_client(F::SYN, ISN, 0, 8192, &[], b""));
    assert_eq!(v, Verdict::Reply);
    let cookie = seq_of(&out[0].1);
    let want = to_client(
        F::SYN | F::ACK,
        cookie,
        ISN + 1,
        0,
        &[2, 4, 0x05, 0xb4],
        b"",
        64,
    );
    assert_eq!(out, vec![(OUTSIDE, want)]);
    // The ACK opens the backend connection with no window scale either,
    // and the client's MSS (none sent: 536).
    let (v, out) = gw.send(
        OUTSIDE,
        &from_client(F::ACK, ISN + 1, cookie.wrapping_add(1), 8192, &[], b""),
    );
    assert_eq!(v, Verdict::Forward(INSIDE));
    let flow = gw.flow(Proto::Tcp, CLIENT, CPORT, VIP, 80).unwrap();
    let r = *flow.reply();
    let want = to_backend(&r, F::SYN, ISN, 0, u16::MAX, &[2, 4, 0x02, 0x18], b"");
    assert_eq!(out, vec![(INSIDE, want)]);
}

#[test]
fn a_valid_cookie_ack_becomes_the_backend_syn() {
    let mut gw = Gateway::new(vec![proxied_web(SynProxyMode::On)]);
    // The client's SYN as the cookie remembered it: ISN, MSS 1460, window
    // scale 7 (no SACK: not offered), full NAT, TTL one lower.
    handshake(&mut gw);
    let c = gw.counters();
    assert_eq!((c.syn_cookies_validated, c.flows_created), (1, 1));
    assert_eq!(gw.worker.pipeline().snat().stats().in_use, 1);
}

#[test]
fn the_backend_synack_is_acked_and_both_sequence_spaces_are_spliced() {
    let mut gw = Gateway::new(vec![proxied_web(SynProxyMode::On)]);
    let (cookie, _) = handshake(&mut gw);
    // The backend scales by 5; the client was told 7.
    backend_synack(
        V4,
        &mut gw,
        cookie,
        (29200, &[2, 4, 0x05, 0x78, 1, 3, 3, 5], 5),
    );
    let to_client = data_both_ways(V4, &mut gw, cookie, b"GET /", (b"200 OK", 1000, 5));
    assert!(checksums_valid(&to_client));

    // A retransmitted backend SYN-ACK (our ACK was lost) is acked again.
    let (v, out) = gw.send(INSIDE, &backend_synack_frame(&gw));
    assert_eq!(v, Verdict::Reply);
    assert_eq!(out.len(), 1);
    assert_eq!(seq_of(&out[0].1), ISN + 1);
}

#[test]
fn client_segments_before_the_backend_answers_resend_the_syn_or_are_dropped() {
    let mut gw = Gateway::new(vec![proxied_web(SynProxyMode::On)]);
    let (cookie, first) = handshake(&mut gw);
    // A window probe (ACK) re-sends the backend SYN.
    let (v, out) = gw.send(
        OUTSIDE,
        &from_client(F::ACK, ISN + 1, cookie.wrapping_add(1), 502, &[], b""),
    );
    assert_eq!(v, Verdict::Forward(INSIDE));
    assert_eq!(out, first);
    // Data or a FIN is dropped until then.
    let (v, _) = gw.send(
        OUTSIDE,
        &from_client(
            F::FIN | F::ACK,
            ISN + 1,
            cookie.wrapping_add(1),
            502,
            &[],
            b"",
        ),
    );
    assert_eq!(v, Verdict::Drop(DropReason::SynProxyPending));
    assert_eq!(gw.counters().dropped(DropReason::SynProxyPending), 1);
}

#[test]
fn a_forged_cookie_is_dropped_and_counted() {
    let mut gw = Gateway::new(vec![proxied_web(SynProxyMode::On)]);
    let cookie = syn(&mut gw);
    for bad in [
        from_client(F::ACK, ISN + 1, cookie.wrapping_add(2), 502, &[], b""),
        from_client(F::ACK, ISN + 2, cookie.wrapping_add(1), 502, &[], b""),
        from_client(F::ACK, 12345, 67890, 502, &[], b""),
    ] {
        let (v, out) = gw.send(OUTSIDE, &bad);
        assert_eq!(v, Verdict::Drop(DropReason::SynCookieInvalid));
        assert!(out.is_empty());
    }
    let c = gw.counters();
    assert_eq!(c.dropped(DropReason::SynCookieInvalid), 3);
    assert_eq!((c.syn_cookies_validated, c.flows_created), (0, 0));
}

#[test]
fn a_cookie_of_the_previous_slice_is_accepted_an_older_one_is_not() {
    let mut gw = Gateway::new(vec![proxied_web(SynProxyMode::On)]);
    let cookie = syn(&mut gw);
    gw.clock.advance_ms(64_000);
    let (v, _) = gw.send(
        OUTSIDE,
        &from_client(F::ACK, ISN + 1, cookie.wrapping_add(1), 502, &[], b""),
    );
    assert_eq!(v, Verdict::Forward(INSIDE));

    let mut gw = Gateway::new(vec![proxied_web(SynProxyMode::On)]);
    let cookie = syn(&mut gw);
    gw.clock.advance_ms(2 * 64_000);
    let (v, _) = gw.send(
        OUTSIDE,
        &from_client(F::ACK, ISN + 1, cookie.wrapping_add(1), 502, &[], b""),
    );
    assert_eq!(v, Verdict::Drop(DropReason::SynCookieInvalid));
}

#[test]
fn off_forwards_syns_and_auto_proxies_only_above_its_threshold() {
    let mut gw = Gateway::new(vec![proxied_web(SynProxyMode::Off)]);
    let (v, _) = gw.send(
        OUTSIDE,
        &from_client(F::SYN, ISN, 0, 64240, CLIENT_SYN_OPTS, b""),
    );
    assert_eq!(v, Verdict::Forward(INSIDE));

    let mut gw = Gateway::new(vec![proxied_web(SynProxyMode::Auto {
        half_open_threshold: 2,
    })]);
    let syn_from = |port: u16| {
        tcp(
            (ROUTER_MAC, OUT_MAC),
            (CLIENT, port),
            (VIP, 80),
            F::SYN,
            ISN,
            0,
            64240,
            CLIENT_SYN_OPTS,
            b"",
            64,
        )
    };
    for port in 1..=3 {
        let (v, _) = gw.send(OUTSIDE, &syn_from(port));
        assert_eq!(v, Verdict::Forward(INSIDE), "half-open flows: {}", port - 1);
    }
    let (v, _) = gw.send(OUTSIDE, &syn_from(4));
    assert_eq!(v, Verdict::Reply, "above the threshold: a cookie");
    assert_eq!(gw.worker.pipeline().conntrack().half_open(), 3);
}

/// A gateway whose worker has 4 SNAT ports.
fn small_snat_gateway() -> Gateway {
    let config = PipelineConfig {
        snat: SnatConfig {
            addrs: vec![SNAT],
            port_range: 2000..=2003,
            ..SnatConfig::default()
        },
        conntrack: ConntrackConfig {
            capacity: 64,
            timeouts: Timeouts::default(),
            expiry_scan_per_poll: 1,
            early_drop_scan: 64,
            syn_proxy_flows: 64,
        },
        ..pipeline_config(0, 1)
    };
    Gateway::with_config(vec![web(&[0])], config)
}

fn plain_syn(port: u16) -> Vec<u8> {
    build::eth_ipv4_tcp(
        ROUTER_MAC,
        OUT_MAC,
        CLIENT,
        port,
        VIP,
        80,
        F::SYN,
        ISN,
        0,
        b"",
    )
}

#[test]
fn snat_exhaustion_evicts_the_oldest_half_open_flow_of_the_tuple_space() {
    let mut gw = small_snat_gateway();
    for port in 1..=4 {
        let (v, _) = gw.send(OUTSIDE, &plain_syn(port));
        assert_eq!(v, Verdict::Forward(INSIDE));
        gw.clock.advance_ms(1_000);
    }
    let oldest = gw.flow(Proto::Tcp, CLIENT, 1, VIP, 80).unwrap();
    let (v, out) = gw.send(OUTSIDE, &plain_syn(5));
    assert_eq!(v, Verdict::Forward(INSIDE));
    assert!(
        gw.flow(Proto::Tcp, CLIENT, 1, VIP, 80).is_none(),
        "oldest evicted"
    );
    let new = gw.flow(Proto::Tcp, CLIENT, 5, VIP, 80).unwrap();
    assert_eq!(new.reply(), oldest.reply(), "its tuple reused at once");
    assert_eq!(out[0].1[34..36], oldest.reply().dst_port.to_be_bytes());
    let c = gw.counters();
    assert_eq!((c.snat_early_drops, c.flows_early_dropped), (1, 1));
    assert_eq!(gw.worker.pipeline().snat().stats().in_use, 4);
    assert_eq!(gw.worker.pipeline().conntrack().len(), 4);
    gw.assert_snat_accounting();
}

#[test]
fn snat_exhaustion_with_only_established_flows_still_drops() {
    let mut gw = small_snat_gateway();
    for port in 1..=4 {
        gw.send(OUTSIDE, &plain_syn(port));
        let flow = gw.flow(Proto::Tcp, CLIENT, port, VIP, 80).unwrap();
        let r = *flow.reply();
        let synack = from_backend_tcp(&r, F::SYN | F::ACK, BACKEND_ISN, ISN + 1, b"");
        gw.send(INSIDE, &synack);
        let ack = build::eth_ipv4_tcp(
            ROUTER_MAC,
            OUT_MAC,
            CLIENT,
            port,
            VIP,
            80,
            F::ACK,
            ISN + 1,
            BACKEND_ISN + 1,
            b"",
        );
        let (v, _) = gw.send(OUTSIDE, &ack);
        assert_eq!(v, Verdict::Forward(INSIDE));
    }
    let (v, _) = gw.send(OUTSIDE, &plain_syn(5));
    assert_eq!(v, Verdict::Drop(DropReason::SnatExhausted));
    assert_eq!(gw.counters().snat_early_drops, 0);
    assert_eq!(gw.worker.pipeline().conntrack().len(), 4);
}

#[test]
fn new_flows_over_the_per_source_rate_are_dropped_and_counted() {
    let config = PipelineConfig {
        new_flows_per_source_per_s: 2,
        ..pipeline_config(0, 1)
    };
    let mut gw = Gateway::with_config(vec![web(&[0])], config);
    for port in 1..=2 {
        assert_eq!(
            gw.send(OUTSIDE, &plain_syn(port)).0,
            Verdict::Forward(INSIDE)
        );
    }
    let (v, out) = gw.send(OUTSIDE, &plain_syn(3));
    assert_eq!(v, Verdict::Drop(DropReason::NewFlowRateLimited));
    assert!(out.is_empty());
    // Another source has its own budget.
    let other = build::eth_ipv4_tcp(
        ROUTER_MAC,
        OUT_MAC,
        Ipv4Addr::new(198, 51, 100, 99),
        3,
        VIP,
        80,
        F::SYN,
        ISN,
        0,
        b"",
    );
    assert_eq!(gw.send(OUTSIDE, &other).0, Verdict::Forward(INSIDE));
    // Half a second refills one token.
    gw.clock.advance_ms(500);
    assert_eq!(gw.send(OUTSIDE, &plain_syn(4)).0, Verdict::Forward(INSIDE));
    assert_eq!(gw.counters().dropped(DropReason::NewFlowRateLimited), 1);
}

/// NOP NOP and the timestamp option (RFC 7323 §3).
fn ts_opt(val: u32, ecr: u32) -> Vec<u8> {
    let mut o = vec![1, 1, 8, 10];
    o.extend_from_slice(&val.to_be_bytes());
    o.extend_from_slice(&ecr.to_be_bytes());
    o
}

/// `a` then `b`.
fn cat(a: &[u8], b: &[u8]) -> Vec<u8> {
    [a, b].concat()
}

/// The client's TSval in its SYN, and the backend's in its SYN-ACK.
const CLIENT_TS: u32 = 4_000_000;
const BACKEND_TS: u32 = 9_000_000;
/// MSS 1460, SACK-permitted, timestamps, NOP, window scale 7: Linux's SYN.
fn linux_syn_opts() -> Vec<u8> {
    let mut o = vec![2, 4, 0x05, 0xb4, 4, 2, 8, 10];
    o.extend_from_slice(&CLIENT_TS.to_be_bytes());
    o.extend_from_slice(&[0, 0, 0, 0, 1, 3, 3, 7]);
    o
}

/// The TSval of the SYN-ACK at the fixture's start (1,000 ms): the clock's
/// high bits (960), window scale 7 and SACK-permitted (16) in the low ones.
const OUR_TS: u32 = 960 | 7 | 16;

#[test]
fn a_timestamp_echo_whose_option_bits_disagree_with_the_cookie_is_refused() {
    let mut gw = Gateway::new(vec![proxied_web(SynProxyMode::On)]);
    let (_, out) = gw.send(
        OUTSIDE,
        &from_client(F::SYN, ISN, 0, 64240, &linux_syn_opts(), b""),
    );
    let cookie = seq_of(&out[0].1);
    // The echo claims window scale 6: not what the cookie says.
    let forged = from_client(
        F::ACK,
        ISN + 1,
        cookie.wrapping_add(1),
        502,
        &ts_opt(CLIENT_TS + 1, OUR_TS - 1),
        b"",
    );
    let (v, out) = gw.send(OUTSIDE, &forged);
    assert_eq!(v, Verdict::Drop(DropReason::SynCookieInvalid));
    assert!(out.is_empty());
    assert_eq!(gw.counters().flows_created, 0);
}

#[test]
fn timestamps_are_offered_carried_to_the_backend_and_shifted_on_the_splice() {
    let mut gw = Gateway::new(vec![proxied_web(SynProxyMode::On)]);
    let (v, out) = gw.send(
        OUTSIDE,
        &from_client(F::SYN, ISN, 0, 64240, &linux_syn_opts(), b""),
    );
    assert_eq!(v, Verdict::Reply);
    let cookie = seq_of(&out[0].1);
    // MSS, window scale 7, timestamps (ours, echoing the client's); no SACK.
    let want = to_client(
        F::SYN | F::ACK,
        cookie,
        ISN + 1,
        0,
        &cat(&[2, 4, 0x05, 0xb4, 1, 3, 3, 7], &ts_opt(OUR_TS, CLIENT_TS)),
        b"",
        64,
    );
    assert_eq!(out, vec![(OUTSIDE, want)]);

    // The ACK echoes our TSval: the backend SYN carries the client's TSval
    // (grown by 8 bytes for MSS and window scale) and TSecr 0.
    let (v, out) = gw.send(
        OUTSIDE,
        &from_client(
            F::ACK,
            ISN + 1,
            cookie.wrapping_add(1),
            502,
            &ts_opt(CLIENT_TS + 1, OUR_TS),
            b"",
        ),
    );
    assert_eq!(v, Verdict::Forward(INSIDE));
    let r = *gw.flow(Proto::Tcp, CLIENT, CPORT, VIP, 80).unwrap().reply();
    let want = to_backend(
        &r,
        F::SYN,
        ISN,
        0,
        u16::MAX,
        &cat(&[2, 4, 0x05, 0xb4, 1, 3, 3, 7], &ts_opt(CLIENT_TS + 1, 0)),
        b"",
    );
    assert_eq!(out, vec![(INSIDE, want)]);

    // The backend answers with its own clock; the ACK to it echoes that,
    // the window update to the client carries the clock the client knows.
    let synack = from_backend(
        &r,
        F::SYN | F::ACK,
        BACKEND_ISN,
        ISN + 1,
        29200,
        &cat(
            &[2, 4, 0x05, 0xb4, 1, 3, 3, 7],
            &ts_opt(BACKEND_TS, CLIENT_TS + 1),
        ),
        b"",
    );
    let (v, out) = gw.send(INSIDE, &synack);
    assert_eq!(v, Verdict::Reply);
    let window_update = to_client(
        F::ACK,
        cookie.wrapping_add(1),
        ISN + 1,
        29200,
        &ts_opt(OUR_TS, CLIENT_TS + 1),
        b"",
        64,
    );
    let ack_to_backend = tcp(
        (IN_MAC, backend_mac(r.src_ip)),
        (r.dst_ip, r.dst_port),
        (r.src_ip, r.src_port),
        F::ACK,
        ISN + 1,
        BACKEND_ISN + 1,
        502,
        &ts_opt(CLIENT_TS + 1, BACKEND_TS),
        b"",
        64,
    );
    assert_eq!(
        out,
        vec![(OUTSIDE, window_update), (INSIDE, ack_to_backend)]
    );

    // Client -> backend: TSecr moves to the backend's clock (and the ACK
    // number to its sequence space); the client's TSval passes.
    let (v, out) = gw.send(
        OUTSIDE,
        &from_client(
            F::ACK | F::PSH,
            ISN + 1,
            cookie.wrapping_add(1),
            502,
            &ts_opt(CLIENT_TS + 20, OUR_TS),
            b"GET /",
        ),
    );
    assert_eq!(v, Verdict::Forward(INSIDE));
    let want = to_backend(
        &r,
        F::ACK | F::PSH,
        ISN + 1,
        BACKEND_ISN + 1,
        502,
        &ts_opt(CLIENT_TS + 20, BACKEND_TS),
        b"GET /",
    );
    assert_eq!(out, vec![(INSIDE, want)]);

    // Backend -> client: TSval moves to the clock the client knows; the
    // echo of the client's TSval passes.
    let reply = from_backend(
        &r,
        F::ACK | F::PSH,
        BACKEND_ISN + 1,
        ISN + 6,
        229,
        &ts_opt(BACKEND_TS + 35, CLIENT_TS + 20),
        b"200 OK",
    );
    let (v, out) = gw.send(INSIDE, &reply);
    assert_eq!(v, Verdict::Forward(OUTSIDE));
    let want = to_client(
        F::ACK | F::PSH,
        cookie.wrapping_add(1),
        ISN + 6,
        229,
        &ts_opt(OUR_TS + 35, CLIENT_TS + 20),
        b"200 OK",
        63,
    );
    assert_eq!(out, vec![(OUTSIDE, want)]);
    assert!(checksums_valid(&out[0].1));

    // An option layout with the timestamps at an odd offset (one NOP
    // before them) is shifted with a correct checksum too.
    let mut odd = vec![1, 8, 10];
    odd.extend_from_slice(&(BACKEND_TS + 40).to_be_bytes());
    odd.extend_from_slice(&(CLIENT_TS + 20).to_be_bytes());
    odd.push(0); // EOL
    let reply = from_backend(&r, F::ACK, BACKEND_ISN + 7, ISN + 6, 229, &odd, b"");
    let (v, out) = gw.send(INSIDE, &reply);
    assert_eq!(v, Verdict::Forward(OUTSIDE));
    let mut odd_want = vec![1, 8, 10];
    odd_want.extend_from_slice(&(OUR_TS + 40).to_be_bytes());
    odd_want.extend_from_slice(&(CLIENT_TS + 20).to_be_bytes());
    odd_want.push(0);
    let want = to_client(
        F::ACK,
        cookie.wrapping_add(7),
        ISN + 6,
        229,
        &odd_want,
        b"",
        63,
    );
    assert_eq!(out, vec![(OUTSIDE, want)]);
}

/// The table holds `syn_proxy_flows` splice states: a cookie-validated
/// handshake beyond them is dropped and counted, before it takes a flow or
/// a SNAT tuple, while the proxied flow it found goes on, and so do the
/// flows of a service without the SYN proxy.
#[test]
fn a_handshake_beyond_the_splice_states_is_dropped_and_counted() {
    let config = PipelineConfig {
        conntrack: ConntrackConfig {
            syn_proxy_flows: 1,
            ..ConntrackConfig::with_capacity(64)
        },
        ..pipeline_config(0, 1)
    };
    let plain = ServiceSpec::new("plain", Proto::Tcp, VIP, 8080)
        .endpoint(SocketAddrV4::new(backend_ip(0), 8080));
    let mut gw = Gateway::with_config(vec![proxied_web(SynProxyMode::On), plain], config);
    let (cookie, _) = handshake(&mut gw);
    let from_port = |flags: u8, seq: u32, ack: u32, opts: &[u8]| {
        tcp(
            (ROUTER_MAC, OUT_MAC),
            (CLIENT, 2),
            (VIP, 80),
            flags,
            seq,
            ack,
            64240,
            opts,
            b"",
            64,
        )
    };
    let (v, out) = gw.send(OUTSIDE, &from_port(F::SYN, ISN, 0, CLIENT_SYN_OPTS));
    assert_eq!(v, Verdict::Reply, "a cookie for the second client");
    let second = seq_of(&out[0].1);
    let (v, out) = gw.send(
        OUTSIDE,
        &from_port(F::ACK, ISN + 1, second.wrapping_add(1), &[]),
    );
    assert_eq!(v, Verdict::Drop(DropReason::SynProxyTableFull));
    assert!(out.is_empty());
    let c = gw.counters();
    assert_eq!(c.dropped(DropReason::SynProxyTableFull), 1);
    assert_eq!((c.syn_cookies_validated, c.flows_created), (2, 1));
    assert_eq!(gw.worker.pipeline().conntrack().len(), 1);
    assert_eq!(gw.worker.pipeline().snat().stats().in_use, 1);
    // The first client's flow is spliced as usual.
    backend_synack(
        V4,
        &mut gw,
        cookie,
        (29200, &[2, 4, 0x05, 0x78, 1, 3, 3, 5], 5),
    );
    assert_eq!(gw.counters().syn_proxy_spliced, 1);
    // A service without the SYN proxy takes new flows with the array full.
    for sport in [3, 4] {
        let syn = tcp(
            (ROUTER_MAC, OUT_MAC),
            (CLIENT, sport),
            (VIP, 8080),
            F::SYN,
            ISN,
            0,
            64240,
            CLIENT_SYN_OPTS,
            b"",
            64,
        );
        assert_eq!(gw.send(OUTSIDE, &syn).0, Verdict::Forward(INSIDE));
    }
    let c = gw.counters();
    assert_eq!(c.flows_created, 3);
    assert_eq!(c.dropped(DropReason::SynProxyTableFull), 1);
    assert_eq!(gw.worker.pipeline().conntrack().syn_proxied_len(), 1);
}
