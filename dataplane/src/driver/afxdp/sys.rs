//! Thin wrappers over the Linux calls the AF_XDP driver makes: `AF_XDP`
//! sockets and their options, the ring and UMEM mappings, `sendto`/`poll`,
//! the `bpf(2)` commands, netlink sockets and the `ETHTOOL_GCHANNELS` ioctl.
//!
//! This file holds all of the driver's `unsafe` code (besides the namespace
//! tests). Every wrapper takes and returns plain Rust values; no reference
//! into memory shared with the kernel leaves it except `&AtomicU32` for the
//! ring producer/consumer/flags words, which the kernel and user space hand
//! back and forth (`Acquire` loads / `Release` stores).
//!
//! Invariants:
//! * [`Mapping`] owns one `mmap(2)` region of `len` bytes and unmaps it on
//!   drop; every accessor checks offset, length and alignment against it.
//! * [`Chunk`] is a view of one UMEM chunk handed out by the driver. The
//!   driver hands each chunk to at most one owner at a time (the kernel via
//!   a fill or TX ring, or one frame), and never unmaps a UMEM while a
//!   chunk of it is outside the driver (it leaks the mapping instead, see
//!   `Umem` in `mod.rs`), so a `Chunk`'s bytes are always mapped and never
//!   aliased by another Rust reference.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;

fn einval(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
}

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn owned_fd(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by a syscall that creates a descriptor,
    // is open, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The interface index of `ifname` in the calling thread's namespace.
pub(super) fn if_index(ifname: &str) -> io::Result<u32> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
        return Err(einval("interface names are 1 to 15 bytes"));
    }
    let c =
        std::ffi::CString::new(ifname).map_err(|_| einval("interface name contains a NUL byte"))?;
    // SAFETY: `c` is a NUL-terminated string alive across the call; the
    // function only reads it.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

/// A new `AF_XDP` socket.
pub(super) fn xdp_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments; returns a new fd or -1.
    owned_fd(unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })
}

/// A netlink route socket.
pub(super) fn netlink_route_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments; returns a new fd or -1.
    owned_fd(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    })
}

/// An `AF_INET` datagram socket for interface ioctls.
fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments; returns a new fd or -1.
    owned_fd(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })
}

/// `setsockopt(fd, level, name, &value, sizeof value)`; `T` is a plain C
/// struct or integer.
pub(super) fn setsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    let len = libc::socklen_t::try_from(size_of::<T>()).map_err(|_| einval("option too large"))?;
    // SAFETY: `value` points to a live, initialised `T` of exactly `len`
    // bytes for the duration of the call; the kernel only reads it.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast::<libc::c_void>(),
            len,
        )
    })
    .map(drop)
}

/// `getsockopt` into a zeroed `T`; returns the value and the length the
/// kernel wrote.
fn getsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    mut value: T,
) -> io::Result<(T, usize)> {
    let mut len =
        libc::socklen_t::try_from(size_of::<T>()).map_err(|_| einval("option too large"))?;
    // SAFETY: `value` is a live, writable `T` of `len` bytes and `len` a
    // live socklen_t; the kernel writes at most `len` bytes.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut T).cast::<libc::c_void>(),
            &mut len,
        )
    })?;
    Ok((value, len as usize))
}

/// `XDP_MMAP_OFFSETS`: where producer, consumer, flags and descriptors sit
/// in each ring's mapping. Refuses kernels older than 5.4 (no flags word).
pub(super) fn mmap_offsets(fd: BorrowedFd<'_>) -> io::Result<libc::xdp_mmap_offsets> {
    // SAFETY: xdp_mmap_offsets is plain integers; all-zero is valid.
    let zero: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
    let (off, len) = getsockopt(fd, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS, zero)?;
    if len != size_of::<libc::xdp_mmap_offsets>() {
        return Err(io::Error::other(
            "XDP_MMAP_OFFSETS without ring flags (kernel older than 5.4)",
        ));
    }
    Ok(off)
}

