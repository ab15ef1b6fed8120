//! TCP sequence-window tracking through the whole pipeline (conntrack's
//! `tcp_in_window`, RFC 5961 §3.2 for RSTs): in-window data passes,
//! out-of-window data and RSTs are dropped and counted, an inexact
//! in-window RST is answered with a challenge ACK (exact frame), an exact
//! RST closes the flow.

mod common;

use common::*;
use dataplane::conntrack::TcpState;
use dataplane::counters::DropReason;
use dataplane::flow::{FlowKey, Proto};
use dataplane::packet::Verdict;
use dataplane::wire::build;
use dataplane::wire::tcp::flags as F;

const CPORT: u16 = 40_000;
/// Client ISN 100, backend ISN 900, windows 64240 both ways.
const C: u32 = 101;
const B: u32 = 901;

fn client(flags: u8, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    build::eth_ipv4_tcp(
        ROUTER_MAC, OUT_MAC, CLIENT, CPORT, VIP, 80, flags, seq, ack, payload,
    )
}

/// An established flow; returns its reply key.
fn established(gw: &mut Gateway) -> FlowKey {
    assert_eq!(
        gw.send(OUTSIDE, &client(F::SYN, C - 1, 0, b"")).0,
        Verdict::Forward(INSIDE)
    );
    let r = *gw.flow(Proto::Tcp, CLIENT, CPORT, VIP, 80).unwrap().reply();
    let v = gw
        .send(
            INSIDE,
            &from_backend_tcp(&r, F::SYN | F::ACK, B - 1, C, b""),
        )
        .0;
    assert_eq!(v, Verdict::Forward(OUTSIDE));
    assert_eq!(
        gw.send(OUTSIDE, &client(F::ACK, C, B, b"")).0,
        Verdict::Forward(INSIDE)
    );
    r
}

fn state(gw: &Gateway) -> Option<TcpState> {
    gw.flow(Proto::Tcp, CLIENT, CPORT, VIP, 80)
        .and_then(|f| f.tcp_state())
}

#[test]
fn in_window_data_passes_both_ways() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    let r = established(&mut gw);
    let (v, _) = gw.send(
        OUTSIDE,
        &client(F::ACK | F::PSH, C, B, b"GET / HTTP/1.1\r\n\r\n"),
    );
    assert_eq!(v, Verdict::Forward(INSIDE));
    let (v, _) = gw.send(
        INSIDE,
        &from_backend_tcp(&r, F::ACK | F::PSH, B, C + 18, b"HTTP/1.1 200 OK"),
    );
    assert_eq!(v, Verdict::Forward(OUTSIDE));
    // A retransmission of what was already sent is in the window too.
    let (v, _) = gw.send(
        OUTSIDE,
        &client(F::ACK | F::PSH, C, B, b"GET / HTTP/1.1\r\n\r\n"),
    );
    assert_eq!(v, Verdict::Forward(INSIDE));
    assert_eq!(gw.counters().dropped(DropReason::TcpOutOfWindow), 0);
}

#[test]
fn out_of_window_data_and_acks_of_unsent_bytes_are_dropped_and_counted() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    let r = established(&mut gw);
    // Beyond the window the backend advertised.
    let (v, out) = gw.send(OUTSIDE, &client(F::ACK | F::PSH, C + 1_000_000, B, b"x"));
    assert_eq!(v, Verdict::Drop(DropReason::TcpOutOfWindow));
    assert!(out.is_empty());
    // Acknowledging bytes the client never sent.
    let (v, _) = gw.send(INSIDE, &from_backend_tcp(&r, F::ACK, B, C + 500_000, b""));
    assert_eq!(v, Verdict::Drop(DropReason::TcpOutOfWindow));
    assert_eq!(gw.counters().dropped(DropReason::TcpOutOfWindow), 2);
    assert_eq!(state(&gw), Some(TcpState::Established));
}

#[test]
fn an_out_of_window_rst_is_dropped_and_the_flow_lives_on() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    established(&mut gw);
    let (v, out) = gw.send(OUTSIDE, &client(F::RST, C + 3_000_000, 0, b""));
    assert_eq!(v, Verdict::Drop(DropReason::TcpOutOfWindow));
    assert!(out.is_empty());
    assert_eq!(state(&gw), Some(TcpState::Established));
}

#[test]
fn an_inexact_in_window_rst_is_answered_with_a_challenge_ack() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    let r = established(&mut gw);
    // From the backend, 100 bytes past what the client acknowledged.
    let (v, out) = gw.send(INSIDE, &from_backend_tcp(&r, F::RST, B + 100, 0, b""));
    assert_eq!(v, Verdict::Reply);
    // The challenge ACK, as the client would send it: to the backend from
    // the SNAT tuple, seq = what the client sent, ack = what it expects,
    // window = what it allowed.
    // (`build` frames carry window 64240, the client's.)
    let want = build::eth_ipv4_tcp(
        IN_MAC,
        backend_mac(r.src_ip),
        r.dst_ip,
        r.dst_port,
        r.src_ip,
        r.src_port,
        F::ACK,
        C,
        B,
        b"",
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, INSIDE);
    assert!(checksums_valid(&out[0].1));
    assert_eq!(out[0].1, want);
    assert_eq!(gw.counters().challenge_acks_sent, 1);
    assert_eq!(state(&gw), Some(TcpState::Established), "nothing changed");
}

#[test]
fn an_exact_rst_closes_the_flow() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    let r = established(&mut gw);
    let (v, _) = gw.send(INSIDE, &from_backend_tcp(&r, F::RST, B, 0, b""));
    assert_eq!(v, Verdict::Forward(OUTSIDE));
    assert_eq!(state(&gw), Some(TcpState::Close));
}

