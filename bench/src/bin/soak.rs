//! `soak`: a long run of the gateway under steady churn (issue 15), not a
//! CI test. In the demo topology (client ─ gateway ─ 3 nginx backends,
//! namespaces made and removed here), `portico run` carries for
//! `--minutes`:
//! * connection churn: `wrk -H "Connection: close"` with `--connections`
//!   connections (every request a new TCP connection, a new flow and a new
//!   SNAT tuple);
//! * UDP at a steady `--udp-pps` to the VIP's DNS service from a rotating
//!   set of source ports (new UDP flows that expire after 30 s), answered by
//!   the backends' echo servers;
//!
//! and every `--sample-s` seconds it samples the gateway's RSS
//! (`/proc/PID/status`), live flows (sum of the services' `flows_active`)
//! and SNAT ports in use. When the load stops it keeps sampling until
//! flows and SNAT ports are back to zero (at most `--drain-s`). It prints a
//! table (Markdown) and a verdict: RSS growth from the first to the last
//! loaded sample, and whether everything returned to zero. Exit status 1
//! when it did not.
//!
//! ```sh
//! cargo build --release -p portico -p portico-bench --bin soak
//! sudo target/release/soak --minutes 60
//! ```

use anyhow::{Context, Result, bail};
use clap::Parser;
use portico::demo::topology::{
    DNS_PORT, DriverKind, HTTP_PORT, ServiceOptions, Topology, TopologyConfig, VIP,
};
use portico_bench::compare::run::rss_kb;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Hours of churn through portico run: RSS, flows and SNAT ports sampled")]
struct Args {
    /// Minutes of load.
    #[arg(long, default_value_t = 60)]
    minutes: u64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 60)]
    sample_s: u64,
    /// wrk connections (each request opens and closes one).
    #[arg(long, default_value_t = 8)]
    connections: u32,
    /// UDP datagrams per second to the VIP.
    #[arg(long, default_value_t = 2000)]
    udp_pps: u64,
    /// After the load: how long to wait for flows and SNAT ports to go.
    #[arg(long, default_value_t = 300)]
    drain_s: u64,
    /// Gateway workers.
    #[arg(long, default_value_t = 2)]
    workers: u32,
    /// Default: `portico` next to this binary.
    #[arg(long)]
    portico: Option<PathBuf>,
}

fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .unwrap_or_else(|| PathBuf::from(name))
}

/// One sample of the gateway.
#[derive(Clone, Copy, Debug)]
struct Sample {
    at_s: u64,
    rss_kb: u64,
    flows: u64,
    snat_ports: u64,
    udp_sent: u64,
    udp_answered: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if !portico_netns::require_root("soak") {
        bail!("soak needs root and network namespaces");
    }
    if !portico_netns::have("wrk") {
        bail!("soak needs wrk (apt-get install wrk)");
    }
    let topology = Topology::build(&TopologyConfig {
        backends: 3,
        portico: args.portico.clone().unwrap_or_else(|| sibling("portico")),
        prefer_nginx: true,
        driver: DriverKind::Afpacket,
    })?;
    let options = ServiceOptions {
        workers: args.workers,
        ..ServiceOptions::all(&topology)
    };
    let gateway = topology.start_gateway(&topology.config_toml(&options))?;
    let pid = gateway.pid().context("gateway pid")?;
    let sample = |at: Instant, sent: u64, answered: u64| -> Result<Sample> {
        let stats = gateway.stats().context("portico stats")?;
        Ok(Sample {
            at_s: at.elapsed().as_secs(),
            rss_kb: rss_kb(pid)?,
            flows: stats.services.iter().map(|s| s.flows_active).sum(),
            snat_ports: stats.snat.iter().map(|s| s.ports_in_use).sum(),
            udp_sent: sent,
            udp_answered: answered,
        })
    };

    // Churn: every request a new connection, for the whole run.
    let wrk_log = topology.dir.path.join("wrk.log");
    let duration = format!("{}s", args.minutes * 60);
    let connections = args.connections.to_string();
    let url = format!("http://{VIP}:{HTTP_PORT}/");
    let wrk = topology.client.spawn_logged(
        "wrk",
        &[
            "-t1",
            "-c",
            &connections,
            "-d",
            &duration,
            "-H",
            "Connection: close",
            &url,
        ],
        &wrk_log,
    )?;

