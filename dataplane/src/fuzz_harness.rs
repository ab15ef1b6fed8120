//! The stateful fuzz harness (issue 15): a byte string decoded into a
//! sequence of frames and events driven through a whole worker — parse,
//! conntrack, SNAT, NAT, neighbours, expiry — on a small gateway (the mem
//! driver, a manual clock, 16 flows, 32 SNAT ports), with the invariants
//! checked after every step.
//!
//! Used by the libFuzzer target `dataplane/fuzz/fuzz_targets/pipeline_sequence.rs`
//! and by the stable, time-bounded run in CI (`dataplane/tests/fuzz_pipeline.rs`,
//! which also replays the committed seeds). Not on any packet path.
//!
//! Invariants checked after every step ([`Violation`] names the first that
//! breaks):
//! * the conntrack table holds at most its capacity;
//! * every live flow is found by its original key (as `Original`) and by
//!   its reply key (as `Reply`) — the index and the slab agree;
//! * SNAT tuples in use equal live flows that hold one (none leaked, none
//!   released twice);
//! * the same for the IPv6 table and IPv6 SNAT allocator;
//! * frames sent carry valid IPv4 headers, or IPv6 packets whose TCP/UDP/
//!   ICMPv6 checksum verifies;
//!
//! and at the end, once everything has expired: no flow, no SNAT tuple and
//! no frame buffer is left.
//!
//! Input encoding: steps of one opcode byte and its operand bytes (missing
//! bytes read as zero); the opcode's low 3 bits choose the step (client TCP
//! segment, client UDP datagram, backend reply to a live flow, ICMP error
//! about a live flow, raw bytes as a frame, time passing, backend set
//! change, ARP). Any byte string is a valid input. IPv6 (issue 17): bit 1
//! of a client segment's destination byte sends it over IPv6 to "web6",
//! and bit 7 of a reply's or ICMP error's flow pick picks a live IPv6
//! flow (an ICMPv6 error then); raw frames reach the IPv6 parser too.

use crate::clock::ManualClock;
use crate::conntrack::{ConntrackConfig, Dir, Timeouts};
use crate::counters::SharedCounters;
use crate::driver::mem::{MemConfig, MemDriver};
use crate::flow::{FlowKey, FlowKeyOf, IpFamily, Proto, TableHasher};
use crate::neighbour::NeighbourTable;
use crate::snapshot::{
    AddrRole, ListenerKind, NeighbourSpec, PortSpec, Publisher, Route, ServiceSpec,
    SnapshotBuilder, SnapshotSpec,
};
use crate::snat::SnatConfig;
use crate::stage::PipelineConfig;
use crate::wire::{MacAddr, build, checksum, icmpv6, ipv4, ipv6};
use crate::worker::{IdlePolicy, Worker, WorkerConfig};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;

const OUTSIDE: u8 = 0;
const INSIDE: u8 = 1;
const OUT_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
const IN_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x02]);
const ROUTER_MAC: MacAddr = MacAddr([0x02, 0xaa, 0, 0, 0, 0x01]);
const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const NODE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const SNAT: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
const NODE_PORT: u16 = 30080;
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 0x10);
const SNAT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 1);

fn backend6(i: u8) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x10 + u16::from(i))
}
/// Flows the harness's table holds: small, so early drop and exhaustion
/// are reached.
pub const FLOW_CAPACITY: u32 = 16;
/// Steps of one input at most (longer inputs are cut).
pub const MAX_STEPS: usize = 512;

/// The first invariant that broke, with the step it broke at.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("step {step}: {what}")]
pub struct Violation {
    pub step: usize,
    pub what: String,
}

/// What one input did (for the runners' reports).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    pub steps: usize,
    pub frames_sent: u64,
    pub flows_created: u64,
}

fn backend_ip(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 1, 0, 10 + i)
}

fn backend_mac(ip: Ipv4Addr) -> MacAddr {
    MacAddr([0x02, 0xbb, 0, 0, 0, ip.octets()[3]])
}

