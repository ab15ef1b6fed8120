//! Conntrack table: lookup hits with 1k, 100k and 1M live flows (keys probed
//! in random order, both directions), and an insert+remove pair on a table
//! kept at a steady occupancy (FIFO churn).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dataplane::conntrack::{Conntrack, ConntrackConfig, FlowId, FlowInit};
use dataplane::flow::{FlowKey, Proto, TableHasher};
use std::collections::VecDeque;
use std::hint::black_box;
use std::net::Ipv4Addr;

/// splitmix64, for a reproducible shuffle without extra dependencies.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Flow `n`: client 198.51.x.y:port -> VIP:443, reply backend:8080 -> SNAT:port.
fn flow(n: u32) -> FlowInit {
    let client = Ipv4Addr::from(0xc633_0000 + (n >> 12));
    let port = 1024 + (n & 0xfff) as u16;
    let orig = FlowKey::new(
        Proto::Tcp,
        client,
        port,
        Ipv4Addr::new(203, 0, 113, 10),
        443,
    );
    let reply = FlowKey::new(
        Proto::Tcp,
        Ipv4Addr::from(0x0a01_0000 + (n % 4093)),
        8080,
        Ipv4Addr::from(0x0aff_0000 + (n >> 16)),
        (n & 0xffff) as u16,
    );
    FlowInit {
        orig,
        reply,
        service: 1,
        backend: n % 4093,
        client_mac: [2, 0, 0, 0, 0, 1],
        client_port: 0,
        snat: true,
    }
}

fn insert(ct: &mut Conntrack, init: FlowInit) -> FlowId {
    let (oh, rh) = (ct.hash(&init.orig), ct.hash(&init.reply));
    match ct.insert(init, oh, rh, 0x02, 0) {
        Ok(ins) => ins.id,
        Err(e) => panic!("bench setup insert failed: {e}"),
    }
}

fn table(capacity: u32) -> Conntrack {
    match Conntrack::new(
        ConntrackConfig::with_capacity(capacity),
        TableHasher::from_seed(9),
    ) {
        Ok(ct) => ct,
        Err(e) => panic!("bench config: {e}"),
    }
}

fn lookup_hit(c: &mut Criterion) {
    let mut group = c.benchmark_group("conntrack/lookup_hit");
    group.throughput(Throughput::Elements(1));
    for live in [1_000u32, 100_000, 1_000_000] {
        let mut ct = table(live);
        let mut probes: Vec<(FlowKey, u64)> = Vec::with_capacity(2 * live as usize);
        for n in 0..live {
            let init = flow(n);
            insert(&mut ct, init);
            for k in [init.orig, init.reply] {
                probes.push((k, ct.hash(&k)));
            }
        }
        let mut rng = Rng(u64::from(live));
        for i in (1..probes.len()).rev() {
            probes.swap(i, (rng.next() % (i as u64 + 1)) as usize);
        }
        println!(
            "conntrack {live} flows: {} bytes allocated, {:.1} bytes/flow",
            ct.memory_bytes(),
            ct.memory_bytes() as f64 / f64::from(live)
        );
        let mut i = 0usize;
        group.bench_function(BenchmarkId::from_parameter(live), |b| {
            b.iter(|| {
                let (k, h) = &probes[i];
                i += 1;
                if i == probes.len() {
                    i = 0;
                }
                black_box(ct.lookup(black_box(k), *h))
            })
        });
    }
    group.finish();
}

fn insert_remove(c: &mut Criterion) {
    let mut group = c.benchmark_group("conntrack/insert_remove");
    group.throughput(Throughput::Elements(1));
    for live in [1_000u32, 100_000, 1_000_000] {
        // 75% occupancy; the pool of keys is twice the live set, so the key
        // inserted next is never live.
        let capacity = live / 3 * 4;
        let mut ct = table(capacity);
        let pool: Vec<(FlowInit, u64, u64)> = (0..2 * live)
            .map(|n| {
                let f = flow(n);
                (f, ct.hash(&f.orig), ct.hash(&f.reply))
            })
            .collect();
        let mut fifo: VecDeque<FlowId> = (0..live).map(|n| insert(&mut ct, flow(n))).collect();
        let mut next = live as usize;
        group.bench_function(BenchmarkId::from_parameter(live), |b| {
            b.iter(|| {
                if let Some(old) = fifo.pop_front() {
                    black_box(ct.remove(old));
                }
                let (init, oh, rh) = pool[next];
                next += 1;
                if next == pool.len() {
                    next = 0;
                }
                match ct.insert(init, oh, rh, 0x02, 0) {
                    Ok(ins) => fifo.push_back(ins.id),
                    Err(e) => panic!("insert: {e}"),
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, lookup_hit, insert_remove);
criterion_main!(benches);
