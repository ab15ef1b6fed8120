//! What a comparison compares: the Portico drivers, the datapaths, the
//! loads and their settings, and the gateway configuration of a Portico
//! row.

use super::super::rules::{self, ServiceSet};
use super::*;
use portico::demo::topology::{AFXDP_QUEUES, NODE_ADDR};
use serde::Serialize;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum PorticoDriver {
    AfPacket,
    AfXdp,
    Dpdk,
    /// af_packet with the `TPACKET_V3` block ring (`rx_ring = "blocks"`).
    AfPacketBlocks,
    /// AF_XDP with busy polling (`busy_poll = true`).
    AfXdpBusyPoll,
    /// af_packet with GSO/GRO pass-through (`gso = true`); pair with
    /// `--offloads-on`, or the peers send no super-packets.
    AfPacketGso,
}

impl PorticoDriver {
    /// The `driver` value of a `[[port]]` table.
    pub fn config_name(self) -> &'static str {
        match self {
            PorticoDriver::AfPacket
            | PorticoDriver::AfPacketBlocks
            | PorticoDriver::AfPacketGso => "afpacket",
            PorticoDriver::AfXdp | PorticoDriver::AfXdpBusyPoll => "afxdp",
            PorticoDriver::Dpdk => "dpdk",
        }
    }

    /// The driver's table in `[dataplane]`, for the variants that set one.
    fn driver_section(self) -> &'static str {
        match self {
            PorticoDriver::AfPacketBlocks => "[dataplane.afpacket]\nrx_ring = \"blocks\"\n\n",
            PorticoDriver::AfXdpBusyPoll => "[dataplane.afxdp]\nbusy_poll = true\n\n",
            PorticoDriver::AfPacketGso => "[dataplane.afpacket]\ngso = true\n\n",
            _ => "",
        }
    }

    /// Whether the driver reads the gateway's veths below the kernel's
    /// stack (AF_XDP's redirect program; DPDK's PMDs), so the topology needs
    /// TX checksum offload off on the peers (such frames carry no "checksum
    /// partial" mark) and [`AFXDP_QUEUES`] queues, and the row runs one
    /// worker per queue (AF_XDP must; DPDK does so to match it).
    pub fn binds_rx_queues(self) -> bool {
        matches!(
            self,
            PorticoDriver::AfXdp | PorticoDriver::AfXdpBusyPoll | PorticoDriver::Dpdk
        )
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
            "afpacket-blocks" => Ok(PorticoDriver::AfPacketBlocks),
            "afxdp-busy-poll" => Ok(PorticoDriver::AfXdpBusyPoll),
            "afpacket-gso" => Ok(PorticoDriver::AfPacketGso),
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
            Datapath::Portico(PorticoDriver::AfPacketBlocks) => "portico (af_packet, V3 blocks)",
            Datapath::Portico(PorticoDriver::AfXdpBusyPoll) => "portico (AF_XDP, busy poll)",
            Datapath::Portico(PorticoDriver::AfPacketGso) => "portico (af_packet, GSO)",
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
    /// wrk over one keep-alive connection, one request in flight: the
    /// round trip of the path itself (its p50), not a queue's shape.
    Rtt,
    /// wrk with `Connection: close` from a narrow ephemeral port range, so
    /// client tuples come back while their last connection's state lingers.
    Churn,
    /// iperf3, one TCP flow: Gbit/s.
    Iperf,
}

impl Load {
    pub const ALL: [Load; 6] = [
        Load::Udp,
        Load::NewConnections,
        Load::KeepAlive,
        Load::Rtt,
        Load::Churn,
        Load::Iperf,
    ];
    /// The command-line name.
    pub fn key(self) -> &'static str {
        match self {
            Load::Udp => "udp",
            Load::NewConnections => "conn",
            Load::KeepAlive => "keepalive",
            Load::Rtt => "rtt",
            Load::Churn => "churn",
            Load::Iperf => "iperf",
        }
    }
    pub fn title(self) -> &'static str {
        match self {
            Load::Udp => "UDP echoes (pktgen)",
            Load::NewConnections => "new TCP connections (wrk, Connection: close)",
            Load::KeepAlive => "keep-alive HTTP requests (wrk)",
            Load::Rtt => "one request at a time (wrk -c1, keep-alive): the path's round trip",
            Load::Churn => "connection churn (wrk, Connection: close, narrow port range)",
            Load::Iperf => "single-flow TCP throughput (iperf3)",
        }
    }
    /// Unit of the figure.
    pub fn unit(self) -> &'static str {
        match self {
            Load::Udp => "echoes/s",
            Load::NewConnections => "conn/s",
            Load::KeepAlive | Load::Rtt | Load::Churn => "req/s",
            Load::Iperf => "Gbit/s",
        }
    }
    /// What the CPU is divided by.
    pub fn per(self) -> &'static str {
        match self {
            Load::Udp => "echo",
            Load::NewConnections => "connection",
            Load::KeepAlive | Load::Rtt | Load::Churn => "request",
            Load::Iperf => "MiB",
        }
    }
    /// The program the load needs, if not pktgen.
    pub(super) fn tool(self) -> Option<&'static str> {
        match self {
            Load::Udp => None,
            Load::NewConnections | Load::KeepAlive | Load::Rtt | Load::Churn => Some("wrk"),
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
    /// TOML appended to every Portico row's configuration (e.g. a
    /// `[dataplane.afpacket]` table with other ring sizes).
    pub portico_extra: String,
    /// Keys added to every Portico row's `[dataplane]` table (e.g.
    /// `idle_spin_polls = 64`).
    pub portico_dataplane: String,
    /// GRO/GSO/TSO left on at every peer veth (and on the gateway's own
    /// veths for the kernel rows): TCP crosses the topology as
    /// super-packets, as between namespaces by default; for `afpacket-gso`
    /// rows and a kernel with its offloads.
    pub offloads_on: bool,
    /// The kernel rows to run, in this order (iptables then nftables by
    /// default; fewer to profile a Portico row without waiting for the
    /// kernel's rule loads: the ratios to a missing row are left out).
    pub kernel: Vec<Datapath>,
}

/// The gateway's configuration of a `driver` row: `workers` workers, the
/// (outside, inside) interfaces, the services of `set`, the cell's SNAT
/// address, `dataplane` keys added to `[dataplane]`; DPDK rows also get the
/// `[dpdk]` section and a [`DPDK_DEVICE`] vdev per port.
pub fn portico_config(
    driver: PorticoDriver,
    workers: u32,
    (outside, inside): (&str, &str),
    set: &ServiceSet,
    snat: Ipv4Addr,
    dataplane: &str,
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
         maglev_table_size = 1021\n{dataplane}\n\n\
         [dataplane.conntrack]\ncapacity = 262144\n\n{section}\
         [[port]]\nname = \"outside\"\ndriver = \"{driver}\"\ninterface = \"{outside}\"\nrole = \"outside\"\nnode_addresses = [\"{NODE_ADDR}/24\"]\n{device}\n\
         [[port]]\nname = \"inside\"\ndriver = \"{driver}\"\ninterface = \"{inside}\"\nrole = \"inside\"\nsnat_addresses = [\"{snat}/24\"]\n{device}{services}{dpdk}",
        driver = driver.config_name(),
        section = driver.driver_section(),
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
