//! `portico demo` on real interfaces: the [`topology`],
//! `portico run` (this same binary) in the gateway namespace, curl (or the
//! built-in client) in the client namespace.
//!
//! Invariants: every step is bounded in time (each request and query has a
//! timeout, counts are fixed); everything created is owned by a guard, and
//! SIGINT/SIGTERM/SIGHUP only set a flag that the demo checks between
//! batches, so Ctrl-C unwinds through the guards and removes the
//! namespaces and processes. Children run in their own process groups, so a
//! Ctrl-C in the terminal does not kill the gateway or the servers behind
//! the guards' backs.

use super::topology::{
    self, BACKEND_HTTP_PORT, BACKEND_UDP_PORT, CLIENT_ADDR, DNS_PORT, GatewayRun, HTTP_PORT,
    HttpServer, NODE_ADDR, NODE_PORT, SNAT_ADDR, ServiceOptions, Topology, TopologyConfig, VIP,
};
use crate::netns::{have, run as run_cmd};
use anyhow::{Context, bail};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Requests per client invocation (the demo checks for Ctrl-C between).
const BATCH: u32 = 50;

#[derive(Clone, Debug)]
pub struct LiveDemoArgs {
    pub connections: u32,
    pub queries: u32,
    pub backends: usize,
    pub prefer_nginx: bool,
}

/// Why the network demo cannot run here, if it cannot.
pub fn can_run() -> Result<(), String> {
    let uid = run_cmd("id", &["-u"]).ok().and_then(|o| {
        String::from_utf8_lossy(&o.stdout)
            .trim()
            .parse::<u32>()
            .ok()
    });
    if uid != Some(0) {
        return Err("not running as root".to_owned());
    }
    if run_cmd("ip", &["netns", "list"]).is_err() {
        return Err("`ip netns` is not available (install iproute2)".to_owned());
    }
    Ok(())
}

/// One answered (or failed) request.
#[derive(Clone, Debug)]
struct Answer {
    /// `Some(backend name, address it saw)` when answered with 200.
    backend: Option<(String, String)>,
    latency: Duration,
}

/// `backend b0 saw 10.1.0.1` → (`b0`, `10.1.0.1`).
pub fn parse_body(body: &str) -> Option<(String, String)> {
    let mut words = body.split_whitespace();
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some("backend"), Some(name), Some("saw"), Some(addr)) => {
            Some((name.to_owned(), addr.to_owned()))
        }
        _ => None,
    }
}

struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    fn install() -> anyhow::Result<Self> {
        let flag = Arc::new(AtomicBool::new(false));
        for signal in [
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ] {
            signal_hook::flag::register(signal, Arc::clone(&flag))
                .context("installing the Ctrl-C handler")?;
        }
        Ok(Interrupt(flag))
    }

    fn check(&self) -> anyhow::Result<()> {
        if self.0.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        Ok(())
    }
}

pub fn run(args: &LiveDemoArgs) -> anyhow::Result<()> {
    let interrupt = Interrupt::install()?;
    let portico = std::env::current_exe().context("locating the portico binary")?;
    let started = Instant::now();
    println!("portico demo — a real gateway on veth interfaces between network namespaces");
    let result = (|| {
        let t = Topology::build(&TopologyConfig {
            backends: args.backends,
            portico,
            prefer_nginx: args.prefer_nginx,
            driver: nic_config::DriverKind::Afpacket,
        })
        .context("building the namespace topology")?;
        interrupt.check()?;
        demo(&t, args, &interrupt)
    })();
    match &result {
        Ok(()) => println!(
            "\nremoved the namespaces and processes; demo took {:.1} s",
            started.elapsed().as_secs_f64()
        ),
        Err(e) => println!("\ndemo stopped ({e:#}); removed the namespaces and processes"),
    }
    result
}

