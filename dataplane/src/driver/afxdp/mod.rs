//! The AF_XDP driver: XDP sockets (Documentation/networking/af_xdp.rst)
//! fed by a tiny XDP program that redirects every frame of an RX queue to
//! the socket of that queue ([`bpf`], attached once per interface by
//! [`XdpAttachment`]).
//!
//! One [`AfXdpDriver`] serves one worker: a socket per port, bound to the
//! worker's queue (`queue_id`; worker `w` binds queue `w`, so an interface
//! needs exactly as many RX queues as there are workers). Design:
//!
//! * **UMEM**: one per worker, `umem_frames` chunks of `frame_size` bytes
//!   (aligned mode: 2048 or 4096), shared by all of the worker's ports with
//!   `XDP_SHARED_UMEM` (Linux 5.10+ for different devices): a frame received
//!   on one port is sent out of another by putting its address on that
//!   port's TX ring, without copying. When sharing is off or the kernel
//!   refuses it, each port gets its own UMEM and a frame crossing UMEMs is
//!   copied once into a chunk of the destination's.
//! * **Rings**: each socket has its own fill and completion rings (also
//!   with a shared UMEM) besides RX and TX; sizes from the configuration,
//!   powers of two. The ring protocol is in `ring.rs`.
//! * **RX** (`rx_burst`): up to `max` descriptors from the RX ring, no
//!   syscall; each becomes an [`XdpFrame`] over its chunk. The fill ring is
//!   topped up to its target from the free list in the same call (one
//!   `Release` store), after reclaiming completed TX chunks when the free
//!   list runs low.
//! * **TX** (`tx_burst`): descriptors onto the TX ring, one `Release`
//!   store, then a `sendto` kick only when needed: in copy mode always
//!   (the kernel sends copy-mode frames only from `sendmsg`, at most 32 per
//!   call, so a burst of 64 takes two kicks; at most [`MAX_TX_KICKS`]), in
//!   zero-copy mode only when the kernel set `XDP_RING_NEED_WAKEUP` on the
//!   TX ring (`need_wakeup = true`).
//! * **Frames**: an [`XdpFrame`] owns its chunk until it is sent (the
//!   completion ring returns it) or released (straight back to the free
//!   list). Frames from `frame_from` (handoffs between workers) are copies
//!   into a free chunk.
//! * **Bind flags**: `XDP_ZEROCOPY` / `XDP_COPY` per `zero_copy`
//!   (auto tries zero-copy first; veth and generic XDP only do copy mode),
//!   `XDP_USE_NEED_WAKEUP` per `need_wakeup`; the sockets that share the
//!   UMEM inherit the owner's flags (the kernel rejects flags with
//!   `XDP_SHARED_UMEM`).
//!
//! Invariants: everything is allocated in [`AfXdpDriver::open`]; the
//! packet path never allocates (beyond the caller's `Vec` capacity), locks
//! or panics, `rx_burst` makes no syscall (except a `recvfrom` wake-up when
//! the kernel asks for one on the fill ring) and `tx_burst` at most
//! [`MAX_TX_KICKS`] `sendto`s. Every chunk is in exactly one place: a free
//! list, a fill ring, the kernel (received but not yet consumed, or queued
//! for TX), a completion ring or one frame. A UMEM is never unmapped while
//! a frame still points into it: the driver counts frames out and, if some
//! are still out when it is dropped, leaks the mapping instead.
//!
//! Limits: one buffer per frame (no multi-buffer), so the MTU must fit a
//! chunk minus the 256-byte XDP headroom; no checksum offload information
//! (frames are never `checksum_verified`). On veth, native XDP sees a frame
//! only when the sending peer has TSO off (else the kernel skips the veth
//! NAPI path); generic XDP has no such condition.
//!
//! All `unsafe` code lives in `sys.rs` (and the namespace tests).

pub mod bpf;
pub mod netlink;
pub mod program;

mod ring;
mod sys;
#[cfg(test)]
mod tests;

pub use bpf::XskMap;
pub use program::{AttachedMode, XdpAttachment};

use super::afpacket::prepare;
use super::{Driver, Frame};
use crate::driver::sys::{self as driver_sys, Region};
use crate::packet::PortId;
use crate::wire::MacAddr;
use ring::{Entry, Ring, RingOffsets};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use sys::Chunk;

/// Headroom the kernel leaves before received data in a chunk
/// (`XDP_PACKET_HEADROOM`); frames we build start at the same offset.
pub const XDP_HEADROOM: u32 = 256;
/// Most `sendto` kicks per TX burst (copy mode sends 32 frames per kick).
pub const MAX_TX_KICKS: u32 = 4;
/// Ethernet header plus one VLAN tag plus FCS-less slack: what a frame may
/// exceed the MTU by.
const L2_OVERHEAD: u32 = 18;

