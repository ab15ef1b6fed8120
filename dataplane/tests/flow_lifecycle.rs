//! Flow lifecycle across whole batches: packets of one batch that touch the
//! same flow, early drop under a full table, and SNAT accounting under
//! random traffic (no tuple leaked or released twice, nothing left after
//! expiry).

mod common;

use common::*;
use dataplane::conntrack::TcpState;
use dataplane::counters::DropReason;
use dataplane::flow::Proto;
use dataplane::packet::Verdict;
use dataplane::wire::build;
use dataplane::wire::tcp::flags as F;
use proptest::prelude::*;

fn udp(sport: u16) -> Vec<u8> {
    build::eth_ipv4_udp(ROUTER_MAC, OUT_MAC, CLIENT, sport, VIP, 53, b"q")
}

fn tcp(sport: u16, flags: u8) -> Vec<u8> {
    build::eth_ipv4_tcp(
        ROUTER_MAC, OUT_MAC, CLIENT, sport, VIP, 80, flags, 1, 1, b"",
    )
}

fn from_backend(r: &dataplane::flow::FlowKey, flags: u8) -> Vec<u8> {
    build::eth_ipv4_tcp(
        backend_mac(r.src_ip),
        IN_MAC,
        r.src_ip,
        r.src_port,
        r.dst_ip,
        r.dst_port,
        flags,
        9,
        2,
        b"",
    )
}

fn dst_port_of(frame: &[u8]) -> u16 {
    u16::from_be_bytes([frame[36], frame[37]])
}

fn src_port_of(frame: &[u8]) -> u16 {
    u16::from_be_bytes([frame[34], frame[35]])
}

#[test]
fn a_flow_evicted_later_in_the_batch_still_forwards_its_earlier_packet() {
    let mut cfg = pipeline_config(0, 1);
    cfg.conntrack.capacity = 4;
    let mut gw = Gateway::with_config(vec![dns(&[0, 1, 2, 3, 4, 5, 6, 7])], cfg);
    for sport in 1..=4u16 {
        assert_eq!(gw.send(OUTSIDE, &udp(sport)).0, Verdict::Forward(INSIDE));
    }
    let reply1 = *gw.flow(Proto::Udp, CLIENT, 1, VIP, 53).unwrap().reply();
    // [packet of flow 1, a new flow]: the table is full of unreplied flows,
    // the new one early-drops flow 1 (the oldest) after flow 1's packet was
    // classified.
    let (v, out) = gw.send_batch(OUTSIDE, &[udp(1), udp(100)]);
    assert_eq!(v, vec![Verdict::Forward(INSIDE), Verdict::Forward(INSIDE)]);
    assert_eq!(
        src_port_of(&out[0].1),
        reply1.dst_port,
        "flow 1's packet keeps flow 1's SNAT tuple"
    );
    assert_eq!(
        &out[0].1[30..34],
        &reply1.src_ip.octets(),
        "and its backend"
    );
    assert!(checksums_valid(&out[0].1) && checksums_valid(&out[1].1));
    assert_eq!(gw.counters().flows_early_dropped, 1);
    assert!(gw.flow(Proto::Udp, CLIENT, 1, VIP, 53).is_none());
    gw.assert_snat_accounting();
}

#[test]
fn a_reply_batched_with_the_client_packet_that_finds_its_backend_gone() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    gw.send(OUTSIDE, &tcp(40_000, F::SYN));
    let r = *gw
        .flow(Proto::Tcp, CLIENT, 40_000, VIP, 80)
        .unwrap()
        .reply();
    gw.swap(vec![web(&[1])]);
    // One-armed arrival order: the backend's SYN-ACK, then the client's ACK
    // (which finds the backend gone and removes the flow).
    let synack = from_backend(&r, F::SYN | F::ACK);
    let ack = build::eth_ipv4_tcp(
        ROUTER_MAC,
        IN_MAC,
        CLIENT,
        40_000,
        VIP,
        80,
        F::ACK,
        2,
        10,
        b"",
    );
    let (v, out) = gw.send_batch(INSIDE, &[synack, ack]);
    assert_eq!(
        v,
        vec![
            Verdict::Forward(OUTSIDE),
            Verdict::Drop(DropReason::BackendGone)
        ]
    );
    let expected = with_ttl(
        build::eth_ipv4_tcp(
            OUT_MAC,
            ROUTER_MAC,
            VIP,
            80,
            CLIENT,
            40_000,
            F::SYN | F::ACK,
            9,
            2,
            b"",
        ),
        63,
    );
    assert_eq!(out, vec![(OUTSIDE, expected)]);
    gw.assert_snat_accounting();
}

