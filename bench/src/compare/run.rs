//! One comparison: topology, every load through every datapath at every
//! service count, `runs` times, and the raw samples.
//!
//! Invariants:
//! * one topology ([`portico::demo::topology`], nginx backends) for the whole
//!   comparison; within each run the datapaths take turns (every Portico
//!   driver, then the iptables shape, then the nftables shape), each at
//!   every service count, so a run's figures share the machine's state;
//! * Portico rows per driver (`afpacket`, `afxdp`, `dpdk` on
//!   [`DPDK_DEVICE`] vdevs): when a queue-bound driver (afxdp, dpdk) is among them, the
//!   topology gives the gateway's veths [`AFXDP_QUEUES`] queues and the
//!   peers send complete checksums (TX checksum offload off), for every
//!   row alike; those rows run one worker per queue, the af_packet row
//!   `--workers` (pass `--workers 2` for equal rows). The `dpdk` row needs a `portico` built with the feature
//!   `dpdk` (portico-bench's feature of that name); otherwise its start
//!   fails and is reported as not measured;
//! * Portico runs while the gateway namespace has no addresses and
//!   forwarding off (its invariant); the kernel runs with the node and SNAT
//!   addresses on the gateway's veths and `ip_forward=1`; the rig switches
//!   between the two modes and back;
//! * every load uses its own client source address (a secondary address
//!   made the default route's `src`) and every cell (run × datapath ×
//!   service count) its own SNAT address, so no conntrack entry or backend
//!   TIME_WAIT socket of an earlier load short-cuts or disturbs a later one;
//! * UDP goes to `pktgen sink --echo` on the backends' veths (af_packet;
//!   nothing listens on the port and the kernels' ICMP errors are dropped),
//!   TCP to real nginx (HTTP, wrk) and iperf3 (one endpoint, since iperf3's
//!   control and data connections must meet the same server);
//! * CPU is read from `/proc/stat` (machine-wide) and `/proc/PID/stat`
//!   (the gateway process) right before and after each load; an idle
//!   baseline of the same length is measured at the start of every run and
//!   subtracted (see [`CpuUse`]);
//! * everything is bounded in time (every child has a timeout) and owned by
//!   guards: loads, sinks, servers and gateways are stopped by PID,
//!   namespaces deleted by name, also when a load fails.

use super::rules::{self, Proto, Service, ServiceSet};
use portico::demo::topology::{
    self, AFXDP_QUEUES, BACKEND_HTTP_PORT, DriverKind, GatewayRun, HTTP_PORT, NODE_ADDR, Topology,
    TopologyConfig, VIP,
};
use portico_netns::{Netns, Process, have, wait_until};
use serde::Serialize;
use serde_json::Value;
use std::io;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// The UDP service's port on the VIP, and its backends' port (nothing
/// listens there; the af_packet sink answers).
pub const UDP_PORT: u16 = 53;
pub const UDP_BACKEND_PORT: u16 = 9000;
/// iperf3's service port (VIP and backend 0).
pub const IPERF_PORT: u16 = 5201;
/// The client's default ephemeral port range, restored after the churn load.
const DEFAULT_PORT_RANGE: &str = "32768 60999";
/// First port of the churn load's narrow ephemeral range.
const CHURN_PORT_BASE: u32 = 41_000;

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
    #[error("unknown Portico driver {0:?} (want afpacket, afxdp or dpdk)")]
    BadDriver(String),
    #[error("unknown load {0:?} (want udp, conn, keepalive, churn or iperf)")]
    BadLoad(String),
}

fn io_ctx(what: impl Into<String>) -> impl FnOnce(io::Error) -> CompareError {
    let what = what.into();
    move |source| CompareError::Io { what, source }
}

/// Which Portico driver a Portico row uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum PorticoDriver {
    AfPacket,
    AfXdp,
    Dpdk,
}

impl PorticoDriver {
    /// The `driver` value of a `[[port]]` table.
    pub fn config_name(self) -> &'static str {
        match self {
            PorticoDriver::AfPacket => "afpacket",
            PorticoDriver::AfXdp => "afxdp",
            PorticoDriver::Dpdk => "dpdk",
        }
    }

    /// Whether the driver reads the gateway's veths below the kernel's
    /// stack (AF_XDP's redirect program; DPDK's PMDs), so the topology needs
    /// TX checksum offload off on the peers (such frames carry no "checksum
    /// partial" mark) and [`AFXDP_QUEUES`] queues, and the row runs one
    /// worker per queue (AF_XDP must; DPDK does so to match it).
    pub fn binds_rx_queues(self) -> bool {
        matches!(self, PorticoDriver::AfXdp | PorticoDriver::Dpdk)
    }
}

