//! The packet path allocates nothing: after warm-up, whole poll loops over
//! every traffic kind (new flows, established flows, replies, drops, ARP,
//! ICMP, flow expiry and SNAT release) make zero heap allocations.

mod common;

use common::*;
use dataplane::counters::{Counters, DropReason};
use dataplane::wire::build;
use dataplane::wire::tcp::flags as F;
use std::net::Ipv4Addr;

fn mixed_traffic(round: u16) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    for i in 0..16u16 {
        let sport = 1024 + round.wrapping_mul(16).wrapping_add(i) % 60_000;
        frames.push((OUTSIDE, syn(sport)));
        frames.push((
            OUTSIDE,
            build::eth_ipv4_tcp(
                ROUTER_MAC,
                OUT_MAC,
                CLIENT,
                sport,
                VIP,
                80,
                F::ACK,
                2,
                1,
                b"data",
            ),
        ));
        frames.push((
            OUTSIDE,
            build::eth_ipv4_udp(ROUTER_MAC, OUT_MAC, CLIENT, sport, VIP, 53, b"q"),
        ));
    }
    frames.push((
        OUTSIDE,
        build::eth_ipv4_icmp_echo(ROUTER_MAC, OUT_MAC, CLIENT, VIP, 8, 1, round, b""),
    ));
    frames.push((
        OUTSIDE,
        build::arp_request(ROUTER_MAC, Ipv4Addr::new(203, 0, 113, 1), VIP),
    ));
    frames.push((
        OUTSIDE,
        build::eth_ipv4_tcp(ROUTER_MAC, OUT_MAC, CLIENT, 1, VIP, 9, F::SYN, 1, 0, b""),
    ));
    frames.push((OUTSIDE, vec![0u8; 12]));
    frames
}

/// Inject `frames`, poll twice, let 5 s pass (flows expire, UDP after
/// 30 s and SYN_SENT after 120 s, while traffic goes on), discard what
/// the gateway sent.
fn poll_round(gw: &mut Gateway, frames: &[(u8, Vec<u8>)]) {
    for (port, f) in frames {
        gw.worker.driver_mut().inject(*port, f).expect("room");
    }
    gw.worker.poll();
    gw.worker.poll();
    gw.clock.advance_ms(5_000);
    for p in [OUTSIDE, INSIDE] {
        gw.worker.driver_mut().discard_tx(p);
    }
}

/// The first `warm` of `rounds` ([`poll_round`]) to warm up, the rest
/// under the allocation counter: what they allocated.
fn measure_after_warm_up(
    gw: &mut Gateway,
    rounds: &[Vec<(u8, Vec<u8>)>],
    warm: usize,
) -> allocation_counter::AllocationInfo {
    for frames in &rounds[..warm] {
        poll_round(gw, frames);
    }
    allocation_counter::measure(|| {
        for frames in &rounds[warm..] {
            poll_round(gw, frames);
        }
    })
}

#[test]
fn poll_loops_allocate_nothing_after_warm_up() {
    // Affinity on, RST policy on, and a table small enough to be full (early
    // drop and refusals are on the measured path too).
    let mut svc = web(&[0, 1, 2]);
    svc.affinity_timeout_ms = Some(60_000);
    svc.tcp_backend_gone = dataplane::snapshot::BackendGonePolicy::Reset;
    let mut cfg = pipeline_config(0, 1);
    cfg.conntrack.capacity = 256;
    let mut gw = Gateway::with_config(vec![svc, dns(&[0, 1])], cfg);
    let rounds: Vec<Vec<(u8, Vec<u8>)>> = (0..400).map(mixed_traffic).collect();
    let info = measure_after_warm_up(&mut gw, &rounds, 50);
    let c = gw.counters();
    assert!(
        c.flows_created > 5_000 && c.flows_early_dropped > 1_000,
        "{c:?}"
    );
    assert!(c.affinity_hits > 1_000 && c.resets_sent > 1_000, "{c:?}");
    assert_eq!(info.count_total, 0, "hot path allocated: {info:?}");
}