fn demo(t: &Topology, args: &LiveDemoArgs, interrupt: &Interrupt) -> anyhow::Result<()> {
    let server = match t.http_server {
        HttpServer::Nginx => "nginx",
        HttpServer::BuiltIn => "portico's built-in HTTP server",
    };
    println!(
        "  client   {} ({CLIENT_ADDR}/24, default via {NODE_ADDR})",
        t.client.name
    );
    println!(
        "  gateway  {}: outside {} / inside {}, no addresses, ip_forward=0",
        t.gateway.name, t.outside_if, t.inside_if
    );
    for b in &t.backends {
        println!(
            "  backend  {} {} {}: {server} :{BACKEND_HTTP_PORT}, udp echo :{BACKEND_UDP_PORT}",
            b.ns.name, b.name, b.addr
        );
    }
    let options = ServiceOptions::all(t);
    let gw = t
        .start_gateway(&t.config_toml(&options))
        .context("starting portico run")?;
    println!(
        "  portico run --config {} (pid {}, {} workers, af_packet)",
        gw.config_path.display(),
        gw.pid().unwrap_or(0),
        options.workers
    );
    println!(
        "  services: web tcp {VIP}:{HTTP_PORT} + NodePort {NODE_ADDR}:{NODE_PORT}, dns udp {VIP}:{DNS_PORT}; full NAT from {SNAT_ADDR}"
    );
    interrupt.check()?;

    // The first request also has the client ARP for the VIP and the
    // gateway ARP for the backend: retry until it answers.
    let first = Instant::now();
    let vip = SocketAddrV4::new(VIP, HTTP_PORT);
    let mut answered = false;
    while first.elapsed() < Duration::from_secs(20) && !answered {
        interrupt.check()?;
        answered = http(t, vip, 1)?.iter().any(|a| a.backend.is_some());
    }
    if !answered {
        bail!(
            "no HTTP answer through the VIP within 20 s; gateway log:\n{}",
            gw.log_text()
        );
    }
    println!(
        "\nfirst answer through the VIP after {:.2} s (Portico answered the client's ARP for {VIP})",
        first.elapsed().as_secs_f64()
    );

    let client = if have("curl") {
        "curl"
    } else {
        "portico tool http-get"
    };
    let half = args.connections / 2;
    let targets = [
        ("VIP", vip, args.connections - half),
        ("NodePort", SocketAddrV4::new(NODE_ADDR, NODE_PORT), half),
    ];
    let mut failed = 0;
    let mut portico_p50 = [0.0; 2];
    for (label, target, count) in targets {
        let answers = in_batches(count, interrupt, |n| http(t, target, n))?;
        println!(
            "\nHTTP via {label} {target}: {count} requests with {client}, one connection each"
        );
        let outcome = report(&answers);
        failed += outcome.failed;
        if label == "VIP" {
            portico_p50[0] = outcome.p50_ms;
        }
    }

    interrupt.check()?;
    let dns = SocketAddrV4::new(VIP, DNS_PORT);
    let answers = in_batches(args.queries, interrupt, |n| udp(t, dns, n))?;
    println!(
        "\nUDP via VIP {VIP}:{DNS_PORT}: {} queries, one socket (flow) each",
        args.queries
    );
    let outcome = report(&answers);
    failed += outcome.failed;
    portico_p50[1] = outcome.p50_ms;

    print_counters(&gw);
    let status = gw
        .stop(Duration::from_secs(10))
        .context("stopping portico run")?;
    match status {
        Some(s) if s.success() => println!("\nportico run stopped on SIGTERM ({s})"),
        Some(s) => bail!("portico run exited with {s}"),
        None => bail!("portico run did not stop within 10 s of SIGTERM"),
    }
    if failed > 0 {
        bail!("{failed} requests or queries failed");
    }
    interrupt.check()?;
    kernel_path(t, args, interrupt, portico_p50)
}

/// The same VIP requests and queries through Linux's NAT in the same
/// namespaces ([`kernel_path`](super::kernel_path)), and both p50s side by
/// side. Portico must have stopped. A kernel path that cannot be set up
/// here is said and skipped; one that loses requests fails the demo.
fn kernel_path(
    t: &Topology,
    args: &LiveDemoArgs,
    interrupt: &Interrupt,
    portico_p50: [f64; 2],
) -> anyhow::Result<()> {
    if let Some(why) = super::kernel_path::unavailable() {
        println!("\nkernel path not measured: {why}");
        return Ok(());
    }
    super::kernel_path::install(t).context("setting up the kernel path")?;
    println!(
        "\nkernel path in the same namespaces: Portico stopped; {} gets {NODE_ADDR}/24, {VIP}/32 and {SNAT_ADDR}/24, ip_forward=1, nftables DNAT in kube-proxy's shape + SNAT to {SNAT_ADDR}",
        t.gateway.name
    );
    let vip = SocketAddrV4::new(VIP, HTTP_PORT);
    let count = args.connections - args.connections / 2;
    let answers = in_batches(count, interrupt, |n| http(t, vip, n))?;
    println!("\nkernel: HTTP via VIP {vip}: {count} requests, one connection each");
    let http_outcome = report(&answers);
    let dns = SocketAddrV4::new(VIP, DNS_PORT);
    let answers = in_batches(args.queries, interrupt, |n| udp(t, dns, n))?;
    println!("\nkernel: UDP via VIP {dns}: {} queries", args.queries);
    let udp_outcome = report(&answers);
    println!("\np50 latency, ms      Portico   kernel NAT");
    for (label, mine, kernel) in [
        ("HTTP via VIP", portico_p50[0], http_outcome.p50_ms),
        ("UDP via VIP", portico_p50[1], udp_outcome.p50_ms),
    ] {
        println!("  {label:<16} {mine:>9.2} {kernel:>12.2}");
    }
    let failed = http_outcome.failed + udp_outcome.failed;
    if failed > 0 {
        bail!("{failed} requests or queries failed on the kernel path");
    }
    Ok(())
}

/// `count` requests or queries, `BATCH` per client run, checking for
/// Ctrl-C between runs.
fn in_batches(
    count: u32,
    interrupt: &Interrupt,
    mut batch: impl FnMut(u32) -> anyhow::Result<Vec<Answer>>,
) -> anyhow::Result<Vec<Answer>> {
    let mut answers = Vec::with_capacity(count as usize);
    let mut left = count;
    while left > 0 {
        interrupt.check()?;
        let n = left.min(BATCH);
        answers.extend(batch(n)?);
        left -= n;
    }
    Ok(answers)
}

