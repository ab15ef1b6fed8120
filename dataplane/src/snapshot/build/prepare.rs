//! Steps 1 and 2 of a batch: which upserts change something, and every
//! changed service validated (listeners, endpoints) with its ids and its
//! backend sets (reused or to be built). Nothing of the builder changes
//! here: new ids are only peeked, [`Batch`] says how many to take.

use super::spec::family_of;
use super::tables::{BuiltSet, PendingSet, SetFingerprint};
use super::{Base, Problem, ServiceSpec, SnapshotBuilder};
use crate::flow::Proto;
use crate::maglev::table_size_for;
use crate::snapshot::{BackendId, EndpointCondition, ListenerKind, ServiceId};
use hashbrown::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// A service of the current batch, validated, before it is committed.
#[derive(Debug)]
pub(super) struct Prepared<'a> {
    pub(super) spec: &'a ServiceSpec,
    pub(super) name: Arc<str>,
    pub(super) id: ServiceId,
    pub(super) backend_ids: Vec<BackendId>,
    pub(super) ready: PendingSet,
    pub(super) serving: PendingSet,
}

/// A validated batch, before its tables are built and it is committed.
#[derive(Debug)]
pub(super) struct Batch<'a> {
    /// Names of the upserts (each once).
    pub(super) names: HashSet<&'a str>,
    /// The upserts that change something.
    pub(super) prepared: Vec<Prepared<'a>>,
    /// New service ids the batch takes (peeked so far).
    pub(super) new_services: usize,
    /// New backend ids the batch takes (peeked so far).
    pub(super) new_backends: usize,
}

impl SnapshotBuilder {
    /// Steps 1 and 2 of [`SnapshotBuilder::apply`] for `upserts` after
    /// `removals` on `base` (`rebase`: a new static part, every service is
    /// rebuilt): every problem found is added to `problems`.
    pub(super) fn prepare<'a>(
        &self,
        base: &Base,
        rebase: bool,
        upserts: &[&'a ServiceSpec],
        removals: &[&str],
        problems: &mut Vec<Problem>,
    ) -> Batch<'a> {
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
        let mut batch_listeners: HashMap<(Proto, IpAddr, u16), &str> = HashMap::new();
        let mut new_services = 0usize;
        let mut new_backends = 0usize;
        let mut prepared: Vec<Prepared<'a>> = Vec::with_capacity(changed.len());
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
            let family = svc.family();
            if svc
                .listeners
                .iter()
                .map(|l| l.0)
                .chain(svc.endpoints.iter().map(|e| e.addr.ip()))
                .any(|a| Some(family_of(a)) != family)
            {
                problems.push(Problem::MixedFamilies {
                    service: svc.name.clone(),
                });
            }
            for &(addr, port, kind) in &svc.listeners {
                let key = (svc.proto, addr, port);
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
                        .listener(key)
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
        Batch {
            names: batch_names,
            prepared,
            new_services,
            new_backends,
        }
    }
}

/// Endpoint addresses of one service, by linear search while few (the
/// common case), by hash beyond.
enum AddrIndex {
    Few(Vec<(SocketAddr, u32)>),
    Many(HashMap<SocketAddr, u32>),
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
    fn insert(&mut self, addr: SocketAddr, value: u32) -> bool {
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

    fn get(&self, addr: SocketAddr) -> Option<u32> {
        match self {
            AddrIndex::Few(v) => v.iter().find(|e| e.0 == addr).map(|e| e.1),
            AddrIndex::Many(m) => m.get(&addr).copied(),
        }
    }
}
