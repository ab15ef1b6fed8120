//! Leader election on a `coordination.k8s.io/v1` Lease, written here with
//! plain get/create/replace calls and the object's `resourceVersion` for
//! optimistic concurrency (the algorithm of client-go's `leaderelection`
//! package, which kube-controller-manager and MetalLB's controller use).
//!
//! Every Portico instance forwards traffic; only the holder of the Lease
//! writes Service statuses and Events. Invariants:
//! * a candidate takes the Lease only when it is free (no holder, as left by
//!   a clean release) or when the record it observed has not changed for a
//!   whole `lease_duration` *on its own clock* (no cross-host clock
//!   comparison, as in client-go);
//! * a write is allowed ([`Leadership::may_write`]) only until
//!   `renew_deadline` after the start of the last successful renewal. The
//!   renewal is stored with a renewTime no earlier than that start, so
//!   others cannot see the Lease expire before `lease_duration` after it,
//!   and `renew_deadline < lease_duration` leaves the margin: the old
//!   holder has stopped writing before anyone can take over;
//! * a failed or conflicting (HTTP 409) update never extends leadership;
//! * on a clean stop the holder releases the Lease (empty holder, duration
//!   1 s) so that another instance takes over at its next retry instead of
//!   after a full lease duration.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// Settings of the election (from the `[kubernetes]` section).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This instance's name in `holderIdentity`; unique per instance.
    pub identity: String,
    /// How long a Lease that is not renewed keeps others away.
    pub lease_duration: Duration,
    /// How long the holder may go without a successful renewal before it
    /// stops writing; below `lease_duration`.
    pub renew_deadline: Duration,
    /// Time between two attempts to acquire or renew.
    pub retry_period: Duration,
}

/// Why one attempt to acquire or renew failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lease {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("lease {namespace}/{name}: the attempt took longer than {timeout_ms} ms")]
    Timeout {
        namespace: String,
        name: String,
        timeout_ms: u64,
    },
}

#[derive(Debug, Default)]
struct LeadershipState {
    /// Writes are allowed until then; `None`: not the holder.
    write_until: Option<Instant>,
    /// The holder this instance last observed (possibly itself).
    holder: Option<String>,
}

/// Whether this instance holds the Lease; cheap to clone and read from any
/// thread or task.
#[derive(Clone, Debug)]
pub struct Leadership {
    state: Arc<Mutex<LeadershipState>>,
    changes: watch::Receiver<bool>,
}

impl Leadership {
    /// True while this instance holds the Lease and its last successful
    /// renewal started less than `renew_deadline` ago. Check right before
    /// every write.
    pub fn may_write(&self) -> bool {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.write_until.is_some_and(|t| Instant::now() < t)
    }

    /// The holder last observed, if any.
    pub fn holder(&self) -> Option<String> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.holder.clone()
    }

    /// Changes of "this instance leads": `true` when it acquired the Lease,
    /// `false` when it lost or released it.
    pub fn changes(&self) -> watch::Receiver<bool> {
        self.changes.clone()
    }
}

/// The election loop of one instance.
#[derive(Debug)]
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    state: Arc<Mutex<LeadershipState>>,
    changes: watch::Sender<bool>,
    /// The Lease record last seen and when (on this clock) it last changed.
    observed: Option<(LeaseSpec, Instant)>,
}