    // UDP at a steady rate from 4,096 rotating source ports, from a thread
    // in the client's namespace.
    let stop = AtomicBool::new(false);
    let (sent, answered) = (AtomicU64::new(0), AtomicU64::new(0));
    let udp_load = || -> Result<()> {
        let sockets: Vec<UdpSocket> = (0..4096u16)
            .map(|i| {
                let s = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 20_000 + i))?;
                s.set_nonblocking(true)?;
                Ok(s)
            })
            .collect::<std::io::Result<_>>()?;
        let target = SocketAddr::V4(SocketAddrV4::new(VIP, DNS_PORT));
        let pps = args.udp_pps.max(1);
        let started = Instant::now();
        let mut n: u64 = 0;
        let mut buf = [0u8; 512];
        while !stop.load(Ordering::Relaxed) {
            let due = started + Duration::from_nanos(n.saturating_mul(1_000_000_000) / pps);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait.min(Duration::from_millis(5)));
                continue;
            }
            let socket = &sockets[(n % 4096) as usize];
            if socket.send_to(b"soak", target).is_ok() {
                sent.fetch_add(1, Ordering::Relaxed);
            }
            n += 1;
            // Take the answers of the socket used 64 sends ago.
            let back = &sockets[((n + 4096 - 64) % 4096) as usize];
            while back.recv_from(&mut buf).is_ok() {
                answered.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    };

    let last = std::thread::scope(|scope| -> Result<Sample> {
        let udp = scope.spawn(|| portico_netns::in_netns(&topology.client, udp_load));
        let started = Instant::now();
        let load_end = started + Duration::from_secs(args.minutes * 60);
        let mut samples = Vec::new();
        println!("| t (s) | RSS (kB) | live flows | SNAT ports in use | UDP sent | UDP answered |");
        println!("|---:|---:|---:|---:|---:|---:|");
        let print = |s: &Sample| {
            println!(
                "| {} | {} | {} | {} | {} | {} |",
                s.at_s, s.rss_kb, s.flows, s.snat_ports, s.udp_sent, s.udp_answered
            );
        };
        while Instant::now() < load_end {
            std::thread::sleep(Duration::from_secs(args.sample_s).min(load_end - Instant::now()));
            let s = sample(
                started,
                sent.load(Ordering::Relaxed),
                answered.load(Ordering::Relaxed),
            )?;
            print(&s);
            samples.push(s);
        }
        stop.store(true, Ordering::Relaxed);
        match udp.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => println!("UDP load failed: {e:#}"),
            Err(_) => println!("UDP load panicked"),
        }
        let wrk_out = wrk.wait_output(Duration::from_secs(120))?;
        let wrk_text = std::fs::read_to_string(&wrk_log).unwrap_or_default();
        println!("\nwrk (exit {:?}):\n{wrk_text}", wrk_out.status.code());

        // After the load: everything must go back to zero.
        let drain_end = Instant::now() + Duration::from_secs(args.drain_s);
        let mut last = sample(
            started,
            sent.load(Ordering::Relaxed),
            answered.load(Ordering::Relaxed),
        )?;
        while (last.flows > 0 || last.snat_ports > 0) && Instant::now() < drain_end {
            std::thread::sleep(Duration::from_secs(10));
            last = sample(
                started,
                sent.load(Ordering::Relaxed),
                answered.load(Ordering::Relaxed),
            )?;
        }
        println!("\nafter the load:");
        print(&last);
        let (first, end) = (samples.first().copied(), samples.last().copied());
        if let (Some(first), Some(end)) = (first, end) {
            let growth = end.rss_kb as f64 / first.rss_kb.max(1) as f64 - 1.0;
            println!(
                "RSS {} kB at the first sample, {} kB at the last loaded one ({:+.1} %); {} kB after the load",
                first.rss_kb,
                end.rss_kb,
                growth * 100.0,
                last.rss_kb
            );
        }
        Ok(last)
    })?;
    let _ = gateway.stop(Duration::from_secs(10));
    if last.flows > 0 || last.snat_ports > 0 {
        println!("NOT back to zero after {} s: {last:?}", args.drain_s);
        std::process::exit(1);
    }
    println!("back to zero: no live flow, no SNAT port in use");
    Ok(())
}