/// DPDK rows: the EAL on ordinary pages (`--no-huge`), each gateway veth a
/// [`DPDK_DEVICE`] vdev with one queue pair per worker.
pub const DPDK_MEMORY_MB: u32 = 256;
/// `net_af_packet`, not `net_af_xdp`: DPDK 22.11's af_xdp PMD sizes its
/// queues by the interface's *combined* channels, which veth does not
/// report (it has separate rx/tx counts), so it refuses `queue_count=2`
/// ("Specified queue count 2 is larger than combined queue count 1"); with
/// one queue, the flows the peer hashes onto veth queue 1 would pass to
/// the gateway's kernel and be lost.
pub const DPDK_DEVICE: &str = "net_af_packet";

impl FromStr for PorticoDriver {
    type Err = CompareError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "afpacket" => Ok(PorticoDriver::AfPacket),
            "afxdp" => Ok(PorticoDriver::AfXdp),
            "dpdk" => Ok(PorticoDriver::Dpdk),
            other => Err(CompareError::BadDriver(other.to_owned())),
        }
    }
}

/// Which datapath a sample measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Datapath {
    Portico(PorticoDriver),
    Iptables,
    Nftables,
}

impl Datapath {
    pub fn name(self) -> &'static str {
        match self {
            Datapath::Portico(PorticoDriver::AfPacket) => "portico (af_packet)",
            Datapath::Portico(PorticoDriver::AfXdp) => "portico (AF_XDP)",
            Datapath::Portico(PorticoDriver::Dpdk) => "portico (DPDK)",
            Datapath::Iptables => "kernel, iptables shape",
            Datapath::Nftables => "kernel, nftables shape",
        }
    }
    pub fn is_kernel(self) -> bool {
        matches!(self, Datapath::Iptables | Datapath::Nftables)
    }
}

/// The loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Load {
    /// pktgen UDP probes echoed by af_packet sinks: echoes per second.
    Udp,
    /// wrk with `Connection: close`: new TCP connections (= requests) per s.
    NewConnections,
    /// wrk over keep-alive connections: HTTP requests per second.
    KeepAlive,
    /// wrk with `Connection: close` from a narrow ephemeral port range, so
    /// client tuples come back while their last connection's state lingers.
    Churn,
    /// iperf3, one TCP flow: Gbit/s.
    Iperf,
}

impl Load {
    pub const ALL: [Load; 5] = [
        Load::Udp,
        Load::NewConnections,
        Load::KeepAlive,
        Load::Churn,
        Load::Iperf,
    ];
    /// The command-line name.
    pub fn key(self) -> &'static str {
        match self {
            Load::Udp => "udp",
            Load::NewConnections => "conn",
            Load::KeepAlive => "keepalive",
            Load::Churn => "churn",
            Load::Iperf => "iperf",
        }
    }
    pub fn title(self) -> &'static str {
        match self {
            Load::Udp => "UDP echoes (pktgen)",
            Load::NewConnections => "new TCP connections (wrk, Connection: close)",
            Load::KeepAlive => "keep-alive HTTP requests (wrk)",
            Load::Churn => "connection churn (wrk, Connection: close, narrow port range)",
            Load::Iperf => "single-flow TCP throughput (iperf3)",
        }
    }
    /// Unit of the figure.
    pub fn unit(self) -> &'static str {
        match self {
            Load::Udp => "echoes/s",
            Load::NewConnections => "conn/s",
            Load::KeepAlive | Load::Churn => "req/s",
            Load::Iperf => "Gbit/s",
        }
    }
    /// What the CPU is divided by.
    pub fn per(self) -> &'static str {
        match self {
            Load::Udp => "echo",
            Load::NewConnections => "connection",
            Load::KeepAlive | Load::Churn => "request",
            Load::Iperf => "MiB",
        }
    }
    /// The program the load needs, if not pktgen.
    fn tool(self) -> Option<&'static str> {
        match self {
            Load::Udp => None,
            Load::NewConnections | Load::KeepAlive | Load::Churn => Some("wrk"),
            Load::Iperf => Some("iperf3"),
        }
    }
}

