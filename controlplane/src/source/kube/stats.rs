//! Numbers of the Kubernetes source for the admin socket and /metrics: per
//! published generation the build time and the event-to-live latency (from
//! the arrival of the first watch event the generation contains to the
//! return of `Publisher::publish`), plus counters of what happened.
//!
//! Written by the source's control thread once per debounce window, read by
//! anyone; a plain mutex is enough (cold path, never the packet path).

use super::watch::Update;
use crate::admin::ControlPlaneMetrics;
use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

/// How many recent generations [`KubeSourceStats`] keeps.
pub const RECENT_GENERATIONS: usize = 1024;

/// One published generation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GenerationTiming {
    pub generation: u64,
    /// Kubernetes Services rebuilt for this generation.
    pub services_changed: usize,
    /// Time spent in the snapshot builder.
    pub build_us: u64,
    /// From the arrival of the oldest watch event this generation includes
    /// to the snapshot being live.
    pub event_to_live_us: u64,
}

/// Everything the admin and metrics code can read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KubeSourceReport {
    /// Both initial lists are complete and the first snapshot is out.
    pub synced: bool,
    /// This instance holds the Lease.
    pub leader: bool,
    /// The last message of a watch was an error (API server unreachable,
    /// 410 Gone…) and has not resumed (an event, a list, or
    /// [`Update::Resumed`]).
    pub watch_failing: bool,
    pub generations_published: u64,
    pub builds_failed: u64,
    pub watch_errors: u64,
    /// Complete lists received (two at start, one per kind and relist
    /// after that, e.g. after a 410 Gone).
    pub lists: u64,
    pub status_writes: u64,
    pub status_write_errors: u64,
    pub events_sent: u64,
    /// Oldest first, at most [`RECENT_GENERATIONS`].
    pub recent: Vec<GenerationTiming>,
}

#[derive(Debug, Default)]
struct Inner {
    report: KubeSourceReport,
    /// The kinds whose watch is failing.
    failing: std::collections::BTreeSet<String>,
    recent: VecDeque<GenerationTiming>,
}

/// Shared between the source (writer) and readers.
#[derive(Debug, Default)]
pub struct KubeSourceStats {
    inner: Mutex<Inner>,
    /// The gateway's Prometheus handle, fed alongside (build and
    /// event-to-live histograms, watch restarts, leader, pool usage).
    metrics: Option<ControlPlaneMetrics>,
}

