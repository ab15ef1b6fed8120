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
                    prefixes_sent_v6: s.prefixes_sent_v6,
                    prefixes_skipped: s.prefixes_skipped,
                    prefixes: p.sent.keys().map(ToString::to_string).collect(),
                    families_offered: p
                        .config
                        .offered_families()
                        .iter()
                        .map(ToString::to_string)
                        .collect(),
                    families: s.families.iter().map(ToString::to_string).collect(),
                    next_hop_v6: s
                        .next_hop_v6
                        .or(p.config.next_hop_v6)
                        .map(|a| a.to_string()),
                    next_hop_v6_link_local: s.next_hop_v6_link_local.map(|a| a.to_string()),
                    local_address: s.local_address.map(|a| a.to_string()),
                    extended_next_hop_offered: p.config.offers_extended_next_hop(),
                    extended_next_hop: s.extended_next_hop,
                    ttl_security_hops: p.config.ttl_security_hops,
                    ttl: p.config.ttl(),
                    min_ttl: p.config.min_ttl(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// A peer on loopback whose port nobody listens on: the session keeps
    /// retrying (connection refused), which is all these tests need.
    fn peer(last_octet: u8) -> PeerConfig {
        let mut p = PeerConfig::new(
            Ipv4Addr::new(127, 0, 0, last_octet).into(),
            65000,
            65001,
            Ipv4Addr::new(192, 0, 2, 1),
        );
        p.port = 1;
        p
    }

    #[test]
    fn a_reload_restarts_only_the_changed_sessions() {
        let mut sessions = Sessions::start(&[peer(11), peer(12), peer(13)]).expect("runtime");
        sessions.set_routes(&[Routes::new(), Routes::new(), Routes::new()]);
        let mut changed = peer(12);
        changed.hold_time_s = 30;
        // 11 kept, 12 changed, 13 removed, 14 new.
        let restarted = sessions.reconcile(&[peer(11), changed.clone(), peer(14)]);
        assert_eq!(restarted, 2, "the changed and the new session");
        let names: Vec<String> = sessions.reports().into_iter().map(|r| r.peer).collect();
        assert_eq!(names, ["127.0.0.11:1", "127.0.0.12:1", "127.0.0.14:1"]);
        assert_eq!(
            sessions.peers.iter().map(|p| &p.config).collect::<Vec<_>>(),
            [&peer(11), &changed, &peer(14)]
        );
        assert_eq!(sessions.reconcile(&[peer(11), changed, peer(14)]), 0);
        sessions.stop("test over");
    }

    #[test]
    fn routes_are_handed_over_only_when_they_change() {
        let mut sessions = Sessions::start(&[peer(21)]).expect("runtime");
        let mut routes = Routes::new();
        routes.insert(
            "192.0.2.10/32".parse().expect("prefix"),
            portico_bgp::RouteAttributes::default(),
        );
        sessions.set_routes(std::slice::from_ref(&routes));
        assert_eq!(sessions.peers[0].generation, 1);
        sessions.set_routes(std::slice::from_ref(&routes));
        assert_eq!(sessions.peers[0].generation, 1, "unchanged: not sent again");
        assert_eq!(sessions.reports()[0].prefixes_desired, 1);
        sessions.withdraw_all();
        assert_eq!(sessions.peers[0].generation, 2);
        assert_eq!(sessions.reports()[0].prefixes_desired, 0);
        // Not Established: nothing to wait for.
        assert!(sessions.wait_synced(Duration::from_millis(100)).is_empty());
        sessions.stop("test over");
    }
}