impl FromStr for Load {
    type Err = CompareError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Load::ALL
            .into_iter()
            .find(|l| l.key() == s)
            .ok_or_else(|| CompareError::BadLoad(s.to_owned()))
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct CompareConfig {
    pub portico: PathBuf,
    pub pktgen: PathBuf,
    /// Service counts to measure at.
    pub services: Vec<usize>,
    /// Repetitions of the whole sequence.
    pub runs: usize,
    /// Length of every load (and of the idle baseline), in seconds.
    pub duration_s: f64,
    /// UDP frames per second; as fast as possible when `None`.
    pub udp_rate: Option<u64>,
    /// Distinct UDP 5-tuples.
    pub flows: u32,
    pub backends: usize,
    /// Portico worker threads.
    pub workers: u32,
    /// One Portico row per driver.
    pub drivers: Vec<PorticoDriver>,
    pub loads: Vec<Load>,
    /// wrk connections of the connection, keep-alive and churn loads.
    pub wrk_connections: u32,
    pub churn_connections: u32,
    /// Ephemeral ports the churn load's client may use.
    pub churn_ports: u32,
    /// The `iptables-restore` program (`iptables-restore` is the nf_tables
    /// backend on Debian; `iptables-legacy-restore` the legacy one).
    pub iptables_restore: String,
}

/// CPU used during one load, machine figures baseline-subtracted (never
/// below zero).
///
/// * `gateway_s`: the Portico process's utime + stime (it polls, so its
///   idle spinning counts too); `None` for the kernel datapaths;
/// * `ours_s`: utime + stime of every process of the comparison: those
///   living in its namespaces (gateway, nginx, iperf3 server, sinks) and the
///   finished load generators (wrk, iperf3, pktgen: reaped children of this
///   process). Exact whatever else the machine runs; the kernel datapath's
///   forwarding and NAT, done in softirq on the sender's CPU, lands here as
///   the generators' system time unless the kernel accounts irq time apart;
/// * `softirq_s`: machine-wide irq + softirq (that separately accounted
///   part);
/// * `machine_kernel_s`: machine-wide system + irq + softirq — where the
///   kernel datapath's work is counted, but also every other process's
///   system time (other builds on a shared machine);
/// * `machine_busy_s`: machine-wide user + nice + system + irq + softirq.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct CpuUse {
    pub wall_s: f64,
    pub gateway_s: Option<f64>,
    pub ours_s: f64,
    pub softirq_s: f64,
    pub machine_kernel_s: f64,
    pub machine_busy_s: f64,
}

impl CpuUse {
    /// The whole rig's CPU for the load: its processes plus the
    /// separately accounted irq/softirq time.
    pub fn rig_s(&self) -> f64 {
        self.ours_s + self.softirq_s
    }
}

/// One load through one datapath in one run.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    pub run: usize,
    pub datapath: Datapath,
    pub services: usize,
    pub load: Load,
    /// The figure, in [`Load::unit`].
    pub value: f64,
    /// How many of [`Load::per`] the load completed (CPU is divided by it).
    pub units: f64,
    pub cpu: CpuUse,
    /// Client TCPSynRetrans over the load (TCP loads).
    pub syn_retransmits: u64,
    /// Backends' TcpExt PAWS* counters summed over the load (TCP loads).
    pub paws_rejects: u64,
    /// Failed requests / socket errors (wrk), lost echoes (UDP),
    /// retransmitted segments (iperf3).
    pub errors: u64,
}

/// Time to program a one-endpoint change.
#[derive(Clone, Debug, Serialize)]
pub struct UpdateSample {
    pub run: usize,
    pub datapath: Datapath,
    pub services: usize,
    pub millis: f64,
}

/// Something that could not be measured (the comparison goes on).
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    pub run: usize,
    pub datapath: Datapath,
    pub services: usize,
    pub what: String,
}

/// Everything one comparison measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub samples: Vec<Sample>,
    pub updates: Vec<UpdateSample>,
    pub failures: Vec<Failure>,
    /// Loads dropped because their program is missing.
    pub skipped_loads: Vec<String>,
    /// Idle baseline per run: machine busy and kernel CPU seconds per second.
    pub baseline_busy_per_s: Vec<f64>,
    pub baseline_kernel_per_s: Vec<f64>,
    pub baseline_softirq_per_s: Vec<f64>,
    pub elapsed_s: f64,
}

