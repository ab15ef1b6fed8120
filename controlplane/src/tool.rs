//! `portico tool …`: small helpers that `portico demo` and the end-to-end
//! tests run inside network namespaces (`ip netns exec NS portico tool …`),
//! so that a fresh machine needs nothing beyond `ip` to run the demo.
//!
//! * `offloads-off IF [--tx-checksum]` — TSO/GSO/GRO/LRO off on an
//!   interface (no external `ethtool` needed): the client and backend ends
//!   of the veth pairs must not send super-frames to an af_packet port,
//!   which drops frames above the MTU; `--tx-checksum` also turns TX
//!   checksum offload off (peers of an AF_XDP port).
//! * `offloads-on IF` — GRO/GSO/TSO back on (LRO off): the peers of an
//!   af_packet port with `gso = true`, which takes super-packets whole.
//! * `http-serve` / `udp-echo` — the built-in backends used when nginx is
//!   not installed. Every answer names the backend and the peer it saw:
//!   `backend NAME saw ADDR`, like the nginx configuration of
//!   [`crate::netns::nginx`].
//! * `http-get`, `http-keepalive`, `udp-query` — bounded clients printing
//!   one line (or one JSON object) per request.
//! * `send-frames` — a fixed set of malformed and unwanted frames, sent on
//!   an interface with a raw `AF_PACKET` socket (the dataplane's af_packet
//!   driver), each labelled with the drop reason it must be counted under.
//!
//! Every client has a per-operation timeout, a bounded count and a bounded
//! number of threads; servers use one thread per connection and close
//! idle connections after a timeout.

use anyhow::{Context, bail};
use dataplane::driver::Driver;
use dataplane::driver::afpacket::{AfPacketConfig, AfPacketDriver};
use dataplane::wire::tcp::flags as F;
use dataplane::wire::{MacAddr, build};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// `portico tool …`.
#[derive(clap::Subcommand, Debug)]
pub enum ToolCommand {
    /// Turn TSO, GSO, GRO and LRO off on an interface.
    OffloadsOff {
        interface: String,
        /// Also TX checksum offload (peers of an AF_XDP port: XDP frames
        /// carry no "checksum partial" mark, so they need full checksums).
        #[arg(long)]
        tx_checksum: bool,
    },
    /// Turn GRO, GSO and TSO on (and LRO off) on an interface.
    OffloadsOn { interface: String },
    /// A tiny HTTP/1.1 server answering every request with
    /// `backend NAME saw CLIENT` (keep-alive and `Connection: close`).
    HttpServe {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        name: String,
    },
    /// A UDP server answering every datagram with the datagram followed by
    /// ` backend NAME saw CLIENT`.
    UdpEcho {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long, default_value = "udp")]
        name: String,
    },
    /// `count` HTTP GETs, one connection each (`Connection: close`); prints
    /// `ok STATUS MICROS BODY` or `err MICROS STAGE: ERROR` per request
    /// (STAGE `connect`: the connection was not established; `exchange`:
    /// it was, and the request or answer failed).
    HttpGet {
        #[arg(long)]
        target: SocketAddr,
        #[arg(long, default_value_t = 1)]
        count: u32,
        #[arg(long, default_value_t = 1)]
        concurrency: u32,
        #[arg(long, default_value_t = 2000)]
        timeout_ms: u64,
    },
    /// `connections` keep-alive connections each sending a GET every
    /// `interval_ms` for `duration_ms`; prints one JSON object per
    /// connection (backends seen, answers, errors). A connection stops at
    /// its first error.
    HttpKeepalive {
        #[arg(long)]
        target: SocketAddr,
        #[arg(long, default_value_t = 8)]
        connections: u32,
        #[arg(long, default_value_t = 3000)]
        duration_ms: u64,
        #[arg(long, default_value_t = 50)]
        interval_ms: u64,
        #[arg(long, default_value_t = 2000)]
        timeout_ms: u64,
    },
    /// `count` UDP queries, each from a new socket (a new flow); prints
    /// `ok MICROS REPLY` or `err MICROS ERROR` per query.
    UdpQuery {
        #[arg(long)]
        target: SocketAddr,
        #[arg(long, default_value_t = 1)]
        count: u32,
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
    },
    /// Send the malformed/unwanted frame set on `interface` towards
    /// `dst_mac` (the gateway), then print `{"reason": frames sent, …}`.
    SendFrames {
        #[arg(long)]
        interface: String,
        #[arg(long)]
        src_mac: String,
        #[arg(long)]
        dst_mac: String,
        #[arg(long)]
        src_ip: Ipv4Addr,
        /// An owned address with a TCP listener on `port`.
        #[arg(long)]
        vip: Ipv4Addr,
        #[arg(long, default_value_t = 80)]
        port: u16,
        /// An address of the connected subnet that the gateway does not own.
        #[arg(long)]
        not_owned: Ipv4Addr,
        /// Copies of each frame.
        #[arg(long, default_value_t = 5)]
        copies: u32,
    },
}

