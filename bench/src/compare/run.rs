//! One comparison run: topology, loads through each datapath, table.
//!
//! Invariants:
//! * one topology ([`portico::demo::topology`]) for the whole run; Portico
//!   runs first while the gateway namespace has no addresses and forwarding
//!   off (its invariant); the kernel runs come after, with the node and SNAT
//!   addresses on the gateway's veths and `ip_forward=1`;
//! * every measurement uses its own client source address, so no conntrack
//!   entry of an earlier run short-cuts a later run's rule lookups;
//! * the backends run `pktgen sink --echo` on their veths (af_packet) for
//!   the whole run; the measured service's backend port has no socket, and
//!   the client's and backends' kernels drop their ICMP port-unreachables,
//!   so only the sink's echoes come back;
//! * everything is bounded in time (every child has a timeout) and owned by
//!   guards: sinks and gateway stopped by PID, namespaces deleted by name.

use super::rules::{self, ServiceSet};
use portico::demo::topology::{
    self, GatewayRun, NODE_ADDR, SNAT_ADDR, Topology, TopologyConfig, VIP,
};
use portico::netns::{Netns, Process, wait_until};
use serde_json::Value;
use std::fmt::Write as _;
use std::io;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The measured service's port on the VIP, and its backends' port (nothing
/// listens there; the af_packet sink answers).
pub const MEASURED_PORT: u16 = 53;
pub const BACKEND_PORT: u16 = 9000;

#[derive(thiserror::Error, Debug)]
pub enum CompareError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("{0}")]
    Failed(String),
}

fn io_ctx(what: impl Into<String>) -> impl FnOnce(io::Error) -> CompareError {
    let what = what.into();
    move |source| CompareError::Io { what, source }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct CompareConfig {
    pub portico: PathBuf,
    pub pktgen: PathBuf,
    /// Service counts to measure at.
    pub services: Vec<usize>,
    pub duration_s: f64,
    /// Frames per second; as fast as possible when `None`.
    pub rate: Option<u64>,
    pub flows: u32,
    pub backends: usize,
    /// Portico worker threads.
    pub workers: u32,
    /// The `iptables-restore` program (`iptables-restore` is the nf_tables
    /// backend on Debian; `iptables-legacy-restore` the legacy one).
    pub iptables_restore: String,
    /// Also time programming one endpoint change at this many services.
    pub update_at: Option<usize>,
}

/// Which datapath a row measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Datapath {
    Portico,
    Iptables,
    Nftables,
}

impl Datapath {
    pub fn name(self) -> &'static str {
        match self {
            Datapath::Portico => "portico (af_packet)",
            Datapath::Iptables => "kernel, iptables shape",
            Datapath::Nftables => "kernel, nftables shape",
        }
    }
}

/// One load through one datapath.
#[derive(Clone, Debug)]
pub struct Measurement {
    pub datapath: Datapath,
    pub services: usize,
    pub sent: u64,
    pub sent_pps: f64,
    pub echoes: u64,
    /// Echoes per second of sending time.
    pub echo_pps: f64,
    pub loss_ratio: f64,
    /// Machine-wide system + irq + softirq CPU seconds over the load.
    pub kernel_cpu_s: f64,
    /// The gateway process's own CPU seconds (Portico only).
    pub gateway_cpu_s: Option<f64>,
}

/// Time to program one service change.
#[derive(Clone, Debug)]
pub struct UpdateTiming {
    pub datapath: Datapath,
    pub services: usize,
    pub millis: f64,
}

/// Everything one run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub rows: Vec<Measurement>,
    pub updates: Vec<UpdateTiming>,
}

/// Machine-wide CPU ticks: (system + irq + softirq, all).
fn proc_stat_ticks() -> io::Result<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat")?;
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| io::Error::other("no cpu line in /proc/stat"))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    Ok((at(2) + at(5) + at(6), v.iter().sum()))
}

fn client_src(run_index: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 101u8.saturating_add(run_index.min(100) as u8))
}

struct Rig<'a> {
    config: &'a CompareConfig,
    topology: &'a Topology,
    gateway_mac: String,
    ticks_per_s: f64,
    runs: usize,
}

