//! Fixtures shared by Portico's benches and the instruction-count probe: a
//! single-core gateway on the mem driver with a population of live flows,
//! and pre-built 64-byte frames for every traffic kind.
//!
//! Topology (same as the dataplane's pipeline fixtures): clients behind a
//! router on port 0, `backends` backends on 10.1.0.0/16 behind port 1, full
//! NAT to `snat_addrs` SNAT addresses.

use dataplane::clock::ManualClock;
use dataplane::conntrack::{ConntrackConfig, Timeouts, default_syn_proxy_flows};
use dataplane::counters::SharedCounters;
use dataplane::driver::mem::{MemConfig, MemDriver};
use dataplane::flow::{Family, FlowKey, Proto};
use dataplane::snapshot::{
    AddrRole, NeighbourSpec, PortSpec, Publisher, Route, ServiceSpec, SnapshotBuilder,
    SnapshotSpec, SynProxyMode,
};
use dataplane::snat::SnatConfig;
use dataplane::stage::PipelineConfig;
use dataplane::wire::tcp::flags as F;
use dataplane::wire::{MacAddr, build};
use dataplane::worker::{IdlePolicy, Worker, WorkerConfig};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

pub const OUTSIDE: u8 = 0;
pub const INSIDE: u8 = 1;
pub const OUT_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
pub const IN_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x02]);
pub const ROUTER_MAC: MacAddr = MacAddr([0x02, 0xaa, 0, 0, 0, 0x01]);
pub const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
/// Ethernet frame length without FCS of a minimum-size (64-byte) frame.
pub const MIN_FRAME: usize = 60;

pub fn backend_ip(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 1, 1, 0)) + i)
}

pub fn backend_mac(i: u32) -> MacAddr {
    let b = i.to_be_bytes();
    MacAddr([0x02, 0xbb, b[0], b[1], b[2], b[3]])
}

/// The i-th distinct client 5-tuple's source (address, port).
pub fn client(i: u32) -> (Ipv4Addr, u16) {
    let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + i / 50_000);
    (ip, 10_000 + (i % 50_000) as u16)
}

/// `f` padded with zeros to a minimum-size frame ([`MIN_FRAME`]).
fn pad(mut f: Vec<u8>) -> Vec<u8> {
    if f.len() < MIN_FRAME {
        f.resize(MIN_FRAME, 0);
    }
    f
}

/// Client → VIP TCP segment of flow `i`, padded to 60 bytes.
pub fn client_tcp(i: u32, flags: u8, seq: u32, ack: u32) -> Vec<u8> {
    let (ip, port) = client(i);
    pad(build::eth_ipv4_tcp(
        ROUTER_MAC, OUT_MAC, ip, port, VIP, 80, flags, seq, ack, b"",
    ))
}

/// Client → service TCP segment of flow `i` of `family`: [`client_tcp`]
/// to `web` on [`VIP`], or [`ipv6::client_tcp6`] to `web6` on
/// [`ipv6::VIP6`].
pub fn client_tcp_of(family: Family, i: u32, flags: u8, seq: u32, ack: u32) -> Vec<u8> {
    match family {
        Family::V4 => client_tcp(i, flags, seq, ack),
        Family::V6 => ipv6::client_tcp6(i, flags, seq, ack),
    }
}

/// Client → VIP UDP datagram of flow `i` (18-byte payload: a 64-byte frame).
pub fn client_udp(i: u32) -> Vec<u8> {
    let (ip, port) = client(i);
    pad(build::eth_ipv4_udp(
        ROUTER_MAC, OUT_MAC, ip, port, VIP, 53, &[0u8; 18],
    ))
}

