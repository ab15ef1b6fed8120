//! [`ControlPlaneMetrics`]: the control plane's own measurements, fed by
//! whichever source runs (the static file source feeds build times and
//! reload-to-live latency; the Kubernetes source feeds API-event-to-live
//! latency, watch restarts, IPAM pool usage and leader status) and read by
//! the admin report and /metrics.
//!
//! The handle is cheap to clone and thread-safe (one mutex; the control
//! plane is never on the packet path). Every method is a plain update; the
//! exposition is built from [`ControlPlaneMetrics::report`].
//!
//! Metric names (see `admin::metrics`):
//! * `portico_snapshot_build_seconds` (histogram): building one snapshot
//!   from the desired model ([`ControlPlaneMetrics::observe_build_ms`]);
//! * `portico_event_to_live_seconds` (histogram): from the event that changed
//!   the model (an API watch event, a SIGHUP) to the snapshot being
//!   published ([`ControlPlaneMetrics::observe_event_to_live_ms`]);
//! * `portico_watch_restarts_total{watch}`
//!   ([`ControlPlaneMetrics::inc_watch_restarts`]);
//! * `portico_watch_failing{watch}`, 1 from a watch's error until it
//!   resumes ([`ControlPlaneMetrics::set_watch_failing`]);
//! * `portico_ipam_pool_addresses_used{pool}` and
//!   `portico_ipam_pool_addresses{pool}`
//!   ([`ControlPlaneMetrics::set_pool_usage`]);
//! * `portico_leader` (1 leader, 0 standby; absent without leader election,
//!   [`ControlPlaneMetrics::set_leader`]);
//! * `portico_l2_members` (live members of the tier this instance sees;
//!   absent without a membership, [`ControlPlaneMetrics::set_members`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Upper bounds (milliseconds) of the latency histograms' buckets; the
/// `+Inf` bucket is implied.
pub const LATENCY_BUCKETS_MS: [f64; 15] = [
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0,
    10_000.0,
];

/// A histogram's state: per-bucket (not cumulative) counts for
/// [`LATENCY_BUCKETS_MS`] plus one overflow bucket, the sum and the count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistogramReport {
    /// Bucket upper bounds in milliseconds (the last bucket, `+Inf`, has
    /// none).
    pub bounds_ms: Vec<f64>,
    /// `bounds_ms.len() + 1` counts, the last one for `+Inf`.
    pub counts: Vec<u64>,
    pub sum_ms: f64,
    pub count: u64,
}

impl Default for HistogramReport {
    fn default() -> Self {
        HistogramReport {
            bounds_ms: LATENCY_BUCKETS_MS.to_vec(),
            counts: vec![0; LATENCY_BUCKETS_MS.len() + 1],
            sum_ms: 0.0,
            count: 0,
        }
    }
}

impl HistogramReport {
    /// Record one observation (negative and NaN values count as 0).
    pub fn observe(&mut self, ms: f64) {
        let ms = if ms.is_finite() { ms.max(0.0) } else { 0.0 };
        let i = self
            .bounds_ms
            .iter()
            .position(|&b| ms <= b)
            .unwrap_or(self.bounds_ms.len());
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.sum_ms += ms;
        self.count += 1;
    }
}

/// Used and total addresses of one IPAM pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolUsage {
    pub used: u64,
    /// Exact (an IPv6 pool can hold more than 2^64 addresses).
    pub size: u128,
}

/// Everything [`ControlPlaneMetrics`] holds, as the admin report carries it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ControlPlaneReport {
    pub build_ms: HistogramReport,
    pub event_to_live_ms: HistogramReport,
    /// Restarts per watch (e.g. `services`, `endpointslices`).
    pub watch_restarts: BTreeMap<String, u64>,
    /// Per watch: failing (true) or running (false) since its last change.
    #[serde(default)]
    pub watch_failing: BTreeMap<String, bool>,
    pub pools: BTreeMap<String, PoolUsage>,
    /// `None` when this gateway runs no leader election.
    pub leader: Option<bool>,
    /// The tier as this instance sees it; `None` without a membership
    /// (no `[kubernetes]`: a single instance announces every VIP).
    #[serde(default)]
    pub members: Option<MembersReport>,
}

