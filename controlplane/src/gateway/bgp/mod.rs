//! Announcing addresses: the gateway's BGP speaker (issue 13 §2), built on
//! portico-bgp's sessions.
//!
//! `portico run` with `[[bgp.peer]]`s starts one session per peer after
//! the workers ([`Speaker::start`]). The control thread then calls
//! [`Speaker::tick`] every control tick (50 ms) with the snapshot in force
//! and the workers' heartbeats:
//!
//! ```text
//!  snapshot ──► desired::qualifying_vips ──► desired::routes_per_peer ──┐
//!  heartbeats ─► watchdog::Watchdog (tripped: nothing) ─────────────────┤
//!  stopping (SIGTERM) ─► nothing ───────────────────────────────────────┤
//!                                            sessions::Sessions::set_routes
//! ```
//!
//! What is announced: exactly the VIPs this instance serves that have a
//! backend taking new flows, each through the advertisements its service
//! or address pool lists (`desired` says which and why, including why a
//! Kubernetes Service's externalIPs are not announced). A VIP is withdrawn
//! when its last ready/serving backend goes, when its listener goes (a
//! Service deleted, its address released), when a worker stops polling
//! (`watchdog`), and on a graceful stop ([`Speaker::withdraw_for_stop`]).
//!
//! A reload of `[bgp]` (SIGHUP) restarts only the sessions whose peer
//! configuration changed (`sessions`); changed advertisements are sent as
//! UPDATEs on the sessions that stay.
//!
//! Graceful stop (the gateway's shutdown, before anything else stops):
//! withdraw everything, wait (at most [`WITHDRAW_CONFIRM_TIMEOUT_MS`])
//! until every Established session has sent the withdrawal, keep
//! forwarding for `[bgp] shutdown_drain_s` so established flows finish
//! and routers converge, then Cease every session.
//!
//! Invariants:
//! * the routes of a session are a function of (snapshot, plan, watchdog,
//!   stopping) at the last tick: nothing else changes them;
//! * while the watchdog is tripped or the gateway stops, every session's
//!   desired set is empty;
//! * the speaker never blocks the workers: it runs on the control thread
//!   and its own runtime thread, and reads only what the workers publish.
//!
//! Families: IPv4 and IPv6 VIPs alike (`IpAddr`); each peer gets the
//! routes of the families it is offered, an IPv4 session to a router gets
//! an IPv6 next hop from the instance's IPv6 host addresses (`families`).
//!
//! Files: `desired` (the routes from a snapshot), `families` (next hops
//! and families per peer), `watchdog` (the worker watchdog), `sessions`
//! (the sessions' lifecycle and reports).

mod desired;
mod families;
mod sessions;
mod watchdog;

pub use desired::{peer_routes, qualifying_vips, routes_per_peer};
pub use families::effective_peers;
pub use watchdog::{Transition, Watchdog};

use super::GatewayError;
use crate::admin::BgpReport;
use dataplane::snapshot::Snapshot;
use nic_config::Plan;
use portico_bgp::{PeerConfig, Routes};
use sessions::Sessions;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{error, info, warn};

/// The longest a graceful stop waits for the sessions to send the
/// withdrawal before it drains anyway.
pub const WITHDRAW_CONFIRM_TIMEOUT_MS: u64 = 5_000;

/// Why every route is withdrawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Withdrawn {
    Watchdog,
    Stopping,
}

impl Withdrawn {
    fn name(self) -> &'static str {
        match self {
            Withdrawn::Watchdog => "watchdog",
            Withdrawn::Stopping => "stopping",
        }
    }
}

/// The gateway's BGP speaker; see the module docs.
#[derive(Debug)]
pub struct Speaker {
    sessions: Sessions,
    watchdog: Watchdog,
    stopping: bool,
    /// `(snapshot generation, plan revision)` the desired set was computed
    /// for.
    computed_for: Option<(u64, u64)>,
    plan_revision: u64,
    /// The plan's peers as the sessions run them ([`effective_peers`]).
    peers: Vec<PeerConfig>,
    vips: BTreeSet<IpAddr>,
    desired: Vec<Routes>,
    /// What `portico bgp` and the metrics read.
    report: Arc<Mutex<BgpReport>>,
}