/// `XDP_STATISTICS` (the kernel's counters since the socket was bound).
pub(super) fn xdp_statistics(fd: BorrowedFd<'_>) -> io::Result<libc::xdp_statistics> {
    // SAFETY: xdp_statistics is plain integers; all-zero is valid.
    let zero: libc::xdp_statistics = unsafe { std::mem::zeroed() };
    getsockopt(fd, libc::SOL_XDP, libc::XDP_STATISTICS, zero).map(|(s, _)| s)
}

/// `XDP_OPTIONS`: whether the bound socket runs in zero-copy mode.
pub(super) fn xdp_zero_copy(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let (o, _) = getsockopt(
        fd,
        libc::SOL_XDP,
        libc::XDP_OPTIONS,
        libc::xdp_options { flags: 0 },
    )?;
    Ok(o.flags & libc::XDP_OPTIONS_ZEROCOPY != 0)
}

/// Bind an `AF_XDP` socket to `(ifindex, queue_id)`.
pub(super) fn bind_xdp(
    fd: BorrowedFd<'_>,
    ifindex: u32,
    queue_id: u32,
    flags: u16,
    shared_umem_fd: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let sxdp = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue_id,
        sxdp_shared_umem_fd: shared_umem_fd.map_or(0, |f| f.as_raw_fd() as u32),
    };
    // SAFETY: `sxdp` is a live sockaddr_xdp and the length passed is its
    // size; the kernel only reads it.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sxdp as *const libc::sockaddr_xdp).cast::<libc::sockaddr>(),
            size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Wake the kernel's TX path of an `AF_XDP` socket (the one syscall of a
/// TX burst, made only when needed).
pub(super) fn kick_tx(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a NULL buffer of length 0 with no address is valid for
    // sendto(2) on an AF_XDP socket: the kernel reads frames from the TX
    // ring.
    let rc = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Wake the kernel's RX path (fill ring refilled while `need_wakeup`):
/// `recvfrom` with no buffer, as libxdp does.
pub(super) fn kick_rx(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a NULL buffer of length 0 and no address is valid for
    // recvfrom(2) on an AF_XDP socket; the kernel writes nothing.
    let rc = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `poll(2)` over `fds`; returns how many have events (0 on timeout).
pub(super) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    let nfds = libc::nfds_t::try_from(fds.len()).map_err(|_| einval("too many fds"))?;
    // SAFETY: `fds` is a live, writable slice of `nfds` pollfd structs; the
    // kernel writes only their `revents` fields.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), nfds, timeout_ms) };
    cvt(rc).map(|n| n as usize)
}

/// The system page size.
pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(v).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// `struct ethtool_channels` of `<linux/ethtool.h>`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// RX queues of `ifname` (`ETHTOOL_GCHANNELS`: rx + combined channels);
/// `None` when the device does not report channels.
pub(super) fn rx_queue_count(ifname: &str) -> io::Result<Option<u32>> {
    let sock = ioctl_socket()?;
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
        return Err(einval("interface names are 1 to 15 bytes"));
    }
    // SAFETY: ifreq is plain integers, arrays and a union of such (and a raw
    // pointer); all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in ifr.ifr_name.iter_mut().zip(ifname.as_bytes()) {
        *dst = src as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&mut ch as *mut EthtoolChannels).cast::<libc::c_char>();
    // SAFETY: `ifr` is a live ifreq whose `ifru_data` points to the live
    // `ch`, which SIOCETHTOOL ETHTOOL_GCHANNELS reads and writes in full.
    let rc = unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCETHTOOL as _,
            &mut ifr as *mut libc::ifreq,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(ch.rx_count + ch.combined_count))
}

/// A memory mapping: a ring of a socket or a UMEM.
pub(super) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping").field("len", &self.len).finish()
    }
}

// SAFETY: the mapping is owned by this value (no Rust references into it
// outlive the borrows of its methods, `Chunk`s excepted, which the driver
// accounts for), so moving it to another thread is like moving a Box.
unsafe impl Send for Mapping {}

