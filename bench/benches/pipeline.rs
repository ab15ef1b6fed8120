//! Whole-pipeline benches on the mem driver, one core, 64-byte frames (IPv6:
//! 74-byte TCP frames): established TCP, new TCP (SYN), UDP, and the reply
//! direction, with 1k, 100k and 1M live flows (`PORTICO_BENCH_FLOWS=a,b,…`
//! to choose). One iteration = one batch of 64 frames; criterion reports
//! time per batch and throughput in packets (elements).
//!
//! The TCP benches run for both families from one table ([`FAMILIES`]):
//! `tcp_*` over IPv4 to `web` on a gateway without IPv6 tables (as before
//! IPv6 existed), `tcp6_*` over IPv6 to `web6` (the rig then serves both
//! families; the names are `pipeline-probe`'s kinds). Compare the two
//! families within one run: the machine is shared.
//!
//! Frames are copied into the rx ring outside the timed region (standing in
//! for the NIC's DMA); the timed region is `Worker::poll` (parse, classify,
//! conntrack, select, NAT, tx to the ring, housekeeping) plus returning the
//! transmitted buffers to the pool.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dataplane::flow::Family;
use dataplane::wire::tcp::flags as F;
use portico_bench::{INSIDE, OUTSIDE, Rig, RigConfig, client_tcp_of};
use std::time::{Duration, Instant};

const BATCH: usize = 64;

/// The families the TCP benches run for, with their benchmark names'
/// prefix.
const FAMILIES: [(Family, &str); 2] = [(Family::V4, "tcp"), (Family::V6, "tcp6")];

fn flow_counts() -> Vec<u32> {
    match std::env::var("PORTICO_BENCH_FLOWS") {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => vec![1_000, 100_000, 1_000_000],
    }
}

/// A rig for `family` holding up to `conntrack_capacity` flows.
fn new_rig(family: Family, conntrack_capacity: u32) -> Rig {
    Rig::new(RigConfig {
        conntrack_capacity,
        ipv6: family == Family::V6,
        ..RigConfig::default()
    })
}

/// Inject one batch on `port` (untimed: the NIC's DMA), then time `poll`
/// and the return of the transmitted buffers.
fn timed_batch<B: AsRef<[u8]>>(
    rig: &mut Rig,
    port: u8,
    frames: impl IntoIterator<Item = B>,
) -> Duration {
    let d = rig.worker.driver_mut();
    for f in frames {
        d.inject(port, f.as_ref()).expect("room");
    }
    let t = Instant::now();
    rig.worker.poll();
    let d = rig.worker.driver_mut();
    d.discard_tx(OUTSIDE);
    d.discard_tx(INSIDE);
    t.elapsed()
}

/// Time `poll` over successive batches of `frames` (cycled).
fn timed_batches(
    rig: &mut Rig,
    port: u8,
    frames: &[Vec<u8>],
    iters: u64,
    cursor: &mut usize,
) -> Duration {
    (0..iters)
        .map(|_| {
            let batch = (0..BATCH).map(|_| {
                let f = &frames[*cursor];
                *cursor = (*cursor + 1) % frames.len();
                f
            });
            timed_batch(rig, port, batch)
        })
        .sum()
}

/// After a bench: every frame it sent was forwarded (none dropped).
fn assert_no_drops(rig: &Rig, bench: &str) {
    let c = rig.worker.pipeline().counters();
    assert_eq!(c.total_drops(), 0, "{bench}: {c:?}");
}

/// Shuffle deterministically so consecutive packets hit unrelated flows.
fn shuffled(mut v: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

fn bench_established(c: &mut Criterion) {
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.sample_size(20);
    for flows in flow_counts() {
        for (family, prefix) in FAMILIES {
            let mut rig = new_rig(family, flows.max(1024) + 4096);
            let (client_acks, backend_acks) = rig.establish_tcp(family, flows);
            let client_acks = shuffled(client_acks);
            let backend_acks = shuffled(backend_acks);
            for (name, port, frames) in [
                ("established", OUTSIDE, &client_acks),
                ("reply", INSIDE, &backend_acks),
            ] {
                let mut cursor = 0;
                let id = format!("{prefix}_{name}");
                g.bench_function(BenchmarkId::new(&id, flows), |b| {
                    b.iter_custom(|iters| timed_batches(&mut rig, port, frames, iters, &mut cursor))
                });
                assert_no_drops(&rig, &id);
            }
        }

        let mut rig = new_rig(Family::V4, flows.max(1024) + 4096);
        let datagrams = shuffled(rig.establish_udp(flows));
        let mut cursor = 0;
        g.bench_function(BenchmarkId::new("udp_established", flows), |b| {
            b.iter_custom(|iters| timed_batches(&mut rig, OUTSIDE, &datagrams, iters, &mut cursor))
        });
        assert_no_drops(&rig, "udp_established");
    }
    g.finish();
}

fn bench_new_flows(c: &mut Criterion) {
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.sample_size(20);
    for flows in flow_counts() {
        for (family, prefix) in FAMILIES {
            // A table already holding `flows` established flows; each SYN
            // makes a new flow. The table is sized so that it never fills
            // during a run; the rig is rebuilt when it would.
            let cap = flows + 2_000_000;
            let populated = || {
                let mut rig = new_rig(family, cap);
                rig.establish_tcp(family, flows);
                rig
            };
            let mut rig = populated();
            let mut next = flows;
            let id = format!("{prefix}_new_flow");
            g.bench_function(BenchmarkId::new(&id, flows), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        if next + BATCH as u32 >= cap - 1024 {
                            rig = populated();
                            next = flows;
                        }
                        let syns = (next..next + BATCH as u32)
                            .map(|i| client_tcp_of(family, i, F::SYN, 1, 0));
                        next += BATCH as u32;
                        total += timed_batch(&mut rig, OUTSIDE, syns);
                    }
                    total
                })
            });
            assert_no_drops(&rig, &id);
        }
    }
    g.finish();
}

criterion_group!(benches, bench_established, bench_new_flows);
criterion_main!(benches);