/// Why opening a port or attaching the program failed; every variant names
/// what it was about and carries the OS error.
#[derive(Debug, thiserror::Error)]
pub enum AfXdpError {
    #[error("interface {ifname}: not found: {source}")]
    NoSuchInterface { ifname: String, source: io::Error },
    #[error(transparent)]
    Interface(#[from] super::afpacket::AfPacketError),
    #[error("interface {ifname}: opening an AF_XDP socket failed: {source}")]
    Socket { ifname: String, source: io::Error },
    #[error("interface {ifname}: socket option {option} failed: {source}")]
    SocketOption {
        ifname: String,
        option: &'static str,
        source: io::Error,
    },
    #[error("interface {ifname}: mapping the {what} ({len_bytes} bytes) failed: {source}")]
    Mmap {
        ifname: String,
        what: &'static str,
        len_bytes: usize,
        source: io::Error,
    },
    #[error("interface {ifname}: binding queue {queue} ({flags}) failed: {source}")]
    Bind {
        ifname: String,
        queue: u32,
        flags: String,
        source: io::Error,
    },
    #[error("interface {ifname}: {reason}")]
    InvalidConfig { ifname: String, reason: String },
    #[error(
        "interface {ifname} has {queues} RX queue(s) but the gateway runs {workers} worker(s); \
         AF_XDP needs one queue per worker (set workers = {queues}, or change the queues: \
         ethtool -L {ifname} combined {workers}, or numrxqueues for veth)"
    )]
    QueueCount {
        ifname: String,
        queues: u32,
        workers: usize,
    },
    #[error("{what} failed: {source}")]
    Bpf {
        what: &'static str,
        source: io::Error,
    },
    #[error("loading the XDP program failed: {source}; verifier log:\n{log}")]
    Verifier { source: io::Error, log: String },
    #[error("interface {ifname}: attaching the XDP program in {mode} mode failed: {source}")]
    Attach {
        ifname: String,
        mode: String,
        source: io::Error,
    },
    #[error(
        "interface {ifname}: another XDP program is attached (id {id}, name {name:?}); \
         Portico does not replace programs it did not load (detach it: ip link set dev \
         {ifname} xdp off)"
    )]
    ForeignProgram {
        ifname: String,
        id: u32,
        name: String,
    },
    #[error("interface {ifname}: netlink {what} failed: {source}")]
    Netlink {
        ifname: String,
        what: &'static str,
        source: io::Error,
    },
    #[error("interface {ifname}: putting the socket into the XSK map failed: {source}")]
    MapInsert { ifname: String, source: io::Error },
}

fn invalid(ifname: &str, reason: impl Into<String>) -> AfXdpError {
    AfXdpError::InvalidConfig {
        ifname: ifname.to_string(),
        reason: reason.into(),
    }
}

/// Where the XDP program runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XdpMode {
    /// In the NIC driver (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// In the kernel's generic receive path (`XDP_FLAGS_SKB_MODE`).
    Generic,
    /// Native if the driver supports it, else generic.
    #[default]
    Auto,
}

/// Zero-copy (`XDP_ZEROCOPY`: the NIC DMAs into the UMEM) or copy mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ZeroCopy {
    /// Zero-copy where the driver supports it, else copy.
    #[default]
    Auto,
    On,
    Off,
}

/// UMEM and ring sizes of every socket of a driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpRingConfig {
    /// Bytes per UMEM chunk: 2048 or 4096 (aligned mode).
    pub frame_size: u32,
    /// Chunks in the worker's UMEM (per UMEM when not shared).
    pub umem_frames: u32,
    /// Entries of each ring, powers of two.
    pub fill_ring: u32,
    pub completion_ring: u32,
    pub rx_ring: u32,
    pub tx_ring: u32,
}

impl Default for XdpRingConfig {
    fn default() -> Self {
        XdpRingConfig {
            frame_size: 4096,
            umem_frames: 8192,
            fill_ring: 2048,
            completion_ring: 2048,
            rx_ring: 2048,
            tx_ring: 2048,
        }
    }
}

/// One port of a worker.
#[derive(Clone, Debug)]
pub struct AfXdpPortConfig {
    /// Kernel interface name (in the caller's network namespace).
    pub ifname: String,
    /// RX queue the socket binds to.
    pub queue_id: u32,
    /// The interface's XSK map (from its [`XdpAttachment`]); `None` opens
    /// the socket without receiving (tests of TX only).
    pub xsk_map: Option<Arc<XskMap>>,
}

/// Everything one worker's driver needs.
#[derive(Clone, Debug)]
pub struct AfXdpConfig {
    /// Ports in `PortId` order.
    pub ports: Vec<AfXdpPortConfig>,
    pub rings: XdpRingConfig,
    pub zero_copy: ZeroCopy,
    /// `XDP_USE_NEED_WAKEUP`: the kernel says when it needs a syscall.
    pub need_wakeup: bool,
    /// One UMEM for all ports (`XDP_SHARED_UMEM`); falls back to one per
    /// port if the kernel refuses.
    pub shared_umem: bool,
    /// What [`AfXdpDriver::wait_idle`] sleeps at most.
    pub poll_timeout_ms: u32,
}

