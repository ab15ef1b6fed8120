//! Every defence of the flow stage over IPv6 (issue 17: the stage is one,
//! generic over the family): the SYN proxy (cookie SYN-ACK with the IPv6
//! MSS, validated ACK → backend SYN, the splice of both sequence spaces, a
//! forged cookie dropped), RSTs for the `reset` backend-gone policy,
//! challenge ACKs (RFC 5961 §3.2), client-port remapping without SNAT,
//! and the per-source new-flow limit counted per /64.
//!
//! Expected frames are built from scratch (every checksum computed over
//! the IPv6 pseudo-header), so a byte-exact comparison also checks the
//! incremental updates.

mod common;

use common::handshake::*;
use common::ipv6::*;
use common::*;
use dataplane::conntrack::TcpState;
use dataplane::counters::DropReason;
use dataplane::flow::Proto;
use dataplane::packet::Verdict;
use dataplane::snapshot::{BackendGonePolicy, ServiceSpec, SynProxyMode};
use dataplane::stage::PipelineConfig;
use dataplane::wire::build;
use dataplane::wire::tcp::flags as F;
use std::net::{Ipv6Addr, SocketAddr};

/// MSS 1440, NOP, window scale 7, NOP NOP SACK-permitted: Linux's IPv6 SYN
/// on a 1500-byte link.
const CLIENT_SYN_OPTS: &[u8] = &[2, 4, 0x05, 0xa0, 1, 3, 3, 7, 1, 1, 4, 2];
/// A second VIP of the fixture's VIP prefix.
const VIP6B: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 0x11);

fn gateway_with(web: ServiceSpec, pipeline: PipelineConfig) -> Gateway {
    Gateway::with_spec(spec6(vec![web]), pipeline)
}

fn proxied_web6() -> Gateway {
    let mut s = web6(&[0]);
    s.syn_proxy = SynProxyMode::On;
    gateway_with(s, pipeline_config(0, 1))
}

/// What the cookie SYN-ACK offers over IPv6: MSS of the ingress port
/// (1500 - 60) and our window scale.
const SYNACK_OPTS: &[u8] = &[2, 4, 0x05, 0xa0, 1, 3, 3, 7];

#[test]
fn an_ipv6_syn_gets_a_cookie_its_ack_opens_the_backend_and_both_spaces_are_spliced() {
    let mut gw = proxied_web6();
    let cookie = cookie_syn(V6, &mut gw, CLIENT_SYN_OPTS, SYNACK_OPTS);
    assert_eq!(gw.counters().syn_cookies_sent, 1);
    // The ACK of the cookie becomes the backend SYN: the client's ISN, its
    // MSS and window scale from the cookie, full NAT, hop limit one lower.
    cookie_ack(V6, &mut gw, cookie, SYNACK_OPTS, SNAT6.into());
    // The backend's SYN-ACK (window scale 5) is acknowledged by the
    // gateway; the client gets a window update in its scale (7).
    backend_synack(
        V6,
        &mut gw,
        cookie,
        (29200, &[2, 4, 0x05, 0x78, 1, 3, 3, 5], 5),
    );
    data_both_ways(V6, &mut gw, cookie, b"GET /", (b"HTTP/1.1 200", 29200, 5));
    assert_eq!(gw.counters().total_drops(), 0);
}

#[test]
fn a_forged_ipv6_cookie_is_dropped_and_counted() {
    let mut gw = proxied_web6();
    let cookie = cookie_syn(V6, &mut gw, CLIENT_SYN_OPTS, SYNACK_OPTS);
    let (v, out) = gw.send(
        OUTSIDE,
        &V6.client_sends(F::ACK, (ISN + 1, cookie.wrapping_add(2)), 502, &[], b""),
    );
    assert_eq!(v, Verdict::Drop(DropReason::SynCookieInvalid));
    assert!(out.is_empty());
    // The right cookie from another client address of the same /64 is
    // refused too: the cookie covers the whole 128-bit address.
    let other = tcp6(
        (CLIENT_MAC6, OUT_MAC),
        (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 8), CPORT),
        (VIP6, 80),
        F::ACK,
        (ISN + 1, cookie.wrapping_add(1)),
        502,
        &[],
        b"",
        64,
    );
    assert_eq!(
        gw.send(OUTSIDE, &other).0,
        Verdict::Drop(DropReason::SynCookieInvalid)
    );
    let c = gw.counters();
    assert_eq!(c.dropped(DropReason::SynCookieInvalid), 2);
    assert_eq!((c.syn_cookies_validated, c.flows_created), (0, 0));
}

