//! The per-service report as `portico::admin::service_reports` computed it
//! before it indexed listeners and backends by service id: for every
//! service, a scan of all listeners and all backends (O(services ×
//! (listeners + backends))). Kept as the reference the indexed version is
//! checked against (same output on random clusters) and measured against
//! (`cargo bench -p portico-bench --bench snapshot -- service_reports`).
//!
//! [`random_cluster`] is the random input: a [`cluster_spec`] with random
//! endpoint counts, weights and conditions, extra externalIP and NodePort
//! listeners, services removed afterwards (holes in the id space, freed ids
//! reused) and random per-id counters, some vectors shorter than the ids.

use crate::cluster_spec;
use dataplane::counters::ServiceCounters;
use dataplane::snapshot::{
    AddrRole, EndpointCondition, ListenerKind, ServiceChanges, ServiceSpec, Snapshot,
    SnapshotBuilder,
};
use portico::admin::{BackendReport, ListenerReport, ServiceReport, listeners_of};
use std::net::{Ipv4Addr, SocketAddrV4};

/// The pre-index algorithm (see the module docs): the same rows, grouped
/// by scanning every listener and backend for each service.
pub fn service_reports_by_scan(snap: &Snapshot, counted: &ServiceCounters) -> Vec<ServiceReport> {
    snap.services
        .iter()
        .flatten()
        .map(|s| {
            let mut listeners: Vec<ListenerReport> = listeners_of(snap)
                .filter(|(_, l)| l.service == s.id)
                .map(|(a, l)| ListenerReport::of(a, l))
                .collect();
            listeners.sort();
            let backends = snap
                .backends
                .iter()
                .flatten()
                .filter(|b| b.service == s.id)
                .map(|b| BackendReport::of(b, counted))
                .collect();
            ServiceReport::of(s, counted, listeners, backends)
        })
        .collect()
}

/// xorshift64*: reproducible from the seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The node address NodePort listeners of [`random_cluster`] use.
const NODE_ADDR: Ipv4Addr = Ipv4Addr::new(192, 168, 0, 1);

/// A random cluster of `services` services with up to `max_endpoints`
/// endpoints each, and random counters for it (see the module docs).
pub fn random_cluster(seed: u64, services: u32, max_endpoints: u32) -> (Snapshot, ServiceCounters) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut spec = cluster_spec(services, max_endpoints, 16381);
    spec.addresses.push((NODE_ADDR.into(), 0, AddrRole::Node));
    let conditions = [
        EndpointCondition::Ready,
        EndpointCondition::ServingTerminating,
        EndpointCondition::Draining,
    ];
    for (i, svc) in (0u32..).zip(spec.services.iter_mut()) {
        let keep = rng.below(u64::from(max_endpoints) + 1) as usize;
        svc.endpoints.truncate(keep);
        for e in &mut svc.endpoints {
            e.weight = 1 + rng.below(5) as u32;
            e.condition = conditions
                .get(rng.below(conditions.len() as u64) as usize)
                .copied()
                .unwrap_or(EndpointCondition::Ready);
        }
        // Extra listeners, added out of order so the report must sort them.
        if rng.below(3) == 0 {
            let external = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + i);
            svc.listeners
                .insert(0, (external.into(), 443, ListenerKind::ExternalIp));
        }
        if rng.below(3) == 0 {
            svc.listeners.push((
                NODE_ADDR.into(),
                30000 + (i % 2000) as u16,
                ListenerKind::NodePort,
            ));
        }
    }
    // NodePorts must be unique per node address: keep the first of each.
    let mut node_ports = std::collections::HashSet::new();
    for svc in &mut spec.services {
        svc.listeners
            .retain(|l| l.2 != ListenerKind::NodePort || node_ports.insert(l.1));
    }
    let mut builder = SnapshotBuilder::new();
    builder.build(&spec).expect("random cluster is valid");
    // Remove a fifth of the services (their ids become holes), then add a
    // few new ones (taking freed ids, out of name order).
    let removals: Vec<String> = spec
        .services
        .iter()
        .filter(|_| rng.below(5) == 0)
        .map(|s| s.name.clone())
        .collect();
    let upserts: Vec<ServiceSpec> = (0..services / 10)
        .map(|n| {
            let vip = Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + n);
            let pod = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 0, 0)) + n);
            ServiceSpec::new(&format!("ns/new-{n}"), dataplane::flow::Proto::Udp, vip, 53)
                .endpoint(SocketAddrV4::new(pod, 5353))
        })
        .collect();
    let snap = builder
        .update(&ServiceChanges { upserts, removals })
        .expect("random changes are valid");
    let mut counter = |ids: usize| -> Vec<u64> {
        // Some vectors are shorter than the ids (ids the workers have not
        // counted yet read as 0).
        let len = if rng.below(4) == 0 {
            rng.below(ids as u64 + 1) as usize
        } else {
            ids
        };
        (0..len).map(|_| rng.below(1 << 40)).collect()
    };
    let (services_len, backends_len) = (snap.services.len(), snap.backends.len());
    let counted = ServiceCounters {
        service_packets: counter(services_len),
        service_bytes: counter(services_len),
        service_flows_created: counter(services_len),
        service_flows_active: counter(services_len),
        backend_packets: counter(backends_len),
        backend_bytes: counter(backends_len),
        backend_flows_created: counter(backends_len),
        backend_flows_active: counter(backends_len),
    };
    (snap, counted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use portico::admin::service_reports;

    #[test]
    fn indexed_reports_equal_the_scan_on_random_clusters() {
        for seed in 1..=8 {
            let (snap, counted) = random_cluster(seed, 300, 6);
            let expected = service_reports_by_scan(&snap, &counted);
            let reports = service_reports(&snap, &counted);
            // The input is as varied as the test claims.
            assert!(snap.services.iter().any(|s| s.is_none()), "id holes");
            let listeners: usize = expected.iter().map(|s| s.listeners.len()).sum();
            assert!(listeners > expected.len(), "extra listeners");
            for kind in ["vip", "external_ip", "node_port"] {
                assert!(
                    expected
                        .iter()
                        .flat_map(|s| &s.listeners)
                        .any(|l| l.kind == kind),
                    "{kind}"
                );
            }
            assert!(expected.iter().any(|s| s.backends.is_empty()));
            assert!(expected.iter().any(|s| s.backends.len() > 1));
            assert_eq!(reports, expected, "seed {seed}");
        }
    }
}
