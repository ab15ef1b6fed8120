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
//! Invariants the `unsafe` code relies on:
//! * a queue is used by one driver at a time: [`DpdkPorts::driver`] hands
//!   out each worker index once until that driver is dropped, and a
//!   [`DpdkDriver`] is neither `Send` nor `Sync` (raw pointers), so its
//!   queues are polled by the thread that took them;
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

#![allow(unsafe_code)]

mod eal;
#[cfg(test)]
mod tests;

pub use eal::{DpdkDevice, EalConfig};

use super::{Driver, Frame};
use crate::packet::PortId;
use crate::wire::MacAddr;
use dpdk_sys as sys;
use std::ffi::{CStr, CString, c_char, c_int};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Frames per burst the shim handles in one call.
pub const MAX_BURST: usize = 64;
/// Mbufs a `net_af_xdp` RX queue keeps in its fill ring (the PMD's
/// default ring size, independent of the descriptor count asked for).
const AF_XDP_FILL_RING_MBUFS: u32 = 2048;

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

/// `rte_strerror` of a (positive or negative) error number.
fn strerror(errnum: c_int) -> String {
    // SAFETY: rte_strerror accepts any value and returns a pointer to a
    // NUL-terminated string, static or in thread-local storage, valid until
    // the next call on this thread; it is copied out at once.
    let text = unsafe { CStr::from_ptr(sys::rte_strerror(errnum.abs())) };
    format!("{} ({})", text.to_string_lossy(), errnum.abs())
}

/// `rte_errno` of the calling thread, as text.
fn rte_errno_text() -> String {
    // SAFETY: reads a thread-local integer; no preconditions.
    strerror(unsafe { sys::portico_errno() })
}

/// The CPUs this process may run on (`sched_getaffinity`).
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data (all-zero is the empty set).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, the bound CPU_ISSET requires.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
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
        let args = config.args(&allowed_cpus());
        let joined = args.join(" ");
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
        let mut argv: Vec<*mut c_char> = Vec::with_capacity(args.len() + 1);
        for a in &args {
            let c = CString::new(a.as_str()).map_err(|_| DpdkError::NulInArgument(a.clone()))?;
            // The EAL keeps pointers into argv (getopt permutes it, some
            // options are stored as given): the strings live forever.
            argv.push(c.into_raw());
        }
        argv.push(std::ptr::null_mut());
        let argv: &'static mut [*mut c_char] = Box::leak(argv.into_boxed_slice());
        let argc = c_int::try_from(args.len()).unwrap_or(c_int::MAX);
        // SAFETY: argv holds `argc` valid NUL-terminated strings followed by
        // a null pointer, all leaked so they outlive the EAL; the EAL is
        // initialized at most once per process (guarded by `EAL`).
        let rc = unsafe { sys::rte_eal_init(argc, argv.as_mut_ptr()) };
        if rc < 0 {
            let reason = rte_errno_text();
            *state = Some(Err(joined.clone()));
            return Err(DpdkError::EalInit {
                args: joined,
                reason,
            });
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
        // SAFETY: the EAL is initialized (`self` exists).
        unsafe { sys::rte_eth_dev_count_avail() }
    }
}

/// One port in [`DpdkPortsConfig`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpdkPortConfig {
    /// What `rte_eth_dev_get_port_by_name` knows it by (the vdev name or PCI
    /// address: [`DpdkDevice::port_name`]).
    pub device: String,
    /// Set this MTU (`rte_eth_dev_set_mtu`); `None`: the device's.
    pub mtu: Option<u16>,
}

/// Ports, queues and pools for [`DpdkPorts::start`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpdkPortsConfig {
    /// In `PortId` order.
    pub ports: Vec<DpdkPortConfig>,
    /// Workers = RX and TX queues per port = mbuf pools.
    pub workers: usize,
    /// RX descriptors per queue (adjusted to the device's limits).
    pub rx_desc: u16,
    /// TX descriptors per queue (adjusted to the device's limits).
    pub tx_desc: u16,
    /// Mbufs per worker pool; 0: enough for every ring of the worker plus
    /// bursts in flight and the per-lcore cache.
    pub pool_mbufs: u32,
    /// Per-lcore cache of each pool (at most 512).
    pub pool_cache: u32,
    /// Receive frames for any destination MAC.
    pub promiscuous: bool,
    /// What [`DpdkDriver::wait_idle`] sleeps.
    pub idle_sleep_us: u32,
}

