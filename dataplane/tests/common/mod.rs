//! Shared fixture of the pipeline tests: a two-port gateway on the mem
//! driver with a manual clock.
//!
//! ```text
//! client 198.51.100.7 -- router (ROUTER_MAC) -- port 0 [gateway] port 1 -- 10.1.0.0/24 backends
//! VIP 203.0.113.10 (tcp 80 "web", udp 53 "dns"), externalIP 203.0.113.20:443 -> web,
//! node address 192.0.2.1 (NodePort 30080 -> web), SNAT 10.1.0.1 on port 1.
//! ```
#![allow(dead_code)]

use dataplane::clock::ManualClock;
use dataplane::conntrack::{ConntrackConfig, Timeouts, default_syn_proxy_flows};
use dataplane::counters::SharedCounters;
use dataplane::driver::mem::{MemConfig, MemDriver};
use dataplane::flow::Proto;
use dataplane::packet::Verdict;
use dataplane::snapshot::{
    AddrRole, EndpointCondition, EndpointSpec, ListenerKind, NeighbourSpec, PortSpec, Publisher,
    Route, ServiceSpec, SnapshotBuilder, SnapshotSpec,
};
use dataplane::snat::SnatConfig;
use dataplane::stage::PipelineConfig;
use dataplane::wire::{MacAddr, checksum, ipv4};
use dataplane::worker::{IdlePolicy, Worker, WorkerConfig};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

pub mod handshake;
pub mod ipv6;

pub const OUTSIDE: u8 = 0;
pub const INSIDE: u8 = 1;
pub const OUT_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
pub const IN_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x02]);
pub const ROUTER_MAC: MacAddr = MacAddr([0x02, 0xaa, 0, 0, 0, 0x01]);
pub const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
pub const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
pub const EXTERNAL_IP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 20);
pub const NODE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const SNAT: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
pub const NODE_PORT: u16 = 30080;
/// The client's source port in single-flow tests.
pub const CPORT: u16 = 40_000;

pub fn backend_ip(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 1, 0, 10 + i)
}

pub fn backend_mac(ip: Ipv4Addr) -> MacAddr {
    MacAddr([0x02, 0xbb, 0, 0, 0, ip.octets()[3]])
}

pub fn web(backends: &[u8]) -> ServiceSpec {
    let mut s = ServiceSpec::new("web", Proto::Tcp, VIP, 80);
    s.listeners
        .push((NODE.into(), NODE_PORT, ListenerKind::NodePort));
    s.listeners
        .push((EXTERNAL_IP.into(), 443, ListenerKind::ExternalIp));
    for &b in backends {
        s = s.endpoint(SocketAddrV4::new(backend_ip(b), 8080));
    }
    s
}

pub fn dns(backends: &[u8]) -> ServiceSpec {
    let mut s = ServiceSpec::new("dns", Proto::Udp, VIP, 53);
    for &b in backends {
        s = s.endpoint(SocketAddrV4::new(backend_ip(b), 5353));
    }
    s
}

pub fn terminating(mut s: ServiceSpec, which: &[usize]) -> ServiceSpec {
    for &i in which {
        s.endpoints[i] = EndpointSpec {
            condition: EndpointCondition::ServingTerminating,
            ..s.endpoints[i]
        };
    }
    s
}

pub fn spec(services: Vec<ServiceSpec>) -> SnapshotSpec {
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
        neighbours: (0..20)
            .map(|i| NeighbourSpec {
                addr: backend_ip(i).into(),
                mac: backend_mac(backend_ip(i)).0,
            })
            .collect(),
        services,
        maglev_table_size: 251,
    }
}