/// The harness's snapshot: "web" (TCP VIP:80 and NodePort) and "dns" (UDP
/// VIP:53) on the backends whose bit is set in `mask` (of three).
fn spec(mask: u8) -> SnapshotSpec {
    let mut web = ServiceSpec::new("web", Proto::Tcp, VIP, 80);
    web.listeners
        .push((NODE.into(), NODE_PORT, ListenerKind::NodePort));
    let mut dns = ServiceSpec::new("dns", Proto::Udp, VIP, 53);
    let mut web6 = ServiceSpec::new("web6", Proto::Tcp, VIP6, 80);
    for b in (0..3).filter(|b| mask & (1 << b) != 0) {
        web = web.endpoint(SocketAddrV4::new(backend_ip(b), 8080));
        dns = dns.endpoint(SocketAddrV4::new(backend_ip(b), 5353));
        web6 = web6.endpoint(SocketAddr::new(backend6(b).into(), 8080));
    }
    let mut spec = SnapshotSpec {
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
        neighbours: (0..3)
            .map(|i| NeighbourSpec {
                addr: backend_ip(i).into(),
                mac: backend_mac(backend_ip(i)).0,
            })
            .collect(),
        services: vec![web, dns, web6],
        maglev_table_size: 251,
    };
    spec.addresses.push((SNAT6.into(), INSIDE, AddrRole::Snat));
    spec.routes.push(Route {
        dest: Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0).into(),
        prefix_len: 64,
        port: INSIDE,
        via: None,
    });
    spec.neighbours.extend((0..3).map(|i| NeighbourSpec {
        addr: backend6(i).into(),
        mac: backend_mac(backend_ip(i)).0,
    }));
    spec
}

/// A small gateway on the mem driver, fed one input.
pub struct SequenceHarness {
    worker: Worker<MemDriver, ManualClock>,
    clock: ManualClock,
    builder: SnapshotBuilder,
    publisher: Publisher,
    pool_frames: usize,
    /// Why a frame sent since the last check is malformed, if one is.
    bad_frame: Option<String>,
}

/// Reads operand bytes; past the end, zeros.
struct Operands<'a>(&'a [u8]);

impl Operands<'_> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }

    fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }
}

impl std::fmt::Debug for SequenceHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequenceHarness")
            .field("flows", &self.worker.pipeline().conntrack().len())
            .finish_non_exhaustive()
    }
}

impl Default for SequenceHarness {
    fn default() -> Self {
        Self::new()
    }
}

impl SequenceHarness {
    /// The harness's gateway, with every backend up.
    pub fn new() -> Self {
        let mut builder = SnapshotBuilder::new();
        // The harness's own spec is valid: a failure here is a bug the
        // fuzzer should report, so it panics.
        let snapshot = builder.build(&spec(0b111)).expect("harness spec builds");
        let publisher = Publisher::new(snapshot);
        let clock = ManualClock::new(1_000);
        let mem = MemConfig::default();
        let pool_frames = mem.pool_frames;
        let worker = Worker::new(
            &WorkerConfig {
                pipeline: PipelineConfig {
                    worker: 0,
                    workers: 1,
                    conntrack: ConntrackConfig {
                        capacity: FLOW_CAPACITY,
                        timeouts: Timeouts::default(),
                        expiry_scan_per_poll: 64,
                        early_drop_scan: 64,
                    },
                    snat: SnatConfig {
                        addrs: vec![SNAT],
                        port_range: 40_000..=40_031,
                        ..SnatConfig::default()
                    },
                    affinity_capacity: 64,
                    seed: 0x5eed,
                    table_hasher: TableHasher::from_seed(0xf022),
                    new_flows_per_source_per_s: 0,
                    source_prefix_len_v6: 64,
                },
                batch_size: 64,
                idle: IdlePolicy::Adaptive,
            },
            MemDriver::new(mem),
            clock.clone(),
            publisher.reader(),
            Arc::new(SharedCounters::default()),
            None,
            Arc::new(NeighbourTable::new(Default::default())),
        )
        .expect("harness pipeline config is valid");
        let mut harness = SequenceHarness {
            worker,
            clock,
            builder,
            publisher,
            pool_frames,
            bad_frame: None,
        };
        harness.poll_and_drain();
        harness
    }

