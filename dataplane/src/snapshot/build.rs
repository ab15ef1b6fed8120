//! From a plain-data [`SnapshotSpec`] to a validated [`Snapshot`], in full
//! ([`SnapshotBuilder::build`], the static source's path and the reference)
//! or by delta ([`SnapshotBuilder::update`] with [`ServiceChanges`], for
//! sources that see one service change at a time, such as Kubernetes).
//!
//! The builder keeps state between builds: the static part of the last spec,
//! each service's spec with its stable ids and Maglev tables, and the
//! persistent tables of the last snapshot (see `table.rs`). The next snapshot
//! shares every table chunk and map shard it does not change, so a change
//! costs its service's listeners, backends and tables, not the number of
//! services:
//! * an unchanged service (same spec) is not touched; a changed one keeps
//!   its id, its unchanged endpoints keep their backend ids, and a backend
//!   set whose members and table size did not change keeps its table;
//! * listeners and owned addresses change by delta: a VIP or externalIP is
//!   owned (on the VIP port) while at least one listener uses it;
//! * a change of the static part (ports, addresses, routes, neighbours,
//!   Maglev size) rebuilds every service on the new static part, keeping ids.
//!
//! Validation is the same for both paths and all-or-nothing: every problem
//! is reported at once and a failed build or update changes nothing (ids are
//! only taken when the batch commits). A listener conflicts with another
//! service's unless that service leaves (is removed or replaced) in the same
//! batch.
//!
//! Maglev table sizes follow each set's backend count
//! ([`crate::maglev::table_size_for`], capped by the spec's size), so every
//! gateway picks the same size for the same set. Building many tables (a
//! build from scratch) may use several threads ([`SnapshotBuilder::with_threads`]),
//! each first running the caller's start hook
//! ([`SnapshotBuilder::with_thread_start`], e.g. to pin it to a core no
//! worker uses).

use super::table::{IdTable, ShardedMap};
use super::{
    Backend, BackendGonePolicy, BackendId, BackendSet, EndpointCondition, Listener, ListenerKey,
    ListenerKind, NextHop, OwnedAddr, PortInfo, Service, ServiceId, Snapshot,
};
use crate::flow::Proto;
use crate::maglev::{MaglevBackend, MaglevError, MaglevTable, table_size_for};
use crate::packet::PortId;
use hashbrown::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

/// One gateway port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortSpec {
    pub mac: [u8; 6],
    pub mtu: u16,
}

/// Why the gateway owns an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrRole {
    /// A node address: NodePorts listen here.
    Node,
    /// A source address for full NAT.
    Snat,
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
    fn contains(&self, addr: Ipv4Addr) -> bool {
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
/// [`SnapshotBuilder::update`]: the ports, addresses, routes, neighbours and
/// Maglev size stay as the last [`SnapshotBuilder::build`] set them.
///
/// `removals` are applied first, then `upserts`: an upsert replaces the
/// service of the same name (or adds it). Removing a name that is not
/// there is a no-op; naming a service twice in `upserts` is a
/// [`Problem::DuplicateService`].
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

/// One thing wrong with a spec. A build reports all of them at once.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("port {port}: {what} refers to a port that does not exist")]
    NoSuchPort { port: PortId, what: String },
    #[error("address {addr} is owned on two ports ({first} and {second})")]
    AddressOnTwoPorts {
        addr: Ipv4Addr,
        first: PortId,
        second: PortId,
    },
    #[error("service {0:?} is defined twice")]
    DuplicateService(String),
    #[error(
        "service {service:?}: listener {proto} {addr}:{port} is already used by service {other:?}"
    )]
    DuplicateListener {
        service: String,
        other: String,
        proto: Proto,
        addr: Ipv4Addr,
        port: u16,
    },
    #[error("service {service:?}: NodePort listener on {addr}, which is not a node address")]
    NodePortOffNode { service: String, addr: Ipv4Addr },
    #[error(
        "service {service:?}: listener on {addr}, which is a node or SNAT address of the gateway"
    )]
    VipIsGatewayAddress { service: String, addr: Ipv4Addr },
    #[error("service {service:?}: endpoint {addr} is listed twice")]
    DuplicateEndpoint { service: String, addr: SocketAddrV4 },
    #[error("service {service:?}: {source}")]
    Maglev {
        service: String,
        source: MaglevError,
    },
    #[error("route {dest}/{prefix_len}: prefix length above 32")]
    BadPrefix { dest: Ipv4Addr, prefix_len: u8 },
    #[error("an incremental update needs a successful full build first")]
    NoBaseSpec,
}

