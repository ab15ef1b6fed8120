//! One debounce window of the Kubernetes source, without I/O: the Services
//! touched since the last window go through IPAM (LoadBalancer Services of
//! Portico's class) and the model (`crate::build`) into service specs, and
//! the changes become one snapshot update. What must be written back to the
//! API server (statuses, Events) is returned for the caller to send.
//!
//! Invariants:
//! * nothing is built before both initial lists are complete; the first
//!   window rebuilds the allocator from the Services' statuses
//!   ([`Allocator::restore`]) before any address is assigned;
//! * only the leader assigns addresses. A follower holds exactly what the
//!   statuses say (it re-claims them Service by Service), so every instance
//!   serves the VIPs the leader handed out and none invents its own;
//! * a snapshot update either applies every change of the window or, when
//!   the builder rejects some Services (a listener taken by another
//!   Service, a VIP that is a gateway address…), applies the rest without
//!   them; the rejected ones are reported (once per problem) and retried
//!   whenever another Service changes. The dataplane never loses its last
//!   good snapshot;
//! * of two Services that clash (the same listener), the older one is
//!   served: earlier `creationTimestamp`, then namespace/name. Which one
//!   wins depends only on the cluster's contents, not on the order in which
//!   an instance saw the events, so every instance (and a restarted one)
//!   serves the same Service — as IPAM decides a contested address;
//! * a Service's status is written when what it should say differs from
//!   what the API server has: the addresses it holds, or — after a release —
//!   none of the released ones. Addresses Portico never held are never
//!   cleared (another load balancer may own them).

use super::store::ClusterState;
use crate::build::{
    self, IgnoreReason, ModelConfig, ServiceOutcome, Skip, SpecCache, wants_load_balancer_address,
};
use crate::ipam::{Allocator, Claim, ServiceKey, ServiceRequest};
use dataplane::snapshot::{
    BuildError, Problem, ServiceChanges, ServiceSpec, Snapshot, SnapshotBuilder,
};
use k8s_openapi::api::core::v1::Service;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use tracing::{debug, info, warn};

/// Builder attempts per window when Services are rejected.
const MAX_BUILD_ATTEMPTS: usize = 8;

/// A Kubernetes Event to send (by the leader) about a Service.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceEvent {
    pub service: Arc<Service>,
    pub warning: bool,
    pub reason: String,
    pub note: String,
}

/// What one window produced.
#[derive(Debug, Default)]
pub struct WindowOutcome {
    /// The new snapshot, if any service spec changed.
    pub snapshot: Option<Snapshot>,
    /// Kubernetes Services whose specs changed.
    pub services_changed: usize,
    /// Microseconds spent in the snapshot builder.
    pub build_us: u64,
    /// The builder refused the changes; the last snapshot stays.
    pub build_failed: bool,
    pub events: Vec<ServiceEvent>,
}

/// State kept across windows.
#[derive(Debug)]
pub struct Reconciler {
    options: ModelConfig,
    allocator: Allocator,
    builder: SnapshotBuilder,
    /// The dataplane services in force for each Kubernetes Service.
    specs: SpecCache,
    /// The reason last logged for each Service served partly or not at
    /// all, so that it is logged once.
    ignored: HashMap<ServiceKey, String>,
    /// The last IPAM or model problem reported per Service (reason, note),
    /// so that a problem is reported once, not on every window.
    reported: HashMap<ServiceKey, (String, String)>,
    /// Services the snapshot builder refused, with the reason.
    rejected: BTreeMap<ServiceKey, String>,
    /// Addresses released from a Service that its status may still show.
    owed_clear: HashMap<ServiceKey, Vec<IpAddr>>,
    restored: bool,
}

