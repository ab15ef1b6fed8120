//! Instruction-count probe for the pipeline: sets up a single-core gateway
//! with N live flows, then pushes P packets of one traffic kind through
//! `Worker::poll`, each batch inside `measured_poll`. Run it under
//! `valgrind --tool=callgrind --toggle-collect='*measured_poll*'` and divide
//! the collected instructions by P for instructions/packet (exact and
//! repeatable, unlike wall-clock time on a shared machine). Without valgrind
//! it prints the wall-clock ns/packet of the same loop.
//!
//! usage: `pipeline-probe <tcp_established|tcp_reply|udp_established|tcp_new_flow|syn_flood|tcp6_established|tcp6_reply|tcp6_new_flow> <flows> <packets> [offload] [services=N]`
//!
//! The `tcp6_*` kinds are their IPv4 counterparts over IPv6 (the rig then
//! also serves `web6` with IPv6 backends and SNAT addresses; the IPv4
//! kinds run without it, so they measure a gateway with no IPv6 tables).
//!
//! `syn_flood`: SYNs from distinct spoofed sources to a web service with
//! `syn_proxy = on`, each answered with a SYN cookie (no flow is created).
//!
//! With `services=N`, N idle TCP services (two endpoints each, no
//! traffic) sit in the snapshot beside the measured ones
//! ([`RigConfig::extra_services`]): what a Kubernetes-sized service table
//! costs the busy services' packets.
//!
//! With `offload`, the mem driver marks frames checksum-verified, as a NIC
//! with RX checksum offload would: the parse stage then skips the TCP/UDP
//! checksum (the IPv4 header checksum is always verified). Default: off,
//! every checksum verified in software.

use dataplane::counters::DropReason;
use dataplane::flow::Family;
use dataplane::snapshot::SynProxyMode;
use dataplane::wire::tcp::flags as F;
use portico_bench::{INSIDE, OUTSIDE, Rig, RigConfig, client_tcp, client_tcp_of};
use std::time::Instant;

#[inline(never)]
fn measured_poll(rig: &mut Rig) {
    rig.worker.poll();
    let d = rig.worker.driver_mut();
    d.discard_tx(OUTSIDE);
    d.discard_tx(INSIDE);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut offload = false;
    let mut extra_services = 0u32;
    for arg in args.iter().skip(4) {
        match arg.strip_prefix("services=").map(str::parse::<u32>) {
            Some(Ok(n)) => extra_services = n,
            _ if arg == "offload" => offload = true,
            _ => {
                eprintln!("the optional arguments are `offload` and `services=N`, not {arg:?}");
                std::process::exit(2);
            }
        }
    }
    if !(4..=6).contains(&args.len()) {
        eprintln!(
            "usage: {} <tcp_established|tcp_reply|udp_established|tcp_new_flow|syn_flood|tcp6_established|tcp6_reply|tcp6_new_flow> <flows> <packets> [offload] [services=N]",
            args[0]
        );
        std::process::exit(2);
    }
    let kind = args[1].as_str();
    let (Ok(flows), Ok(packets)) = (args[2].parse::<u32>(), args[3].parse::<u32>()) else {
        eprintln!("flows and packets must be integers");
        std::process::exit(2);
    };
    let cap = flows + packets + 4096;
    let family = if kind.starts_with("tcp6") {
        Family::V6
    } else {
        Family::V4
    };
    let mut rig = Rig::new(RigConfig {
        conntrack_capacity: cap,
        syn_proxy: if kind == "syn_flood" {
            SynProxyMode::On
        } else {
            SynProxyMode::Off
        },
        ipv6: family == Family::V6,
        extra_services,
        ..RigConfig::default()
    });
    let (port, frames): (u8, Vec<Vec<u8>>) = match kind {
        "udp_established" => (OUTSIDE, rig.establish_udp(flows)),
        "tcp_established" | "tcp6_established" => (OUTSIDE, rig.establish_tcp(family, flows).0),
        "tcp_reply" | "tcp6_reply" => (INSIDE, rig.establish_tcp(family, flows).1),
        "tcp_new_flow" | "tcp6_new_flow" => {
            rig.establish_tcp(family, flows);
            (
                OUTSIDE,
                (flows..flows + packets)
                    .map(|i| client_tcp_of(family, i, F::SYN, 1, 0))
                    .collect(),
            )
        }
        "syn_flood" => (
            OUTSIDE,
            (flows..flows + packets)
                .map(|i| client_tcp(i, F::SYN, i.wrapping_mul(2_654_435_761), 0))
                .collect(),
        ),
        other => {
            eprintln!("unknown traffic kind {other:?}");
            std::process::exit(2);
        }
    };
    // Only the measured packets are marked (flows were set up without).
    rig.worker.driver_mut().mark_checksum_verified = offload;
    // Visit flows in a scattered order (stride coprime with the count).
    let n = frames.len();
    let stride = (0..)
        .map(|k| 7919 + k)
        .find(|s| gcd(*s, n) == 1)
        .unwrap_or(1);
    let mut idx = 0usize;
    let mut sent = 0u32;
    let mut busy = std::time::Duration::ZERO;
    while sent < packets {
        let batch = 64.min(packets - sent);
        let d = rig.worker.driver_mut();
        for _ in 0..batch {
            d.inject(port, &frames[idx]).expect("ring has room");
            idx = (idx + stride) % n;
        }
        let t = Instant::now();
        measured_poll(&mut rig);
        busy += t.elapsed();
        sent += batch;
    }
    let c = rig.worker.pipeline().counters();
    let kind = if offload {
        format!("{kind}+offload")
    } else {
        kind.to_string()
    };
    let reasons: Vec<String> = DropReason::ALL
        .iter()
        .zip(c.drops)
        .filter(|&(_, n)| n > 0)
        .map(|(r, n)| format!("{}:{n}", r.name()))
        .collect();
    println!(
        "{kind} flows={flows} packets={packets} tx={} drops={} ({}) live_flows={} ns/packet={:.1}",
        c.tx_packets,
        c.total_drops(),
        reasons.join(","),
        rig.worker.pipeline().conntrack().len()
            + rig.worker.pipeline().ipv6().map_or(0, |t| t.ct.len()),
        busy.as_nanos() as f64 / f64::from(packets.max(1))
    );
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}
