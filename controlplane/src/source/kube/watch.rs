//! The two watches (core/v1 Services, discovery.k8s.io/v1 EndpointSlices),
//! each a kube-runtime [`watcher`] turned into [`Change`]s on one channel.
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
//! * every change carries the [`Instant`] it arrived, the start of the
//!   event-to-live latency.

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
    tx: mpsc::UnboundedSender<Change>,
    wrap: fn(Update<K>, Instant) -> Change,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let config = watcher::Config::default();
    let mut stream = watcher(api, config)
        .backoff(RetryBackoff::default())
        .boxed();
    let mut buffer: Option<Vec<K>> = None;
    let mut failing = false;
    while let Some(item) = stream.next().await {
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
                if tx.send(wrap(Update::Failed(e.to_string()), now)).is_err() {
                    return;
                }
                continue;
            }
        };
        if failing {
            info!(what, "watch recovered");
            failing = false;
        }
        if tx.send(wrap(update, now)).is_err() {
            return;
        }
    }
}

/// Start both watches on the current tokio runtime; they stop when the
/// receiver is dropped (or the tasks are aborted).
pub fn spawn_watches(
    client: &Client,
    tx: mpsc::UnboundedSender<Change>,
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