impl AfXdpConfig {
    /// Defaults for `ports` (interface, queue, map).
    pub fn new(ports: Vec<AfXdpPortConfig>) -> Self {
        AfXdpConfig {
            ports,
            rings: XdpRingConfig::default(),
            zero_copy: ZeroCopy::Auto,
            need_wakeup: true,
            shared_umem: true,
            poll_timeout_ms: 10,
        }
    }
}

/// Per-port counters kept by the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpPortStats {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    /// Frames above MTU + Ethernet header (+ one tag), dropped.
    pub rx_too_big: u64,
    /// RX descriptors outside the UMEM or its chunk (never expected).
    pub rx_ring_errors: u64,
    /// Fill-ring top-ups that found the free list empty.
    pub rx_pool_empty: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Frames above the port's limit handed to `tx_burst`, dropped.
    pub tx_too_big: u64,
    /// Frames `tx_burst` left with the caller (TX ring full or no chunk
    /// for a copy).
    pub tx_ring_full: u64,
    /// Frames copied because they came from another UMEM.
    pub tx_copies: u64,
    /// `sendto` kicks made, and the ones that failed with something other
    /// than `EAGAIN`/`EBUSY`/`ENOBUFS` (the ring is retried later).
    pub tx_kicks: u64,
    pub tx_send_errors: u64,
    /// Socket errors seen while waiting.
    pub socket_errors: u64,
}

/// The kernel's counters of one socket (`XDP_STATISTICS`, cumulative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpKernelStats {
    /// Dropped for other reasons (e.g. too big for a chunk).
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    /// Dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty.
    pub rx_fill_ring_empty: u64,
    pub tx_ring_empty: u64,
}

/// A frame in a UMEM chunk.
#[derive(Debug)]
pub struct XdpFrame {
    chunk: Chunk,
    /// UMEM address of the first byte.
    addr: u64,
    len: u32,
    umem: u8,
}

impl Frame for XdpFrame {
    #[inline]
    fn data(&self) -> &[u8] {
        self.chunk.bytes(self.len as usize)
    }
    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        self.chunk.bytes_mut(self.len as usize)
    }
    #[inline]
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(u32::try_from(len).unwrap_or(u32::MAX));
    }
}

/// A UMEM: the mapping and its free chunks (base addresses).
#[derive(Debug)]
struct Umem {
    map: Region,
    frame_size: u32,
    free: Vec<u64>,
}

impl Umem {
    fn new(ifname: &str, rings: &XdpRingConfig) -> Result<Umem, AfXdpError> {
        let len = rings.umem_frames as usize * rings.frame_size as usize;
        let map = Region::anonymous(len).map_err(|source| AfXdpError::Mmap {
            ifname: ifname.to_string(),
            what: "UMEM",
            len_bytes: len,
            source,
        })?;
        let free = (0..u64::from(rings.umem_frames))
            .rev()
            .map(|i| i * u64::from(rings.frame_size))
            .collect();
        Ok(Umem {
            map,
            frame_size: rings.frame_size,
            free,
        })
    }

    /// The chunk base of a UMEM address.
    #[inline]
    fn base(&self, addr: u64) -> u64 {
        addr - addr % u64::from(self.frame_size)
    }

    /// Put the chunk of `addr` back on the free list. The list never
    /// grows beyond its capacity (every chunk is in one place; a corrupt
    /// duplicate from the kernel is dropped rather than allocating).
    #[inline]
    fn give_back(&mut self, addr: u64) {
        if self.free.len() < self.free.capacity() && addr < self.map.len() as u64 {
            let base = self.base(addr);
            self.free.push(base);
        }
    }

    /// A frame over `len` bytes at `addr` (which must not cross its chunk).
    #[inline]
    fn frame(&self, index: u8, addr: u64, len: u32) -> Option<XdpFrame> {
        let in_chunk = addr % u64::from(self.frame_size);
        let cap = u64::from(self.frame_size) - in_chunk;
        if u64::from(len) > cap {
            return None;
        }
        let chunk = Chunk::new(&self.map, usize::try_from(addr).ok()?, cap as usize)?;
        Some(XdpFrame {
            chunk,
            addr,
            len,
            umem: index,
        })
    }

    /// A free chunk holding a copy of `bytes` at the XDP headroom.
    #[inline]
    fn frame_with(&mut self, index: u8, bytes: &[u8]) -> Option<XdpFrame> {
        if bytes.len() + XDP_HEADROOM as usize > self.frame_size as usize {
            return None;
        }
        let base = self.free.pop()?;
        let len = bytes.len() as u32;
        match self.frame(index, base + u64::from(XDP_HEADROOM), len) {
            Some(mut f) => {
                f.data_mut().copy_from_slice(bytes);
                Some(f)
            }
            None => {
                self.free.push(base);
                None
            }
        }
    }
}