impl Reconciler {
    /// `builder` has built the base snapshot (ports, addresses, routes,
    /// static services) already.
    pub fn new(options: ModelConfig, allocator: Allocator, builder: SnapshotBuilder) -> Self {
        Reconciler {
            options,
            allocator,
            builder,
            specs: SpecCache::new(),
            ignored: HashMap::new(),
            reported: HashMap::new(),
            rejected: BTreeMap::new(),
            owed_clear: HashMap::new(),
            restored: false,
        }
    }

    pub fn allocator(&self) -> &Allocator {
        &self.allocator
    }

    /// Announce the VIPs `filter` covers from now on; the snapshot to
    /// publish when a VIP's flag changed.
    pub fn set_announce(
        &mut self,
        filter: dataplane::snapshot::AnnounceFilter,
    ) -> Option<dataplane::snapshot::Snapshot> {
        self.builder.set_announce(filter)
    }

    /// Whether Portico serves this Service's LoadBalancer addresses.
    fn wants_address(&self, svc: &Service) -> bool {
        wants_load_balancer_address(svc, &self.options)
    }

    /// Rebuild the allocator from the statuses (first window only).
    fn restore(&mut self, state: &ClusterState, events: &mut Vec<ServiceEvent>) {
        let mut claims = Vec::new();
        for (_, svc) in state.services() {
            if !self.wants_address(svc) {
                continue;
            }
            match Claim::from_service(svc) {
                Ok(Some(claim)) => claims.push(claim),
                Ok(None) => {}
                Err(problem) => debug!(service = %ServiceKey::of(svc), %problem,
                    "status not restored: the request does not parse"),
            }
        }
        let restored = claims.len();
        for (key, problem) in self.allocator.restore(claims) {
            if let Some(svc) = state.service(&key) {
                events.push(ServiceEvent {
                    service: Arc::clone(svc),
                    warning: true,
                    reason: problem.reason().to_owned(),
                    note: problem.message(),
                });
            }
        }
        info!(
            services = restored,
            addresses = self.allocator.held_addresses().count(),
            "address allocations rebuilt from Service statuses"
        );
        self.restored = true;
    }

    /// Process one window: `dirty` are the Services touched since the last
    /// one (all of them on the first window and when leadership changes).
    pub fn window(
        &mut self,
        state: &ClusterState,
        dirty: &BTreeSet<ServiceKey>,
        leader: bool,
    ) -> WindowOutcome {
        let mut out = WindowOutcome::default();
        if !self.restored {
            self.restore(state, &mut out.events);
        }
        // Rejected Services get another chance whenever anything changes.
        let mut keys: BTreeSet<ServiceKey> = dirty.clone();
        if !dirty.is_empty() {
            keys.extend(self.rejected.keys().cloned());
        }
        let mut new_specs: HashMap<ServiceKey, Vec<ServiceSpec>> = HashMap::new();
        for key in &keys {
            let specs = self.service_specs(state, key, leader, &mut out.events);
            new_specs.insert(key.clone(), specs);
        }
        self.apply(state, new_specs, &mut out);
        out
    }

    /// Addresses and dataplane specs of one Service.
    fn service_specs(
        &mut self,
        state: &ClusterState,
        key: &ServiceKey,
        leader: bool,
        events: &mut Vec<ServiceEvent>,
    ) -> Vec<ServiceSpec> {
        let Some(svc) = state.service(key) else {
            self.release(key);
            self.reported.remove(key);
            self.owed_clear.remove(key);
            self.ignored.remove(key);
            return Vec::new();
        };
        let vips = if self.wants_address(svc) {
            self.addresses(svc, key, leader, events)
        } else {
            self.release(key);
            Vec::new()
        };
        let slices = state.slices_of(key);
        let mut warnings = Vec::new();
        let (specs, why) = match build::service_specs(svc, &slices, &vips, &self.options) {
            ServiceOutcome::Serve { specs, skipped } => {
                warnings = warning_events(&skipped);
                let why: Vec<String> = skipped.iter().map(ToString::to_string).collect();
                (specs, why.join("; "))
            }
            ServiceOutcome::Ignored { reason } => {
                if let IgnoreReason::NoServablePort { skipped } = &reason {
                    warnings = warning_events(skipped);
                }
                (Vec::new(), reason.to_string())
            }
        };
        if why.is_empty() {
            self.ignored.remove(key);
        } else if self.ignored.get(key) != Some(&why) {
            if specs.is_empty() {
                info!(service = %key, reason = %why, "service ignored");
            } else {
                info!(service = %key, skipped = %why, "service served in part");
            }
            // Once per change of what is left out: the Service's owner
            // sees why an externalIP is not served, or why its annotation
            // is not followed.
            for (reason, note) in warnings {
                events.push(ServiceEvent {
                    service: Arc::clone(svc),
                    warning: true,
                    reason: reason.into(),
                    note,
                });
            }
            self.ignored.insert(key.clone(), why);
        }
        specs
    }

