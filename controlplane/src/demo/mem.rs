//! `portico demo --mem`: the dataplane pipeline end to end on the in-memory
//! driver (no root, no network namespaces), for IPv4 and IPv6.
//!
//! Topology (all simulated in memory, nothing touches the host's network):
//! ```text
//! clients 198.51.100.0/24   -> router -> port 0 [portico] port 1 -> backends 10.1.0.10..
//!         2001:db8:100::/64                                         fd00:1::10..
//!   IPv4: VIP 203.0.113.10 tcp/80 "web" and udp/53 "dns",
//!         NodePort 192.0.2.1:30080 -> web, full NAT from 10.1.0.1
//!   IPv6: VIP 2001:db8:c::10 tcp/80 "web6" and udp/53 "dns6",
//!         NodePort [2001:db8:c::1]:30080 -> web6, full NAT from fd00:1::1
//! ```
//! The IPv6 half has the live demo's addresses
//! ([`super::topology`]: VIP, node and SNAT address, backend `i` at
//! `fd00:1::1i`); backend `i` is one host with an address of each family
//! (one MAC). Services are single-family, so each family runs on its own
//! services: the same traffic, one family after the other (`FAMILIES`).
//!
//! Every TCP connection does a full handshake, one request/response and a
//! FIN close; every UDP query gets an answer. Simulated backends answer
//! whatever the gateway delivers to them and check it comes from their
//! family's SNAT address; simulated clients check that what comes back is
//! addressed from the service address they used. At the end the demo
//! lists flows of both families as `portico flows` shows them.

use super::topology::{NODE_ADDR6, SNAT_ADDR6, VIP6, backend_addr6};
use crate::admin::live::flow_row;
use anyhow::{Context, bail, ensure};
use dataplane::clock::{Clock, MonotonicClock};
use dataplane::conntrack::{ConntrackConfig, Flow};
use dataplane::counters::{DropReason, SharedCounters};
use dataplane::driver::mem::{MemConfig, MemDriver};
use dataplane::flow::{Family, FlowKeyOf, IpFamily, Proto};
use dataplane::inspect::{FlowEntry, any_key};
use dataplane::packet::PacketKind;
use dataplane::snapshot::{
    AddrRole, ListenerKind, NeighbourSpec, PortSpec, Publisher, Route, ServiceSpec, Snapshot,
    SnapshotBuilder, SnapshotSpec,
};
use dataplane::snat::SnatConfig;
use dataplane::stage::PipelineConfig;
use dataplane::stage::parse::parse_frame;
use dataplane::wire::tcp::flags as F;
use dataplane::wire::{MacAddr, build};
use dataplane::worker::{IdlePolicy, Worker, WorkerConfig};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

const OUTSIDE: u8 = 0;
const INSIDE: u8 = 1;
const OUT_MAC: MacAddr = MacAddr([0x02, 0x50, 0, 0, 0, 0x01]);
const IN_MAC: MacAddr = MacAddr([0x02, 0x50, 0, 0, 0, 0x02]);
const ROUTER_MAC: MacAddr = MacAddr([0x02, 0xaa, 0, 0, 0, 0x01]);
const NODE_PORT: u16 = 30080;
const SNAT4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
/// Flows of each family the listing shows (the first of each service).
const LISTED_PER_SERVICE: usize = 1;

/// One family's half of the demo: its services' names and addresses and
/// its simulated clients and backends.
struct FamilyPlan {
    /// `IPv4`, `IPv6`.
    label: &'static str,
    /// The TCP service (VIP port 80 and the NodePort) and the UDP one (53).
    web: &'static str,
    dns: &'static str,
    vip: IpAddr,
    node: IpAddr,
    snat: IpAddr,
    /// The backends' network, routed out of the inside port.
    backend_net: (IpAddr, u8),
    /// Backend `i`'s address.
    backend: fn(u8) -> IpAddr,
    /// Client `i`'s address (its port is [`client_port`]).
    client: fn(u32) -> IpAddr,
}

