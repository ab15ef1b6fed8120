//! The immutable tables the dataplane forwards with.
//!
//! The control plane describes what it wants in a [`SnapshotSpec`] (plain
//! data), a [`SnapshotBuilder`] turns it into a complete [`Snapshot`] off the
//! hot path, and the [`Publisher`] swaps it in with `arc-swap`. Workers load
//! the current snapshot once per poll; they never lock and never see a
//! half-built table.
//!
//! A snapshot's tables ([`IdTable`], [`ShardedMap`]) are persistent: the
//! snapshots of consecutive generations share every chunk and shard that did
//! not change, so building and freeing a generation costs what changed.
//!
//! Invariants of a built snapshot:
//! * every listener points to a service of the snapshot, every service's
//!   backend sets point to backends of the snapshot of that service;
//! * service and backend ids are stable across snapshots built by the same
//!   builder for as long as the service (by name) and the endpoint (by service
//!   and address) exist, so conntrack entries keep referring to the right
//!   backend after a swap. An id freed by a removal may be reused later, so
//!   the dataplane checks a flow's backend address against the backend
//!   record, not only its id;
//! * a service's `ready` set holds its ready endpoints; `serving` holds
//!   endpoints that are terminating but still serving and is only consulted
//!   when there is no ready endpoint (KEP-1669); draining endpoints are in
//!   `backends` (their flows continue) but in neither set.

mod affinity;
mod build;
mod publish;
mod table;

pub use affinity::{AffinityTuples, Family as AffinityFamily};
pub use build::{
    AddrRole, AnnounceFilter, BuildError, EndpointSpec, NeighbourSpec, PortSpec, Problem, Route,
    ServiceChanges, ServiceSpec, SnapshotBuilder, SnapshotSpec,
};
pub use publish::{Publisher, SnapshotReader};
pub use table::{ID_CHUNK, IdTable, MAP_SHARDS, ShardedMap};

use crate::flow::Proto;
use crate::maglev::MaglevTable;
use crate::packet::PortId;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// Stable id of a service (by name) across snapshots.
pub type ServiceId = u32;
/// Stable id of a (service, endpoint address) across snapshots.
pub type BackendId = u32;

/// What a listener is, for reporting.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum ListenerKind {
    /// A LoadBalancer VIP.
    Vip,
    /// A ClusterIP Service's externalIP.
    ExternalIp,
    /// A NodePort on one of the gateway's node addresses.
    NodePort,
}

/// `(protocol, destination address, destination port)` of traffic a service
/// accepts, for addresses of family `A`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct ListenerKeyOf<A> {
    pub proto: Proto,
    pub addr: A,
    pub port: u16,
}

/// An IPv4 listener.
pub type ListenerKey = ListenerKeyOf<Ipv4Addr>;
/// An IPv6 listener.
pub type ListenerKey6 = ListenerKeyOf<Ipv6Addr>;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Listener {
    pub service: ServiceId,
    pub kind: ListenerKind,
}

/// EndpointSlice conditions that matter for forwarding.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum EndpointCondition {
    Ready,
    /// `serving: true, terminating: true`: used only when nothing is ready.
    ServingTerminating,
    /// Neither ready nor serving (failing readiness, or terminating and no
    /// longer serving) but still listed: takes no new flows, keeps its
    /// established ones, as kube-proxy keeps their conntrack entries. Only an
    /// endpoint that leaves the EndpointSlice is "gone" for its flows.
    Draining,
}

/// Where to send frames for an address: out of `port` to the neighbour
/// `addr` (the address itself when directly connected, else the route's
/// gateway; of the address's family), whose MAC the neighbour table
/// resolves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct NextHop {
    pub port: PortId,
    pub addr: IpAddr,
}

impl NextHop {
    /// The neighbour, if it is an IPv4 address.
    #[inline]
    pub fn v4(&self) -> Option<Ipv4Addr> {
        match self.addr {
            IpAddr::V4(a) => Some(a),
            IpAddr::V6(_) => None,
        }
    }