impl LeaderElector {
    pub fn new(client: Client, config: LeaseConfig) -> (Self, Leadership) {
        let state = Arc::new(Mutex::new(LeadershipState::default()));
        let (tx, rx) = watch::channel(false);
        let elector = LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
            state: Arc::clone(&state),
            changes: tx,
            observed: None,
        };
        (elector, Leadership { state, changes: rx })
    }

    fn leading(&self) -> bool {
        *self.changes.borrow()
    }

    fn api_error(&self, source: kube::Error) -> LeaseError {
        LeaseError::Api {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            source,
        }
    }

    /// Run until `stop` turns true (or its sender is dropped), then release
    /// the Lease if held.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        info!(lease = %self.config.name, namespace = %self.config.namespace,
            identity = %self.config.identity, "leader election started");
        loop {
            if *stop.borrow() {
                break;
            }
            self.attempt().await;
            tokio::select! {
                _ = tokio::time::sleep(self.config.retry_period) => {}
                changed = stop.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
            }
        }
        if self.leading() {
            self.release().await;
        }
    }

    /// One try to acquire or renew, bounded in time; updates the shared
    /// state.
    async fn attempt(&mut self) {
        let started = Instant::now();
        // A holder must know the outcome before its write permission runs
        // out; a candidate has a full retry period.
        let timeout = {
            let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state
                .write_until
                .map(|t| t.saturating_duration_since(started))
                .unwrap_or(self.config.renew_deadline)
                .max(self.config.retry_period)
        };
        let outcome = match tokio::time::timeout(timeout, self.try_acquire_or_renew()).await {
            Ok(result) => result,
            Err(_) => Err(LeaseError::Timeout {
                namespace: self.config.namespace.clone(),
                name: self.config.name.clone(),
                timeout_ms: timeout.as_millis() as u64,
            }),
        };
        match outcome {
            Ok(true) => {
                let was_leading = self.leading();
                {
                    let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                    state.write_until = Some(started + self.config.renew_deadline);
                    state.holder = Some(self.config.identity.clone());
                }
                if !was_leading {
                    info!(lease = %self.config.name, identity = %self.config.identity,
                        "acquired the lease: this instance writes statuses and events");
                    self.changes.send_replace(true);
                }
            }
            Ok(false) => self.step_down("another instance holds the lease"),
            Err(e) => {
                warn!(error = %e, "lease: acquire/renew failed");
                let expired = {
                    let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                    state.write_until.is_some_and(|t| Instant::now() >= t)
                };
                if expired {
                    self.step_down("renew deadline passed without a successful renewal");
                }
            }
        }
    }

    fn step_down(&mut self, why: &str) {
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.write_until = None;
            state.holder = self
                .observed
                .as_ref()
                .and_then(|(spec, _)| spec.holder_identity.clone())
                .filter(|h| !h.is_empty());
        }
        if self.leading() {
            warn!(lease = %self.config.name, reason = why,
                "lost the lease: this instance stops writing statuses and events");
            self.changes.send_replace(false);
        } else {
            debug!(lease = %self.config.name, reason = why, "not the leader");
        }
    }

    /// client-go's tryAcquireOrRenew: `Ok(true)` when this instance holds
    /// the Lease after the call.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaseError> {
        let now = Timestamp::now();
        let duration_s =
            i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let existing = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.api_error(e))?;
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(duration_s),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(created.spec.unwrap_or_default());
                    Ok(true)
                }
                // Someone else created it first.
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(e) => Err(self.api_error(e)),
            };
        };
        let record = lease.spec.clone().unwrap_or_default();
        self.observe(record.clone());
        let holder = record.holder_identity.clone().unwrap_or_default();
        let mine = holder == self.config.identity;
        if !holder.is_empty() && !mine {
            let observed_at = self.observed.as_ref().map(|(_, t)| *t);
            let duration = record
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(self.config.lease_duration, Duration::from_secs);
            if observed_at.is_some_and(|t| t.elapsed() < duration) {
                return Ok(false);
            }
            info!(lease = %self.config.name, previous = %holder,
                "the lease expired without renewal; taking it over");
        }
        let spec = LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(duration_s),
            acquire_time: if mine {
                record.acquire_time.clone()
            } else {
                Some(MicroTime(now))
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(
                record.lease_transitions.unwrap_or(0) + i32::from(!mine && !holder.is_empty()),
            ),
            ..LeaseSpec::default()
        };
        lease.spec = Some(spec);
        // `lease.metadata.resource_version` is the one read above: the API
        // server refuses the update (409) if anyone wrote in between.
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                self.observe(updated.spec.unwrap_or_default());
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(self.api_error(e)),
        }
    }

    /// Remember `record`, restarting the expiry clock when it changed.
    fn observe(&mut self, record: LeaseSpec) {
        let changed = self.observed.as_ref().is_none_or(|(old, _)| *old != record);
        if changed {
            self.observed = Some((record, Instant::now()));
        }
    }

    /// Give the Lease up: stop writing first, then clear the holder so that
    /// another instance acquires at its next retry.
    async fn release(&mut self) {
        self.step_down("released on stop");
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let record = lease.spec.clone().unwrap_or_default();
        if record.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        let now = Timestamp::now();
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: record.lease_transitions,
            ..LeaseSpec::default()
        });
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(lease = %self.config.name, "lease released"),
            Err(e) => warn!(lease = %self.config.name, error = %e, "releasing the lease failed"),
        }
    }
}
