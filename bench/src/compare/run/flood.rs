//! `compare --syn-flood` (issue 15): real connections through the VIP
//! while `pktgen send --proto syn-flood` floods it with spoofed SYNs, for
//! each SYN defence in turn, on the comparison's topology and rule sets.
//!
//! Invariants:
//! * one topology ([`build_topology`]) and one [`Rig`] for the whole
//!   scenario; within each run the defences take turns ([`Defence::ALL`]
//!   order), each in a fresh gateway (Portico) or a fresh rule set and an
//!   emptied conntrack table (kernel), with its own SNAT address;
//! * every defence is measured the same way, in one cell: wrk
//!   (`Connection: close`, a new connection per request) without the
//!   flood, then the flood (as fast as pktgen goes unless `rate_pps`) with
//!   the same wrk run inside it, then `settle_s` without load; live flows,
//!   SNAT ports and the gateway's RSS are sampled every [`SAMPLE_EVERY`]
//!   during the flood (max kept), and before and after it;
//! * the spoofed sources are random addresses of [`FLOOD_CIDR`] (RFC 2544's
//!   benchmarking range: no namespace owns it), routed by the gateway back
//!   to the client namespace, which drops the answers (forwarding off);
//! * the backends run with `net.ipv4.tcp_syncookies=1` in every cell; the
//!   kernel cells turn ICMP redirects off in the gateway namespace (the
//!   SYNs nf_synproxy answers are routed out of the interface they came
//!   in, which would make the kernel redirect the client to the VIP) and
//!   empty its conntrack table before and after; the nf_synproxy cell also
//!   sets `nf_conntrack_tcp_loose=0` there (restored after);
//! * every process is bounded (pktgen by `--duration-s`, wrk by its own
//!   duration and a wait bound) and stopped by PID; nothing outlives
//!   [`run_syn_flood`].

use super::super::rules::{self, ServiceSet};
use super::measure::{WrkErrors, is_syn_retrans, ns_tcpext};
use super::rig::{Mode, Rig, build_topology, snat_addr};
use super::*;
use portico::demo::topology::{CLIENT_ADDR, GatewayRun, HTTP_PORT, VIP};
use portico_netns::Process;
use serde::Serialize;
use serde_json::Value;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// Where the spoofed sources come from.
pub const FLOOD_CIDR: &str = "198.18.0.0/15";
/// How often live flows, SNAT ports and RSS are sampled during the flood.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);
/// The flood starts this long before wrk (so wrk meets it at full rate).
const FLOOD_LEAD: Duration = Duration::from_secs(1);
/// nf_synproxy's options: the backends' MSS behind a 1500-byte MTU and
/// Linux's default window scale.
const SYNPROXY_MSS: u16 = 1460;
const SYNPROXY_WSCALE: u8 = 7;

/// One SYN defence under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Defence {
    /// Portico, `syn_proxy = "off"`: every SYN makes a flow and takes a
    /// SNAT port; the backends' SYN cookies.
    PorticoOff,
    /// Portico, `syn_proxy = "on"`: the gateway answers with SYN cookies.
    PorticoOn,
    /// kube-proxy's nftables shape, the backends' SYN cookies.
    KernelSyncookies,
    /// The same plus nf_synproxy in the gateway's forward hook.
    KernelSynproxy,
}

impl Defence {
    pub const ALL: [Defence; 4] = [
        Defence::PorticoOff,
        Defence::PorticoOn,
        Defence::KernelSyncookies,
        Defence::KernelSynproxy,
    ];
    pub fn key(self) -> &'static str {
        match self {
            Defence::PorticoOff => "portico-off",
            Defence::PorticoOn => "portico-on",
            Defence::KernelSyncookies => "kernel-syncookies",
            Defence::KernelSynproxy => "kernel-synproxy",
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Defence::PorticoOff => "portico (af_packet), syn_proxy off",
            Defence::PorticoOn => "portico (af_packet), syn_proxy on",
            Defence::KernelSyncookies => "kernel nftables shape, backend syncookies",
            Defence::KernelSynproxy => "kernel nftables shape + nf_synproxy",
        }
    }
    pub fn is_kernel(self) -> bool {
        matches!(self, Defence::KernelSyncookies | Defence::KernelSynproxy)
    }
}

impl FromStr for Defence {
    type Err = CompareError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Defence::ALL
            .into_iter()
            .find(|d| d.key() == s)
            .ok_or_else(|| CompareError::BadDefence(s.to_owned()))
    }
}

/// What the flood scenario does besides the comparison's settings
/// (`duration_s`, `runs`, `backends`, `workers`, `wrk_connections`).
#[derive(Clone, Debug)]
pub struct FloodConfig {
    /// Spoofed SYNs per second; as fast as pktgen goes when `None`.
    pub rate_pps: Option<u64>,
    pub defences: Vec<Defence>,
    /// Quiet time after the flood before the "after" sample.
    pub settle_s: f64,
}