pub fn pipeline_config(worker: u8, workers: u8) -> PipelineConfig {
    PipelineConfig {
        worker,
        workers,
        conntrack: ConntrackConfig {
            capacity: 1024,
            timeouts: Timeouts::default(),
            expiry_scan_per_poll: 64,
            early_drop_scan: 64,
            syn_proxy_flows: default_syn_proxy_flows(1024),
        },
        snat: SnatConfig {
            addrs: vec![SNAT],
            ..SnatConfig::default()
        },
        affinity_capacity: 1024,
        seed: 0x5eed + u64::from(worker),
        table_hasher: dataplane::flow::TableHasher::from_seed(0x5eed),
        new_flows_per_source_per_s: 0,
        source_prefix_len_v6: 64,
    }
}

pub struct Gateway {
    /// Frames the gateway sent at start (gratuitous ARPs), per port.
    pub announcements: Vec<(u8, Vec<u8>)>,
    pub worker: Worker<MemDriver, ManualClock>,
    pub clock: ManualClock,
    pub builder: SnapshotBuilder,
    pub publisher: Publisher,
    pub shared: Arc<SharedCounters>,
}

impl Gateway {
    pub fn new(services: Vec<ServiceSpec>) -> Self {
        Self::with_config(services, pipeline_config(0, 1))
    }

    pub fn with_config(services: Vec<ServiceSpec>, pipeline: PipelineConfig) -> Self {
        Self::with_spec(spec(services), pipeline)
    }

    pub fn with_spec(spec: SnapshotSpec, pipeline: PipelineConfig) -> Self {
        Self::with_neighbours(
            spec,
            pipeline,
            Arc::new(dataplane::neighbour::NeighbourTable::new(Default::default())),
        )
    }

    /// A gateway whose worker uses `neighbours` (the test keeps a handle to
    /// collect its garbage).
    pub fn with_neighbours(
        spec: SnapshotSpec,
        pipeline: PipelineConfig,
        neighbours: Arc<dataplane::neighbour::NeighbourTable>,
    ) -> Self {
        let mut builder = SnapshotBuilder::new();
        let snapshot = builder.build(&spec).expect("valid fixture spec");
        Self::with_snapshot(builder, snapshot, pipeline, neighbours)
    }

    /// A gateway starting on `snapshot` (made by `builder`, and perhaps
    /// changed by the test).
    pub fn with_snapshot(
        builder: SnapshotBuilder,
        snapshot: dataplane::snapshot::Snapshot,
        pipeline: PipelineConfig,
        neighbours: Arc<dataplane::neighbour::NeighbourTable>,
    ) -> Self {
        let publisher = Publisher::new(snapshot);
        let clock = ManualClock::new(1_000);
        let shared = Arc::new(SharedCounters::default());
        let worker = Worker::new(
            &WorkerConfig {
                pipeline,
                batch_size: 64,
                idle: IdlePolicy::ADAPTIVE,
            },
            MemDriver::new(MemConfig::default()),
            clock.clone(),
            publisher.reader(),
            Arc::clone(&shared),
            None,
            neighbours,
        )
        .expect("valid pipeline config");
        let mut gw = Gateway {
            announcements: Vec::new(),
            worker,
            clock,
            builder,
            publisher,
            shared,
        };
        gw.worker.poll();
        for p in [OUTSIDE, INSIDE] {
            for f in gw.worker.driver_mut().take_tx(p) {
                gw.announcements.push((p, f));
            }
        }
        gw
    }

    /// Publish a new snapshot with these services.
    pub fn swap(&mut self, services: Vec<ServiceSpec>) {
        self.swap_spec(&spec(services));
    }

    /// Publish a new snapshot of `spec`.
    pub fn swap_spec(&mut self, spec: &SnapshotSpec) {
        let s = self.builder.build(spec).expect("valid spec");
        self.publisher.publish(s);
    }

    /// Inject one frame, poll once, return the verdict and every frame sent
    /// (port, bytes).
    pub fn send(&mut self, port: u8, frame: &[u8]) -> (Verdict, Vec<(u8, Vec<u8>)>) {
        self.worker
            .driver_mut()
            .inject(port, frame)
            .expect("inject");
        self.worker.poll();
        let verdict = self.worker.pipeline().metas()[0].verdict;
        let mut out = Vec::new();
        for p in [OUTSIDE, INSIDE] {
            for f in self.worker.driver_mut().take_tx(p) {
                out.push((p, f));
            }
        }
        (verdict, out)
    }

