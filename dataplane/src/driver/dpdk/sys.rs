//! Every DPDK call of the driver, as safe functions over plain Rust values:
//! the EAL, the ethdev API, mbuf pools, the shim's burst calls, and
//! [`DpdkFrame`], a frame in an mbuf. This file holds all of the driver's
//! `unsafe` code; the rest of `driver::dpdk` is safe.
//!
//! The wrappers are `pub(super)`: their callers in this module uphold the
//! invariants listed in the module docs of `driver::dpdk`, which these
//! `SAFETY:` comments rely on:
//! * the EAL is initialized before any other call (an [`super::Eal`]
//!   exists) and at most once ([`eal_init`] is called under `Eal::init`'s
//!   lock, once per process);
//! * port ids come from `rte_eth_dev_get_port_by_name` and queue ids are
//!   below the count the port was configured with;
//! * a queue is polled by one driver, on one thread, at a time
//!   (`DpdkPorts::driver` hands out each worker index once; a
//!   `DpdkDriver` is not `Send`);
//! * a [`DpdkFrame`] owns its mbuf exclusively and leaves by value
//!   (`tx_burst`, `mbuf_free`); mbuf pools are never freed.

#![allow(unsafe_code)]

use super::DpdkError;
use crate::driver::Frame;
use dpdk_sys as ffi;
use std::ffi::{CStr, CString, c_char, c_int};
use std::ptr::NonNull;

pub(super) use ffi::{RTE_PKTMBUF_HEADROOM, SOCKET_ID_ANY, portico_dev_caps, rte_eth_stats};

/// `rte_strerror` of a (positive or negative) error number.
pub(super) fn strerror(errnum: c_int) -> String {
    // SAFETY: rte_strerror accepts any value and returns a pointer to a
    // NUL-terminated string, static or in thread-local storage, valid until
    // the next call on this thread; it is copied out at once.
    let text = unsafe { CStr::from_ptr(ffi::rte_strerror(errnum.abs())) };
    format!("{} ({})", text.to_string_lossy(), errnum.abs())
}

/// `rte_errno` of the calling thread, as text.
pub(super) fn rte_errno_text() -> String {
    // SAFETY: reads a thread-local integer; no preconditions.
    strerror(unsafe { ffi::portico_errno() })
}