/// the hold/ARP path under the allocation counter (not covered by no_alloc.rs).
#[test]
fn the_hold_queue_and_arp_path_allocate_nothing() {
    let mut gw = gateway_without_neighbour_5();
    let be = backend_ip(5);
    let frames: Vec<Vec<u8>> = (0..8000u16).map(|i| syn(1024 + i)).collect();
    let reply = build::arp_reply(backend_mac(be), be, IN_MAC, SNAT);
    let round = |gw: &mut Gateway, r: u16| {
        for i in 0..40u16 {
            gw.worker
                .driver_mut()
                .inject(OUTSIDE, &frames[usize::from(r * 40 + i)])
                .unwrap();
        }
        gw.worker.poll();
        gw.clock.advance_ms(1_100);
        gw.worker.poll();
        if r.is_multiple_of(3) {
            gw.worker.driver_mut().inject(INSIDE, &reply).unwrap();
        }
        gw.worker.poll();
        gw.clock.advance_ms(40_000);
        gw.worker.poll();
        for p in [OUTSIDE, INSIDE] {
            gw.worker.driver_mut().discard_tx(p);
        }
    };
    for r in 0..20 {
        round(&mut gw, r);
    }
    let info = allocation_counter::measure(|| {
        for r in 20..200 {
            round(&mut gw, r);
        }
    });
    let c = gw.counters();
    assert!(
        c.arp_requests_sent > 10 && c.neighbour_held_sent >= 40,
        "{c:?}"
    );
    assert_eq!(info.count_total, 0, "{info:?}");
}

/// 16 connections spliced by the SYN proxy (with a window update each)
/// from 16 validated cookies, 16 more cookies sent, between `before` and
/// `c`.
fn assert_proxied_16(before: &Counters, c: &Counters) {
    assert_eq!(c.syn_proxy_spliced - before.syn_proxy_spliced, 16, "{c:?}");
    assert_eq!(
        c.syn_proxy_window_updates - before.syn_proxy_window_updates,
        16
    );
    assert_eq!(c.syn_cookies_validated - before.syn_cookies_validated, 16);
    assert_eq!(c.syn_cookies_sent - before.syn_cookies_sent, 16);
}

/// A client segment to VIP:80 (or VIP6:80) from `sport`.
type ClientSeg<'a> = &'a dyn Fn(u16, u8, u32, u32, &[u8]) -> Vec<u8>;
/// A segment from the backend of the client's flow from `sport`.
type BackendSeg<'a> = &'a dyn Fn(&Gateway, u16, u8, u32, u32, &[u8]) -> Vec<u8>;

/// The SYN proxy's traffic in one family, set up before the measurement:
/// set 1 (16 connections cookie-validated and their backends asked): the
/// backend SYN-ACKs and data both ways; set 2 (16 cookies known, a SYN
/// leaves no state): a SYN, the cookie ACK, a forged cookie from another
/// port, and with `reset_probe` a FIN without flow (a RST under the
/// `reset` policy).
fn proxy_traffic(
    gw: &mut Gateway,
    (client, backend): (ClientSeg<'_>, BackendSeg<'_>),
    seq_of: fn(&[u8]) -> u32,
    reset_probe: bool,
) -> Vec<(u8, Vec<u8>)> {
    let cookie_of = |gw: &mut Gateway, sport: u16| {
        let (_, out) = gw.send(OUTSIDE, &client(sport, F::SYN, 100, 0, b""));
        seq_of(&out[0].1)
    };
    let mut measured = Vec::new();
    for sport in 2000..2016u16 {
        let cookie = cookie_of(gw, sport);
        gw.send(
            OUTSIDE,
            &client(sport, F::ACK, 101, cookie.wrapping_add(1), b""),
        );
        measured.push((INSIDE, backend(gw, sport, F::SYN | F::ACK, 5000, 101, b"")));
        measured.push((
            OUTSIDE,
            client(sport, F::ACK | F::PSH, 101, cookie.wrapping_add(1), b"GET"),
        ));
        measured.push((
            INSIDE,
            backend(gw, sport, F::ACK | F::PSH, 5001, 104, b"200"),
        ));
    }
    for sport in 3000..3016u16 {
        let cookie = cookie_of(gw, sport);
        measured.push((OUTSIDE, client(sport, F::SYN, 100, 0, b"")));
        measured.push((
            OUTSIDE,
            client(sport, F::ACK, 101, cookie.wrapping_add(1), b""),
        ));
        measured.push((OUTSIDE, client(sport + 100, F::ACK, 101, 12345, b"")));
        if reset_probe {
            measured.push((OUTSIDE, client(sport + 200, F::FIN | F::ACK, 101, 7, b"")));
        }
    }
    for p in [OUTSIDE, INSIDE] {
        gw.worker.driver_mut().discard_tx(p);
    }
    measured
}