/// The families the demo runs, in order.
const FAMILIES: [FamilyPlan; 2] = [
    FamilyPlan {
        label: "IPv4",
        web: "web",
        dns: "dns",
        vip: IpAddr::V4(Ipv4Addr::new(203, 0, 113, 10)),
        node: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        snat: IpAddr::V4(SNAT4),
        backend_net: (IpAddr::V4(Ipv4Addr::new(10, 1, 0, 0)), 24),
        backend: |i| IpAddr::V4(Ipv4Addr::new(10, 1, 0, 10 + i)),
        client: |i| IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1 + (i % 200) as u8)),
    },
    FamilyPlan {
        label: "IPv6",
        web: "web6",
        dns: "dns6",
        vip: IpAddr::V6(VIP6),
        node: IpAddr::V6(NODE_ADDR6),
        snat: IpAddr::V6(SNAT_ADDR6),
        backend_net: (IpAddr::V6(Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0)), 64),
        backend: |i| IpAddr::V6(backend_addr6(usize::from(i))),
        client: |i| {
            IpAddr::V6(Ipv6Addr::new(
                0x2001,
                0xdb8,
                0x100,
                0,
                0,
                0,
                0,
                1 + (i % 200) as u16,
            ))
        },
    },
];

/// What the in-memory demo pushes through the pipeline.
#[derive(Clone, Copy, Debug)]
pub struct MemDemoArgs {
    /// TCP connections to open per family (half to the VIP, half to the
    /// NodePort).
    pub connections: u32,
    /// UDP queries to send to each family's VIP.
    pub queries: u32,
    /// Backends behind each service, 1..=200.
    pub backends: u8,
}

/// Client `i`'s source port (200 clients, then the next port).
fn client_port(i: u32) -> u16 {
    20_000 + (i / 200) as u16
}

fn last_octet(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(a) => a.octets()[3],
        IpAddr::V6(a) => a.octets()[15],
    }
}

/// The MAC of the backend at `ip`: one per backend host, the same for its
/// addresses of both families.
fn backend_mac(plan: &FamilyPlan, ip: IpAddr) -> MacAddr {
    let index = last_octet(ip).wrapping_sub(last_octet((plan.backend)(0)));
    MacAddr([0x02, 0xbb, 0, 0, 0, index])
}

fn spec(backends: u8) -> SnapshotSpec {
    let port = |mac: MacAddr| PortSpec {
        mac: mac.0,
        mtu: 1500,
        mss_clamp: None,
    };
    let mut spec = SnapshotSpec {
        ports: vec![port(OUT_MAC), port(IN_MAC)],
        vip_port: OUTSIDE,
        addresses: Vec::new(),
        routes: Vec::new(),
        neighbours: Vec::new(),
        services: Vec::new(),
        maglev_table_size: dataplane::maglev::DEFAULT_TABLE_SIZE,
    };
    for plan in &FAMILIES {
        let mut web = ServiceSpec::new(plan.web, Proto::Tcp, plan.vip, 80);
        web.listeners
            .push((plan.node, NODE_PORT, ListenerKind::NodePort));
        let mut dns = ServiceSpec::new(plan.dns, Proto::Udp, plan.vip, 53);
        for b in 0..backends {
            let ip = (plan.backend)(b);
            web = web.endpoint(SocketAddr::new(ip, 8080));
            dns = dns.endpoint(SocketAddr::new(ip, 5353));
            spec.neighbours.push(NeighbourSpec {
                addr: ip,
                mac: backend_mac(plan, ip).0,
            });
        }
        spec.services.extend([web, dns]);
        spec.addresses.extend([
            (plan.node, OUTSIDE, AddrRole::Node),
            (plan.snat, INSIDE, AddrRole::Snat),
        ]);
        spec.routes.push(Route {
            dest: plan.backend_net.0,
            prefix_len: plan.backend_net.1,
            port: INSIDE,
            via: None,
        });
    }
    spec
}

/// The transport part of a built frame.
#[derive(Clone, Copy)]
enum Segment {
    /// `(flags, seq, ack)`.
    Tcp(u8, u32, u32),
    Udp,
}