/// Machine-wide CPU ticks — see [`CpuUse`].
#[derive(Clone, Copy, Debug, Default)]
struct MachineTicks {
    busy: u64,
    kernel: u64,
    softirq: u64,
}

fn proc_stat_ticks() -> io::Result<MachineTicks> {
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
    let softirq = at(5) + at(6);
    let kernel = at(2) + softirq;
    Ok(MachineTicks {
        busy: at(0) + at(1) + kernel,
        kernel,
        softirq,
    })
}

/// Fields 14.. of `/proc/PID/stat` (utime, stime, cutime, cstime), or
/// `None` when the process is gone.
fn pid_cpu_fields(pid: &str) -> Option<[u64; 4]> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces: split after ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11) // fields 3..=13
        .take(4)
        .filter_map(|v| v.parse().ok())
        .collect();
    Some([*f.first()?, *f.get(1)?, *f.get(2)?, *f.get(3)?])
}

/// CPU ticks of the comparison's own processes: per PID in its namespaces
/// (utime + stime + their reaped children's), and this process's reaped
/// children (cutime + cstime).
#[derive(Clone, Debug, Default)]
struct OurTicks {
    per_pid: std::collections::HashMap<String, u64>,
    reaped_children: u64,
}

impl OurTicks {
    /// Ticks between `self` (before) and `after`; a process that started
    /// in between counts whole.
    fn delta(&self, after: &OurTicks) -> u64 {
        let live: u64 = after
            .per_pid
            .iter()
            .map(|(pid, &t)| t.saturating_sub(self.per_pid.get(pid).copied().unwrap_or(0)))
            .sum();
        live + after.reaped_children.saturating_sub(self.reaped_children)
    }
}

/// A TcpExt counter table (`/proc/net/netstat` read inside a namespace):
/// the value of every counter whose name satisfies `want`, summed.
pub fn tcpext_sum(netstat: &str, want: impl Fn(&str) -> bool) -> u64 {
    let mut lines = netstat.lines();
    let mut sum = 0;
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let (Some(("TcpExt", names)), Some(("TcpExt", values))) =
            (names.split_once(": "), values.split_once(": "))
        else {
            continue;
        };
        for (name, value) in names.split_whitespace().zip(values.split_whitespace()) {
            if want(name) {
                sum += value.parse::<u64>().unwrap_or(0);
            }
        }
    }
    sum
}

fn ns_tcpext(ns: &Netns, want: impl Fn(&str) -> bool) -> u64 {
    ns.exec("cat", &["/proc/net/netstat"])
        .map(|o| tcpext_sum(&String::from_utf8_lossy(&o.stdout), want))
        .unwrap_or(0)
}

fn is_syn_retrans(name: &str) -> bool {
    name == "TCPSynRetrans"
}

fn is_paws(name: &str) -> bool {
    name.starts_with("PAWS")
}

/// wrk's summary: (requests, requests/s, errors).
pub fn parse_wrk(text: &str) -> Option<(u64, f64, u64)> {
    let requests = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())?;
    let per_s = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())?;
    // "Socket errors: connect 0, read 1, write 0, timeout 2" and
    // "Non-2xx or 3xx responses: 3".
    let mut errors = 0;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Socket errors:") {
            errors += rest
                .split(',')
                .filter_map(|part| part.split_whitespace().nth(1))
                .filter_map(|n| n.parse::<u64>().ok())
                .sum::<u64>();
        } else if let Some(rest) = line.strip_prefix("Non-2xx or 3xx responses:") {
            errors += rest.trim().parse::<u64>().unwrap_or(0);
        }
    }
    Some((requests, per_s, errors))
}

