//! The harness's gateway: addresses, services and the pipeline
//! configuration, in both families.
//!
//! ```text
//! clients 198.51.100.1..8, 2001:db8::1..8 -- port 0 [gateway] port 1 -- backends
//! 10.1.0.10..12, fd00:1::10..12; SNAT 10.1.0.1, fd00:1::1; node 192.0.2.1
//! ```
//!
//! Per family, on the VIP (203.0.113.10, 2001:db8:ffff::10), every service
//! on the same three backends (those set in the backend mask):
//!
//! | port | service | what it reaches |
//! |---|---|---|
//! | 80 | `web` (+ NodePort 30080, IPv4) | plain full NAT |
//! | 443 | `proxy` | the SYN proxy (`syn_proxy: On`): cookies, their validation, the splice |
//! | 444 | `auto` | the SYN proxy in mode `auto`: cookies only while the family's table holds more than [`AUTO_HALF_OPEN_THRESHOLD`] half-open flows (SYNs push it over, expiry, handshakes and RSTs bring it back) |
//! | 8443 | `strict` | the `reset` backend-gone policy: RSTs for segments without a flow or backend |
//! | 81, 82 | `direct`, `direct2` | no SNAT, one backend port: a client port used towards both clashes on the backend side and is remapped |
//!
//! and UDP `dns` (IPv4 VIP:53).

use crate::conntrack::{ConntrackConfig, Timeouts};
use crate::flow::{Proto, TableHasher};
use crate::snapshot::{
    AddrRole, BackendGonePolicy, ListenerKind, NeighbourSpec, PortSpec, Route, ServiceSpec,
    SnapshotSpec, SynProxyMode,
};
use crate::snat::SnatConfig;
use crate::stage::PipelineConfig;
use crate::wire::MacAddr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub(super) const OUTSIDE: u8 = 0;
pub(super) const INSIDE: u8 = 1;
pub(super) const OUT_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
pub(super) const IN_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x02]);
pub(super) const ROUTER_MAC: MacAddr = MacAddr([0x02, 0xaa, 0, 0, 0, 0x01]);
pub(super) const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
pub(super) const NODE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub(super) const SNAT: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
pub(super) const NODE_PORT: u16 = 30080;
pub(super) const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 0x10);
pub(super) const SNAT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 1);

/// Flows the harness's table holds: small, so early drop and exhaustion
/// are reached.
pub const FLOW_CAPACITY: u32 = 16;

/// The TCP service ports of the VIP, by the 3-bit service index of a
/// client segment (see the module table; 6 and 7 repeat `proxy` and
/// `strict`).
pub(super) const TCP_PORTS: [u16; 8] = [80, 443, 8443, 81, 82, 444, 443, 8443];

/// The `auto` service's threshold: SYN cookies while the table holds more
/// half-open flows than this (low, so that a few SYNs cross it and one
/// expiry brings it back under).
pub const AUTO_HALF_OPEN_THRESHOLD: u32 = 2;

pub(super) fn backend_ip(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 1, 0, 10 + i)
}

pub(super) fn backend6(i: u8) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x10 + u16::from(i))
}

/// A backend's MAC (the same for both of its addresses).
pub(super) fn backend_mac(i: u8) -> MacAddr {
    MacAddr([0x02, 0xbb, 0, 0, 0, 10 + i])
}

/// The MAC of the backend at `addr` ([`backend_ip`] or [`backend6`]).
pub(super) fn backend_mac_of(addr: IpAddr) -> MacAddr {
    backend_mac(match addr {
        IpAddr::V4(a) => a.octets()[3].wrapping_sub(10),
        IpAddr::V6(a) => a.octets()[15].wrapping_sub(0x10),
    })
}

pub(super) fn client(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 51, 100, 1 + (i & 7))
}

pub(super) fn client6(i: u8) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1 + u16::from(i & 7))
}

