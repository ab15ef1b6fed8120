//! MSS clamping per egress port through the whole pipeline (golden
//! frames): SYNs and SYN-ACKs leaving a port with `mss_clamp` announce at
//! most the clamp, never more than they did; a SYN without the option gets
//! one of `min(clamp, 536)` as Linux's TCPMSS target adds it; the SYN
//! proxy's cookie SYN-ACK and its backend SYN respect the clamps of the
//! ports they leave by.
//!
//! Expected frames are built from scratch (full checksum computation), so
//! every byte-exact comparison also checks the incremental updates
//! (RFC 1624), including an MSS value at an odd offset.

mod common;

use common::*;
use dataplane::flow::Proto;
use dataplane::packet::Verdict;
use dataplane::snapshot::SynProxyMode;
use dataplane::wire::tcp::flags as F;

const ISN: u32 = 1_000_000;
const BACKEND_ISN: u32 = 7_000_000;

/// MSS `mss` alone.
fn mss(mss: u16) -> [u8; 4] {
    let [hi, lo] = mss.to_be_bytes();
    [2, 4, hi, lo]
}

/// A gateway serving `web` (SYN proxy `mode`) whose ports clamp to
/// `outside` and `inside`.
fn gateway(outside: Option<u16>, inside: Option<u16>, mode: SynProxyMode) -> Gateway {
    let mut s = spec(vec![proxied_web(mode)]);
    s.ports[usize::from(OUTSIDE)].mss_clamp = outside;
    s.ports[usize::from(INSIDE)].mss_clamp = inside;
    Gateway::with_spec(s, pipeline_config(0, 1))
}

/// The client's SYN with `opts` and `payload` as the backend must get it
/// with `want_opts` instead (full NAT, TTL one lower).
fn syn_to_backend(gw: &mut Gateway, opts: &[u8], payload: &[u8], want_opts: &[u8]) -> u64 {
    let (v, out) = gw.send(OUTSIDE, &from_client(F::SYN, ISN, 0, 64240, opts, payload));
    assert_eq!(v, Verdict::Forward(INSIDE));
    let r = *gw
        .flow(Proto::Tcp, CLIENT, CPORT, VIP, 80)
        .expect("flow")
        .reply();
    let want = to_backend(&r, F::SYN, ISN, 0, 64240, want_opts, payload);
    assert_eq!(out, vec![(INSIDE, want)]);
    gw.counters().mss_clamped
}