/// The gateway's configuration of a `driver` row: `workers` workers, the
/// (outside, inside) interfaces, the services of `set`, the cell's SNAT
/// address; DPDK rows also get the `[dpdk]` section and a [`DPDK_DEVICE`]
/// vdev per port.
pub fn portico_config(
    driver: PorticoDriver,
    workers: u32,
    (outside, inside): (&str, &str),
    set: &ServiceSet,
    snat: Ipv4Addr,
) -> String {
    let (device, dpdk) = if driver == PorticoDriver::Dpdk {
        (
            format!("dpdk_device = \"{DPDK_DEVICE}\"\n"),
            format!("\n[dpdk]\nmemory_mb = {DPDK_MEMORY_MB}\n"),
        )
    } else {
        (String::new(), String::new())
    };
    format!(
        "# Written by portico-bench compare.\n[dataplane]\nworkers = {workers}\nidle = \"adaptive\"\n\
         maglev_table_size = 1021\n\n\
         [dataplane.conntrack]\ncapacity = 262144\n\n\
         [[port]]\nname = \"outside\"\ndriver = \"{driver}\"\ninterface = \"{outside}\"\nrole = \"outside\"\nnode_addresses = [\"{NODE_ADDR}/24\"]\n{device}\n\
         [[port]]\nname = \"inside\"\ndriver = \"{driver}\"\ninterface = \"{inside}\"\nrole = \"inside\"\nsnat_addresses = [\"{snat}/24\"]\n{device}{services}{dpdk}",
        driver = driver.config_name(),
        services = rules::portico_services(set),
    )
}

/// Worker threads of a `driver` row: `configured`, except for drivers that
/// bind every RX queue of the gateway's veths, which run one worker per
/// queue ([`AFXDP_QUEUES`]).
pub fn workers_for(driver: PorticoDriver, configured: u32) -> u32 {
    if driver.binds_rx_queues() {
        AFXDP_QUEUES
    } else {
        configured
    }
}

/// Client source address of load `index` (192.0.2.101 + index mod 150).
fn client_addr(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 101 + (index % 150) as u8)
}

/// SNAT address of cell `index` (10.1.0.100 + index mod 150).
fn snat_addr(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 1, 0, 100 + (index % 150) as u8)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Portico,
    Kernel(Ipv4Addr),
}

struct Rig<'a> {
    config: &'a CompareConfig,
    topology: &'a Topology,
    gateway_mac: String,
    ticks_per_s: f64,
    loads_started: usize,
    cells_started: usize,
    mode: Mode,
    baseline_busy_per_s: f64,
    baseline_kernel_per_s: f64,
    baseline_softirq_per_s: f64,
}

/// The figures of one load before the CPU is attached.
struct LoadResult {
    value: f64,
    units: f64,
    errors: u64,
}