/// One socket on one interface queue.
#[derive(Debug)]
pub struct XdpPort {
    ifname: String,
    ifindex: u32,
    queue_id: u32,
    mac: MacAddr,
    mtu: u32,
    /// Largest frame accepted/sent: MTU + Ethernet header + one tag.
    max_frame: u32,
    umem: u8,
    zero_copy: bool,
    need_wakeup: bool,
    /// Frames to keep in the fill ring.
    fill_target: u32,
    tx_kick_pending: bool,
    stats: XdpPortStats,
    xsk_map: Option<Arc<XskMap>>,
    // Field order is drop order: unmap the rings before closing the socket.
    rx: Ring,
    tx: Ring,
    fill: Ring,
    comp: Ring,
    fd: OwnedFd,
}

impl XdpPort {
    pub fn ifname(&self) -> &str {
        &self.ifname
    }
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }
    pub fn queue_id(&self) -> u32 {
        self.queue_id
    }
    pub fn mac(&self) -> MacAddr {
        self.mac
    }
    pub fn mtu(&self) -> u32 {
        self.mtu
    }
    /// The socket runs in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }
    /// Index of the UMEM the socket uses (equal for ports sharing one).
    pub fn umem_index(&self) -> usize {
        usize::from(self.umem)
    }
    pub fn stats(&self) -> &XdpPortStats {
        &self.stats
    }

    /// The kernel's counters of the socket (a syscall).
    pub fn kernel_stats(&self) -> Result<XdpKernelStats, AfXdpError> {
        let s =
            sys::xdp_statistics(self.fd.as_fd()).map_err(|source| AfXdpError::SocketOption {
                ifname: self.ifname.clone(),
                option: "XDP_STATISTICS",
                source,
            })?;
        Ok(XdpKernelStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty: s.rx_fill_ring_empty_descs,
            tx_ring_empty: s.tx_ring_empty_descs,
        })
    }

    /// Move completed TX chunks to the free list.
    #[inline]
    fn reclaim(&mut self, umem: &mut Umem) {
        let n = self.comp.available(self.comp.size());
        let mut taken = 0;
        while taken < n {
            let Some(addr) = self.comp.peek_addr(taken) else {
                break;
            };
            taken += 1;
            umem.give_back(addr);
        }
        self.comp.release(taken);
    }

    /// Top the fill ring up to its target from the free list.
    #[inline]
    fn refill(&mut self, umem: &mut Umem) {
        let level = self.fill.outstanding();
        let want = self.fill_target.saturating_sub(level);
        if want == 0 {
            return;
        }
        if (umem.free.len() as u32) < want {
            self.reclaim(umem);
        }
        let n = self.fill.free(want).min(umem.free.len() as u32);
        if n < want && umem.free.is_empty() {
            self.stats.rx_pool_empty += 1;
        }
        for _ in 0..n {
            let Some(addr) = umem.free.pop() else { break };
            if !self.fill.push_addr(addr) {
                umem.free.push(addr);
                break;
            }
        }
        self.fill.submit();
        if self.need_wakeup && self.fill.needs_wakeup() {
            let _ = driver_sys::recv_empty(&self.fd);
        }
    }

    /// Kick the TX path: always in copy mode, in zero-copy mode only when
    /// the kernel asks. Repeats while frames stay queued (copy mode sends
    /// 32 per call), at most [`MAX_TX_KICKS`] times.
    #[inline]
    fn kick_tx(&mut self) {
        let needed = !self.zero_copy || !self.need_wakeup || self.tx.needs_wakeup();
        if !needed {
            self.tx_kick_pending = false;
            return;
        }
        for _ in 0..MAX_TX_KICKS {
            self.stats.tx_kicks += 1;
            match driver_sys::send_empty(&self.fd) {
                Ok(()) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS)
                    ) => {}
                Err(_) => {
                    self.stats.tx_send_errors += 1;
                    self.tx_kick_pending = true;
                    return;
                }
            }
            if self.tx.outstanding() == 0 {
                self.tx_kick_pending = false;
                return;
            }
        }
        self.tx_kick_pending = true;
    }
}

/// RX queues of `ifname` as the driver reports them (`ETHTOOL_GCHANNELS`:
/// RX plus combined channels), or 1 when it reports none.
pub fn rx_queue_count(ifname: &str) -> Result<u32, AfXdpError> {
    driver_sys::rx_queue_count(ifname)
        .map(|n| n.filter(|&n| n > 0).unwrap_or(1))
        .map_err(|source| {
            if source.raw_os_error() == Some(libc::ENODEV) {
                AfXdpError::NoSuchInterface {
                    ifname: ifname.to_string(),
                    source,
                }
            } else {
                AfXdpError::SocketOption {
                    ifname: ifname.to_string(),
                    option: "SIOCETHTOOL ETHTOOL_GCHANNELS",
                    source,
                }
            }
        })
}

