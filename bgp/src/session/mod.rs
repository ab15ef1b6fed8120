//! One BGP session per router: a tokio task running the RFC 4271 §8 state
//! machine (`fsm`), driven by a [`Session`] handle.
//!
//! The control plane says *what* to announce with [`Session::set_routes`]
//! (the whole desired set, each prefix with its attributes); the session
//! keeps an Adj-RIB-Out (`rib`) of what the router has, and once
//! Established sends the difference as UPDATEs, packing the prefixes that
//! share attributes into as few messages as fit 4096 bytes. After a
//! reconnect the full set is sent again. [`Session::shutdown`] sends a
//! Cease (Administrative Shutdown, RFC 4486/9003) and ends the task;
//! dropping the handle does the same in the background.
//!
//! Invariants:
//! - Nothing the peer sends can panic the task: decode errors become the
//!   NOTIFICATION of RFC 4271 §6 (or an RFC 7606 treat-as-withdraw, logged
//!   and counted: we keep no routes from the peer) and a closed session.
//! - Every state change and every error is one `tracing` line (target
//!   `portico_bgp`) and lands in [`SessionStats`].
//! - Routes are only ever sent while Established; `synced_generation` in
//!   the stats is the last [`Session::set_routes`] generation the router
//!   has been sent in full.
//! - Routes of a family are sent only when both OPENs listed it (RFC 4760
//!   §8; `fsm` says how the families are chosen): IPv6 unicast in
//!   MP_REACH_NLRI / MP_UNREACH_NLRI with the IPv6 next hop of RFC 2545;
//!   IPv4 unicast with NEXT_HOP over an IPv4 session, or in MP_REACH_NLRI
//!   with the IPv6 next hop over an IPv6 session when both OPENs carried
//!   the Extended Next Hop Encoding capability (RFC 8950 §3, §4); the
//!   others are counted in `prefixes_skipped`, never an error.

mod backoff;
mod fsm;
pub(crate) mod rib;
mod transport;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{Family, PeerConfig};
use crate::wire::{Notification, Prefix};

pub use rib::RouteAttributes;

/// The desired routes: each prefix with its attributes (ORIGIN, AS_PATH
/// and NEXT_HOP are the session's: IGP, our ASN for eBGP, our address).
pub type Routes = BTreeMap<Prefix, RouteAttributes>;

/// The RFC 4271 §8.2.2 states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Not connected; waiting before the next attempt after an error.
    Idle,
    /// A TCP connection attempt is under way.
    Connect,
    /// The last attempt failed; waiting for the connect-retry timer.
    Active,
    /// Our OPEN is sent; waiting for the router's.
    OpenSent,
    /// OPENs exchanged; waiting for the router's KEEPALIVE.
    OpenConfirm,
    /// Routes are exchanged.
    Established,
}

