//! The two watches (core/v1 Services, discovery.k8s.io/v1 EndpointSlices),
//! each a kube-runtime [`watcher()`] turned into [`Change`]s on one channel.
//!
//! Invariants:
//! * objects of a (re)list are never passed on one by one: a watcher
//!   buffers `Init`..`InitApply`* and sends one [`Update::Listed`] with the
//!   complete list at `InitDone`, so the consumer replaces its store
//!   atomically. A 410 Gone (the watched resourceVersion was compacted) makes
//!   kube-runtime relist; the consumer keeps its store until the new list is
//!   complete and then applies only the differences — no state is lost and
//!   nothing is published from a half list;
//! * every error (API server unreachable, 410, 403…) is sent on as
//!   [`Update::Failed`] and the watch is retried with capped exponential
//!   backoff ([`RetryBackoff`]); a resumed watch continues from the last
//!   resourceVersion seen, so changes made while the API server was away
//!   arrive as ordinary events (or as a relist when they were compacted);
//! * a failed watch counts as resumed at its next event, or — since
//!   kube-runtime restarts a watch silently and a quiet cluster may send
//!   nothing for a long time — when it has reported no error for
//!   [`RESUME_QUIET_MS`] (longer than the longest retry wait, so a watch
//!   still failing would have reported again) *and* the API server then
//!   answers a one-object list of the same kind ([`Update::Resumed`]). An
//!   unreachable server fails that probe, so the watch stays failing;
//! * every change carries the [`Instant`] it arrived, the start of the
//!   event-to-live latency;
//! * the channel is bounded ([`CHANGE_QUEUE_DEPTH`]): a reconcile loop that
//!   falls behind makes the watches wait instead of queueing without end.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

/// First and longest wait between two attempts of a failed watch.
pub const WATCH_RETRY_MIN_MS: u64 = 200;
pub const WATCH_RETRY_MAX_MS: u64 = 5_000;

/// Quiet time after a watch's last error before the API server is probed
/// to confirm that the watch resumed.
pub const RESUME_QUIET_MS: u64 = WATCH_RETRY_MAX_MS + 1_000;

/// Longest wait for the answer to that probe.
const RESUME_PROBE_TIMEOUT_MS: u64 = 5_000;
/// Watch updates queued for the reconcile loop before the watches wait
/// (back-pressure: an update is an object, or a whole initial list).
pub const CHANGE_QUEUE_DEPTH: usize = 1024;

/// What a watch saw.
#[derive(Debug)]
pub enum Update<K> {
    /// Added or modified.
    Applied(K),
    Deleted(K),
    /// The complete list after a (re)list: replaces everything known.
    Listed(Vec<K>),
    /// The watch failed (and is being retried): the text of the error.
    Failed(String),
    /// A failed watch runs again and nothing changed meanwhile.
    Resumed,
}

/// One update of either watch, with its arrival time.
#[derive(Debug)]
pub enum Change {
    Services(Box<Update<Service>>, Instant),
    Slices(Box<Update<EndpointSlice>>, Instant),
}

/// Doubling backoff between `WATCH_RETRY_MIN_MS` and `WATCH_RETRY_MAX_MS`,
/// reset by any successful event. (kube-runtime's default waits up to 30 s,
/// too long for a load balancer whose API server just came back.)
#[derive(Debug, Clone)]
pub struct RetryBackoff {
    next_ms: u64,
}

impl Default for RetryBackoff {
    fn default() -> Self {
        RetryBackoff {
            next_ms: WATCH_RETRY_MIN_MS,
        }
    }
}

impl Iterator for RetryBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = self.next_ms;
        self.next_ms = (self.next_ms * 2).min(WATCH_RETRY_MAX_MS);
        Some(Duration::from_millis(now))
    }
}

impl Backoff for RetryBackoff {
    fn reset(&mut self) {
        self.next_ms = WATCH_RETRY_MIN_MS;
    }
}