impl DpdkPortsConfig {
    /// Defaults for the devices of an [`EalConfig`]: 1024 descriptors per
    /// ring, automatic pool size, 256-mbuf caches, promiscuous, 200 µs idle
    /// sleeps.
    pub fn new(devices: &[DpdkDevice], workers: usize) -> Self {
        DpdkPortsConfig {
            ports: devices
                .iter()
                .map(|d| DpdkPortConfig {
                    device: d.port_name().to_string(),
                    mtu: None,
                })
                .collect(),
            workers,
            rx_desc: 1024,
            tx_desc: 1024,
            pool_mbufs: 0,
            pool_cache: 256,
            promiscuous: true,
            idle_sleep_us: 200,
        }
    }

    fn pool_size(&self, rx_desc: u16, tx_desc: u16) -> u32 {
        if self.pool_mbufs > 0 {
            return self.pool_mbufs;
        }
        let ports = self.ports.len() as u32;
        // net_af_xdp fills its fill ring with 2048 mbufs whatever rx_desc is.
        let rx = u32::from(rx_desc).max(AF_XDP_FILL_RING_MBUFS);
        let rings = ports * (rx + u32::from(tx_desc));
        let bursts = ports * 2 * MAX_BURST as u32;
        let need = rings + bursts + 2 * self.pool_cache + 1024;
        // Mempools are most efficient at 2^n - 1 elements.
        need.next_power_of_two().saturating_sub(1).max(need)
    }
}

/// What DPDK says about a started port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpdkPortInfo {
    pub device: String,
    pub port_id: u16,
    pub driver_name: String,
    pub mac: MacAddr,
    pub mtu: u16,
    /// NUMA socket (-1: unknown).
    pub socket: i32,
    pub rx_desc: u16,
    pub tx_desc: u16,
}

/// `rte_eth_stats` of a port (all queues).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DpdkPortStats {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// Dropped by the device: RX ring full.
    pub rx_missed: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    /// RX mbuf allocation failures (pool empty).
    pub rx_nombuf: u64,
}

/// An mbuf pool. The pointer is never freed (see the module docs).
#[derive(Debug)]
struct Pool {
    mempool: NonNull<sys::rte_mempool>,
    mbufs: u32,
}

/// The started ports, shared by the workers' drivers.
#[derive(Debug)]
pub struct DpdkPorts {
    ports: Vec<DpdkPortInfo>,
    pools: Vec<Pool>,
    taken: Vec<AtomicBool>,
    idle_sleep: Duration,
}

// SAFETY: the only non-thread-safe parts are the mempool pointers: mempool
// operations (get/put/counts) are multi-producer/multi-consumer safe with
// the default ring ops, and the pools are never freed. Queues are handed
// out to one driver at a time through `taken`.
unsafe impl Send for DpdkPorts {}
// SAFETY: see `Send`; shared access only reads port facts and counters.
unsafe impl Sync for DpdkPorts {}

/// Distinguishes the pools of several `start` calls in one process
/// (mempool names are global).
static POOL_GENERATION: AtomicUsize = AtomicUsize::new(0);

fn port_error(device: &str, call: &'static str, rc: c_int) -> DpdkError {
    DpdkError::Port {
        device: device.to_string(),
        call,
        reason: strerror(rc),
    }
}