/// The CPUs this process may run on (`sched_getaffinity`).
pub(super) fn allowed_cpus() -> Vec<usize> {
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

/// `rte_eal_init` with `args` (program name first). Call at most once per
/// process (`Eal::init` holds its lock around the one call).
pub(super) fn eal_init(args: &[String]) -> Result<(), DpdkError> {
    let mut argv: Vec<*mut c_char> = Vec::with_capacity(args.len() + 1);
    for a in args {
        let c = CString::new(a.as_str()).map_err(|_| DpdkError::NulInArgument(a.clone()))?;
        // The EAL keeps pointers into argv (getopt permutes it, some
        // options are stored as given): the strings live forever.
        argv.push(c.into_raw());
    }
    argv.push(std::ptr::null_mut());
    let argv: &'static mut [*mut c_char] = Box::leak(argv.into_boxed_slice());
    let argc = c_int::try_from(args.len()).unwrap_or(c_int::MAX);
    // SAFETY: argv holds `argc` valid NUL-terminated strings followed by a
    // null pointer, all leaked so they outlive the EAL; the EAL is
    // initialized at most once per process (the caller's contract).
    let rc = unsafe { ffi::rte_eal_init(argc, argv.as_mut_ptr()) };
    if rc < 0 {
        return Err(DpdkError::EalInit {
            args: args.join(" "),
            reason: rte_errno_text(),
        });
    }
    Ok(())
}

/// DPDK ports the EAL probed.
pub(super) fn eth_dev_count_avail() -> u16 {
    // SAFETY: the EAL is initialized (module invariant); no arguments.
    unsafe { ffi::rte_eth_dev_count_avail() }
}

/// The port id of device `name`, or `None` if there is no such port.
pub(super) fn port_by_name(name: &str) -> Result<Option<u16>, DpdkError> {
    let c = CString::new(name).map_err(|_| DpdkError::NulInArgument(name.to_string()))?;
    let mut id: u16 = 0;
    // SAFETY: `c` is NUL-terminated and `id` writable, both live across the
    // call; the EAL is up (module invariant).
    let rc = unsafe { ffi::rte_eth_dev_get_port_by_name(c.as_ptr(), &mut id) };
    Ok((rc == 0).then_some(id))
}

/// A return code of 0 as `Ok`, anything else as the code.
fn check(rc: c_int) -> Result<(), c_int> {
    if rc == 0 { Ok(()) } else { Err(rc) }
}

/// Clamp descriptor counts to what port `port` allows.
pub(super) fn adjust_nb_rx_tx_desc(port: u16, rx: &mut u16, tx: &mut u16) -> Result<(), c_int> {
    // SAFETY: a valid port id (module invariant) and two live, writable
    // u16s.
    check(unsafe { ffi::rte_eth_dev_adjust_nb_rx_tx_desc(port, rx, tx) })
}

/// The NUMA socket of port `port` (negative: unknown).
pub(super) fn dev_socket_id(port: u16) -> c_int {
    // SAFETY: a valid port id (module invariant).
    unsafe { ffi::rte_eth_dev_socket_id(port) }
}

/// An mbuf pool. Never freed: it lives as long as the process (and the
/// EAL), so pointers into its mbufs stay valid.
#[derive(Clone, Copy, Debug)]
pub(super) struct Mempool(NonNull<ffi::rte_mempool>);

// SAFETY: mempool operations (get, put, counts) are multi-producer and
// multi-consumer safe with the default ring ops, and the pool is never
// freed, so the handle may move to and be shared by any thread.
unsafe impl Send for Mempool {}
// SAFETY: see `Send`.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// Mbufs not in the pool (in rings, in frames, in caches).
    pub(super) fn in_use_count(self) -> u32 {
        // SAFETY: a live pool (never freed).
        unsafe { ffi::rte_mempool_in_use_count(self.0.as_ptr()) }
    }
}

/// `rte_pktmbuf_pool_create`; `None` with `rte_errno` set on failure.
pub(super) fn pktmbuf_pool_create(
    name: &CStr,
    mbufs: u32,
    cache: u32,
    data_room: u16,
    socket: c_int,
) -> Option<Mempool> {
    // SAFETY: `name` is NUL-terminated and live across the call (the EAL
    // copies it); the EAL is up (module invariant).
    let mp =
        unsafe { ffi::rte_pktmbuf_pool_create(name.as_ptr(), mbufs, cache, 0, data_room, socket) };
    NonNull::new(mp).map(Mempool)
}

/// What port `port` can do (queues, descriptors, MTU range, driver name).
pub(super) fn dev_caps(port: u16) -> Result<portico_dev_caps, c_int> {
    let mut caps = portico_dev_caps::default();
    // SAFETY: a valid port id (module invariant); `caps` is live and
    // writable.
    check(unsafe { ffi::portico_eth_dev_caps(port, &mut caps) })?;
    Ok(caps)
}

/// Configure a stopped port with `queues` RX and TX queues (RSS and RX
/// checksum offload when the device has them).
pub(super) fn eth_configure(port: u16, queues: u16) -> Result<(), c_int> {
    // SAFETY: a valid, stopped port id (module invariant).
    check(unsafe { ffi::portico_eth_configure(port, queues, queues, 1) })
}

/// Set up RX queue `queue` of a configured, stopped port, filling from
/// `pool`.
pub(super) fn rx_queue_setup(
    port: u16,
    queue: u16,
    desc: u16,
    socket: u32,
    pool: Mempool,
) -> Result<(), c_int> {
    // SAFETY: a configured, stopped port; `queue` below its queue count
    // (module invariant); a NULL conf means the device's defaults; the pool
    // outlives the queue (pools are never freed).
    check(unsafe {
        ffi::rte_eth_rx_queue_setup(port, queue, desc, socket, std::ptr::null(), pool.0.as_ptr())
    })
}

