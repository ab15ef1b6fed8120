//! The admin requests that read the workers' own tables: `portico flows`
//! (conntrack listing) and `portico simulate --live`.
//!
//! Both go through each worker's [`dataplane::inspect`] mailbox, which the
//! worker serves once per poll loop (never per packet, no locks or atomics
//! on the packet path). The mutexes here are the admin thread's own (the
//! client ends), never touched by a worker.
//!
//! Invariants:
//! * a listing walks the workers one after the other, each in chunks of at
//!   most `min(DEFAULT_CHUNK_FLOWS, flows still wanted)` entries, and stops
//!   as soon as `limit` entries were collected, so `--limit` bounds the work
//!   of both the workers and the admin thread;
//! * names are resolved against the snapshot in force when the request
//!   arrives: `--service` by name (an unknown name is an error, not an empty
//!   list), rows name the service and backend their ids have in it;
//! * both families: rows show IPv6 endpoints as `[address]:port`, the
//!   `--backend` filter takes either form, and `simulate --live` of an IPv6
//!   flow asks the owning worker's IPv6 tables ([`Query::Lookup6`]);
//! * `simulate --live` runs [`simulate_in`] on the live snapshot after
//!   asking the owning worker for the tracked flow with the packet's key and
//!   for the client's affinity pin.

use super::protocol::{FlowRow, FlowsQuery, FlowsReport, MAX_FLOW_LIMIT};
use crate::simulate::{FlowSpec, Outcome, SimContext, SpecKey, simulate_in};
use dataplane::conntrack::Dir;
use dataplane::inspect::{
    Answer, DEFAULT_CHUNK_FLOWS, FlowEntry, FlowFilter, InspectClient, InspectError, Query,
};
use dataplane::neighbour::NeighbourTable;
use dataplane::snapshot::{Publisher, Snapshot};
use serde::Serialize;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long the admin thread waits for one worker's answer.
const WORKER_ANSWER_TIMEOUT_MS: u64 = 2_000;

/// The live state the admin thread reads: the snapshot publisher, the
/// workers' mailboxes (index = worker id), the simulation settings.
#[derive(Debug)]
pub struct LiveAdmin {
    publisher: Publisher,
    workers: Vec<Arc<Mutex<InspectClient>>>,
    sim: SimContext,
    /// The gateway's neighbour table, for the next hop's live entry.
    neighbours: Option<Arc<NeighbourTable>>,
    /// Test hooks ([`LiveAdmin::stall_worker`]) are answered.
    test_hooks: bool,
}

/// The environment variable that enables the admin socket's test hooks
/// (`PORTICO_TEST_HOOKS=1` when `portico run` starts). Without it the
/// socket is read-only.
pub const TEST_HOOKS_ENV: &str = "PORTICO_TEST_HOOKS";

/// `simulate --live`'s answer: the simulation of a new connection, and
/// what the owning worker tracks for that tuple now.
#[derive(Clone, Debug, Serialize)]
pub struct LiveOutcome {
    /// Generation of the snapshot simulated against.
    pub generation: u64,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The tracked flow with this tuple, if any (a connection that exists
    /// keeps its backend whatever a new one would get).
    pub existing: Option<FlowRow>,
    /// The backend the client is pinned to by ClientIP affinity, if any.
    pub affinity_pin: Option<String>,
    /// The owning worker's SNAT port slice: a new connection's SNAT port is
    /// drawn at random from it.
    pub snat_port_slice: Option<String>,
    /// The next hop's entry in the gateway's neighbour table (`None`: no
    /// forward, a static neighbour, or no table given).
    pub next_hop_neighbour: Option<NextHopEntry>,
    /// The human-readable rendering (what `portico simulate --live` prints).
    pub text: String,
}

/// A next hop as the gateway's neighbour table has it now.
#[derive(Clone, Debug, Serialize)]
pub struct NextHopEntry {
    pub address: IpAddr,
    /// `None`: no entry or no MAC yet (the first packet would wait for ARP
    /// or NDP).
    pub mac: Option<String>,
}

fn inspect_error(e: InspectError) -> String {
    e.to_string()
}

/// A listing or lookup row, named against `snap`.
pub fn flow_row(snap: &Snapshot, e: &FlowEntry) -> FlowRow {
    let endpoint = |ip, port| SocketAddr::new(ip, port).to_string();
    FlowRow {
        worker: e.worker,
        protocol: e.orig.proto.name().to_owned(),
        state: e.state.name().to_owned(),
        orig_src: endpoint(e.orig.src_ip, e.orig.src_port),
        orig_dst: endpoint(e.orig.dst_ip, e.orig.dst_port),
        reply_src: endpoint(e.reply.src_ip, e.reply.src_port),
        reply_dst: endpoint(e.reply.dst_ip, e.reply.dst_port),
        service: snap
            .service(e.service)
            .map(|s| s.name.to_string())
            .unwrap_or_default(),
        backend: endpoint(e.reply.src_ip, e.reply.src_port),
        age_s: e.age_s,
        expires_in_s: e.expires_in_ms.div_ceil(1000),
        replied: e.replied,
        snat: e.snat,
    }
}

impl LiveAdmin {
    pub fn new(
        publisher: Publisher,
        workers: Vec<Arc<Mutex<InspectClient>>>,
        sim: SimContext,
    ) -> Self {
        LiveAdmin {
            publisher,
            workers,
            sim,
            neighbours: None,
            test_hooks: false,
        }
    }

