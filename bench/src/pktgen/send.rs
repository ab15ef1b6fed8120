//! The send run: UDP datagrams, TCP SYNs or TCP streams over `flows`
//! distinct 5-tuples, at a fixed rate or as fast as the ring takes them,
//! optionally receiving a sink's echoes to measure round trips and loss.
//!
//! Invariants:
//! * Sequence numbers count sent frames from 0; only echoes of sequences
//!   already sent are counted, so loss is `sent - echoes`.
//! * With a rate, frame `n` is not sent before `n / rate` s after the start
//!   (bursts catch up when the loop falls behind); idle and rate-limited,
//!   the loop sleeps 50 µs.
//! * RTTs include the af_packet RX rings' block-retire delay on both sides
//!   (`rx_block_timeout_ms`, 1 ms), so at low rates they are an upper bound.
//! * A `tcp-stream` run keeps one segment in flight per flow and resends it
//!   after `retransmit_ms` without an answer; after the last frame it waits
//!   up to `echo_wait_ms` for the answers still in flight.

use super::frame::{FrameSpec, KIND_ECHO, PktgenError, TrafficProto, parse_probe, stamp};
use super::report::{EchoSummary, Progress, SendSummary, StreamSummary, print_send};
use super::session::{BURST, PORT, SessionError, duration_of, open, stop_flag};
use super::spoof::{SpoofRange, Spoofer, stamp_spoofed};
use super::stats::{Histogram, SeqTracker, ratio};
use super::stream::{StreamFlow, StreamState, parse_tcp_echo, stamp_stream};
use dataplane::driver::afpacket::{AfPacketDriver, AfPacketFrame, prepare};
use dataplane::driver::{Driver, Frame};
use dataplane::wire::MacAddr;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What a send run does (the `pktgen send` arguments).
#[derive(Clone, Debug)]
pub struct SendConfig {
    pub iface: String,
    /// Destination MAC (the next hop's).
    pub dst_mac: MacAddr,
    /// Source address of flow 0 (later flows count up past 64512 ports).
    pub src: Ipv4Addr,
    pub dst: SocketAddrV4,
    pub proto: TrafficProto,
    pub flows: u32,
    /// Ethernet frame size without FCS; `None`: the protocol's minimum, at
    /// least 64.
    pub frame_bytes: Option<usize>,
    /// Frames per second; as fast as possible when `None`.
    pub rate_pps: Option<u64>,
    pub duration_s: f64,
    /// Stop after this many frames.
    pub count: Option<u64>,
    /// Receive the echoes of a sink and report RTT and loss.
    pub expect_echo: bool,
    /// After the last frame, wait this long for outstanding echoes.
    pub echo_wait_ms: u64,
    /// tcp-stream: resend a flow's segment when unanswered this long.
    pub retransmit_ms: u64,
    /// Print the summary as one JSON object.
    pub json: bool,
    /// `syn-flood`: the subnet the random sources are drawn from (required
    /// then, refused otherwise); `src` is ignored.
    pub spoof: Option<SpoofRange>,
    /// Seed of the spoofed sources.
    pub seed: u64,
}

#[derive(Debug, Default)]
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

/// Run `pktgen send`: send, then print the summary.
pub fn send(args: &SendConfig) -> Result<(), SessionError> {
    let info = prepare::interface_info(&args.iface).map_err(SessionError::Interface)?;
    if (args.proto == TrafficProto::SynFlood) != args.spoof.is_some() {
        return Err(PktgenError::SpoofNeedsSynFlood.into());
    }
    let spec = FrameSpec {
        src_mac: info.mac,
        dst_mac: args.dst_mac,
        src_ip: args.spoof.map_or(args.src, SpoofRange::base),
        dst_ip: *args.dst.ip(),
        dst_port: args.dst.port(),
        proto: args.proto,
        flows: args.flows,
        frame_bytes: args.frame_bytes.unwrap_or(args.proto.default_frame_bytes()),
    };
    spec.validate()?;
    if args.rate_pps == Some(0) {
        return Err(SessionError::ZeroRate);
    }
    if args.proto == TrafficProto::TcpStream {
        return send_stream(args, &spec);
    }
    let duration = duration_of(args.duration_s)?;
    let count = args.count.unwrap_or(u64::MAX);
    let stop = stop_flag()?;
    let mut driver = open(&args.iface)?;
    let template = spec.template();
    let frame_bytes = template.len() as u64;
    let mut batch: Vec<AfPacketFrame> = Vec::with_capacity(BURST);
    let mut rx: Vec<AfPacketFrame> = Vec::with_capacity(BURST);
    let mut echo = EchoState::default();
    let mut progress = Progress::new();
    let mut spoofer = args.spoof.map(|r| Spoofer::new(r, args.seed));
    let mut sent = 0u64;
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) && sent < count {
        let elapsed = start.elapsed();
        if elapsed >= duration {
            break;
        }
        let due = match args.rate_pps {
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
            match spoofer.as_mut() {
                Some(spoofer) => stamp_spoofed(frame.data_mut(), spoofer),
                None => stamp(frame.data_mut(), &spec, sent + i, now_ns),
            };
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

/// `send --proto tcp-stream`: every flow handshakes, then exchanges data
/// with the sink, one segment in flight per flow. The flows are visited
/// round robin; a flow whose segment is in flight is skipped until its
/// answer arrives or `--retransmit-ms` passes.
fn send_stream(args: &SendConfig, spec: &FrameSpec) -> Result<(), SessionError> {
    let duration = duration_of(args.duration_s)?;
    let count = args.count.unwrap_or(u64::MAX);
    let retransmit_ns = args.retransmit_ms.saturating_mul(1_000_000).max(1);
    let stop = stop_flag()?;
    let mut driver = open(&args.iface)?;
    let template = spec.template();
    let frame_bytes = template.len() as u64;
    let flows = usize::try_from(spec.flows).map_err(SessionError::FlowCount)?;
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
        let due = match args.rate_pps {
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