    fn release(&mut self, key: &ServiceKey) {
        let released = self.allocator.release(key);
        if !released.is_empty() {
            info!(service = %key, addresses = ?released, "addresses released");
            self.owed_clear
                .entry(key.clone())
                .or_default()
                .extend(released);
        }
    }

    /// The VIPs of a LoadBalancer Service of Portico's class: assigned by
    /// the leader, taken from the status by a follower.
    fn addresses(
        &mut self,
        svc: &Arc<Service>,
        key: &ServiceKey,
        leader: bool,
        events: &mut Vec<ServiceEvent>,
    ) -> Vec<IpAddr> {
        if !leader {
            // Hold what the status says, as the leader decided it.
            let before = self.allocator.addresses(key).to_vec();
            self.allocator.release(key);
            if let Ok(Some(claim)) = Claim::from_service(svc) {
                for (_, problem) in self.allocator.restore(vec![claim]) {
                    debug!(service = %key, %problem, "follower: status address not held");
                }
            }
            let now = self.allocator.addresses(key).to_vec();
            if before != now {
                debug!(service = %key, addresses = ?now, "follower: addresses from the status");
            }
            return now;
        }
        let before = self.allocator.addresses(key).to_vec();
        let result = ServiceRequest::from_service(svc).and_then(|r| self.allocator.assign(&r));
        match result {
            Ok(ips) => {
                if self.reported.remove(key).is_some() || before != ips {
                    let gone: Vec<IpAddr> = before
                        .iter()
                        .copied()
                        .filter(|a| !ips.contains(a))
                        .collect();
                    if !gone.is_empty() {
                        self.owed_clear.entry(key.clone()).or_default().extend(gone);
                    }
                    events.push(ServiceEvent {
                        service: Arc::clone(svc),
                        warning: false,
                        reason: "IPAllocated".to_owned(),
                        note: format!(
                            "assigned {}",
                            ips.iter()
                                .map(IpAddr::to_string)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    });
                }
                ips
            }
            Err(problem) => {
                if !before.is_empty() {
                    self.owed_clear
                        .entry(key.clone())
                        .or_default()
                        .extend(before);
                }
                let report = (problem.reason().to_owned(), problem.message());
                if self.reported.get(key) != Some(&report) {
                    warn!(service = %key, reason = %report.0, problem = %report.1,
                        "no address for the LoadBalancer service");
                    events.push(ServiceEvent {
                        service: Arc::clone(svc),
                        warning: true,
                        reason: report.0.clone(),
                        note: report.1.clone(),
                    });
                    self.reported.insert(key.clone(), report);
                }
                Vec::new()
            }
        }
    }

    /// Build and keep the new snapshot, leaving out Services the builder
    /// rejects.
    fn apply(
        &mut self,
        state: &ClusterState,
        mut new_specs: HashMap<ServiceKey, Vec<ServiceSpec>>,
        out: &mut WindowOutcome,
    ) {
        let mut previously_rejected = BTreeMap::new();
        for key in new_specs.keys() {
            if let Some(problem) = self.rejected.remove(key) {
                previously_rejected.insert(key.clone(), problem);
            }
        }
        let started = std::time::Instant::now();
        for _ in 0..MAX_BUILD_ATTEMPTS {
            let changes = self.changes(&new_specs);
            if changes.is_empty() {
                self.keep(new_specs);
                return;
            }
            match self.builder.update(&changes) {
                Ok(snapshot) => {
                    out.build_us = started.elapsed().as_micros() as u64;
                    out.services_changed = new_specs
                        .iter()
                        .filter(|(k, v)| self.specs.get(k).unwrap_or_default() != v.as_slice())
                        .count();
                    out.snapshot = Some(snapshot);
                    self.keep(new_specs);
                    return;
                }
                Err(e) => {
                    let culprits = self.culprits(state, &e, &new_specs);
                    if culprits.is_empty() {
                        warn!(error = %e, "the forwarding tables could not be rebuilt; \
                            the last snapshot stays in force");
                        out.build_failed = true;
                        return;
                    }
                    for (key, problem) in culprits {
                        // Whatever it had before goes too: it may be what
                        // clashes.
                        new_specs.insert(key.clone(), Vec::new());
                        let known = previously_rejected.get(&key) == Some(&problem);
                        if known {
                            debug!(service = %key, %problem, "service still left out");
                        } else {
                            warn!(service = %key, %problem,
                                "service left out of the forwarding tables");
                        }
                        if let Some(svc) = state.service(&key).filter(|_| !known) {
                            out.events.push(ServiceEvent {
                                service: Arc::clone(svc),
                                warning: true,
                                reason: "ServiceRejected".to_owned(),
                                note: problem.clone(),
                            });
                        }
                        self.rejected.insert(key, problem);
                    }
                }
            }
        }
        warn!("the forwarding tables could not be rebuilt; the last snapshot stays in force");
        out.build_failed = true;
    }

    /// The snapshot delta from what is in force to `new_specs`: changed or
    /// new specs are upserted, vanished names removed.
    fn changes(&self, new_specs: &HashMap<ServiceKey, Vec<ServiceSpec>>) -> ServiceChanges {
        let mut changes = ServiceChanges::default();
        for (key, specs) in new_specs {
            let old = self.specs.get(key).unwrap_or_default();
            for o in old {
                if !specs.iter().any(|s| s.name == o.name) {
                    changes.removals.push(o.name.clone());
                }
            }
            for s in specs {
                if !old.iter().any(|o| o == s) {
                    changes.upserts.push(s.clone());
                }
            }
        }
        changes
    }

    fn keep(&mut self, new_specs: HashMap<ServiceKey, Vec<ServiceSpec>>) {
        for (key, specs) in new_specs {
            self.specs.set(&key, specs);
        }
    }

    /// The Kubernetes Services to leave out after a failed build, with the
    /// problem's text. Of two Services that clash, the younger is left out
    /// ([`Seniority`]).
    fn culprits(
        &self,
        state: &ClusterState,
        e: &BuildError,
        new_specs: &HashMap<ServiceKey, Vec<ServiceSpec>>,
    ) -> Vec<(ServiceKey, String)> {
        let owner = |name: &str| -> Option<ServiceKey> {
            for (key, specs) in new_specs {
                if specs.iter().any(|s| s.name == name) {
                    return Some(key.clone());
                }
            }
            self.specs.owner(name).cloned()
        };
        let mut found: Vec<(ServiceKey, String)> = Vec::new();
        for p in &e.problems {
            let candidates: Vec<&str> = match p {
                Problem::DuplicateService(name) => vec![name],
                Problem::DuplicateListener { service, other, .. } => vec![service, other],
                Problem::NodePortOffNode { service, .. }
                | Problem::VipIsGatewayAddress { service, .. }
                | Problem::DuplicateEndpoint { service, .. }
                | Problem::Maglev { service, .. } => vec![service],
                _ => continue,
            };
            let pick = candidates
                .iter()
                .filter_map(|&n| Some((owner(n)?, n)))
                .max_by_key(|(k, _)| Seniority::of(state, k));
            let Some((key, name)) = pick else { continue };
            if found.iter().any(|(k, _)| *k == key) {
                continue;
            }
            // Told from the side of the Service left out, so the same clash
            // reads the same whichever side the builder met first.
            let problem = match p {
                Problem::DuplicateListener {
                    service,
                    other,
                    proto,
                    addr,
                    port,
                } if other == name => Problem::DuplicateListener {
                    service: other.clone(),
                    other: service.clone(),
                    proto: *proto,
                    addr: *addr,
                    port: *port,
                },
                _ => p.clone(),
            };
            found.push((key, problem.to_string()));
        }
        found
    }

    /// What each Service's status should say, for the Services whose status
    /// differs: `(key, addresses)`; empty addresses clear the list.
    pub fn status_writes(
        &mut self,
        state: &ClusterState,
        keys: &BTreeSet<ServiceKey>,
    ) -> Vec<(ServiceKey, Vec<IpAddr>)> {
        let mut writes = Vec::new();
        for key in keys {
            let Some(svc) = state.service(key) else {
                continue;
            };
            let observed = super::status::ingress_addresses(svc);
            let mut observed_sorted = observed.clone();
            observed_sorted.sort();
            observed_sorted.dedup();
            if self.wants_address(svc) {
                let held = self.allocator.addresses(key).to_vec();
                if held != observed_sorted && (!held.is_empty() || self.owes(key, &observed)) {
                    let keep: Vec<IpAddr> = if held.is_empty() {
                        observed
                            .iter()
                            .copied()
                            .filter(|a| !self.owed(key).contains(a))
                            .collect()
                    } else {
                        held
                    };
                    writes.push((key.clone(), keep));
                    continue;
                }
            } else if self.owes(key, &observed) {
                let owed = self.owed(key);
                let keep: Vec<IpAddr> = observed
                    .iter()
                    .copied()
                    .filter(|a| !owed.contains(a))
                    .collect();
                writes.push((key.clone(), keep));
                continue;
            }
            // The status agrees: nothing more is owed.
            if !self.owes(key, &observed) {
                self.owed_clear.remove(key);
            }
        }
        writes
    }

    fn owed(&self, key: &ServiceKey) -> &[IpAddr] {
        self.owed_clear.get(key).map_or(&[], Vec::as_slice)
    }

    /// Whether `observed` still shows an address released from `key`.
    fn owes(&self, key: &ServiceKey, observed: &[IpAddr]) -> bool {
        let owed = self.owed(key);
        observed.iter().any(|a| owed.contains(a))
    }
}

/// Which of two clashing Services gives way: ordered from the oldest to the
/// youngest — `creationTimestamp` (a Service without one counts as the
/// youngest), then namespace/name. The largest is left out.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Seniority {
    /// `false` for a Service with a creation time (sorts first).
    undated: bool,
    created: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    key: ServiceKey,
}

impl Seniority {
    fn of(state: &ClusterState, key: &ServiceKey) -> Seniority {
        let created = state
            .service(key)
            .and_then(|s| s.metadata.creation_timestamp.clone());
        Seniority {
            undated: created.is_none(),
            created,
            key: key.clone(),
        }
    }
}

/// The Event notes for externalIPs left out by the externalIP policy.
/// The parts left out that the Service's owner is told of with a Warning
/// Event: (reason, note).
fn warning_events(skipped: &[Skip]) -> Vec<(&'static str, String)> {
    skipped
        .iter()
        .filter_map(|s| match s {
            Skip::ExternalIpNotAllowed { .. } => Some(("ExternalIPNotAllowed", s.to_string())),
            Skip::ExternalIpWrongFamily { .. } => Some(("ExternalIPWrongFamily", s.to_string())),
            Skip::BadSynProxy { .. } => Some(("InvalidSynProxyAnnotation", s.to_string())),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests;
