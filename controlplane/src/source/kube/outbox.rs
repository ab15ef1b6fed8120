//! What the leader owes the API server — status patches and Events — and
//! sends under one [`StatusPacer`], so a cold start with 10,000
//! LoadBalancer Services (10,000 PATCHes and 10,000 `IPAllocated` Events)
//! is a steady stream of requests instead of 20,000 at once (which also
//! held 20,000 request futures in memory: bench/RESULTS.md, issue 18).
//!
//! Invariants:
//! * one status PATCH in flight per Service; a Service dirtied again while
//!   its write is in flight waits for the completion;
//! * statuses before Events: a window's admitted requests go to the owed
//!   statuses first (in key order), the rest to the oldest Events;
//! * every admitted request is [`StatusPacer::finished`] exactly once (its
//!   task ended, either way), every unused admission given back;
//! * a follower's Events are only logged (no request), outside the pacer.

use super::pace::StatusPacer;
use super::reconcile::{Reconciler, ServiceEvent};
use super::status::{StatusError, StatusWriter, WriteOutcome};
use super::store::ClusterState;
use crate::ipam::ServiceKey;
use std::collections::{BTreeSet, HashSet, VecDeque};
use std::time::{Duration, Instant};
use tokio::task::{JoinError, JoinSet};
use tracing::warn;

/// Wait before retrying a failed status write.
pub const STATUS_RETRY_MS: u64 = 1_000;

/// The result of one status PATCH task.
pub type WriteResult = (ServiceKey, Result<WriteOutcome, StatusError>);

/// The leader's owed and in-flight requests.
#[derive(Debug)]
pub struct Outbox {
    status_dirty: BTreeSet<ServiceKey>,
    /// Failed writes, owed again at [`Self::retry_at`].
    failed: BTreeSet<ServiceKey>,
    in_flight: HashSet<ServiceKey>,
    /// Status PATCH tasks.
    pub writes: JoinSet<WriteResult>,
    events: VecDeque<ServiceEvent>,
    /// Event tasks; `true` when the pacer admitted it (a leader's send).
    pub event_tasks: JoinSet<bool>,
    pacer: StatusPacer,
    epoch: Instant,
    /// When the pacer admits the next owed request (`None`: nothing owed,
    /// or the in-flight cap is reached and a completion will pump).
    pub next_at: Option<Instant>,
    /// When to retry after a failed status write.
    pub retry_at: Option<Instant>,
}

impl Outbox {
    pub fn new(pacer: StatusPacer, epoch: Instant) -> Self {
        Outbox {
            status_dirty: BTreeSet::new(),
            failed: BTreeSet::new(),
            in_flight: HashSet::new(),
            writes: JoinSet::new(),
            events: VecDeque::new(),
            event_tasks: JoinSet::new(),
            pacer,
            epoch,
            next_at: None,
            retry_at: None,
        }
    }

    /// These Services' statuses are to be checked (and written if they
    /// differ) at the next [`Self::pump`].
    pub fn check_statuses(&mut self, keys: impl IntoIterator<Item = ServiceKey>) {
        self.status_dirty.extend(keys);
    }

    /// Queue an Event (leader), or log it now (follower).
    pub fn event(&mut self, writer: &StatusWriter, event: ServiceEvent, leader: bool) {
        if leader {
            self.events.push_back(event);
        } else {
            spawn_event(&mut self.event_tasks, writer, event, false);
        }
    }

    /// Requests owed and not yet sent.
    pub fn owed(&self) -> usize {
        self.status_dirty.len() + self.events.len()
    }

    fn now_ms(&self) -> u64 {
        Instant::now()
            .saturating_duration_since(self.epoch)
            .as_millis() as u64
    }

    /// Send as many owed requests as the pacer admits now and set
    /// [`Self::next_at`]. Call only while leading.
    pub fn pump(
        &mut self,
        reconciler: &mut Reconciler,
        state: &ClusterState,
        writer: &StatusWriter,
    ) {
        let admitted = self.pacer.admit(self.now_ms(), self.owed());
        let mut sent = 0;
        while sent < admitted {
            // Keys owing nothing once looked at are dropped: take batches
            // until the admitted writes are out or no key is left.
            let batch: BTreeSet<ServiceKey> = self
                .status_dirty
                .iter()
                .filter(|k| !self.in_flight.contains(*k))
                .take(admitted - sent)
                .cloned()
                .collect();
            if batch.is_empty() {
                break;
            }
            for key in &batch {
                self.status_dirty.remove(key);
            }
            for (key, addresses) in reconciler.status_writes(state, &batch) {
                self.in_flight.insert(key.clone());
                sent += 1;
                let writer = writer.clone();
                self.writes.spawn(async move {
                    let result = writer.write_ingress(&key, &addresses).await;
                    (key, result)
                });
            }
        }
        while sent < admitted {
            let Some(event) = self.events.pop_front() else {
                break;
            };
            spawn_event(&mut self.event_tasks, writer, event, true);
            sent += 1;
        }
        for _ in sent..admitted {
            self.pacer.unused();
        }
        self.schedule();
    }

    fn schedule(&mut self) {
        let waiting = !self.events.is_empty()
            || self
                .status_dirty
                .iter()
                .any(|k| !self.in_flight.contains(k));
        let now_ms = self.now_ms();
        self.next_at = if waiting {
            self.pacer
                .next_at_ms(now_ms)
                .map(|at_ms| self.epoch + Duration::from_millis(at_ms))
        } else {
            None
        };
    }

    /// A status PATCH task ended: free its slot; a failed write is owed
    /// again after [`STATUS_RETRY_MS`].
    pub fn write_done(&mut self, joined: Result<WriteResult, JoinError>) {
        self.pacer.finished();
        if let Ok((key, result)) = joined {
            self.in_flight.remove(&key);
            if let Err(e) = result {
                warn!(error = %e, "status write failed; retrying");
                self.failed.insert(key);
                self.retry_at
                    .get_or_insert_with(|| Instant::now() + Duration::from_millis(STATUS_RETRY_MS));
            }
        }
    }

    /// An Event task ended.
    pub fn event_done(&mut self, joined: Result<bool, JoinError>) {
        // An aborted or panicked task was admitted only if the leader sent
        // it; counting it as finished at worst frees a slot early.
        if joined.unwrap_or(true) {
            self.pacer.finished();
        }
    }

    /// [`Self::retry_at`] has come: the failed writes are owed again.
    pub fn retry_failed(&mut self) {
        self.retry_at = None;
        let failed = std::mem::take(&mut self.failed);
        self.status_dirty.extend(failed);
    }

    /// After a completion: pump unless a pacing timer is already set.
    pub fn pump_if_idle(
        &mut self,
        reconciler: &mut Reconciler,
        state: &ClusterState,
        writer: &StatusWriter,
    ) {
        if self.next_at.is_none() && self.owed() > 0 {
            self.pump(reconciler, state, writer);
        }
    }

    /// Stop every request in flight.
    pub fn abort_all(&mut self) {
        self.writes.abort_all();
        self.event_tasks.abort_all();
    }
}

fn spawn_event(
    tasks: &mut JoinSet<bool>,
    writer: &StatusWriter,
    event: ServiceEvent,
    admitted: bool,
) {
    let writer = writer.clone();
    tasks.spawn(async move {
        if let Err(e) = writer
            .event(&event.service, event.warning, &event.reason, &event.note)
            .await
        {
            warn!(error = %e, "sending the event failed");
        }
        admitted
    });
}
