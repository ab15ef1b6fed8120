//! The Kubernetes source: Services and EndpointSlices from the API server
//! become the dataplane's services, LoadBalancer Services get addresses
//! from the configured pools (MetalLB-style) written back to
//! `status.loadBalancer.ingress`, and several Portico instances agree on
//! one writer through a Lease.
//!
//! It runs on its own thread with a single-threaded tokio runtime (never on
//! a worker core) and publishes through the gateway's [`Publisher`]:
//!
//! ```text
//!  watch Services ─┐                      ┌─ Lease (leader election)
//!  watch Slices ───┴─> ClusterState ─> dirty set ─(debounce)─> Reconciler:
//!     IPAM (LoadBalancer) -> model -> specs -> SnapshotBuilder::update
//!     -> Publisher::publish -> status patches + Events (leader only)
//! ```
//!
//! Invariants:
//! * nothing is published before both initial lists are complete (the
//!   watches' `InitDone`); a 410 Gone relists and the store applies only the
//!   differences ([`store`], [`watch`]);
//! * while the API server is unreachable the dataplane keeps the last
//!   published snapshot; the watches retry with capped backoff and resume
//!   (or relist) when it is back, which brings every change made meanwhile;
//! * every watch event marks the Services it touches dirty; the debouncer
//!   coalesces a burst, then one window rebuilds the dirty Services and
//!   publishes at most one snapshot ([`reconcile`]);
//! * VIPs are `ListenerKind::Vip` listeners, so the snapshot builder makes
//!   them owned addresses of the outside port: the workers answer ARP for
//!   them and send a gratuitous ARP when one appears, as for a reload;
//! * only the Lease holder writes statuses and Events ([`lease`],
//!   [`status`]); all instances forward;
//! * status writes are paced ([`pace`]): one PATCH in flight per Service,
//!   at most `status_writes_in_flight` in all, at most
//!   `status_writes_per_s` per second after a burst of
//!   `status_write_burst` (`[kubernetes]`, defaults 8, 200 and 50), Events
//!   included; the rest wait in the [`outbox`].
//!
//! Per published generation the build time and the event-to-live latency
//! are kept in [`KubeSourceStats`] (and logged at debug).

pub mod lease;
pub mod outbox;
pub mod pace;
pub mod reconcile;
pub mod stats;
pub mod status;
pub mod store;
pub mod watch;

use crate::build::{Debouncer, ModelConfig};
use crate::ipam::{Allocator, ServiceKey};
use dataplane::snapshot::{Publisher, SnapshotBuilder};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use lease::{LeaderElector, Leadership, LeaseConfig};
use nic_config::{KubernetesPlan, Plan};
use outbox::Outbox;
use pace::StatusPacer;
use reconcile::Reconciler;
pub use stats::{GenerationTiming, KubeSourceReport, KubeSourceStats};
use status::StatusWriter;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use store::ClusterState;
use tokio::sync::{mpsc, watch as tokio_watch};
use tracing::{debug, error, info, warn};
use watch::Change;

/// How long a stop waits for the Lease to be released.
const RELEASE_TIMEOUT_MS: u64 = 2_000;