impl Speaker {
    /// Start the sessions of `plan.bgp`, reporting into `report`; `None`
    /// without peers.
    pub fn start(plan: &Plan, report: Arc<Mutex<BgpReport>>) -> Result<Option<Self>, GatewayError> {
        if plan.bgp.peers.is_empty() {
            return Ok(None);
        }
        let peers = effective_peers(plan);
        let sessions = Sessions::start(&peers)?;
        Ok(Some(Speaker {
            sessions,
            watchdog: Watchdog::new(Duration::from_millis(u64::from(
                plan.bgp.watchdog_timeout_ms,
            ))),
            stopping: false,
            computed_for: None,
            plan_revision: 0,
            peers,
            vips: BTreeSet::new(),
            desired: Vec::new(),
            report,
        }))
    }

    /// A reload: the new plan's peers and advertisements (sessions whose
    /// peer changed restart), recomputed at the next tick.
    pub fn reload(&mut self, plan: &Plan) {
        self.peers = effective_peers(plan);
        let restarted = self.sessions.reconcile(&self.peers);
        if restarted > 0 {
            info!(restarted, "BGP sessions restarted by the reload");
        }
        self.watchdog.set_timeout(Duration::from_millis(u64::from(
            plan.bgp.watchdog_timeout_ms,
        )));
        self.plan_revision += 1;
        self.computed_for = None;
    }

    /// One control tick: watch the workers, recompute the desired routes
    /// if the snapshot or the plan changed, hand changes to the sessions,
    /// refresh the report.
    pub fn tick(&mut self, plan: &Plan, snapshot: &Snapshot, heartbeats: &[u64], now: Instant) {
        match self.watchdog.observe(heartbeats, now) {
            Some(Transition::Stalled {
                worker,
                stalled_for,
            }) => {
                error!(
                    worker,
                    stalled_ms = stalled_for.as_millis() as u64,
                    trips = self.watchdog.trips(),
                    "worker watchdog: a worker stopped polling; withdrawing every BGP route"
                );
            }
            Some(Transition::Recovered) => {
                info!("worker watchdog: every worker polls again; announcing the BGP routes again");
            }
            None => {}
        }
        let key = (snapshot.generation, self.plan_revision);
        if self.computed_for != Some(key) {
            let vips = qualifying_vips(snapshot);
            self.desired = routes_per_peer(&plan.bgp, &self.peers, &plan.address_pools, &vips);
            self.computed_for = Some(key);
            if vips != self.vips {
                self.vips = vips;
                if let Ok(mut r) = self.report.lock() {
                    r.vips = self.vips.iter().map(ToString::to_string).collect();
                }
            }
        }
        match self.withdrawn() {
            Some(_) => self.sessions.withdraw_all(),
            None => self.sessions.set_routes(&self.desired),
        }
        self.publish_report();
    }

    fn withdrawn(&self) -> Option<Withdrawn> {
        if self.stopping {
            Some(Withdrawn::Stopping)
        } else if self.watchdog.tripped() {
            Some(Withdrawn::Watchdog)
        } else {
            None
        }
    }

    /// Refresh the sessions' part of the report (the VIPs are written when
    /// they change: a long list is not copied every tick).
    fn publish_report(&self) {
        let peers = self.sessions.reports();
        if let Ok(mut r) = self.report.lock() {
            r.peers = peers;
            r.withdrawn = self.withdrawn().map(|w| w.name().to_owned());
            r.watchdog_trips = self.watchdog.trips();
        }
    }

    /// The first step of a graceful stop: withdraw every route and wait (at
    /// most [`WITHDRAW_CONFIRM_TIMEOUT_MS`]) until every Established
    /// session has sent the withdrawal.
    pub fn withdraw_for_stop(&mut self) {
        self.stopping = true;
        self.sessions.withdraw_all();
        self.publish_report();
        let started = Instant::now();
        let late = self
            .sessions
            .wait_synced(Duration::from_millis(WITHDRAW_CONFIRM_TIMEOUT_MS));
        if late.is_empty() {
            info!(
                waited_ms = started.elapsed().as_millis() as u64,
                "BGP routes withdrawn from every established peer"
            );
        } else {
            warn!(peers = ?late, "BGP withdrawal not confirmed by every peer; draining anyway");
        }
        self.publish_report();
    }

    /// The last step: Cease every session.
    pub fn stop(self) {
        self.sessions.stop("portico is stopping");
    }
}