    /// Answer the test hooks (see [`TEST_HOOKS_ENV`]).
    pub fn with_test_hooks(mut self, enabled: bool) -> Self {
        self.test_hooks = enabled;
        self
    }

    /// Test hook: make `worker` stop polling for `ms` (at most
    /// [`dataplane::inspect::MAX_STALL_MS`]), as a worker stuck in a
    /// driver call would; the BGP watchdog's end-to-end test uses it.
    /// Refused unless the gateway started with [`TEST_HOOKS_ENV`]` = 1`.
    pub fn stall_worker(&self, worker: usize, ms: u64) -> Result<u64, String> {
        if !self.test_hooks {
            return Err(format!(
                "test hooks are off (start portico run with {TEST_HOOKS_ENV}=1)"
            ));
        }
        match self.ask(worker, Query::Stall { ms })? {
            Answer::Stalling { ms } => Ok(ms),
            _ => Err(format!("worker {worker} answered another question")),
        }
    }

    /// Answer `simulate --live` with the next hop's entry in the gateway's
    /// own neighbour table (read only: nothing is inserted or probed).
    pub fn with_neighbours(mut self, neighbours: Arc<NeighbourTable>) -> Self {
        self.neighbours = Some(neighbours);
        self
    }

    fn ask(&self, worker: usize, query: Query) -> Result<Answer, String> {
        let client = self
            .workers
            .get(worker)
            .ok_or_else(|| format!("no worker {worker}"))?;
        let mut client = client.lock().unwrap_or_else(|e| e.into_inner());
        client
            .ask(query, Duration::from_millis(WORKER_ANSWER_TIMEOUT_MS))
            .map_err(inspect_error)
    }

    /// `portico flows`: see the module docs.
    pub fn flows(&self, query: &FlowsQuery) -> Result<FlowsReport, String> {
        let snap = self.publisher.current();
        let service = match &query.service {
            None => None,
            Some(name) => Some(
                snap.services
                    .iter()
                    .flatten()
                    .find(|s| &*s.name == name.as_str())
                    .map(|s| s.id)
                    .ok_or_else(|| format!("no service named {name:?}"))?,
            ),
        };
        let backend = match &query.backend {
            None => None,
            Some(b) => Some(b.parse::<SocketAddr>().map_err(|_| {
                format!(
                    "backend {b:?} is not an address:port (like 10.1.0.10:8080 or [2001:db8:1::10]:8080)"
                )
            })?),
        };
        let filter = FlowFilter { service, backend };
        if query.limit > MAX_FLOW_LIMIT {
            return Err(format!(
                "limit {} is above the maximum of {MAX_FLOW_LIMIT} flows per listing (filter by --service or --backend)",
                query.limit
            ));
        }
        let limit = query.limit;
        let mut report = FlowsReport {
            generation: snap.generation,
            ..FlowsReport::default()
        };
        'workers: for worker in 0..self.workers.len() {
            let mut cursor = Some(0);
            while let Some(c) = cursor {
                let wanted = limit.saturating_sub(report.flows.len());
                if wanted == 0 {
                    report.truncated = true;
                    break 'workers;
                }
                let answer = self.ask(
                    worker,
                    Query::Flows {
                        cursor: c,
                        filter,
                        buf: Vec::with_capacity(wanted.clamp(1, DEFAULT_CHUNK_FLOWS)),
                    },
                )?;
                let Answer::Flows { buf, next_cursor } = answer else {
                    return Err(format!("worker {worker} answered another question"));
                };
                report.flows.extend(buf.iter().map(|e| flow_row(&snap, e)));
                cursor = next_cursor;
            }
        }
        Ok(report)
    }

