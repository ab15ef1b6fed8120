//! The worker watchdog: "no announcement from a box that does not
//! forward" (issue 13 §2).
//!
//! Every worker stores the dataplane clock's time into its
//! [`SharedCounters`](dataplane::counters::SharedCounters) heartbeat once
//! per poll loop (at most once a millisecond; an idle worker still loops
//! every driver wait, ≤ 10 ms). The control thread hands the heartbeats to
//! [`Watchdog::observe`] every tick. A worker whose heartbeat has not
//! changed for the timeout (`[bgp] watchdog_timeout_ms`) trips the
//! watchdog: every route is withdrawn. It recovers when every worker's
//! heartbeat has changed since the trip.
//!
//! Invariants:
//! * time is the control thread's [`Instant`], not the heartbeat's value:
//!   only *whether* a heartbeat changed matters, so the workers' clock and
//!   the control thread's never need to agree;
//! * one trip is one [`Transition::Stalled`] (and one counted trip), one
//!   recovery one [`Transition::Recovered`]; nothing in between.

use std::time::{Duration, Instant};

/// What changed at an [`Watchdog::observe`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// `worker` has not polled for `stalled_for`: withdraw everything.
    Stalled {
        worker: usize,
        stalled_for: Duration,
    },
    /// Every worker polls again: announce again.
    Recovered,
}

/// Per-worker heartbeat tracking; see the module docs.
#[derive(Debug)]
pub struct Watchdog {
    timeout: Duration,
    /// Per worker: the last heartbeat value seen and when it changed.
    seen: Vec<(u64, Instant)>,
    /// Per worker, while tripped: whether its heartbeat changed since.
    moved_since_trip: Option<Vec<bool>>,
    trips: u64,
}

impl Watchdog {
    pub fn new(timeout: Duration) -> Self {
        Watchdog {
            timeout,
            seen: Vec::new(),
            moved_since_trip: None,
            trips: 0,
        }
    }

    /// A new timeout (a reload); a trip in progress stays.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Whether routes are withdrawn because a worker stalled.
    pub fn tripped(&self) -> bool {
        self.moved_since_trip.is_some()
    }

    /// Times the watchdog tripped.
    pub fn trips(&self) -> u64 {
        self.trips
    }

    /// Look at the workers' heartbeats at `now`.
    pub fn observe(&mut self, heartbeats: &[u64], now: Instant) -> Option<Transition> {
        if self.seen.len() != heartbeats.len() {
            self.seen = heartbeats.iter().map(|&h| (h, now)).collect();
            self.moved_since_trip = None;
            return None;
        }
        for (i, (&beat, seen)) in heartbeats.iter().zip(self.seen.iter_mut()).enumerate() {
            if beat != seen.0 {
                *seen = (beat, now);
                if let Some(moved) = self.moved_since_trip.as_mut()
                    && let Some(m) = moved.get_mut(i)
                {
                    *m = true;
                }
            }
        }
        match &self.moved_since_trip {
            None => {
                let (worker, stalled_for) = self
                    .seen
                    .iter()
                    .enumerate()
                    .map(|(w, (_, at))| (w, now.saturating_duration_since(*at)))
                    .max_by_key(|(_, d)| *d)?;
                if stalled_for < self.timeout {
                    return None;
                }
                self.trips += 1;
                self.moved_since_trip = Some(vec![false; self.seen.len()]);
                Some(Transition::Stalled {
                    worker,
                    stalled_for,
                })
            }
            Some(moved) if moved.iter().all(|&m| m) => {
                self.moved_since_trip = None;
                Some(Transition::Recovered)
            }
            Some(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_millis(500);

    #[test]
    fn polling_workers_never_trip() {
        let mut w = Watchdog::new(TIMEOUT);
        let t0 = Instant::now();
        for i in 0..100u64 {
            let now = t0 + Duration::from_millis(50 * i);
            assert_eq!(w.observe(&[i, i * 2], now), None);
        }
        assert!(!w.tripped());
        assert_eq!(w.trips(), 0);
    }

    #[test]
    fn a_stalled_worker_trips_once_and_recovery_needs_every_worker() {
        let mut w = Watchdog::new(TIMEOUT);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(w.observe(&[1, 1], at(0)), None);
        // Worker 1 keeps polling, worker 0 stops.
        assert_eq!(w.observe(&[1, 2], at(200)), None);
        assert_eq!(w.observe(&[1, 3], at(499)), None, "not yet the timeout");
        assert_eq!(
            w.observe(&[1, 4], at(500)),
            Some(Transition::Stalled {
                worker: 0,
                stalled_for: Duration::from_millis(500)
            })
        );
        assert!(w.tripped());
        // Still stalled: no second trip.
        assert_eq!(w.observe(&[1, 5], at(2000)), None);
        assert_eq!(w.trips(), 1);
        // Worker 0 polls again; worker 1 has polled since the trip too.
        assert_eq!(w.observe(&[2, 6], at(2050)), Some(Transition::Recovered));
        assert!(!w.tripped());
        // And trips again on a second stall, counted.
        assert_eq!(w.observe(&[3, 7], at(2100)), None);
        assert!(matches!(
            w.observe(&[3, 8], at(2700)),
            Some(Transition::Stalled { worker: 0, .. })
        ));
        assert_eq!(w.trips(), 2);
    }

    #[test]
    fn recovery_waits_for_every_stalled_worker() {
        let mut w = Watchdog::new(TIMEOUT);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        w.observe(&[1, 1], at(0));
        assert!(matches!(
            w.observe(&[1, 1], at(600)),
            Some(Transition::Stalled { .. })
        ));
        // Only worker 1 comes back.
        assert_eq!(w.observe(&[1, 2], at(700)), None);
        assert!(w.tripped());
        assert_eq!(w.observe(&[2, 3], at(800)), Some(Transition::Recovered));
    }

    #[test]
    fn a_new_worker_count_starts_over() {
        let mut w = Watchdog::new(TIMEOUT);
        let t0 = Instant::now();
        w.observe(&[1], t0);
        assert_eq!(
            w.observe(&[1, 1], t0 + Duration::from_secs(5)),
            None,
            "first look at two workers"
        );
    }
}
