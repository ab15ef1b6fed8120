//! Per-stage costs on one 64-byte TCP frame: parse (with and without
//! software checksum verification), the stable flow hash, the NAT rewrite
//! with incremental checksums, and a SNAT tuple allocation. Conntrack and
//! Maglev have their own benches; the whole pipeline is `--bench pipeline`.

use criterion::{Criterion, criterion_group, criterion_main};
use dataplane::flow::{FlowKey, Proto, TableHasher};
use dataplane::snat::{SnatAllocator, SnatConfig};
use dataplane::stage::nat::rewrite_packet;
use dataplane::stage::parse::parse_frame;
use dataplane::wire::build;
use dataplane::wire::tcp::flags as F;
use portico_bench::{OUT_MAC, ROUTER_MAC, VIP, client_tcp};
use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};

fn bench_stages(c: &mut Criterion) {
    let frame = client_tcp(7, F::ACK, 1, 1);
    let mut g = c.benchmark_group("stage");
    g.bench_function("parse_tcp_64B_verify_checksums", |b| {
        b.iter(|| parse_frame(black_box(&frame), 0, false, &TableHasher::from_seed(1)))
    });
    g.bench_function("parse_tcp_64B_offloaded_checksums", |b| {
        b.iter(|| parse_frame(black_box(&frame), 0, true, &TableHasher::from_seed(1)))
    });
    let meta = parse_frame(&frame, 0, false, &TableHasher::from_seed(1)).expect("valid frame");
    g.bench_function("stable_flow_hash", |b| {
        b.iter(|| black_box(&meta.key).stable_hash())
    });
    let new = FlowKey::new(
        Proto::Tcp,
        Ipv4Addr::new(10, 1, 0, 1),
        40_001,
        Ipv4Addr::new(10, 1, 1, 5),
        8080,
    );
    let mut buf = frame.clone();
    g.bench_function("nat_rewrite_incremental_checksums", |b| {
        b.iter(|| {
            buf.copy_from_slice(&frame);
            rewrite_packet(black_box(&mut buf), &meta, &meta.key, &new, true)
        })
    });
    let cfg = SnatConfig {
        addrs: vec![Ipv4Addr::new(10, 1, 0, 1)],
        ..SnatConfig::default()
    };
    let mut snat =
        SnatAllocator::new(&cfg, 0, 1, 42, TableHasher::from_seed(5)).expect("valid SNAT config");
    let backend = SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, 5), 8080);
    g.bench_function("snat_alloc_release_udp", |b| {
        b.iter(|| {
            let t = snat
                .alloc(Proto::Udp, backend, 0, |_| false)
                .expect("free tuples");
            let key = dataplane::snat::reply_key(Proto::Udp, t.addr, t.port, backend);
            snat.release(&key, 0);
        })
    });
    let udp = build::eth_ipv4_udp(
        ROUTER_MAC,
        OUT_MAC,
        Ipv4Addr::new(100, 64, 0, 1),
        1000,
        VIP,
        53,
        &[0u8; 18],
    );
    g.bench_function("parse_udp_64B_verify_checksums", |b| {
        b.iter(|| parse_frame(black_box(&udp), 0, false, &TableHasher::from_seed(1)))
    });
    g.finish();
}

criterion_group!(benches, bench_stages);
criterion_main!(benches);