    /// Run `input`: every step, then the invariants; then expire everything
    /// and check that nothing is left.
    pub fn run(&mut self, input: &[u8]) -> Result<RunStats, Violation> {
        let mut ops = Operands(input);
        let mut stats = RunStats::default();
        while !ops.0.is_empty() && stats.steps < MAX_STEPS {
            let op = ops.byte();
            stats.frames_sent += self.step(op, &mut ops);
            stats.steps += 1;
            self.check(stats.steps)?;
        }
        // Everything expires: nothing may be left.
        self.clock.advance_ms(25 * 3_600_000);
        for _ in 0..(FLOW_CAPACITY as usize * 2) {
            self.poll_and_drain();
        }
        let at_end = |what: String| Violation {
            step: stats.steps,
            what,
        };
        let p = self.worker.pipeline();
        stats.flows_created = p.counters().flows_created;
        if !p.conntrack().is_empty() {
            return Err(at_end(format!(
                "{} flows left after expiry",
                p.conntrack().len()
            )));
        }
        if p.snat().stats().in_use != 0 {
            return Err(at_end(format!(
                "{} SNAT tuples left after expiry",
                p.snat().stats().in_use
            )));
        }
        if let Some(v6) = p.ipv6()
            && (!v6.ct.is_empty() || v6.snat.as_ref().is_some_and(|s| s.stats().in_use != 0))
        {
            return Err(at_end(format!(
                "{} IPv6 flows left after expiry",
                v6.ct.len()
            )));
        }
        let free = self.worker.driver_mut().pool_free();
        if free != self.pool_frames {
            return Err(at_end(format!(
                "{} of {} frame buffers never came back",
                self.pool_frames - free,
                self.pool_frames
            )));
        }
        Ok(stats)
    }