/// A backend still holding an old connection on the tuple answers the SYN
/// with a challenge ACK carrying that connection's numbers: it passes
/// (Linux's IGNORE) and the client's RST (<SEQ=SEG.ACK>) clears it.
#[test]
fn a_challenge_ack_to_a_syn_passes_and_the_clients_rst_is_accepted() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    assert_eq!(
        gw.send(OUTSIDE, &client(F::SYN, C - 1, 0, b"")).0,
        Verdict::Forward(INSIDE)
    );
    let r = *gw.flow(Proto::Tcp, CLIENT, CPORT, VIP, 80).unwrap().reply();
    let old_ack = 3_000_000_000;
    let (v, _) = gw.send(INSIDE, &from_backend_tcp(&r, F::ACK, 77_777, old_ack, b""));
    assert_eq!(v, Verdict::Forward(OUTSIDE));
    let (v, _) = gw.send(OUTSIDE, &client(F::RST, old_ack, 0, b""));
    assert_eq!(v, Verdict::Forward(INSIDE));
    assert_eq!(state(&gw), Some(TcpState::Close));
    assert_eq!(gw.counters().dropped(DropReason::TcpOutOfWindow), 0);
}

/// MSS 1460, NOP, window scale 7, NOP NOP SACK-permitted: Linux's SYN.
const LINUX_SYN_OPTS: &[u8] = &[2, 4, 0x05, 0xb4, 1, 3, 3, 7, 1, 1, 4, 2];

/// A connection as Linux makes it: both SYNs offer window scale 7, so every
/// later window field is a scaled value (502 << 7 = 64,256 bytes). The
/// backend's response is larger than the unscaled field and must pass
/// (the regression: the client's SYN did not set up its side when the flow
/// was created, so its windows were read unscaled).
#[test]
fn scaled_windows_from_the_syns_let_a_large_response_through() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    let syn = from_client(F::SYN, C - 1, 0, 64_240, LINUX_SYN_OPTS, b"");
    assert_eq!(gw.send(OUTSIDE, &syn).0, Verdict::Forward(INSIDE));
    let r = *gw.flow(Proto::Tcp, CLIENT, CPORT, VIP, 80).unwrap().reply();
    let backend = |flags: u8, seq: u32, ack: u32, window: u16, opts: &[u8], payload: &[u8]| {
        from_backend(&r, flags, seq, ack, window, opts, payload)
    };
    let synack = backend(F::SYN | F::ACK, B - 1, C, 65_160, LINUX_SYN_OPTS, b"");
    assert_eq!(gw.send(INSIDE, &synack).0, Verdict::Forward(OUTSIDE));
    let ack = from_client(F::ACK | F::PSH, C, B, 502, &[], b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(gw.send(OUTSIDE, &ack).0, Verdict::Forward(INSIDE));
    // Three full segments: 4,380 bytes past B, far beyond 502 unscaled.
    let body = [b'x'; 1460];
    for i in 0..3u32 {
        let seg = backend(F::ACK, B + i * 1460, C + 18, 509, &[], &body);
        assert_eq!(
            gw.send(INSIDE, &seg).0,
            Verdict::Forward(OUTSIDE),
            "segment {i}"
        );
    }
    assert_eq!(gw.counters().dropped(DropReason::TcpOutOfWindow), 0);
}

/// A service without SNAT and with `tcp_pickup`: an ACK whose SYN this
/// gateway never saw (the connection moved here by an ECMP change) creates
/// an ESTABLISHED flow, tracked liberally: the window scale is unknown, so
/// the backend's segments far beyond the raw window field still pass.
/// Without `tcp_pickup` the same ACK creates nothing.
#[test]
fn a_connection_picked_up_mid_stream_carries_on_where_configured() {
    let mut direct = web(&[0]);
    direct.snat = false;
    let mid_stream = client(F::ACK | F::PSH, C, B, b"GET / HTTP/1.1\r\n\r\n");

    let mut gw = Gateway::new(vec![direct.clone()]);
    let (v, _) = gw.send(OUTSIDE, &mid_stream);
    assert_eq!(v, Verdict::Drop(DropReason::NoFlow), "no pickup by default");
    assert!(gw.flow(Proto::Tcp, CLIENT, CPORT, VIP, 80).is_none());

    direct.tcp_pickup = true;
    let mut gw = Gateway::new(vec![direct]);
    let (v, _) = gw.send(OUTSIDE, &mid_stream);
    assert_eq!(v, Verdict::Forward(INSIDE));
    assert_eq!(state(&gw), Some(TcpState::Established));
    let r = *gw.flow(Proto::Tcp, CLIENT, CPORT, VIP, 80).unwrap().reply();
    assert_eq!(r.dst_ip, CLIENT, "no SNAT: the backend sees the client");
    let body = [b'y'; 1460];
    for i in 0..60u32 {
        let seg = from_backend_tcp(&r, F::ACK, B + i * 1460, C + 18, &body);
        assert_eq!(
            gw.send(INSIDE, &seg).0,
            Verdict::Forward(OUTSIDE),
            "segment {i}"
        );
    }
    // A FIN or RST without a flow is never picked up.
    let mut gw2 = Gateway::new(vec![{
        let mut s = web(&[0]);
        s.snat = false;
        s.tcp_pickup = true;
        s
    }]);
    for flags in [F::ACK | F::FIN, F::RST, F::ACK | F::RST] {
        let (v, _) = gw2.send(OUTSIDE, &client(flags, C, B, b""));
        assert!(matches!(v, Verdict::Drop(_)), "{flags:#x}: {v:?}");
    }
    assert!(gw2.flow(Proto::Tcp, CLIENT, CPORT, VIP, 80).is_none());
    assert_eq!(gw.counters().dropped(DropReason::TcpOutOfWindow), 0);
}
