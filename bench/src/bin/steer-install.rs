//! Install-time probe for AF_XDP steering (issues 16/17): the cost of
//! opening a port's steering (creating the XSK map and the steering maps,
//! loading the data-driven program once: the only verifier run) and of
//! installing a steering rule afterwards (map updates only), at the rule
//! lists' maxima (`steering::MAX_*`, every list full, both families) and
//! with owned ranges of a bad shape (each one 44 prefixes in the LPM
//! trie). Rules alternate, so every install also empties the generation
//! it reuses. Prints the best and median wall-clock time of `rounds`
//! installs per rule: a cold-path timing, not a throughput figure.
//!
//! usage: `steer-install <rounds>` (root: creating BPF maps and loading
//! XDP programs needs `CAP_BPF` and `CAP_NET_ADMIN`).

use dataplane::driver::afxdp::XskMap;
use dataplane::driver::afxdp::steer::{self, SteerMaps};
use dataplane::flow::Proto;
use dataplane::steering::{
    MAX_AFFINITY_ENDPOINTS, MAX_AFFINITY_ENDPOINTS6, MAX_AFFINITY_LISTENERS,
    MAX_AFFINITY_LISTENERS6, MAX_OWNED_RANGES, MAX_OWNED_RANGES6, MAX_SNAT_ADDRS, MAX_SNAT_ADDRS6,
    MAX_SNAT_LISTENERS, MAX_SNAT_LISTENERS6, SteeringRule,
};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

/// Every list at its maximum, each tuple on its own address; owned ranges
/// of `owned_span` addresses starting one past a `2^23` boundary (span 2:
/// one prefix each; `2^23 - 2`: 44 each).
fn maxima_rule(owned_span: u32) -> SteeringRule {
    let n = |max: usize| 0..max as u32;
    SteeringRule {
        workers: 64,
        snat_ports: 1024..=65535,
        snat_addrs: n(MAX_SNAT_ADDRS)
            .map(|i| Ipv4Addr::from(0x0d00_0000 + i))
            .collect(),
        snat_listeners: n(MAX_SNAT_LISTENERS)
            .map(|i| {
                (
                    Proto::Tcp,
                    Ipv4Addr::from(0x0a00_0000 + i),
                    30000 + i as u16,
                )
            })
            .collect(),
        owned: n(MAX_OWNED_RANGES)
            .map(|i| {
                let lo = (i << 23) + 1;
                (lo, lo + owned_span - 1)
            })
            .collect(),
        snat_addrs6: (0..MAX_SNAT_ADDRS6 as u128)
            .map(|i| Ipv6Addr::from_bits(i << 64))
            .collect(),
        snat_listeners6: n(MAX_SNAT_LISTENERS6)
            .map(|i| {
                (
                    Proto::Tcp,
                    Ipv6Addr::from_bits(u128::from(i)),
                    30000 + i as u16,
                )
            })
            .collect(),
        owned6: (0..MAX_OWNED_RANGES6 as u128)
            .map(|i| (i << 32 | 1, i << 32 | u128::from(owned_span)))
            .collect(),
        affinity_listeners: n(MAX_AFFINITY_LISTENERS)
            .map(|i| (Proto::Tcp, Ipv4Addr::from(0x0b00_0000 + i), 80))
            .collect(),
        affinity_endpoints: n(MAX_AFFINITY_ENDPOINTS)
            .map(|i| (Proto::Tcp, Ipv4Addr::from(0x0c00_0000 + i), 8080))
            .collect(),
        affinity_listeners6: (0..MAX_AFFINITY_LISTENERS6 as u128)
            .map(|i| (Proto::Tcp, Ipv6Addr::from_bits(1 << 100 | i), 80))
            .collect(),
        affinity_endpoints6: (0..MAX_AFFINITY_ENDPOINTS6 as u128)
            .map(|i| (Proto::Tcp, Ipv6Addr::from_bits(1 << 101 | i), 8080))
            .collect(),
        truncated: false,
    }
}

fn report(what: &str, mut times: Vec<Duration>) {
    times.sort_unstable();
    let best = times.first().copied().unwrap_or_default();
    let median = times.get(times.len() / 2).copied().unwrap_or_default();
    println!(
        "{what}: best {:.3} ms, median {:.3} ms over {} rounds",
        best.as_secs_f64() * 1e3,
        median.as_secs_f64() * 1e3,
        times.len()
    );
}

fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(20);
    let mut opens = Vec::new();
    let mut kept = None;
    for _ in 0..rounds {
        let started = Instant::now();
        let xsk = XskMap::create(4, 64)?;
        let maps = SteerMaps::create()?;
        let program = steer::load(&maps, &xsk, "portico_probe", true)
            .map_err(|e| anyhow::anyhow!("{}: {}", e.source, e.verifier_log))?;
        opens.push(started.elapsed());
        kept = Some((xsk, maps, program));
    }
    report("port open (maps + one program load)", opens);
    let (_xsk, maps, _program) = kept.ok_or_else(|| anyhow::anyhow!("no rounds"))?;
    let rules = [
        ("rule at the maxima, 2 prefixes per range", maxima_rule(2)),
        (
            "rule at the maxima, 44 prefixes per range",
            maxima_rule((1 << 23) - 2),
        ),
    ];
    let mut times = [Vec::new(), Vec::new()];
    let mut entries = [0usize; 2];
    for _ in 0..rounds {
        for (i, (_, rule)) in rules.iter().enumerate() {
            let started = Instant::now();
            let stats = maps.install(rule)?;
            times[i].push(started.elapsed());
            entries[i] = stats.set_entries + stats.owned_prefixes;
        }
    }
    for ((what, _), (t, n)) in rules.iter().zip(times.into_iter().zip(entries)) {
        report(&format!("install, {what} ({n} entries)"), t);
    }
    Ok(())
}