fn print_counters(gw: &GatewayRun) {
    // Workers publish their counters a few times a second.
    std::thread::sleep(Duration::from_millis(500));
    match gw.stats() {
        Some(report) => {
            println!(
                "\ngateway counters (portico stats --admin-socket {}):",
                gw.socket.display()
            );
            for line in report.to_string().lines() {
                println!("  {line}");
            }
        }
        None => println!("\n(the admin socket did not answer)"),
    }
}

/// What [`report`] found in a set of answers.
struct Outcome {
    failed: usize,
    /// Median latency of the answered ones, 0 when none answered.
    p50_ms: f64,
}

/// Print the distribution and latencies.
fn report(answers: &[Answer]) -> Outcome {
    let mut hits: BTreeMap<String, u32> = BTreeMap::new();
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    let mut latencies: Vec<Duration> = Vec::new();
    let mut failed = 0;
    for a in answers {
        match &a.backend {
            Some((name, saw)) => {
                *hits.entry(name.clone()).or_default() += 1;
                *seen.entry(saw.clone()).or_default() += 1;
                latencies.push(a.latency);
            }
            None => failed += 1,
        }
    }
    let ok: u32 = hits.values().sum();
    println!("  answered {ok}, failed {failed}");
    for (name, n) in &hits {
        let pct = f64::from(*n) * 100.0 / f64::from(ok.max(1));
        let addr = name
            .strip_prefix('b')
            .and_then(|i| i.parse().ok())
            .map_or(Ipv4Addr::UNSPECIFIED, topology::backend_addr);
        println!(
            "    {name:<4} {addr:<11} {n:>6}  {pct:5.1}%  {}",
            "#".repeat((pct / 2.0) as usize)
        );
    }
    let sources: Vec<String> = seen.iter().map(|(a, n)| format!("{a} ×{n}")).collect();
    println!("  backends saw the client as: {}", sources.join(", "));
    latencies.sort();
    let pct = |p: usize| {
        latencies
            .get((latencies.len().saturating_sub(1)) * p / 100)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "  latency ms (client side, connect to last byte): p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
        pct(50),
        pct(90),
        pct(99),
        pct(100)
    );
    Outcome {
        failed,
        p50_ms: pct(50),
    }
}

/// `count` HTTP GETs from the client, one connection each.
fn http(t: &Topology, target: SocketAddrV4, count: u32) -> anyhow::Result<Vec<Answer>> {
    if !have("curl") {
        let out = t.client_tool(&[
            "http-get",
            "--target",
            &target.to_string(),
            "--count",
            &count.to_string(),
            "--timeout-ms",
            "2000",
        ])?;
        return Ok(parse_tool_lines(&out, 3));
    }
    let url = format!("http://{target}/");
    let mut args = vec![
        "-sS",
        "--max-time",
        "2",
        "-H",
        "Connection: close",
        "-w",
        "== %{http_code} %{time_total}\n",
    ];
    let urls = vec![url.as_str(); count as usize];
    args.extend(urls);
    let out = t.client_exec("curl", &args)?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut answers = Vec::new();
    let mut body = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("== ") {
            let mut f = rest.split_whitespace();
            let status = f.next().unwrap_or("000");
            let secs: f64 = f.next().and_then(|s| s.parse().ok()).unwrap_or(0.0);
            answers.push(Answer {
                backend: if status == "200" {
                    body.take().and_then(|b: String| parse_body(&b))
                } else {
                    None
                },
                latency: Duration::from_secs_f64(secs.max(0.0)),
            });
            body = None;
        } else if !line.trim().is_empty() {
            body = Some(line.to_owned());
        }
    }
    // Transfers curl never reported count as failures.
    while answers.len() < count as usize {
        answers.push(Answer {
            backend: None,
            latency: Duration::ZERO,
        });
    }
    Ok(answers)
}

/// `count` UDP queries from the client, one socket each.
fn udp(t: &Topology, target: SocketAddrV4, count: u32) -> anyhow::Result<Vec<Answer>> {
    let out = t.client_tool(&[
        "udp-query",
        "--target",
        &target.to_string(),
        "--count",
        &count.to_string(),
        "--timeout-ms",
        "1000",
    ])?;
    Ok(parse_tool_lines(&out, 2))
}

/// Lines of `portico tool http-get` (`ok STATUS MICROS BODY`, body at word
/// 3) or `udp-query` (`ok MICROS REPLY`, reply at word 2).
fn parse_tool_lines(out: &str, body_at: usize) -> Vec<Answer> {
    out.lines()
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let ok = words.first() == Some(&"ok");
            let micros: u64 = words
                .get(body_at - 1)
                .and_then(|m| m.parse().ok())
                .unwrap_or(0);
            Answer {
                backend: ok
                    .then(|| parse_body(&words.get(body_at..).unwrap_or_default().join(" ")))
                    .flatten(),
                latency: Duration::from_micros(micros),
            }
        })
        .collect()
}