#[test]
fn the_reset_policy_answers_ipv6_segments_without_a_flow_or_backend_with_a_rst() {
    let mut web = web6(&[0]);
    web.tcp_backend_gone = BackendGonePolicy::Reset;
    let mut gw = gateway_with(web.clone(), pipeline_config(0, 1));
    // No flow: RST with the segment's acknowledgment as its sequence.
    let (v, out) = gw.send(OUTSIDE, &V6.client_sends(F::ACK, (5, 77), 502, &[], b"x"));
    assert_eq!(v, Verdict::Reply);
    assert_eq!(
        out,
        vec![(OUTSIDE, V6.client_gets(F::RST, (77, 0), 0, &[], b"", 64))]
    );

    // A flow whose backend left: removed, and the client gets a RST.
    let (v, _) = gw.send(OUTSIDE, &V6.client_sends(F::SYN, (ISN, 0), 64240, &[], b""));
    assert_eq!(v, Verdict::Forward(INSIDE));
    let mut moved = web6(&[1]);
    moved.tcp_backend_gone = BackendGonePolicy::Reset;
    gw.swap_spec(&spec6(vec![moved]));
    let (v, out) = gw.send(
        OUTSIDE,
        &V6.client_sends(F::ACK, (ISN + 1, 900), 502, &[], b""),
    );
    assert_eq!(v, Verdict::Reply);
    assert_eq!(
        out,
        vec![(OUTSIDE, V6.client_gets(F::RST, (900, 0), 0, &[], b"", 64))]
    );
    assert!(flow6(&gw, &client_key6()).is_none());
    let c = gw.counters();
    assert_eq!(c.resets_sent, 2);
    assert_eq!(c.total_drops(), 0);
}

#[test]
fn an_inexact_in_window_ipv6_rst_is_answered_with_a_challenge_ack() {
    const C: u32 = 1001;
    const B: u32 = 5001;
    let mut gw = gateway6();
    let (v, _) = gw.send(OUTSIDE, &client_syn6(VIP6, 80, CPORT, b""));
    assert_eq!(v, Verdict::Forward(INSIDE));
    let r = *flow6(&gw, &client_key6()).unwrap().reply();
    let from_backend = |flags, seq, ack| from_backend_tcp(&r, flags, seq, ack, b"");
    assert_eq!(
        gw.send(INSIDE, &from_backend(F::SYN | F::ACK, B - 1, C)).0,
        Verdict::Forward(OUTSIDE)
    );
    let ack = build::eth_ipv6_tcp(
        CLIENT_MAC6,
        OUT_MAC,
        (CLIENT6, CPORT),
        (VIP6, 80),
        F::ACK,
        C,
        B,
        b"",
    );
    assert_eq!(gw.send(OUTSIDE, &ack).0, Verdict::Forward(INSIDE));
    // From the backend, 100 bytes past what the client acknowledged.
    let (v, out) = gw.send(INSIDE, &from_backend(F::RST, B + 100, 0));
    assert_eq!(v, Verdict::Reply);
    // The challenge ACK as the client would send it (`build` frames carry
    // the client's window 64240).
    let want = build::eth_ipv6_tcp(
        IN_MAC,
        backend6_mac(0),
        (r.dst_ip, r.dst_port),
        (r.src_ip, r.src_port),
        F::ACK,
        C,
        B,
        b"",
    );
    assert_eq!(out, vec![(INSIDE, want)]);
    assert_eq!(gw.counters().challenge_acks_sent, 1);
    let flow = flow6(&gw, &client_key6()).unwrap();
    assert_eq!(
        flow.tcp_state(),
        Some(TcpState::Established),
        "nothing changed"
    );
}

