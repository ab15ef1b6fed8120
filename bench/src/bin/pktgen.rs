//! `pktgen`: a packet generator and sink over the af_packet driver.
//!
//! ```text
//! pktgen send --iface IF --dst-mac MAC --src IP --dst IP:PORT
//!             [--proto udp|tcp-syn|tcp-stream] [--flows N] [--size BYTES]
//!             [--rate PPS] [--duration-s S] [--count N]
//!             [--expect-echo [--echo-wait-ms MS]] [--retransmit-ms MS] [--json]
//! pktgen send --iface IF --dst-mac MAC --proto syn-flood --src-cidr CIDR
//!             --dst IP:PORT [--seed N] [--size BYTES]
//!             [--rate PPS] [--duration-s S] [--count N] [--json]
//! pktgen sink --iface IF [--echo] [--duration-s S] [--count N] [--json]
//! ```
//!
//! `send` sends UDP datagrams, TCP SYNs or TCP "established-like" streams
//! (`tcp-stream`: per flow a handshake, then data segments echoed back by
//! the sink as data, one segment in flight per flow, resent after
//! `--retransmit-ms`; implies `--expect-echo`) over `--flows` distinct 5-tuples,
//! or (`syn-flood`) bare SYNs from random addresses and ports of
//! `--src-cidr`, a SYN flood from spoofed sources (use a subnet the caller
//! owns and routes back to the sender's namespace),
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
//!
//! This file is the command line: it parses the arguments and runs
//! [`portico_bench::pktgen::send`] or [`portico_bench::pktgen::sink`].

use clap::{Parser, Subcommand};
use portico_bench::pktgen::{
    SendConfig, SinkConfig, SpoofRange, TrafficProto, parse_mac, send, sink,
};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::ExitCode;

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
    #[arg(
        long,
        required_unless_present = "src_cidr",
        conflicts_with = "src_cidr"
    )]
    src: Option<Ipv4Addr>,
    /// `--proto syn-flood`: random sources inside this subnet.
    #[arg(long)]
    src_cidr: Option<SpoofRange>,
    /// Seed of the random sources [default: from the clock].
    #[arg(long)]
    seed: Option<u64>,
    #[arg(long)]
    dst: SocketAddrV4,
    #[arg(long, default_value = "udp")]
    proto: TrafficProto,
    #[arg(long, default_value_t = 1)]
    flows: u32,
    /// Ethernet frame size in bytes without FCS [default: 64 for udp, 74
    /// (the minimum) for tcp-syn, 54 for syn-flood].
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

impl SendArgs {
    fn config(self) -> SendConfig {
        SendConfig {
            iface: self.iface,
            dst_mac: self.dst_mac,
            src: self
                .src
                .or(self.src_cidr.map(SpoofRange::base))
                .unwrap_or(Ipv4Addr::UNSPECIFIED),
            dst: self.dst,
            proto: self.proto,
            flows: self.flows,
            frame_bytes: self.size,
            rate_pps: self.rate,
            duration_s: self.duration_s,
            count: self.count,
            expect_echo: self.expect_echo,
            echo_wait_ms: self.echo_wait_ms,
            retransmit_ms: self.retransmit_ms,
            json: self.json,
            spoof: self.src_cidr,
            seed: self.seed.unwrap_or_else(clock_seed),
        }
    }
}

/// A seed from the wall clock's nanoseconds.
fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

impl SinkArgs {
    fn config(self) -> SinkConfig {
        SinkConfig {
            iface: self.iface,
            echo: self.echo,
            duration_s: self.duration_s,
            count: self.count,
            json: self.json,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Send(a) => send(&a.config()),
        Command::Sink(a) => sink(&a.config()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pktgen: {e}");
            ExitCode::FAILURE
        }
    }
}
