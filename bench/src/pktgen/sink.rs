//! The sink run: counts the probes it receives and bytes, computes loss
//! and reordering from their sequence numbers and, with `echo`, sends every
//! probe back (see the `echo` module).
//!
//! Invariants:
//! * Only pktgen probes count; other frames are counted apart
//!   (`other_frames`) and never echoed.
//! * Rates are over the span in which probes arrived, not the idle wait
//!   before the first or after the last.
//! * An echo the TX ring does not take is counted (`echo_tx_failed`), not
//!   retried.

use super::echo::echo_in_place;
use super::frame::{KIND_PROBE, parse_probe};
use super::report::{Progress, SinkSummary, print_sink};
use super::session::{BURST, PORT, SessionError, duration_of, open, stop_flag};
use super::stats::{SeqTracker, ratio};
use dataplane::driver::afpacket::AfPacketFrame;
use dataplane::driver::{Driver, Frame};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What a sink run does (the `pktgen sink` arguments).
#[derive(Clone, Debug)]
pub struct SinkConfig {
    pub iface: String,
    /// Send every probe back (MACs, addresses and ports swapped).
    pub echo: bool,
    pub duration_s: f64,
    /// Stop after receiving this many probes.
    pub count: Option<u64>,
    /// Print the summary as one JSON object.
    pub json: bool,
}

/// Run `pktgen sink`: receive (and echo), then print the summary.
pub fn sink(args: &SinkConfig) -> Result<(), SessionError> {
    let duration = duration_of(args.duration_s)?;
    let count = args.count.unwrap_or(u64::MAX);
    let stop = stop_flag()?;
    let mut driver = open(&args.iface)?;
    let mut rx: Vec<AfPacketFrame> = Vec::with_capacity(BURST);
    let mut tx: Vec<AfPacketFrame> = Vec::with_capacity(BURST);
    let mut seen = SeqTracker::default();
    let mut bytes = 0u64;
    let mut echoed = 0u64;
    let mut echo_tx_failed = 0u64;
    let mut other_frames = 0u64;
    let mut progress = Progress::new();
    let start = Instant::now();
    let mut first_at: Option<Duration> = None;
    let mut last_at = Duration::ZERO;
    while !stop.load(Ordering::Relaxed) && seen.received < count {
        let now = start.elapsed();
        if now >= duration {
            break;
        }
        let n = driver.rx_burst(PORT, &mut rx, BURST);
        for mut frame in rx.drain(..) {
            let probe = match parse_probe(frame.data()) {
                Some(p) if p.kind == KIND_PROBE => p,
                _ => {
                    other_frames += 1;
                    driver.release(frame);
                    continue;
                }
            };
            seen.record(probe.seq);
            bytes += frame.data().len() as u64;
            first_at.get_or_insert(now);
            last_at = now;
            if args.echo && echo_in_place(frame.data_mut()).is_some() {
                tx.push(frame);
            } else {
                driver.release(frame);
            }
        }
        if !tx.is_empty() {
            echoed += driver.tx_burst(PORT, &mut tx) as u64;
            echo_tx_failed += tx.len() as u64;
            for frame in tx.drain(..) {
                driver.release(frame);
            }
        }
        if n == 0 {
            driver.wait(10);
        }
        progress.tick(now, "received", seen.received, bytes, || {
            format!(", {} lost, {echoed} echoed", seen.lost())
        });
    }
    // Rates over the span in which probes arrived (not the idle wait).
    let secs = match first_at {
        Some(first) => (last_at - first).as_secs_f64().max(1e-3),
        None => 0.0,
    };
    let per_s = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };
    let summary = SinkSummary {
        mode: "sink",
        iface: args.iface.clone(),
        elapsed_s: start.elapsed().as_secs_f64(),
        received: seen.received,
        received_bytes: bytes,
        rx_pps: per_s(seen.received as f64),
        rx_bps: per_s(bytes as f64 * 8.0),
        expected: seen.expected(),
        lost: seen.lost(),
        loss_ratio: ratio(seen.lost(), seen.expected()),
        reordered: seen.reordered,
        echoed,
        echo_tx_failed,
        other_frames,
        interrupted: stop.load(Ordering::Relaxed),
    };
    print_sink(&summary, args.json)
}
