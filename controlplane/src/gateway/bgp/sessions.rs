//! The sessions: one [`Session`] per `[[bgp.peer]]`, on the speaker's own
//! tokio runtime (one thread, `portico-bgp`; the sessions' sockets open in
//! the gateway's network namespace, which the whole process is in).
//!
//! Invariants:
//! * `sessions[i]` runs `peers[i]` of the plan in force, and was last told
//!   `sent[i]` (a route set is handed to a session only when it differs);
//! * a reload restarts exactly the sessions whose [`PeerConfig`] changed
//!   (Cease to the old one, a new session to the new peer); the others keep
//!   their TCP connection and get the new desired routes as a difference;
//! * stopping a session always sends a Cease (RFC 4486 Administrative
//!   Shutdown / RFC 9003 message) when it is up.

use super::super::GatewayError;
use crate::admin::BgpPeerReport;
use portico_bgp::{PeerConfig, Routes, Session};
use std::time::Duration;
use tokio::runtime::Runtime;
use tracing::{info, warn};

/// One running session and what it was last told.
#[derive(Debug)]
struct Peer {
    config: PeerConfig,
    session: Session,
    sent: Routes,
    /// The generation of the last [`Session::set_routes`].
    generation: u64,
}

/// Every session of the gateway.
#[derive(Debug)]
pub struct Sessions {
    runtime: Runtime,
    peers: Vec<Peer>,
}

impl Sessions {
    /// The runtime and a session for each of `peers` (connecting at once,
    /// announcing nothing yet).
    pub fn start(peers: &[PeerConfig]) -> Result<Self, GatewayError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("portico-bgp")
            .enable_all()
            .build()
            .map_err(GatewayError::BgpRuntime)?;
        let mut sessions = Sessions {
            runtime,
            peers: Vec::new(),
        };
        for p in peers {
            let peer = sessions.spawn(p.clone());
            sessions.peers.push(peer);
        }
        Ok(sessions)
    }

    fn spawn(&self, config: PeerConfig) -> Peer {
        info!(peer = %config.name(), peer_asn = config.peer_asn, my_asn = config.my_asn,
            "BGP session starting");
        let _guard = self.runtime.enter();
        Peer {
            session: Session::spawn(config.clone()),
            config,
            sent: Routes::new(),
            generation: 0,
        }
    }

    /// Make the sessions those of `peers` (a reload): unchanged peers keep
    /// their session, changed or removed ones are stopped with a Cease,
    /// new ones started. Returns how many sessions were (re)started.
    pub fn reconcile(&mut self, peers: &[PeerConfig]) -> usize {
        let mut old: Vec<Option<Peer>> = self.peers.drain(..).map(Some).collect();
        let mut started = 0;
        for config in peers {
            let kept = old
                .iter_mut()
                .find(|p| p.as_ref().is_some_and(|p| p.config == *config))
                .and_then(Option::take);
            match kept {
                Some(p) => self.peers.push(p),
                None => {
                    started += 1;
                    let peer = self.spawn(config.clone());
                    self.peers.push(peer);
                }
            }
        }
        for p in old.into_iter().flatten() {
            info!(peer = %p.config.name(), "BGP session removed or changed by the reload; stopping it");
            self.runtime
                .block_on(p.session.shutdown("configuration changed"));
        }
        started
    }

    /// Hand each session its desired routes (`routes[i]` for peer `i`),
    /// where they differ from what it was last told.
    pub fn set_routes(&mut self, routes: &[Routes]) {
        for (peer, want) in self.peers.iter_mut().zip(routes) {
            if peer.sent != *want {
                peer.generation = peer.session.set_routes(want.clone());
                peer.sent = want.clone();
            }
        }
    }

    /// Withdraw every route from every session.
    pub fn withdraw_all(&mut self) {
        let none = vec![Routes::new(); self.peers.len()];
        self.set_routes(&none);
    }

    /// Wait (at most `timeout` in all) until every Established session has
    /// been sent its last route set; sessions that are not up have nothing
    /// to withdraw from (a router drops our routes when the session goes).
    /// Returns the peers that did not confirm in time.
    pub fn wait_synced(&self, timeout: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut late = Vec::new();
        for peer in &self.peers {
            if peer.session.stats().state != portico_bgp::State::Established {
                continue;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let waited = self
                .runtime
                .block_on(peer.session.wait_synced(peer.generation, left));
            if let Err(e) = waited {
                warn!(peer = %peer.config.name(), error = %e, "BGP withdrawal not confirmed");
                late.push(peer.config.name());
            }
        }
        late
    }

    /// The sessions' reports, in peer order.
    pub fn reports(&self) -> Vec<BgpPeerReport> {
        self.peers
            .iter()
            .map(|p| {
                let s = p.session.stats();
                BgpPeerReport {
                    peer: s.peer.clone(),
                    peer_asn: p.config.peer_asn,
                    my_asn: p.config.my_asn,
                    state: s.state.to_string(),
                    state_number: s.state.number(),
                    uptime_s: s.uptime().map(|d| d.as_secs()),
                    hold_time_s: s.hold_time_s,
                    prefixes_sent: s.prefixes_sent,
                    prefixes_desired: p.sent.len() as u64,
                    updates_sent: s.updates_sent,
                    updates_received: s.updates_received,
                    notifications_sent: s.notifications_sent,
                    notifications_received: s.notifications_received,
                    flaps: s.flaps,
                    connect_attempts: s.connect_attempts,
                    last_error: s.last_error.clone(),
                }
            })
            .collect()
    }

    /// Cease every session with `message` and wait for them to close.
    pub fn stop(mut self, message: &str) {
        let peers: Vec<Peer> = self.peers.drain(..).collect();
        self.runtime.block_on(async {
            for p in peers {
                let stats = p.session.shutdown(message).await;
                info!(peer = %stats.peer, updates_sent = stats.updates_sent,
                    "BGP session stopped (Cease sent if it was up)");
            }
        });
        self.runtime.shutdown_timeout(Duration::from_secs(1));
    }
}
