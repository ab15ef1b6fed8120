//! The static part of a spec (ports, owned addresses, routes, neighbours,
//! Maglev size) and what the snapshot derives from it: the gateway's own
//! addresses, port facts, static neighbours, ARP source addresses, and the
//! next hop of an address. A change of it rebuilds every service on it.

use super::{AddrRole, SnapshotSpec};
use crate::packet::PortId;
use crate::snapshot::{NextHop, OwnedAddr, PortInfo};
use hashbrown::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The static part of a spec (everything but the services) and what is
/// derived from it.
#[derive(Debug)]
pub(super) struct Base {
    /// The spec with `services` empty.
    pub(super) statics: SnapshotSpec,
    /// Node, SNAT and host addresses of both families.
    pub(super) gateway: HashMap<IpAddr, OwnedAddr>,
    pub(super) ports: Vec<PortInfo>,
    pub(super) static_neighbours: Vec<(PortId, Ipv4Addr, [u8; 6])>,
    pub(super) static_neighbours6: Vec<(PortId, Ipv6Addr, [u8; 6])>,
    pub(super) arp_source: Vec<Option<Ipv4Addr>>,
    pub(super) ndp_source: Vec<Option<Ipv6Addr>>,
}

impl Base {
    pub(super) fn new(spec: &SnapshotSpec) -> Base {
        let statics = SnapshotSpec {
            ports: spec.ports.clone(),
            vip_port: spec.vip_port,
            addresses: spec.addresses.clone(),
            routes: spec.routes.clone(),
            neighbours: spec.neighbours.clone(),
            services: Vec::new(),
            maglev_table_size: spec.maglev_table_size,
        };
        Base {
            gateway: owned_addresses(spec),
            ports: spec
                .ports
                .iter()
                .map(|p| PortInfo {
                    mac: p.mac,
                    mtu: p.mtu,
                    mss_clamp: p.mss_clamp,
                })
                .collect(),
            static_neighbours: spec
                .neighbours
                .iter()
                .filter_map(|n| match n.addr {
                    IpAddr::V4(a) => Some((resolve_next_hop(spec, n.addr)?.port, a, n.mac)),
                    IpAddr::V6(_) => None,
                })
                .collect(),
            static_neighbours6: spec
                .neighbours
                .iter()
                .filter_map(|n| match n.addr {
                    IpAddr::V6(a) => Some((resolve_next_hop(spec, n.addr)?.port, a, n.mac)),
                    IpAddr::V4(_) => None,
                })
                .collect(),
            arp_source: (0..spec.ports.len())
                .map(|p| {
                    source_on(spec, p, |a| match a {
                        IpAddr::V4(a) => Some(a),
                        IpAddr::V6(_) => None,
                    })
                })
                .collect(),
            ndp_source: (0..spec.ports.len())
                .map(|p| {
                    source_on(spec, p, |a| match a {
                        IpAddr::V6(a) => Some(a),
                        IpAddr::V4(_) => None,
                    })
                })
                .collect(),
            statics,
        }
    }

    /// Whether `spec` has the same static part.
    pub(super) fn same_statics(&self, spec: &SnapshotSpec) -> bool {
        let s = &self.statics;
        s.ports == spec.ports
            && s.vip_port == spec.vip_port
            && s.addresses == spec.addresses
            && s.routes == spec.routes
            && s.neighbours == spec.neighbours
            && s.maglev_table_size == spec.maglev_table_size
    }
}

/// The first node or SNAT address of a family (`pick`) on port `p`.
fn source_on<A>(spec: &SnapshotSpec, p: usize, pick: impl Fn(IpAddr) -> Option<A>) -> Option<A> {
    spec.addresses
        .iter()
        .filter(|a| usize::from(a.1) == p && a.2 != AddrRole::Host)
        .find_map(|a| pick(a.0))
}

/// The gateway's own (node, SNAT and host) addresses, each on its port.
fn owned_addresses(spec: &SnapshotSpec) -> HashMap<IpAddr, OwnedAddr> {
    let mut owned: HashMap<IpAddr, OwnedAddr> = HashMap::new();
    for &(addr, port, role) in &spec.addresses {
        let o = owned.entry(addr).or_insert(OwnedAddr {
            port,
            announce: true,
            ..OwnedAddr::default()
        });
        match role {
            AddrRole::Node => o.node = true,
            AddrRole::Snat => o.snat = true,
            AddrRole::Host => o.host = true,
        }
    }
    owned
}

/// Longest-prefix route to `addr` (among the routes of its family): its
/// port and the neighbour to send to.
pub(super) fn resolve_next_hop(spec: &SnapshotSpec, addr: IpAddr) -> Option<NextHop> {
    let route = spec
        .routes
        .iter()
        .filter(|r| r.contains(addr))
        .max_by_key(|r| r.prefix_len)?;
    Some(NextHop {
        port: route.port,
        addr: route.via.unwrap_or(addr),
    })
}
