//! Which flows are owned by the client address alone ([`AffinityTuples`],
//! the snapshot's part of flow ownership, `crate::steering`): every other
//! client flow is owned by the client address and port
//! ([`crate::steering::client_port_hash`]), so one client's connections
//! spread over the workers.
//!
//! ClientIP session affinity keeps its table per worker, so a service
//! with affinity must see all of a client's connections on one worker: its
//! listeners are *address-steered*. A service without SNAT (the client
//! address preserved) has its backends reply straight to the client, and
//! that reply must reach the worker of the client's direction: so the
//! backend endpoints `(proto, address, port)` of an address-steered
//! service without SNAT are address-steered too (the reply's source).
//!
//! An endpoint shared by an address-steered service and another service
//! without SNAT cannot tell their replies apart, so it counts as
//! address-steered, and with it every service without SNAT that has it as
//! an endpoint (its listeners and all its endpoints), to a fixed point:
//! both directions of every flow then agree. Replies to an SNAT address
//! stay steered by the SNAT port's slice, so endpoints of SNAT services are
//! never listed.
//!
//! Invariant: for a built snapshot, a listener is in [`AffinityTuples`]
//! exactly when its service is address-steered, and an endpoint exactly
//! when some service without SNAT that is address-steered has it.

use super::{Backend, IdTable, Listener, ListenerKeyOf, Service, ServiceId, ShardedMap};
use crate::flow::Proto;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

type Set<A> = ShardedMap<ListenerKeyOf<A>, ()>;

/// The address-steered listeners and backend endpoints of a snapshot (see
/// the module docs), both families.
#[derive(Clone, Debug, Default)]
pub struct AffinityTuples {
    listeners: Set<Ipv4Addr>,
    endpoints: Set<Ipv4Addr>,
    listeners6: Set<Ipv6Addr>,
    endpoints6: Set<Ipv6Addr>,
}

impl AffinityTuples {
    /// The tuples of the services, their backends and the listeners (both
    /// families) of a snapshot. Cold path (a snapshot build): walks the
    /// services, and only when one has ClientIP affinity the backends and
    /// the listeners.
    pub fn of(
        services: &IdTable<Service>,
        backends: &IdTable<Backend>,
        listeners: &ShardedMap<ListenerKeyOf<Ipv4Addr>, Listener>,
        listeners6: &ShardedMap<ListenerKeyOf<Ipv6Addr>, Listener>,
    ) -> Self {
        let mut steered: HashSet<ServiceId> = services
            .iter()
            .flatten()
            .filter(|s| s.affinity_timeout_ms.is_some())
            .map(|s| s.id)
            .collect();
        if steered.is_empty() {
            return Self::default();
        }
        // The endpoints of services without SNAT, with their services.
        let mut shared: HashMap<(Proto, SocketAddr), Vec<ServiceId>> = HashMap::new();
        for b in backends.iter().flatten() {
            if let Some(s) = services.get(b.service).filter(|s| !s.snat) {
                shared.entry((s.proto, b.addr)).or_default().push(s.id);
            }
        }
        // To the fixed point: an endpoint with one steered service steers
        // all of its services.
        loop {
            let mut grew = false;
            for ids in shared.values() {
                if ids.iter().any(|id| steered.contains(id)) {
                    for id in ids {
                        grew |= steered.insert(*id);
                    }
                }
            }
            if !grew {
                break;
            }
        }
        let mut t = Self::default();
        for ((proto, addr), ids) in &shared {
            if ids.iter().any(|id| steered.contains(id)) {
                let port = addr.port();
                match addr.ip() {
                    IpAddr::V4(addr) => t.endpoints.insert(
                        ListenerKeyOf {
                            proto: *proto,
                            addr,
                            port,
                        },
                        (),
                    ),
                    IpAddr::V6(addr) => t.endpoints6.insert(
                        ListenerKeyOf {
                            proto: *proto,
                            addr,
                            port,
                        },
                        (),
                    ),
                };
            }
        }
        t.listeners = of_services(listeners, &steered);
        t.listeners6 = of_services(listeners6, &steered);
        t
    }

    /// Whether a client of listener `(proto, addr, port)` is owned by its
    /// address alone.
    #[inline]
    pub fn listener<A: Copy + Eq + Hash>(&self, proto: Proto, addr: A, port: u16) -> bool
    where
        Self: Family<A>,
    {
        let set = <Self as Family<A>>::listener_set(self);
        !set.is_empty() && set.contains_key(&ListenerKeyOf { proto, addr, port })
    }

    /// Whether a reply from backend endpoint `(proto, addr, port)` goes to
    /// the worker of its client's address alone.
    #[inline]
    pub fn endpoint<A: Copy + Eq + Hash>(&self, proto: Proto, addr: A, port: u16) -> bool
    where
        Self: Family<A>,
    {
        let set = <Self as Family<A>>::endpoint_set(self);
        !set.is_empty() && set.contains_key(&ListenerKeyOf { proto, addr, port })
    }

    /// The IPv4 address-steered listeners, in no particular order.
    pub fn listeners(&self) -> impl Iterator<Item = (Proto, Ipv4Addr, u16)> + '_ {
        tuples(&self.listeners)
    }

    /// The IPv4 address-steered backend endpoints, in no particular order.
    pub fn endpoints(&self) -> impl Iterator<Item = (Proto, Ipv4Addr, u16)> + '_ {
        tuples(&self.endpoints)
    }

    /// The IPv6 address-steered listeners, in no particular order.
    pub fn listeners6(&self) -> impl Iterator<Item = (Proto, Ipv6Addr, u16)> + '_ {
        tuples(&self.listeners6)
    }

    /// The IPv6 address-steered backend endpoints, in no particular order.
    pub fn endpoints6(&self) -> impl Iterator<Item = (Proto, Ipv6Addr, u16)> + '_ {
        tuples(&self.endpoints6)
    }
}

/// The sets of one address family.
pub trait Family<A> {
    fn listener_set(&self) -> &Set<A>;
    fn endpoint_set(&self) -> &Set<A>;
}

impl Family<Ipv4Addr> for AffinityTuples {
    #[inline]
    fn listener_set(&self) -> &Set<Ipv4Addr> {
        &self.listeners
    }
    #[inline]
    fn endpoint_set(&self) -> &Set<Ipv4Addr> {
        &self.endpoints
    }
}

impl Family<Ipv6Addr> for AffinityTuples {
    #[inline]
    fn listener_set(&self) -> &Set<Ipv6Addr> {
        &self.listeners6
    }
    #[inline]
    fn endpoint_set(&self) -> &Set<Ipv6Addr> {
        &self.endpoints6
    }
}

/// The listeners of `listeners` whose service is in `steered`.
fn of_services<A: Copy + Eq + Hash>(
    listeners: &ShardedMap<ListenerKeyOf<A>, Listener>,
    steered: &HashSet<ServiceId>,
) -> Set<A> {
    let mut set = Set::new();
    for (k, l) in listeners.iter() {
        if steered.contains(&l.service) {
            set.insert(*k, ());
        }
    }
    set
}

fn tuples<A: Copy + Eq + Hash>(set: &Set<A>) -> impl Iterator<Item = (Proto, A, u16)> + '_ {
    set.iter().map(|(k, _)| (k.proto, k.addr, k.port))
}
