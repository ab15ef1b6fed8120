//! The rig: the topology switched between Portico and the kernel, the
//! cells (one datapath at one service count) and [`run`], which drives
//! the whole comparison.

use super::super::rules::{self, Proto, Service, ServiceSet};
use super::*;
use portico::demo::topology::{
    self, BACKEND_HTTP_PORT, DriverKind, GatewayRun, HTTP_PORT, NODE_ADDR, Topology,
    TopologyConfig, VIP,
};
use portico_netns::{Netns, Process, have, wait_until};
use std::io;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Client source address of load `index` (192.0.2.101 + index mod 150).
pub(super) fn client_addr(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 101 + (index % 150) as u8)
}

/// SNAT address of cell `index` (10.1.0.100 + index mod 150).
pub(super) fn snat_addr(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 1, 0, 100 + (index % 150) as u8)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Portico,
    Kernel(Ipv4Addr),
}

pub(super) struct Rig<'a> {
    pub(super) config: &'a CompareConfig,
    pub(super) topology: &'a Topology,
    pub(super) gateway_mac: String,
    pub(super) ticks_per_s: f64,
    pub(super) loads_started: usize,
    pub(super) cells_started: usize,
    pub(super) mode: Mode,
    pub(super) baseline_busy_per_s: f64,
    pub(super) baseline_kernel_per_s: f64,
    pub(super) baseline_softirq_per_s: f64,
    /// `--syn-flood`: spoofed SYNs per second (`None`: as fast as pktgen goes).
    pub(super) flood_rate: Option<u64>,
}

/// The figures of one load before the CPU is attached.
pub(super) struct LoadResult {
    pub(super) value: f64,
    pub(super) units: f64,
    pub(super) errors: u64,
    /// Request latency (wrk loads).
    pub(super) latency: Option<Latency>,
}