impl DpdkPorts {
    /// Configure and start every port (see the module docs).
    pub fn start(_eal: &Eal, config: &DpdkPortsConfig) -> Result<Arc<DpdkPorts>, DpdkError> {
        let workers = config.workers;
        if workers == 0 || workers > usize::from(u16::MAX) {
            return Err(DpdkError::Invalid(format!("{workers} workers (1..=65535)")));
        }
        if config.ports.is_empty() || config.ports.len() > usize::from(PortId::MAX) {
            return Err(DpdkError::Invalid(format!(
                "{} ports (1..=255)",
                config.ports.len()
            )));
        }
        let queues = workers as u16;
        let mut port_ids = Vec::with_capacity(config.ports.len());
        for p in &config.ports {
            let name = CString::new(p.device.as_str())
                .map_err(|_| DpdkError::NulInArgument(p.device.clone()))?;
            let mut id: u16 = 0;
            // SAFETY: `name` is NUL-terminated, `id` writable; EAL is up.
            let rc = unsafe { sys::rte_eth_dev_get_port_by_name(name.as_ptr(), &mut id) };
            if rc != 0 {
                return Err(DpdkError::NoSuchPort {
                    device: p.device.clone(),
                });
            }
            port_ids.push(id);
        }

        // Descriptor counts, as the first port's limits allow (the same for
        // every port keeps the pool size simple).
        let mut rx_desc = config.rx_desc.max(1);
        let mut tx_desc = config.tx_desc.max(1);
        for (p, &id) in config.ports.iter().zip(&port_ids) {
            // SAFETY: valid port id, writable u16s.
            let rc =
                unsafe { sys::rte_eth_dev_adjust_nb_rx_tx_desc(id, &mut rx_desc, &mut tx_desc) };
            if rc != 0 {
                return Err(port_error(
                    &p.device,
                    "rte_eth_dev_adjust_nb_rx_tx_desc",
                    rc,
                ));
            }
        }

        // One pool per worker, on the first port's socket.
        // SAFETY: valid port id.
        let socket = unsafe { sys::rte_eth_dev_socket_id(port_ids[0]) };
        let mbufs = config.pool_size(rx_desc, tx_desc);
        let max_mtu = config
            .ports
            .iter()
            .filter_map(|p| p.mtu)
            .max()
            .unwrap_or(1500);
        // Ethernet header + one VLAN tag + FCS room, at least the default.
        let data_room = (u32::from(max_mtu) + 22).max(2048) + sys::RTE_PKTMBUF_HEADROOM;
        let data_room = u16::try_from(data_room)
            .map_err(|_| DpdkError::Invalid(format!("mtu {max_mtu} is too large")))?;
        let generation = POOL_GENERATION.fetch_add(1, Ordering::Relaxed);
        let mut pools = Vec::with_capacity(workers);
        for w in 0..workers {
            let name = CString::new(format!("portico{generation}w{w}"))
                .map_err(|_| DpdkError::Invalid("pool name".into()))?;
            // SAFETY: NUL-terminated name of at most 26 bytes (unique per
            // process through POOL_GENERATION); sizes checked above.
            let mp = unsafe {
                sys::rte_pktmbuf_pool_create(
                    name.as_ptr(),
                    mbufs,
                    config.pool_cache.min(512),
                    0,
                    data_room,
                    socket,
                )
            };
            let Some(mempool) = NonNull::new(mp) else {
                return Err(DpdkError::Mempool {
                    worker: w,
                    mbufs,
                    reason: rte_errno_text(),
                });
            };
            pools.push(Pool { mempool, mbufs });
        }

        let mut ports = Vec::with_capacity(config.ports.len());
        for (p, &id) in config.ports.iter().zip(&port_ids) {
            let device = p.device.as_str();
            let mut caps = sys::portico_dev_caps::default();
            // SAFETY: valid port id, `caps` writable.
            let rc = unsafe { sys::portico_eth_dev_caps(id, &mut caps) };
            if rc != 0 {
                return Err(port_error(device, "rte_eth_dev_info_get", rc));
            }
            let max = caps.max_rx_queues.min(caps.max_tx_queues);
            if queues > max {
                return Err(DpdkError::TooManyQueues {
                    device: device.to_string(),
                    queues: workers,
                    max,
                });
            }
            // SAFETY: valid port id; the port is not started.
            let rc = unsafe { sys::portico_eth_configure(id, queues, queues, 1) };
            if rc != 0 {
                return Err(port_error(device, "rte_eth_dev_configure", rc));
            }
            // SAFETY: valid port id.
            let port_socket = unsafe { sys::rte_eth_dev_socket_id(id) };
            let queue_socket = if port_socket < 0 {
                sys::SOCKET_ID_ANY
            } else {
                port_socket
            } as u32;
            for (q, pool) in pools.iter().enumerate() {
                // SAFETY: configured, stopped port; q < queues; NULL conf
                // means the device's defaults; the pool outlives the queue
                // (pools are never freed).
                let rc = unsafe {
                    sys::rte_eth_rx_queue_setup(
                        id,
                        q as u16,
                        rx_desc,
                        queue_socket,
                        std::ptr::null(),
                        pool.mempool.as_ptr(),
                    )
                };
                if rc != 0 {
                    return Err(port_error(device, "rte_eth_rx_queue_setup", rc));
                }
                // SAFETY: as above.
                let rc = unsafe {
                    sys::rte_eth_tx_queue_setup(
                        id,
                        q as u16,
                        tx_desc,
                        queue_socket,
                        std::ptr::null(),
                    )
                };
                if rc != 0 {
                    return Err(port_error(device, "rte_eth_tx_queue_setup", rc));
                }
            }
            if let Some(mtu) = p.mtu {
                // SAFETY: valid port id.
                let rc = unsafe { sys::rte_eth_dev_set_mtu(id, mtu) };
                if rc != 0 {
                    return Err(port_error(device, "rte_eth_dev_set_mtu", rc));
                }
            }
            // SAFETY: configured port with every queue set up.
            let rc = unsafe { sys::rte_eth_dev_start(id) };
            if rc != 0 {
                return Err(port_error(device, "rte_eth_dev_start", rc));
            }
            if config.promiscuous {
                // Not every device has it (the PMD says ENOTSUP); frames for
                // the port's own MAC still arrive.
                // SAFETY: started port.
                let _ = unsafe { sys::rte_eth_promiscuous_enable(id) };
            }
            let mut mac = sys::rte_ether_addr::default();
            // SAFETY: valid port id, writable address.
            let rc = unsafe { sys::rte_eth_macaddr_get(id, &mut mac) };
            if rc != 0 {
                return Err(port_error(device, "rte_eth_macaddr_get", rc));
            }
            let mut mtu: u16 = 0;
            // SAFETY: valid port id, writable u16.
            let rc = unsafe { sys::rte_eth_dev_get_mtu(id, &mut mtu) };
            if rc != 0 {
                return Err(port_error(device, "rte_eth_dev_get_mtu", rc));
            }
            let name_len = caps
                .driver_name
                .iter()
                .position(|&c| c == 0)
                .unwrap_or(caps.driver_name.len());
            let driver_name: String = caps.driver_name[..name_len]
                .iter()
                .map(|&c| char::from(c as u8))
                .collect();
            ports.push(DpdkPortInfo {
                device: device.to_string(),
                port_id: id,
                driver_name,
                mac: MacAddr(mac.addr_bytes),
                mtu,
                socket: port_socket,
                rx_desc,
                tx_desc,
            });
        }
        Ok(Arc::new(DpdkPorts {
            ports,
            pools,
            taken: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            idle_sleep: Duration::from_micros(u64::from(config.idle_sleep_us)),
        }))
    }