impl Mapping {
    fn map(fd: Option<RawFd>, len: usize, offset: u64) -> io::Result<Mapping> {
        if len == 0 {
            return Err(einval("empty mapping"));
        }
        let offset = libc::off_t::try_from(offset).map_err(|_| einval("offset too large"))?;
        let (flags, fd) = match fd {
            Some(fd) => (libc::MAP_SHARED | libc::MAP_POPULATE, fd),
            None => (
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
            ),
        };
        // SAFETY: a fresh mapping at an address the kernel chooses; no
        // existing memory is affected. The result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| einval("mmap returned NULL"))?;
        Ok(Mapping { ptr, len })
    }

    /// Map `len` bytes of a socket's ring at page offset `pgoff`
    /// (`XDP_PGOFF_RX_RING`, ...).
    pub(super) fn ring(fd: BorrowedFd<'_>, len: usize, pgoff: u64) -> io::Result<Mapping> {
        Mapping::map(Some(fd.as_raw_fd()), len, pgoff)
    }

    /// Anonymous private memory (the UMEM; ring stand-ins in unit tests).
    pub(super) fn anonymous(len: usize) -> io::Result<Mapping> {
        Mapping::map(None, len, 0)
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Start address (for `XDP_UMEM_REG`).
    pub(super) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    #[inline]
    fn in_bounds(&self, off: usize, len: usize) -> bool {
        off.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// The 32-bit word at `off`, shared with the kernel.
    #[inline]
    pub(super) fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
        if !self.in_bounds(off, 4) || !off.is_multiple_of(4) {
            return None;
        }
        // SAFETY: in bounds and 4-byte aligned (the mapping is page-aligned);
        // the mapping lives as long as `&self`; concurrent access by the
        // kernel to a ring index is what atomics are for.
        Some(unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(off).cast::<u32>()) })
    }

    /// A native-endian u64 at `off` (a fill/completion ring entry).
    #[inline]
    pub(super) fn read_u64(&self, off: usize) -> Option<u64> {
        if !self.in_bounds(off, 8) {
            return None;
        }
        // SAFETY: the 8 bytes at `off` are inside the mapping (checked).
        Some(unsafe { self.ptr.as_ptr().add(off).cast::<u64>().read_unaligned() })
    }

    #[inline]
    pub(super) fn write_u64(&mut self, off: usize, value: u64) -> bool {
        if !self.in_bounds(off, 8) {
            return false;
        }
        // SAFETY: the 8 bytes at `off` are inside the mapping (checked);
        // `&mut self` excludes other Rust accesses.
        unsafe {
            self.ptr
                .as_ptr()
                .add(off)
                .cast::<u64>()
                .write_unaligned(value)
        };
        true
    }

    /// An `xdp_desc` (addr, len) at `off` (an RX/TX ring entry).
    #[inline]
    pub(super) fn read_desc(&self, off: usize) -> Option<(u64, u32)> {
        let addr = self.read_u64(off)?;
        if !self.in_bounds(off + 8, 4) {
            return None;
        }
        // SAFETY: the 4 bytes at `off + 8` are inside the mapping (checked).
        let len = unsafe {
            self.ptr
                .as_ptr()
                .add(off + 8)
                .cast::<u32>()
                .read_unaligned()
        };
        Some((addr, len))
    }

    #[inline]
    pub(super) fn write_desc(&mut self, off: usize, addr: u64, len: u32) -> bool {
        if !self.in_bounds(off, 16) {
            return false;
        }
        // SAFETY: the 16 bytes of the descriptor are inside the mapping
        // (checked); `&mut self` excludes other Rust accesses.
        unsafe {
            let p = self.ptr.as_ptr().add(off);
            p.cast::<u64>().write_unaligned(addr);
            p.add(8).cast::<u32>().write_unaligned(len);
            p.add(12).cast::<u32>().write_unaligned(0);
        }
        true
    }

    /// A view of `len` bytes at `off` of a UMEM, handed out as one chunk.
    /// The caller (the driver's chunk accounting) guarantees that no other
    /// `Chunk` of the same bytes exists and the kernel does not own them.
    #[inline]
    pub(super) fn chunk(&self, off: usize, len: usize) -> Option<Chunk> {
        if !self.in_bounds(off, len) {
            return None;
        }
        // SAFETY: `off` is inside the mapping (checked), so the pointer is
        // non-null and in bounds.
        let ptr = unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(off)) };
        Some(Chunk { ptr, cap: len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe exactly the mapping made in `map`,
        // which nothing references once `self` is dropped (the driver leaks
        // UMEM mappings whose chunks are still out instead of dropping them).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast::<libc::c_void>(), self.len);
        }
    }
}