    /// `portico simulate --live FLOW`.
    pub fn simulate(&self, flow: &str) -> Result<LiveOutcome, String> {
        let spec: FlowSpec = flow.parse().map_err(|e| format!("{e}"))?;
        let snap = self.publisher.current();
        let key = spec.key();
        let worker = self.sim.owner(&snap, &key);
        let affinity_service = key
            .listener(&snap)
            .and_then(|l| snap.service(l.service))
            .filter(|s| s.affinity_timeout_ms.is_some())
            .map(|s| s.id);
        let query = match key {
            SpecKey::V4(key) => Query::Lookup {
                key,
                affinity: affinity_service.map(|s| (s, key.src_ip)),
            },
            SpecKey::V6(key) => Query::Lookup6 {
                key,
                affinity: affinity_service.map(|s| (s, key.src_ip)),
            },
        };
        let answer = self.ask(worker as usize, query)?;
        let Answer::Lookup { flow, affinity } = answer else {
            return Err(format!("worker {worker} answered another question"));
        };
        let outcome = simulate_in(&self.sim, &snap, &spec, affinity).map_err(|e| e.to_string())?;
        // Only a flow whose original key this is describes this connection
        // (a reply-key hit means the tuple is some flow's backend side).
        let existing = flow
            .filter(|(_, dir)| *dir == Dir::Original)
            .map(|(e, _)| flow_row(&snap, &e));
        let mut live = LiveOutcome {
            generation: snap.generation,
            outcome,
            existing,
            affinity_pin: affinity
                .and_then(|id| snap.backend(id))
                .map(|b| b.addr.to_string()),
            snat_port_slice: self
                .sim
                .snat_slice(worker)
                .map(|r| format!("{}-{}", r.start(), r.end())),
            next_hop_neighbour: None,
            text: String::new(),
        };
        if let (Some(table), Some(fw)) = (&self.neighbours, &live.outcome.forward)
            && let Some(hop) = fw.next_hop
            && !fw.next_hop_static
        {
            let mac = match hop {
                IpAddr::V4(a) => table.peek(fw.port_index, a),
                IpAddr::V6(a) => table.peek(fw.port_index, a),
            };
            live.next_hop_neighbour = Some(NextHopEntry {
                address: hop,
                mac: mac.map(|mac| dataplane::wire::ethernet::MacAddr(mac).to_string()),
            });
        }
        live.text = live.to_string();
        Ok(live)
    }
}

impl fmt::Display for LiveOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.outcome)?;
        if let Some(pin) = &self.affinity_pin {
            writeln!(f, "pinned     {pin} (live ClientIP affinity entry)")?;
        }
        if self.outcome.snat.is_some()
            && let Some(slice) = &self.snat_port_slice
        {
            writeln!(
                f,
                "           (live, the SNAT port is drawn at random from worker {}'s slice {slice})",
                self.outcome.worker
            )?;
        }
        if let Some(NextHopEntry { address, mac }) = &self.next_hop_neighbour {
            match mac {
                Some(mac) => {
                    writeln!(f, "next hop   {address} is at {mac} (live neighbour entry)")?
                }
                None => writeln!(
                    f,
                    "next hop   {address} has no MAC yet: the first packet waits for {}",
                    if address.is_ipv4() { "ARP" } else { "NDP" }
                )?,
            }
        }
        match &self.existing {
            Some(row) => writeln!(f, "existing   {row}")?,
            None => writeln!(
                f,
                "existing   none: a packet with this tuple starts a new connection"
            )?,
        }
        writeln!(f, "snapshot   generation {} (live)", self.generation)
    }
}