    pub fn ports(&self) -> &[DpdkPortInfo] {
        &self.ports
    }

    pub fn workers(&self) -> usize {
        self.pools.len()
    }

    /// The device counters of port `index` (any thread).
    pub fn port_stats(&self, index: usize) -> Option<DpdkPortStats> {
        let port = self.ports.get(index)?;
        let mut s = sys::rte_eth_stats::default();
        // SAFETY: valid, started port; `s` writable. Reading counters while
        // a worker polls is what the ethdev API is for.
        let rc = unsafe { sys::rte_eth_stats_get(port.port_id, &mut s) };
        (rc == 0).then_some(DpdkPortStats {
            rx_packets: s.ipackets,
            tx_packets: s.opackets,
            rx_bytes: s.ibytes,
            tx_bytes: s.obytes,
            rx_missed: s.imissed,
            rx_errors: s.ierrors,
            tx_errors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// Mbufs of worker `worker`'s pool not in the pool (in rings, in
    /// frames, in caches): for leak checks.
    pub fn pool_in_use(&self, worker: usize) -> Option<u32> {
        let pool = self.pools.get(worker)?;
        // SAFETY: a live pool (never freed).
        Some(unsafe { sys::rte_mempool_in_use_count(pool.mempool.as_ptr()) })
    }

    /// Mbufs in each worker pool.
    pub fn pool_mbufs(&self) -> u32 {
        self.pools.first().map_or(0, |p| p.mbufs)
    }

    /// Worker `worker`'s driver: queue `worker` of every port. Call on the
    /// worker's thread (it is registered as a non-EAL lcore).
    pub fn driver(self: &Arc<Self>, worker: usize) -> Result<DpdkDriver, DpdkError> {
        let Some(flag) = self.taken.get(worker) else {
            return Err(DpdkError::NoSuchQueue {
                worker,
                queues: self.taken.len(),
            });
        };
        if flag.swap(true, Ordering::AcqRel) {
            return Err(DpdkError::QueueTaken { worker });
        }
        // SAFETY: reads this thread's lcore id.
        let registered_lcore = if unsafe { sys::portico_lcore_id() } == u32::MAX {
            // SAFETY: the EAL is up; registering a non-EAL thread has no
            // other precondition. A failure (no free lcore) leaves the
            // thread without a mempool cache, which is only slower.
            unsafe { sys::rte_thread_register() == 0 }
        } else {
            false
        };
        Ok(DpdkDriver {
            port_ids: self.ports.iter().map(|p| p.port_id).collect(),
            queue: worker as u16,
            pool: self.pools[worker].mempool,
            stats: vec![DriverPortStats::default(); self.ports.len()],
            worker,
            registered_lcore,
            shared: Arc::clone(self),
        })
    }
}

impl Drop for DpdkPorts {
    fn drop(&mut self) {
        for p in &self.ports {
            // SAFETY: every driver (which polls the queues) holds an Arc to
            // `self`, so none is left. Stopping leaves the port configured;
            // its pools stay (never freed).
            let _ = unsafe { sys::rte_eth_dev_stop(p.port_id) };
        }
    }
}

/// A frame in an mbuf (single segment).
#[derive(Debug)]
#[repr(transparent)]
pub struct DpdkFrame(sys::portico_frame);

impl Frame for DpdkFrame {
    #[inline]
    fn data(&self) -> &[u8] {
        if self.0.data.is_null() {
            return &[];
        }
        // SAFETY: the frame owns its mbuf exclusively; `data` points at the
        // start of its only segment, which holds `data_len >= len` bytes in
        // pool memory that is never freed (module invariants).
        unsafe { std::slice::from_raw_parts(self.0.data, usize::from(self.0.len)) }
    }
    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        if self.0.data.is_null() {
            return &mut [];
        }
        // SAFETY: as in `data`; `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.0.data, usize::from(self.0.len)) }
    }
    #[inline]
    fn truncate(&mut self, len: usize) {
        if len < usize::from(self.0.len) {
            self.0.len = len as u16;
        }
    }
    fn checksum_verified(&self) -> bool {
        self.0.checksum_verified != 0
    }
}

/// Per-port counters one driver keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverPortStats {
    pub rx_frames: u64,
    /// Chained (multi-segment) mbufs, freed unseen.
    pub rx_multiseg_dropped: u64,
    pub tx_frames: u64,
    /// Frames `tx_burst` left with the caller (TX ring full).
    pub tx_ring_full: u64,
    /// `frame_from` found the pool empty.
    pub pool_empty: u64,
}

/// One worker's queues on every port.
#[derive(Debug)]
pub struct DpdkDriver {
    port_ids: Vec<u16>,
    queue: u16,
    pool: NonNull<sys::rte_mempool>,
    stats: Vec<DriverPortStats>,
    worker: usize,
    registered_lcore: bool,
    shared: Arc<DpdkPorts>,
}

impl DpdkDriver {
    pub fn ports(&self) -> &Arc<DpdkPorts> {
        &self.shared
    }