impl<'a> Rig<'a> {
    /// A rig on `topology` in Portico mode, nothing started yet.
    pub(super) fn new(
        config: &'a CompareConfig,
        topology: &'a Topology,
    ) -> Result<Rig<'a>, CompareError> {
        let gateway_mac = Topology::mac_of(&topology.gateway, &topology.outside_if)
            .map_err(io_ctx("gateway MAC"))?;
        Ok(Rig {
            config,
            topology,
            gateway_mac,
            ticks_per_s: topology::clock_ticks_per_s() as f64,
            loads_started: 0,
            cells_started: 0,
            mode: Mode::Portico,
            baseline_busy_per_s: 0.0,
            baseline_kernel_per_s: 0.0,
            baseline_softirq_per_s: 0.0,
            flood_rate: None,
        })
    }

    pub(super) fn set(&self, services: usize) -> ServiceSet {
        let backends: Vec<Ipv4Addr> = self.topology.backends.iter().map(|b| b.addr).collect();
        let to = |port: u16| backends.iter().map(|&b| (b, port)).collect::<Vec<_>>();
        ServiceSet {
            measured: vec![
                Service {
                    vip: VIP,
                    port: UDP_PORT,
                    proto: Proto::Udp,
                    syn_proxy: None,
                    endpoints: to(UDP_BACKEND_PORT),
                },
                Service {
                    vip: VIP,
                    port: HTTP_PORT,
                    proto: Proto::Tcp,
                    syn_proxy: None,
                    endpoints: to(BACKEND_HTTP_PORT),
                },
                Service {
                    vip: VIP,
                    port: IPERF_PORT,
                    proto: Proto::Tcp,
                    syn_proxy: None,
                    endpoints: backends
                        .first()
                        .map(|&b| (b, IPERF_PORT))
                        .into_iter()
                        .collect(),
                },
            ],
            services,
        }
    }

    pub(super) fn portico_config(
        &self,
        driver: PorticoDriver,
        set: &ServiceSet,
        snat: Ipv4Addr,
    ) -> String {
        let mut text = portico_config(
            driver,
            workers_for(driver, self.config.workers),
            (&self.topology.outside_if, &self.topology.inside_if),
            set,
            snat,
            &self.config.portico_dataplane,
        );
        text.push('\n');
        text.push_str(&self.config.portico_extra);
        text
    }

    pub(super) fn gw_exec(&self, cmd: &str, args: &[&str]) -> Result<(), CompareError> {
        self.topology
            .gateway
            .exec(cmd, args)
            .map(|_| ())
            .map_err(io_ctx(format!("{cmd} {}", args.join(" "))))
    }

    pub(super) fn client_exec(&self, cmd: &str, args: &[&str]) -> Result<(), CompareError> {
        self.topology
            .client
            .exec(cmd, args)
            .map(|_| ())
            .map_err(io_ctx(format!("client {cmd} {}", args.join(" "))))
    }

    /// Program `text` with `program` (one transaction) and time it,
    /// including the `ip netns exec` and process start.
    pub(super) fn load_rules(
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

    /// Switch the gateway namespace to `mode`: Portico wants no addresses
    /// and no forwarding; the kernel wants the node address outside, the
    /// cell's SNAT address inside and forwarding on.
    pub(super) fn set_mode(&mut self, mode: Mode) -> Result<(), CompareError> {
        if self.mode == mode {
            return Ok(());
        }
        let t = self.topology;
        for ifname in [&t.outside_if, &t.inside_if] {
            self.gw_exec("ip", &["addr", "flush", "dev", ifname])?;
        }
        let vip = VIP.to_string();
        match mode {
            Mode::Portico => {
                self.gw_exec("sysctl", &["-qw", "net.ipv4.ip_forward=0"])?;
                // Portico answers ARP for the VIP itself.
                let _ = t
                    .client
                    .exec_unchecked("ip", &["neigh", "del", &vip, "dev", &t.client_if]);
            }
            Mode::Kernel(snat) => {
                // The VIP lies in the client's on-link subnet and the
                // kernel's NAT answers no ARP for it (kube-proxy leaves that
                // to the network): the client reaches it at the gateway's
                // MAC through a static entry, not through whatever an
                // earlier Portico cell left in its neighbour cache.
                self.client_exec(
                    "ip",
                    &[
                        "neigh",
                        "replace",
                        &vip,
                        "lladdr",
                        &self.gateway_mac,
                        "dev",
                        &t.client_if,
                        "nud",
                        "permanent",
                    ],
                )?;
                if self.config.offloads_on {
                    // A Portico row without `gso` turned them off.
                    let portico = t.portico.to_str().unwrap_or("portico");
                    for ifname in [&t.outside_if, &t.inside_if] {
                        self.gw_exec(portico, &["tool", "offloads-on", ifname])?;
                    }
                }
                let node = format!("{NODE_ADDR}/24");
                let snat = format!("{snat}/24");
                self.gw_exec("ip", &["addr", "add", &node, "dev", &t.outside_if])?;
                self.gw_exec("ip", &["addr", "add", &snat, "dev", &t.inside_if])?;
                for key in [
                    "net.ipv4.ip_forward=1",
                    "net.ipv4.conf.all.rp_filter=0",
                    "net.ipv4.conf.default.rp_filter=0",
                ] {
                    self.gw_exec("sysctl", &["-qw", key])?;
                }
            }
        }
        self.mode = mode;
        Ok(())
    }

    /// A fresh client source address for the next load, made the default
    /// route's source.
    pub(super) fn next_client_addr(&mut self) -> Result<Ipv4Addr, CompareError> {
        let addr = client_addr(self.loads_started);
        self.loads_started += 1;
        let t = self.topology;
        let cidr = format!("{addr}/24");
        // Present already when the address pool wraps.
        let _ = t
            .client
            .exec_unchecked("ip", &["addr", "add", &cidr, "dev", &t.client_if]);
        self.client_exec(
            "ip",
            &[
                "route",
                "replace",
                "default",
                "via",
                &NODE_ADDR.to_string(),
                "src",
                &addr.to_string(),
            ],
        )?;
        Ok(addr)
    }

    pub(super) fn namespaces(&self) -> Vec<&Netns> {
        let t = self.topology;
        let mut all = vec![&t.client, &t.gateway, &t.lan];
        all.extend(t.backends.iter().map(|b| &b.ns));
        all
    }

    /// Every load of one cell, appended to `report`; a failed load is
    /// recorded and the others go on.
    pub(super) fn run_loads(
        &mut self,
        report: &mut Report,
        run: usize,
        datapath: Datapath,
        services: usize,
        gateway: Option<&GatewayRun>,
    ) {
        for &load in &self.config.loads.clone() {
            match self.run_load(load, gateway) {
                Ok((r, cpu, syn, paws)) => report.samples.push(Sample {
                    run,
                    datapath,
                    services,
                    load,
                    value: r.value,
                    units: r.units,
                    cpu,
                    syn_retransmits: syn,
                    paws_rejects: paws,
                    errors: r.errors,
                    latency: r.latency,
                }),
                Err(e) => report.failures.push(Failure {
                    run,
                    datapath,
                    services,
                    what: format!("{}: {e}", load.key()),
                }),
            }
            eprintln!(
                "compare: run {run} {} {services} services {}: {}",
                datapath.name(),
                load.key(),
                report
                    .samples
                    .last()
                    .filter(|s| s.load == load && s.run == run && s.datapath == datapath)
                    .map_or("failed".to_owned(), |s| format!(
                        "{:.2} {}{}",
                        s.value,
                        load.unit(),
                        s.latency.map_or(String::new(), |l| format!(
                            ", p50 {:.3} ms, p99 {:.3} ms, mean {:.3} ms",
                            l.p50_ms, l.p99_ms, l.mean_ms
                        ))
                    ))
            );
        }
    }

    pub(super) fn portico_cell(
        &mut self,
        report: &mut Report,
        run: usize,
        driver: PorticoDriver,
        services: usize,
    ) -> Result<(), CompareError> {
        let datapath = Datapath::Portico(driver);
        self.set_mode(Mode::Portico)?;
        let snat = snat_addr(self.cells_started);
        self.cells_started += 1;
        let set = self.set(services);
        let gw = match self
            .topology
            .start_gateway(&self.portico_config(driver, &set, snat))
        {
            Ok(gw) => gw,
            Err(e) => {
                report.failures.push(Failure {
                    run,
                    datapath,
                    services,
                    what: format!("start: {e}"),
                });
                return Ok(());
            }
        };
        self.run_loads(report, run, datapath, services, Some(&gw));
        let before = gw.stats().map_or(0, |s| s.snapshot.generation);
        let start = Instant::now();
        gw.reload(&self.portico_config(driver, &set.without_one_endpoint(), snat))
            .map_err(io_ctx("reload portico"))?;
        let bumped = wait_until(Duration::from_secs(60), || {
            gw.stats().is_some_and(|s| s.snapshot.generation > before)
        });
        let millis = start.elapsed().as_secs_f64() * 1e3;
        if bumped {
            report.updates.push(UpdateSample {
                run,
                datapath,
                services,
                millis,
            });
        } else {
            report.failures.push(Failure {
                run,
                datapath,
                services,
                what: "update: no new snapshot within 60 s".into(),
            });
        }
        let _ = gw.stop(Duration::from_secs(10));
        Ok(())
    }

    pub(super) fn kernel_cell(
        &mut self,
        report: &mut Report,
        run: usize,
        datapath: Datapath,
        services: usize,
    ) -> Result<(), CompareError> {
        let snat = snat_addr(self.cells_started);
        self.cells_started += 1;
        self.set_mode(Mode::Kernel(snat))?;
        let set = self.set(services);
        let changed = set.without_one_endpoint();
        let ipt = self.config.iptables_restore.clone();
        let (program, flag, text, changed_text) = match datapath {
            Datapath::Iptables => (
                ipt.as_str(),
                None,
                rules::iptables_restore(&set),
                rules::iptables_restore(&changed),
            ),
            _ => (
                "nft",
                Some("-f"),
                rules::nft_script(&set),
                rules::nft_script(&changed),
            ),
        };
        self.load_rules(program, flag, &text)?;
        self.run_loads(report, run, datapath, services, None);
        match self.load_rules(program, flag, &changed_text) {
            Ok(millis) => report.updates.push(UpdateSample {
                run,
                datapath,
                services,
                millis,
            }),
            Err(e) => report.failures.push(Failure {
                run,
                datapath,
                services,
                what: format!("update: {e}"),
            }),
        }
        match datapath {
            Datapath::Iptables => {
                self.load_rules(program, None, rules::iptables_empty())?;
            }
            _ => self.gw_exec("nft", &["delete", "table", "ip", rules::NFT_TABLE])?,
        }
        // Leave kernel mode so the next cell starts from the same state.
        self.set_mode(Mode::Portico)?;
        Ok(())
    }
}