impl Rig<'_> {
    fn set(&self, services: usize) -> ServiceSet {
        ServiceSet {
            measured_vip: VIP,
            measured_port: MEASURED_PORT,
            backends: self.topology.backends.iter().map(|b| b.addr).collect(),
            backend_port: BACKEND_PORT,
            services,
        }
    }

    fn portico_config(&self, set: &ServiceSet) -> String {
        format!(
            "# Written by portico-bench compare.\n[dataplane]\nworkers = {workers}\nidle = \"adaptive\"\n\n\
             [dataplane.conntrack]\ncapacity = 262144\n\n\
             [[port]]\nname = \"outside\"\ndriver = \"afpacket\"\ninterface = \"{outside}\"\nrole = \"outside\"\nnode_addresses = [\"{NODE_ADDR}/24\"]\n\n\
             [[port]]\nname = \"inside\"\ndriver = \"afpacket\"\ninterface = \"{inside}\"\nrole = \"inside\"\nsnat_addresses = [\"{SNAT_ADDR}/24\"]\n{services}",
            workers = self.config.workers,
            outside = self.topology.outside_if,
            inside = self.topology.inside_if,
            services = rules::portico_services(set),
        )
    }

    /// One pktgen load from a fresh client address; `gateway` is the
    /// Portico process whose CPU to count.
    fn measure(
        &mut self,
        datapath: Datapath,
        services: usize,
        gateway: Option<&GatewayRun>,
    ) -> Result<Measurement, CompareError> {
        let src = client_src(self.runs);
        self.runs += 1;
        let cidr = format!("{src}/24");
        self.topology
            .client
            .exec(
                "ip",
                &["addr", "add", &cidr, "dev", &self.topology.client_if],
            )
            .map_err(io_ctx("client address"))?;
        let dst = format!("{VIP}:{MEASURED_PORT}");
        let duration = format!("{}", self.config.duration_s);
        let flows = self.config.flows.to_string();
        let rate = self.config.rate.map(|r| r.to_string());
        let pktgen = self.config.pktgen.to_string_lossy().into_owned();
        let mut args = vec![
            "send",
            "--iface",
            &self.topology.client_if,
            "--dst-mac",
            &self.gateway_mac,
            "--src",
            "",
            "--dst",
            &dst,
            "--flows",
            &flows,
            "--duration-s",
            &duration,
            "--expect-echo",
            "--echo-wait-ms",
            "500",
            "--json",
        ];
        let src_text = src.to_string();
        if let Some(slot) = args.get_mut(6) {
            *slot = &src_text;
        }
        if let Some(rate) = rate.as_deref() {
            args.extend_from_slice(&["--rate", rate]);
        }
        let (kernel_before, _) = proc_stat_ticks().map_err(io_ctx("/proc/stat"))?;
        let gw_before = gateway.map(GatewayRun::cpu_ticks).transpose();
        let sender = self
            .topology
            .client
            .spawn(&pktgen, &args)
            .map_err(io_ctx("pktgen send"))?;
        let out = sender
            .wait_output(Duration::from_secs_f64(self.config.duration_s + 20.0))
            .map_err(io_ctx("pktgen send"))?;
        let (kernel_after, _) = proc_stat_ticks().map_err(io_ctx("/proc/stat"))?;
        let gw_after = gateway.map(GatewayRun::cpu_ticks).transpose();
        if !out.status.success() {
            return Err(CompareError::Failed(format!(
                "pktgen send failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let v: Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| CompareError::Failed(format!("pktgen JSON: {e}")))?;
        let num = |p: &str| v.pointer(p).and_then(Value::as_f64).unwrap_or(0.0);
        let elapsed = num("/elapsed_s").max(1e-9);
        let echoes = num("/echo/received") as u64;
        let gateway_cpu_s = match (gw_before, gw_after) {
            (Ok(Some(b)), Ok(Some(a))) => Some(a.saturating_sub(b) as f64 / self.ticks_per_s),
            _ => None,
        };
        Ok(Measurement {
            datapath,
            services,
            sent: num("/sent") as u64,
            sent_pps: num("/sent_pps"),
            echoes,
            echo_pps: echoes as f64 / elapsed,
            loss_ratio: num("/echo/loss_ratio"),
            kernel_cpu_s: kernel_after.saturating_sub(kernel_before) as f64 / self.ticks_per_s,
            gateway_cpu_s,
        })
    }

    fn gw_exec(&self, cmd: &str, args: &[&str]) -> Result<(), CompareError> {
        self.topology
            .gateway
            .exec(cmd, args)
            .map(|_| ())
            .map_err(io_ctx(format!("{cmd} {}", args.join(" "))))
    }

    fn load_file(
        &self,
        program: &str,
        flag: Option<&str>,
        text: &str,
    ) -> Result<f64, CompareError> {
        let path = self.topology.dir.path.join(format!("{program}.rules"));
        std::fs::write(&path, text).map_err(io_ctx("write rules"))?;
        let path = path.to_string_lossy().into_owned();
        let mut args: Vec<&str> = flag.into_iter().collect();
        args.push(&path);
        let start = Instant::now();
        self.gw_exec(program, &args)?;
        Ok(start.elapsed().as_secs_f64() * 1e3)
    }

    fn kernel_mode(&self) -> Result<(), CompareError> {
        let t = self.topology;
        self.gw_exec(
            "ip",
            &[
                "addr",
                "add",
                &format!("{NODE_ADDR}/24"),
                "dev",
                &t.outside_if,
            ],
        )?;
        self.gw_exec(
            "ip",
            &[
                "addr",
                "add",
                &format!("{SNAT_ADDR}/24"),
                "dev",
                &t.inside_if,
            ],
        )?;
        for key in [
            "net.ipv4.ip_forward=1",
            "net.ipv4.conf.all.rp_filter=0",
            "net.ipv4.conf.default.rp_filter=0",
        ] {
            self.gw_exec("sysctl", &["-qw", key])?;
        }
        Ok(())
    }
}

/// Drop ICMP errors the kernel would send for the probes nobody listens to.
fn drop_icmp_errors(ns: &Netns) -> io::Result<()> {
    ns.exec(
        "iptables",
        &[
            "-A",
            "OUTPUT",
            "-p",
            "icmp",
            "--icmp-type",
            "destination-unreachable",
            "-j",
            "DROP",
        ],
    )
    .map(|_| ())
}

fn start_sinks(t: &Topology, pktgen: &str, budget_s: f64) -> Result<Vec<Process>, CompareError> {
    let mut sinks = Vec::new();
    let budget = format!("{budget_s}");
    for b in &t.backends {
        drop_icmp_errors(&b.ns).map_err(io_ctx("backend iptables"))?;
        sinks.push(
            b.ns.spawn_logged(
                pktgen,
                &[
                    "sink",
                    "--iface",
                    &b.ifname,
                    "--echo",
                    "--duration-s",
                    &budget,
                    "--json",
                ],
                &t.dir.path.join(format!("{}-sink.log", b.name)),
            )
            .map_err(io_ctx("pktgen sink"))?,
        );
    }
    let ready = wait_until(Duration::from_secs(5), || {
        t.backends.iter().all(|b| {
            b.ns.exec("cat", &["/proc/net/packet"])
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).lines().count() > 1)
        })
    });
    if !ready {
        return Err(CompareError::Failed(
            "sinks did not open their packet sockets".into(),
        ));
    }
    Ok(sinks)
}

/// Build the topology, run every load, return the figures. Everything is
/// removed before it returns.
pub fn run(config: &CompareConfig) -> Result<Report, CompareError> {
    let topology = Topology::build(&TopologyConfig {
        backends: config.backends,
        portico: config.portico.clone(),
        prefer_nginx: false,
        driver: portico::demo::topology::DriverKind::Afpacket,
    })
    .map_err(io_ctx("build topology"))?;
    drop_icmp_errors(&topology.client).map_err(io_ctx("client iptables"))?;
    let per_run_s = config.duration_s + 15.0;
    let budget_s = per_run_s * (3 * config.services.len() + 3) as f64 + 60.0;
    let pktgen = config.pktgen.to_string_lossy().into_owned();
    let _sinks = start_sinks(&topology, &pktgen, budget_s)?;
    let gateway_mac =
        Topology::mac_of(&topology.gateway, &topology.outside_if).map_err(io_ctx("gateway MAC"))?;
    let mut rig = Rig {
        config,
        topology: &topology,
        gateway_mac,
        ticks_per_s: topology::clock_ticks_per_s() as f64,
        runs: 0,
    };
    let mut report = Report::default();

    // 1. Portico.
    for &n in &config.services {
        let set = rig.set(n);
        let gw = topology
            .start_gateway(&rig.portico_config(&set))
            .map_err(io_ctx("start portico"))?;
        report
            .rows
            .push(rig.measure(Datapath::Portico, n, Some(&gw))?);
        if config.update_at == Some(n) {
            let before = gw.stats().map_or(0, |s| s.snapshot.generation);
            let mut changed = set.clone();
            changed.backends.truncate(changed.backends.len().max(2) - 1);
            let start = Instant::now();
            gw.reload(&rig.portico_config(&changed))
                .map_err(io_ctx("reload portico"))?;
            let bumped = wait_until(Duration::from_secs(30), || {
                gw.stats().is_some_and(|s| s.snapshot.generation > before)
            });
            if bumped {
                report.updates.push(UpdateTiming {
                    datapath: Datapath::Portico,
                    services: n,
                    millis: start.elapsed().as_secs_f64() * 1e3,
                });
            }
        }
        let _ = gw.stop(Duration::from_secs(5));
    }

    // 2. and 3. The kernel.
    rig.kernel_mode()?;
    let ipt = config.iptables_restore.as_str();
    for &n in &config.services {
        let set = rig.set(n);
        rig.load_file(ipt, None, &rules::iptables_restore(&set))?;
        report.rows.push(rig.measure(Datapath::Iptables, n, None)?);
        if config.update_at == Some(n) {
            let mut changed = set.clone();
            changed.backends.truncate(changed.backends.len().max(2) - 1);
            let millis = rig.load_file(ipt, None, &rules::iptables_restore(&changed))?;
            report.updates.push(UpdateTiming {
                datapath: Datapath::Iptables,
                services: n,
                millis,
            });
        }
        rig.load_file(ipt, None, rules::iptables_empty())?;
    }
    for &n in &config.services {
        let set = rig.set(n);
        rig.load_file("nft", Some("-f"), &rules::nft_script(&set))?;
        report.rows.push(rig.measure(Datapath::Nftables, n, None)?);
        if config.update_at == Some(n) {
            let mut changed = set.clone();
            changed.backends.truncate(changed.backends.len().max(2) - 1);
            let millis = rig.load_file("nft", Some("-f"), &rules::nft_script(&changed))?;
            report.updates.push(UpdateTiming {
                datapath: Datapath::Nftables,
                services: n,
                millis,
            });
        }
        rig.gw_exec("nft", &["delete", "table", "ip", rules::NFT_TABLE])?;
    }
    Ok(report)
}

fn ratio(x: f64, base: Option<f64>) -> String {
    match base {
        Some(b) if b > 0.0 => format!("{:.2}×", x / b),
        _ => "–".into(),
    }
}

/// The markdown table: every figure also as a ratio to the iptables row
/// at the same service count.
pub fn markdown(report: &Report) -> String {
    let mut out = String::from(
        "| services | datapath | sent pps | echoes/s | × iptables | loss | machine sys+irq+softirq µs/echo | × iptables | gateway process µs/echo |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let per_echo = |m: &Measurement, cpu_s: f64| cpu_s * 1e6 / (m.echoes.max(1) as f64);
    for m in &report.rows {
        let base = report
            .rows
            .iter()
            .find(|b| b.services == m.services && b.datapath == Datapath::Iptables);
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {:.0} | {} | {:.2} % | {:.2} | {} | {} |",
            m.services,
            m.datapath.name(),
            m.sent_pps,
            m.echo_pps,
            ratio(m.echo_pps, base.map(|b| b.echo_pps)),
            m.loss_ratio * 100.0,
            per_echo(m, m.kernel_cpu_s),
            ratio(
                per_echo(m, m.kernel_cpu_s),
                base.map(|b| per_echo(b, b.kernel_cpu_s))
            ),
            m.gateway_cpu_s
                .map_or("–".into(), |c| format!("{:.2}", per_echo(m, c))),
        );
    }
    if !report.updates.is_empty() {
        out.push_str(
            "\n| services | datapath | program one endpoint removal (ms) | × iptables |\n|---:|---|---:|---:|\n",
        );
        for u in &report.updates {
            let base = report
                .updates
                .iter()
                .find(|b| b.services == u.services && b.datapath == Datapath::Iptables)
                .map(|b| b.millis);
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {} |",
                u.services,
                u.datapath.name(),
                u.millis,
                ratio(u.millis, base)
            );
        }
    }
    out
}