/// An Ethernet frame from `src` to `dst` (one family) carrying `seg`
/// with `payload`.
fn frame(
    (src_mac, dst_mac): (MacAddr, MacAddr),
    (src, dst): (SocketAddr, SocketAddr),
    seg: Segment,
    payload: &[u8],
) -> anyhow::Result<Vec<u8>> {
    Ok(match (src, dst, seg) {
        (SocketAddr::V4(s), SocketAddr::V4(d), Segment::Tcp(flags, seq, ack)) => {
            build::eth_ipv4_tcp(
                src_mac,
                dst_mac,
                *s.ip(),
                s.port(),
                *d.ip(),
                d.port(),
                flags,
                seq,
                ack,
                payload,
            )
        }
        (SocketAddr::V4(s), SocketAddr::V4(d), Segment::Udp) => build::eth_ipv4_udp(
            src_mac,
            dst_mac,
            *s.ip(),
            s.port(),
            *d.ip(),
            d.port(),
            payload,
        ),
        (SocketAddr::V6(s), SocketAddr::V6(d), Segment::Tcp(flags, seq, ack)) => {
            build::eth_ipv6_tcp(
                src_mac,
                dst_mac,
                (*s.ip(), s.port()),
                (*d.ip(), d.port()),
                flags,
                seq,
                ack,
                payload,
            )
        }
        (SocketAddr::V6(s), SocketAddr::V6(d), Segment::Udp) => build::eth_ipv6_udp(
            src_mac,
            dst_mac,
            (*s.ip(), s.port()),
            (*d.ip(), d.port()),
            payload,
        ),
        _ => bail!("a frame from {src} to {dst}: the two ends of a flow are one family"),
    })
}

struct Demo {
    worker: Worker<MemDriver, MonotonicClock>,
    shared: Arc<SharedCounters>,
    busy: Duration,
    packets: u64,
}