impl State {
    /// The RFC's number for the state (Idle 1 ... Established 6), as BGP
    /// MIBs and `portico_bgp_session_state` use.
    pub fn number(self) -> u8 {
        match self {
            State::Idle => 1,
            State::Connect => 2,
            State::Active => 3,
            State::OpenSent => 4,
            State::OpenConfirm => 5,
            State::Established => 6,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Counters and state of one session: what `portico bgp` shows and the
/// metrics export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionStats {
    /// `address:port` of the router.
    pub peer: String,
    pub state: State,
    /// When the session last became Established (None while not).
    pub established_since: Option<Instant>,
    /// The hold time in use (after negotiation), 0 = no keepalives.
    pub hold_time_s: u16,
    pub updates_sent: u64,
    pub updates_received: u64,
    /// UPDATEs that RFC 7606 says to treat as withdraw (or whose attribute
    /// was discarded): logged and counted, session kept.
    pub updates_malformed: u64,
    pub notifications_sent: u64,
    pub notifications_received: u64,
    /// Times the session went down from Established.
    pub flaps: u64,
    /// TCP connection attempts.
    pub connect_attempts: u64,
    /// The families both sides offered in their OPENs (RFC 4760 §8), in
    /// [`Family::ALL`] order; empty while not Established.
    pub families: Vec<Family>,
    /// Both OPENs carried the Extended Next Hop Encoding capability for
    /// IPv4 unicast over IPv6 (RFC 8950 §4); false while not Established.
    pub extended_next_hop: bool,
    /// Our address on the connection (None while not connected).
    pub local_address: Option<IpAddr>,
    /// The global IPv6 next hop this session announces (RFC 2545 §2), and
    /// the link-local one after it (§3); None while not Established or
    /// when the session has none.
    pub next_hop_v6: Option<Ipv6Addr>,
    pub next_hop_v6_link_local: Option<Ipv6Addr>,
    /// Prefixes the router has from us now (our Adj-RIB-Out, every family).
    pub prefixes_sent: u64,
    /// Of those, IPv6 unicast prefixes.
    pub prefixes_sent_v6: u64,
    /// Desired prefixes not sent at the last sync because their family was
    /// not negotiated (or has no next hop on this session).
    pub prefixes_skipped: u64,
    /// Prefixes the router announced to us in total (we keep none).
    pub prefixes_received: u64,
    /// The last error, as logged.
    pub last_error: Option<String>,
    pub last_notification_sent: Option<Notification>,
    pub last_notification_received: Option<Notification>,
    /// The last [`Session::set_routes`] generation fully sent.
    pub synced_generation: u64,
}

impl SessionStats {
    fn new(peer: String) -> Self {
        SessionStats {
            peer,
            state: State::Idle,
            established_since: None,
            hold_time_s: 0,
            updates_sent: 0,
            updates_received: 0,
            updates_malformed: 0,
            notifications_sent: 0,
            notifications_received: 0,
            flaps: 0,
            connect_attempts: 0,
            families: Vec::new(),
            extended_next_hop: false,
            local_address: None,
            next_hop_v6: None,
            next_hop_v6_link_local: None,
            prefixes_sent: 0,
            prefixes_sent_v6: 0,
            prefixes_skipped: 0,
            prefixes_received: 0,
            last_error: None,
            last_notification_sent: None,
            last_notification_received: None,
            synced_generation: 0,
        }
    }

    /// How long the session has been Established.
    pub fn uptime(&self) -> Option<Duration> {
        self.established_since.map(|t| t.elapsed())
    }
}

/// The desired routes with their generation.
#[derive(Debug, Clone, Default)]
pub(crate) struct Desired {
    pub generation: u64,
    pub routes: Arc<Routes>,
}

/// Handle to a running session task.
#[derive(Debug)]
pub struct Session {
    desired: watch::Sender<Desired>,
    /// `Some(message)` asks the task to send a Cease and stop.
    stop: watch::Sender<Option<String>>,
    stats: watch::Receiver<SessionStats>,
    task: Option<JoinHandle<()>>,
}

/// Why waiting on a session gave up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("session with {peer} still {state} after {waited:?} (last error: {last_error})")]
    Timeout {
        peer: String,
        state: State,
        waited: Duration,
        last_error: String,
    },
    #[error("session task with {0} has ended")]
    Ended(String),
}

impl Session {
    /// Starts the session task on the current tokio runtime; it connects
    /// at once. `config` must have passed [`crate::BgpConfig::validate`].
    pub fn spawn(config: PeerConfig) -> Session {
        let (desired, desired_rx) = watch::channel(Desired::default());
        let (stop, stop_rx) = watch::channel(None);
        let (stats_tx, stats) = watch::channel(SessionStats::new(config.name()));
        let task = tokio::spawn(fsm::run(config, desired_rx, stop_rx, stats_tx));
        Session {
            desired,
            stop,
            stats,
            task: Some(task),
        }
    }

    /// Replaces the desired routes; the session sends the difference once
    /// Established (and everything after each reconnect). Returns the
    /// generation to wait for with [`Self::wait_synced`].
    pub fn set_routes(&self, routes: Routes) -> u64 {
        let mut generation = 0;
        self.desired.send_modify(|d| {
            d.generation += 1;
            d.routes = Arc::new(routes);
            generation = d.generation;
        });
        generation
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> SessionStats {
        self.stats.borrow().clone()
    }

    /// Waits until `pred` holds for the stats, at most `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        pred: impl FnMut(&SessionStats) -> bool,
    ) -> Result<SessionStats, SessionError> {
        let mut rx = self.stats.clone();
        match tokio::time::timeout(timeout, rx.wait_for(pred)).await {
            Ok(Ok(s)) => Ok(s.clone()),
            Ok(Err(_)) => Err(SessionError::Ended(self.stats.borrow().peer.clone())),
            Err(_) => {
                let s = self.stats.borrow();
                Err(SessionError::Timeout {
                    peer: s.peer.clone(),
                    state: s.state,
                    waited: timeout,
                    last_error: s.last_error.clone().unwrap_or_else(|| "none".into()),
                })
            }
        }
    }

    /// Waits until the session is Established.
    pub async fn wait_established(&self, timeout: Duration) -> Result<SessionStats, SessionError> {
        self.wait_for(timeout, |s| s.state == State::Established)
            .await
    }

    /// Waits until routes generation `generation` (or a later one) has been
    /// sent to the router.
    pub async fn wait_synced(
        &self,
        generation: u64,
        timeout: Duration,
    ) -> Result<SessionStats, SessionError> {
        self.wait_for(timeout, |s| s.synced_generation >= generation)
            .await
    }

    /// Sends a Cease (Administrative Shutdown with `message` as the RFC
    /// 9003 shutdown communication) if a session is up, closes it, and
    /// waits for the task to end. The router drops our routes at once.
    pub async fn shutdown(mut self, message: &str) -> SessionStats {
        let _ = self.stop.send(Some(message.to_string()));
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.stats()
    }

    /// Ends the task at once without a NOTIFICATION, as a crash does (the
    /// kernel still closes the TCP connection).
    pub fn abort(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for Session {
    /// A dropped handle stops the session cleanly (Cease) in the background.
    fn drop(&mut self) {
        if self.task.is_some() {
            let _ = self.stop.send(Some("session removed".to_string()));
        }
    }
}