impl Rig<'_> {
    fn set(&self, services: usize) -> ServiceSet {
        let backends: Vec<Ipv4Addr> = self.topology.backends.iter().map(|b| b.addr).collect();
        let to = |port: u16| backends.iter().map(|&b| (b, port)).collect::<Vec<_>>();
        ServiceSet {
            measured: vec![
                Service {
                    vip: VIP,
                    port: UDP_PORT,
                    proto: Proto::Udp,
                    endpoints: to(UDP_BACKEND_PORT),
                },
                Service {
                    vip: VIP,
                    port: HTTP_PORT,
                    proto: Proto::Tcp,
                    endpoints: to(BACKEND_HTTP_PORT),
                },
                Service {
                    vip: VIP,
                    port: IPERF_PORT,
                    proto: Proto::Tcp,
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

    fn portico_config(&self, driver: PorticoDriver, set: &ServiceSet, snat: Ipv4Addr) -> String {
        portico_config(
            driver,
            workers_for(driver, self.config.workers),
            (&self.topology.outside_if, &self.topology.inside_if),
            set,
            snat,
        )
    }

    fn gw_exec(&self, cmd: &str, args: &[&str]) -> Result<(), CompareError> {
        self.topology
            .gateway
            .exec(cmd, args)
            .map(|_| ())
            .map_err(io_ctx(format!("{cmd} {}", args.join(" "))))
    }

    fn client_exec(&self, cmd: &str, args: &[&str]) -> Result<(), CompareError> {
        self.topology
            .client
            .exec(cmd, args)
            .map(|_| ())
            .map_err(io_ctx(format!("client {cmd} {}", args.join(" "))))
    }

    /// Program `text` with `program` (one transaction) and time it,
    /// including the `ip netns exec` and process start.
    fn load_rules(
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
    fn set_mode(&mut self, mode: Mode) -> Result<(), CompareError> {
        if self.mode == mode {
            return Ok(());
        }
        let t = self.topology;
        for ifname in [&t.outside_if, &t.inside_if] {
            self.gw_exec("ip", &["addr", "flush", "dev", ifname])?;
        }
        match mode {
            Mode::Portico => self.gw_exec("sysctl", &["-qw", "net.ipv4.ip_forward=0"])?,
            Mode::Kernel(snat) => {
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
    fn next_client_addr(&mut self) -> Result<Ipv4Addr, CompareError> {
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

    fn namespaces(&self) -> Vec<&Netns> {
        let t = self.topology;
        let mut all = vec![&t.client, &t.gateway, &t.lan];
        all.extend(t.backends.iter().map(|b| &b.ns));
        all
    }

    /// The PIDs in the namespaces are listed first (those `ip` processes
    /// are reaped before this process's children's ticks are read, so they
    /// do not count).
    fn our_ticks(&self) -> OurTicks {
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
    fn with_cpu<T>(
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
    fn measure_baseline(&mut self) -> Result<(), CompareError> {
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

    fn run_load(
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

    fn udp(&self, src: Ipv4Addr) -> Result<LoadResult, CompareError> {
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
        })
    }

    fn wrk(&self, connections: u32, close: bool) -> Result<LoadResult, CompareError> {
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
        ];
        if close {
            args.extend_from_slice(&["-H", "Connection: close"]);
        }
        args.push(&url);
        let out = self
            .topology
            .client
            .spawn("wrk", &args)
            .map_err(io_ctx("wrk"))?
            .wait_output(Duration::from_secs_f64(self.config.duration_s + 30.0))
            .map_err(io_ctx("wrk"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let (requests, per_s, errors) = parse_wrk(&text).ok_or_else(|| {
            CompareError::Failed(format!(
                "wrk: no summary in {text}{}",
                String::from_utf8_lossy(&out.stderr)
            ))
        })?;
        Ok(LoadResult {
            value: per_s,
            units: requests as f64,
            errors,
        })
    }

    fn iperf(&self) -> Result<LoadResult, CompareError> {
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
        })
    }

    fn start_sinks(&self) -> Result<Vec<Process>, CompareError> {
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

    /// Every load of one cell, appended to `report`; a failed load is
    /// recorded and the others go on.
    fn run_loads(
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
                        "{:.2} {}",
                        s.value,
                        load.unit()
                    ))
            );
        }
    }

    fn portico_cell(
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

    fn kernel_cell(
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
fn ns_pids(ns: &Netns) -> io::Result<Vec<String>> {
    let out = portico_netns::run("ip", &["netns", "pids", &ns.name])?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect())
}

fn stop_all(processes: Vec<Process>) {
    for mut p in processes {
        let _ = p.terminate(Duration::from_secs(5));
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
    let gateway_mac =
        Topology::mac_of(&topology.gateway, &topology.outside_if).map_err(io_ctx("gateway MAC"))?;
    let mut rig = Rig {
        config: &config,
        topology: &topology,
        gateway_mac,
        ticks_per_s: topology::clock_ticks_per_s() as f64,
        loads_started: 0,
        cells_started: 0,
        mode: Mode::Portico,
        baseline_busy_per_s: 0.0,
        baseline_kernel_per_s: 0.0,
        baseline_softirq_per_s: 0.0,
    };
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
        for datapath in [Datapath::Iptables, Datapath::Nftables] {
            for &n in &config.services {
                rig.kernel_cell(&mut report, run, datapath, n)?;
            }
        }
    }
    report.elapsed_s = started.elapsed().as_secs_f64();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_summary_with_and_without_errors() {
        let ok = "Running 3s test @ http://192.0.2.10:80/\n  1 threads and 32 connections\n\
                  12345 requests in 3.00s, 2.1MB read\nRequests/sec:   4115.00\nTransfer/sec: 700KB\n";
        assert_eq!(parse_wrk(ok), Some((12345, 4115.0, 0)));
        let bad = "  999 requests in 3.00s, 1MB read\n  Socket errors: connect 2, read 3, write 0, timeout 4\n\
                   Non-2xx or 3xx responses: 5\nRequests/sec:    333.00\n";
        assert_eq!(parse_wrk(bad), Some((999, 333.0, 14)));
        assert_eq!(parse_wrk("unable to connect"), None);
    }

    #[test]
    fn tcpext_counters_are_summed_by_name() {
        let netstat = "TcpExt: SyncookiesSent PAWSActive PAWSEstab TCPSynRetrans\n\
                       TcpExt: 1 2 3 4\n\
                       IpExt: InNoRoutes PAWSFake\n\
                       IpExt: 100 200\n";
        assert_eq!(tcpext_sum(netstat, is_paws), 5);
        assert_eq!(tcpext_sum(netstat, is_syn_retrans), 4);
        assert_eq!(tcpext_sum("", is_paws), 0);
    }

    #[test]
    fn process_cpu_fields_and_deltas() {
        // Our own stat parses, and a process that appears counts whole.
        let me = pid_cpu_fields("self").expect("own stat");
        assert!(me.iter().all(|&t| t < u64::MAX / 4));
        assert_eq!(pid_cpu_fields("0"), None);
        let before = OurTicks {
            per_pid: [("10".to_owned(), 5), ("11".to_owned(), 7)].into(),
            reaped_children: 100,
        };
        let after = OurTicks {
            per_pid: [("10".to_owned(), 9), ("12".to_owned(), 3)].into(),
            reaped_children: 130,
        };
        assert_eq!(before.delta(&after), 4 + 3 + 30);
    }

    #[test]
    fn names_parse_back() {
        for load in Load::ALL {
            assert_eq!(load.key().parse::<Load>().ok(), Some(load));
        }
        assert!("tcp".parse::<Load>().is_err());
        for d in [
            PorticoDriver::AfPacket,
            PorticoDriver::AfXdp,
            PorticoDriver::Dpdk,
        ] {
            assert_eq!(d.config_name().parse::<PorticoDriver>().ok(), Some(d));
        }
        assert!("xdp".parse::<PorticoDriver>().is_err());
    }

    #[test]
    fn every_driver_row_gets_a_valid_configuration() {
        let set = ServiceSet {
            measured: vec![Service {
                vip: VIP,
                port: UDP_PORT,
                proto: Proto::Udp,
                endpoints: vec![(Ipv4Addr::new(10, 1, 0, 10), UDP_BACKEND_PORT)],
            }],
            services: 5,
        };
        let snat = snat_addr(3);
        for driver in [
            PorticoDriver::AfPacket,
            PorticoDriver::AfXdp,
            PorticoDriver::Dpdk,
        ] {
            let workers = workers_for(driver, 1);
            let text = portico_config(driver, workers, ("go1", "gi1"), &set, snat);
            // The schema accepts it whatever this build's drivers are.
            let file =
                nic_config::parse_file(&text).unwrap_or_else(|e| panic!("{driver:?}: {e}\n{text}"));
            assert_eq!(file.ports.len(), 2, "{text}");
            for port in &file.ports {
                assert_eq!(port.driver.to_string(), driver.config_name());
                let want_device = (driver == PorticoDriver::Dpdk).then(|| DPDK_DEVICE.to_owned());
                assert_eq!(port.dpdk_device, want_device, "{text}");
            }
            if driver == PorticoDriver::Dpdk {
                assert_eq!(file.dpdk.memory_mb, u64::from(DPDK_MEMORY_MB), "{text}");
            }
            // Validation passes, except for DPDK in a build without it.
            match nic_config::parse(&text) {
                Ok(plan) => {
                    assert_eq!(plan.dataplane.workers, workers as usize);
                    assert_eq!(plan.services.len(), 5);
                }
                Err(e) => assert!(
                    driver == PorticoDriver::Dpdk && e.to_string().contains("dpdk"),
                    "{driver:?}: {e}\n{text}"
                ),
            }
        }
        // Queue-bound drivers run one worker per veth queue.
        assert_eq!(workers_for(PorticoDriver::AfPacket, 1), 1);
        assert_eq!(workers_for(PorticoDriver::AfXdp, 1), AFXDP_QUEUES);
        assert_eq!(workers_for(PorticoDriver::Dpdk, 3), AFXDP_QUEUES);
    }

    #[test]
    fn addresses_stay_in_their_subnets_and_clear_of_fixed_ones() {
        for i in 0..1000 {
            let c = client_addr(i).octets();
            assert_eq!(&c[..3], &[192, 0, 2]);
            assert!((101..=250).contains(&c[3]));
            let s = snat_addr(i).octets();
            assert_eq!(&s[..3], &[10, 1, 0]);
            assert!((100..=249).contains(&s[3]));
        }
    }
}
