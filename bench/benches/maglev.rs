//! Maglev table build and lookup.
//!
//! * `maglev_build/{M}/{N}`: building a table of M slots for N equal-weight
//!   backends (the control plane does this when a service's backends change).
//! * `maglev_build_weighted/{M}/{N}`: the same with weights 1..=10.
//! * `maglev_lookup/*`: 1024 lookups of precomputed flow hashes per
//!   iteration, through `MaglevTable::lookup` (Barrett reduction) and, for
//!   comparison, through a plain `hash % M` index of `slots()`.

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use dataplane::maglev::{DEFAULT_TABLE_SIZE, MaglevBackend, MaglevTable};
use std::net::{Ipv4Addr, SocketAddrV4};

const SIZES: [u32; 2] = [DEFAULT_TABLE_SIZE, 65_537];
const BACKEND_COUNTS: [u32; 3] = [10, 100, 1000];
const LOOKUPS: usize = 1024;

fn backends(n: u32, weighted: bool) -> Vec<MaglevBackend> {
    (0..n)
        .map(|i| {
            let addr = SocketAddrV4::new(Ipv4Addr::from_bits(0x0a00_0000 | (i * 7 + 1)), 8080);
            let weight = if weighted { 1 + i % 10 } else { 1 };
            MaglevBackend::new(addr, weight)
        })
        .collect()
}

fn build(c: &mut Criterion) {
    for (name, weighted) in [("maglev_build", false), ("maglev_build_weighted", true)] {
        let mut group = c.benchmark_group(name);
        for m in SIZES {
            for n in BACKEND_COUNTS {
                let set = backends(n, weighted);
                group.bench_with_input(BenchmarkId::new(m.to_string(), n), &set, |b, set| {
                    b.iter(|| MaglevTable::build(black_box(set), m))
                });
            }
        }
        group.finish();
    }
}

fn lookup(c: &mut Criterion) {
    // A fixed xorshift sequence stands in for flow hashes.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let hashes: Vec<u64> = (0..LOOKUPS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        })
        .collect();
    let mut group = c.benchmark_group("maglev_lookup");
    group.throughput(Throughput::Elements(LOOKUPS as u64));
    for m in SIZES {
        let table = MaglevTable::build(&backends(100, false), m).expect("valid table");
        group.bench_function(BenchmarkId::new("lookup", m), |b| {
            b.iter(|| {
                let mut acc = 0u32;
                for &h in black_box(&hashes) {
                    acc = acc.wrapping_add(u32::from(table.lookup(h).unwrap_or(0)));
                }
                acc
            })
        });
        group.bench_function(BenchmarkId::new("plain_modulo", m), |b| {
            let slots = table.slots();
            let m64 = black_box(u64::from(table.size()));
            b.iter(|| {
                let mut acc = 0u32;
                for &h in black_box(&hashes) {
                    let slot = slots.get((h % m64) as usize).copied();
                    acc = acc.wrapping_add(u32::from(slot.unwrap_or(0)));
                }
                acc
            })
        });
    }
    group.finish();
}

criterion_group!(benches, build, lookup);
criterion_main!(benches);
