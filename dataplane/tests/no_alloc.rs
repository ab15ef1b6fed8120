//! The packet path allocates nothing: after warm-up, whole poll loops over
//! every traffic kind (new flows, established flows, replies, drops, ARP,
//! ICMP, flow expiry and SNAT release) make zero heap allocations.

mod common;

use common::*;
use dataplane::packet::tcp_flags as F;
use dataplane::wire::build;
use std::net::Ipv4Addr;

fn mixed_traffic(round: u16) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    for i in 0..16u16 {
        let sport = 1024 + round.wrapping_mul(16).wrapping_add(i) % 60_000;
        frames.push((
            OUTSIDE,
            build::eth_ipv4_tcp(
                ROUTER_MAC,
                OUT_MAC,
                CLIENT,
                sport,
                VIP,
                80,
                F::SYN,
                1,
                0,
                b"",
            ),
        ));
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
    let run = |gw: &mut Gateway, frames: &[(u8, Vec<u8>)]| {
        for (port, f) in frames {
            gw.worker.driver_mut().inject(*port, f).expect("room");
        }
        gw.worker.poll();
        gw.worker.poll();
        // Flows expire (UDP 30 s, SYN_SENT 120 s) while traffic goes on.
        gw.clock.advance_ms(5_000);
        for p in [OUTSIDE, INSIDE] {
            gw.worker.driver_mut().discard_tx(p);
        }
    };
    for frames in &rounds[..50] {
        run(&mut gw, frames);
    }
    let info = allocation_counter::measure(|| {
        for frames in &rounds[50..] {
            run(&mut gw, frames);
        }
    });
    let c = gw.counters();
    assert!(
        c.flows_created > 5_000 && c.flows_early_dropped > 1_000,
        "{c:?}"
    );
    assert!(c.affinity_hits > 1_000 && c.resets_sent > 1_000, "{c:?}");
    assert_eq!(info.count_total, 0, "hot path allocated: {info:?}");
}
