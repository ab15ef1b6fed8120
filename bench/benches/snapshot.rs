//! Snapshot build: 10k services × 10 endpoints from scratch, and the rebuild
//! after one endpoint change at that size (the builder reuses the Maglev
//! tables of every unchanged service), at Maglev sizes 16381 (default) and
//! 1021 (a small table, as an adaptive size for 10-endpoint services would
//! choose).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use dataplane::flow::Proto;
use dataplane::snapshot::{
    AddrRole, NeighbourSpec, PortSpec, Route, ServiceSpec, SnapshotBuilder, SnapshotSpec,
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
    for table_size in [16381u32, 1021] {
        let full = spec(table_size);
        g.bench_function(BenchmarkId::new("from_scratch", table_size), |b| {
            b.iter(|| black_box(SnapshotBuilder::new().build(&full).expect("valid")))
        });
        let mut builder = SnapshotBuilder::new();
        builder.build(&full).expect("valid");
        let mut changed = full.clone();
        let mut flip = false;
        g.bench_function(BenchmarkId::new("one_endpoint_change", table_size), |b| {
            b.iter(|| {
                // Alternate one endpoint of one service between two addresses.
                flip = !flip;
                let last = Ipv4Addr::new(10, 200, 0, u8::from(flip));
                changed.services[4242].endpoints[9].addr = SocketAddrV4::new(last, 8080);
                black_box(builder.build(&changed).expect("valid"))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_snapshot);
criterion_main!(benches);
