//! Per-stage costs on one TCP frame of each family (IPv4: 64 bytes, IPv6:
//! 74): parse (with and without software checksum verification), the
//! stable flow hash, the NAT rewrite with incremental checksums; and a SNAT
//! tuple allocation and a UDP parse. Conntrack and Maglev have their own
//! benches; the whole pipeline is `--bench pipeline`.
//!
//! The per-family benches come from one table ([`families`]); the IPv6
//! names end in `6` (`parse_tcp6_74B_…`, `stable_flow_hash6`,
//! `nat_rewrite_incremental_checksums6`).

use criterion::{Criterion, criterion_group, criterion_main};
use dataplane::counters::DropReason;
use dataplane::flow::{FlowKey, FlowKey6, Proto, TableHasher};
use dataplane::packet::{Family, PacketMeta};
use dataplane::snat::{SnatAllocator, SnatConfig};
use dataplane::stage::parse::parse_frame;
use dataplane::stage::{ipv6, nat};
use dataplane::wire::build;
use dataplane::wire::tcp::flags as F;
use portico_bench::{OUT_MAC, ROUTER_MAC, VIP, backend_ip, client_tcp_of, ipv6::backend6};
use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

/// One family's row: its benchmark names' parts, a client segment, and the
/// NAT rewrite of that segment towards a backend through a SNAT address.
struct FamilyCase {
    /// `tcp`, `tcp6`.
    proto: &'static str,
    /// The frame's size in the parse benches' names.
    size: &'static str,
    /// Appended to the other benches' names: ``, `6`.
    suffix: &'static str,
    frame: Vec<u8>,
    /// The packet `meta` describes, rewritten as the flow stage would.
    rewrite: fn(&mut [u8], &PacketMeta) -> Result<(), DropReason>,
    /// The stable (Maglev) hash of the packet's key.
    stable_hash: fn(&PacketMeta) -> u64,
}

fn families() -> [FamilyCase; 2] {
    [
        FamilyCase {
            proto: "tcp",
            size: "64B",
            suffix: "",
            frame: client_tcp_of(Family::V4, 7, F::ACK, 1, 1),
            rewrite: |buf, meta| {
                let snat = Ipv4Addr::new(10, 1, 0, 1);
                let new = FlowKey::new(Proto::Tcp, snat, 40_001, backend_ip(5), 8080);
                nat::rewrite_packet(buf, meta, &meta.key, &new, true)
            },
            stable_hash: |meta| meta.key.stable_hash(),
        },
        FamilyCase {
            proto: "tcp6",
            size: "74B",
            suffix: "6",
            frame: client_tcp_of(Family::V6, 7, F::ACK, 1, 1),
            rewrite: |buf, meta| {
                // A constant, not parsed from text inside the timed loop.
                let snat = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 1);
                let new = FlowKey6::new(Proto::Tcp, snat, 40_001, backend6(5), 8080);
                ipv6::nat::rewrite(buf, meta, &meta.key6, &new)
            },
            stable_hash: |meta| meta.key6.stable_hash(),
        },
    ]
}

fn bench_stages(c: &mut Criterion) {
    let mut g = c.benchmark_group("stage");
    let hasher = TableHasher::from_seed(1);
    for case in families() {
        let frame = &case.frame;
        for (checksums, offloaded) in [("verify", false), ("offloaded", true)] {
            let name = format!("parse_{}_{}_{checksums}_checksums", case.proto, case.size);
            g.bench_function(name, |b| {
                b.iter(|| parse_frame(black_box(frame), 0, offloaded, &hasher))
            });
        }
        let meta = parse_frame(frame, 0, false, &hasher).expect("valid frame");
        g.bench_function(format!("stable_flow_hash{}", case.suffix), |b| {
            b.iter(|| (case.stable_hash)(black_box(&meta)))
        });
        let mut buf = frame.clone();
        (case.rewrite)(&mut buf, &meta).expect("the segment rewrites");
        let name = format!("nat_rewrite_incremental_checksums{}", case.suffix);
        g.bench_function(name, |b| {
            b.iter(|| {
                buf.copy_from_slice(frame);
                (case.rewrite)(black_box(&mut buf), &meta)
            })
        });
    }
    let cfg = SnatConfig {
        addrs: vec![Ipv4Addr::new(10, 1, 0, 1)],
        ..SnatConfig::default()
    };
    let mut snat =
        SnatAllocator::new(&cfg, 0, 1, 42, TableHasher::from_seed(5)).expect("valid SNAT config");
    let backend = SocketAddrV4::new(backend_ip(5), 8080);
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
        b.iter(|| parse_frame(black_box(&udp), 0, false, &hasher))
    });
    g.finish();
}

criterion_group!(benches, bench_stages);
criterion_main!(benches);