impl KubeSourceStats {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut inner)
    }

    /// Stats that also feed `metrics`.
    pub fn with_metrics(metrics: ControlPlaneMetrics) -> Self {
        KubeSourceStats {
            inner: Mutex::default(),
            metrics: Some(metrics),
        }
    }

    /// A copy of everything.
    pub fn report(&self) -> KubeSourceReport {
        self.with(|i| {
            let mut r = i.report.clone();
            r.recent = i.recent.iter().copied().collect();
            r
        })
    }

    /// The last published generation's timing.
    pub fn last(&self) -> Option<GenerationTiming> {
        self.with(|i| i.recent.back().copied())
    }

    pub(crate) fn published(&self, timing: GenerationTiming) {
        if let Some(m) = &self.metrics {
            m.observe_build_ms(timing.build_us as f64 / 1000.0);
            m.observe_event_to_live_ms(timing.event_to_live_us as f64 / 1000.0);
        }
        self.with(|i| {
            i.report.synced = true;
            i.report.generations_published += 1;
            if i.recent.len() == RECENT_GENERATIONS {
                i.recent.pop_front();
            }
            i.recent.push_back(timing);
        });
    }

    pub(crate) fn build_failed(&self) {
        self.with(|i| i.report.builds_failed += 1);
    }

    /// A watch update of `kind` (`"services"`, `"endpointslices"`).
    pub(crate) fn watch<K>(&self, kind: &str, update: &Update<K>) {
        if let (Some(m), Update::Failed(_)) = (&self.metrics, update) {
            m.inc_watch_restarts(kind);
        }
        self.with(|i| {
            let failing = matches!(update, Update::Failed(_));
            if failing {
                i.report.watch_errors += 1;
            }
            if matches!(update, Update::Listed(_)) {
                i.report.lists += 1;
            }
            let changed = if failing {
                i.failing.insert(kind.to_owned())
            } else {
                i.failing.remove(kind)
            };
            if changed && let Some(m) = &self.metrics {
                m.set_watch_failing(kind, failing);
            }
            i.report.watch_failing = !i.failing.is_empty();
        });
    }

    pub(crate) fn leader(&self, leader: bool) {
        if let Some(m) = &self.metrics {
            m.set_leader(leader);
        }
        self.with(|i| i.report.leader = leader);
    }

    pub(crate) fn status_written(&self, ok: bool) {
        self.with(|i| {
            if ok {
                i.report.status_writes += 1;
            } else {
                i.report.status_write_errors += 1;
            }
        });
    }

    /// Address pool usage after a window.
    pub(crate) fn pools(&self, usage: &[crate::ipam::PoolUsage]) {
        if let Some(m) = &self.metrics {
            for p in usage {
                m.set_pool_usage(&p.name, p.in_use, p.size);
            }
        }
    }

    pub(crate) fn event_sent(&self) {
        self.with(|i| i.report.events_sent += 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_most_recent_generations_in_order() {
        let stats = KubeSourceStats::default();
        for g in 1..=(RECENT_GENERATIONS as u64 + 5) {
            stats.published(GenerationTiming {
                generation: g,
                ..GenerationTiming::default()
            });
        }
        let r = stats.report();
        assert!(r.synced);
        assert_eq!(r.generations_published, RECENT_GENERATIONS as u64 + 5);
        assert_eq!(r.recent.len(), RECENT_GENERATIONS);
        assert_eq!(r.recent.first().map(|t| t.generation), Some(6));
        assert_eq!(
            stats.last().map(|t| t.generation),
            Some(RECENT_GENERATIONS as u64 + 5)
        );
    }

    #[test]
    fn feeds_the_gateway_metrics_handle() {
        let metrics = ControlPlaneMetrics::new();
        let stats = KubeSourceStats::with_metrics(metrics.clone());
        stats.published(GenerationTiming {
            generation: 2,
            services_changed: 1,
            build_us: 3_000,
            event_to_live_us: 7_000,
        });
        stats.watch::<()>("services", &Update::Failed("410 Gone".into()));
        stats.watch::<()>("endpointslices", &Update::Failed("refused".into()));
        assert_eq!(
            metrics.report().watch_failing,
            [("endpointslices".into(), true), ("services".into(), true)].into()
        );
        stats.watch::<()>("services", &Update::Listed(Vec::new()));
        // One watch back: the other is still failing.
        assert!(stats.report().watch_failing);
        stats.watch::<()>("endpointslices", &Update::Resumed);
        assert!(!stats.report().watch_failing);
        assert_eq!(
            metrics.report().watch_failing,
            [("endpointslices".into(), false), ("services".into(), false)].into()
        );
        stats.watch::<()>("endpointslices", &Update::Applied(()));
        stats.leader(true);
        stats.pools(&[crate::ipam::PoolUsage {
            name: "default".into(),
            in_use: 2,
            size: 14,
        }]);
        let r = metrics.report();
        assert_eq!(r.build_ms.count, 1);
        assert!((r.build_ms.sum_ms - 3.0).abs() < 1e-9);
        assert_eq!(r.event_to_live_ms.count, 1);
        assert!((r.event_to_live_ms.sum_ms - 7.0).abs() < 1e-9);
        assert_eq!(r.watch_restarts.get("services"), Some(&1));
        assert_eq!(r.watch_restarts.get("endpointslices"), Some(&1));
        assert_eq!(r.leader, Some(true));
        assert_eq!(r.pools["default"].used, 2);
        assert_eq!(r.pools["default"].size, 14);
        // The source's own report counts the same.
        assert_eq!(stats.report().watch_errors, 2);
    }
}