/// Every frame of `measured` through one poll each under the allocation
/// counter: the counters before, after, and the allocations.
fn measure_each(
    gw: &mut Gateway,
    measured: &[(u8, Vec<u8>)],
) -> (Counters, Counters, allocation_counter::AllocationInfo) {
    let before = gw.counters();
    let info = allocation_counter::measure(|| {
        for (port, f) in measured {
            gw.worker.driver_mut().inject(*port, f).expect("room");
            gw.worker.poll();
        }
        for p in [OUTSIDE, INSIDE] {
            gw.worker.driver_mut().discard_tx(p);
        }
    });
    (before, gw.counters(), info)
}

/// The SYN proxy's whole path under the allocation counter: cookie
/// SYN-ACKs, cookie ACKs opening backend connections, a forged cookie, the
/// backend SYN-ACK (ACK back, window update through the outbox) and the
/// spliced data both ways.
#[test]
fn the_syn_proxy_path_allocates_nothing() {
    let mut svc = web(&[0, 1, 2]);
    svc.syn_proxy = dataplane::snapshot::SynProxyMode::On;
    let mut gw = Gateway::with_config(vec![svc], pipeline_config(0, 1));
    let client = |sport: u16, flags: u8, seq: u32, ack: u32, payload: &[u8]| {
        build::eth_ipv4_tcp(
            ROUTER_MAC, OUT_MAC, CLIENT, sport, VIP, 80, flags, seq, ack, payload,
        )
    };
    let backend = |gw: &Gateway, sport: u16, flags: u8, seq: u32, ack: u32, payload: &[u8]| {
        let r = *gw
            .flow(dataplane::flow::Proto::Tcp, CLIENT, sport, VIP, 80)
            .expect("proxied flow")
            .reply();
        from_backend_tcp(&r, flags, seq, ack, payload)
    };
    let measured = proxy_traffic(&mut gw, (&client, &backend), seq_of, false);
    let (before, c, info) = measure_each(&mut gw, &measured);
    assert_proxied_16(&before, &c);
    assert_eq!(c.dropped(DropReason::SynCookieInvalid), 16);
    assert_eq!(info.count_total, 0, "syn proxy path allocated: {info:?}");
}

