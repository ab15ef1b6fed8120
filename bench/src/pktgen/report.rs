//! What a run tells: one progress line per second on stderr, and its
//! summary on stdout at the end (one JSON object with `json`).
//!
//! Invariants:
//! * Bit rates count Ethernet frames without FCS, preamble or gap.
//! * A progress line is built (and allocates) only when one is printed, at
//!   most once a second.
//! * The JSON field names are what `compare` and the namespace tests read:
//!   renaming one changes the tool's output format.

use super::session::SessionError;
use super::stats::Percentiles;
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Serialize)]
pub(super) struct EchoSummary {
    pub(super) received: u64,
    pub(super) rx_pps: f64,
    pub(super) rx_bps: f64,
    pub(super) lost: u64,
    pub(super) loss_ratio: f64,
    pub(super) rtt: Option<Percentiles>,
}

#[derive(Debug, Serialize)]
pub(super) struct SendSummary {
    pub(super) mode: &'static str,
    pub(super) iface: String,
    pub(super) proto: &'static str,
    pub(super) flows: u32,
    pub(super) frame_bytes: usize,
    pub(super) elapsed_s: f64,
    pub(super) sent: u64,
    pub(super) sent_bytes: u64,
    pub(super) sent_pps: f64,
    pub(super) sent_bps: f64,
    pub(super) tx_ring_full: u64,
    pub(super) interrupted: bool,
    pub(super) echo: Option<EchoSummary>,
    pub(super) stream: Option<StreamSummary>,
}

/// What the `tcp-stream` flows did.
#[derive(Debug, Default, Serialize)]
pub(super) struct StreamSummary {
    pub(super) syns_sent: u64,
    pub(super) handshakes_completed: u64,
    /// Flows established at the end.
    pub(super) established_flows: u64,
    pub(super) data_segments_sent: u64,
    /// Data segments the sink answered with data (both directions done).
    pub(super) data_segments_echoed: u64,
    /// Segments sent again after `--retransmit-ms` without an answer.
    pub(super) retransmits: u64,
    /// Payload bytes client → sink and sink → client (answered segments).
    pub(super) payload_bytes_each_way: u64,
    /// Answered data segments per second of sending time.
    pub(super) exchanges_per_s: f64,
    /// Flows with a segment unanswered at the end.
    pub(super) in_flight: u64,
}

#[derive(Debug, Serialize)]
pub(super) struct SinkSummary {
    pub(super) mode: &'static str,
    pub(super) iface: String,
    pub(super) elapsed_s: f64,
    pub(super) received: u64,
    pub(super) received_bytes: u64,
    pub(super) rx_pps: f64,
    pub(super) rx_bps: f64,
    pub(super) expected: u64,
    pub(super) lost: u64,
    pub(super) loss_ratio: f64,
    pub(super) reordered: u64,
    pub(super) echoed: u64,
    pub(super) echo_tx_failed: u64,
    pub(super) other_frames: u64,
    pub(super) interrupted: bool,
}

/// Per-second progress on stderr.
#[derive(Debug)]
pub(super) struct Progress {
    last_at: Duration,
    last_frames: u64,
    last_bytes: u64,
}

impl Progress {
    pub(super) fn new() -> Self {
        Progress {
            last_at: Duration::ZERO,
            last_frames: 0,
            last_bytes: 0,
        }
    }
    /// Print a line if a second has passed since the last one; `extra` is
    /// only built then (no allocation on the other iterations).
    pub(super) fn tick(
        &mut self,
        now: Duration,
        what: &str,
        frames: u64,
        bytes: u64,
        extra: impl FnOnce() -> String,
    ) {
        if now.saturating_sub(self.last_at) < Duration::from_secs(1) {
            return;
        }
        let extra = extra();
        let dt = (now - self.last_at).as_secs_f64();
        let pps = (frames - self.last_frames) as f64 / dt;
        let bps = (bytes - self.last_bytes) as f64 * 8.0 / dt;
        eprintln!(
            "[{:6.1}s] {what} {frames} total, {pps:.0} pps, {:.2} Mbit/s{extra}",
            now.as_secs_f64(),
            bps / 1e6
        );
        self.last_at = now;
        self.last_frames = frames;
        self.last_bytes = bytes;
    }
}

pub(super) fn print_send(summary: &SendSummary, json: bool) -> Result<(), SessionError> {
    if json {
        println!("{}", serde_json::to_string(summary)?);
    } else {
        println!(
            "sent {} frames ({} B each) in {:.3}s: {:.0} pps, {:.2} Mbit/s",
            summary.sent,
            summary.frame_bytes,
            summary.elapsed_s,
            summary.sent_pps,
            summary.sent_bps / 1e6
        );
        if let Some(e) = &summary.echo {
            println!(
                "echoes {} lost {} ({:.3}%)",
                e.received,
                e.lost,
                e.loss_ratio * 100.0
            );
            if let Some(r) = &e.rtt {
                println!(
                    "rtt us: min {:.1} p50 {:.1} p90 {:.1} p99 {:.1} max {:.1}",
                    r.min_ns as f64 / 1e3,
                    r.p50_ns as f64 / 1e3,
                    r.p90_ns as f64 / 1e3,
                    r.p99_ns as f64 / 1e3,
                    r.max_ns as f64 / 1e3
                );
            }
        }
        if let Some(t) = &summary.stream {
            println!(
                "streams: {} handshakes of {} SYNs, {} established; {} data segments sent, {} echoed ({:.0}/s), {} retransmits",
                t.handshakes_completed,
                t.syns_sent,
                t.established_flows,
                t.data_segments_sent,
                t.data_segments_echoed,
                t.exchanges_per_s,
                t.retransmits
            );
        }
    }
    Ok(())
}

pub(super) fn print_sink(summary: &SinkSummary, json: bool) -> Result<(), SessionError> {
    if json {
        println!("{}", serde_json::to_string(summary)?);
    } else {
        println!(
            "received {} probes ({} B), {:.0} pps, {:.2} Mbit/s; expected {} lost {} ({:.3}%), reordered {}, echoed {}",
            summary.received,
            summary.received_bytes,
            summary.rx_pps,
            summary.rx_bps / 1e6,
            summary.expected,
            summary.lost,
            summary.loss_ratio * 100.0,
            summary.reordered,
            summary.echoed
        );
    }
    Ok(())
}
