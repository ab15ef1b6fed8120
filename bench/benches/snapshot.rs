//! Snapshot build: 10k services × 10 endpoints from scratch (one thread and
//! two), and one endpoint change at that size through the incremental
//! `update` and through a full `build` of the changed spec.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use dataplane::flow::Proto;
use dataplane::snapshot::{
    AddrRole, NeighbourSpec, PortSpec, Route, ServiceChanges, ServiceSpec, SnapshotBuilder,
    SnapshotSpec,
};
use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};

const SERVICES: u32 = 10_000;
const ENDPOINTS: u32 = 10;

fn spec(table_size: u32) -> SnapshotSpec {
    let services = (0..SERVICES)
        .map(|s| {
            let vip = Ipv4Addr::from(u32::from(Ipv4Addr::new(203, 0, 0, 0)) + s);
            let mut svc = ServiceSpec::new(&format!("ns/svc-{s}"), Proto::Tcp, vip, 80);
            for e in 0..ENDPOINTS {
                let pod =
                    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 64, 0, 0)) + s * ENDPOINTS + e);
                svc = svc.endpoint(SocketAddrV4::new(pod, 8080));
            }
            svc
        })
        .collect();
    SnapshotSpec {
        ports: vec![
            PortSpec {
                mac: [2, 0, 0, 0, 0, 1],
                mtu: 1500,
            },
            PortSpec {
                mac: [2, 0, 0, 0, 0, 2],
                mtu: 1500,
            },
        ],
        vip_port: 0,
        addresses: vec![(Ipv4Addr::new(10, 0, 0, 1), 1, AddrRole::Snat)],
        routes: vec![Route {
            dest: Ipv4Addr::new(10, 64, 0, 0),
            prefix_len: 10,
            port: 1,
            via: Some(Ipv4Addr::new(10, 0, 0, 254)),
        }],
        neighbours: vec![NeighbourSpec {
            addr: Ipv4Addr::new(10, 0, 0, 254),
            mac: [2, 0, 0, 0, 0, 0xfe],
        }],
        services,
        maglev_table_size: table_size,
    }
}

fn bench_snapshot(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot_build_10k_services_x10");
    g.sample_size(10);
    // Maglev sizes follow the backend count (1021 slots for 10 backends),
    // capped at the default 16381.
    let full = spec(16381);
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
    let changed_service = |flip: bool| {
        let mut svc = full.services[4242].clone();
        let last = Ipv4Addr::new(10, 200, 0, u8::from(flip));
        svc.endpoints[9].addr = SocketAddrV4::new(last, 8080);
        svc
    };
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