/// Why the source could not start.
#[derive(Debug, thiserror::Error)]
pub enum KubeSourceError {
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error("no Kubernetes configuration found: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("Kubernetes client: {0}")]
    Client(#[from] kube::Error),
    #[error("starting the Kubernetes source thread: {0}")]
    Thread(String),
}

/// A Kubernetes client from the kubeconfig file, or inferred (`$KUBECONFIG`,
/// `~/.kube/config`, in-cluster service account) when there is none.
pub async fn connect(kubeconfig: Option<&Path>) -> Result<Client, KubeSourceError> {
    let config = match kubeconfig {
        Some(path) => {
            let err = |source| KubeSourceError::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let file = Kubeconfig::read_from(path).map_err(err)?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(err)?
        }
        None => kube::Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}

/// The Lease settings of a plan; the identity defaults to the host name.
pub fn lease_config(plan: &KubernetesPlan) -> LeaseConfig {
    let le = &plan.leader_election;
    LeaseConfig {
        namespace: le.lease_namespace.clone(),
        name: le.lease_name.clone(),
        identity: le.identity.clone().unwrap_or_else(host_name),
        lease_duration: Duration::from_millis(le.lease_duration_ms),
        renew_deadline: Duration::from_millis(le.renew_deadline_ms),
        retry_period: Duration::from_millis(le.retry_period_ms),
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("portico-{}", std::process::id()))
}

/// What the source starts from.
#[derive(Debug)]
pub struct KubeSourceParts {
    pub kubernetes: KubernetesPlan,
    pub options: ModelConfig,
    pub allocator: Allocator,
    /// Has built the base snapshot (ports, addresses, static services)
    /// that `publisher` holds.
    pub builder: SnapshotBuilder,
    pub publisher: Publisher,
    /// Cores the control thread must not be pinned to (the workers').
    pub worker_cores: Vec<usize>,
    /// The gateway's Prometheus handle (`None`: numbers only in
    /// [`KubeSource::stats`]).
    pub metrics: Option<crate::admin::ControlPlaneMetrics>,
}

impl KubeSourceParts {
    /// The parts for `plan` (which must have a `[kubernetes]` section).
    pub fn from_plan(plan: &Plan, builder: SnapshotBuilder, publisher: Publisher) -> Option<Self> {
        let kubernetes = plan.kubernetes.clone()?;
        Some(KubeSourceParts {
            options: ModelConfig::from_plan(plan)?,
            allocator: Allocator::new(&plan.address_pools),
            kubernetes,
            builder,
            publisher,
            worker_cores: plan.dataplane.cores.clone(),
            metrics: None,
        })
    }
}

/// The running source.
#[derive(Debug)]
pub struct KubeSource {
    stop: tokio_watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<KubeSourceStats>,
    leadership: Leadership,
}

impl KubeSource {
    /// Connect and start the watches, the election and the reconcile loop
    /// on a new thread. Fails when the client cannot be configured; an
    /// unreachable API server is not an error (the source retries).
    pub fn start(parts: KubeSourceParts) -> Result<Self, KubeSourceError> {
        let stats = Arc::new(match &parts.metrics {
            Some(m) => KubeSourceStats::with_metrics(m.clone()),
            None => KubeSourceStats::default(),
        });
        let (stop_tx, stop_rx) = tokio_watch::channel(false);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread_stats = Arc::clone(&stats);
        let thread = std::thread::Builder::new()
            .name("portico-kube".into())
            .spawn(move || {
                pin_off_worker_cores(&parts.worker_cores);
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(KubeSourceError::Thread(e.to_string())));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let client = match connect(parts.kubernetes.kubeconfig.as_deref()).await {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let (elector, leadership) =
                        LeaderElector::new(client.clone(), lease_config(&parts.kubernetes));
                    let _ = ready_tx.send(Ok(leadership.clone()));
                    let elector_task = tokio::spawn(elector.run(stop_rx.clone()));
                    run(client, parts, leadership, thread_stats, stop_rx).await;
                    let _ = tokio::time::timeout(
                        Duration::from_millis(RELEASE_TIMEOUT_MS),
                        elector_task,
                    )
                    .await;
                });
            })
            .map_err(|e| KubeSourceError::Thread(e.to_string()))?;
        let leadership = match ready_rx.recv() {
            Ok(Ok(leadership)) => leadership,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(KubeSourceError::Thread("the source thread died".into()));
            }
        };
        Ok(KubeSource {
            stop: stop_tx,
            thread: Some(thread),
            stats,
            leadership,
        })
    }

    pub fn stats(&self) -> Arc<KubeSourceStats> {
        Arc::clone(&self.stats)
    }

    pub fn leadership(&self) -> Leadership {
        self.leadership.clone()
    }

    /// Whether the source thread has ended (it only ends when stopped).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stop: no more writes, release the Lease, end the thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.send_replace(true);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            error!("the Kubernetes source thread panicked");
        }
    }
}