    pub fn worker(&self) -> usize {
        self.worker
    }

    /// This driver's counters of port `port`.
    pub fn stats(&self, port: PortId) -> Option<&DriverPortStats> {
        self.stats.get(usize::from(port))
    }

    /// The thread got its own lcore id (and so a mempool cache).
    pub fn lcore_registered(&self) -> bool {
        self.registered_lcore
    }

    /// Poll-mode devices have nothing to sleep on: sleep the configured
    /// idle time (for the adaptive idle policy).
    pub fn wait_idle(&mut self) {
        std::thread::sleep(self.shared.idle_sleep);
    }
}

impl Drop for DpdkDriver {
    fn drop(&mut self) {
        if self.registered_lcore {
            // SAFETY: this thread registered itself in `DpdkPorts::driver`
            // and the driver is not Send, so this is the same thread.
            unsafe { sys::rte_thread_unregister() };
        }
        if let Some(flag) = self.shared.taken.get(self.worker) {
            flag.store(false, Ordering::Release);
        }
    }
}

impl Driver for DpdkDriver {
    type Frame = DpdkFrame;

    fn port_count(&self) -> usize {
        self.port_ids.len()
    }

    fn rx_burst(&mut self, port: PortId, out: &mut Vec<DpdkFrame>, max: usize) -> usize {
        let Some(&port_id) = self.port_ids.get(usize::from(port)) else {
            return 0;
        };
        let want = max.min(MAX_BURST);
        if out.capacity() - out.len() < want {
            // Only when the caller's batch is too small (once).
            out.reserve(want);
        }
        let spare = out.spare_capacity_mut();
        let n = want.min(spare.len()) as u16;
        let mut multiseg: u64 = 0;
        // SAFETY: `spare` has room for `n` frames; DpdkFrame is
        // repr(transparent) over portico_frame, so the shim writes whole
        // frames into it. This driver alone polls queue `self.queue`.
        let got = unsafe {
            sys::portico_rx_burst(
                port_id,
                self.queue,
                spare.as_mut_ptr().cast::<sys::portico_frame>(),
                n,
                &mut multiseg,
            )
        };
        let got = usize::from(got).min(usize::from(n));
        // SAFETY: the shim initialized the first `got` spare elements.
        unsafe { out.set_len(out.len() + got) };
        if let Some(s) = self.stats.get_mut(usize::from(port)) {
            s.rx_frames += got as u64;
            s.rx_multiseg_dropped += multiseg;
        }
        got
    }