/// Shape of a bench gateway.
#[derive(Clone, Copy, Debug)]
pub struct RigConfig {
    pub backends: u32,
    pub snat_addrs: u8,
    pub conntrack_capacity: u32,
    pub maglev_table_size: u32,
    /// The web service's SYN proxy setting.
    pub syn_proxy: SynProxyMode,
    /// Also serve `web6` on [`ipv6::VIP6`] (IPv6 backends, SNAT from IPv6
    /// addresses): the IPv6 tables are allocated only then.
    pub ipv6: bool,
    /// Idle TCP services added beside `web` and `dns` (distinct VIPs in
    /// 198.18.0.0/15, two endpoints each in 10.1.128.0/17, no traffic), to
    /// measure what a Kubernetes-sized snapshot costs the packets of the
    /// busy services.
    pub extra_services: u32,
}

impl Default for RigConfig {
    fn default() -> Self {
        RigConfig {
            backends: 32,
            snat_addrs: 4,
            conntrack_capacity: 1 << 20,
            maglev_table_size: 16381,
            syn_proxy: SynProxyMode::Off,
            ipv6: false,
            extra_services: 0,
        }
    }
}

pub fn snapshot_spec(cfg: &RigConfig) -> SnapshotSpec {
    let snat: Vec<Ipv4Addr> = (0..cfg.snat_addrs)
        .map(|i| Ipv4Addr::new(10, 1, 0, 1 + i))
        .collect();
    let mut web = ServiceSpec::new("web", Proto::Tcp, VIP, 80);
    web.syn_proxy = cfg.syn_proxy;
    let mut dns = ServiceSpec::new("dns", Proto::Udp, VIP, 53);
    for b in 0..cfg.backends {
        web = web.endpoint(SocketAddrV4::new(backend_ip(b), 8080));
        dns = dns.endpoint(SocketAddrV4::new(backend_ip(b), 5353));
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
        addresses: snat
            .iter()
            .map(|&a| (a.into(), INSIDE, AddrRole::Snat))
            .collect(),
        routes: vec![Route {
            dest: Ipv4Addr::new(10, 1, 0, 0).into(),
            prefix_len: 16,
            port: INSIDE,
            via: None,
        }],
        neighbours: (0..cfg.backends)
            .map(|b| NeighbourSpec {
                addr: backend_ip(b).into(),
                mac: backend_mac(b).0,
            })
            .collect(),
        services: [web, dns]
            .into_iter()
            .chain((0..cfg.extra_services).map(idle_service))
            .collect(),
        maglev_table_size: cfg.maglev_table_size,
    };
    if cfg.ipv6 {
        ipv6::add_to_spec(&mut spec, cfg);
    }
    spec
}

/// Idle service `s` of [`RigConfig::extra_services`].
fn idle_service(s: u32) -> ServiceSpec {
    let vip = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + s);
    let mut svc = ServiceSpec::new(&format!("idle/svc-{s}"), Proto::Tcp, vip, 80);
    for e in 0..2 {
        let pod = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 1, 128, 0)) + (s * 2 + e) % 32_768);
        svc = svc.endpoint(SocketAddrV4::new(pod, 8080));
    }
    svc
}

/// A Kubernetes-sized spec: `services` TCP services on distinct VIPs (port
/// 80), each with `endpoints` ready pods of its own (port 8080) behind one
/// router, for the snapshot builder's benches. Service `s` is named
/// `ns/svc-{s}`.
pub fn cluster_spec(services: u32, endpoints: u32, maglev_table_size: u32) -> SnapshotSpec {
    let services = (0..services)
        .map(|s| {
            let vip = Ipv4Addr::from(u32::from(Ipv4Addr::new(203, 0, 0, 0)) + s);
            let mut svc = ServiceSpec::new(&format!("ns/svc-{s}"), Proto::Tcp, vip, 80);
            for e in 0..endpoints {
                let pod =
                    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 64, 0, 0)) + s * endpoints + e);
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
                mss_clamp: None,
            },
            PortSpec {
                mac: [2, 0, 0, 0, 0, 2],
                mtu: 1500,
                mss_clamp: None,
            },
        ],
        vip_port: 0,
        addresses: vec![(Ipv4Addr::new(10, 0, 0, 1).into(), 1, AddrRole::Snat)],
        routes: vec![Route {
            dest: Ipv4Addr::new(10, 64, 0, 0).into(),
            prefix_len: 10,
            port: 1,
            via: Some(Ipv4Addr::new(10, 0, 0, 254).into()),
        }],
        neighbours: vec![NeighbourSpec {
            addr: Ipv4Addr::new(10, 0, 0, 254).into(),
            mac: [2, 0, 0, 0, 0, 0xfe],
        }],
        services,
        maglev_table_size,
    }
}

