//! Instruction-count and CPU-time probe for the snapshot builder at
//! Kubernetes scale: `SERVICES` services × `ENDPOINTS` endpoints (Maglev cap
//! 16381, so 10-endpoint sets get 1021-slot tables). Each measured operation
//! runs inside its own `#[inline(never)]` function, so
//! `valgrind --tool=callgrind --toggle-collect='*measured_update*'` (or
//! `*measured_scratch*`, `*measured_full_build*`) counts exactly it.
//! Without valgrind it prints the best of `ROUNDS` wall-clock times and the
//! process CPU time (user + system from `/proc/self/stat`, so time the
//! machine gave to other processes is not counted) per operation.
//!
//! usage: `snapshot-probe <services> <endpoints> <rounds> [threads] [maglev_cap]`
//!
//! `maglev_cap` (default 16381, prime) is the configured `maglev_table_size`:
//! a lower cap trades balance for build time.

use dataplane::snapshot::{ServiceChanges, Snapshot, SnapshotBuilder, SnapshotSpec};
use portico_bench::{cluster_service_changed, cluster_spec};
use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn measured_scratch(spec: &SnapshotSpec, threads: usize) -> Snapshot {
    SnapshotBuilder::new()
        .with_threads(threads)
        .build(spec)
        .expect("valid spec")
}

#[inline(never)]
fn measured_update(builder: &mut SnapshotBuilder, changes: &ServiceChanges) -> Snapshot {
    builder.update(changes).expect("valid change")
}

#[inline(never)]
fn measured_full_build(builder: &mut SnapshotBuilder, spec: &SnapshotSpec) -> Snapshot {
    builder.build(spec).expect("valid spec")
}

/// User + system CPU time of this process so far.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the line, in clock ticks (100 per second here).
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

/// Best wall-clock time and mean CPU time of `rounds` runs of `f`.
fn time(rounds: u32, mut f: impl FnMut()) -> (Duration, Duration) {
    let mut best = Duration::MAX;
    let cpu_before = cpu_time();
    for _ in 0..rounds {
        let start = Instant::now();
        f();
        best = best.min(start.elapsed());
    }
    (best, (cpu_time() - cpu_before) / rounds.max(1))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let number = |i: usize, default: u32| {
        args.get(i)
            .map_or(Some(default), |a| a.parse::<u32>().ok())
            .unwrap_or_else(|| {
                eprintln!(
                    "usage: snapshot-probe <services> <endpoints> <rounds> [threads] [maglev_cap]"
                );
                std::process::exit(2);
            })
    };
    let (services, endpoints, rounds) = (number(1, 10_000), number(2, 10), number(3, 5));
    let threads = number(4, 1) as usize;
    let maglev_cap = number(5, 16381);
    let spec = cluster_spec(services, endpoints, maglev_cap);
    let changed_index = (services / 2) as usize;

    let (best, cpu) = time(rounds, || {
        black_box(measured_scratch(&spec, threads));
    });
    println!("from scratch ({threads} thread(s)): best {best:?}, cpu {cpu:?}");

    let mut builder = SnapshotBuilder::new();
    builder.build(&spec).expect("valid spec");
    let mut flip = false;
    let mut held = Vec::new();
    let (best, cpu) = time(rounds.max(1) * 100, || {
        flip = !flip;
        let changes = ServiceChanges {
            upserts: vec![cluster_service_changed(&spec, changed_index, flip)],
            removals: Vec::new(),
        };
        // Keep the snapshot like a publisher does until the next one.
        held = vec![measured_update(&mut builder, &changes)];
    });
    println!("one endpoint change, update: best {best:?}, cpu {cpu:?}");

    let mut changed = spec.clone();
    let (best, cpu) = time(rounds.max(1) * 10, || {
        flip = !flip;
        changed.services[changed_index] = cluster_service_changed(&spec, changed_index, flip);
        held = vec![measured_full_build(&mut builder, &changed)];
    });
    println!("one endpoint change, full build: best {best:?}, cpu {cpu:?}");
    black_box(held);
}