#[test]
fn a_syn_leaving_a_clamped_port_is_lowered_never_raised() {
    // (what the client sends, the inside port's clamp, what the backend
    // gets, counted)
    let odd_in = [1, 2, 4, 0x05, 0xb4, 1, 1, 1];
    let odd_out = [1, 2, 4, 0x04, 0xb0, 1, 1, 1];
    let linux = [
        2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
    ];
    let linux_clamped = [
        2, 4, 0x04, 0xb0, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
    ];
    /// (what, the client's options, the inside port's clamp, what the
    /// backend gets, counted).
    type Case = (&'static str, Vec<u8>, Option<u16>, Vec<u8>, u64);
    let cases: Vec<Case> = vec![
        (
            "above: lowered",
            mss(1460).to_vec(),
            Some(1200),
            mss(1200).to_vec(),
            1,
        ),
        (
            "below: kept",
            mss(1000).to_vec(),
            Some(1200),
            mss(1000).to_vec(),
            0,
        ),
        (
            "equal: kept",
            mss(1200).to_vec(),
            Some(1200),
            mss(1200).to_vec(),
            0,
        ),
        ("no clamp", mss(1460).to_vec(), None, mss(1460).to_vec(), 0),
        (
            "at an odd offset",
            odd_in.to_vec(),
            Some(1200),
            odd_out.to_vec(),
            1,
        ),
        (
            "among Linux's options",
            linux.to_vec(),
            Some(1200),
            linux_clamped.to_vec(),
            1,
        ),
    ];
    for (what, opts, clamp, want, counted) in cases {
        let mut gw = gateway(None, clamp, SynProxyMode::Off);
        assert_eq!(
            syn_to_backend(&mut gw, &opts, b"", &want),
            counted,
            "{what}"
        );
    }
}

#[test]
fn a_syn_without_mss_gets_min_of_the_clamp_and_536_as_linux_tcpmss_adds_it() {
    // Above 536 the option says what the backend assumed anyway.
    let mut gw = gateway(None, Some(1200), SynProxyMode::Off);
    assert_eq!(syn_to_backend(&mut gw, &[], b"", &mss(536)), 1);
    // Below, it lowers what the backend sends.
    let mut gw = gateway(None, Some(400), SynProxyMode::Off);
    assert_eq!(syn_to_backend(&mut gw, &[], b"", &mss(400)), 1);
    // With other options but no MSS: appended after them.
    let mut gw = gateway(None, Some(400), SynProxyMode::Off);
    let wscale = [1, 3, 3, 7];
    let want = [1, 3, 3, 7, 2, 4, 0x01, 0x90];
    assert_eq!(syn_to_backend(&mut gw, &wscale, b"", &want), 1);
    // A SYN carrying data is left alone (the option would have to go
    // before the data), as Linux leaves it.
    let mut gw = gateway(None, Some(400), SynProxyMode::Off);
    assert_eq!(syn_to_backend(&mut gw, &[], b"early", &[]), 0);
}

#[test]
fn the_backends_syn_ack_is_clamped_on_its_way_out_of_the_outside_port() {
    let mut gw = gateway(Some(1000), None, SynProxyMode::Off);
    // The client's SYN leaves by the inside port, which has no clamp.
    assert_eq!(syn_to_backend(&mut gw, &mss(1460), b"", &mss(1460)), 0);
    let r = *gw.flow(Proto::Tcp, CLIENT, CPORT, VIP, 80).unwrap().reply();
    let synack = from_backend(
        &r,
        F::SYN | F::ACK,
        BACKEND_ISN,
        ISN + 1,
        65160,
        &[2, 4, 0x05, 0xb4, 1, 1, 4, 2, 1, 3, 3, 7],
        b"",
    );
    let (v, out) = gw.send(INSIDE, &synack);
    assert_eq!(v, Verdict::Forward(OUTSIDE));
    let want = to_client(
        F::SYN | F::ACK,
        BACKEND_ISN,
        ISN + 1,
        65160,
        &[2, 4, 0x03, 0xe8, 1, 1, 4, 2, 1, 3, 3, 7],
        b"",
        63,
    );
    assert_eq!(out, vec![(OUTSIDE, want)]);
    assert_eq!(gw.counters().mss_clamped, 1);
    // Established traffic is not touched.
    let ack = from_client(F::ACK, ISN + 1, BACKEND_ISN + 1, 502, &[], b"GET /");
    let (v, out) = gw.send(OUTSIDE, &ack);
    assert_eq!(v, Verdict::Forward(INSIDE));
    assert!(checksums_valid(&out[0].1));
    assert_eq!(gw.counters().mss_clamped, 1);
}

#[test]
fn the_syn_proxy_answers_and_opens_within_the_ports_clamps() {
    let mut gw = gateway(Some(1000), Some(1100), SynProxyMode::On);
    let client_opts = [2, 4, 0x05, 0xb4, 1, 3, 3, 7];
    let (v, out) = gw.send(
        OUTSIDE,
        &from_client(F::SYN, ISN, 0, 64240, &client_opts, b""),
    );
    assert_eq!(v, Verdict::Reply);
    let cookie = seq_of(&out[0].1);
    // The cookie SYN-ACK offers the outside port's clamp (not 1500 - 40).
    let want = to_client(
        F::SYN | F::ACK,
        cookie,
        ISN + 1,
        0,
        &[2, 4, 0x03, 0xe8, 1, 3, 3, 7],
        b"",
        64,
    );
    assert_eq!(out, vec![(OUTSIDE, want)]);
    // The backend SYN carries the client's 1460 clamped to the inside
    // port's 1100.
    let (v, out) = gw.send(
        OUTSIDE,
        &from_client(F::ACK, ISN + 1, cookie.wrapping_add(1), 502, &[], b""),
    );
    assert_eq!(v, Verdict::Forward(INSIDE));
    let r = *gw.flow(Proto::Tcp, CLIENT, CPORT, VIP, 80).unwrap().reply();
    let want = to_backend(
        &r,
        F::SYN,
        ISN,
        0,
        u16::MAX,
        &[2, 4, 0x04, 0x4c, 1, 3, 3, 7],
        b"",
    );
    assert_eq!(out, vec![(INSIDE, want)]);
    assert_eq!(gw.counters().mss_clamped, 1, "the backend SYN");
}