/// A spec that cannot be built, with every problem found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid snapshot spec: {}", .problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; "))]
pub struct BuildError {
    pub problems: Vec<Problem>,
}

/// Ids handed out from a free list, then from a counter. A batch first
/// *peeks* the ids it would take and commits them only when it succeeds, so
/// a failed build changes nothing.
#[derive(Debug, Default)]
struct IdPool {
    free: Vec<u32>,
    next: u32,
}

impl IdPool {
    /// The `k`-th (from 0) new id of the current batch.
    fn peek(&self, k: usize) -> u32 {
        match self.free.len().checked_sub(k + 1) {
            Some(i) => self.free[i],
            None => self.next + (k - self.free.len()) as u32,
        }
    }

    /// The batch took `taken` ids.
    fn commit(&mut self, taken: usize) {
        let from_free = taken.min(self.free.len());
        self.free.truncate(self.free.len() - from_free);
        self.next += (taken - from_free) as u32;
    }

    fn release(&mut self, id: u32) {
        self.free.push(id);
    }
}

/// What a backend set was built from: (address, weight, id) in input order.
type SetFingerprint = Vec<(SocketAddrV4, u32, BackendId)>;

/// A built backend set and what it was built from (table size, members).
#[derive(Debug, Clone)]
struct BuiltSet {
    table_size: u32,
    members: SetFingerprint,
    set: Arc<BackendSet>,
}

/// Counters of the builder's work, for benches and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BuildStats {
    pub maglev_tables_built: u64,
    pub maglev_tables_reused: u64,
}

/// The static part of a spec (everything but the services) and what is
/// derived from it.
#[derive(Debug)]
struct Base {
    /// The spec with `services` empty.
    statics: SnapshotSpec,
    /// Node and SNAT addresses.
    gateway: HashMap<Ipv4Addr, OwnedAddr>,
    ports: Vec<PortInfo>,
    static_neighbours: Vec<(PortId, Ipv4Addr, [u8; 6])>,
    arp_source: Vec<Option<Ipv4Addr>>,
}

impl Base {
    fn new(spec: &SnapshotSpec) -> Base {
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
                        .find(|a| usize::from(a.1) == p)
                        .map(|a| a.0)
                })
                .collect(),
            statics,
        }
    }

    /// Whether `spec` has the same static part.
    fn same_statics(&self, spec: &SnapshotSpec) -> bool {
        let s = &self.statics;
        s.ports == spec.ports
            && s.vip_port == spec.vip_port
            && s.addresses == spec.addresses
            && s.routes == spec.routes
            && s.neighbours == spec.neighbours
            && s.maglev_table_size == spec.maglev_table_size
    }
}

/// What the builder keeps of a service it built.
#[derive(Debug)]
struct ServiceState {
    id: ServiceId,
    name: Arc<str>,
    spec: ServiceSpec,
    /// The backend id of each endpoint of `spec`, in order.
    backend_ids: Vec<BackendId>,
    ready: Option<BuiltSet>,
    serving: Option<BuiltSet>,
}

/// A backend set of a service being built: absent, reused or to be built.
#[derive(Debug)]
enum PendingSet {
    None,
    Ready(BuiltSet),
    Build {
        table_size: u32,
        members: SetFingerprint,
    },
}

/// A service of the current batch, validated, before it is committed.
#[derive(Debug)]
struct Prepared<'a> {
    spec: &'a ServiceSpec,
    name: Arc<str>,
    id: ServiceId,
    backend_ids: Vec<BackendId>,
    ready: PendingSet,
    serving: PendingSet,
}

/// Builds snapshots with stable ids, keeping what it built so that the next
/// snapshot costs what changed.
///
/// State kept between builds: the static part of the last spec, every
/// service's spec with its ids and Maglev tables, and the persistent tables
/// of the last snapshot ([`IdTable`], [`ShardedMap`]), which the next
/// snapshot shares except where something changed. A service whose spec did
/// not change costs nothing (an update) or one comparison (a full build); a
/// changed service costs its own listeners, backends and tables.
#[derive(Debug)]
pub struct SnapshotBuilder {
    generation: u64,
    base: Option<Base>,
    services: HashMap<Arc<str>, ServiceState>,
    service_ids: IdPool,
    backend_ids: IdPool,
    listeners: ShardedMap<ListenerKey, Listener>,
    owned: ShardedMap<Ipv4Addr, OwnedAddr>,
    /// Listeners per address that is owned only because of them (a VIP or
    /// externalIP): the address is owned while this is above 0.
    listener_addrs: HashMap<Ipv4Addr, u32>,
    service_table: IdTable<Service>,
    backend_table: IdTable<Backend>,
    /// Threads for building Maglev tables when many are due (1: none).
    threads: usize,
    /// Run first by each of those threads, with its index.
    thread_start: Option<ThreadStart>,
    pub stats: BuildStats,
}

