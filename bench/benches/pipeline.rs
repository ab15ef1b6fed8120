//! Whole-pipeline benches on the mem driver, one core, 64-byte frames:
//! established TCP, new TCP (SYN), UDP, and the reply direction, with 1k,
//! 100k and 1M live flows. One iteration = one batch of 64 frames; criterion
//! reports time per batch and throughput in packets (elements).
//!
//! Frames are copied into the rx ring outside the timed region (standing in
//! for the NIC's DMA); the timed region is `Worker::poll` (parse, classify,
//! conntrack, select, NAT, tx to the ring, housekeeping) plus returning the
//! transmitted buffers to the pool.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dataplane::wire::tcp::flags as F;
use portico_bench::{INSIDE, OUTSIDE, Rig, RigConfig, client_tcp};
use std::time::{Duration, Instant};

const BATCH: usize = 64;

fn flow_counts() -> Vec<u32> {
    match std::env::var("PORTICO_BENCH_FLOWS") {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => vec![1_000, 100_000, 1_000_000],
    }
}

/// Time `poll` over successive batches of `frames` (cycled).
fn timed_batches(
    rig: &mut Rig,
    port: u8,
    frames: &[Vec<u8>],
    iters: u64,
    cursor: &mut usize,
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let d = rig.worker.driver_mut();
        for _ in 0..BATCH {
            d.inject(port, &frames[*cursor]).expect("room");
            *cursor = (*cursor + 1) % frames.len();
        }
        let t = Instant::now();
        rig.worker.poll();
        let d = rig.worker.driver_mut();
        d.discard_tx(OUTSIDE);
        d.discard_tx(INSIDE);
        total += t.elapsed();
    }
    total
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
        let mut rig = Rig::new(RigConfig {
            conntrack_capacity: flows.max(1024) + 4096,
            ..RigConfig::default()
        });
        let (client_acks, backend_acks) = rig.establish_tcp(flows);
        let client_acks = shuffled(client_acks);
        let backend_acks = shuffled(backend_acks);
        let mut cursor = 0;
        g.bench_function(BenchmarkId::new("tcp_established", flows), |b| {
            b.iter_custom(|iters| {
                timed_batches(&mut rig, OUTSIDE, &client_acks, iters, &mut cursor)
            })
        });
        let mut cursor = 0;
        g.bench_function(BenchmarkId::new("tcp_reply", flows), |b| {
            b.iter_custom(|iters| {
                timed_batches(&mut rig, INSIDE, &backend_acks, iters, &mut cursor)
            })
        });
        drop(rig);

        let mut rig = Rig::new(RigConfig {
            conntrack_capacity: flows.max(1024) + 4096,
            ..RigConfig::default()
        });
        let datagrams = shuffled(rig.establish_udp(flows));
        let mut cursor = 0;
        g.bench_function(BenchmarkId::new("udp_established", flows), |b| {
            b.iter_custom(|iters| timed_batches(&mut rig, OUTSIDE, &datagrams, iters, &mut cursor))
        });
    }
    g.finish();
}

fn bench_new_flows(c: &mut Criterion) {
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.sample_size(20);
    for flows in flow_counts() {
        // A table already holding `flows` established flows; each SYN makes a
        // new flow. The table is sized so that it never fills during a run;
        // the rig is rebuilt when it would.
        let cap = flows + 2_000_000;
        let mut rig = Rig::new(RigConfig {
            conntrack_capacity: cap,
            ..RigConfig::default()
        });
        rig.establish_tcp(flows);
        let mut next = flows;
        g.bench_function(BenchmarkId::new("tcp_new_flow", flows), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    if next + BATCH as u32 >= cap - 1024 {
                        rig = Rig::new(RigConfig {
                            conntrack_capacity: cap,
                            ..RigConfig::default()
                        });
                        rig.establish_tcp(flows);
                        next = flows;
                    }
                    let d = rig.worker.driver_mut();
                    for _ in 0..BATCH {
                        d.inject(OUTSIDE, &client_tcp(next, F::SYN, 1, 0))
                            .expect("room");
                        next += 1;
                    }
                    let t = Instant::now();
                    rig.worker.poll();
                    let d = rig.worker.driver_mut();
                    d.discard_tx(OUTSIDE);
                    d.discard_tx(INSIDE);
                    total += t.elapsed();
                }
                total
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_established, bench_new_flows);
criterion_main!(benches);