/// Service `index` of [`cluster_spec`] with its last endpoint moved to one of
/// two addresses (`flip`): a one-endpoint change.
pub fn cluster_service_changed(spec: &SnapshotSpec, index: usize, flip: bool) -> ServiceSpec {
    let mut svc = spec.services[index].clone();
    if let Some(last) = svc.endpoints.last_mut() {
        last.addr = SocketAddrV4::new(Ipv4Addr::new(10, 200, 0, u8::from(flip)), 8080).into();
    }
    svc
}

/// A single-core gateway on the mem driver.
#[derive(Debug)]
pub struct Rig {
    pub worker: Worker<MemDriver, ManualClock>,
    pub clock: ManualClock,
    pub publisher: Publisher,
    pub config: RigConfig,
}

impl Rig {
    pub fn new(cfg: RigConfig) -> Self {
        let spec = snapshot_spec(&cfg);
        let snapshot = SnapshotBuilder::new()
            .build(&spec)
            .expect("bench spec is valid");
        let publisher = Publisher::new(snapshot);
        let clock = ManualClock::new(1);
        let snat_addrs = spec
            .addresses
            .iter()
            .filter_map(|a| match a.0 {
                std::net::IpAddr::V4(v4) => Some(v4),
                std::net::IpAddr::V6(_) => None,
            })
            .collect();
        let worker = Worker::new(
            &WorkerConfig {
                pipeline: PipelineConfig {
                    worker: 0,
                    workers: 1,
                    conntrack: ConntrackConfig {
                        capacity: cfg.conntrack_capacity,
                        timeouts: Timeouts::default(),
                        expiry_scan_per_poll: 64,
                        early_drop_scan: 64,
                        syn_proxy_flows: default_syn_proxy_flows(cfg.conntrack_capacity),
                    },
                    snat: SnatConfig {
                        addrs: snat_addrs,
                        ..SnatConfig::default()
                    },
                    affinity_capacity: 1024,
                    seed: 42,
                    table_hasher: dataplane::flow::TableHasher::from_seed(42),
                    new_flows_per_source_per_s: 0,
                    source_prefix_len_v6: 64,
                },
                batch_size: 64,
                idle: IdlePolicy::Spin,
            },
            MemDriver::new(MemConfig {
                ports: 2,
                pool_frames: 1024,
                ring_frames: 512,
            }),
            clock.clone(),
            publisher.reader(),
            Arc::new(SharedCounters::default()),
            None,
            Arc::new(dataplane::neighbour::NeighbourTable::new(Default::default())),
        )
        .expect("bench pipeline config is valid");
        let mut rig = Rig {
            worker,
            clock,
            publisher,
            config: cfg,
        };
        // The first poll announces the owned addresses (gratuitous ARP).
        rig.worker.poll();
        let d = rig.worker.driver_mut();
        d.discard_tx(OUTSIDE);
        d.discard_tx(INSIDE);
        rig
    }

    /// Inject `frames` (at most one ring) on `port`, poll until drained, and
    /// throw the transmitted frames away. Returns frames transmitted.
    pub fn run(&mut self, port: u8, frames: &[Vec<u8>]) -> usize {
        let d = self.worker.driver_mut();
        for f in frames {
            d.inject(port, f).expect("ring has room");
        }
        while self.worker.driver_mut().rx_pending(port) > 0 {
            self.worker.poll();
        }
        let d = self.worker.driver_mut();
        d.discard_tx(OUTSIDE) + d.discard_tx(INSIDE)
    }