#[test]
fn an_old_segment_batched_before_a_recycling_syn_goes_to_the_old_backend() {
    let mut gw = Gateway::new(vec![web(&[0, 1, 2])]);
    gw.send(OUTSIDE, &tcp(40_000, F::SYN));
    let old = *gw
        .flow(Proto::Tcp, CLIENT, 40_000, VIP, 80)
        .unwrap()
        .reply();
    gw.send(INSIDE, &from_backend(&old, F::SYN | F::ACK));
    gw.send(OUTSIDE, &tcp(40_000, F::RST));
    let old_idx = old.src_ip.octets()[3] - 10;
    gw.swap(vec![web(&[0u8, 1, 2]
        .into_iter()
        .filter(|&b| b != old_idx)
        .collect::<Vec<_>>())]);
    // A late ACK of the old connection, then a SYN reusing the tuple.
    let (v, out) = gw.send_batch(OUTSIDE, &[tcp(40_000, F::ACK), tcp(40_000, F::SYN)]);
    assert_eq!(v[1], Verdict::Forward(INSIDE));
    let new = *gw
        .flow(Proto::Tcp, CLIENT, 40_000, VIP, 80)
        .unwrap()
        .reply();
    assert_ne!(new.src_ip, old.src_ip);
    let syn_out = out
        .iter()
        .find(|(_, f)| f[47] == F::SYN)
        .expect("SYN forwarded");
    assert_eq!(
        &syn_out.1[30..34],
        &new.src_ip.octets(),
        "the SYN goes to the fresh choice"
    );
    assert_eq!(dst_port_of(&syn_out.1), 8080);
    assert!(
        out.iter()
            .all(|(_, f)| f[30..34] != old.src_ip.octets() || f[47] != F::SYN)
    );
    gw.assert_snat_accounting();
}

/// After a gateway restart the SNAT allocator may hand out a port whose
/// previous connection still sits in TIME_WAIT on the backend: the backend
/// answers the new SYN with a challenge ACK. It must reach the client (as
/// Linux's conntrack lets it pass), whose RST clears the backend's old
/// connection, so the SYN retransmission connects instead of stalling.
#[test]
fn a_challenge_ack_to_a_syn_reaches_the_client_and_its_rst_lets_the_retry_through() {
    let mut gw = Gateway::new(vec![web(&[0, 1, 2])]);
    assert_eq!(
        gw.send(OUTSIDE, &tcp(40_100, F::SYN)).0,
        Verdict::Forward(INSIDE)
    );
    let reply = *gw
        .flow(Proto::Tcp, CLIENT, 40_100, VIP, 80)
        .unwrap()
        .reply();
    let invalid_before = gw.counters().drops[DropReason::TcpInvalid as usize];

    let (v, out) = gw.send(INSIDE, &from_backend(&reply, F::ACK));
    assert_eq!(
        v,
        Verdict::Forward(OUTSIDE),
        "the challenge ACK is forwarded"
    );
    let (_, ack) = out.first().expect("one frame out");
    assert_eq!(&ack[26..30], &VIP.octets(), "from the VIP");
    assert_eq!(&ack[30..34], &CLIENT.octets(), "to the client");
    assert_eq!(dst_port_of(ack), 40_100);
    assert_eq!(src_port_of(ack), 80);
    assert_eq!(
        gw.flow(Proto::Tcp, CLIENT, 40_100, VIP, 80)
            .unwrap()
            .tcp_state(),
        Some(TcpState::SynSent),
        "no state change"
    );
    assert_eq!(
        gw.counters().drops[DropReason::TcpInvalid as usize],
        invalid_before
    );

    // The client's RST (RFC 9293 §3.10.7.3: <SEQ=SEG.ACK>, the exact
    // sequence number window tracking expects) goes to the backend on the
    // same tuple, the retry opens the flow again.
    let rst = build::eth_ipv4_tcp(
        ROUTER_MAC,
        OUT_MAC,
        CLIENT,
        40_100,
        VIP,
        80,
        F::RST,
        2,
        0,
        b"",
    );
    let (v, out) = gw.send(OUTSIDE, &rst);
    assert_eq!(v, Verdict::Forward(INSIDE));
    assert_eq!(&out[0].1[30..34], &reply.src_ip.octets());
    assert_eq!(
        gw.send(OUTSIDE, &tcp(40_100, F::SYN)).0,
        Verdict::Forward(INSIDE)
    );
    assert_eq!(
        gw.flow(Proto::Tcp, CLIENT, 40_100, VIP, 80)
            .unwrap()
            .tcp_state(),
        Some(TcpState::SynSent)
    );
    gw.assert_snat_accounting();
}