    pub fn counters(&self) -> dataplane::counters::Counters {
        self.worker.pipeline().counters().clone()
    }
}

/// A TCP segment from the backend of a flow whose reply key is `r` (to
/// the gateway's SNAT tuple), as the backend sends it; either family.
pub fn from_backend_tcp<A: dataplane::flow::IpFamily + Into<std::net::IpAddr>>(
    r: &dataplane::flow::FlowKeyOf<A>,
    flags: u8,
    seq: u32,
    ack: u32,
    payload: &[u8],
) -> Vec<u8> {
    use dataplane::wire::build;
    use std::net::IpAddr;
    match (r.src_ip.into(), r.dst_ip.into()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => build::eth_ipv4_tcp(
            backend_mac(s),
            IN_MAC,
            s,
            r.src_port,
            d,
            r.dst_port,
            flags,
            seq,
            ack,
            payload,
        ),
        (IpAddr::V6(s), IpAddr::V6(d)) => build::eth_ipv6_tcp(
            ipv6::backend6_mac_of(s),
            IN_MAC,
            (s, r.src_port),
            (d, r.dst_port),
            flags,
            seq,
            ack,
            payload,
        ),
        _ => unreachable!("a flow key is of one family"),
    }
}

/// `frame` with its IPv4 TTL set (and the header checksum recomputed from
/// scratch): expected frames are built independently of the dataplane's
/// incremental updates.
pub fn with_ttl(mut frame: Vec<u8>, ttl: u8) -> Vec<u8> {
    let mut ip = ipv4::Packet::new_unchecked(&mut frame[14..]);
    ip.set_ttl(ttl);
    ip.fill_checksum();
    frame
}

/// Verify IPv4 and L4 checksums of an Ethernet/IPv4 frame from scratch.
pub fn checksums_valid(frame: &[u8]) -> bool {
    let ip = ipv4::Packet::new_unchecked(&frame[14..]);
    if !ip.verify_checksum() {
        return false;
    }
    let hl = ip.header_len();
    let total = usize::from(ip.total_len());
    let seg = &frame[14 + hl..14 + total];
    match ip.protocol() {
        6 | 17 => {
            if ip.protocol() == 17 && seg[6] == 0 && seg[7] == 0 {
                return true;
            }
            checksum::verify_l4(ip.src_addr(), ip.dst_addr(), ip.protocol(), seg)
        }
        1 => checksum::checksum(seg) == 0,
        _ => true,
    }
}

impl Gateway {
    pub fn clock_now(&self) -> u64 {
        use dataplane::clock::Clock;
        self.clock.now_ms()
    }
}

impl Gateway {
    /// Inject several frames on one port, poll once (one batch), return the
    /// verdicts in order and every frame sent.
    pub fn send_batch(
        &mut self,
        port: u8,
        frames: &[Vec<u8>],
    ) -> (Vec<Verdict>, Vec<(u8, Vec<u8>)>) {
        for f in frames {
            self.worker.driver_mut().inject(port, f).expect("inject");
        }
        self.worker.poll();
        let verdicts = self.worker.pipeline().metas()[..frames.len()]
            .iter()
            .map(|m| m.verdict)
            .collect();
        let mut out = Vec::new();
        for p in [OUTSIDE, INSIDE] {
            for f in self.worker.driver_mut().take_tx(p) {
                out.push((p, f));
            }
        }
        (verdicts, out)
    }

