//! `pktgen`: a packet generator and sink over the af_packet driver.
//!
//! ```text
//! pktgen send --iface IF --dst-mac MAC --src IP --dst IP:PORT
//!             [--proto udp|tcp-syn|tcp-stream] [--flows N] [--size BYTES]
//!             [--rate PPS] [--duration-s S] [--count N]
//!             [--expect-echo [--echo-wait-ms MS]] [--retransmit-ms MS] [--json]
//! pktgen sink --iface IF [--echo] [--duration-s S] [--count N] [--json]
//! ```
//!
//! `send` sends UDP datagrams, TCP SYNs or TCP "established-like" streams
//! (`tcp-stream`: per flow a handshake, then data segments echoed back by
//! the sink as data, one segment in flight per flow, resent after
//! `--retransmit-ms`; implies `--expect-echo`) over `--flows` distinct 5-tuples,
//! each carrying a sequence number and its send time (see
//! `portico_bench::pktgen`), at `--rate` frames per second or as fast as the
//! ring takes them. With `--expect-echo` it also receives the echoes of a
//! `sink --echo` and reports round-trip-time percentiles and loss
//! (sent - echoes back). `sink` counts frames and bytes, computes loss from
//! sequence gaps and, with `--echo`, sends every probe back.
//!
//! Bounded: `--duration-s` (default 10) and `--count` always end a run;
//! SIGINT/SIGTERM end it early, still with the summary. A progress line per
//! second goes to stderr; the summary goes to stdout (one JSON object with
//! `--json`). Bit rates count Ethernet frames without FCS, preamble or gap.
//! RTTs include the af_packet RX rings' block-retire delay on both sides
//! (`rx_block_timeout_ms`, 1 ms: a partly filled block is handed over after
//! it), so at low rates they are dominated by it and are an upper bound.
//! Not yet: AF_XDP.

use clap::{Parser, Subcommand};
use dataplane::driver::afpacket::{AfPacketConfig, AfPacketDriver, AfPacketFrame, prepare};
use dataplane::driver::{Driver, Frame};
use portico_bench::pktgen::{
    FrameSpec, Histogram, KIND_ECHO, KIND_PROBE, Percentiles, SeqTracker, StreamFlow, StreamState,
    TrafficProto, echo_in_place, parse_mac, parse_probe, parse_tcp_echo, ratio, stamp,
    stamp_stream,
};
use serde::Serialize;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const PORT: u8 = 0;
const BURST: usize = 64;

#[derive(Debug, Parser)]
#[command(name = "pktgen", about = "Packet generator and sink over af_packet")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate traffic.
    Send(SendArgs),
    /// Count (and optionally echo) traffic.
    Sink(SinkArgs),
}

#[derive(Debug, clap::Args)]
struct SendArgs {
    #[arg(long)]
    iface: String,
    /// Destination MAC (the next hop's).
    #[arg(long, value_parser = parse_mac)]
    dst_mac: dataplane::wire::MacAddr,
    /// Source address of flow 0 (later flows count up past 64512 ports).
    #[arg(long)]
    src: Ipv4Addr,
    #[arg(long)]
    dst: SocketAddrV4,
    #[arg(long, default_value = "udp")]
    proto: TrafficProto,
    #[arg(long, default_value_t = 1)]
    flows: u32,
    /// Ethernet frame size in bytes without FCS [default: 64 for udp, 74
    /// (the minimum) for tcp-syn].
    #[arg(long)]
    size: Option<usize>,
    /// Frames per second; as fast as possible when absent.
    #[arg(long)]
    rate: Option<u64>,
    #[arg(long, default_value_t = 10.0)]
    duration_s: f64,
    /// Stop after this many frames.
    #[arg(long)]
    count: Option<u64>,
    /// Receive the echoes of a `sink --echo` and report RTT and loss.
    #[arg(long)]
    expect_echo: bool,
    /// After the last frame, wait this long for outstanding echoes.
    #[arg(long, default_value_t = 1000)]
    echo_wait_ms: u64,
    /// tcp-stream: resend a flow's segment when unanswered this long.
    #[arg(long, default_value_t = 200)]
    retransmit_ms: u64,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct SinkArgs {
    #[arg(long)]
    iface: String,
    /// Send every probe back (MACs, addresses and ports swapped).
    #[arg(long)]
    echo: bool,
    #[arg(long, default_value_t = 10.0)]
    duration_s: f64,
    /// Stop after receiving this many probes.
    #[arg(long)]
    count: Option<u64>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct EchoSummary {
    received: u64,
    rx_pps: f64,
    rx_bps: f64,
    lost: u64,
    loss_ratio: f64,
    rtt: Option<Percentiles>,
}

#[derive(Debug, Serialize)]
struct SendSummary {
    mode: &'static str,
    iface: String,
    proto: &'static str,
    flows: u32,
    frame_bytes: usize,
    elapsed_s: f64,
    sent: u64,
    sent_bytes: u64,
    sent_pps: f64,
    sent_bps: f64,
    tx_ring_full: u64,
    interrupted: bool,
    echo: Option<EchoSummary>,
    stream: Option<StreamSummary>,
}

/// What the `tcp-stream` flows did.
#[derive(Debug, Default, Serialize)]
struct StreamSummary {
    syns_sent: u64,
    handshakes_completed: u64,
    /// Flows established at the end.
    established_flows: u64,
    data_segments_sent: u64,
    /// Data segments the sink answered with data (both directions done).
    data_segments_echoed: u64,
    /// Segments sent again after `--retransmit-ms` without an answer.
    retransmits: u64,
    /// Payload bytes client → sink and sink → client (answered segments).
    payload_bytes_each_way: u64,
    /// Answered data segments per second of sending time.
    exchanges_per_s: f64,
    /// Flows with a segment unanswered at the end.
    in_flight: u64,
}

#[derive(Debug, Serialize)]
struct SinkSummary {
    mode: &'static str,
    iface: String,
    elapsed_s: f64,
    received: u64,
    received_bytes: u64,
    rx_pps: f64,
    rx_bps: f64,
    expected: u64,
    lost: u64,
    loss_ratio: f64,
    reordered: u64,
    echoed: u64,
    echo_tx_failed: u64,
    other_frames: u64,
    interrupted: bool,
}

fn stop_flag() -> std::io::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    Ok(stop)
}

fn open(iface: &str) -> Result<AfPacketDriver, String> {
    AfPacketDriver::open(&AfPacketConfig::new(&[iface])).map_err(|e| format!("{iface}: {e}"))
}

fn duration_of(seconds: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("--duration-s {seconds}: {e}"))
}