/// One wrk run: new connections (= requests) per second and failures.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct WrkPhase {
    pub conn_per_s: f64,
    pub requests: u64,
    /// What wrk counts as failed. A connection whose SYN goes unanswered
    /// is not among them (wrk times out only requests it has written), so
    /// see also `syn_retransmits`.
    pub errors: WrkErrors,
    /// The client namespace's TCPSynRetrans over the run: connection
    /// attempts whose SYN (or its answer) was lost, each delayed by ≥ 1 s.
    pub syn_retransmits: u64,
}

/// What the gateway holds at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Holding {
    /// Portico's live flows, or the gateway namespace's conntrack entries.
    pub flows: u64,
    /// Portico's SNAT ports in use (kernel: `None`, one per NATed flow).
    pub snat_ports: Option<u64>,
    /// The Portico process's RSS, KiB (kernel: `None`).
    pub rss_kb: Option<u64>,
}

impl Holding {
    /// The larger of each figure.
    pub fn max(self, other: Holding) -> Holding {
        Holding {
            flows: self.flows.max(other.flows),
            snat_ports: self.snat_ports.max(other.snat_ports),
            rss_kb: self.rss_kb.max(other.rss_kb),
        }
    }
}

/// One defence in one run.
#[derive(Clone, Debug, Serialize)]
pub struct FloodSample {
    pub run: usize,
    pub defence: Defence,
    pub quiet: WrkPhase,
    pub flooded: WrkPhase,
    /// Spoofed SYNs pktgen sent, and per second.
    pub flood_sent: u64,
    pub flood_pps: f64,
    pub before: Holding,
    /// Maximum of each figure over the flood's samples.
    pub during: Holding,
    pub after: Holding,
    /// Portico: frames the kernel dropped because the outside port's RX
    /// ring was full, during the flood (`kernel_rx_drops`).
    pub rx_ring_drops: Option<u64>,
    /// Portico: SYN cookies sent and validated during the flood.
    pub syn_cookies_sent: Option<u64>,
    pub syn_cookies_validated: Option<u64>,
    /// `/proc/loadavg` (1, 5, 15 min) at the start of the cell.
    pub load_average: String,
}

impl FloodSample {
    /// Connections per second under the flood as a fraction of without.
    pub fn kept(&self) -> f64 {
        self.flooded.conn_per_s / self.quiet.conn_per_s.max(1e-9)
    }
}

/// Everything one flood scenario measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FloodReport {
    pub samples: Vec<FloodSample>,
    /// Defence cells that could not be measured, with the reason.
    pub failures: Vec<String>,
    pub elapsed_s: f64,
}

/// The Portico counters read during a flood.
struct GatewayCounters {
    rx_ring_drops: u64,
    cookies_sent: u64,
    cookies_validated: u64,
}