/// The hook a table-building thread runs first (given its index).
#[derive(Clone)]
struct ThreadStart(Arc<dyn Fn(usize) + Send + Sync>);

impl std::fmt::Debug for ThreadStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ThreadStart")
    }
}

impl Default for SnapshotBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// Below this many tables to build, one thread builds them all.
const PARALLEL_MIN_TABLES: usize = 256;

impl SnapshotBuilder {
    pub fn new() -> Self {
        SnapshotBuilder {
            generation: 0,
            base: None,
            services: HashMap::new(),
            service_ids: IdPool::default(),
            backend_ids: IdPool::default(),
            listeners: ShardedMap::new(),
            owned: ShardedMap::new(),
            listener_addrs: HashMap::new(),
            service_table: IdTable::new(),
            backend_table: IdTable::new(),
            threads: 1,
            thread_start: None,
            stats: BuildStats::default(),
        }
    }

    /// Build Maglev tables on up to `threads` threads when a build has many
    /// to do (a build from scratch); 1 (the default) keeps to the caller's
    /// thread. The result does not depend on it.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// Run `hook(index)` first in each table-building thread
    /// (`index < threads`), e.g. to pin it to a core. The caller's own
    /// thread does not run it.
    pub fn with_thread_start(mut self, hook: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.thread_start = Some(ThreadStart(Arc::new(hook)));
        self
    }

    /// Threads a build of many tables uses.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Generation of the last snapshot built.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Validate `spec` and build the next snapshot. On error nothing changes
    /// (ids and cached tables stay as they were).
    ///
    /// Services whose spec is unchanged since the last build are kept as
    /// they are (when the static part is unchanged too); the others are
    /// rebuilt, those missing are removed. This is the reference for
    /// [`Self::update`].
    pub fn build(&mut self, spec: &SnapshotSpec) -> Result<Snapshot, BuildError> {
        let mut problems = Vec::new();
        validate_static(spec, &mut problems);
        if !problems.is_empty() {
            return Err(BuildError { problems });
        }
        let new_base = match &self.base {
            Some(base) if base.same_statics(spec) => None,
            _ => Some(Base::new(spec)),
        };
        let listed: HashSet<&str> = spec.services.iter().map(|s| s.name.as_str()).collect();
        let gone: Vec<Arc<str>> = self
            .services
            .keys()
            .filter(|name| !listed.contains(&***name))
            .cloned()
            .collect();
        let removals: Vec<&str> = gone.iter().map(|name| &**name).collect();
        let upserts: Vec<&ServiceSpec> = spec.services.iter().collect();
        self.apply(new_base, &upserts, &removals)
    }

    /// Apply `changes` to the services of the last built spec and build the
    /// next snapshot, at a cost proportional to the change. Exactly as strict
    /// as [`Self::build`] of the resulting spec; on error nothing changes.
    pub fn update(&mut self, changes: &ServiceChanges) -> Result<Snapshot, BuildError> {
        if self.base.is_none() {
            return Err(BuildError {
                problems: vec![Problem::NoBaseSpec],
            });
        }
        let removals: Vec<&str> = changes.removals.iter().map(String::as_str).collect();
        let upserts: Vec<&ServiceSpec> = changes.upserts.iter().collect();
        self.apply(None, &upserts, &removals)
    }