    /// One step; returns the frames the gateway sent.
    fn step(&mut self, op: u8, ops: &mut Operands<'_>) -> u64 {
        match op & 7 {
            0 => {
                let (sport, flags, seq, ack) = (ops.byte() & 15, ops.byte(), ops.u32(), ops.u32());
                let to = ops.byte();
                let (dst, dport) = if to & 1 == 0 {
                    (VIP, 80)
                } else {
                    (NODE, NODE_PORT)
                };
                if to & 2 != 0 {
                    let client6 =
                        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1 + u16::from(sport & 7));
                    let frame = build::eth_ipv6_tcp(
                        ROUTER_MAC,
                        OUT_MAC,
                        (client6, 1_000 + u16::from(sport)),
                        (VIP6, 80),
                        flags,
                        seq,
                        ack,
                        ops.take(8),
                    );
                    return self.send(OUTSIDE, &frame);
                }
                let frame = build::eth_ipv4_tcp(
                    ROUTER_MAC,
                    OUT_MAC,
                    client(sport),
                    1_000 + u16::from(sport),
                    dst,
                    dport,
                    flags,
                    seq,
                    ack,
                    ops.take(8),
                );
                self.send(OUTSIDE, &frame)
            }
            1 => {
                let sport = ops.byte() & 15;
                let frame = build::eth_ipv4_udp(
                    ROUTER_MAC,
                    OUT_MAC,
                    client(sport),
                    2_000 + u16::from(sport),
                    VIP,
                    53,
                    ops.take(8),
                );
                self.send(OUTSIDE, &frame)
            }
            2 => {
                let (pick, flags, seq, ack) = (ops.byte(), ops.byte(), ops.u32(), ops.u32());
                if pick & 0x80 != 0 {
                    let Some(r) = self.live_reply6(pick) else {
                        return 0;
                    };
                    let frame = build::eth_ipv6_tcp(
                        backend_mac(backend_ip(0)),
                        IN_MAC,
                        (r.src_ip, r.src_port),
                        (r.dst_ip, r.dst_port),
                        flags,
                        seq,
                        ack,
                        b"",
                    );
                    return self.send(INSIDE, &frame);
                }
                let Some(reply) = self.live_reply(pick) else {
                    return 0;
                };
                let mac = backend_mac(reply.src_ip);
                let frame = match reply.proto {
                    Proto::Tcp => build::eth_ipv4_tcp(
                        mac,
                        IN_MAC,
                        reply.src_ip,
                        reply.src_port,
                        reply.dst_ip,
                        reply.dst_port,
                        flags,
                        seq,
                        ack,
                        b"",
                    ),
                    _ => build::eth_ipv4_udp(
                        mac,
                        IN_MAC,
                        reply.src_ip,
                        reply.src_port,
                        reply.dst_ip,
                        reply.dst_port,
                        b"a",
                    ),
                };
                self.send(INSIDE, &frame)
            }
            3 => {
                // An ICMP error from a backend about a packet of a live
                // flow (as the gateway sent it), maybe truncated.
                let (pick, icmp_type, cut) = (ops.byte(), ops.byte(), ops.byte());
                if pick & 0x80 != 0 {
                    let Some(r) = self.live_reply6(pick) else {
                        return 0;
                    };
                    let mut l4 = [0u8; 20];
                    l4[..2].copy_from_slice(&r.dst_port.to_be_bytes());
                    l4[2..4].copy_from_slice(&r.src_port.to_be_bytes());
                    let inner = build::ipv6_packet(r.dst_ip, r.src_ip, 6, 63, &l4);
                    let keep = inner.len().saturating_sub(usize::from(cut % 24));
                    let frame = build::eth_ipv6_icmpv6(
                        (backend_mac(backend_ip(0)), IN_MAC),
                        (r.src_ip, r.dst_ip),
                        (1 + icmp_type % 4, icmp_type >> 4, 1280),
                        inner.get(..keep).unwrap_or_default(),
                    );
                    return self.send(INSIDE, &frame);
                }
                let Some(reply) = self.live_reply(pick) else {
                    return 0;
                };
                let inner = build::ipv4_udp(
                    reply.dst_ip,
                    reply.dst_port,
                    reply.src_ip,
                    reply.src_port,
                    b"x",
                );
                let keep = inner.len().saturating_sub(usize::from(cut % 24));
                let types = [3, 11, 12, 5];
                let frame = build::eth_ipv4_icmp_error(
                    backend_mac(reply.src_ip),
                    IN_MAC,
                    reply.src_ip,
                    reply.dst_ip,
                    types[usize::from(icmp_type % 4)],
                    icmp_type >> 4,
                    inner.get(..keep).unwrap_or_default(),
                );
                self.send(INSIDE, &frame)
            }
            4 => {
                let port = ops.byte() & 1;
                let len = usize::from(ops.byte());
                let frame = ops.take(len).to_vec();
                self.send(port, &frame)
            }
            5 => {
                let ms = u64::from(ops.u16()) * u64::from(ops.byte().max(1)) * 10;
                self.clock.advance_ms(ms);
                self.poll_and_drain()
            }
            6 => {
                let mask = ops.byte() & 7;
                if let Ok(snapshot) = self.builder.build(&spec(mask)) {
                    self.publisher.publish(snapshot);
                }
                self.poll_and_drain()
            }
            _ => {
                let frame = if ops.byte() & 1 == 0 {
                    build::arp_request(ROUTER_MAC, client(0), NODE)
                } else {
                    let b = backend_ip(ops.byte() % 3);
                    build::arp_reply(backend_mac(b), b, IN_MAC, SNAT)
                };
                self.send(
                    if frame.len() > 14 && frame[21] == 1 {
                        OUTSIDE
                    } else {
                        INSIDE
                    },
                    &frame,
                )
            }
        }
    }

    /// The reply key of the `pick`-th live flow (in slot order), if any.
    fn live_reply(&self, pick: u8) -> Option<FlowKey> {
        let ct = self.worker.pipeline().conntrack();
        let live = ct.len();
        if live == 0 {
            return None;
        }
        ct.iter()
            .nth(usize::from(pick) % live)
            .map(|(_, f)| *f.reply())
    }

    /// The reply key of the `pick`-th live IPv6 flow, if any.
    fn live_reply6(&self, pick: u8) -> Option<FlowKeyOf<Ipv6Addr>> {
        let ct = &self.worker.pipeline().ipv6()?.ct;
        let live = ct.len();
        if live == 0 {
            return None;
        }
        ct.iter()
            .nth(usize::from(pick & 0x7f) % live)
            .map(|(_, f)| *f.reply())
    }

    fn send(&mut self, port: u8, frame: &[u8]) -> u64 {
        // A frame the mem driver cannot take (too long) is not a packet.
        if self.worker.driver_mut().inject(port, frame).is_err() {
            return 0;
        }
        self.poll_and_drain()
    }

    /// Poll once and take every frame sent, remembering the first that is
    /// malformed (reported by the next check).
    fn poll_and_drain(&mut self) -> u64 {
        self.worker.poll();
        let mut sent = 0;
        for p in [OUTSIDE, INSIDE] {
            for f in self.worker.driver_mut().take_tx(p) {
                sent += 1;
                if self.bad_frame.is_none() {
                    self.bad_frame = malformed_output(&f);
                }
            }
        }
        sent
    }

    fn check(&mut self, step: usize) -> Result<(), Violation> {
        let fail = |what: String| Err(Violation { step, what });
        if let Some(what) = self.bad_frame.take() {
            return fail(what);
        }
        let p = self.worker.pipeline();
        let in_use = p.snat().stats().in_use;
        if let Err(what) = check_table(p.conntrack(), in_use) {
            return fail(what);
        }
        if let Some(v6) = p.ipv6() {
            let in_use = v6.snat.as_ref().map_or(0, |s| s.stats().in_use);
            if let Err(what) = check_table(&v6.ct, in_use) {
                return fail(format!("IPv6: {what}"));
            }
        }
        Ok(())
    }
}