fn ring_size(ifname: &str, what: &str, v: u32) -> Result<u32, AfXdpError> {
    if v.is_power_of_two() && v >= 64 {
        Ok(v)
    } else {
        Err(invalid(
            ifname,
            format!("{what} {v} must be a power of two, at least 64"),
        ))
    }
}

fn flag_names(flags: u16) -> String {
    let mut names = Vec::new();
    for (bit, name) in [
        (libc::XDP_SHARED_UMEM, "XDP_SHARED_UMEM"),
        (libc::XDP_COPY, "XDP_COPY"),
        (libc::XDP_ZEROCOPY, "XDP_ZEROCOPY"),
        (libc::XDP_USE_NEED_WAKEUP, "XDP_USE_NEED_WAKEUP"),
    ] {
        if flags & bit != 0 {
            names.push(name);
        }
    }
    if names.is_empty() {
        "no flags".into()
    } else {
        names.join("|")
    }
}

/// A socket with its rings set up and mapped, not bound yet.
struct OpenSocket {
    fd: OwnedFd,
    rx: Ring,
    tx: Ring,
    fill: Ring,
    comp: Ring,
}

/// Open a socket; register `umem` on it when given (the UMEM owner), and
/// give it its own fill/completion rings either way.
fn open_socket(
    ifname: &str,
    rings: &XdpRingConfig,
    register: Option<&Umem>,
) -> Result<OpenSocket, AfXdpError> {
    let fd = sys::xdp_socket().map_err(|source| AfXdpError::Socket {
        ifname: ifname.to_string(),
        source,
    })?;
    let opt = |option: &'static str| {
        move |source| AfXdpError::SocketOption {
            ifname: ifname.to_string(),
            option,
            source,
        }
    };
    if let Some(umem) = register {
        let reg = libc::xdp_umem_reg {
            addr: umem.map.addr(),
            len: umem.map.len() as u64,
            chunk_size: umem.frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        driver_sys::setsockopt(&fd, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg)
            .map_err(opt("XDP_UMEM_REG"))?;
    }
    driver_sys::setsockopt(
        &fd,
        libc::SOL_XDP,
        libc::XDP_UMEM_FILL_RING,
        &rings.fill_ring,
    )
    .map_err(opt("XDP_UMEM_FILL_RING"))?;
    driver_sys::setsockopt(
        &fd,
        libc::SOL_XDP,
        libc::XDP_UMEM_COMPLETION_RING,
        &rings.completion_ring,
    )
    .map_err(opt("XDP_UMEM_COMPLETION_RING"))?;
    driver_sys::setsockopt(&fd, libc::SOL_XDP, libc::XDP_RX_RING, &rings.rx_ring)
        .map_err(opt("XDP_RX_RING"))?;
    driver_sys::setsockopt(&fd, libc::SOL_XDP, libc::XDP_TX_RING, &rings.tx_ring)
        .map_err(opt("XDP_TX_RING"))?;
    let off = sys::mmap_offsets(fd.as_fd()).map_err(opt("XDP_MMAP_OFFSETS"))?;
    let map_ring = |what: &'static str,
                    o: &libc::xdp_ring_offset,
                    entry: Entry,
                    size: u32,
                    pgoff: u64|
     -> Result<Ring, AfXdpError> {
        let offsets = RingOffsets::from_kernel(o);
        let len = offsets.map_len(size, entry);
        let map = Region::shared(&fd, len, pgoff).map_err(|source| AfXdpError::Mmap {
            ifname: ifname.to_string(),
            what,
            len_bytes: len,
            source,
        })?;
        Ring::new(map, offsets, entry, size)
            .ok_or_else(|| invalid(ifname, format!("{what} of {size} entries does not fit")))
    };
    let mut rx = map_ring(
        "RX ring",
        &off.rx,
        Entry::Desc,
        rings.rx_ring,
        libc::XDP_PGOFF_RX_RING as u64,
    )?;
    let mut tx = map_ring(
        "TX ring",
        &off.tx,
        Entry::Desc,
        rings.tx_ring,
        libc::XDP_PGOFF_TX_RING as u64,
    )?;
    let mut fill = map_ring(
        "fill ring",
        &off.fr,
        Entry::Addr,
        rings.fill_ring,
        libc::XDP_UMEM_PGOFF_FILL_RING,
    )?;
    let mut comp = map_ring(
        "completion ring",
        &off.cr,
        Entry::Addr,
        rings.completion_ring,
        libc::XDP_UMEM_PGOFF_COMPLETION_RING,
    )?;
    rx.init_consumer();
    comp.init_consumer();
    tx.init_producer();
    fill.init_producer();
    Ok(OpenSocket {
        fd,
        rx,
        tx,
        fill,
        comp,
    })
}