/// `cap` bytes of one UMEM chunk, owned by one frame.
pub(super) struct Chunk {
    ptr: NonNull<u8>,
    cap: usize,
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunk").field("cap", &self.cap).finish()
    }
}

impl Chunk {
    /// The first `len` bytes (clamped to the chunk).
    #[inline]
    pub(super) fn bytes(&self, len: usize) -> &[u8] {
        // SAFETY: `ptr..ptr+cap` lies inside a live UMEM mapping (made by
        // `Mapping::chunk`; the driver never unmaps a UMEM while chunks are
        // out) and no other reference to these bytes exists (module
        // invariant); `len` is clamped to `cap`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), len.min(self.cap)) }
    }

    #[inline]
    pub(super) fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), len.min(self.cap)) }
    }
}

// ---------------------------------------------------------------- bpf(2)

pub(super) const BPF_MAP_CREATE: u32 = 0;
pub(super) const BPF_MAP_UPDATE_ELEM: u32 = 2;
pub(super) const BPF_MAP_DELETE_ELEM: u32 = 3;
pub(super) const BPF_PROG_LOAD: u32 = 5;
pub(super) const BPF_PROG_GET_FD_BY_ID: u32 = 13;
pub(super) const BPF_OBJ_GET_INFO_BY_FD: u32 = 15;
pub(super) const BPF_LINK_CREATE: u32 = 28;

/// `bpf(cmd, attr, sizeof attr)`; `A` is a `#[repr(C)]` prefix of
/// `union bpf_attr` whose unused bytes are zero. Returns the result (an fd
/// for the commands that create one).
pub(super) fn bpf<A: Copy>(cmd: u32, attr: &mut A) -> io::Result<libc::c_int> {
    // SAFETY: `attr` is a live, writable `A` of the size passed; each
    // caller's `A` matches the layout the kernel expects for `cmd`, and the
    // pointers inside it refer to live buffers of the lengths given.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            (attr as *mut A).cast::<libc::c_void>(),
            size_of::<A>() as libc::c_long,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        libc::c_int::try_from(rc).map_err(|_| einval("bpf returned an out-of-range value"))
    }
}

/// [`bpf`] for commands that return a new fd.
pub(super) fn bpf_fd<A: Copy>(cmd: u32, attr: &mut A) -> io::Result<OwnedFd> {
    let fd = bpf(cmd, attr)?;
    owned_fd(fd)
}

// ---------------------------------------------------------------- netlink

/// Send one netlink request and collect the answer datagrams until the
/// kernel's ACK/error (or the end of a dump) in `out`.
pub(super) fn netlink_send(sock: &OwnedFd, msg: &[u8]) -> io::Result<()> {
    // SAFETY: sockaddr_nl is plain integers; all-zero is valid (and with
    // the family set it addresses the kernel).
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: `msg` is a live buffer of `msg.len()` bytes and `sa` a live
    // sockaddr_nl of the size passed; the kernel only reads both.
    let rc = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            msg.as_ptr().cast::<libc::c_void>(),
            msg.len(),
            0,
            (&sa as *const libc::sockaddr_nl).cast::<libc::sockaddr>(),
            size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One datagram from a netlink socket into `buf`; returns its length.
pub(super) fn netlink_recv(sock: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes.
    let rc = unsafe {
        libc::recv(
            sock.as_raw_fd(),
            buf.as_mut_ptr().cast::<libc::c_void>(),
            buf.len(),
            0,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}