    /// The tracked flow of a client tuple, if any.
    pub fn flow(
        &self,
        proto: dataplane::flow::Proto,
        client: Ipv4Addr,
        sport: u16,
        dst: Ipv4Addr,
        dport: u16,
    ) -> Option<dataplane::conntrack::Flow> {
        let key = dataplane::flow::FlowKey::new(proto, client, sport, dst, dport);
        let ct = self.worker.pipeline().conntrack();
        ct.lookup(&key, ct.hash(&key)).map(|(id, _)| *ct.flow(id))
    }

    /// SNAT tuples in use must equal live flows that hold one.
    pub fn assert_snat_accounting(&self) {
        let p = self.worker.pipeline();
        let live_snat = p.conntrack().iter().filter(|(_, f)| f.snat()).count() as u64;
        assert_eq!(
            p.snat().stats().in_use,
            live_snat,
            "SNAT tuples leaked or double-released"
        );
    }
}

/// A TCP segment with options (checksum field 0), for either family.
pub fn tcp_segment(
    (sport, dport): (u16, u16),
    flags: u8,
    (seq, ack): (u32, u32),
    window: u16,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0);
    let mut seg = vec![0u8; 20 + options.len()];
    seg[0..2].copy_from_slice(&sport.to_be_bytes());
    seg[2..4].copy_from_slice(&dport.to_be_bytes());
    seg[4..8].copy_from_slice(&seq.to_be_bytes());
    seg[8..12].copy_from_slice(&ack.to_be_bytes());
    seg[12] = (((20 + options.len()) / 4) << 4) as u8;
    seg[13] = flags;
    seg[14..16].copy_from_slice(&window.to_be_bytes());
    seg[20..].copy_from_slice(options);
    seg.extend_from_slice(payload);
    seg
}

/// A TCP frame built from scratch with options, window and TTL.
#[allow(clippy::too_many_arguments)]
pub fn tcp(
    macs: (MacAddr, MacAddr),
    (src, sport): (Ipv4Addr, u16),
    (dst, dport): (Ipv4Addr, u16),
    flags: u8,
    seq: u32,
    ack: u32,
    window: u16,
    options: &[u8],
    payload: &[u8],
    ttl: u8,
) -> Vec<u8> {
    let mut seg = tcp_segment((sport, dport), flags, (seq, ack), window, options, payload);
    let csum = checksum::l4_checksum(src, dst, 6, &seg);
    seg[16..18].copy_from_slice(&csum.to_be_bytes());
    let mut ip = dataplane::wire::build::ipv4_packet(src, dst, 6, &seg);
    let mut h = ipv4::Packet::new_unchecked(&mut ip[..]);
    h.set_ttl(ttl);
    h.fill_checksum();
    dataplane::wire::build::ethernet_frame(
        macs.0,
        macs.1,
        dataplane::wire::ethernet::ethertype::IPV4,
        &ip,
    )
}

/// A TCP segment from the client (port [`CPORT`]) to the VIP's port 80,
/// with options, TTL 64.
pub fn from_client(
    flags: u8,
    seq: u32,
    ack: u32,
    window: u16,
    opts: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    tcp(
        (ROUTER_MAC, OUT_MAC),
        (CLIENT, CPORT),
        (VIP, 80),
        flags,
        seq,
        ack,
        window,
        opts,
        payload,
        64,
    )
}

/// The sequence number of an untagged Ethernet/IPv4 (no options)/TCP frame.
pub fn seq_of(frame: &[u8]) -> u32 {
    u32::from_be_bytes(frame[38..42].try_into().unwrap())
}

/// [`web`] with backend 0 only and the SYN proxy in `mode`.
pub fn proxied_web(mode: dataplane::snapshot::SynProxyMode) -> ServiceSpec {
    let mut s = web(&[0]);
    s.syn_proxy = mode;
    s
}

/// A TCP segment the gateway sends to the backend of the flow whose reply
/// key is `r` (from its SNAT tuple, TTL one lower than the client's 64).
pub fn to_backend(
    r: &dataplane::flow::FlowKey,
    flags: u8,
    seq: u32,
    ack: u32,
    window: u16,
    opts: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    tcp(
        (IN_MAC, backend_mac(r.src_ip)),
        (r.dst_ip, r.dst_port),
        (r.src_ip, r.src_port),
        flags,
        seq,
        ack,
        window,
        opts,
        payload,
        63,
    )
}