#[test]
fn a_syn_flood_answered_by_backends_cannot_lock_out_new_flows() {
    // SYN_RECV flows (SYN answered, handshake never completed) are not
    // assured: like Linux, early drop may evict them; established flows are
    // never evicted.
    let mut cfg = pipeline_config(0, 1);
    cfg.conntrack.capacity = 16;
    let mut gw = Gateway::with_config(vec![web(&[0, 1])], cfg);
    for sport in 1..=4u16 {
        gw.send(OUTSIDE, &tcp(sport, F::SYN));
        let r = *gw.flow(Proto::Tcp, CLIENT, sport, VIP, 80).unwrap().reply();
        gw.send(INSIDE, &from_backend(&r, F::SYN | F::ACK));
        gw.send(OUTSIDE, &tcp(sport, F::ACK));
        assert_eq!(
            gw.flow(Proto::Tcp, CLIENT, sport, VIP, 80)
                .unwrap()
                .tcp_state(),
            Some(TcpState::Established)
        );
    }
    for sport in 1000..1200u16 {
        let (v, _) = gw.send(OUTSIDE, &tcp(sport, F::SYN));
        assert_eq!(v, Verdict::Forward(INSIDE), "flood SYN {sport} admitted");
        let r = *gw.flow(Proto::Tcp, CLIENT, sport, VIP, 80).unwrap().reply();
        gw.send(INSIDE, &from_backend(&r, F::SYN | F::ACK));
    }
    for sport in 1..=4u16 {
        assert!(
            gw.flow(Proto::Tcp, CLIENT, sport, VIP, 80).is_some(),
            "established flow {sport} kept"
        );
    }
    let c = gw.counters();
    assert!(c.flows_early_dropped >= 180, "{c:?}");
    assert_eq!(c.dropped(DropReason::ConntrackFull), 0);
    gw.assert_snat_accounting();
}

#[test]
fn a_full_table_of_established_flows_refuses_new_ones_and_counts_them() {
    let mut cfg = pipeline_config(0, 1);
    cfg.conntrack.capacity = 4;
    let mut gw = Gateway::with_config(vec![web(&[0])], cfg);
    for sport in 1..=4u16 {
        gw.send(OUTSIDE, &tcp(sport, F::SYN));
        let r = *gw.flow(Proto::Tcp, CLIENT, sport, VIP, 80).unwrap().reply();
        gw.send(INSIDE, &from_backend(&r, F::SYN | F::ACK));
        gw.send(OUTSIDE, &tcp(sport, F::ACK));
    }
    let (v, out) = gw.send(OUTSIDE, &tcp(9, F::SYN));
    assert_eq!(v, Verdict::Drop(DropReason::ConntrackFull));
    assert!(out.is_empty());
    gw.assert_snat_accounting();
}