/// A table's invariants: at most its capacity, every live flow found by
/// both keys, `snat_in_use` tuples for the flows holding one.
fn check_table<A: IpFamily>(
    ct: &crate::conntrack::Conntrack<A>,
    snat_in_use: u64,
) -> Result<(), String> {
    if ct.len() > FLOW_CAPACITY as usize {
        return Err(format!("{} flows in a table of {FLOW_CAPACITY}", ct.len()));
    }
    let mut holding_snat = 0u64;
    for (id, flow) in ct.iter() {
        for (key, dir) in [(flow.orig(), Dir::Original), (flow.reply(), Dir::Reply)] {
            if ct.lookup(key, ct.hash(key)) != Some((id, dir)) {
                return Err(format!("flow {id:?}: {key} not found as {dir:?}"));
            }
        }
        holding_snat += u64::from(flow.snat());
    }
    if snat_in_use != holding_snat {
        return Err(format!(
            "{snat_in_use} SNAT tuples in use for {holding_snat} flows holding one"
        ));
    }
    Ok(())
}

fn client(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 51, 100, 1 + (i & 7))
}

/// Why a frame the gateway sent is not a well-formed Ethernet/IPv4 or ARP
/// frame, if it is not.
fn malformed_output(frame: &[u8]) -> Option<String> {
    let ether = frame.get(12..14)?;
    if ether == [0x08, 0x06] {
        return None;
    }
    if ether == [0x86, 0xdd] {
        let ip = ipv6::Packet::new_checked(frame.get(14..)?).ok()?;
        let upper = ip.payload();
        let ok = match ip.next_header() {
            6 | 17 => checksum::verify_l4_v6(ip.src_addr(), ip.dst_addr(), ip.next_header(), upper),
            58 => {
                icmpv6::Packet::new_unchecked(upper).verify_checksum(ip.src_addr(), ip.dst_addr())
            }
            _ => true,
        };
        return (!ok).then(|| "sent an IPv6 packet with a bad checksum".into());
    }
    if ether != [0x08, 0x00] {
        return Some(format!("sent a frame of ethertype {ether:02x?}"));
    }
    let ip = ipv4::Packet::new_checked(frame.get(14..)?).ok();
    match ip {
        Some(ip) if ip.verify_checksum() => None,
        _ => Some("sent an IPv4 packet with a bad header or checksum".into()),
    }
}