/// Per-second progress on stderr.
struct Progress {
    last_at: Duration,
    last_frames: u64,
    last_bytes: u64,
}

impl Progress {
    fn new() -> Self {
        Progress {
            last_at: Duration::ZERO,
            last_frames: 0,
            last_bytes: 0,
        }
    }
    /// Print a line if a second has passed since the last one; `extra` is
    /// only built then (no allocation on the other iterations).
    fn tick(
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

#[derive(Default)]
struct EchoState {
    seen: SeqTracker,
    rtt: Histogram,
    other_frames: u64,
    bytes: u64,
}

fn receive_echoes(
    driver: &mut AfPacketDriver,
    rx: &mut Vec<AfPacketFrame>,
    state: &mut EchoState,
    start: Instant,
    sent: u64,
) -> usize {
    let n = driver.rx_burst(PORT, rx, BURST);
    let now_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    for frame in rx.drain(..) {
        match parse_probe(frame.data()) {
            Some(p) if p.kind == KIND_ECHO && p.seq < sent => {
                state.seen.record(p.seq);
                state.bytes += frame.data().len() as u64;
                state.rtt.record(now_ns.saturating_sub(p.sent_ns));
            }
            _ => state.other_frames += 1,
        }
        driver.release(frame);
    }
    n
}

fn send(args: SendArgs) -> Result<(), String> {
    let info = prepare::interface_info(&args.iface).map_err(|e| e.to_string())?;
    let spec = FrameSpec {
        src_mac: info.mac,
        dst_mac: args.dst_mac,
        src_ip: args.src,
        dst_ip: *args.dst.ip(),
        dst_port: args.dst.port(),
        proto: args.proto,
        flows: args.flows,
        frame_bytes: args.size.unwrap_or(args.proto.min_frame_bytes().max(64)),
    };
    spec.validate().map_err(|e| e.to_string())?;
    if args.rate == Some(0) {
        return Err("--rate must be positive".into());
    }
    if args.proto == TrafficProto::TcpStream {
        return send_stream(&args, &spec);
    }
    let duration = duration_of(args.duration_s)?;
    let count = args.count.unwrap_or(u64::MAX);
    let stop = stop_flag().map_err(|e| e.to_string())?;
    let mut driver = open(&args.iface)?;
    let template = spec.template();
    let frame_bytes = template.len() as u64;
    let mut batch: Vec<AfPacketFrame> = Vec::with_capacity(BURST);
    let mut rx: Vec<AfPacketFrame> = Vec::with_capacity(BURST);
    let mut echo = EchoState::default();
    let mut progress = Progress::new();
    let mut sent = 0u64;
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) && sent < count {
        let elapsed = start.elapsed();
        if elapsed >= duration {
            break;
        }
        let due = match args.rate {
            Some(rate) => {
                let due = (u128::from(rate) * elapsed.as_nanos() / 1_000_000_000) as u64 + 1;
                due.saturating_sub(sent)
            }
            None => BURST as u64,
        };
        let want = due.min(count - sent).min(BURST as u64);
        let now_ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        for i in 0..want {
            let Some(mut frame) = driver.frame_from(&template) else {
                break;
            };
            stamp(frame.data_mut(), &spec, sent + i, now_ns);
            batch.push(frame);
        }
        if !batch.is_empty() {
            sent += driver.tx_burst(PORT, &mut batch) as u64;
            for frame in batch.drain(..) {
                driver.release(frame);
            }
        }
        let got = if args.expect_echo {
            receive_echoes(&mut driver, &mut rx, &mut echo, start, sent)
        } else {
            0
        };
        if want == 0 && got == 0 {
            // Rate-limited and idle: sleep a little (at most 50 µs late).
            std::thread::sleep(Duration::from_micros(50));
        }
        progress.tick(elapsed, "sent", sent, sent * frame_bytes, || {
            if args.expect_echo {
                format!(", {} echoes", echo.seen.received)
            } else {
                String::new()
            }
        });
    }
    let send_elapsed = start.elapsed();
    if args.expect_echo {
        let drain_until = Instant::now() + Duration::from_millis(args.echo_wait_ms);
        while echo.seen.received < sent
            && Instant::now() < drain_until
            && !stop.load(Ordering::Relaxed)
        {
            if receive_echoes(&mut driver, &mut rx, &mut echo, start, sent) == 0 {
                driver.wait(1);
            }
        }
    }
    let secs = send_elapsed.as_secs_f64().max(1e-9);
    let summary = SendSummary {
        mode: "send",
        iface: args.iface.clone(),
        proto: args.proto.name(),
        flows: args.flows,
        frame_bytes: template.len(),
        elapsed_s: secs,
        sent,
        sent_bytes: sent * frame_bytes,
        sent_pps: sent as f64 / secs,
        sent_bps: (sent * frame_bytes) as f64 * 8.0 / secs,
        tx_ring_full: driver.total_stats().tx_ring_full,
        interrupted: stop.load(Ordering::Relaxed),
        echo: args.expect_echo.then(|| echo.summary(sent, secs)),
        stream: None,
    };
    print_send(&summary, args.json)
}

impl EchoState {
    fn summary(&self, sent: u64, secs: f64) -> EchoSummary {
        let lost = sent.saturating_sub(self.seen.received);
        EchoSummary {
            received: self.seen.received,
            rx_pps: self.seen.received as f64 / secs,
            rx_bps: self.bytes as f64 * 8.0 / secs,
            lost,
            loss_ratio: ratio(lost, sent),
            rtt: self.rtt.percentiles(),
        }
    }
}

fn print_send(summary: &SendSummary, json: bool) -> Result<(), String> {
    if json {
        println!(
            "{}",
            serde_json::to_string(summary).map_err(|e| e.to_string())?
        );
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

/// `send --proto tcp-stream`: every flow handshakes, then exchanges data
/// with the sink, one segment in flight per flow. The flows are visited
/// round robin; a flow whose segment is in flight is skipped until its
/// answer arrives or `--retransmit-ms` passes.
fn send_stream(args: &SendArgs, spec: &FrameSpec) -> Result<(), String> {
    let duration = duration_of(args.duration_s)?;
    let count = args.count.unwrap_or(u64::MAX);
    let retransmit_ns = args.retransmit_ms.saturating_mul(1_000_000).max(1);
    let stop = stop_flag().map_err(|e| e.to_string())?;
    let mut driver = open(&args.iface)?;
    let template = spec.template();
    let frame_bytes = template.len() as u64;
    let flows = usize::try_from(spec.flows).map_err(|e| e.to_string())?;
    let mut state = vec![StreamFlow::default(); flows];
    let mut batch: Vec<AfPacketFrame> = Vec::with_capacity(BURST);
    let mut rx: Vec<AfPacketFrame> = Vec::with_capacity(BURST);
    let mut echo = EchoState::default();
    let mut totals = StreamSummary::default();
    let mut progress = Progress::new();
    let mut sent = 0u64;
    let mut cursor = 0usize;
    let start = Instant::now();
    let now_ns = |start: Instant| u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let receive = |driver: &mut AfPacketDriver,
                   rx: &mut Vec<AfPacketFrame>,
                   echo: &mut EchoState,
                   state: &mut [StreamFlow],
                   totals: &mut StreamSummary,
                   sent: u64|
     -> usize {
        let n = driver.rx_burst(PORT, rx, BURST);
        let now = now_ns(start);
        for frame in rx.drain(..) {
            let answer = parse_tcp_echo(frame.data()).filter(|e| e.probe.seq < sent);
            let flow = answer.and_then(|e| {
                spec.flow_index(e.dst, e.dst_port)
                    .and_then(|i| usize::try_from(i).ok())
            });
            match (answer, flow.and_then(|i| state.get_mut(i))) {
                (Some(e), Some(f)) => {
                    echo.seen.record(e.probe.seq);
                    echo.bytes += frame.data().len() as u64;
                    echo.rtt.record(now.saturating_sub(e.probe.sent_ns));
                    let was = f.state;
                    if f.on_echo(&e) {
                        totals.in_flight = totals.in_flight.saturating_sub(1);
                        if was == StreamState::SynSent {
                            totals.handshakes_completed += 1;
                        } else {
                            totals.data_segments_echoed += 1;
                            totals.payload_bytes_each_way += u64::from(e.payload_len);
                        }
                    }
                }
                _ => echo.other_frames += 1,
            }
            driver.release(frame);
        }
        n
    };
    while !stop.load(Ordering::Relaxed) && sent < count {
        let elapsed = start.elapsed();
        if elapsed >= duration {
            break;
        }
        let due = match args.rate {
            Some(rate) => {
                let due = (u128::from(rate) * elapsed.as_nanos() / 1_000_000_000) as u64 + 1;
                due.saturating_sub(sent)
            }
            None => BURST as u64,
        };
        let want = due.min(count - sent).min(BURST as u64) as usize;
        let now = now_ns(start);
        // Visit at most a bounded number of flows per round.
        let mut visited = 0usize;
        while batch.len() < want && visited < flows.min(4 * BURST) {
            let index = cursor;
            cursor = (cursor + 1) % flows;
            visited += 1;
            let Some(flow) = state.get_mut(index) else {
                continue;
            };
            if !flow.ready(now, retransmit_ns) {
                continue;
            }
            let resend = flow.in_flight_since_ns.is_some();
            let Some(mut frame) = driver.frame_from(&template) else {
                break;
            };
            let segment = flow.next_segment(index as u64, now);
            let probe_seq = sent + batch.len() as u64;
            stamp_stream(
                frame.data_mut(),
                spec,
                index as u64,
                segment,
                probe_seq,
                now,
            );
            totals.retransmits += u64::from(resend);
            totals.in_flight += u64::from(!resend);
            if flow.state == StreamState::SynSent {
                totals.syns_sent += 1;
            } else {
                totals.data_segments_sent += 1;
            }
            batch.push(frame);
        }
        let queued = batch.len();
        if queued > 0 {
            sent += driver.tx_burst(PORT, &mut batch) as u64;
            for frame in batch.drain(..) {
                driver.release(frame);
            }
        }
        let got = receive(
            &mut driver,
            &mut rx,
            &mut echo,
            &mut state,
            &mut totals,
            sent,
        );
        if queued == 0 && got == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
        progress.tick(elapsed, "sent", sent, sent * frame_bytes, || {
            format!(
                ", {} echoes, {} handshakes, {} data exchanges, {} retransmits",
                echo.seen.received,
                totals.handshakes_completed,
                totals.data_segments_echoed,
                totals.retransmits
            )
        });
    }
    let send_elapsed = start.elapsed();
    // Wait for the answers still in flight.
    let drain_until = Instant::now() + Duration::from_millis(args.echo_wait_ms);
    while totals.in_flight > 0 && Instant::now() < drain_until && !stop.load(Ordering::Relaxed) {
        if receive(
            &mut driver,
            &mut rx,
            &mut echo,
            &mut state,
            &mut totals,
            sent,
        ) == 0
        {
            driver.wait(1);
        }
    }
    let secs = send_elapsed.as_secs_f64().max(1e-9);
    totals.established_flows = state
        .iter()
        .filter(|f| f.state == StreamState::Established)
        .count() as u64;
    totals.exchanges_per_s = totals.data_segments_echoed as f64 / secs;
    let summary = SendSummary {
        mode: "send",
        iface: args.iface.clone(),
        proto: args.proto.name(),
        flows: args.flows,
        frame_bytes: template.len(),
        elapsed_s: secs,
        sent,
        sent_bytes: sent * frame_bytes,
        sent_pps: sent as f64 / secs,
        sent_bps: (sent * frame_bytes) as f64 * 8.0 / secs,
        tx_ring_full: driver.total_stats().tx_ring_full,
        interrupted: stop.load(Ordering::Relaxed),
        echo: Some(echo.summary(sent, secs)),
        stream: Some(totals),
    };
    print_send(&summary, args.json)
}

fn sink(args: SinkArgs) -> Result<(), String> {
    let duration = duration_of(args.duration_s)?;
    let count = args.count.unwrap_or(u64::MAX);
    let stop = stop_flag().map_err(|e| e.to_string())?;
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
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&summary).map_err(|e| e.to_string())?
        );
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Send(a) => send(a),
        Command::Sink(a) => sink(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pktgen: {e}");
            ExitCode::FAILURE
        }
    }
}
