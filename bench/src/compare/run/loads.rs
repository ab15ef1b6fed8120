//! The loads (UDP echoes, wrk, iperf3), each measured with the CPU it
//! cost against the idle baseline.

use super::measure::{
    OurTicks, WrkErrors, is_paws, is_syn_retrans, ns_tcpext, parse_wrk, parse_wrk_errors,
    parse_wrk_latency, pid_cpu_fields, proc_stat_ticks,
};
use super::rig::{LoadResult, Rig, ns_pids, stop_all};
use super::*;
use portico::demo::topology::{GatewayRun, HTTP_PORT, VIP};
use portico_netns::{Process, wait_until};
use serde_json::Value;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

impl Rig<'_> {
    /// The PIDs in the namespaces are listed first (those `ip` processes
    /// are reaped before this process's children's ticks are read, so they
    /// do not count).
    pub(super) fn our_ticks(&self) -> OurTicks {
        let mut per_pid = std::collections::HashMap::new();
        for ns in self.namespaces() {
            let Ok(out) = ns_pids(ns) else { continue };
            for pid in out {
                if let Some([u, s, cu, cs]) = pid_cpu_fields(&pid) {
                    per_pid.insert(pid, u + s + cu + cs);
                }
            }
        }
        let reaped_children = pid_cpu_fields("self").map_or(0, |[_, _, cu, cs]| cu + cs);
        OurTicks {
            per_pid,
            reaped_children,
        }
    }

    /// Run `f` and measure the CPU it took (machine figures baseline
    /// subtracted).
    pub(super) fn with_cpu<T>(
        &self,
        gateway: Option<&GatewayRun>,
        f: impl FnOnce() -> Result<T, CompareError>,
    ) -> Result<(T, CpuUse), CompareError> {
        let ours0 = self.our_ticks();
        let gw0 = gateway.map(GatewayRun::cpu_ticks).transpose();
        let m0 = proc_stat_ticks().map_err(io_ctx("/proc/stat"))?;
        let start = Instant::now();
        let out = f()?;
        let wall_s = start.elapsed().as_secs_f64();
        let m1 = proc_stat_ticks().map_err(io_ctx("/proc/stat"))?;
        let gw1 = gateway.map(GatewayRun::cpu_ticks).transpose();
        let ours1 = self.our_ticks();
        let secs = |ticks: u64| ticks as f64 / self.ticks_per_s;
        let less_baseline =
            |a: u64, b: u64, per_s: f64| (secs(b.saturating_sub(a)) - per_s * wall_s).max(0.0);
        let cpu = CpuUse {
            wall_s,
            gateway_s: match (gw0, gw1) {
                (Ok(Some(a)), Ok(Some(b))) => Some(secs(b.saturating_sub(a))),
                _ => None,
            },
            ours_s: secs(ours0.delta(&ours1)),
            softirq_s: less_baseline(m0.softirq, m1.softirq, self.baseline_softirq_per_s),
            machine_kernel_s: less_baseline(m0.kernel, m1.kernel, self.baseline_kernel_per_s),
            machine_busy_s: less_baseline(m0.busy, m1.busy, self.baseline_busy_per_s),
        };
        Ok((out, cpu))
    }

    /// Measure the machine's idle CPU for one load's length.
    pub(super) fn measure_baseline(&mut self) -> Result<(), CompareError> {
        self.baseline_busy_per_s = 0.0;
        self.baseline_kernel_per_s = 0.0;
        self.baseline_softirq_per_s = 0.0;
        let secs = self.config.duration_s;
        let ((), cpu) = self.with_cpu(None, || {
            std::thread::sleep(Duration::from_secs_f64(secs));
            Ok(())
        })?;
        let wall = cpu.wall_s.max(1e-3);
        self.baseline_busy_per_s = cpu.machine_busy_s / wall;
        self.baseline_kernel_per_s = cpu.machine_kernel_s / wall;
        self.baseline_softirq_per_s = cpu.softirq_s / wall;
        Ok(())
    }

    pub(super) fn run_load(
        &mut self,
        load: Load,
        gateway: Option<&GatewayRun>,
    ) -> Result<(LoadResult, CpuUse, u64, u64), CompareError> {
        let src = self.next_client_addr()?;
        let t = self.topology;
        let backends_paws =
            || -> u64 { t.backends.iter().map(|b| ns_tcpext(&b.ns, is_paws)).sum() };
        let syn0 = ns_tcpext(&t.client, is_syn_retrans);
        let paws0 = backends_paws();
        let (result, cpu) = match load {
            Load::Udp => {
                let sinks = self.start_sinks()?;
                let r = self.with_cpu(gateway, || self.udp(src));
                stop_all(sinks);
                r?
            }
            Load::NewConnections => {
                self.with_cpu(gateway, || self.wrk(self.config.wrk_connections, true))?
            }
            Load::KeepAlive => {
                self.with_cpu(gateway, || self.wrk(self.config.wrk_connections, false))?
            }
            Load::Rtt => self.with_cpu(gateway, || self.wrk(1, false))?,
            Load::Churn => {
                let high = CHURN_PORT_BASE + self.config.churn_ports.max(2) - 1;
                let range = format!("net.ipv4.ip_local_port_range={CHURN_PORT_BASE} {high}");
                self.client_exec("sysctl", &["-qw", &range])?;
                let r = self.with_cpu(gateway, || self.wrk(self.config.churn_connections, true));
                let restore = format!("net.ipv4.ip_local_port_range={DEFAULT_PORT_RANGE}");
                self.client_exec("sysctl", &["-qw", &restore])?;
                r?
            }
            Load::Iperf => self.with_cpu(gateway, || self.iperf())?,
        };
        let syn = ns_tcpext(&t.client, is_syn_retrans).saturating_sub(syn0);
        let paws = backends_paws().saturating_sub(paws0);
        Ok((result, cpu, syn, paws))
    }

    pub(super) fn udp(&self, src: Ipv4Addr) -> Result<LoadResult, CompareError> {
        let t = self.topology;
        let dst = format!("{VIP}:{UDP_PORT}");
        let duration = format!("{}", self.config.duration_s);
        let flows = self.config.flows.to_string();
        let src = src.to_string();
        let pktgen = self.config.pktgen.to_string_lossy().into_owned();
        let mut args = vec![
            "send",
            "--iface",
            &t.client_if,
            "--dst-mac",
            &self.gateway_mac,
            "--src",
            &src,
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
        let rate = self.config.udp_rate.map(|r| r.to_string());
        if let Some(rate) = rate.as_deref() {
            args.extend_from_slice(&["--rate", rate]);
        }
        let out = t
            .client
            .spawn(&pktgen, &args)
            .map_err(io_ctx("pktgen send"))?
            .wait_output(Duration::from_secs_f64(self.config.duration_s + 20.0))
            .map_err(io_ctx("pktgen send"))?;
        if !out.status.success() {
            return Err(CompareError::Failed(format!(
                "pktgen send failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let v: Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| CompareError::Failed(format!("pktgen JSON: {e}")))?;
        let num = |p: &str| v.pointer(p).and_then(Value::as_f64).unwrap_or(0.0);
        let echoes = num("/echo/received");
        Ok(LoadResult {
            value: echoes / num("/elapsed_s").max(1e-9),
            units: echoes,
            errors: num("/echo/lost") as u64,
            latency: None,
        })
    }

    pub(super) fn wrk(&self, connections: u32, close: bool) -> Result<LoadResult, CompareError> {
        self.finish_wrk(self.start_wrk(connections, close)?)
            .map(|(r, _)| r)
    }

    /// Start wrk (`--duration-s`, whole seconds) against the HTTP service
    /// from the client namespace; [`Self::finish_wrk`] reads its summary.
    pub(super) fn start_wrk(&self, connections: u32, close: bool) -> Result<Process, CompareError> {
        // wrk takes whole seconds.
        let duration = format!("{}s", self.config.duration_s.ceil().max(1.0) as u64);
        let connections = connections.max(1).to_string();
        let url = format!("http://{VIP}:{HTTP_PORT}/");
        let mut args = vec![
            "-t",
            "1",
            "-c",
            &connections,
            "-d",
            &duration,
            "--timeout",
            "2s",
            "--latency",
        ];
        if close {
            args.extend_from_slice(&["-H", "Connection: close"]);
        }
        args.push(&url);
        self.topology
            .client
            .spawn("wrk", &args)
            .map_err(io_ctx("wrk"))
    }

    /// Wait for a [`Self::start_wrk`] run (bounded) and parse its summary.
    pub(super) fn finish_wrk(&self, wrk: Process) -> Result<(LoadResult, WrkErrors), CompareError> {
        let out = wrk
            .wait_output(Duration::from_secs_f64(self.config.duration_s + 30.0))
            .map_err(io_ctx("wrk"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let (requests, per_s, errors) = parse_wrk(&text).ok_or_else(|| {
            CompareError::Failed(format!(
                "wrk: no summary in {text}{}",
                String::from_utf8_lossy(&out.stderr)
            ))
        })?;
        Ok((
            LoadResult {
                value: per_s,
                units: requests as f64,
                errors,
                latency: parse_wrk_latency(&text),
            },
            parse_wrk_errors(&text),
        ))
    }

    pub(super) fn iperf(&self) -> Result<LoadResult, CompareError> {
        let seconds = self.config.duration_s.ceil().max(1.0).to_string();
        let out = self
            .topology
            .client
            .spawn(
                "iperf3",
                &[
                    "-c",
                    &VIP.to_string(),
                    "-p",
                    &IPERF_PORT.to_string(),
                    "-t",
                    &seconds,
                    "--connect-timeout",
                    "3000",
                    "-J",
                ],
            )
            .map_err(io_ctx("iperf3"))?
            .wait_output(Duration::from_secs_f64(self.config.duration_s + 30.0))
            .map_err(io_ctx("iperf3"))?;
        let v: Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| CompareError::Failed(format!("iperf3 JSON: {e}")))?;
        if let Some(error) = v.pointer("/error").and_then(Value::as_str) {
            return Err(CompareError::Failed(format!("iperf3: {error}")));
        }
        let num = |p: &str| v.pointer(p).and_then(Value::as_f64).unwrap_or(0.0);
        Ok(LoadResult {
            value: num("/end/sum_received/bits_per_second") / 1e9,
            units: num("/end/sum_received/bytes") / (1024.0 * 1024.0),
            errors: num("/end/sum_sent/retransmits") as u64,
            latency: None,
        })
    }

    pub(super) fn start_sinks(&self) -> Result<Vec<Process>, CompareError> {
        let t = self.topology;
        let budget = format!("{}", self.config.duration_s + 30.0);
        let pktgen = self.config.pktgen.to_string_lossy().into_owned();
        let mut sinks = Vec::new();
        for b in &t.backends {
            sinks.push(
                b.ns.spawn_logged(
                    &pktgen,
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
        // Bound: a line of /proc/net/packet with a protocol and an ifindex.
        let ready = wait_until(Duration::from_secs(10), || {
            t.backends.iter().all(|b| {
                b.ns.exec("cat", &["/proc/net/packet"]).is_ok_and(|o| {
                    String::from_utf8_lossy(&o.stdout).lines().skip(1).any(|l| {
                        let f: Vec<&str> = l.split_whitespace().collect();
                        f.len() > 4 && f[3] != "0000" && f[4] != "0"
                    })
                })
            })
        });
        if !ready {
            stop_all(sinks);
            return Err(CompareError::Failed(
                "sinks did not bind their packet sockets".into(),
            ));
        }
        Ok(sinks)
    }
}
