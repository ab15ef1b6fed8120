//! `portico demo --mem`: the dataplane pipeline end to end on the in-memory
//! driver (no root, no network namespaces).
//!
//! Topology (all simulated in memory, nothing touches the host's network):
//! ```text
//! clients 198.51.100.0/24 -> router -> port 0 [portico] port 1 -> backends 10.1.0.10..
//!   VIP 203.0.113.10 tcp/80 "web" and udp/53 "dns", NodePort 192.0.2.1:30080 -> web,
//!   full NAT to 10.1.0.1
//! ```
//! Every TCP connection does a full handshake, one request/response and a
//! FIN close; every UDP query gets an answer. Simulated backends answer
//! whatever the gateway delivers to them; simulated clients check that what
//! comes back is addressed from the service address they used.

use anyhow::{Context, bail, ensure};
use dataplane::clock::MonotonicClock;
use dataplane::conntrack::ConntrackConfig;
use dataplane::counters::{DropReason, SharedCounters};
use dataplane::driver::mem::{MemConfig, MemDriver};
use dataplane::flow::{FlowKey, Proto};
use dataplane::snapshot::{
    AddrRole, ListenerKind, NeighbourSpec, PortSpec, Publisher, Route, ServiceSpec,
    SnapshotBuilder, SnapshotSpec,
};
use dataplane::snat::SnatConfig;
use dataplane::stage::PipelineConfig;
use dataplane::stage::parse::parse_frame;
use dataplane::wire::tcp::flags as F;
use dataplane::wire::{MacAddr, build};
use dataplane::worker::{IdlePolicy, Worker, WorkerConfig};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

const OUTSIDE: u8 = 0;
const INSIDE: u8 = 1;
const OUT_MAC: MacAddr = MacAddr([0x02, 0x50, 0, 0, 0, 0x01]);
const IN_MAC: MacAddr = MacAddr([0x02, 0x50, 0, 0, 0, 0x02]);
const ROUTER_MAC: MacAddr = MacAddr([0x02, 0xaa, 0, 0, 0, 0x01]);
const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const NODE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const NODE_PORT: u16 = 30080;
const SNAT: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);

/// What the in-memory demo pushes through the pipeline.
#[derive(Clone, Copy, Debug)]
pub struct MemDemoArgs {
    /// TCP connections to open (half to the VIP, half to the NodePort).
    pub connections: u32,
    /// UDP queries to send to the VIP.
    pub queries: u32,
    /// Backends behind each service, 1..=200.
    pub backends: u8,
}

fn backend_ip(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 1, 0, 10 + i)
}

fn backend_mac(ip: Ipv4Addr) -> MacAddr {
    MacAddr([0x02, 0xbb, 0, 0, 0, ip.octets()[3]])
}

fn client(i: u32) -> (Ipv4Addr, u16) {
    (
        Ipv4Addr::new(198, 51, 100, 1 + (i % 200) as u8),
        20_000 + (i / 200) as u16,
    )
}

fn spec(backends: u8) -> SnapshotSpec {
    let mut web = ServiceSpec::new("web", Proto::Tcp, VIP, 80);
    web.listeners
        .push((NODE.into(), NODE_PORT, ListenerKind::NodePort));
    let mut dns = ServiceSpec::new("dns", Proto::Udp, VIP, 53);
    for b in 0..backends {
        web = web.endpoint(SocketAddrV4::new(backend_ip(b), 8080));
        dns = dns.endpoint(SocketAddrV4::new(backend_ip(b), 5353));
    }
    SnapshotSpec {
        ports: vec![
            PortSpec {
                mac: OUT_MAC.0,
                mtu: 1500,
                mss_clamp: None,
            },
            PortSpec {
                mac: IN_MAC.0,
                mtu: 1500,
                mss_clamp: None,
            },
        ],
        vip_port: OUTSIDE,
        addresses: vec![
            (NODE.into(), OUTSIDE, AddrRole::Node),
            (SNAT.into(), INSIDE, AddrRole::Snat),
        ],
        routes: vec![Route {
            dest: Ipv4Addr::new(10, 1, 0, 0).into(),
            prefix_len: 24,
            port: INSIDE,
            via: None,
        }],
        neighbours: (0..backends)
            .map(|b| NeighbourSpec {
                addr: backend_ip(b).into(),
                mac: backend_mac(backend_ip(b)).0,
            })
            .collect(),
        services: vec![web, dns],
        maglev_table_size: dataplane::maglev::DEFAULT_TABLE_SIZE,
    }
}

struct Demo {
    worker: Worker<MemDriver, MonotonicClock>,
    shared: Arc<SharedCounters>,
    busy: Duration,
    packets: u64,
}