/// IPv6 through the same counter: new flows with SNAT from an IPv6
/// address, established data, replies, UDP without SNAT, echo, Packet Too
/// Big, Time Exceeded, parse drops, expiry and SNAT release. The IPv6
/// tables are allocated when the first snapshot with IPv6 listeners
/// arrives (before the measured loops).
#[test]
fn ipv6_poll_loops_allocate_nothing_after_warm_up() {
    use common::ipv6::*;
    use dataplane::wire::icmpv6::msg_type;
    let mut cfg = pipeline_config(0, 1);
    cfg.conntrack.capacity = 256;
    let mut gw = Gateway::with_spec(spec6(vec![web6(&[0, 1, 2]), dns6(&[1])]), cfg);
    let traffic = |round: u16| {
        let mut frames = Vec::new();
        for i in 0..16u16 {
            let sport = 1024 + round.wrapping_mul(16).wrapping_add(i) % 60_000;
            frames.push(client_syn6(VIP6, 80, sport, b""));
            frames.push(build::eth_ipv6_tcp(
                CLIENT_MAC6,
                OUT_MAC,
                (CLIENT6, sport),
                (VIP6, 80),
                F::ACK,
                1001,
                1,
                b"data",
            ));
            frames.push(build::eth_ipv6_udp(
                CLIENT_MAC6,
                OUT_MAC,
                (CLIENT6, sport),
                (VIP6, 53),
                b"q",
            ));
        }
        frames.push(build::eth_ipv6_echo(
            CLIENT_MAC6,
            OUT_MAC,
            (CLIENT6, NODE6),
            msg_type::ECHO_REQUEST,
            (1, round),
            b"",
        ));
        frames.push(with_hop(client_syn6(VIP6, 80, 7, &[0; 40]), 1));
        frames.push(build::eth_ipv6_tcp(
            CLIENT_MAC6,
            OUT_MAC,
            (CLIENT6, 1024 + round.wrapping_mul(16) % 60_000),
            (VIP6, 80),
            F::ACK,
            1005,
            1,
            &[0x55; 1500],
        ));
        frames.push(build::ndp_solicit(CLIENT_MAC6, CLIENT6, NODE6)[..60].to_vec());
        frames
    };
    let rounds: Vec<Vec<(u8, Vec<u8>)>> = (0..300)
        .map(|r| traffic(r).into_iter().map(|f| (OUTSIDE, f)).collect())
        .collect();
    let info = measure_after_warm_up(&mut gw, &rounds, 50);
    let c = gw.counters();
    assert!(
        c.flows_created > 3_000 && c.snat_allocations > 3_000 && c.icmp_errors_sent > 100,
        "{c:?}"
    );
    assert!(
        c.flows_expired > 100 && c.flows_early_dropped > 1_000,
        "{c:?}"
    );
    assert_eq!(info.count_total, 0, "hot path allocated: {info:?}");
}

/// The IPv6 defences (the same flow stage) under the allocation counter:
/// cookie SYN-ACKs, cookie ACKs opening backend connections, a forged
/// cookie, the backend SYN-ACK (ACK back, window update through the
/// outbox), spliced data both ways, RSTs for the `reset` policy, and the
/// per-/64 source limit on the path of every new flow.
#[test]
fn the_ipv6_syn_proxy_and_reset_paths_allocate_nothing() {
    use common::ipv6::*;
    let mut svc = web6(&[0, 1, 2]);
    svc.syn_proxy = dataplane::snapshot::SynProxyMode::On;
    svc.tcp_backend_gone = dataplane::snapshot::BackendGonePolicy::Reset;
    let mut cfg = pipeline_config(0, 1);
    cfg.new_flows_per_source_per_s = 1_000_000;
    let mut gw = Gateway::with_spec(spec6(vec![svc]), cfg);
    let client = |sport: u16, flags: u8, seq: u32, ack: u32, payload: &[u8]| {
        build::eth_ipv6_tcp(
            CLIENT_MAC6,
            OUT_MAC,
            (CLIENT6, sport),
            (VIP6, 80),
            flags,
            seq,
            ack,
            payload,
        )
    };
    let backend = |gw: &Gateway, sport: u16, flags: u8, seq: u32, ack: u32, payload: &[u8]| {
        let key =
            dataplane::flow::FlowKey6::new(dataplane::flow::Proto::Tcp, CLIENT6, sport, VIP6, 80);
        let r = *common::handshake::flow6(gw, &key)
            .expect("proxied flow")
            .reply();
        from_backend_tcp(&r, flags, seq, ack, payload)
    };
    let measured = proxy_traffic(&mut gw, (&client, &backend), seq6_of, true);
    let (before, c, info) = measure_each(&mut gw, &measured);
    assert_proxied_16(&before, &c);
    assert_eq!(c.resets_sent - before.resets_sent, 16);
    assert_eq!(c.dropped(DropReason::SynCookieInvalid), 16);
    assert_eq!(info.count_total, 0, "IPv6 defences allocated: {info:?}");
}
