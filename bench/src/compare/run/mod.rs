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
//!   topology gives the gateway's veths [`AFXDP_QUEUES`](portico::demo::topology::AFXDP_QUEUES) queues and the
//!   peers send complete checksums (TX checksum offload off), for every
//!   row alike; those rows run one worker per queue, the af_packet row
//!   `--workers` (pass `--workers 2` for equal rows). The `dpdk` row needs a `portico` built with the feature
//!   `dpdk` (portico-bench's feature of that name); otherwise its start
//!   fails and is reported as not measured;
//! * Portico runs while the gateway namespace has no addresses and
//!   forwarding off (its invariant); the kernel runs with the node and SNAT
//!   addresses on the gateway's veths, `ip_forward=1` and a static
//!   neighbour entry in the client for the VIP (on the client's subnet;
//!   Portico answers ARP for it, the kernel's NAT does not); the rig
//!   switches between the two modes and back;
//! * every load uses its own client source address (a secondary address
//!   made the default route's `src`) and every cell (run × datapath ×
//!   service count) its own SNAT address, so no conntrack entry or backend
//!   TIME_WAIT socket of an earlier load short-cuts or disturbs a later one;
//! * UDP goes to `pktgen sink --echo` on the backends' veths (af_packet;
//!   nothing listens on the port: the client's and backends' kernels drop
//!   the probes at raw PREROUTING, after the taps, instead of answering
//!   each with an ICMP error), TCP to real nginx (HTTP, wrk) and iperf3
//!   (one endpoint, since iperf3's control and data connections must meet
//!   the same server); the LAN bridge calls no netfilter hooks
//!   (`bridge-nf-call-*` off, see [`portico::demo::topology`]). Over veth
//!   a receiver's kernel work runs in its transmitter's context (Portico's
//!   worker, in its `send`; or the kernel NAT's softirq), so rig work
//!   that no real network does would be charged to the datapath;
//! * CPU is read from `/proc/stat` (machine-wide) and `/proc/PID/stat`
//!   (the gateway process) right before and after each load; an idle
//!   baseline of the same length is measured at the start of every run and
//!   subtracted (see [`CpuUse`]);
//! * everything is bounded in time (every child has a timeout) and owned by
//!   guards: loads, sinks, servers and gateways are stopped by PID,
//!   namespaces deleted by name, also when a load fails.
//!
//! Files: `config` (what is compared: drivers, datapaths, loads, the
//! gateway's configuration), `sample` (the raw results), `measure` (CPU
//! ticks, netstat counters, wrk's summary, RSS), `rig` (the topology's
//! modes, the cells and [`run`]), `loads` (each load with its CPU) and
//! `flood` (the SYN flood scenario, [`run_syn_flood`], on the same rig).

mod config;
mod flood;
mod loads;
mod measure;
mod rig;
mod sample;
#[cfg(test)]
mod tests;

pub use config::{
    CompareConfig, DPDK_DEVICE, DPDK_MEMORY_MB, Datapath, Load, PorticoDriver, portico_config,
    workers_for,
};
pub use flood::{
    Defence, FLOOD_CIDR, FloodConfig, FloodReport, FloodSample, Holding, SAMPLE_EVERY, WrkPhase,
    parse_conntrack_count, run_syn_flood,
};
pub use measure::{
    Latency, WrkErrors, parse_wrk, parse_wrk_errors, parse_wrk_latency, rss_kb, tcpext_sum,
};
pub use rig::run;
pub use sample::{CpuUse, Failure, Report, Sample, UpdateSample};

use std::io;

/// The UDP service's port on the VIP, and its backends' port (nothing
/// listens there; the af_packet sink answers).
pub const UDP_PORT: u16 = 53;
pub const UDP_BACKEND_PORT: u16 = 9000;
/// iperf3's service port (VIP and backend 0).
pub const IPERF_PORT: u16 = 5201;
/// The client's default ephemeral port range, restored after the churn load.
pub(super) const DEFAULT_PORT_RANGE: &str = "32768 60999";
/// First port of the churn load's narrow ephemeral range.
pub(super) const CHURN_PORT_BASE: u32 = 41_000;

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
    #[error(
        "unknown Portico driver {0:?} (want afpacket, afpacket-blocks, afpacket-gso, afxdp, afxdp-busy-poll or dpdk)"
    )]
    BadDriver(String),
    #[error("unknown load {0:?} (want udp, conn, keepalive, churn or iperf)")]
    BadLoad(String),
    #[error(
        "unknown SYN defence {0:?} (want portico-off, portico-on, kernel-syncookies or kernel-synproxy)"
    )]
    BadDefence(String),
}

pub(super) fn io_ctx(what: impl Into<String>) -> impl FnOnce(io::Error) -> CompareError {
    let what = what.into();
    move |source| CompareError::Io { what, source }
}