    fn tx_burst(&mut self, port: PortId, frames: &mut Vec<DpdkFrame>) -> usize {
        let Some(&port_id) = self.port_ids.get(usize::from(port)) else {
            return 0;
        };
        let n = frames.len().min(usize::from(u16::MAX)) as u16;
        // SAFETY: `frames` holds at least `n` frames, each owning its mbuf;
        // the PMD takes ownership of the first `sent` (removed below
        // without being touched again). This driver alone uses the queue.
        let sent = unsafe {
            sys::portico_tx_burst(
                port_id,
                self.queue,
                frames.as_ptr().cast::<sys::portico_frame>(),
                n,
            )
        };
        let sent = usize::from(sent).min(frames.len());
        frames.drain(..sent);
        if let Some(s) = self.stats.get_mut(usize::from(port)) {
            s.tx_frames += sent as u64;
            s.tx_ring_full += frames.len() as u64;
        }
        sent
    }

    fn release(&mut self, frame: DpdkFrame) {
        // SAFETY: the frame owned its mbuf and is consumed here.
        unsafe { sys::portico_mbuf_free(frame.0.mbuf) };
    }

    fn frame_from(&mut self, bytes: &[u8]) -> Option<DpdkFrame> {
        let len = u16::try_from(bytes.len()).ok()?;
        let mut raw = sys::portico_frame::default();
        // SAFETY: `bytes` is readable for `len` bytes, `raw` writable; the
        // pool is live (never freed). Mempool gets are thread-safe.
        let rc =
            unsafe { sys::portico_frame_from(self.pool.as_ptr(), bytes.as_ptr(), len, &mut raw) };
        if rc != 0 {
            if let Some(s) = self.stats.first_mut() {
                s.pool_empty += 1;
            }
            return None;
        }
        Some(DpdkFrame(raw))
    }
}
