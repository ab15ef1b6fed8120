//! Snapshot build: 10k services × 10 endpoints from scratch (one thread and
//! two), and one endpoint change at that size through the incremental
//! `update` and through a full `build` of the changed spec.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use dataplane::snapshot::{ServiceChanges, SnapshotBuilder};
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

criterion_group!(benches, bench_snapshot);
criterion_main!(benches);