#[derive(Clone, Debug)]
enum Op {
    Syn(u16),
    SynAck(u16),
    Ack(u16),
    Fin(u16),
    BackendFin(u16),
    Rst(u16),
    Udp(u16),
    UdpReply(u16),
    Advance(u32),
    Backends(u8),
}

fn op() -> impl Strategy<Value = Op> {
    let sport = 1u16..24;
    prop_oneof![
        sport.clone().prop_map(Op::Syn),
        sport.clone().prop_map(Op::SynAck),
        sport.clone().prop_map(Op::Ack),
        sport.clone().prop_map(Op::Fin),
        sport.clone().prop_map(Op::BackendFin),
        sport.clone().prop_map(Op::Rst),
        sport.clone().prop_map(Op::Udp),
        sport.prop_map(Op::UdpReply),
        (0u32..200_000).prop_map(Op::Advance),
        (1u8..8).prop_map(Op::Backends),
    ]
}

fn backends_of(mask: u8) -> Vec<u8> {
    (0..3).filter(|b| mask & (1 << b) != 0).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the traffic, SNAT tuples in use always equal live SNAT flows
    /// (none leaked, none released twice), the table never exceeds its
    /// capacity, and after everything expires nothing is left.
    #[test]
    fn snat_accounting_holds_and_everything_expires(ops in proptest::collection::vec(op(), 1..120)) {
        let mut cfg = pipeline_config(0, 1);
        cfg.conntrack.capacity = 16;
        let mut gw = Gateway::with_config(vec![web(&[0, 1, 2]), dns(&[0, 1, 2])], cfg);
        let reply_of = |gw: &Gateway, proto: Proto, sport: u16| {
            let port = if proto == Proto::Tcp { 80 } else { 53 };
            gw.flow(proto, CLIENT, sport, VIP, port).map(|f| *f.reply())
        };
        for op in ops {
            match op {
                Op::Syn(p) => { gw.send(OUTSIDE, &tcp(p, F::SYN)); }
                Op::Ack(p) => { gw.send(OUTSIDE, &tcp(p, F::ACK)); }
                Op::Fin(p) => { gw.send(OUTSIDE, &tcp(p, F::FIN | F::ACK)); }
                Op::Rst(p) => { gw.send(OUTSIDE, &tcp(p, F::RST)); }
                Op::Udp(p) => { gw.send(OUTSIDE, &udp(p)); }
                Op::SynAck(p) | Op::BackendFin(p) => {
                    if let Some(r) = reply_of(&gw, Proto::Tcp, p) {
                        let flags = if matches!(op, Op::SynAck(_)) { F::SYN | F::ACK } else { F::FIN | F::ACK };
                        gw.send(INSIDE, &from_backend(&r, flags));
                    }
                }
                Op::UdpReply(p) => {
                    if let Some(r) = reply_of(&gw, Proto::Udp, p) {
                        let f = build::eth_ipv4_udp(backend_mac(r.src_ip), IN_MAC, r.src_ip, r.src_port, r.dst_ip, r.dst_port, b"a");
                        gw.send(INSIDE, &f);
                    }
                }
                Op::Advance(ms) => { gw.clock.advance_ms(u64::from(ms)); gw.worker.poll(); }
                Op::Backends(mask) => gw.swap(vec![web(&backends_of(mask)), dns(&backends_of(mask))]),
            }
            gw.assert_snat_accounting();
            prop_assert!(gw.worker.pipeline().conntrack().len() <= 16);
        }
        gw.clock.advance_ms(25 * 3_600_000);
        for _ in 0..4 {
            gw.worker.poll();
        }
        prop_assert_eq!(gw.worker.pipeline().conntrack().len(), 0);
        prop_assert_eq!(gw.worker.pipeline().snat().stats().in_use, 0);
        prop_assert_eq!(gw.worker.driver_mut().pool_free(), 4096, "no frame buffer leaked");
    }
}