#[test]
fn without_snat_an_ipv6_tuple_clash_remaps_the_client_port_and_keeps_the_address() {
    let mut web = web6(&[0]);
    web.snat = false;
    web.listeners.retain(|l| l.0 == std::net::IpAddr::V6(VIP6));
    let mut other = ServiceSpec::new("other6", Proto::Tcp, VIP6B, 8443)
        .endpoint(SocketAddr::new(backend6(0).into(), 8080));
    other.snat = false;
    let mut gw = Gateway::with_spec(spec6(vec![web, other]), pipeline_config(0, 1));
    let (v, _) = gw.send(OUTSIDE, &client_syn6(VIP6, 80, CPORT, b""));
    assert_eq!(v, Verdict::Forward(INSIDE));
    let (v, out) = gw.send(OUTSIDE, &client_syn6(VIP6B, 8443, CPORT, b""));
    assert_eq!(v, Verdict::Forward(INSIDE));
    let sent = &out[0].1;
    let remapped = u16::from_be_bytes([sent[54], sent[55]]);
    assert_ne!(remapped, CPORT);
    let want = with_hop(
        build::eth_ipv6_tcp(
            IN_MAC,
            backend6_mac(0),
            (CLIENT6, remapped),
            (backend6(0), 8080),
            F::SYN,
            1000,
            0,
            b"",
        ),
        63,
    );
    assert_eq!(out, vec![(INSIDE, want)], "client address preserved");
    // The backend's answer to the remapped port reaches the client on its
    // own port, from the service it called.
    let answer = build::eth_ipv6_tcp(
        backend6_mac(0),
        IN_MAC,
        (backend6(0), 8080),
        (CLIENT6, remapped),
        F::SYN | F::ACK,
        1,
        1001,
        b"",
    );
    let (v, out) = gw.send(INSIDE, &answer);
    assert_eq!(v, Verdict::Forward(OUTSIDE));
    let want = with_hop(
        build::eth_ipv6_tcp(
            OUT_MAC,
            CLIENT_MAC6,
            (VIP6B, 8443),
            (CLIENT6, CPORT),
            F::SYN | F::ACK,
            1,
            1001,
            b"",
        ),
        63,
    );
    assert_eq!(out, vec![(OUTSIDE, want)]);
    let c = gw.counters();
    assert_eq!(c.client_ports_remapped, 1);
    assert_eq!(c.dropped(DropReason::TupleInUse), 0);
}

#[test]
fn the_per_source_limit_counts_an_ipv6_slash_64_as_one_source() {
    let config = PipelineConfig {
        new_flows_per_source_per_s: 1,
        ..pipeline_config(0, 1)
    };
    assert_eq!(config.source_prefix_len_v6, 64, "the default");
    let mut gw = gateway_with(web6(&[0]), config);
    let syn_from = |src: Ipv6Addr| {
        build::eth_ipv6_tcp(
            CLIENT_MAC6,
            OUT_MAC,
            (src, CPORT),
            (VIP6, 80),
            F::SYN,
            1000,
            0,
            b"",
        )
    };
    let same_64 = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0xffff, 0, 0, 8);
    let other_64 = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 7);
    assert_eq!(
        gw.send(OUTSIDE, &syn_from(CLIENT6)).0,
        Verdict::Forward(INSIDE)
    );
    assert_eq!(
        gw.send(OUTSIDE, &syn_from(same_64)).0,
        Verdict::Drop(DropReason::NewFlowRateLimited),
        "two addresses of one /64 share its budget"
    );
    assert_eq!(
        gw.send(OUTSIDE, &syn_from(other_64)).0,
        Verdict::Forward(INSIDE),
        "another /64 has its own"
    );
    let c = gw.counters();
    assert_eq!(c.flows_created, 2);
    assert_eq!(c.dropped(DropReason::NewFlowRateLimited), 1);

    // Counted per address (/128), the same two addresses both pass.
    let config = PipelineConfig {
        new_flows_per_source_per_s: 1,
        source_prefix_len_v6: 128,
        ..pipeline_config(0, 1)
    };
    let mut gw = gateway_with(web6(&[0]), config);
    assert_eq!(
        gw.send(OUTSIDE, &syn_from(CLIENT6)).0,
        Verdict::Forward(INSIDE)
    );
    assert_eq!(
        gw.send(OUTSIDE, &syn_from(same_64)).0,
        Verdict::Forward(INSIDE)
    );
}
