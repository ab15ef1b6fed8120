//! The raw results of a comparison.

use super::*;
use serde::Serialize;

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
    /// Request latency (wrk's latency distribution; wrk loads only).
    pub latency: Option<Latency>,
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
