//! From a plain-data [`SnapshotSpec`] to a validated [`Snapshot`].
//!
//! The builder keeps state between builds: the id registry (stable service and
//! backend ids) and the Maglev tables of the previous build, which it reuses
//! for every backend set whose endpoints (address, weight) did not change, so
//! an endpoint change costs one table build, not one per service.

use super::{
    Backend, BackendGonePolicy, BackendId, BackendSet, EndpointCondition, Listener, ListenerKey,
    ListenerKind, NextHop, OwnedAddr, PortInfo, Service, ServiceId, Snapshot,
};
use crate::flow::Proto;
use crate::maglev::{MaglevBackend, MaglevError, MaglevTable};
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
    /// Maglev table size (prime), the same for every service.
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

/// Stable ids by key, with reuse of freed ids.
#[derive(Debug)]
struct IdRegistry<K> {
    ids: HashMap<K, u32>,
    free: Vec<u32>,
    next: u32,
}

impl<K: std::hash::Hash + Eq + Clone> IdRegistry<K> {
    fn new() -> Self {
        IdRegistry {
            ids: HashMap::new(),
            free: Vec::new(),
            next: 0,
        }
    }

    fn get_or_assign(&mut self, key: &K) -> u32 {
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let id = self.free.pop().unwrap_or_else(|| {
            let id = self.next;
            self.next += 1;
            id
        });
        self.ids.insert(key.clone(), id);
        id
    }

    /// Forget every key not in `live`; their ids become reusable.
    fn retain(&mut self, live: &HashSet<K>) {
        let free = &mut self.free;
        self.ids.retain(|k, id| {
            let keep = live.contains(k);
            if !keep {
                free.push(*id);
            }
            keep
        });
    }
}

/// Key of a reusable backend set: the service and which set.
type SetKey = (ServiceId, EndpointCondition);
/// What a backend set was built from: (address, weight, id) in input order.
type SetFingerprint = Vec<(SocketAddrV4, u32, BackendId)>;

/// Counters of the builder's work, for benches and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BuildStats {
    pub maglev_tables_built: u64,
    pub maglev_tables_reused: u64,
}

/// Builds snapshots with stable ids and Maglev table reuse across builds.
#[derive(Debug)]
pub struct SnapshotBuilder {
    generation: u64,
    service_ids: IdRegistry<Arc<str>>,
    backend_ids: IdRegistry<(ServiceId, SocketAddrV4)>,
    sets: HashMap<SetKey, (SetFingerprint, u32, Arc<BackendSet>)>,
    /// The spec of the last successful build or update.
    base: Option<SnapshotSpec>,
    pub stats: BuildStats,
}

impl Default for SnapshotBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl SnapshotBuilder {
    pub fn new() -> Self {
        SnapshotBuilder {
            generation: 0,
            service_ids: IdRegistry::new(),
            backend_ids: IdRegistry::new(),
            sets: HashMap::new(),
            base: None,
            stats: BuildStats::default(),
        }
    }

    /// Generation of the last snapshot built.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Apply `changes` to the services of the last built spec and build the
    /// next snapshot. As strict as [`Self::build`] of the resulting spec; on
    /// error nothing changes.
    pub fn update(&mut self, changes: &ServiceChanges) -> Result<Snapshot, BuildError> {
        let Some(base) = &self.base else {
            return Err(BuildError {
                problems: vec![Problem::NoBaseSpec],
            });
        };
        let mut spec = base.clone();
        let removed: HashSet<&str> = changes.removals.iter().map(String::as_str).collect();
        spec.services.retain(|s| !removed.contains(s.name.as_str()));
        let mut upserted = HashSet::new();
        for up in &changes.upserts {
            let first = upserted.insert(up.name.as_str());
            match spec.services.iter_mut().find(|s| s.name == up.name) {
                Some(s) if first => *s = up.clone(),
                // A second upsert of one name is a duplicate service.
                _ => spec.services.push(up.clone()),
            }
        }
        self.build(&spec)
    }