/// Set up TX queue `queue` of a configured, stopped port.
pub(super) fn tx_queue_setup(port: u16, queue: u16, desc: u16, socket: u32) -> Result<(), c_int> {
    // SAFETY: as in `rx_queue_setup`; no pool.
    check(unsafe { ffi::rte_eth_tx_queue_setup(port, queue, desc, socket, std::ptr::null()) })
}

/// `rte_eth_dev_set_mtu`.
pub(super) fn set_mtu(port: u16, mtu: u16) -> Result<(), c_int> {
    // SAFETY: a valid port id (module invariant).
    check(unsafe { ffi::rte_eth_dev_set_mtu(port, mtu) })
}

/// Start a port whose queues are all set up.
pub(super) fn dev_start(port: u16) -> Result<(), c_int> {
    // SAFETY: a configured port with every queue set up (the caller's
    // order of calls in `DpdkPorts::start`).
    check(unsafe { ffi::rte_eth_dev_start(port) })
}

/// Stop a port (no driver polls it any more: every driver holds an `Arc`
/// of the ports, which stop on drop).
pub(super) fn dev_stop(port: u16) {
    // SAFETY: a valid port id; no queue is polled any more (the caller's
    // contract above). Stopping leaves the port configured.
    let _ = unsafe { ffi::rte_eth_dev_stop(port) };
}

/// Promiscuous mode on (not every device has it; the result is ignored:
/// frames for the port's own MAC still arrive).
pub(super) fn promiscuous_enable(port: u16) {
    // SAFETY: a started port (module invariant).
    let _ = unsafe { ffi::rte_eth_promiscuous_enable(port) };
}

/// The port's MAC address.
pub(super) fn mac_addr(port: u16) -> Result<[u8; 6], c_int> {
    let mut mac = ffi::rte_ether_addr::default();
    // SAFETY: a valid port id; `mac` is live and writable.
    check(unsafe { ffi::rte_eth_macaddr_get(port, &mut mac) })?;
    Ok(mac.addr_bytes)
}

/// The port's MTU.
pub(super) fn mtu(port: u16) -> Result<u16, c_int> {
    let mut mtu: u16 = 0;
    // SAFETY: a valid port id; `mtu` is live and writable.
    check(unsafe { ffi::rte_eth_dev_get_mtu(port, &mut mtu) })?;
    Ok(mtu)
}

/// The device counters of a started port (any thread: reading counters
/// while a worker polls is what the ethdev API is for).
pub(super) fn eth_stats(port: u16) -> Option<rte_eth_stats> {
    let mut s = rte_eth_stats::default();
    // SAFETY: a valid, started port; `s` is live and writable.
    check(unsafe { ffi::rte_eth_stats_get(port, &mut s) }).ok()?;
    Some(s)
}

/// Register the calling thread as a non-EAL lcore (so mempool caches serve
/// it) if it has no lcore id yet; returns whether it registered.
pub(super) fn register_thread() -> bool {
    // SAFETY: reads this thread's lcore id; no preconditions.
    if unsafe { ffi::portico_lcore_id() } != u32::MAX {
        return false;
    }
    // SAFETY: the EAL is up; registering a non-EAL thread has no other
    // precondition. A failure (no free lcore) leaves the thread without a
    // mempool cache, which is only slower.
    unsafe { ffi::rte_thread_register() == 0 }
}

/// Undo [`register_thread`]; call on the thread that registered.
pub(super) fn unregister_thread() {
    // SAFETY: the caller registered this thread (a `DpdkDriver` is not
    // `Send`, so its drop runs on the thread that took it).
    unsafe { ffi::rte_thread_unregister() };
}