    /// Reply key (backend → SNAT) of client flow `i`.
    pub fn reply_key(&self, proto: Proto, i: u32) -> FlowKey {
        let (ip, port) = client(i);
        let dport = if proto == Proto::Tcp { 80 } else { 53 };
        let key = FlowKey::new(proto, ip, port, VIP, dport);
        let ct = self.worker.pipeline().conntrack();
        let (id, _) = ct.lookup(&key, ct.hash(&key)).expect("flow is tracked");
        *ct.flow(id).reply()
    }

    /// The backend's TCP segment with `flags` on client flow `i` of
    /// `family`, addressed by the flow's reply key as conntrack holds it
    /// (backend → SNAT address and port).
    pub fn backend_tcp(&self, family: Family, i: u32, flags: u8) -> Vec<u8> {
        match family {
            Family::V4 => backend_frame(&self.reply_key(Proto::Tcp, i), flags),
            Family::V6 => ipv6::backend_frame6(&self.reply_key6(i), flags),
        }
    }

    /// Establish `n` TCP flows of `family` (SYN, SYN-ACK, ACK; IPv6 flows
    /// need [`RigConfig::ipv6`]) and return the frames of their
    /// established data direction (client ACKs) and of their reply
    /// direction (backend ACKs).
    pub fn establish_tcp(&mut self, family: Family, n: u32) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let mut client_acks = Vec::with_capacity(n as usize);
        let mut backend_acks = Vec::with_capacity(n as usize);
        let chunk = 256u32;
        let mut start = 0;
        while start < n {
            let end = (start + chunk).min(n);
            let syns: Vec<_> = (start..end)
                .map(|i| client_tcp_of(family, i, F::SYN, 1, 0))
                .collect();
            assert_eq!(self.run(OUTSIDE, &syns), syns.len(), "every SYN forwarded");
            let synacks: Vec<_> = (start..end)
                .map(|i| self.backend_tcp(family, i, F::SYN | F::ACK))
                .collect();
            assert_eq!(self.run(INSIDE, &synacks), synacks.len());
            let acks: Vec<_> = (start..end)
                .map(|i| client_tcp_of(family, i, F::ACK, 2, 2))
                .collect();
            assert_eq!(self.run(OUTSIDE, &acks), acks.len());
            for i in start..end {
                backend_acks.push(self.backend_tcp(family, i, F::ACK));
            }
            client_acks.extend(acks);
            start = end;
        }
        (client_acks, backend_acks)
    }

    /// Create `n` UDP flows; returns their client datagrams.
    pub fn establish_udp(&mut self, n: u32) -> Vec<Vec<u8>> {
        let frames: Vec<_> = (0..n).map(client_udp).collect();
        for chunk in frames.chunks(256) {
            assert_eq!(self.run(OUTSIDE, chunk), chunk.len());
        }
        frames
    }
}

/// Backend → SNAT TCP segment for a flow's reply key.
pub fn backend_frame(reply: &FlowKey, flags: u8) -> Vec<u8> {
    let mac = backend_mac(u32::from(reply.src_ip) - u32::from(backend_ip(0)));
    pad(build::eth_ipv4_tcp(
        mac,
        IN_MAC,
        reply.src_ip,
        reply.src_port,
        reply.dst_ip,
        reply.dst_port,
        flags,
        2,
        2,
        b"",
    ))
}
pub mod compare;
pub mod ipv6;
pub mod pktgen;
pub mod report_scan;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_services_are_idle_services_beside_the_measured_ones() {
        let cfg = RigConfig {
            extra_services: 3,
            ..RigConfig::default()
        };
        let snap = SnapshotBuilder::new()
            .build(&snapshot_spec(&cfg))
            .expect("valid spec");
        for s in 0..3 {
            let svc = snap
                .service_by_name(&format!("idle/svc-{s}"))
                .expect("idle service present");
            let vip = Ipv4Addr::new(198, 18, 0, s as u8);
            assert!(snap.listener(Proto::Tcp, vip, 80).is_some(), "{vip}");
            assert_eq!(svc.active_set().map(|s| s.backends.len()), Some(2));
        }
        assert!(snap.service_by_name("web").is_some());
        assert!(snap.service_by_name("idle/svc-3").is_none());
    }
}
