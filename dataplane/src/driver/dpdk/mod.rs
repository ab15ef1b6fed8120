//! The DPDK driver (cargo feature `dpdk`): poll-mode drivers of DPDK 22.11
//! through Portico's own thin bindings (`portico-dpdk-sys`), frames in mbufs.
//!
//! Three steps, in this order, each once per process:
//!
//! 1. [`Eal::init`] starts the EAL from an [`EalConfig`] (see `eal.rs` for
//!    the command line: vdevs such as `net_af_packet`/`net_af_xdp` without
//!    hugepages when no NIC is bound, PCI functions with hugepages). The EAL
//!    can be initialized once per process; a second call with the same
//!    configuration returns the same [`Eal`], a different one is an error.
//! 2. [`DpdkPorts::start`] configures every port with one RX and one TX
//!    queue per worker (RSS over IPv4/TCP/UDP when the device offers it and
//!    there are several workers; vdevs spread by their own means, e.g.
//!    `PACKET_FANOUT` for `net_af_packet`), one mbuf pool per worker (RX
//!    queue `w` of every port fills from worker `w`'s pool, on the port's
//!    NUMA socket), sets the MTU if asked, promiscuous mode, and starts
//!    the ports.
//! 3. [`DpdkPorts::driver`], called on each worker's own thread, hands out
//!    that worker's [`DpdkDriver`]: queue `w` of every port. It registers
//!    the thread as a non-EAL lcore (`rte_thread_register`) so the pool's
//!    per-lcore cache serves it.
//!
//! Invariants the `unsafe` code (all of it in `sys.rs`) relies on:
//! * the EAL starts once per process ([`Eal::init`] under its lock), before
//!   any other DPDK call (an [`Eal`] is the proof);
//! * a queue is used by one driver at a time: [`DpdkPorts::driver`] hands
//!   out each worker index once until that driver is dropped, and a
//!   [`DpdkDriver`] is neither `Send` nor `Sync`, so its queues are polled
//!   by the thread that took them;
//! * a [`DpdkFrame`] owns its mbuf exclusively: it comes from `rx_burst` or
//!   `frame_from` and leaves by value through `tx_burst` (the PMD frees it
//!   after sending) or `release`. Frames are plain data without `Drop`: a
//!   frame dropped without `release` leaks one mbuf, never frees twice;
//! * mbuf pools are never freed (they live as long as the process and the
//!   EAL), so a frame's bytes stay valid even after its driver is gone;
//! * received frames are single-segment (the shim frees and counts chained
//!   mbufs) and `len` never exceeds the segment's `data_len` (`truncate`
//!   only lowers it; the shim applies it to the mbuf before TX).
//!
//! Hot path: `rx_burst` and `tx_burst` are one FFI call each per burst
//! (the shim runs `rte_eth_rx_burst`/`rte_eth_tx_burst` and fills or reads
//! the frame array in place); no allocation beyond the caller's `Vec`
//! capacity, no locks, no syscalls beyond what the PMD does.
//!
//! Files: `eal.rs` (the EAL command line), `ports.rs` (starting the ports
//! and pools: [`DpdkPorts`]), `driver.rs` (one worker's queues:
//! [`DpdkDriver`]), `sys.rs` (every DPDK call, and [`DpdkFrame`]); this
//! file holds the errors and [`Eal`].

mod driver;
mod eal;
mod ports;
mod sys;
#[cfg(test)]
mod tests;

pub use driver::{DpdkDriver, DriverPortStats};
pub use eal::{DpdkDevice, EalConfig};
pub use ports::{DpdkPortConfig, DpdkPortInfo, DpdkPortStats, DpdkPorts, DpdkPortsConfig};
pub use sys::DpdkFrame;

use std::sync::Mutex;

/// Frames per burst the shim handles in one call.
pub const MAX_BURST: usize = 64;

/// Why the EAL or a port could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum DpdkError {
    #[error(
        "the EAL is already initialized in this process with `{existing}`; it starts once per process"
    )]
    AlreadyInitialized { existing: String },
    #[error("EAL argument {0:?} contains a NUL byte")]
    NulInArgument(String),
    #[error("rte_eal_init(`{args}`) failed: {reason}")]
    EalInit { args: String, reason: String },
    #[error(
        "device {device}: no DPDK port of that name (is the vdev in the EAL arguments, the PCI function bound to vfio-pci?)"
    )]
    NoSuchPort { device: String },
    #[error("device {device}: {call} failed: {reason}")]
    Port {
        device: String,
        call: &'static str,
        reason: String,
    },
    #[error("device {device}: {queues} queues requested, the device has at most {max}")]
    TooManyQueues {
        device: String,
        queues: usize,
        max: u16,
    },
    #[error("creating the mbuf pool of worker {worker} ({mbufs} mbufs): {reason}")]
    Mempool {
        worker: usize,
        mbufs: u32,
        reason: String,
    },
    #[error("worker {worker}: no such queue (the ports have {queues})")]
    NoSuchQueue { worker: usize, queues: usize },
    #[error("worker {worker}: its queues are already driven by another driver")]
    QueueTaken { worker: usize },
    #[error("invalid port configuration: {0}")]
    Invalid(String),
}

/// Proof that the EAL runs in this process.
#[derive(Debug)]
pub struct Eal {
    args: Vec<String>,
}

/// The EAL of this process once [`Eal::init`] succeeded; the arguments of
/// a failed attempt (the EAL cannot be initialized twice).
static EAL: Mutex<Option<Result<&'static Eal, String>>> = Mutex::new(None);

impl Eal {
    /// Start the EAL (once per process; see the module docs).
    pub fn init(config: &EalConfig) -> Result<&'static Eal, DpdkError> {
        let args = config.args(&sys::allowed_cpus());
        let mut state = EAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match &*state {
            Some(Ok(eal)) if eal.args == args => return Ok(eal),
            Some(Ok(eal)) => {
                return Err(DpdkError::AlreadyInitialized {
                    existing: eal.args.join(" "),
                });
            }
            Some(Err(existing)) => {
                return Err(DpdkError::AlreadyInitialized {
                    existing: existing.clone(),
                });
            }
            None => {}
        }
        if let Err(e) = sys::eal_init(&args) {
            if matches!(e, DpdkError::EalInit { .. }) {
                *state = Some(Err(args.join(" ")));
            }
            return Err(e);
        }
        let eal: &'static Eal = Box::leak(Box::new(Eal { args }));
        *state = Some(Ok(eal));
        Ok(eal)
    }

    /// The argument vector the EAL runs with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// DPDK ports the EAL probed.
    pub fn port_count(&self) -> u16 {
        sys::eth_dev_count_avail()
    }
}