/// One worker's AF_XDP ports.
#[derive(Debug)]
pub struct AfXdpDriver {
    // Field order is drop order: sockets before the UMEMs they use.
    ports: Vec<XdpPort>,
    umems: Vec<Umem>,
    /// Frames handed out (rx, frame_from) and not yet back (tx, release).
    frames_out: usize,
    poll_set: driver_sys::PollSet,
    poll_timeout_ms: u32,
}

impl AfXdpDriver {
    /// Open every port's socket on its queue, set up and fill the rings,
    /// and put each socket into its interface's XSK map. Must run in the
    /// network namespace of the interfaces.
    pub fn open(config: &AfXdpConfig) -> Result<Self, AfXdpError> {
        let rings = &config.rings;
        let first = config.ports.first().map_or("", |p| p.ifname.as_str());
        if !(rings.frame_size == 2048 || rings.frame_size == 4096)
            || rings.frame_size as usize > driver_sys::page_size()
        {
            return Err(invalid(
                first,
                format!(
                    "frame_size {} must be 2048 or 4096 (at most the page size)",
                    rings.frame_size
                ),
            ));
        }
        for (what, v) in [
            ("fill_ring", rings.fill_ring),
            ("completion_ring", rings.completion_ring),
            ("rx_ring", rings.rx_ring),
            ("tx_ring", rings.tx_ring),
        ] {
            ring_size(first, what, v)?;
        }
        let ports_n = config.ports.len().max(1) as u32;
        let umem_count = if config.shared_umem { 1 } else { ports_n };
        let per_umem_ports = ports_n / umem_count;
        let needed = per_umem_ports.saturating_mul(rings.fill_ring.saturating_add(rings.tx_ring));
        if rings.umem_frames < needed || rings.umem_frames > (1 << 20) {
            return Err(invalid(
                first,
                format!(
                    "umem_frames {} must cover the fill and TX rings of {per_umem_ports} \
                     port(s) ({needed}) and be at most 2^20",
                    rings.umem_frames
                ),
            ));
        }
        if config.ports.len() > usize::from(u8::MAX) {
            return Err(invalid(first, "at most 255 ports"));
        }

        let mut umems: Vec<Umem> = Vec::new();
        let mut ports: Vec<XdpPort> = Vec::new();
        for pc in &config.ports {
            let ifname = pc.ifname.as_str();
            let info = prepare::interface_info(ifname)?;
            let max_frame = info.mtu + L2_OVERHEAD;
            if max_frame + XDP_HEADROOM > rings.frame_size {
                return Err(invalid(
                    ifname,
                    format!(
                        "MTU {} does not fit a {}-byte chunk after the {XDP_HEADROOM}-byte \
                         headroom (raise frame_size or lower the MTU)",
                        info.mtu, rings.frame_size
                    ),
                ));
            }
            // Share the first UMEM if asked; fall back to an own UMEM when
            // the kernel refuses the shared bind.
            let mut bound = None;
            if config.shared_umem
                && let Some(owner) = ports.first()
            {
                let s = open_socket(ifname, rings, None)?;
                match sys::bind_xdp(
                    s.fd.as_fd(),
                    info.ifindex,
                    pc.queue_id,
                    libc::XDP_SHARED_UMEM,
                    Some(owner.fd.as_fd()),
                ) {
                    Ok(()) => bound = Some((s, owner.umem, owner.zero_copy, owner.need_wakeup)),
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                    Err(source) => {
                        return Err(AfXdpError::Bind {
                            ifname: ifname.to_string(),
                            queue: pc.queue_id,
                            flags: flag_names(libc::XDP_SHARED_UMEM),
                            source,
                        });
                    }
                }
            }
            let (s, umem, zero_copy, need_wakeup) = match bound {
                Some(b) => b,
                None => {
                    let umem = Umem::new(ifname, rings)?;
                    let s = open_socket(ifname, rings, Some(&umem))?;
                    let zero_copy = bind_own(&s, ifname, info.ifindex, pc.queue_id, config)?;
                    umems.push(umem);
                    (s, (umems.len() - 1) as u8, zero_copy, config.need_wakeup)
                }
            };
            if let Some(map) = &pc.xsk_map {
                map.insert(pc.queue_id, s.fd.as_fd())
                    .map_err(|source| AfXdpError::MapInsert {
                        ifname: ifname.to_string(),
                        source,
                    })?;
            }
            ports.push(XdpPort {
                ifname: ifname.to_string(),
                ifindex: info.ifindex,
                queue_id: pc.queue_id,
                mac: info.mac,
                mtu: info.mtu,
                max_frame,
                umem,
                zero_copy,
                need_wakeup,
                fill_target: 0,
                tx_kick_pending: false,
                stats: XdpPortStats::default(),
                xsk_map: pc.xsk_map.clone(),
                rx: s.rx,
                tx: s.tx,
                fill: s.fill,
                comp: s.comp,
                fd: s.fd,
            });
        }
        // Fill targets: each UMEM's ports keep at most half its chunks in
        // their fill rings; the rest serve TX, handoffs and frames in flight.
        for (ui, umem) in umems.iter_mut().enumerate() {
            let sharing = ports.iter().filter(|p| usize::from(p.umem) == ui).count() as u32;
            let share = (umem.free.len() as u32 / 2) / sharing.max(1);
            for p in ports.iter_mut().filter(|p| usize::from(p.umem) == ui) {
                p.fill_target = share.min(p.fill.size());
                p.refill(umem);
            }
        }
        let poll_set = driver_sys::PollSet::new(ports.iter().map(|p| p.fd.as_fd()));
        Ok(AfXdpDriver {
            ports,
            umems,
            frames_out: 0,
            poll_set,
            poll_timeout_ms: config.poll_timeout_ms,
        })
    }

