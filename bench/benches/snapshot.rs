//! Snapshot build: 10k services × 10 endpoints from scratch (one thread and
//! two), and one endpoint change at that size through the incremental
//! `update` and through a full `build` of the changed spec; and the admin
//! API's per-service report of such a snapshot (what every `portico stats`
//! and /metrics scrape builds), indexed against the scan it replaced.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use dataplane::counters::ServiceCounters;
use dataplane::snapshot::{ServiceChanges, SnapshotBuilder};
use portico::admin::service_reports;
use portico_bench::report_scan::service_reports_by_scan;
use portico_bench::{cluster_service_changed, cluster_spec};
use std::hint::black_box;

fn bench_snapshot(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot_build_10k_services_x10");
    g.sample_size(10);
    // Maglev sizes follow the backend count (1021 slots for 10 backends),
    // capped at the default 16381.
    let full = cluster_spec(10_000, 10, 16381);
    for threads in [1usize, 2] {
        g.bench_function(BenchmarkId::new("from_scratch_threads", threads), |b| {
            b.iter(|| {
                black_box(
                    SnapshotBuilder::new()
                        .with_threads(threads)
                        .build(&full)
                        .expect("valid"),
                )
            })
        });
    }

    // One endpoint of one service alternates between two addresses.
    let changed_service = |flip: bool| cluster_service_changed(&full, 4242, flip);
    let mut builder = SnapshotBuilder::new();
    builder.build(&full).expect("valid");
    let mut flip = false;
    g.bench_function("one_endpoint_change_update", |b| {
        b.iter(|| {
            flip = !flip;
            let changes = ServiceChanges {
                upserts: vec![changed_service(flip)],
                removals: Vec::new(),
            };
            black_box(builder.update(&changes).expect("valid"))
        })
    });
    // The same change through a full build of the whole spec (the static
    // source's path): every service's spec is compared, one is rebuilt.
    let mut changed = full.clone();
    g.bench_function("one_endpoint_change_full_build", |b| {
        b.iter(|| {
            flip = !flip;
            changed.services[4242] = changed_service(flip);
            black_box(builder.build(&changed).expect("valid"))
        })
    });
    g.finish();
}

fn bench_service_reports(c: &mut Criterion) {
    let mut g = c.benchmark_group("service_reports_10k_services_x10");
    g.sample_size(10);
    let snap = SnapshotBuilder::new()
        .build(&cluster_spec(10_000, 10, 16381))
        .expect("valid");
    let counted = ServiceCounters {
        service_packets: vec![7; snap.services.len()],
        backend_packets: vec![3; snap.backends.len()],
        ..ServiceCounters::default()
    };
    g.bench_function("indexed", |b| {
        b.iter(|| black_box(service_reports(&snap, &counted)))
    });
    g.bench_function("scan_before", |b| {
        b.iter(|| black_box(service_reports_by_scan(&snap, &counted)))
    });
    g.finish();
}

criterion_group!(benches, bench_snapshot, bench_service_reports);
criterion_main!(benches);