pub fn run(cmd: &ToolCommand) -> anyhow::Result<()> {
    match cmd {
        ToolCommand::OffloadsOff {
            interface,
            tx_checksum,
        } => {
            let state = dataplane::driver::afpacket::prepare::disable_offloads(interface)
                .with_context(|| format!("offloads off on {interface}"))?;
            println!("{interface}: {state:?}");
            if *tx_checksum {
                let on = dataplane::driver::afpacket::prepare::set_tx_checksum(interface, false)
                    .with_context(|| format!("TX checksum offload off on {interface}"))?;
                println!(
                    "{interface}: tx checksum offload {}",
                    if on { "on" } else { "off" }
                );
            }
            Ok(())
        }
        ToolCommand::OffloadsOn { interface } => {
            let state = dataplane::driver::afpacket::prepare::enable_gso_offloads(interface)
                .with_context(|| format!("offloads on on {interface}"))?;
            println!("{interface}: {state:?}");
            Ok(())
        }
        ToolCommand::HttpServe { listen, name } => http_serve(*listen, name),
        ToolCommand::UdpEcho { listen, name } => udp_echo(*listen, name),
        ToolCommand::HttpGet {
            target,
            count,
            concurrency,
            timeout_ms,
        } => {
            http_get(
                *target,
                *count,
                *concurrency,
                Duration::from_millis(*timeout_ms),
            );
            Ok(())
        }
        ToolCommand::HttpKeepalive {
            target,
            connections,
            duration_ms,
            interval_ms,
            timeout_ms,
        } => http_keepalive(
            *target,
            *connections,
            Duration::from_millis(*duration_ms),
            Duration::from_millis(*interval_ms),
            Duration::from_millis(*timeout_ms),
        ),
        ToolCommand::UdpQuery {
            target,
            count,
            timeout_ms,
        } => {
            udp_query(*target, *count, Duration::from_millis(*timeout_ms));
            Ok(())
        }
        ToolCommand::SendFrames {
            interface,
            src_mac,
            dst_mac,
            src_ip,
            vip,
            port,
            not_owned,
            copies,
        } => {
            let set = FrameSet {
                src_mac: parse_mac(src_mac)?,
                dst_mac: parse_mac(dst_mac)?,
                src_ip: *src_ip,
                vip: *vip,
                port: *port,
                not_owned: *not_owned,
            };
            let sent = send_frames(interface, &set.frames(), *copies)?;
            println!("{}", serde_json::to_string(&sent)?);
            Ok(())
        }
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(text: &str) -> anyhow::Result<MacAddr> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        let part = parts.next().with_context(|| format!("bad MAC {text}"))?;
        *byte = u8::from_str_radix(part, 16).with_context(|| format!("bad MAC {text}"))?;
    }
    if parts.next().is_some() {
        bail!("bad MAC {text}");
    }
    Ok(MacAddr(mac))
}

/// Idle keep-alive connections of the built-in server are closed after this.
const SERVER_IDLE: Duration = Duration::from_secs(30);
/// Most concurrent connections of the built-in HTTP server.
const SERVER_MAX_CONNECTIONS: u32 = 512;

fn http_serve(listen: SocketAddr, name: &str) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).with_context(|| format!("bind {listen}"))?;
    let active = Arc::new(AtomicU32::new(0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if active.load(Ordering::Relaxed) >= SERVER_MAX_CONNECTIONS {
            continue; // dropped: closes the connection
        }
        active.fetch_add(1, Ordering::Relaxed);
        let name = name.to_owned();
        let active = Arc::clone(&active);
        std::thread::spawn(move || {
            let _ = serve_connection(stream, &name);
            active.fetch_sub(1, Ordering::Relaxed);
        });
    }
    Ok(())
}

