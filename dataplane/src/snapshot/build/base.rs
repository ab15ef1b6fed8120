//! The static part of a spec (ports, owned addresses, routes, neighbours,
//! Maglev size) and what the snapshot derives from it: the gateway's own
//! addresses, port facts, static neighbours, ARP source addresses, and the
//! next hop of an address. A change of it rebuilds every service on it.

use super::{AddrRole, SnapshotSpec};
use crate::packet::PortId;
use crate::snapshot::{NextHop, OwnedAddr, PortInfo};
use hashbrown::HashMap;
use std::net::Ipv4Addr;

/// The static part of a spec (everything but the services) and what is
/// derived from it.
#[derive(Debug)]
pub(super) struct Base {
    /// The spec with `services` empty.
    pub(super) statics: SnapshotSpec,
    /// Node and SNAT addresses.
    pub(super) gateway: HashMap<Ipv4Addr, OwnedAddr>,
    pub(super) ports: Vec<PortInfo>,
    pub(super) static_neighbours: Vec<(PortId, Ipv4Addr, [u8; 6])>,
    pub(super) arp_source: Vec<Option<Ipv4Addr>>,
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
                .filter_map(|n| Some((resolve_next_hop(spec, n.addr)?.port, n.addr, n.mac)))
                .collect(),
            arp_source: (0..spec.ports.len())
                .map(|p| {
                    spec.addresses
                        .iter()
                        .find(|a| usize::from(a.1) == p && a.2 != AddrRole::Host)
                        .map(|a| a.0)
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

/// The gateway's own (node, SNAT and host) addresses, each on its port.
fn owned_addresses(spec: &SnapshotSpec) -> HashMap<Ipv4Addr, OwnedAddr> {
    let mut owned: HashMap<Ipv4Addr, OwnedAddr> = HashMap::new();
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

/// Longest-prefix route to `addr`: its port and the neighbour to send to.
pub(super) fn resolve_next_hop(spec: &SnapshotSpec, addr: Ipv4Addr) -> Option<NextHop> {
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