    /// The neighbour, if it is an IPv6 address.
    #[inline]
    pub fn v6(&self) -> Option<Ipv6Addr> {
        match self.addr {
            IpAddr::V6(a) => Some(a),
            IpAddr::V4(_) => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Backend {
    pub id: BackendId,
    pub service: ServiceId,
    /// Of the service's family.
    pub addr: SocketAddr,
    pub weight: u32,
    pub condition: EndpointCondition,
    /// Next hop by route; `None` when no route covers the backend.
    pub next_hop: Option<NextHop>,
}

/// A Maglev table and the backends its slots index into.
#[derive(Debug)]
pub struct BackendSet {
    pub table: MaglevTable,
    /// `table` slot value `i` means `backends[i]`.
    pub backends: Box<[BackendId]>,
}

impl BackendSet {
    /// The backend for a flow hash.
    #[inline]
    pub fn pick(&self, hash: u64) -> Option<BackendId> {
        let slot = self.table.lookup(hash)?;
        self.backends.get(slot as usize).copied()
    }
}

/// What to do with a TCP flow whose backend left its service.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum BackendGonePolicy {
    /// Drop the client's packets (the client times out or retries).
    #[default]
    Drop,
    /// Answer the client's next packet with a TCP RST.
    Reset,
}

/// When the gateway answers a service's TCP handshakes itself with SYN
/// cookies (the SYN proxy, `stage::synproxy`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum SynProxyMode {
    /// Every SYN goes to a backend (a flow and a SNAT tuple per SYN).
    #[default]
    Off,
    /// Every SYN is answered with a SYN cookie.
    On,
    /// SYN cookies only while the worker tracks more than this many
    /// half-open (SYN_SENT/SYN_RECV) flows; ACKs carrying a valid cookie
    /// are accepted at any time.
    Auto { half_open_threshold: u32 },
}

#[derive(Debug, Clone)]
pub struct Service {
    pub id: ServiceId,
    pub name: Arc<str>,
    pub proto: Proto,
    /// Full NAT (SNAT to a gateway address). `false` preserves the client
    /// address; the gateway must then be on the backends' return path.
    pub snat: bool,
    /// ClientIP session affinity timeout.
    pub affinity_timeout_ms: Option<u64>,
    pub tcp_backend_gone: BackendGonePolicy,
    pub syn_proxy: SynProxyMode,
    /// An ACK without a flow creates one (picked up mid-stream, liberal
    /// window tracking); only for services without SNAT.
    pub tcp_pickup: bool,
    /// Ready endpoints (`None` if there are none).
    pub ready: Option<Arc<BackendSet>>,
    /// Serving-but-terminating endpoints (`None` if there are none).
    pub serving: Option<Arc<BackendSet>>,
}

impl Service {
    /// The set new flows choose from: ready endpoints, else serving ones.
    #[inline]
    pub fn active_set(&self) -> Option<&BackendSet> {
        self.ready.as_deref().or(self.serving.as_deref())
    }