fn serve_connection(stream: TcpStream, name: &str) -> std::io::Result<()> {
    stream.set_read_timeout(Some(SERVER_IDLE))?;
    let peer = stream.peer_addr()?.ip();
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let http10 = request_line.trim_end().ends_with("HTTP/1.0");
        let mut close = http10;
        let mut content_length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((key, value)) = line.split_once(':') {
                let value = value.trim();
                if key.eq_ignore_ascii_case("connection") {
                    close = value.eq_ignore_ascii_case("close")
                        || (http10 && !value.eq_ignore_ascii_case("keep-alive"));
                } else if key.eq_ignore_ascii_case("content-length") {
                    content_length = value.parse().unwrap_or(0);
                }
            }
        }
        // Discard a request body (bounded by what the client announced).
        std::io::copy(
            &mut (&mut reader).take(content_length as u64),
            &mut std::io::sink(),
        )?;
        let body = format!("backend {name} saw {peer}\n");
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n",
            body.len(),
            if close { "close" } else { "keep-alive" }
        );
        writer.write_all(head.as_bytes())?;
        writer.write_all(body.as_bytes())?;
        writer.flush()?;
        if close {
            return Ok(());
        }
    }
}

fn udp_echo(listen: SocketAddr, name: &str) -> anyhow::Result<()> {
    let socket = UdpSocket::bind(listen).with_context(|| format!("bind {listen}"))?;
    let mut buf = [0u8; 2048];
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let mut reply = buf.get(..n).unwrap_or_default().to_vec();
        reply.extend_from_slice(format!(" backend {name} saw {}", peer.ip()).as_bytes());
        let _ = socket.send_to(&reply, peer);
    }
}

/// One HTTP response: status and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub body: String,
}

/// Send `GET /` on `stream` and read one response (Content-Length framed).
pub fn http_exchange(
    stream: &mut BufReader<TcpStream>,
    host: SocketAddr,
    close: bool,
) -> std::io::Result<HttpResponse> {
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {host}\r\nUser-Agent: portico-tool\r\nConnection: {}\r\n\r\n",
        if close { "close" } else { "keep-alive" }
    );
    stream.get_mut().write_all(request.as_bytes())?;
    let mut status_line = String::new();
    if stream.read_line(&mut status_line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed before a response",
        ));
    }
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {status_line:?}")))?;
    let mut content_length = None;
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed in the headers",
            ));
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((key, value)) = line.split_once(':')
            && key.eq_ignore_ascii_case("content-length")
        {
            content_length = value.trim().parse::<u64>().ok();
        }
    }
    let mut body = Vec::new();
    match content_length {
        Some(n) => {
            stream.take(n.min(1 << 20)).read_to_end(&mut body)?;
        }
        None => {
            stream.take(1 << 20).read_to_end(&mut body)?;
        }
    }
    Ok(HttpResponse {
        status,
        body: String::from_utf8_lossy(&body).trim().to_owned(),
    })
}