impl Demo {
    /// Inject `frames` on `port`, run the pipeline until they are consumed,
    /// and return what left on `out_port`.
    fn exchange(
        &mut self,
        port: u8,
        frames: &[Vec<u8>],
        out_port: u8,
    ) -> anyhow::Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        for chunk in frames.chunks(256) {
            for f in chunk {
                self.worker
                    .driver_mut()
                    .inject(port, f)
                    .context("injecting a frame")?;
            }
            let t = Instant::now();
            while self.worker.driver_mut().rx_pending(port) > 0 {
                self.worker.poll();
            }
            self.busy += t.elapsed();
            self.packets += chunk.len() as u64;
            // The gateway's own ARP (gratuitous announcements of its
            // addresses at start) is not part of the exchange.
            out.extend(
                self.worker
                    .driver_mut()
                    .take_tx(out_port)
                    .into_iter()
                    .filter(|f| f.get(12..14) != Some(&[0x08, 0x06][..])),
            );
        }
        Ok(out)
    }
}

fn key_of(frame: &[u8], port: u8) -> anyhow::Result<FlowKey> {
    parse_frame(
        frame,
        port,
        false,
        &dataplane::flow::TableHasher::from_seed(0),
    )
    .map(|m| m.key)
    .map_err(|r| anyhow::anyhow!("gateway emitted a frame the parser rejects: {r}"))
}

/// The backends' side: answer each delivered segment with `flags`/`payload`
/// at sequence number `seq`, acknowledging `ack` (the TCP numbers of a real
/// exchange: the gateway tracks the windows).
fn backends_answer(
    delivered: &[Vec<u8>],
    (flags, seq, ack): (u8, u32, u32),
    payload: &[u8],
    hits: &mut BTreeMap<Ipv4Addr, u32>,
) -> anyhow::Result<Vec<Vec<u8>>> {
    delivered
        .iter()
        .map(|f| {
            let k = key_of(f, INSIDE)?;
            ensure!(
                k.src_ip == SNAT,
                "backend saw source {} instead of the SNAT address",
                k.src_ip
            );
            *hits.entry(k.dst_ip).or_default() += 1;
            Ok(match k.proto {
                Proto::Tcp => build::eth_ipv4_tcp(
                    backend_mac(k.dst_ip),
                    IN_MAC,
                    k.dst_ip,
                    k.dst_port,
                    k.src_ip,
                    k.src_port,
                    flags,
                    seq,
                    ack,
                    payload,
                ),
                _ => build::eth_ipv4_udp(
                    backend_mac(k.dst_ip),
                    IN_MAC,
                    k.dst_ip,
                    k.dst_port,
                    k.src_ip,
                    k.src_port,
                    payload,
                ),
            })
        })
        .collect()
}

