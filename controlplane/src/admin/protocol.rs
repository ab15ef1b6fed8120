//! What the admin socket is asked and answers: one JSON [`Request`] line
//! from the client (an empty request means [`Request::Stats`], so a client
//! that only reads still gets the counters), one JSON document back — the
//! requested report, or `{"error": "…"}`. [`handle`] answers one request.
//! Every request only reads, except the test hook [`Request::StallWorker`],
//! which a gateway answers only when started with `PORTICO_TEST_HOOKS=1`.

use super::{LiveAdmin, StatsReport};
use serde::{Deserialize, Serialize};
use std::fmt;

/// One request on the admin socket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    /// The [`super::StatsReport`].
    Stats,
    /// Conntrack entries ([`FlowsReport`]).
    Flows(FlowsQuery),
    /// `simulate --live` ([`super::LiveOutcome`]): `flow` as
    /// `portico simulate` takes it.
    Simulate { flow: String },
    /// Test hook, refused unless `portico run` started with
    /// `PORTICO_TEST_HOOKS=1` ([`super::live::TEST_HOOKS_ENV`]): worker
    /// `worker` stops polling for `ms`. Answers `{"stalling_ms": N}`.
    StallWorker { worker: usize, ms: u64 },
}

/// Which flows `portico flows` lists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowsQuery {
    /// Only flows of the service with this name.
    pub service: Option<String>,
    /// Only flows to this backend, `address:port`.
    pub backend: Option<String>,
    /// At most this many entries (the walk stops there).
    pub limit: usize,
}

/// Default `--limit` of `portico flows`.
pub const DEFAULT_FLOW_LIMIT: usize = 1000;
/// Largest `--limit` served: one answer holds at most this many entries
/// (~20 MB of JSON), so no request makes the gateway build an answer the
/// size of a million-flow table. A larger one is refused with an error.
pub const MAX_FLOW_LIMIT: usize = 100_000;

/// An error answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorAnswer {
    pub error: String,
}

/// One conntrack entry, like a line of `conntrack -L`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowRow {
    /// The worker owning the flow.
    pub worker: u8,
    /// `tcp` or `udp`.
    pub protocol: String,
    /// Conntrack state (`ESTABLISHED`, `TIME_WAIT`, …; `UDP` for UDP).
    pub state: String,
    /// The client side: `client -> service address`, as the client sends.
    pub orig_src: String,
    pub orig_dst: String,
    /// The backend side: `backend -> SNAT address (or client)`, as the
    /// backend sends.
    pub reply_src: String,
    pub reply_dst: String,
    /// Service name (empty if its id is not in the live snapshot any more).
    pub service: String,
    /// Backend `address:port`.
    pub backend: String,
    pub age_s: u64,
    pub expires_in_s: u64,
    /// A reply was seen (conntrack's `[ASSURED]`/seen-reply).
    pub replied: bool,
    pub snat: bool,
}

/// What `portico flows` gets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowsReport {
    /// Snapshot generation the names were resolved against.
    pub generation: u64,
    pub flows: Vec<FlowRow>,
    /// The listing stopped at the limit; more flows may match.
    pub truncated: bool,
}

/// `address:port` (IPv6 `[address]:port`) → address without brackets
/// and port, as `conntrack -L` prints them.
fn split_endpoint(s: &str) -> (&str, &str) {
    let (addr, port) = s.rsplit_once(':').unwrap_or((s, ""));
    (addr.trim_start_matches('[').trim_end_matches(']'), port)
}

impl fmt::Display for FlowRow {
    /// `conntrack -L` style: protocol, state, times, both tuples, flags,
    /// service and backend.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (os, osp) = split_endpoint(&self.orig_src);
        let (od, odp) = split_endpoint(&self.orig_dst);
        let (rs, rsp) = split_endpoint(&self.reply_src);
        let (rd, rdp) = split_endpoint(&self.reply_dst);
        write!(
            f,
            "{:<4} {:<12} age={}s expires={}s src={os} dst={od} sport={osp} dport={odp} \
             src={rs} dst={rd} sport={rsp} dport={rdp}",
            self.protocol, self.state, self.age_s, self.expires_in_s
        )?;
        if self.replied {
            f.write_str(" [ASSURED]")?;
        } else {
            f.write_str(" [UNREPLIED]")?;
        }
        write!(
            f,
            " service={} backend={} worker={}",
            if self.service.is_empty() {
                "?"
            } else {
                &self.service
            },
            self.backend,
            self.worker
        )
    }
}

impl fmt::Display for FlowsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for row in &self.flows {
            writeln!(f, "{row}")?;
        }
        write!(f, "{} flow entries listed", self.flows.len())?;
        if self.truncated {
            write!(f, " (stopped at the limit; --limit N for more)")?;
        }
        writeln!(f)
    }
}

/// Answer one admin request: the stats report, a flow listing or a live
/// simulation, as JSON.
pub fn handle(
    request: Request,
    report: impl FnOnce() -> StatsReport,
    live: &LiveAdmin,
) -> Result<String, String> {
    let json = |r: Result<String, serde_json::Error>| r.map_err(|e| e.to_string());
    match request {
        Request::Stats => json(serde_json::to_string(&report())),
        Request::Flows(query) => json(serde_json::to_string(&live.flows(&query)?)),
        Request::Simulate { flow } => json(serde_json::to_string(&live.simulate(&flow)?)),
        Request::StallWorker { worker, ms } => {
            let ms = live.stall_worker(worker, ms)?;
            json(serde_json::to_string(
                &serde_json::json!({ "stalling_ms": ms }),
            ))
        }
    }
}