    /// Remove `removals` (absent names are ignored), then add or replace
    /// `upserts`; with `new_base`, every kept service is rebuilt on it.
    fn apply(
        &mut self,
        new_base: Option<Base>,
        upserts: &[&ServiceSpec],
        removals: &[&str],
    ) -> Result<Snapshot, BuildError> {
        let rebase = new_base.is_some();
        let Some(base) = new_base.as_ref().or(self.base.as_ref()) else {
            return Err(BuildError {
                problems: vec![Problem::NoBaseSpec],
            });
        };
        let mut problems = Vec::new();

        // 1. Which upserts change something; duplicates.
        let removed: HashSet<&str> = removals.iter().copied().collect();
        let mut batch_names: HashSet<&str> = HashSet::with_capacity(upserts.len());
        let mut changed: Vec<&ServiceSpec> = Vec::with_capacity(upserts.len());
        for &svc in upserts {
            if !batch_names.insert(svc.name.as_str()) {
                problems.push(Problem::DuplicateService(svc.name.clone()));
                continue;
            }
            let unchanged = !rebase
                && !removed.contains(svc.name.as_str())
                && self
                    .services
                    .get(svc.name.as_str())
                    .is_some_and(|s| s.spec == *svc);
            if !unchanged {
                changed.push(svc);
            }
        }
        // Services whose listeners go away in this batch (all on a rebase).
        let changed_names: HashSet<&str> = changed.iter().map(|s| s.name.as_str()).collect();
        let leaving = |name: &str| rebase || removed.contains(name) || changed_names.contains(name);

        // 2. Validate and prepare every changed service.
        let mut batch_listeners: HashMap<ListenerKey, &str> = HashMap::new();
        let mut new_services = 0usize;
        let mut new_backends = 0usize;
        let mut prepared: Vec<Prepared<'_>> = Vec::with_capacity(changed.len());
        for &svc in &changed {
            let old = self.services.get(svc.name.as_str());
            let (id, name) = match old {
                Some(old) => (old.id, Arc::clone(&old.name)),
                None => {
                    new_services += 1;
                    (
                        self.service_ids.peek(new_services - 1),
                        Arc::from(svc.name.as_str()),
                    )
                }
            };
            for &(addr, port, kind) in &svc.listeners {
                let key = ListenerKey {
                    proto: svc.proto,
                    addr,
                    port,
                };
                let gateway_addr = base.gateway.get(&addr);
                match kind {
                    ListenerKind::NodePort if !gateway_addr.is_some_and(|o| o.node) => {
                        problems.push(Problem::NodePortOffNode {
                            service: svc.name.clone(),
                            addr,
                        });
                    }
                    ListenerKind::Vip | ListenerKind::ExternalIp
                        if gateway_addr.is_some_and(|o| o.node || o.snat) =>
                    {
                        problems.push(Problem::VipIsGatewayAddress {
                            service: svc.name.clone(),
                            addr,
                        });
                    }
                    _ => {}
                }
                let other = match batch_listeners.insert(key, &svc.name) {
                    Some(other) => Some(other),
                    None if rebase => None,
                    None => self
                        .listeners
                        .get(&key)
                        .and_then(|l| self.service_table.get(l.service))
                        .map(|s| &*s.name)
                        .filter(|owner| !leaving(owner)),
                };
                if let Some(other) = other {
                    problems.push(Problem::DuplicateListener {
                        service: svc.name.clone(),
                        other: other.to_owned(),
                        proto: svc.proto,
                        addr,
                        port,
                    });
                }
            }

            let mut backend_ids = Vec::with_capacity(svc.endpoints.len());
            let mut ready = Vec::new();
            let mut serving = Vec::new();
            let mut seen = AddrIndex::new(svc.endpoints.len());
            let old_ids = old.map(|old| {
                let mut index = AddrIndex::new(old.spec.endpoints.len());
                for (ep, &bid) in old.spec.endpoints.iter().zip(&old.backend_ids) {
                    index.insert(ep.addr, bid);
                }
                index
            });
            for ep in &svc.endpoints {
                if !seen.insert(ep.addr, 0) {
                    problems.push(Problem::DuplicateEndpoint {
                        service: svc.name.clone(),
                        addr: ep.addr,
                    });
                    continue;
                }
                let known = old_ids.as_ref().and_then(|index| index.get(ep.addr));
                let bid = known.unwrap_or_else(|| {
                    new_backends += 1;
                    self.backend_ids.peek(new_backends - 1)
                });
                backend_ids.push(bid);
                if ep.weight > 0 {
                    match ep.condition {
                        EndpointCondition::Ready => ready.push((ep.addr, ep.weight, bid)),
                        EndpointCondition::ServingTerminating => {
                            serving.push((ep.addr, ep.weight, bid))
                        }
                        EndpointCondition::Draining => {}
                    }
                }
            }
            let cap = base.statics.maglev_table_size;
            let pending = |members: SetFingerprint, previous: Option<&BuiltSet>| {
                if members.is_empty() {
                    return PendingSet::None;
                }
                let table_size = table_size_for(members.len(), cap);
                match previous {
                    Some(p) if p.table_size == table_size && p.members == members => {
                        PendingSet::Ready(p.clone())
                    }
                    _ => PendingSet::Build {
                        table_size,
                        members,
                    },
                }
            };
            prepared.push(Prepared {
                spec: svc,
                name,
                id,
                backend_ids,
                ready: pending(ready, old.and_then(|o| o.ready.as_ref())),
                serving: pending(serving, old.and_then(|o| o.serving.as_ref())),
            });
        }

        // 3. Maglev tables (the bulk of a build from scratch).
        let mut stats = self.stats;
        stats.maglev_tables_reused += prepared
            .iter()
            .flat_map(|p| [&p.ready, &p.serving])
            .filter(|s| matches!(s, PendingSet::Ready(_)))
            .count() as u64;
        let jobs: Vec<(&str, &mut PendingSet)> = prepared
            .iter_mut()
            .flat_map(|p| {
                let name = p.spec.name.as_str();
                [(name, &mut p.ready), (name, &mut p.serving)]
            })
            .filter(|(_, s)| matches!(s, PendingSet::Build { .. }))
            .collect();
        stats.maglev_tables_built += jobs.len() as u64;
        for (service, source) in build_tables(jobs, self.threads, self.thread_start.as_ref()) {
            problems.push(Problem::Maglev { service, source });
        }
        if !problems.is_empty() {
            return Err(BuildError { problems });
        }

        // 4. Commit: nothing below can fail.
        self.service_ids.commit(new_services);
        self.backend_ids.commit(new_backends);
        if let Some(new_base) = new_base {
            self.listeners = ShardedMap::new();
            self.owned = new_base.gateway.iter().map(|(a, o)| (*a, *o)).collect();
            self.listener_addrs.clear();
            self.base = Some(new_base);
        }
        let vip_port = self.base.as_ref().map_or(0, |b| b.statics.vip_port);
        for name in removals {
            if batch_names.contains(name) {
                continue; // replaced below, keeping its ids
            }
            if let Some(old) = self.services.remove(*name) {
                self.forget_listeners(&old.spec, old.id, rebase);
                for &bid in &old.backend_ids {
                    self.backend_table.set(bid, None);
                    self.backend_ids.release(bid);
                }
                self.service_table.set(old.id, None);
                self.service_ids.release(old.id);
            }
        }
        for p in prepared {
            if let Some(old) = self.services.remove(&*p.name) {
                self.forget_listeners(&old.spec, old.id, rebase);
                for &bid in &old.backend_ids {
                    if !p.backend_ids.contains(&bid) {
                        self.backend_table.set(bid, None);
                        self.backend_ids.release(bid);
                    }
                }
            }
            for &(addr, port, kind) in &p.spec.listeners {
                let key = ListenerKey {
                    proto: p.spec.proto,
                    addr,
                    port,
                };
                self.listeners.insert(
                    key,
                    Listener {
                        service: p.id,
                        kind,
                    },
                );
                if self
                    .base
                    .as_ref()
                    .is_some_and(|b| b.gateway.contains_key(&addr))
                {
                    continue;
                }
                let count = self.listener_addrs.entry(addr).or_insert(0);
                *count += 1;
                if *count == 1 {
                    self.owned.insert(
                        addr,
                        OwnedAddr {
                            port: vip_port,
                            vip: true,
                            ..OwnedAddr::default()
                        },
                    );
                }
            }
            // Duplicates were rejected above: every endpoint has its id.
            for (ep, &bid) in p.spec.endpoints.iter().zip(&p.backend_ids) {
                let next_hop = self
                    .base
                    .as_ref()
                    .and_then(|b| resolve_next_hop(&b.statics, *ep.addr.ip()));
                self.backend_table.set(
                    bid,
                    Some(Backend {
                        id: bid,
                        service: p.id,
                        addr: ep.addr,
                        weight: ep.weight,
                        condition: ep.condition,
                        next_hop,
                    }),
                );
            }
            let built = |set: PendingSet| match set {
                PendingSet::Ready(b) => Some(b),
                PendingSet::None | PendingSet::Build { .. } => None,
            };
            let ready = built(p.ready);
            let serving = built(p.serving);
            self.service_table.set(
                p.id,
                Some(Service {
                    id: p.id,
                    name: Arc::clone(&p.name),
                    proto: p.spec.proto,
                    snat: p.spec.snat,
                    affinity_timeout_ms: p.spec.affinity_timeout_ms,
                    tcp_backend_gone: p.spec.tcp_backend_gone,
                    ready: ready.as_ref().map(|b| Arc::clone(&b.set)),
                    serving: serving.as_ref().map(|b| Arc::clone(&b.set)),
                }),
            );
            self.services.insert(
                Arc::clone(&p.name),
                ServiceState {
                    id: p.id,
                    name: p.name,
                    spec: p.spec.clone(),
                    backend_ids: p.backend_ids,
                    ready,
                    serving,
                },
            );
        }
        self.stats = stats;
        self.generation += 1;
        Ok(self.snapshot())
    }