fn gateway_counters(gw: &GatewayRun) -> Option<GatewayCounters> {
    let s = gw.stats()?;
    Some(GatewayCounters {
        rx_ring_drops: s.ports.iter().map(|p| p.stats.kernel_rx_drops).sum(),
        cookies_sent: s.total.syn_cookies_sent,
        cookies_validated: s.total.syn_cookies_validated,
    })
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// `conntrack -C`'s answer: the entry count.
pub fn parse_conntrack_count(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

impl Rig<'_> {
    /// What the gateway holds now: Portico's gauges and RSS, or the
    /// kernel's conntrack entries.
    fn holding(&self, gw: Option<&GatewayRun>) -> Holding {
        match gw {
            Some(gw) => {
                let stats = gw.stats();
                Holding {
                    flows: stats.as_ref().map_or(0, |s| s.total.live_flows),
                    snat_ports: stats.as_ref().map(|s| s.total.snat_in_use),
                    rss_kb: gw.pid().and_then(|pid| rss_kb(pid).ok()),
                }
            }
            None => Holding {
                flows: self
                    .topology
                    .gateway
                    .exec("conntrack", &["-C"])
                    .ok()
                    .and_then(|o| parse_conntrack_count(&String::from_utf8_lossy(&o.stdout)))
                    .unwrap_or(0),
                snat_ports: None,
                rss_kb: None,
            },
        }
    }

    fn start_flood(&self) -> Result<Process, CompareError> {
        let t = self.topology;
        let pktgen = self.config.pktgen.to_string_lossy().into_owned();
        let dst = format!("{VIP}:{HTTP_PORT}");
        // Lead, wrk's whole seconds, and a second to spare.
        let duration = format!(
            "{}",
            FLOOD_LEAD.as_secs_f64() + self.config.duration_s.ceil().max(1.0) + 1.0
        );
        let mut args = vec![
            "send",
            "--iface",
            &t.client_if,
            "--dst-mac",
            &self.gateway_mac,
            "--proto",
            "syn-flood",
            "--src-cidr",
            FLOOD_CIDR,
            "--dst",
            &dst,
            "--duration-s",
            &duration,
            "--json",
        ];
        let rate = self.flood_rate.map(|r| r.to_string());
        if let Some(rate) = rate.as_deref() {
            args.extend_from_slice(&["--rate", rate]);
        }
        t.client
            .spawn(&pktgen, &args)
            .map_err(io_ctx("pktgen send --proto syn-flood"))
    }

    /// One defence's cell: quiet wrk, flooded wrk with samples, settle.
    fn flood_cell(
        &mut self,
        run: usize,
        defence: Defence,
        gw: Option<&GatewayRun>,
        settle_s: f64,
    ) -> Result<FloodSample, CompareError> {
        let load_average = load_average();
        let syn_retrans = || ns_tcpext(&self.topology.client, is_syn_retrans);
        self.next_client_addr()?;
        let retrans0 = syn_retrans();
        let (quiet, quiet_errors) =
            self.finish_wrk(self.start_wrk(self.config.wrk_connections, true)?)?;
        let retrans1 = syn_retrans();
        let before = self.holding(gw);
        let counters0 = gw.and_then(gateway_counters);
        self.next_client_addr()?;
        let flood = self.start_flood()?;
        std::thread::sleep(FLOOD_LEAD);
        let wrk = match self.start_wrk(self.config.wrk_connections, true) {
            Ok(w) => w,
            Err(e) => {
                stop_flood(flood);
                return Err(e);
            }
        };
        let mut during = Holding::default();
        let sampling = Instant::now();
        let wrk_s = Duration::from_secs_f64(self.config.duration_s.ceil().max(1.0));
        while sampling.elapsed() < wrk_s {
            during = during.max(self.holding(gw));
            std::thread::sleep(SAMPLE_EVERY);
        }
        let flooded = self.finish_wrk(wrk);
        let retrans2 = syn_retrans();
        let counters1 = gw.and_then(gateway_counters);
        let flood_out = flood
            .wait_output(Duration::from_secs_f64(self.config.duration_s + 30.0))
            .map_err(io_ctx("pktgen syn-flood"))?;
        let (flooded, flooded_errors) = flooded?;
        let v: Value = serde_json::from_slice(&flood_out.stdout).map_err(|e| {
            CompareError::Failed(format!(
                "pktgen syn-flood JSON: {e}: {}",
                String::from_utf8_lossy(&flood_out.stderr)
            ))
        })?;
        std::thread::sleep(Duration::from_secs_f64(settle_s));
        let after = self.holding(gw);
        let delta = |f: fn(&GatewayCounters) -> u64| match (&counters0, &counters1) {
            (Some(a), Some(b)) => Some(f(b).saturating_sub(f(a))),
            _ => None,
        };
        Ok(FloodSample {
            run,
            defence,
            quiet: WrkPhase {
                conn_per_s: quiet.value,
                requests: quiet.units as u64,
                errors: quiet_errors,
                syn_retransmits: retrans1.saturating_sub(retrans0),
            },
            flooded: WrkPhase {
                conn_per_s: flooded.value,
                requests: flooded.units as u64,
                errors: flooded_errors,
                syn_retransmits: retrans2.saturating_sub(retrans1),
            },
            flood_sent: v.pointer("/sent").and_then(Value::as_u64).unwrap_or(0),
            flood_pps: v
                .pointer("/sent_pps")
                .and_then(Value::as_f64)
                .unwrap_or(0.0),
            before,
            during,
            after,
            rx_ring_drops: delta(|c| c.rx_ring_drops),
            syn_cookies_sent: delta(|c| c.cookies_sent),
            syn_cookies_validated: delta(|c| c.cookies_validated),
            load_average,
        })
    }

    fn portico_flood(
        &mut self,
        run: usize,
        defence: Defence,
        settle_s: f64,
    ) -> Result<FloodSample, CompareError> {
        self.set_mode(Mode::Portico)?;
        let snat = snat_addr(self.cells_started);
        self.cells_started += 1;
        let mut set = self.set(1);
        let mode = if defence == Defence::PorticoOn {
            "on"
        } else {
            "off"
        };
        for s in set.measured.iter_mut().filter(|s| s.port == HTTP_PORT) {
            s.syn_proxy = Some(mode);
        }
        let config = format!(
            "{}\n[[route]]\ndestination = \"{FLOOD_CIDR}\"\nvia = \"{CLIENT_ADDR}\"\n",
            self.portico_config(PorticoDriver::AfPacket, &set, snat)
        );
        let gw = self
            .topology
            .start_gateway(&config)
            .map_err(io_ctx("start portico"))?;
        let sample = self.flood_cell(run, defence, Some(&gw), settle_s);
        let _ = gw.stop(Duration::from_secs(10));
        sample
    }

    fn kernel_flood(
        &mut self,
        run: usize,
        defence: Defence,
        settle_s: f64,
    ) -> Result<FloodSample, CompareError> {
        let snat = snat_addr(self.cells_started);
        self.cells_started += 1;
        self.set_mode(Mode::Kernel(snat))?;
        let set = self.set(1);
        let result = self.kernel_flood_in_mode(run, defence, settle_s, &set);
        // Leave the gateway as the next cell expects it, also on error.
        let _ = self.gw_exec("nft", &["delete", "table", "ip", rules::NFT_TABLE]);
        let _ = self.gw_exec("nft", &["delete", "table", "ip", rules::NFT_SYNPROXY_TABLE]);
        let _ = self.gw_exec("sysctl", &["-qw", "net.netfilter.nf_conntrack_tcp_loose=1"]);
        let _ = self.gw_exec("conntrack", &["-F"]);
        self.set_mode(Mode::Portico)?;
        result
    }

    fn kernel_flood_in_mode(
        &mut self,
        run: usize,
        defence: Defence,
        settle_s: f64,
        set: &ServiceSet,
    ) -> Result<FloodSample, CompareError> {
        let t = self.topology;
        let via = CLIENT_ADDR.to_string();
        self.gw_exec("ip", &["route", "replace", FLOOD_CIDR, "via", &via])?;
        for key in [
            "net.ipv4.conf.all.send_redirects=0",
            "net.ipv4.conf.default.send_redirects=0",
            &format!("net.ipv4.conf.{}.send_redirects=0", t.outside_if),
        ] {
            self.gw_exec("sysctl", &["-qw", key])?;
        }
        let _ = self.gw_exec("conntrack", &["-F"]);
        self.load_rules("nft", Some("-f"), &rules::nft_script(set))?;
        if defence == Defence::KernelSynproxy {
            self.gw_exec("sysctl", &["-qw", "net.netfilter.nf_conntrack_tcp_loose=0"])?;
            self.load_rules(
                "nft",
                Some("-f"),
                &rules::nft_synproxy_script(set, SYNPROXY_MSS, SYNPROXY_WSCALE),
            )?;
        }
        self.flood_cell(run, defence, None, settle_s)
    }
}

fn stop_flood(mut flood: Process) {
    let _ = flood.terminate(Duration::from_secs(5));
}

/// Build the topology, measure every defence `runs` times, return the
/// samples. Everything is removed before it returns, also on error.
pub fn run_syn_flood(
    config: &CompareConfig,
    flood: &FloodConfig,
) -> Result<FloodReport, CompareError> {
    let started = Instant::now();
    let mut report = FloodReport::default();
    for tool in ["wrk", "nft", "conntrack"] {
        if !portico_netns::have(tool) {
            return Err(CompareError::Failed(format!(
                "the SYN flood scenario needs {tool}"
            )));
        }
    }
    let topology = build_topology(config)?;
    if topology.http_server != portico::demo::topology::HttpServer::Nginx {
        return Err(CompareError::Failed(
            "nginx is not installed: the flood scenario needs real nginx backends".into(),
        ));
    }
    for b in &topology.backends {
        b.ns.exec("sysctl", &["-qw", "net.ipv4.tcp_syncookies=1"])
            .map_err(io_ctx("backend tcp_syncookies"))?;
    }
    let mut rig = Rig::new(config, &topology)?;
    rig.flood_rate = flood.rate_pps;
    for run in 0..config.runs.max(1) {
        for &defence in &flood.defences {
            let sample = if defence.is_kernel() {
                rig.kernel_flood(run, defence, flood.settle_s)
            } else {
                rig.portico_flood(run, defence, flood.settle_s)
            };
            match sample {
                Ok(s) => {
                    eprintln!(
                        "compare --syn-flood: run {run} {}: {:.0} conn/s quiet, {:.0} conn/s \
                         flooded ({:.0} SYN/s), {} / {} failed, {} / {} SYN retransmits, \
                         {} flows during",
                        defence.key(),
                        s.quiet.conn_per_s,
                        s.flooded.conn_per_s,
                        s.flood_pps,
                        s.quiet.errors.total(),
                        s.flooded.errors.total(),
                        s.quiet.syn_retransmits,
                        s.flooded.syn_retransmits,
                        s.during.flows
                    );
                    report.samples.push(s);
                }
                Err(e) => {
                    eprintln!("compare --syn-flood: run {run} {}: {e}", defence.key());
                    report
                        .failures
                        .push(format!("run {run} {}: {e}", defence.key()));
                }
            }
        }
    }
    report.elapsed_s = started.elapsed().as_secs_f64();
    Ok(report)
}