impl Drop for KubeSource {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Keep the control thread off the workers' cores: pin it to the first
/// core no worker uses (unpinned when there is none or no core is set).
fn pin_off_worker_cores(worker_cores: &[usize]) {
    if worker_cores.is_empty() {
        return;
    }
    let free = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .find(|c| !worker_cores.contains(&c.id));
    match free {
        Some(core) if core_affinity::set_for_current(core) => {
            info!(
                core = core.id,
                "Kubernetes source pinned off the worker cores"
            );
        }
        _ => warn!("every core runs a worker: the Kubernetes source shares them"),
    }
}

/// The reconcile loop; returns when `stop` turns true.
async fn run(
    client: Client,
    parts: KubeSourceParts,
    leadership: Leadership,
    stats: Arc<KubeSourceStats>,
    mut stop: tokio_watch::Receiver<bool>,
) {
    let KubeSourceParts {
        kubernetes,
        options,
        allocator,
        builder,
        publisher,
        ..
    } = parts;
    let identity = lease_config(&kubernetes).identity;
    let writer = StatusWriter::new(
        client.clone(),
        &identity,
        leadership.clone(),
        Arc::clone(&stats),
    );
    let (tx, mut rx) = mpsc::channel::<Change>(watch::CHANGE_QUEUE_DEPTH);
    let watches = watch::spawn_watches(&client, tx);
    let mut leader_changes = leadership.changes();

    let mut state = ClusterState::default();
    let mut reconciler = Reconciler::new(options, allocator, builder);
    let mut dirty: Debouncer<ServiceKey> =
        Debouncer::new(kubernetes.debounce_ms, kubernetes.debounce_max_ms);
    let epoch = Instant::now();
    let ms = |t: Instant| t.saturating_duration_since(epoch).as_millis() as u64;
    let mut first_event: Option<Instant> = None;
    let mut published_once = false;
    let mut outbox = Outbox::new(StatusPacer::from_plan(&kubernetes.status_writes), epoch);
    let far = Duration::from_secs(3600);

    loop {
        let window_at = match (state.synced(), dirty.deadline_ms()) {
            (true, Some(due)) => epoch + Duration::from_millis(due),
            (true, None) if !published_once => Instant::now(),
            _ => Instant::now() + far,
        };
        let retry_at = outbox.retry_at.unwrap_or_else(|| Instant::now() + far);
        let paced_at = outbox.next_at.unwrap_or_else(|| Instant::now() + far);
        tokio::select! {
            biased;
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
            }
            () = until(window_at) => {
                let Some(keys) = dirty.poll(ms(Instant::now())).or_else(|| {
                    (!published_once).then(Vec::new)
                }) else {
                    continue;
                };
                let keys: BTreeSet<ServiceKey> = keys.into_iter().collect();
                let leader = leadership.may_write();
                let outcome = reconciler.window(&state, &keys, leader);
                published_once = true;
                if outcome.build_failed {
                    stats.build_failed();
                }
                stats.pools(&reconciler.allocator().pool_usage());
                if let Some(snapshot) = outcome.snapshot {
                    let generation = snapshot.generation;
                    publisher.publish(snapshot);
                    let timing = GenerationTiming {
                        generation,
                        services_changed: outcome.services_changed,
                        build_us: outcome.build_us,
                        event_to_live_us: first_event
                            .map_or(0, |t| t.elapsed().as_micros() as u64),
                    };
                    debug!(generation, services = timing.services_changed,
                        build_us = timing.build_us, event_to_live_us = timing.event_to_live_us,
                        "snapshot published");
                    stats.published(timing);
                } else if !stats.report().synced {
                    // Synced with nothing to change: the base snapshot is
                    // what the cluster asks for.
                    stats.published(GenerationTiming {
                        generation: publisher.current().generation,
                        ..GenerationTiming::default()
                    });
                }
                first_event = None;
                for event in outcome.events {
                    outbox.event(&writer, event, leader);
                }
                if leader {
                    outbox.check_statuses(keys);
                    outbox.pump(&mut reconciler, &state, &writer);
                }
            }
            Some(change) = rx.recv() => {
                // Take everything already queued: a burst that arrived
                // together is one window.
                let mut next = Some(change);
                while let Some(change) = next {
                    let (touched, at) = match change {
                        Change::Services(update, at) => {
                            stats.watch("services", &update);
                            (state.apply_services(*update), at)
                        }
                        Change::Slices(update, at) => {
                            stats.watch("endpointslices", &update);
                            (state.apply_slices(*update), at)
                        }
                    };
                    if !touched.is_empty() {
                        first_event.get_or_insert(at);
                        for key in touched {
                            dirty.mark(key, ms(at));
                        }
                    }
                    next = rx.try_recv().ok();
                }
            }
            Ok(()) = leader_changes.changed() => {
                let leading = *leader_changes.borrow_and_update();
                stats.leader(leading);
                // A new leader assigns what the old one left undone and
                // writes every status that disagrees; a former leader goes
                // back to following the statuses.
                let now = Instant::now();
                for (key, _) in state.services() {
                    first_event.get_or_insert(now);
                    dirty.mark(key.clone(), ms(now));
                }
            }
            Some(joined) = outbox.writes.join_next(), if !outbox.writes.is_empty() => {
                outbox.write_done(joined);
                if leadership.may_write() {
                    outbox.pump_if_idle(&mut reconciler, &state, &writer);
                }
            }
            Some(joined) = outbox.event_tasks.join_next(), if !outbox.event_tasks.is_empty() => {
                outbox.event_done(joined);
                if leadership.may_write() {
                    outbox.pump_if_idle(&mut reconciler, &state, &writer);
                }
            }
            () = until(paced_at), if outbox.next_at.is_some() => {
                outbox.next_at = None;
                if leadership.may_write() {
                    outbox.pump(&mut reconciler, &state, &writer);
                }
            }
            () = until(retry_at), if outbox.retry_at.is_some() => {
                outbox.retry_failed();
                if leadership.may_write() {
                    outbox.pump(&mut reconciler, &state, &writer);
                }
            }
        }
    }
    for w in watches {
        w.abort();
    }
    outbox.abort_all();
    info!("Kubernetes source stopped");
}

/// Complete at `deadline`; at once when it has passed (tokio's timer would
/// round a past deadline up to its next 1 ms tick, which a zero debounce
/// would pay on every window).
async fn until(deadline: Instant) {
    if deadline > Instant::now() {
        tokio::time::sleep_until(deadline.into()).await;
    }
}