    pub fn port(&self, port: PortId) -> Option<&XdpPort> {
        self.ports.get(usize::from(port))
    }

    pub fn ports(&self) -> &[XdpPort] {
        &self.ports
    }

    /// Number of UMEMs (1 when every port shares one).
    pub fn umem_count(&self) -> usize {
        self.umems.len()
    }

    /// Free chunks over all UMEMs (leak checks).
    pub fn free_frames(&self) -> usize {
        self.umems.iter().map(|u| u.free.len()).sum()
    }

    /// Frames handed out and not yet returned.
    pub fn frames_out(&self) -> usize {
        self.frames_out
    }

    /// Move completed TX chunks of every port back to the free lists.
    pub fn reclaim_completions(&mut self) {
        for p in &mut self.ports {
            if let Some(u) = self.umems.get_mut(usize::from(p.umem)) {
                p.reclaim(u);
            }
        }
    }

    /// Sleep in `poll(2)` until a socket has frames or `timeout_ms`
    /// passes; returns whether frames are (probably) waiting. Retries TX
    /// kicks left pending first.
    pub fn wait(&mut self, timeout_ms: u32) -> bool {
        let mut ready = false;
        for p in &mut self.ports {
            if p.tx_kick_pending {
                p.kick_tx();
            }
            ready |= p.rx.available(1) > 0;
        }
        if ready {
            return true;
        }
        if !self.poll_set.wait(timeout_ms) {
            return false;
        }
        let mut readable = false;
        for (events, port) in self.poll_set.events().zip(&mut self.ports) {
            if events.error {
                port.stats.socket_errors += 1;
            }
            readable |= events.readable;
        }
        readable
    }

    /// [`Self::wait`] with the configured `poll_timeout_ms`.
    pub fn wait_idle(&mut self) -> bool {
        self.wait(self.poll_timeout_ms)
    }

    /// Counters summed over all ports.
    pub fn total_stats(&self) -> XdpPortStats {
        let mut t = XdpPortStats::default();
        for p in &self.ports {
            let s = &p.stats;
            t.rx_frames += s.rx_frames;
            t.rx_bytes += s.rx_bytes;
            t.rx_too_big += s.rx_too_big;
            t.rx_ring_errors += s.rx_ring_errors;
            t.rx_pool_empty += s.rx_pool_empty;
            t.tx_frames += s.tx_frames;
            t.tx_bytes += s.tx_bytes;
            t.tx_too_big += s.tx_too_big;
            t.tx_ring_full += s.tx_ring_full;
            t.tx_copies += s.tx_copies;
            t.tx_kicks += s.tx_kicks;
            t.tx_send_errors += s.tx_send_errors;
            t.socket_errors += s.socket_errors;
        }
        t
    }

    #[inline]
    fn free_frame(&mut self, frame: XdpFrame) {
        self.frames_out = self.frames_out.saturating_sub(1);
        if let Some(u) = self.umems.get_mut(usize::from(frame.umem)) {
            u.give_back(frame.addr);
        }
    }
}

/// Bind the UMEM owner's socket per `zero_copy`; returns whether it runs
/// zero-copy.
fn bind_own(
    s: &OpenSocket,
    ifname: &str,
    ifindex: u32,
    queue: u32,
    config: &AfXdpConfig,
) -> Result<bool, AfXdpError> {
    let wake = if config.need_wakeup {
        libc::XDP_USE_NEED_WAKEUP
    } else {
        0
    };
    let bind = |flags: u16| {
        sys::bind_xdp(s.fd.as_fd(), ifindex, queue, flags, None).map_err(|source| {
            AfXdpError::Bind {
                ifname: ifname.to_string(),
                queue,
                flags: flag_names(flags),
                source,
            }
        })
    };
    match config.zero_copy {
        ZeroCopy::On => bind(libc::XDP_ZEROCOPY | wake)?,
        ZeroCopy::Off => bind(libc::XDP_COPY | wake)?,
        ZeroCopy::Auto => {
            if bind(libc::XDP_ZEROCOPY | wake).is_err() {
                bind(libc::XDP_COPY | wake)?;
            }
        }
    }
    Ok(sys::xdp_zero_copy(s.fd.as_fd()).unwrap_or(false))
}