/// The PIDs of the processes in `ns` (`ip netns pids`).
pub(super) fn ns_pids(ns: &Netns) -> io::Result<Vec<String>> {
    let out = portico_netns::run("ip", &["netns", "pids", &ns.name])?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect())
}

pub(super) fn stop_all(processes: Vec<Process>) {
    for mut p in processes {
        let _ = p.terminate(Duration::from_secs(5));
    }
}

/// Keep the client's and backends' kernels from answering the UDP probes.
///
/// pktgen reads and writes them on AF_PACKET (its taps see a frame before
/// the IP layer does); nothing listens on the port, so each kernel would
/// look up a socket, route and build an ICMP port unreachable for every
/// probe. Over veth that work runs in the transmitter's context (Portico's
/// worker, or the kernel NAT's softirq): up to a fifth of a worker's time.
/// So the probes are dropped at raw PREROUTING, after the taps, and any
/// other destination-unreachable error is dropped on its way out.
pub(super) fn drop_icmp_errors(ns: &Netns) -> io::Result<()> {
    ns.exec(
        "iptables",
        &["-t", "raw", "-A", "PREROUTING", "-p", "udp", "-j", "DROP"],
    )?;
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

/// The comparison's topology ([`portico::demo::topology`], nginx
/// backends; AF_XDP-ready veths when a queue-bound driver is compared),
/// with the UDP probes kept from the client's and backends' kernels.
pub(super) fn build_topology(config: &CompareConfig) -> Result<Topology, CompareError> {
    let topology = Topology::build(&TopologyConfig {
        backends: config.backends,
        portico: config.portico.clone(),
        prefer_nginx: true,
        // AF_XDP needs a queue per worker (DPDK runs as many workers)
        // and complete checksums from the peers; the other datapaths run on
        // the same topology then.
        driver: if config.drivers.iter().any(|d| d.binds_rx_queues()) {
            DriverKind::Afxdp
        } else {
            DriverKind::Afpacket
        },
    })
    .map_err(io_ctx("build topology"))?;
    if config.offloads_on {
        topology.offloads_on().map_err(io_ctx("offloads on"))?;
    }
    for &driver in &config.drivers {
        let workers = workers_for(driver, config.workers);
        if workers != config.workers {
            eprintln!(
                "compare: {} runs {workers} workers (one per queue of the gateway's veths), \
                 not --workers {}",
                Datapath::Portico(driver).name(),
                config.workers
            );
        }
    }
    if config.loads.iter().any(|l| *l != Load::Udp)
        && topology.http_server != topology::HttpServer::Nginx
    {
        return Err(CompareError::Failed(
            "nginx is not installed: the TCP loads need real nginx backends".into(),
        ));
    }
    drop_icmp_errors(&topology.client).map_err(io_ctx("client iptables"))?;
    for b in &topology.backends {
        drop_icmp_errors(&b.ns).map_err(io_ctx("backend iptables"))?;
    }
    Ok(topology)
}

/// Build the topology, run every load `runs` times, return the samples.
/// Everything is removed before it returns, also on error.
pub fn run(config: &CompareConfig) -> Result<Report, CompareError> {
    let started = Instant::now();
    let mut report = Report::default();
    let mut config = config.clone();
    config.loads.retain(|load| match load.tool() {
        Some(tool) if !have(tool) => {
            eprintln!(
                "compare: *** {tool} is not installed: load {} SKIPPED ***",
                load.key()
            );
            report
                .skipped_loads
                .push(format!("{} ({tool} missing)", load.key()));
            false
        }
        _ => true,
    });
    let topology = build_topology(&config)?;
    // iperf3's server on backend 0, for the whole comparison.
    let _iperf = match (
        config.loads.contains(&Load::Iperf),
        topology.backends.first(),
    ) {
        (true, Some(b)) => {
            // The log path names the topology's directory, so the process
            // is recognisably this comparison's.
            let log = topology.dir.path.join("iperf3.log");
            let p =
                b.ns.spawn_logged(
                    "iperf3",
                    &[
                        "-s",
                        "-B",
                        &b.addr.to_string(),
                        "-p",
                        &IPERF_PORT.to_string(),
                        "--logfile",
                        &log.to_string_lossy(),
                    ],
                    &topology.dir.path.join("iperf3.out"),
                )
                .map_err(io_ctx("iperf3 -s"))?;
            let up = wait_until(Duration::from_secs(10), || {
                b.ns.exec("ss", &["-ltnH", "sport", "=", &format!(":{IPERF_PORT}")])
                    .is_ok_and(|o| !o.stdout.is_empty())
            });
            if !up {
                return Err(CompareError::Failed("iperf3 -s did not listen".into()));
            }
            Some(p)
        }
        _ => None,
    };
    let mut rig = Rig::new(&config, &topology)?;
    for run in 0..config.runs.max(1) {
        rig.measure_baseline()?;
        report.baseline_busy_per_s.push(rig.baseline_busy_per_s);
        report.baseline_kernel_per_s.push(rig.baseline_kernel_per_s);
        report
            .baseline_softirq_per_s
            .push(rig.baseline_softirq_per_s);
        for &driver in &config.drivers {
            for &n in &config.services {
                rig.portico_cell(&mut report, run, driver, n)?;
            }
        }
        for &datapath in &config.kernel {
            for &n in &config.services {
                rig.kernel_cell(&mut report, run, datapath, n)?;
            }
        }
    }
    report.elapsed_s = started.elapsed().as_secs_f64();
    Ok(report)
}
