//! Step 4 of a batch: the validated, table-complete batch goes into the
//! builder's persistent tables. Nothing here can fail; ids peeked by
//! `prepare.rs` are taken, those of removed services and endpoints freed.

use super::base::resolve_next_hop;
use super::prepare::Batch;
use super::tables::PendingSet;
use super::{Base, ServiceSpec, ServiceState, SnapshotBuilder};
use crate::flow::Proto;
use crate::snapshot::table::ShardedMap;
use crate::snapshot::{
    Backend, Listener, ListenerKey, ListenerKey6, OwnedAddr, Service, ServiceId,
};
use std::net::IpAddr;
use std::sync::Arc;

impl SnapshotBuilder {
    /// Step 4 of [`SnapshotBuilder::apply`]: remove `removals` (those not
    /// replaced by the batch), then add or replace the batch's services;
    /// with `new_base`, on a fresh static part.
    pub(super) fn commit(&mut self, new_base: Option<Base>, batch: Batch<'_>, removals: &[&str]) {
        let rebase = new_base.is_some();
        let Batch {
            names: batch_names,
            prepared,
            new_services,
            new_backends,
        } = batch;
        self.service_ids.commit(new_services);
        self.backend_ids.commit(new_backends);
        if let Some(new_base) = new_base {
            self.listeners = ShardedMap::new();
            self.listeners6 = ShardedMap::new();
            self.owned = ShardedMap::new();
            self.owned6 = ShardedMap::new();
            for (&a, &o) in &new_base.gateway {
                self.insert_owned(a, o);
            }
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
                self.insert_listener(
                    (p.spec.proto, addr, port),
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
                    let announce = self.announce.covers_ip(addr);
                    self.insert_owned(
                        addr,
                        OwnedAddr {
                            port: vip_port,
                            vip: true,
                            announce,
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
                    .and_then(|b| resolve_next_hop(&b.statics, ep.addr.ip()));
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
                    syn_proxy: p.spec.syn_proxy,
                    tcp_pickup: p.spec.tcp_pickup,
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
    }

    /// Remove the listeners `spec` registered for service `id` (none are
    /// left after a rebase), and the addresses owned only for them.
    fn forget_listeners(&mut self, spec: &ServiceSpec, id: ServiceId, rebase: bool) {
        if rebase {
            return;
        }
        for &(addr, port, _) in &spec.listeners {
            let key = (spec.proto, addr, port);
            if self.listener(key).is_some_and(|l| l.service == id) {
                self.remove_listener(key);
            }
            if let Some(count) = self.listener_addrs.get_mut(&addr) {
                *count -= 1;
                if *count == 0 {
                    self.listener_addrs.remove(&addr);
                    self.remove_owned(addr);
                }
            }
        }
    }

    /// The listener of `(proto, addr, port)`, in the table of its family.
    pub(super) fn listener(&self, (proto, addr, port): (Proto, IpAddr, u16)) -> Option<&Listener> {
        match addr {
            IpAddr::V4(addr) => self.listeners.get(&ListenerKey { proto, addr, port }),
            IpAddr::V6(addr) => self.listeners6.get(&ListenerKey6 { proto, addr, port }),
        }
    }

    fn insert_listener(&mut self, (proto, addr, port): (Proto, IpAddr, u16), l: Listener) {
        match addr {
            IpAddr::V4(addr) => {
                self.listeners.insert(ListenerKey { proto, addr, port }, l);
            }
            IpAddr::V6(addr) => {
                self.listeners6
                    .insert(ListenerKey6 { proto, addr, port }, l);
            }
        }
    }

    fn remove_listener(&mut self, (proto, addr, port): (Proto, IpAddr, u16)) {
        match addr {
            IpAddr::V4(addr) => {
                self.listeners.remove(&ListenerKey { proto, addr, port });
            }
            IpAddr::V6(addr) => {
                self.listeners6.remove(&ListenerKey6 { proto, addr, port });
            }
        }
    }

    /// Own `addr` (in the map of its family).
    pub(super) fn insert_owned(&mut self, addr: IpAddr, o: OwnedAddr) {
        match addr {
            IpAddr::V4(a) => {
                self.owned.insert(a, o);
            }
            IpAddr::V6(a) => {
                self.owned6.insert(a, o);
            }
        }
    }

    fn remove_owned(&mut self, addr: IpAddr) {
        match addr {
            IpAddr::V4(a) => {
                self.owned.remove(&a);
            }
            IpAddr::V6(a) => {
                self.owned6.remove(&a);
            }
        }
    }
}