    /// Whether `backend` may take new flows (it is in the active set).
    pub fn accepts_new_flows(&self, backend: &Backend) -> bool {
        match backend.condition {
            EndpointCondition::Ready => self.ready.is_some(),
            EndpointCondition::ServingTerminating => self.ready.is_none(),
            EndpointCondition::Draining => false,
        }
    }
}

/// Roles of an address the gateway owns (forwards for, answers ICMP echo
/// for, and answers ARP for when it `announce`s it), or of a host address
/// (the kernel's, see [`crate::driver::hostpath`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct OwnedAddr {
    /// The port the address lives on (ARP is answered only there).
    pub port: PortId,
    pub vip: bool,
    pub node: bool,
    pub snat: bool,
    /// This instance answers ARP requests for the address and sends a
    /// gratuitous ARP when it starts to. Always true for node and SNAT
    /// addresses (they are this instance's own); for a VIP or externalIP,
    /// true when the builder's [`AnnounceFilter`] elects this instance. A
    /// VIP not announced is still forwarded (a stale ARP cache upstream
    /// may still send its traffic here during a failover).
    pub announce: bool,
    /// A host address: every frame for it (ARP whose target it is, any
    /// IPv4 packet to it that the pipeline parses) goes to the port's host
    /// path ([`Verdict::Host`](crate::packet::Verdict::Host)); the
    /// dataplane answers nothing for it. Only ever set alone.
    pub host: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PortInfo {
    pub mac: [u8; 6],
    pub mtu: u16,
    /// See [`PortSpec::mss_clamp`](crate::snapshot::PortSpec::mss_clamp).
    pub mss_clamp: Option<u16>,
}

/// A complete, immutable set of forwarding tables.
#[derive(Debug)]
pub struct Snapshot {
    pub generation: u64,
    pub ports: Vec<PortInfo>,
    pub owned: ShardedMap<Ipv4Addr, OwnedAddr>,
    /// The IPv6 addresses the gateway owns (as `owned`).
    pub owned6: ShardedMap<Ipv6Addr, OwnedAddr>,
    pub listeners: ShardedMap<ListenerKey, Listener>,
    /// The IPv6 listeners (as `listeners`).
    pub listeners6: ShardedMap<ListenerKey6, Listener>,
    /// The listeners and backend endpoints whose flows are owned by the
    /// client address alone (ClientIP affinity; see [`AffinityTuples`]).
    pub affinity: Arc<AffinityTuples>,
    /// Indexed by [`ServiceId`]; `None` for ids not in use.
    pub services: IdTable<Service>,
    /// Indexed by [`BackendId`]; `None` for ids not in use.
    pub backends: IdTable<Backend>,
    /// Configured neighbours `(port, address, MAC)`, loaded into the
    /// neighbour table as static entries.
    pub static_neighbours: Vec<(PortId, Ipv4Addr, [u8; 6])>,
    /// Configured IPv6 neighbours `(port, address, MAC)`, for the IPv6
    /// neighbour table.
    pub static_neighbours6: Vec<(PortId, Ipv6Addr, [u8; 6])>,
    /// Per port, the gateway address ARP requests are sent from (the first
    /// node or SNAT address on that port; `None`: 0.0.0.0, an ARP probe).
    pub arp_source: Vec<Option<Ipv4Addr>>,
    /// Per port, the first IPv6 node or SNAT address on it (the source of
    /// neighbour solicitations and of the ICMPv6 errors the gateway sends
    /// out of it).
    pub ndp_source: Vec<Option<Ipv6Addr>>,
}

impl Snapshot {
    /// A snapshot that owns nothing and forwards nothing.
    pub fn empty(ports: Vec<PortInfo>) -> Self {
        Snapshot {
            generation: 0,
            ports,
            owned: ShardedMap::new(),
            owned6: ShardedMap::new(),
            listeners: ShardedMap::new(),
            listeners6: ShardedMap::new(),
            affinity: Arc::default(),
            services: IdTable::new(),
            backends: IdTable::new(),
            static_neighbours: Vec::new(),
            static_neighbours6: Vec::new(),
            arp_source: Vec::new(),
            ndp_source: Vec::new(),
        }
    }

    #[inline]
    pub fn service(&self, id: ServiceId) -> Option<&Service> {
        self.services.get(id)
    }

    #[inline]
    pub fn backend(&self, id: BackendId) -> Option<&Backend> {
        self.backends.get(id)
    }

    #[inline]
    pub fn listener(&self, proto: Proto, addr: Ipv4Addr, port: u16) -> Option<&Listener> {
        self.listeners.get(&ListenerKey { proto, addr, port })
    }

    #[inline]
    pub fn listener6(&self, proto: Proto, addr: Ipv6Addr, port: u16) -> Option<&Listener> {
        self.listeners6.get(&ListenerKey6 { proto, addr, port })
    }

    #[inline]
    pub fn owned(&self, addr: Ipv4Addr) -> Option<&OwnedAddr> {
        self.owned.get(&addr)
    }

    #[inline]
    pub fn owned6(&self, addr: Ipv6Addr) -> Option<&OwnedAddr> {
        self.owned6.get(&addr)
    }

    /// The service with this name (cold path: linear).
    pub fn service_by_name(&self, name: &str) -> Option<&Service> {
        self.services.iter().flatten().find(|s| &*s.name == name)
    }
}