fn connect(target: SocketAddr, timeout: Duration) -> std::io::Result<BufReader<TcpStream>> {
    let stream = TcpStream::connect_timeout(&target, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    Ok(BufReader::new(stream))
}

fn http_get(target: SocketAddr, count: u32, concurrency: u32, timeout: Duration) {
    let next = Arc::new(AtomicU32::new(0));
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let threads: Vec<_> = (0..concurrency.clamp(1, 64))
        .map(|_| {
            let next = Arc::clone(&next);
            let tx = tx.clone();
            std::thread::spawn(move || {
                while next.fetch_add(1, Ordering::Relaxed) < count {
                    let start = Instant::now();
                    let result = connect(target, timeout)
                        .map_err(|e| ("connect", e))
                        .and_then(|mut s| {
                            http_exchange(&mut s, target, true).map_err(|e| ("exchange", e))
                        });
                    let micros = start.elapsed().as_micros();
                    let line = match result {
                        Ok(r) => format!("ok {} {micros} {}", r.status, r.body),
                        Err((stage, e)) => format!("err {micros} {stage}: {e}"),
                    };
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for line in rx {
        let _ = writeln!(out, "{line}");
    }
    for t in threads {
        let _ = t.join();
    }
}

/// What one keep-alive connection of `http-keepalive` saw.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct KeepaliveReport {
    pub connection: u32,
    /// Local port of the connection.
    pub local_port: u16,
    /// Answers per backend body (`backend b0 saw 10.1.0.1` → count).
    pub answers: BTreeMap<String, u32>,
    pub errors: u32,
    /// The first error, if any.
    pub error: Option<String>,
    /// Milliseconds since the start when the first error happened.
    pub error_at_ms: Option<u64>,
}

fn http_keepalive(
    target: SocketAddr,
    connections: u32,
    duration: Duration,
    interval: Duration,
    timeout: Duration,
) -> anyhow::Result<()> {
    let start = Instant::now();
    let threads: Vec<_> = (0..connections.clamp(1, 256))
        .map(|connection| {
            std::thread::spawn(move || {
                let mut report = KeepaliveReport {
                    connection,
                    ..KeepaliveReport::default()
                };
                let fail = |report: &mut KeepaliveReport, e: std::io::Error| {
                    report.errors += 1;
                    report.error = Some(e.to_string());
                    report.error_at_ms = Some(start.elapsed().as_millis() as u64);
                };
                let mut stream = match connect(target, timeout) {
                    Ok(s) => s,
                    Err(e) => {
                        fail(&mut report, e);
                        return report;
                    }
                };
                report.local_port = stream.get_ref().local_addr().map_or(0, |a| a.port());
                while start.elapsed() < duration {
                    match http_exchange(&mut stream, target, false) {
                        Ok(r) if r.status == 200 => {
                            *report.answers.entry(r.body).or_default() += 1;
                        }
                        Ok(r) => {
                            fail(
                                &mut report,
                                std::io::Error::other(format!("status {}", r.status)),
                            );
                            break;
                        }
                        Err(e) => {
                            fail(&mut report, e);
                            break;
                        }
                    }
                    std::thread::sleep(interval);
                }
                report
            })
        })
        .collect();
    for t in threads {
        let report = t
            .join()
            .map_err(|_| anyhow::anyhow!("a connection thread panicked"))?;
        println!("{}", serde_json::to_string(&report)?);
    }
    Ok(())
}

fn udp_query(target: SocketAddr, count: u32, timeout: Duration) {
    let mut buf = [0u8; 2048];
    for i in 0..count {
        let start = Instant::now();
        let token = format!("q{}-{i}", std::process::id());
        let result = (|| -> std::io::Result<String> {
            // An ephemeral port of the target's family (an IPv4 socket
            // cannot connect to an IPv6 target).
            let local: SocketAddr = if target.is_ipv6() {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            } else {
                (Ipv4Addr::UNSPECIFIED, 0).into()
            };
            let socket = UdpSocket::bind(local)?;
            socket.set_read_timeout(Some(timeout))?;
            socket.connect(target)?;
            socket.send(token.as_bytes())?;
            loop {
                let n = socket.recv(&mut buf)?;
                let reply = String::from_utf8_lossy(buf.get(..n).unwrap_or_default());
                if let Some(rest) = reply.strip_prefix(token.as_str()) {
                    return Ok(rest.trim().to_owned());
                }
                // A stray datagram: keep waiting (the read timeout bounds it).
            }
        })();
        let micros = start.elapsed().as_micros();
        match result {
            Ok(reply) => println!("ok {micros} {reply}"),
            Err(e) => println!("err {micros} {e}"),
        }
    }
}

/// Addresses of the malformed/unwanted frame set.
#[derive(Clone, Copy, Debug)]
pub struct FrameSet {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src_ip: Ipv4Addr,
    pub vip: Ipv4Addr,
    pub port: u16,
    pub not_owned: Ipv4Addr,
}

impl FrameSet {
    /// Each frame with the drop reason (`DropReason::name`) it must be
    /// counted under.
    pub fn frames(&self) -> Vec<(&'static str, Vec<u8>)> {
        let &FrameSet {
            src_mac,
            dst_mac,
            src_ip,
            vip,
            port,
            not_owned,
        } = self;
        const IPV4: u16 = 0x0800;
        let eth = |ethertype: u16, payload: &[u8]| {
            build::ethernet_frame(src_mac, dst_mac, ethertype, payload)
        };
        let syn = |dport: u16| build::ipv4_tcp(src_ip, 40_000, vip, dport, F::SYN, 1, 0, b"");
        let mut frames = Vec::new();

        // Random bytes under an unknown ethertype (xorshift, fixed seed).
        let mut x: u32 = 0x2545_f491;
        let random: Vec<u8> = (0..64)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x.to_le_bytes()[0]
            })
            .collect();
        frames.push(("unsupported_ethertype", eth(0x88b5, &random)));
        // IPv6 with nine Destination Options headers (the parse stage
        // follows eight), from 2001:db8::1.
        let mut v6 = vec![0x60, 0, 0, 0, 0, 72, 60, 64, 0x20, 0x01, 0x0d, 0xb8];
        v6.extend_from_slice(&[0u8; 11]);
        v6.push(1);
        v6.extend_from_slice(&[0u8; 16]);
        for i in 0..9 {
            v6.extend_from_slice(&[if i < 8 { 60 } else { 59 }, 0, 1, 4, 0, 0, 0, 0]);
        }
        frames.push(("ipv6_ext_chain_too_long", eth(0x86dd, &v6)));
        // IPv4 header checksum wrong.
        let mut bad = syn(port);
        if let Some(b) = bad.get_mut(10) {
            *b ^= 0x5a;
        }
        frames.push(("ipv4_bad_checksum", eth(IPV4, &bad)));
        // IPv4 version 5 in an IPv4 ethertype (checksum refilled).
        let mut v5 = syn(port);
        if let Some(b) = v5.get_mut(0) {
            *b = 0x55;
        }
        refill_ipv4_checksum(&mut v5);
        frames.push(("ipv4_bad_version", eth(IPV4, &v5)));
        // Total length larger than the frame.
        let mut long = syn(port);
        if let Some(b) = long.get_mut(2..4) {
            b.copy_from_slice(&1400u16.to_be_bytes());
        }
        refill_ipv4_checksum(&mut long);
        frames.push(("ipv4_bad_length", eth(IPV4, &long)));
        // A first fragment (more-fragments set) and a later fragment.
        for (flags_frag, _) in [(0x2000u16, "first"), (0x0010, "later")] {
            let mut frag = syn(port);
            if let Some(b) = frag.get_mut(6..8) {
                b.copy_from_slice(&flags_frag.to_be_bytes());
            }
            refill_ipv4_checksum(&mut frag);
            frames.push(("ipv4_fragment", eth(IPV4, &frag)));
        }
        // TCP checksum wrong (IPv4 header right).
        let mut tcp_bad = syn(port);
        if let Some(b) = tcp_bad.get_mut(20 + 16) {
            *b ^= 0x5a;
        }
        frames.push(("tcp_bad_checksum", eth(IPV4, &tcp_bad)));
        // SYN+FIN.
        frames.push((
            "tcp_bad_flags",
            eth(
                IPV4,
                &build::ipv4_tcp(src_ip, 40_001, vip, port, F::SYN | F::FIN, 1, 0, b""),
            ),
        ));
        // No listener on this port of the VIP.
        frames.push(("no_listener", eth(IPV4, &syn(port.wrapping_add(1000)))));
        // UDP to a port nobody listens on.
        frames.push((
            "no_listener",
            eth(IPV4, &build::ipv4_udp(src_ip, 40_002, vip, 9, b"hello?")),
        ));
        // An unknown transport protocol (GRE).
        frames.push((
            "unsupported_protocol",
            eth(IPV4, &build::ipv4_packet(src_ip, vip, 47, &[0u8; 8])),
        ));
        // A destination the gateway does not own, sent to its MAC.
        frames.push((
            "not_owned",
            eth(
                IPV4,
                &build::ipv4_tcp(src_ip, 40_003, not_owned, port, F::SYN, 1, 0, b""),
            ),
        ));
        // A mid-connection segment of a flow that does not exist.
        frames.push((
            "no_flow",
            eth(
                IPV4,
                &build::ipv4_tcp(src_ip, 40_004, vip, port, F::ACK, 7, 9, b"stray"),
            ),
        ));
        frames
    }
}

fn refill_ipv4_checksum(packet: &mut [u8]) {
    if let Some(c) = packet.get_mut(10..12) {
        c.copy_from_slice(&[0, 0]);
    }
    let sum = dataplane::wire::checksum::checksum(packet.get(..20).unwrap_or_default());
    if let Some(c) = packet.get_mut(10..12) {
        c.copy_from_slice(&sum.to_be_bytes());
    }
}

/// Send every frame `copies` times on `interface`; returns frames sent per
/// reason.
pub fn send_frames(
    interface: &str,
    frames: &[(&'static str, Vec<u8>)],
    copies: u32,
) -> anyhow::Result<BTreeMap<&'static str, u64>> {
    let mut config = AfPacketConfig::new(&[interface]);
    config.promiscuous = false;
    config.pool_frames = 256;
    let mut driver = AfPacketDriver::open(&config).with_context(|| format!("open {interface}"))?;
    let mut sent = BTreeMap::new();
    for _ in 0..copies {
        for (reason, bytes) in frames {
            let frame = driver.frame_from(bytes).context("no free frame buffer")?;
            let mut batch = vec![frame];
            let n = driver.tx_burst(0, &mut batch);
            for f in batch.drain(..) {
                driver.release(f);
            }
            if n != 1 {
                bail!("{interface}: the TX ring refused a {reason} frame");
            }
            *sent.entry(*reason).or_default() += 1;
            // Give the gateway's RX ring room; the set is small.
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Ok(sent)
}