/// ARP and NDP: the gateway's own announcements (gratuitous ARP, the
/// unsolicited neighbour advertisements of its IPv6 addresses at start),
/// not part of an exchange.
fn is_neighbour_discovery(frame: &[u8], port: u8) -> bool {
    matches!(
        parse_frame(
            frame,
            port,
            false,
            &dataplane::flow::TableHasher::from_seed(0)
        )
        .map(|m| m.kind),
        Ok(PacketKind::Arp | PacketKind::Ndp)
    )
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
            out.extend(
                self.worker
                    .driver_mut()
                    .take_tx(out_port)
                    .into_iter()
                    .filter(|f| !is_neighbour_discovery(f, out_port)),
            );
        }
        Ok(out)
    }

    /// One family's traffic: TCP connections half to the VIP and half to
    /// the NodePort, then UDP queries to the VIP.
    fn family(&mut self, plan: &FamilyPlan, args: &MemDemoArgs) -> anyhow::Result<Delivered> {
        let mut delivered = Delivered::default();
        let target = |i: u32| {
            if i.is_multiple_of(2) {
                SocketAddr::new(plan.vip, 80)
            } else {
                SocketAddr::new(plan.node, NODE_PORT)
            }
        };
        let client = |i: u32| SocketAddr::new((plan.client)(i), client_port(i));
        let client_seg = |i: u32, tcp: (u8, u32, u32), payload: &[u8]| {
            frame(
                (ROUTER_MAC, OUT_MAC),
                (client(i), target(i)),
                Segment::Tcp(tcp.0, tcp.1, tcp.2),
                payload,
            )
        };
        // One connection's sequence numbers: the client's ISN 1, the
        // backend's 1000, the request and response below.
        const REQUEST: &[u8] = b"GET / HTTP/1.1\r\n\r\n";
        const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\n\r\n";
        let (client_isn, backend_isn) = (1u32, 1000u32);
        let request_end = client_isn + 1 + REQUEST.len() as u32;
        let response_end = backend_isn + 1 + RESPONSE.len() as u32 + 1;
        let ids: Vec<u32> = (0..args.connections).collect();
        let segments = |tcp: (u8, u32, u32), payload: &[u8]| -> anyhow::Result<Vec<_>> {
            ids.iter().map(|&i| client_seg(i, tcp, payload)).collect()
        };
        let at_backends =
            self.exchange(OUTSIDE, &segments((F::SYN, client_isn, 0), b"")?, INSIDE)?;
        let synacks = backends_answer(
            plan,
            &at_backends,
            Segment::Tcp(F::SYN | F::ACK, backend_isn, client_isn + 1),
            b"",
            &mut delivered.web_hits,
        )?;
        let at_clients = self.exchange(INSIDE, &synacks, OUTSIDE)?;
        for f in &at_clients {
            let k = key_of(f, OUTSIDE)?;
            ensure!(
                k.src_ip == plan.vip || k.src_ip == plan.node,
                "client got a reply from {}",
                k.src_ip
            );
        }
        delivered.opened = at_clients.len();
        let requests = segments((F::ACK | F::PSH, client_isn + 1, backend_isn + 1), REQUEST)?;
        let at_backends = self.exchange(OUTSIDE, &requests, INSIDE)?;
        let responses = backends_answer(
            plan,
            &at_backends,
            Segment::Tcp(F::ACK | F::PSH | F::FIN, backend_isn + 1, request_end),
            RESPONSE,
            &mut BTreeMap::new(),
        )?;
        delivered.responses = self.exchange(INSIDE, &responses, OUTSIDE)?.len();
        let closes = segments((F::ACK | F::FIN, request_end, response_end), b"")?;
        let at_backends = self.exchange(OUTSIDE, &closes, INSIDE)?;
        let last_acks = backends_answer(
            plan,
            &at_backends,
            Segment::Tcp(F::ACK, response_end, request_end + 1),
            b"",
            &mut BTreeMap::new(),
        )?;
        self.exchange(INSIDE, &last_acks, OUTSIDE)?;

        let queries = (0..args.queries)
            .map(|i| {
                frame(
                    (ROUTER_MAC, OUT_MAC),
                    (client(i + 1_000_000), SocketAddr::new(plan.vip, 53)),
                    Segment::Udp,
                    b"\x12\x34 query",
                )
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let at_backends = self.exchange(OUTSIDE, &queries, INSIDE)?;
        let answers = backends_answer(
            plan,
            &at_backends,
            Segment::Udp,
            b"\x12\x34 answer",
            &mut delivered.dns_hits,
        )?;
        delivered.answers = self.exchange(INSIDE, &answers, OUTSIDE)?.len();
        Ok(delivered)
    }
}

/// What one family's clients got back, and which backends served them.
#[derive(Default)]
struct Delivered {
    /// Handshakes answered (SYN-ACKs at the clients).
    opened: usize,
    responses: usize,
    answers: usize,
    web_hits: BTreeMap<IpAddr, u32>,
    dns_hits: BTreeMap<IpAddr, u32>,
}

/// The 5-tuple of a frame the gateway sent, either family.
fn key_of(frame: &[u8], port: u8) -> anyhow::Result<FlowKeyOf<IpAddr>> {
    let meta = parse_frame(
        frame,
        port,
        false,
        &dataplane::flow::TableHasher::from_seed(0),
    )
    .map_err(|r| anyhow::anyhow!("gateway emitted a frame the parser rejects: {r}"))?;
    Ok(match meta.family {
        Family::V4 => any_key(&meta.key),
        Family::V6 => any_key(&meta.key6),
    })
}

/// The backends' side: answer each delivered packet with `seg` (for TCP
/// the numbers of a real exchange: the gateway tracks the windows) and
/// `payload`, counting the packets per backend in `hits`.
fn backends_answer(
    plan: &FamilyPlan,
    delivered: &[Vec<u8>],
    seg: Segment,
    payload: &[u8],
    hits: &mut BTreeMap<IpAddr, u32>,
) -> anyhow::Result<Vec<Vec<u8>>> {
    delivered
        .iter()
        .map(|f| {
            let k = key_of(f, INSIDE)?;
            ensure!(
                k.src_ip == plan.snat,
                "backend saw source {} instead of the SNAT address {}",
                k.src_ip,
                plan.snat
            );
            *hits.entry(k.dst_ip).or_default() += 1;
            frame(
                (backend_mac(plan, k.dst_ip), IN_MAC),
                (
                    SocketAddr::new(k.dst_ip, k.dst_port),
                    SocketAddr::new(k.src_ip, k.src_port),
                ),
                seg,
                payload,
            )
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
    let clock = MonotonicClock::new();
    let worker = Worker::new(
        &WorkerConfig {
            pipeline: PipelineConfig {
                worker: 0,
                workers: 1,
                conntrack: ConntrackConfig::with_capacity(1 << 16),
                // The IPv6 SNAT addresses come from the snapshot, when the
                // worker sets up its IPv6 tables for the first IPv6 listener.
                snat: SnatConfig {
                    addrs: vec![SNAT4],
                    ..SnatConfig::default()
                },
                affinity_capacity: 4096,
                seed: 7,
                table_hasher: dataplane::flow::TableHasher::from_seed(7),
                new_flows_per_source_per_s: 0,
                source_prefix_len_v6: 64,
            },
            batch_size: 64,
            idle: IdlePolicy::ADAPTIVE,
        },
        MemDriver::new(MemConfig {
            ports: 2,
            pool_frames: 4096,
            ring_frames: 2048,
        }),
        clock.clone(),
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
    for plan in &FAMILIES {
        println!(
            "  {}: VIP {} tcp/80 ({}) and udp/53 ({}), NodePort {} -> {}, SNAT {}",
            plan.label,
            plan.vip,
            plan.web,
            plan.dns,
            SocketAddr::new(plan.node, NODE_PORT),
            plan.web,
            plan.snat
        );
        println!(
            "        {} backends: {}..{}",
            args.backends,
            (plan.backend)(0),
            (plan.backend)(args.backends - 1)
        );
    }

    let mut lost = false;
    for plan in &FAMILIES {
        let d = demo.family(plan, args)?;
        println!();
        println!(
            "{} TCP connections: {} opened, {} responses delivered to clients",
            plan.label, d.opened, d.responses
        );
        print_distribution(&format!("{} (tcp/80 + NodePort)", plan.web), &d.web_hits);
        println!(
            "{} UDP queries: {} sent, {} answers delivered to clients",
            plan.label, args.queries, d.answers
        );
        print_distribution(&format!("{} (udp/53)", plan.dns), &d.dns_hits);
        lost |= d.opened as u32 != args.connections
            || d.responses as u32 != args.connections
            || d.answers as u32 != args.queries;
    }

    let now_ms = clock.now_ms();
    let snapshot = publisher.current();
    let pipeline = demo.worker.pipeline();
    println!();
    println!("flows (as `portico flows` lists them: the first of each service, per family):");
    print_flows(
        &snapshot,
        "IPv4",
        pipeline.conntrack().iter().map(|(_, f)| f),
        now_ms,
    );
    match pipeline.ipv6() {
        Some(v6) => print_flows(&snapshot, "IPv6", v6.ct.iter().map(|(_, f)| f), now_ms),
        None => bail!("the worker set up no IPv6 tables for the IPv6 services"),
    }

    demo.worker.publish_counters();
    let (c, g) = demo.shared.read();
    println!();
    println!(
        "pipeline: {} packets, {:.0} ns/packet on one core (mem driver, debug={}), {:.2} Mpps",
        demo.packets,
        demo.busy.as_nanos() as f64 / demo.packets.max(1) as f64,
        cfg!(debug_assertions),
        demo.packets as f64 / demo.busy.as_secs_f64().max(1e-9) / 1e6
    );
    println!(
        "counters: rx {} tx {} flows created {} live {} (IPv6 {}; TIME_WAIT after close) \
         snat tuples in use {} (IPv6 {})",
        c.rx_packets,
        c.tx_packets,
        c.flows_created,
        g.live_flows,
        g.live_flows_v6,
        g.snat_in_use,
        g.snat_in_use_v6
    );
    for r in DropReason::ALL {
        if c.dropped(*r) > 0 {
            println!("  drop {:<24} {}", r.name(), c.dropped(*r));
        }
    }
    if c.total_drops() == 0 {
        println!("  no drops");
    }
    if lost {
        bail!("some traffic was lost (see the counters above)");
    }
    Ok(())
}

/// `label`'s live flows by state, and the first [`LISTED_PER_SERVICE`]
/// of each service as `portico flows` prints them.
fn print_flows<'a, A: IpFamily>(
    snapshot: &Snapshot,
    label: &str,
    flows: impl Iterator<Item = &'a Flow<A>>,
    now_ms: u64,
) {
    let mut by_state = BTreeMap::<&str, u32>::new();
    let mut listed = BTreeMap::<_, Vec<String>>::new();
    for flow in flows {
        *by_state.entry(flow.state().name()).or_default() += 1;
        let rows = listed.entry(flow.service).or_default();
        if rows.len() < LISTED_PER_SERVICE {
            rows.push(flow_row(snapshot, &FlowEntry::of(flow, 0, now_ms)).to_string());
        }
    }
    let states: Vec<String> = by_state.iter().map(|(s, n)| format!("{s} {n}")).collect();
    println!(
        "  {label}: {} live ({})",
        by_state.values().sum::<u32>(),
        states.join(", ")
    );
    for row in listed.values().flatten() {
        println!("    {row}");
    }
}

fn print_distribution(name: &str, hits: &BTreeMap<IpAddr, u32>) {
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