/// A frame in an mbuf (single segment).
#[derive(Debug)]
#[repr(transparent)]
pub struct DpdkFrame(ffi::portico_frame);

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
    /// Into the mbuf's tailroom (`rte_pktmbuf_append` in the shim).
    #[inline]
    fn extend(&mut self, len: usize) -> bool {
        if self.0.mbuf.is_null() {
            return false;
        }
        let Ok(len) = u16::try_from(len) else {
            return false;
        };
        // SAFETY: the frame owns its single-segment mbuf exclusively (module
        // invariants); the shim only moves the mbuf's tail within its own
        // buffer (the data pointer stays) and updates `len`.
        unsafe { ffi::portico_frame_extend(&mut self.0, len) == 0 }
    }
    fn checksum_verified(&self) -> bool {
        self.0.checksum_verified != 0
    }
}

/// Receive up to `max` frames of queue `queue` of port `port`, appended to
/// `out`; returns how many, and how many chained mbufs the shim dropped.
/// The caller alone polls the queue (module invariant).
#[inline]
pub(super) fn rx_burst(
    port: u16,
    queue: u16,
    out: &mut Vec<DpdkFrame>,
    max: usize,
) -> (usize, u64) {
    if out.capacity() - out.len() < max {
        // Only when the caller's batch is too small (once).
        out.reserve(max);
    }
    let spare = out.spare_capacity_mut();
    let n = max.min(spare.len()).min(usize::from(u16::MAX)) as u16;
    let mut multiseg: u64 = 0;
    // SAFETY: `spare` has room for `n` frames; DpdkFrame is
    // repr(transparent) over portico_frame, so the shim writes whole
    // frames into it. The caller alone polls the queue.
    let got = unsafe {
        ffi::portico_rx_burst(
            port,
            queue,
            spare.as_mut_ptr().cast::<ffi::portico_frame>(),
            n,
            &mut multiseg,
        )
    };
    let got = usize::from(got).min(usize::from(n));
    // SAFETY: the shim initialized the first `got` spare elements.
    unsafe { out.set_len(out.len() + got) };
    (got, multiseg)
}

/// Send frames from the front of `frames` on queue `queue` of port `port`,
/// removing the ones the PMD took (it frees them after sending); returns
/// how many. The caller alone uses the queue (module invariant).
#[inline]
pub(super) fn tx_burst(port: u16, queue: u16, frames: &mut Vec<DpdkFrame>) -> usize {
    let n = frames.len().min(usize::from(u16::MAX)) as u16;
    // SAFETY: `frames` holds at least `n` frames, each owning its mbuf; the
    // PMD takes ownership of the first `sent`, which are removed below
    // without being touched again.
    let sent = unsafe {
        ffi::portico_tx_burst(port, queue, frames.as_ptr().cast::<ffi::portico_frame>(), n)
    };
    let sent = usize::from(sent).min(frames.len());
    frames.drain(..sent);
    sent
}

/// Give a frame's mbuf back to its pool.
#[inline]
pub(super) fn mbuf_free(frame: DpdkFrame) {
    // SAFETY: the frame owned its mbuf and is consumed here.
    unsafe { ffi::portico_mbuf_free(frame.0.mbuf) };
}

/// A frame in a fresh mbuf of `pool` holding a copy of `bytes`; `None`
/// when the pool is empty or `bytes` does not fit an mbuf.
#[inline]
pub(super) fn frame_from(pool: Mempool, bytes: &[u8]) -> Option<DpdkFrame> {
    let len = u16::try_from(bytes.len()).ok()?;
    let mut raw = ffi::portico_frame::default();
    // SAFETY: `bytes` is readable for `len` bytes and `raw` writable; the
    // pool is live (never freed); mempool gets are thread-safe.
    let rc = unsafe { ffi::portico_frame_from(pool.0.as_ptr(), bytes.as_ptr(), len, &mut raw) };
    (rc == 0).then_some(DpdkFrame(raw))
}