    /// Remove the listeners `spec` registered for service `id` (none are
    /// left after a rebase), and the addresses owned only for them.
    fn forget_listeners(&mut self, spec: &ServiceSpec, id: ServiceId, rebase: bool) {
        if rebase {
            return;
        }
        for &(addr, port, _) in &spec.listeners {
            let key = ListenerKey {
                proto: spec.proto,
                addr,
                port,
            };
            if self.listeners.get(&key).is_some_and(|l| l.service == id) {
                self.listeners.remove(&key);
            }
            if let Some(count) = self.listener_addrs.get_mut(&addr) {
                *count -= 1;
                if *count == 0 {
                    self.listener_addrs.remove(&addr);
                    self.owned.remove(&addr);
                }
            }
        }
    }

    /// The current tables as a snapshot (shares them with the builder).
    fn snapshot(&self) -> Snapshot {
        let (ports, static_neighbours, arp_source) = match &self.base {
            Some(b) => (
                b.ports.clone(),
                b.static_neighbours.clone(),
                b.arp_source.clone(),
            ),
            None => Default::default(),
        };
        Snapshot {
            generation: self.generation,
            ports,
            owned: self.owned.clone(),
            listeners: self.listeners.clone(),
            services: self.service_table.clone(),
            backends: self.backend_table.clone(),
            static_neighbours,
            arp_source,
        }
    }
}