    /// Validate `spec` and build the next snapshot. On error nothing changes
    /// (ids and cached tables stay as they were).
    pub fn build(&mut self, spec: &SnapshotSpec) -> Result<Snapshot, BuildError> {
        let mut problems = Vec::new();
        validate_static(spec, &mut problems);
        if !problems.is_empty() {
            return Err(BuildError { problems });
        }

        // Work on copies of the registries so a failed build changes nothing.
        let mut service_ids = IdRegistry {
            ids: self.service_ids.ids.clone(),
            free: self.service_ids.free.clone(),
            next: self.service_ids.next,
        };
        let mut backend_ids = IdRegistry {
            ids: self.backend_ids.ids.clone(),
            free: self.backend_ids.free.clone(),
            next: self.backend_ids.next,
        };

        let owned = owned_addresses(spec);
        let mut listeners: HashMap<ListenerKey, Listener> = HashMap::new();
        let mut listener_owner: HashMap<ListenerKey, &str> = HashMap::new();
        let mut services: Vec<Option<Service>> = Vec::new();
        let mut backends: Vec<Option<Backend>> = Vec::new();
        let mut new_sets = HashMap::new();
        let mut live_services = HashSet::new();
        let mut live_backends = HashSet::new();
        let mut stats = self.stats;

        for svc in &spec.services {
            let name: Arc<str> = Arc::from(svc.name.as_str());
            if !live_services.insert(name.clone()) {
                problems.push(Problem::DuplicateService(svc.name.clone()));
                continue;
            }
            let sid = service_ids.get_or_assign(&name);

            for &(addr, port, kind) in &svc.listeners {
                let key = ListenerKey {
                    proto: svc.proto,
                    addr,
                    port,
                };
                let gateway_addr = owned.get(&addr);
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
                if let Some(other) = listener_owner.insert(key, &svc.name) {
                    problems.push(Problem::DuplicateListener {
                        service: svc.name.clone(),
                        other: other.to_owned(),
                        proto: svc.proto,
                        addr,
                        port,
                    });
                }
                listeners.insert(key, Listener { service: sid, kind });
            }

            let mut seen = HashSet::new();
            let mut ready = Vec::new();
            let mut serving = Vec::new();
            for ep in &svc.endpoints {
                if !seen.insert(ep.addr) {
                    problems.push(Problem::DuplicateEndpoint {
                        service: svc.name.clone(),
                        addr: ep.addr,
                    });
                    continue;
                }
                let key = (sid, ep.addr);
                let bid = backend_ids.get_or_assign(&key);
                live_backends.insert(key);
                place(
                    &mut backends,
                    bid,
                    Backend {
                        id: bid,
                        service: sid,
                        addr: ep.addr,
                        weight: ep.weight,
                        condition: ep.condition,
                        next_hop: resolve_next_hop(spec, *ep.addr.ip()),
                    },
                );
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

            let mut set_for = |cond: EndpointCondition, members: SetFingerprint| {
                if members.is_empty() {
                    return None;
                }
                let key = (sid, cond);
                if let Some((fp, size, set)) = self.sets.get(&key)
                    && *fp == members
                    && *size == spec.maglev_table_size
                {
                    stats.maglev_tables_reused += 1;
                    let set = Arc::clone(set);
                    new_sets.insert(key, (members, spec.maglev_table_size, Arc::clone(&set)));
                    return Some(set);
                }
                let input: Vec<MaglevBackend> = members
                    .iter()
                    .map(|&(addr, weight, _)| MaglevBackend { addr, weight })
                    .collect();
                match MaglevTable::build(&input, spec.maglev_table_size) {
                    Ok(table) => {
                        stats.maglev_tables_built += 1;
                        let set = Arc::new(BackendSet {
                            table,
                            backends: members.iter().map(|m| m.2).collect(),
                        });
                        new_sets.insert(key, (members, spec.maglev_table_size, Arc::clone(&set)));
                        Some(set)
                    }
                    Err(source) => {
                        problems.push(Problem::Maglev {
                            service: svc.name.clone(),
                            source,
                        });
                        None
                    }
                }
            };
            let ready = set_for(EndpointCondition::Ready, ready);
            let serving = set_for(EndpointCondition::ServingTerminating, serving);

            place(
                &mut services,
                sid,
                Service {
                    id: sid,
                    name,
                    proto: svc.proto,
                    snat: svc.snat,
                    affinity_timeout_ms: svc.affinity_timeout_ms,
                    tcp_backend_gone: svc.tcp_backend_gone,
                    ready,
                    serving,
                },
            );
        }

        if !problems.is_empty() {
            return Err(BuildError { problems });
        }

        service_ids.retain(&live_services);
        backend_ids.retain(&live_backends);
        self.service_ids = service_ids;
        self.backend_ids = backend_ids;
        self.sets = new_sets;
        self.stats = stats;
        self.generation += 1;
        self.base = Some(spec.clone());

        let mut owned = owned;
        for key in listeners.keys() {
            owned.entry(key.addr).or_insert(OwnedAddr {
                port: spec.vip_port,
                ..OwnedAddr::default()
            });
        }
        for (key, l) in &listeners {
            if matches!(l.kind, ListenerKind::Vip | ListenerKind::ExternalIp)
                && let Some(o) = owned.get_mut(&key.addr)
            {
                o.vip = true;
            }
        }

        Ok(Snapshot {
            generation: self.generation,
            ports: spec
                .ports
                .iter()
                .map(|p| PortInfo {
                    mac: p.mac,
                    mtu: p.mtu,
                })
                .collect(),
            owned,
            listeners,
            services,
            backends,
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
        })
    }
}

fn place<T>(v: &mut Vec<Option<T>>, id: u32, item: T) {
    let i = id as usize;
    if v.len() <= i {
        v.resize_with(i + 1, || None);
    }
    v[i] = Some(item);
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
        assert_eq!(b.stats.maglev_tables_reused, 1, "web's table is reused");
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
