//! The builder's input: plain data the control plane fills in (ports,
//! owned addresses, routes, neighbours, services and their endpoints), a
//! whole [`SnapshotSpec`] or a [`ServiceChanges`] delta. Nothing here is
//! validated yet: `validate.rs` and the builder's batch do that.
//!
//! IPv6 comes by widening: every address is an [`IpAddr`] (endpoints a
//! [`SocketAddr`]), so one spec carries both families. A service is
//! single-family: its listeners and endpoints are all IPv4 or all IPv6
//! (no NAT46/64), which the builder checks
//! ([`Problem::MixedFamilies`](super::Problem::MixedFamilies)).

use crate::flow::Proto;
use crate::packet::{Family, PortId};
use crate::snapshot::{BackendGonePolicy, EndpointCondition, ListenerKind, SynProxyMode};
use std::net::{IpAddr, SocketAddr};

/// The family of an address.
pub(crate) fn family_of(addr: IpAddr) -> Family {
    match addr {
        IpAddr::V4(_) => Family::V4,
        IpAddr::V6(_) => Family::V6,
    }
}

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

/// A directly connected subnet (`via: None`) or a static route, IPv4 or
/// IPv6 (`dest` and `via` of one family).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub dest: IpAddr,
    pub prefix_len: u8,
    pub port: PortId,
    pub via: Option<IpAddr>,
}

impl Route {
    /// Whether `addr` is inside `dest/prefix_len` (never for an address of
    /// the other family).
    pub(crate) fn contains(&self, addr: IpAddr) -> bool {
        match (self.dest, addr) {
            (IpAddr::V4(d), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix_len.min(32)))
                    .unwrap_or(0);
                a.to_bits() & mask == d.to_bits() & mask
            }
            (IpAddr::V6(d), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix_len.min(128)))
                    .unwrap_or(0);
                a.to_bits() & mask == d.to_bits() & mask
            }
            _ => false,
        }
    }

    /// The longest prefix length of the route's family (32, 128).
    pub(crate) fn max_prefix_len(&self) -> u8 {
        match self.dest {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        }
    }
}

/// A statically known neighbour, IPv4 or IPv6 (the af_packet driver adds
/// ARP resolution, the NDP stage IPv6 resolution).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighbourSpec {
    pub addr: IpAddr,
    pub mac: [u8; 6],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointSpec {
    pub addr: SocketAddr,
    pub weight: u32,
    pub condition: EndpointCondition,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ServiceSpec {
    pub name: String,
    pub proto: Proto,
    /// `(address, port, kind)` the service accepts traffic on; of one
    /// family, that of the endpoints.
    pub listeners: Vec<(IpAddr, u16, ListenerKind)>,
    pub endpoints: Vec<EndpointSpec>,
    pub snat: bool,
    pub affinity_timeout_ms: Option<u64>,
    pub tcp_backend_gone: BackendGonePolicy,
    pub syn_proxy: SynProxyMode,
    /// See [`crate::snapshot::Service::tcp_pickup`].
    pub tcp_pickup: bool,
}

impl ServiceSpec {
    /// A TCP/UDP service on one VIP:port (IPv4 or IPv6) with full NAT and
    /// no affinity.
    pub fn new(name: &str, proto: Proto, vip: impl Into<IpAddr>, port: u16) -> Self {
        ServiceSpec {
            name: name.to_owned(),
            proto,
            listeners: vec![(vip.into(), port, ListenerKind::Vip)],
            endpoints: Vec::new(),
            snat: true,
            affinity_timeout_ms: None,
            tcp_backend_gone: BackendGonePolicy::Drop,
            syn_proxy: SynProxyMode::Off,
            tcp_pickup: false,
        }
    }

    /// Add a ready endpoint of weight 1.
    pub fn endpoint(mut self, addr: impl Into<SocketAddr>) -> Self {
        self.endpoints.push(EndpointSpec {
            addr: addr.into(),
            weight: 1,
            condition: EndpointCondition::Ready,
        });
        self
    }

    /// The service's family: that of its first listener, else of its first
    /// endpoint (`None`: neither).
    pub fn family(&self) -> Option<Family> {
        self.listeners
            .first()
            .map(|l| family_of(l.0))
            .or_else(|| self.endpoints.first().map(|e| family_of(e.addr.ip())))
    }
}

/// Everything a snapshot is built from.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotSpec {
    pub ports: Vec<PortSpec>,
    /// Port on which VIPs and externalIPs are announced (the outside port).
    pub vip_port: PortId,
    /// Node, SNAT and host addresses (IPv4 and IPv6), each on its port.
    pub addresses: Vec<(IpAddr, PortId, AddrRole)>,
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