/// A TCP segment with options from the backend of the flow whose reply key
/// is `r`, TTL 64.
pub fn from_backend(
    r: &dataplane::flow::FlowKey,
    flags: u8,
    seq: u32,
    ack: u32,
    window: u16,
    opts: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    tcp(
        (backend_mac(r.src_ip), IN_MAC),
        (r.src_ip, r.src_port),
        (r.dst_ip, r.dst_port),
        flags,
        seq,
        ack,
        window,
        opts,
        payload,
        64,
    )
}

/// A TCP segment the gateway sends to the client (from the VIP's port 80
/// to [`CPORT`]) with TTL `ttl`.
#[allow(clippy::too_many_arguments)]
pub fn to_client(
    flags: u8,
    seq: u32,
    ack: u32,
    window: u16,
    opts: &[u8],
    payload: &[u8],
    ttl: u8,
) -> Vec<u8> {
    tcp(
        (OUT_MAC, ROUTER_MAC),
        (VIP, 80),
        (CLIENT, CPORT),
        flags,
        seq,
        ack,
        window,
        opts,
        payload,
        ttl,
    )
}

/// The fixture topology without a static neighbour for backend 5.
pub fn gateway_without_neighbour_5() -> Gateway {
    let mut s = spec(vec![web(&[5])]);
    s.neighbours.retain(|n| n.addr != backend_ip(5));
    Gateway::with_spec(s, pipeline_config(0, 1))
}

/// A SYN (sequence number 1) from the client's port `sport` to the VIP's
/// port 80.
pub fn syn(sport: u16) -> Vec<u8> {
    dataplane::wire::build::eth_ipv4_tcp(
        ROUTER_MAC,
        OUT_MAC,
        CLIENT,
        sport,
        VIP,
        80,
        dataplane::wire::tcp::flags::SYN,
        1,
        0,
        b"",
    )
}

/// The namespaces of the af_packet tests (removed on drop):
///
/// ```text
/// [client] cl --veth-- go [gateway] gi --veth-- be [backend]
/// ```
///
/// `cl` has `ROUTER_MAC`, the gateway's ends the fixture's port MACs,
/// `be` the MAC given.
pub struct Topology {
    pub client: portico_netns::Netns,
    pub gateway: portico_netns::Netns,
    pub backend: portico_netns::Netns,
}

impl Topology {
    /// Create the namespaces (names from `prefix`) and the veths, with
    /// IPv6 disabled in the namespaces `ipv6_off` says (client, gateway,
    /// backend).
    pub fn new(prefix: &str, backend_mac: [u8; 6], ipv6_off: [bool; 3]) -> Self {
        use portico_netns::{Netns, Veth};
        let ns = |role: &str| Netns::new(&format!("{prefix}{role}")).expect("namespace");
        let t = Topology {
            client: ns("c"),
            gateway: ns("g"),
            backend: ns("b"),
        };
        for (ns, off) in [&t.client, &t.gateway, &t.backend]
            .into_iter()
            .zip(ipv6_off)
        {
            if off {
                ns.exec(
                    "sysctl",
                    &[
                        "-qw",
                        "net.ipv6.conf.all.disable_ipv6=1",
                        "net.ipv6.conf.default.disable_ipv6=1",
                    ],
                )
                .expect("sysctl disable_ipv6");
            }
        }
        Veth::new(&t.client, "cl", &t.gateway, "go")
            .macs(ROUTER_MAC.0, OUT_MAC.0)
            .create()
            .expect("client veth");
        Veth::new(&t.gateway, "gi", &t.backend, "be")
            .macs(IN_MAC.0, backend_mac)
            .create()
            .expect("backend veth");
        t
    }
}