pub fn run(args: &MemDemoArgs) -> anyhow::Result<()> {
    let spec = spec(args.backends);
    let snapshot = SnapshotBuilder::new()
        .build(&spec)
        .context("building the demo snapshot")?;
    let publisher = Publisher::new(snapshot);
    let shared = Arc::new(SharedCounters::default());
    let worker = Worker::new(
        &WorkerConfig {
            pipeline: PipelineConfig {
                worker: 0,
                workers: 1,
                conntrack: ConntrackConfig::with_capacity(1 << 16),
                snat: SnatConfig {
                    addrs: vec![SNAT],
                    ..SnatConfig::default()
                },
                affinity_capacity: 4096,
                seed: 7,
                table_hasher: dataplane::flow::TableHasher::from_seed(7),
                new_flows_per_source_per_s: 0,
                source_prefix_len_v6: 64,
            },
            batch_size: 64,
            idle: IdlePolicy::Adaptive,
        },
        MemDriver::new(MemConfig {
            ports: 2,
            pool_frames: 4096,
            ring_frames: 2048,
        }),
        MonotonicClock::new(),
        publisher.reader(),
        Arc::clone(&shared),
        None,
        Arc::new(dataplane::neighbour::NeighbourTable::new(Default::default())),
    )
    .context("starting the worker")?;
    let mut demo = Demo {
        worker,
        shared,
        busy: Duration::ZERO,
        packets: 0,
    };

    println!("portico demo — dataplane on the in-memory driver");
    println!(
        "  VIP {VIP} tcp/80 (web) and udp/53 (dns), NodePort {NODE}:{NODE_PORT} -> web, SNAT {SNAT}"
    );
    println!(
        "  {} backends: {}..{}",
        args.backends,
        backend_ip(0),
        backend_ip(args.backends - 1)
    );

    // TCP: handshake, request/response, close; half via the VIP, half via the NodePort.
    let mut web_hits = BTreeMap::new();
    let target = |i: u32| {
        if i.is_multiple_of(2) {
            (VIP, 80)
        } else {
            (NODE, NODE_PORT)
        }
    };
    let client_seg = |i: u32, (flags, seq, ack): (u8, u32, u32), payload: &[u8]| {
        let (ip, port) = client(i);
        let (dst, dport) = target(i);
        build::eth_ipv4_tcp(
            ROUTER_MAC, OUT_MAC, ip, port, dst, dport, flags, seq, ack, payload,
        )
    };
    // One connection's sequence numbers: the client's ISN 1, the backend's
    // 1000, the request and response below.
    const REQUEST: &[u8] = b"GET / HTTP/1.1\r\n\r\n";
    const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\n\r\n";
    let (client_isn, backend_isn) = (1u32, 1000u32);
    let request_end = client_isn + 1 + REQUEST.len() as u32;
    let response_end = backend_isn + 1 + RESPONSE.len() as u32 + 1;
    let ids: Vec<u32> = (0..args.connections).collect();
    let syns: Vec<_> = ids
        .iter()
        .map(|&i| client_seg(i, (F::SYN, client_isn, 0), b""))
        .collect();
    let at_backends = demo.exchange(OUTSIDE, &syns, INSIDE)?;
    let synacks = backends_answer(
        &at_backends,
        (F::SYN | F::ACK, backend_isn, client_isn + 1),
        b"",
        &mut web_hits,
    )?;
    let at_clients = demo.exchange(INSIDE, &synacks, OUTSIDE)?;
    for f in &at_clients {
        let k = key_of(f, OUTSIDE)?;
        ensure!(
            k.src_ip == VIP || k.src_ip == NODE,
            "client got a reply from {}",
            k.src_ip
        );
    }
    let requests: Vec<_> = ids
        .iter()
        .map(|&i| {
            client_seg(
                i,
                (F::ACK | F::PSH, client_isn + 1, backend_isn + 1),
                REQUEST,
            )
        })
        .collect();
    let at_backends = demo.exchange(OUTSIDE, &requests, INSIDE)?;
    let responses = backends_answer(
        &at_backends,
        (F::ACK | F::PSH | F::FIN, backend_isn + 1, request_end),
        RESPONSE,
        &mut BTreeMap::new(),
    )?;
    let responses_at_clients = demo.exchange(INSIDE, &responses, OUTSIDE)?.len();
    let closes: Vec<_> = ids
        .iter()
        .map(|&i| client_seg(i, (F::ACK | F::FIN, request_end, response_end), b""))
        .collect();
    let at_backends = demo.exchange(OUTSIDE, &closes, INSIDE)?;
    let last_acks = backends_answer(
        &at_backends,
        (F::ACK, response_end, request_end + 1),
        b"",
        &mut BTreeMap::new(),
    )?;
    demo.exchange(INSIDE, &last_acks, OUTSIDE)?;

    // UDP queries.
    let mut dns_hits = BTreeMap::new();
    let queries: Vec<_> = (0..args.queries)
        .map(|i| {
            let (ip, port) = client(i + 1_000_000);
            build::eth_ipv4_udp(ROUTER_MAC, OUT_MAC, ip, port, VIP, 53, b"\x12\x34 query")
        })
        .collect();
    let at_backends = demo.exchange(OUTSIDE, &queries, INSIDE)?;
    let answers = backends_answer(&at_backends, (0, 0, 0), b"\x12\x34 answer", &mut dns_hits)?;
    let answers_at_clients = demo.exchange(INSIDE, &answers, OUTSIDE)?.len();

    demo.worker.publish_counters();
    let (c, g) = demo.shared.read();
    println!();
    println!(
        "TCP connections: {} opened, {} responses delivered to clients",
        at_clients.len(),
        responses_at_clients
    );
    print_distribution("web (tcp/80 + NodePort)", &web_hits);
    println!(
        "UDP queries: {} sent, {} answers delivered to clients",
        args.queries, answers_at_clients
    );
    print_distribution("dns (udp/53)", &dns_hits);
    println!();
    println!(
        "pipeline: {} packets, {:.0} ns/packet on one core (mem driver, debug={}), {:.2} Mpps",
        demo.packets,
        demo.busy.as_nanos() as f64 / demo.packets.max(1) as f64,
        cfg!(debug_assertions),
        demo.packets as f64 / demo.busy.as_secs_f64().max(1e-9) / 1e6
    );
    println!(
        "counters: rx {} tx {} flows created {} live {} (TIME_WAIT after close) snat tuples in use {}",
        c.rx_packets, c.tx_packets, c.flows_created, g.live_flows, g.snat_in_use
    );
    for r in DropReason::ALL {
        if c.dropped(*r) > 0 {
            println!("  drop {:<24} {}", r.name(), c.dropped(*r));
        }
    }
    if c.total_drops() == 0 {
        println!("  no drops");
    }
    if at_clients.len() as u32 != args.connections || answers_at_clients as u32 != args.queries {
        bail!("some traffic was lost (see the counters above)");
    }
    Ok(())
}

fn print_distribution(name: &str, hits: &BTreeMap<Ipv4Addr, u32>) {
    let total: u32 = hits.values().sum();
    println!("  {name}:");
    for (ip, n) in hits {
        let pct = f64::from(*n) * 100.0 / f64::from(total.max(1));
        println!(
            "    {ip:<12} {n:>6}  {pct:5.1}%  {}",
            "#".repeat((pct / 2.0) as usize)
        );
    }
}