impl Drop for AfXdpDriver {
    fn drop(&mut self) {
        for p in &self.ports {
            if let Some(map) = &p.xsk_map {
                // Frames of the queue pass to the kernel until another
                // socket takes the slot; the socket closing would clear it
                // too.
                let _ = map.remove(p.queue_id);
            }
        }
        self.ports.clear();
        if self.frames_out > 0 {
            // Frames still point into the UMEMs: keep the memory mapped.
            for u in std::mem::take(&mut self.umems) {
                std::mem::forget(u);
            }
        }
    }
}

impl Driver for AfXdpDriver {
    type Frame = XdpFrame;

    fn port_count(&self) -> usize {
        self.ports.len()
    }

    fn rx_burst(&mut self, port: PortId, out: &mut Vec<XdpFrame>, max: usize) -> usize {
        let Some(p) = self.ports.get_mut(usize::from(port)) else {
            return 0;
        };
        let Some(umem) = self.umems.get_mut(usize::from(p.umem)) else {
            return 0;
        };
        let want = u32::try_from(max).unwrap_or(u32::MAX);
        let n = p.rx.available(want);
        let mut got = 0usize;
        let mut consumed = 0u32;
        while consumed < n {
            let Some((addr, len)) = p.rx.peek_desc(consumed) else {
                break;
            };
            consumed += 1;
            if addr >= umem.map.len() as u64 {
                p.stats.rx_ring_errors += 1;
                continue;
            }
            if len > p.max_frame {
                p.stats.rx_too_big += 1;
                umem.give_back(addr);
                continue;
            }
            match umem.frame(p.umem, addr, len) {
                Some(f) => {
                    p.stats.rx_frames += 1;
                    p.stats.rx_bytes += u64::from(len);
                    out.push(f);
                    got += 1;
                }
                None => {
                    p.stats.rx_ring_errors += 1;
                    umem.give_back(addr);
                }
            }
        }
        p.rx.release(consumed);
        self.frames_out += got;
        p.refill(umem);
        got
    }

    fn tx_burst(&mut self, port: PortId, frames: &mut Vec<XdpFrame>) -> usize {
        let pi = usize::from(port);
        let Some(p) = self.ports.get_mut(pi) else {
            return 0;
        };
        let pu = usize::from(p.umem);
        let max_frame = p.max_frame;
        if let Some(u) = self.umems.get_mut(pu) {
            p.reclaim(u);
        }
        let room = p.tx.free(u32::try_from(frames.len()).unwrap_or(u32::MAX));
        let mut queued = 0u32;
        let mut taken = 0usize;
        // Frames from other UMEMs are copied; their chunks go back to their
        // own free lists after the loop (two mutable UMEMs at once).
        for f in frames.iter() {
            if f.len > p.max_frame {
                p.stats.tx_too_big += 1;
                taken += 1;
                continue;
            }
            if queued == room {
                break;
            }
            let (addr, len) = if usize::from(f.umem) == pu {
                (f.addr, f.len)
            } else {
                let Some(u) = self.umems.get_mut(pu) else {
                    break;
                };
                let Some(copy) = u.frame_with(p.umem, f.data()) else {
                    break;
                };
                p.stats.tx_copies += 1;
                // The copy's chunk now belongs to the TX ring.
                (copy.addr, copy.len)
            };
            if !p.tx.push_desc(addr, len) {
                break;
            }
            p.stats.tx_frames += 1;
            p.stats.tx_bytes += u64::from(len);
            queued += 1;
            taken += 1;
        }
        p.stats.tx_ring_full += (frames.len() - taken) as u64;
        if queued > 0 {
            p.tx.submit();
        }
        if queued > 0 || p.tx_kick_pending {
            p.kick_tx();
        }
        // Settle the taken frames: same-UMEM frames now belong to the
        // kernel (their chunks come back through the completion ring);
        // too-big and copied ones go back to their free lists.
        for f in frames.drain(..taken) {
            if usize::from(f.umem) == pu && f.len <= max_frame {
                self.frames_out = self.frames_out.saturating_sub(1);
            } else {
                self.free_frame(f);
            }
        }
        taken
    }

    fn release(&mut self, frame: XdpFrame) {
        self.free_frame(frame);
    }

    fn frame_from(&mut self, bytes: &[u8]) -> Option<XdpFrame> {
        let umem = self.ports.first().map_or(0, |p| usize::from(p.umem));
        let f = self.umems.get_mut(umem)?.frame_with(umem as u8, bytes)?;
        self.frames_out += 1;
        Some(f)
    }
}
