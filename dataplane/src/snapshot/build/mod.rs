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
//!
//! Files, in the order a batch goes through them: `spec.rs` (the input
//! types), `validate.rs` (the problems, the static checks), `base.rs` (the
//! static part and what derives from it), `prepare.rs` (steps 1–2: what
//! changed, validated, with ids), `tables.rs` (step 3: Maglev tables),
//! `commit.rs` (step 4: into the persistent tables), `ids.rs` (stable ids),
//! `announce.rs` (which VIPs this instance announces, [`AnnounceFilter`]);
//! this file holds the builder and runs the steps ([`SnapshotBuilder::apply`]).

mod announce;
mod base;
mod commit;
mod ids;
mod prepare;
mod spec;
mod tables;
#[cfg(test)]
mod tests;
mod validate;

pub use announce::AnnounceFilter;
pub use spec::{
    AddrRole, EndpointSpec, NeighbourSpec, PortSpec, Route, ServiceChanges, ServiceSpec,
    SnapshotSpec,
};
pub use validate::{BuildError, Problem};

use super::AffinityTuples;
use super::table::{IdTable, ShardedMap};
use super::{
    Backend, BackendId, Listener, ListenerKey, ListenerKey6, OwnedAddr, Service, ServiceId,
    Snapshot,
};
use base::Base;
use hashbrown::{HashMap, HashSet};
use ids::IdPool;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use tables::{BuiltSet, PendingSet, ThreadStart, build_tables};
use validate::validate_static;

/// Counters of the builder's work, for benches and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BuildStats {
    pub maglev_tables_built: u64,
    pub maglev_tables_reused: u64,
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
    listeners6: ShardedMap<ListenerKey6, Listener>,
    owned: ShardedMap<Ipv4Addr, OwnedAddr>,
    owned6: ShardedMap<Ipv6Addr, OwnedAddr>,
    /// Listeners per address that is owned only because of them (a VIP or
    /// externalIP): the address is owned while this is above 0.
    listener_addrs: HashMap<IpAddr, u32>,
    /// Which of those VIPs this instance announces (`announce.rs`).
    announce: AnnounceFilter,
    service_table: IdTable<Service>,
    backend_table: IdTable<Backend>,
    /// Threads for building Maglev tables when many are due (1: none).
    threads: usize,
    /// Run first by each of those threads, with its index.
    thread_start: Option<ThreadStart>,
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
            base: None,
            services: HashMap::new(),
            service_ids: IdPool::default(),
            backend_ids: IdPool::default(),
            listeners: ShardedMap::new(),
            listeners6: ShardedMap::new(),
            owned: ShardedMap::new(),
            owned6: ShardedMap::new(),
            listener_addrs: HashMap::new(),
            announce: AnnounceFilter::all(),
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

        // 1.–2. Which upserts change something; each changed service
        // validated and prepared.
        let mut batch = self.prepare(base, rebase, upserts, removals, &mut problems);
        let prepared = &mut batch.prepared;

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
        self.commit(new_base, batch, removals);
        self.stats = stats;
        self.generation += 1;
        Ok(self.snapshot())
    }

    /// The current tables as a snapshot (shares them with the builder).
    fn snapshot(&self) -> Snapshot {
        let (ports, static_neighbours, static_neighbours6, arp_source, ndp_source) =
            match &self.base {
                Some(b) => (
                    b.ports.clone(),
                    b.static_neighbours.clone(),
                    b.static_neighbours6.clone(),
                    b.arp_source.clone(),
                    b.ndp_source.clone(),
                ),
                None => Default::default(),
            };
        Snapshot {
            generation: self.generation,
            ports,
            owned: self.owned.clone(),
            owned6: self.owned6.clone(),
            listeners: self.listeners.clone(),
            listeners6: self.listeners6.clone(),
            affinity: Arc::new(AffinityTuples::of(
                &self.service_table,
                &self.backend_table,
                &self.listeners,
                &self.listeners6,
            )),
            services: self.service_table.clone(),
            backends: self.backend_table.clone(),
            static_neighbours,
            static_neighbours6,
            arp_source,
            ndp_source,
        }
    }
}