/// The TCP services of one family on `vip` (see the module table), on
/// `backends`.
fn tcp_services(suffix: &str, vip: IpAddr, backends: &[IpAddr]) -> Vec<ServiceSpec> {
    let service = |name: &str, port: u16| {
        let mut s = ServiceSpec::new(&format!("{name}{suffix}"), Proto::Tcp, vip, port);
        for &b in backends {
            s = s.endpoint(SocketAddr::new(b, 8080));
        }
        s
    };
    let mut proxy = service("proxy", 443);
    proxy.syn_proxy = SynProxyMode::On;
    let mut auto = service("auto", 444);
    auto.syn_proxy = SynProxyMode::Auto {
        half_open_threshold: AUTO_HALF_OPEN_THRESHOLD,
    };
    let mut strict = service("strict", 8443);
    strict.tcp_backend_gone = BackendGonePolicy::Reset;
    let mut direct = service("direct", 81);
    direct.snat = false;
    let mut direct2 = service("direct2", 82);
    direct2.snat = false;
    vec![service("web", 80), proxy, strict, direct, direct2, auto]
}

/// The harness's snapshot, with the backends whose bit is set in `mask`
/// (of three).
pub(super) fn spec(mask: u8) -> SnapshotSpec {
    let up: Vec<u8> = (0..3).filter(|b| mask & (1 << b) != 0).collect();
    let v4: Vec<IpAddr> = up.iter().map(|&b| backend_ip(b).into()).collect();
    let v6: Vec<IpAddr> = up.iter().map(|&b| backend6(b).into()).collect();
    let mut services = tcp_services("", VIP.into(), &v4);
    services[0]
        .listeners
        .push((NODE.into(), NODE_PORT, ListenerKind::NodePort));
    let mut dns = ServiceSpec::new("dns", Proto::Udp, VIP, 53);
    for &b in &v4 {
        dns = dns.endpoint(SocketAddr::new(b, 5353));
    }
    services.push(dns);
    services.extend(tcp_services("6", VIP6.into(), &v6));
    let port = |mac: MacAddr| PortSpec {
        mac: mac.0,
        mtu: 1500,
        mss_clamp: None,
    };
    SnapshotSpec {
        ports: vec![port(OUT_MAC), port(IN_MAC)],
        vip_port: OUTSIDE,
        addresses: vec![
            (NODE.into(), OUTSIDE, AddrRole::Node),
            (SNAT.into(), INSIDE, AddrRole::Snat),
            (SNAT6.into(), INSIDE, AddrRole::Snat),
        ],
        routes: vec![
            Route {
                dest: Ipv4Addr::new(10, 1, 0, 0).into(),
                prefix_len: 24,
                port: INSIDE,
                via: None,
            },
            Route {
                dest: Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0).into(),
                prefix_len: 64,
                port: INSIDE,
                via: None,
            },
        ],
        neighbours: (0..3)
            .flat_map(|i| {
                [backend_ip(i).into(), backend6(i).into()].map(|addr| NeighbourSpec {
                    addr,
                    mac: backend_mac(i).0,
                })
            })
            .collect(),
        services,
        maglev_table_size: 251,
    }
}

/// The worker's pipeline: [`FLOW_CAPACITY`] flows per family, 32 SNAT
/// ports (per family: the IPv6 allocator takes the same range), 64
/// quarantine entries.
pub(super) fn pipeline_config() -> PipelineConfig {
    PipelineConfig {
        worker: 0,
        workers: 1,
        conntrack: ConntrackConfig {
            capacity: FLOW_CAPACITY,
            timeouts: Timeouts::default(),
            expiry_scan_per_poll: 64,
            early_drop_scan: 64,
            // Every flow may be SYN-proxied.
            syn_proxy_flows: FLOW_CAPACITY,
        },
        snat: SnatConfig {
            addrs: vec![SNAT],
            port_range: 40_000..=40_031,
            // 64 of the default 262,144 (12 MiB per family, built afresh
            // for every input): the overflow (the oldest forgotten early)
            // is reached too.
            quarantine_capacity: 64,
            ..SnatConfig::default()
        },
        affinity_capacity: 64,
        seed: 0x5eed,
        table_hasher: TableHasher::from_seed(0xf022),
        new_flows_per_source_per_s: 0,
        source_prefix_len_v6: 64,
    }
}