/// Build the tables of `jobs` (each a [`PendingSet::Build`], turned into
/// [`PendingSet::Ready`]), on up to `threads` threads when there are many.
/// Returns the failures as (service name, error); failed jobs stay as they
/// were.
fn build_tables(
    mut jobs: Vec<(&str, &mut PendingSet)>,
    threads: usize,
    thread_start: Option<&ThreadStart>,
) -> Vec<(String, MaglevError)> {
    let threads = threads.min(jobs.len() / PARALLEL_MIN_TABLES).max(1);
    if threads == 1 {
        return build_some(&mut jobs);
    }
    let per_thread = jobs.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .chunks_mut(per_thread)
            .enumerate()
            .map(|(index, chunk)| {
                scope.spawn(move || {
                    if let Some(ThreadStart(hook)) = thread_start {
                        hook(index);
                    }
                    build_some(chunk)
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

fn build_some(jobs: &mut [(&str, &mut PendingSet)]) -> Vec<(String, MaglevError)> {
    let mut failures = Vec::new();
    let mut input: Vec<MaglevBackend> = Vec::new();
    for (service, job) in jobs.iter_mut() {
        let PendingSet::Build {
            table_size,
            members,
        } = &**job
        else {
            continue;
        };
        input.clear();
        input.extend(
            members
                .iter()
                .map(|&(addr, weight, _)| MaglevBackend { addr, weight }),
        );
        match MaglevTable::build(&input, *table_size) {
            Ok(table) => {
                let set = Arc::new(BackendSet {
                    table,
                    backends: members.iter().map(|m| m.2).collect(),
                });
                let table_size = *table_size;
                let PendingSet::Build { members, .. } =
                    std::mem::replace(&mut **job, PendingSet::None)
                else {
                    continue;
                };
                **job = PendingSet::Ready(BuiltSet {
                    table_size,
                    members,
                    set,
                });
            }
            Err(source) => failures.push(((*service).to_owned(), source)),
        }
    }
    failures
}

/// Endpoint addresses of one service, by linear search while few (the
/// common case), by hash beyond.
enum AddrIndex {
    Few(Vec<(SocketAddrV4, u32)>),
    Many(HashMap<SocketAddrV4, u32>),
}

impl AddrIndex {
    const FEW: usize = 32;

    fn new(capacity: usize) -> Self {
        if capacity <= Self::FEW {
            AddrIndex::Few(Vec::with_capacity(capacity))
        } else {
            AddrIndex::Many(HashMap::with_capacity(capacity))
        }
    }

    /// Insert unless present; whether it was inserted.
    fn insert(&mut self, addr: SocketAddrV4, value: u32) -> bool {
        match self {
            AddrIndex::Few(v) => {
                if v.iter().any(|e| e.0 == addr) {
                    return false;
                }
                v.push((addr, value));
                true
            }
            AddrIndex::Many(m) => match m.entry(addr) {
                hashbrown::hash_map::Entry::Occupied(_) => false,
                hashbrown::hash_map::Entry::Vacant(e) => {
                    e.insert(value);
                    true
                }
            },
        }
    }

    fn get(&self, addr: SocketAddrV4) -> Option<u32> {
        match self {
            AddrIndex::Few(v) => v.iter().find(|e| e.0 == addr).map(|e| e.1),
            AddrIndex::Many(m) => m.get(&addr).copied(),
        }
    }
}

fn validate_static(spec: &SnapshotSpec, problems: &mut Vec<Problem>) {
    let ports = spec.ports.len();
    let mut check_port = |port: PortId, what: String| {
        if port as usize >= ports {
            problems.push(Problem::NoSuchPort { port, what });
        }
    };
    check_port(spec.vip_port, "vip_port".to_owned());
    for &(addr, port, _) in &spec.addresses {
        check_port(port, format!("address {addr}"));
    }
    for r in &spec.routes {
        check_port(r.port, format!("route {}/{}", r.dest, r.prefix_len));
    }
    for r in &spec.routes {
        if r.prefix_len > 32 {
            problems.push(Problem::BadPrefix {
                dest: r.dest,
                prefix_len: r.prefix_len,
            });
        }
    }
    let mut seen: HashMap<Ipv4Addr, PortId> = HashMap::new();
    for &(addr, port, _) in &spec.addresses {
        if let Some(&first) = seen.get(&addr)
            && first != port
        {
            problems.push(Problem::AddressOnTwoPorts {
                addr,
                first,
                second: port,
            });
        }
        seen.insert(addr, port);
    }
}

fn owned_addresses(spec: &SnapshotSpec) -> HashMap<Ipv4Addr, OwnedAddr> {
    let mut owned: HashMap<Ipv4Addr, OwnedAddr> = HashMap::new();
    for &(addr, port, role) in &spec.addresses {
        let o = owned.entry(addr).or_insert(OwnedAddr {
            port,
            ..OwnedAddr::default()
        });
        match role {
            AddrRole::Node => o.node = true,
            AddrRole::Snat => o.snat = true,
        }
    }
    owned
}

/// Longest-prefix route to `addr`: its port and the neighbour to send to.
fn resolve_next_hop(spec: &SnapshotSpec, addr: Ipv4Addr) -> Option<NextHop> {
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

#[cfg(test)]
mod tests {
    use super::*;

    const OUT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const IN_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn ep(last: u8, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::new(10, 1, 0, last), port)
    }

    fn spec(services: Vec<ServiceSpec>) -> SnapshotSpec {
        SnapshotSpec {
            ports: vec![
                PortSpec {
                    mac: OUT_MAC,
                    mtu: 1500,
                },
                PortSpec {
                    mac: IN_MAC,
                    mtu: 1500,
                },
            ],
            vip_port: 0,
            addresses: vec![
                (Ipv4Addr::new(192, 0, 2, 1), 0, AddrRole::Node),
                (Ipv4Addr::new(10, 1, 0, 1), 1, AddrRole::Snat),
            ],
            routes: vec![Route {
                dest: Ipv4Addr::new(10, 1, 0, 0),
                prefix_len: 24,
                port: 1,
                via: None,
            }],
            neighbours: (10..20)
                .map(|i| NeighbourSpec {
                    addr: Ipv4Addr::new(10, 1, 0, i),
                    mac: [2, 0, 0, 1, 0, i],
                })
                .collect(),
            services,
            maglev_table_size: 251,
        }
    }

    fn web(endpoints: &[u8]) -> ServiceSpec {
        let mut s = ServiceSpec::new("web", Proto::Tcp, Ipv4Addr::new(203, 0, 113, 10), 80);
        for &e in endpoints {
            s = s.endpoint(ep(e, 8080));
        }
        s
    }

    #[test]
    fn ids_are_stable_and_unchanged_tables_are_reused() {
        let mut b = SnapshotBuilder::new();
        let s1 = b.build(&spec(vec![web(&[10, 11, 12])])).unwrap();
        let id11 = s1
            .backends
            .iter()
            .flatten()
            .find(|be| be.addr == ep(11, 8080))
            .unwrap()
            .id;
        let dns = ServiceSpec::new("dns", Proto::Udp, Ipv4Addr::new(203, 0, 113, 11), 53)
            .endpoint(ep(13, 53));
        let s2 = b
            .build(&spec(vec![web(&[10, 11, 12]), dns.clone()]))
            .unwrap();
        assert_eq!(s2.generation, s1.generation + 1);
        assert_eq!(
            b.stats.maglev_tables_built, 2,
            "web's table is kept, dns's built"
        );
        assert_eq!(s2.backend(id11).unwrap().addr, ep(11, 8080));
        let s3 = b.build(&spec(vec![web(&[11, 12]), dns])).unwrap();
        assert_eq!(s3.backend(id11).unwrap().addr, ep(11, 8080));
        assert_eq!(b.stats.maglev_tables_built, 3);
        assert_eq!(s3.backends.iter().flatten().count(), 3);
    }

    #[test]
    fn owned_addresses_and_next_hops_are_resolved() {
        let mut b = SnapshotBuilder::new();
        let s = b.build(&spec(vec![web(&[10])])).unwrap();
        let vip = s.owned(Ipv4Addr::new(203, 0, 113, 10)).unwrap();
        assert!(vip.vip && vip.port == 0);
        assert!(s.owned(Ipv4Addr::new(10, 1, 0, 1)).unwrap().snat);
        let be = s.backends.iter().flatten().next().unwrap();
        assert_eq!(
            be.next_hop,
            Some(NextHop {
                port: 1,
                addr: Ipv4Addr::new(10, 1, 0, 10)
            })
        );
        assert!(s.static_neighbours.contains(&(
            1,
            Ipv4Addr::new(10, 1, 0, 10),
            [2, 0, 0, 1, 0, 10]
        )));
        assert_eq!(
            s.arp_source,
            vec![
                Some(Ipv4Addr::new(192, 0, 2, 1)),
                Some(Ipv4Addr::new(10, 1, 0, 1))
            ]
        );
    }

    #[test]
    fn terminating_endpoints_form_the_fallback_set() {
        let mut svc = web(&[10]);
        svc.endpoints[0].condition = EndpointCondition::ServingTerminating;
        svc.endpoints.push(EndpointSpec {
            addr: ep(11, 8080),
            weight: 1,
            condition: EndpointCondition::Ready,
        });
        let s = SnapshotBuilder::new().build(&spec(vec![svc])).unwrap();
        let svc = s.service_by_name("web").unwrap();
        assert_eq!(svc.ready.as_ref().unwrap().backends.len(), 1);
        assert_eq!(svc.serving.as_ref().unwrap().backends.len(), 1);
        let active = svc.active_set().unwrap();
        let ready_id = active.backends[0];
        assert_eq!(s.backend(ready_id).unwrap().addr, ep(11, 8080));
    }

    #[test]
    fn every_problem_is_reported_at_once_and_nothing_changes() {
        let mut b = SnapshotBuilder::new();
        let good = b.build(&spec(vec![web(&[10])])).unwrap();
        let mut dup = web(&[10, 10]);
        dup.listeners.push((
            Ipv4Addr::new(198, 51, 100, 1),
            30080,
            ListenerKind::NodePort,
        ));
        let mut bad = spec(vec![dup, web(&[11])]);
        bad.maglev_table_size = 250;
        let err = b.build(&bad).unwrap_err();
        let kinds: Vec<_> = err.problems.iter().map(std::mem::discriminant).collect();
        assert!(
            err.problems
                .contains(&Problem::DuplicateService("web".into()))
        );
        assert!(
            err.problems
                .iter()
                .any(|p| matches!(p, Problem::DuplicateEndpoint { .. }))
        );
        assert!(
            err.problems
                .iter()
                .any(|p| matches!(p, Problem::NodePortOffNode { .. }))
        );
        assert!(
            err.problems
                .iter()
                .any(|p| matches!(p, Problem::Maglev { .. }))
        );
        assert!(kinds.len() >= 4);
        assert_eq!(b.generation(), good.generation);
    }
}