/// Seed inputs: one per kind of step, and a few whole conversations
/// (handshake, data, close; UDP query and answer; expiry; a backend
/// leaving). `dataplane/fuzz` writes them as its seed corpus.
pub fn seed_inputs() -> Vec<Vec<u8>> {
    const SYN: u8 = 0x02;
    const ACK: u8 = 0x10;
    const FIN: u8 = 0x01;
    const RST: u8 = 0x04;
    let tcp = |sport: u8, flags: u8| vec![0, sport, flags, 0, 0, 0, 1, 0, 0, 0, 0, 0];
    let reply = |pick: u8, flags: u8| vec![2, pick, flags, 0, 0, 0, 9, 0, 0, 0, 2];
    let mut seeds: Vec<Vec<u8>> = vec![
        [
            tcp(1, SYN),
            reply(0, SYN | ACK),
            tcp(1, ACK),
            tcp(1, FIN | ACK),
            reply(0, FIN | ACK),
        ]
        .concat(),
        [vec![1, 3, b'q'], reply(0, 0), vec![5, 0x75, 0x30, 1]].concat(),
        [tcp(2, SYN), vec![3, 0, 0, 0], vec![6, 0b001], tcp(2, ACK)].concat(),
        [tcp(3, SYN), tcp(3, RST), vec![7, 0], vec![7, 1, 2]].concat(),
        vec![
            4, 0, 20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x00, 0x45, 0, 0,
            20,
        ],
    ];
    // IPv6: a handshake to web6, data, an ICMPv6 error about it, close.
    let tcp6 = |flags: u8| {
        vec![
            0, 4, flags, 0, 0, 0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0,
        ]
    };
    seeds.push(
        [
            tcp6(SYN),
            vec![2, 0x80, SYN | ACK, 0, 0, 0, 9, 0, 0, 0, 2],
            tcp6(ACK),
            vec![3, 0x80, 1, 0],
            tcp6(FIN | ACK),
        ]
        .concat(),
    );
    // A SYN flood that fills the table, then time passing.
    let mut flood = Vec::new();
    for sport in 0..16 {
        flood.extend(tcp(sport, SYN));
    }
    flood.extend([5, 0xff, 0xff, 10]);
    seeds.push(flood);
    seeds
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The IPv6 seed reaches the IPv6 paths: a flow created, the backend's
    /// reply forwarded, the ICMPv6 error translated, nothing left.
    #[test]
    fn the_ipv6_seed_drives_ipv6_flows() {
        let seed = seed_inputs()
            .into_iter()
            .find(|s| s.get(11) == Some(&2))
            .expect("the IPv6 seed");
        let mut h = SequenceHarness::new();
        let stats = h.run(&seed).expect("invariants hold");
        let c = h.worker.pipeline().counters();
        assert_eq!(stats.flows_created, 1, "{c:?}");
        assert_eq!(c.icmp_errors_translated, 1, "{c:?}");
        assert!(stats.frames_sent >= 4, "{stats:?}");
    }
}
