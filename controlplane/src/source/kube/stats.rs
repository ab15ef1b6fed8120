//! Numbers of the Kubernetes source for the admin socket and /metrics: per
//! published generation the build time and the event-to-live latency (from
//! the arrival of the first watch event the generation contains to the
//! return of `Publisher::publish`), plus counters of what happened.
//!
//! Written by the source's control thread once per debounce window, read by
//! anyone; a plain mutex is enough (cold path, never the packet path).

use super::watch::Update;
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
    /// 410 Gone…); cleared by the next event or list (a resumed watch on
    /// which nothing happens does not clear it).
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
    recent: VecDeque<GenerationTiming>,
}

/// Shared between the source (writer) and readers.
#[derive(Debug, Default)]
pub struct KubeSourceStats {
    inner: Mutex<Inner>,
}

impl KubeSourceStats {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut inner)
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

    pub(crate) fn watch<K>(&self, update: &Update<K>) {
        self.with(|i| {
            let failing = matches!(update, Update::Failed(_));
            if failing {
                i.report.watch_errors += 1;
            }
            if matches!(update, Update::Listed(_)) {
                i.report.lists += 1;
            }
            i.report.watch_failing = failing;
        });
    }

    pub(crate) fn leader(&self, leader: bool) {
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
}