/// The tier's membership as one instance sees it (the L2 election's input).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembersReport {
    /// This instance's name.
    pub me: String,
    /// A first round completed (before, no VIP is announced).
    pub known: bool,
    /// This instance renewed its own Lease within `renew_deadline`.
    pub me_live: bool,
    /// The live members, sorted.
    pub live: Vec<String>,
}

/// The control plane's metrics handle; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct ControlPlaneMetrics {
    state: Arc<Mutex<ControlPlaneReport>>,
}

impl ControlPlaneMetrics {
    pub fn new() -> Self {
        ControlPlaneMetrics::default()
    }

    fn update(&self, f: impl FnOnce(&mut ControlPlaneReport)) {
        // A panic while holding the lock cannot leave the plain data
        // inconsistent: keep using it.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut state);
    }

    /// One snapshot build took `ms` milliseconds.
    pub fn observe_build_ms(&self, ms: f64) {
        self.update(|s| s.build_ms.observe(ms));
    }

    /// A change reached the dataplane `ms` milliseconds after the event
    /// that caused it.
    pub fn observe_event_to_live_ms(&self, ms: f64) {
        self.update(|s| s.event_to_live_ms.observe(ms));
    }

    /// The watch `watch` restarted (relist after an error or 410 Gone).
    pub fn inc_watch_restarts(&self, watch: &str) {
        self.update(|s| *s.watch_restarts.entry(watch.to_owned()).or_default() += 1);
    }

    /// The watch `watch` failed (`true`) or resumed (`false`).
    pub fn set_watch_failing(&self, watch: &str, failing: bool) {
        self.update(|s| {
            s.watch_failing.insert(watch.to_owned(), failing);
        });
    }

    /// `used` of the `size` addresses of `pool` are allocated.
    pub fn set_pool_usage(&self, pool: &str, used: u64, size: u128) {
        self.update(|s| {
            s.pools.insert(pool.to_owned(), PoolUsage { used, size });
        });
    }

    /// This instance became leader (`true`) or standby (`false`).
    pub fn set_leader(&self, leader: bool) {
        self.update(|s| s.leader = Some(leader));
    }

    /// The tier's membership changed.
    pub fn set_members(&self, members: MembersReport) {
        self.update(|s| s.members = Some(members));
    }

    /// A copy of the current state.
    pub fn report(&self) -> ControlPlaneReport {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_buckets() {
        let m = ControlPlaneMetrics::new();
        for ms in [0.05, 0.1, 3.0, 7.0, 20_000.0, f64::NAN] {
            m.observe_build_ms(ms);
        }
        m.observe_event_to_live_ms(12.0);
        m.inc_watch_restarts("services");
        m.inc_watch_restarts("services");
        m.set_pool_usage("default", 3, 254);
        m.set_leader(true);
        let r = m.clone().report();
        let h = &r.build_ms;
        assert_eq!(h.count, 6);
        assert_eq!(h.counts.len(), LATENCY_BUCKETS_MS.len() + 1);
        assert_eq!(h.counts[0], 3, "0.05, 0.1 (inclusive bound) and NaN as 0");
        assert_eq!(h.counts[4], 1, "3 ms in the 5 ms bucket");
        assert_eq!(h.counts[5], 1, "7 ms in the 10 ms bucket");
        assert_eq!(h.counts[LATENCY_BUCKETS_MS.len()], 1, "20 s in +Inf");
        assert!((h.sum_ms - 20_010.15).abs() < 1e-9, "{}", h.sum_ms);
        assert_eq!(r.event_to_live_ms.count, 1);
        assert_eq!(r.watch_restarts["services"], 2);
        assert_eq!(r.pools["default"], PoolUsage { used: 3, size: 254 });
        assert_eq!(r.leader, Some(true));
    }
}
