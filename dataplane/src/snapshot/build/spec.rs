//! The builder's input: plain data the control plane fills in (ports,
//! owned addresses, routes, neighbours, services and their endpoints), a
//! whole [`SnapshotSpec`] or a [`ServiceChanges`] delta. Nothing here is
//! validated yet: `validate.rs` and the builder's batch do that.

use crate::flow::Proto;
use crate::packet::PortId;
use crate::snapshot::{BackendGonePolicy, EndpointCondition, ListenerKind, SynProxyMode};
use std::net::{Ipv4Addr, SocketAddrV4};

/// One gateway port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortSpec {
    pub mac: [u8; 6],
    pub mtu: u16,
    /// The MSS that TCP SYNs and SYN-ACKs leaving this port may announce
    /// at most (`stage::mss_clamp`); `None`: not clamped.
    pub mss_clamp: Option<u16>,
}

/// Why the gateway owns an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrRole {
    /// A node address: NodePorts listen here.
    Node,
    /// A source address for full NAT.
    Snat,
    /// A host address: the kernel's, reached through the port's host path
    /// (TAP). The dataplane answers neither ARP nor ICMP for it and sends
    /// everything addressed to it to the host path. Never combined with
    /// another role (nic-config refuses it).
    Host,
}

/// A directly connected subnet (`via: None`) or a static route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub dest: Ipv4Addr,
    pub prefix_len: u8,
    pub port: PortId,
    pub via: Option<Ipv4Addr>,
}

impl Route {
    /// Whether `addr` is inside `dest/prefix_len`.
    pub(super) fn contains(&self, addr: Ipv4Addr) -> bool {
        let mask = u32::MAX
            .checked_shl(32 - u32::from(self.prefix_len.min(32)))
            .unwrap_or(0);
        u32::from(addr) & mask == u32::from(self.dest) & mask
    }
}

/// A statically known neighbour (the af_packet driver adds ARP resolution).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighbourSpec {
    pub addr: Ipv4Addr,
    pub mac: [u8; 6],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointSpec {
    pub addr: SocketAddrV4,
    pub weight: u32,
    pub condition: EndpointCondition,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ServiceSpec {
    pub name: String,
    pub proto: Proto,
    /// `(address, port, kind)` the service accepts traffic on.
    pub listeners: Vec<(Ipv4Addr, u16, ListenerKind)>,
    pub endpoints: Vec<EndpointSpec>,
    pub snat: bool,
    pub affinity_timeout_ms: Option<u64>,
    pub tcp_backend_gone: BackendGonePolicy,
    pub syn_proxy: SynProxyMode,
    /// See [`crate::snapshot::Service::tcp_pickup`].
    pub tcp_pickup: bool,
}

impl ServiceSpec {
    /// A TCP/UDP service on one VIP:port with full NAT and no affinity.
    pub fn new(name: &str, proto: Proto, vip: Ipv4Addr, port: u16) -> Self {
        ServiceSpec {
            name: name.to_owned(),
            proto,
            listeners: vec![(vip, port, ListenerKind::Vip)],
            endpoints: Vec::new(),
            snat: true,
            affinity_timeout_ms: None,
            tcp_backend_gone: BackendGonePolicy::Drop,
            syn_proxy: SynProxyMode::Off,
            tcp_pickup: false,
        }
    }

    /// Add a ready endpoint of weight 1.
    pub fn endpoint(mut self, addr: SocketAddrV4) -> Self {
        self.endpoints.push(EndpointSpec {
            addr,
            weight: 1,
            condition: EndpointCondition::Ready,
        });
        self
    }
}

/// Everything a snapshot is built from.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotSpec {
    pub ports: Vec<PortSpec>,
    /// Port on which VIPs and externalIPs are announced (the outside port).
    pub vip_port: PortId,
    /// Node and SNAT addresses, each on its port.
    pub addresses: Vec<(Ipv4Addr, PortId, AddrRole)>,
    pub routes: Vec<Route>,
    pub neighbours: Vec<NeighbourSpec>,
    pub services: Vec<ServiceSpec>,
    /// Largest Maglev table size (prime): each backend set gets
    /// [`crate::maglev::table_size_for`] its backend count, at most this.
    pub maglev_table_size: u32,
}

/// A delta of the services of the last built spec, for
/// [`SnapshotBuilder::update`](super::SnapshotBuilder::update): the ports,
/// addresses, routes, neighbours and Maglev size stay as the last
/// [`SnapshotBuilder::build`](super::SnapshotBuilder::build) set them.
///
/// `removals` are applied first, then `upserts`: an upsert replaces the
/// service of the same name (or adds it). Removing a name that is not
/// there is a no-op; naming a service twice in `upserts` is a
/// [`Problem::DuplicateService`](super::Problem::DuplicateService).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceChanges {
    pub upserts: Vec<ServiceSpec>,
    /// Names of services to remove.
    pub removals: Vec<String>,
}

impl ServiceChanges {
    /// Whether the changes change nothing.
    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty() && self.removals.is_empty()
    }
}