/// Watch one resource kind across all namespaces until the receiver is
/// dropped, sending each update wrapped by `wrap`.
async fn watch_kind<K>(
    api: Api<K>,
    what: &'static str,
    tx: mpsc::Sender<Change>,
    wrap: fn(Update<K>, Instant) -> Change,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let config = watcher::Config::default();
    let mut stream = watcher(api.clone(), config)
        .backoff(RetryBackoff::default())
        // Server-side apply bookkeeping, never read here: at 10,000
        // Services and their EndpointSlices it is a large share of what
        // the store would hold (bench/RESULTS.md, issue 18).
        .modify(|object: &mut K| object.meta_mut().managed_fields = None)
        .boxed();
    let mut buffer: Option<Vec<K>> = None;
    let mut failing = false;
    // While failing: when to probe whether the watch has resumed.
    let mut probe_at = tokio::time::Instant::now();
    loop {
        let item = tokio::select! {
            item = stream.next() => match item {
                Some(item) => item,
                None => return,
            },
            () = tokio::time::sleep_until(probe_at), if failing => {
                if answers(&api).await {
                    info!(what, "watch resumed");
                    failing = false;
                    if tx.send(wrap(Update::Resumed, Instant::now())).await.is_err() {
                        return;
                    }
                } else {
                    probe_at = tokio::time::Instant::now()
                        + Duration::from_millis(RESUME_QUIET_MS);
                }
                continue;
            }
        };
        let now = Instant::now();
        let update = match item {
            Ok(watcher::Event::Init) => {
                debug!(what, "list started");
                buffer = Some(Vec::new());
                continue;
            }
            Ok(watcher::Event::InitApply(object)) => {
                buffer.get_or_insert_with(Vec::new).push(object);
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                let list = buffer.take().unwrap_or_default();
                info!(what, objects = list.len(), "list complete");
                Update::Listed(list)
            }
            Ok(watcher::Event::Apply(object)) => Update::Applied(object),
            Ok(watcher::Event::Delete(object)) => Update::Deleted(object),
            Err(e) => {
                // A relist after 410 starts over with `Init`; a failed
                // watch keeps what it had buffered until then.
                if !failing {
                    warn!(what, error = %e, "watch failed; retrying with backoff");
                } else {
                    debug!(what, error = %e, "watch still failing");
                }
                failing = true;
                probe_at =
                    tokio::time::Instant::from_std(now) + Duration::from_millis(RESUME_QUIET_MS);
                if tx
                    .send(wrap(Update::Failed(e.to_string()), now))
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            }
        };
        if failing {
            info!(what, "watch recovered");
            failing = false;
        }
        // Bounded: while the reconcile loop is behind, this waits, the
        // watch stream is not read, and the API server's TCP window
        // closes; nothing piles up in memory.
        if tx.send(wrap(update, now)).await.is_err() {
            return;
        }
    }
}

/// Whether the API server answers a one-object list of `api`'s kind in time.
async fn answers<K>(api: &Api<K>) -> bool
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let params = kube::api::ListParams::default().limit(1);
    let list = api.list_metadata(&params);
    matches!(
        tokio::time::timeout(Duration::from_millis(RESUME_PROBE_TIMEOUT_MS), list).await,
        Ok(Ok(_))
    )
}

/// Start both watches on the current tokio runtime; they stop when the
/// receiver is dropped (or the tasks are aborted).
pub fn spawn_watches(
    client: &Client,
    tx: mpsc::Sender<Change>,
) -> [tokio::task::JoinHandle<()>; 2] {
    let services: Api<Service> = Api::all(client.clone());
    let slices: Api<EndpointSlice> = Api::all(client.clone());
    let services_tx = tx.clone();
    [
        tokio::spawn(watch_kind(services, "services", services_tx, |u, at| {
            Change::Services(Box::new(u), at)
        })),
        tokio::spawn(watch_kind(slices, "endpointslices", tx, |u, at| {
            Change::Slices(Box::new(u), at)
        })),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_resets() {
        let mut b = RetryBackoff::default();
        let waits: Vec<u64> = (0..8)
            .map(|_| b.next().map_or(0, |d| d.as_millis() as u64))
            .collect();
        assert_eq!(waits, [200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_millis(WATCH_RETRY_MIN_MS)));
    }
}
