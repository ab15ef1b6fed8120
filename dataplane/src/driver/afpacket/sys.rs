//! Thin wrappers over the Linux calls the af_packet driver makes: packet
//! sockets and their options, the shared ring mapping, `poll`/`send`, the
//! interface ioctls (`SIOCGIF*`, `SIOCETHTOOL`) and `getifaddrs`.
//!
//! This file holds all of the driver's `unsafe` code. Every wrapper takes and
//! returns plain Rust values (`io::Result`, owned fds, copies of bytes); no
//! reference into memory shared with the kernel leaves it except
//! `&AtomicU32` for the ring status words, which the kernel and user space
//! hand back and forth (`Acquire` loads / `Release` stores).
//!
//! Invariants of [`Region`]: it owns one `MAP_SHARED` mapping of `len` bytes
//! from a successful `mmap(2)` and unmaps it on drop; every accessor checks
//! its offset and length against `len` (and 4-byte alignment for atomics)
//! and returns `None`/`false` instead of touching memory outside the
//! mapping. Which bytes are *meaningful* is the ring protocol's business
//! (see `ring.rs`): reading a slot the kernel owns yields stale bytes, never
//! an out-of-bounds access.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;

/// `ETH_P_ALL` in network byte order, as `sockaddr_ll.sll_protocol` wants it.
pub(super) const ETH_P_ALL_BE: u16 = (libc::ETH_P_ALL as u16).to_be();

fn einval(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
}

/// The interface name as a C string that fits `IFNAMSIZ` with its NUL.
pub(super) fn ifname_c(ifname: &str) -> io::Result<CString> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
        return Err(einval("interface names are 1 to 15 bytes"));
    }
    CString::new(ifname).map_err(|_| einval("interface name contains a NUL byte"))
}

/// The interface index of `ifname` in the calling thread's network namespace.
pub(super) fn if_index(ifname: &str) -> io::Result<u32> {
    let c = ifname_c(ifname)?;
    // SAFETY: `c` is a NUL-terminated string that lives across the call; the
    // function only reads it.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

fn owned_fd(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket(2), is open, and nothing else
    // owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An `AF_PACKET`/`SOCK_RAW` socket bound to no protocol yet: it receives
/// nothing until [`bind_packet`], so rings can be set up first.
pub(super) fn packet_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments; returns a new fd or -1.
    owned_fd(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })
}

/// An `AF_INET` datagram socket, the usual handle for interface ioctls.
pub(super) fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments; returns a new fd or -1.
    owned_fd(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })
}

/// `setsockopt(fd, level, name, &value, sizeof value)`.
///
/// `T` must be a plain C struct or integer (all uses pass `c_int`,
/// `tpacket_req3` or `packet_mreq`).
pub(super) fn setsockopt<T: Copy>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    let len = libc::socklen_t::try_from(size_of::<T>()).map_err(|_| einval("option too large"))?;
    // SAFETY: `value` points to a live, initialised `T` of exactly `len`
    // bytes for the duration of the call; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast::<libc::c_void>(),
            len,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `PACKET_STATISTICS` (V3 layout). Reading resets the kernel's counters.
pub(super) fn packet_statistics(fd: &OwnedFd) -> io::Result<libc::tpacket_stats_v3> {
    let mut stats = libc::tpacket_stats_v3 {
        tp_packets: 0,
        tp_drops: 0,
        tp_freeze_q_cnt: 0,
    };
    let mut len = size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
    // SAFETY: `stats` is a live, writable `tpacket_stats_v3` of `len` bytes
    // and `len` a live socklen_t; the kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut stats as *mut libc::tpacket_stats_v3).cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(stats)
    }
}

/// Read and clear the socket's pending error (`SO_ERROR`), e.g. `ENETDOWN`
/// queued when the interface went down; returns the errno (0 if none).
pub(super) fn take_socket_error(fd: &OwnedFd) -> io::Result<i32> {
    let mut err: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `err` is a live, writable c_int of `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(err)
    }
}

/// Bind a packet socket to `ifindex` for `protocol_be` (network byte order).
pub(super) fn bind_packet(fd: &OwnedFd, ifindex: u32, protocol_be: u16) -> io::Result<()> {
    let ifindex = libc::c_int::try_from(ifindex).map_err(|_| einval("ifindex out of range"))?;
    // SAFETY: sockaddr_ll is plain integers and arrays; all-zero is valid.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as libc::c_ushort;
    sll.sll_protocol = protocol_be;
    sll.sll_ifindex = ifindex;
    // SAFETY: `sll` is a live sockaddr_ll and the length passed is its size;
    // the kernel only reads it.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast::<libc::sockaddr>(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Ask the kernel to transmit every TX ring slot marked `SEND_REQUEST`
/// without waiting for completion (the one syscall of a TX burst).
pub(super) fn kick_tx(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: a NULL buffer of length 0 is valid for send(2) on a packet
    // socket with a TX ring: the kernel reads the frames from the ring.
    let rc = unsafe { libc::send(fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
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
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// The system page size (ring blocks must be multiples of it).
pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(v).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// A shared read/write mapping of a packet socket's RX and TX rings.
pub(super) struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region").field("len", &self.len).finish()
    }
}

// SAFETY: the mapping is owned exclusively by this value (no aliasing Rust
// references exist outside the `&self`/`&mut self` borrows of its methods),
// so moving it to another thread is as safe as moving a `Box<[u8]>`.
unsafe impl Send for Region {}

impl Region {
    /// Map `len` bytes of `fd`'s rings (RX ring first, then TX ring).
    pub(super) fn map(fd: &OwnedFd, len: usize) -> io::Result<Region> {
        if len == 0 {
            return Err(einval("empty ring mapping"));
        }
        // SAFETY: requesting a fresh shared mapping at an address the kernel
        // chooses; no existing memory is affected. The result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| einval("mmap returned NULL"))?;
        Ok(Region { ptr, len })
    }

    /// An anonymous shared mapping standing in for a ring (unit tests of
    /// the ring walks).
    #[cfg(test)]
    pub(super) fn anonymous(len: usize) -> io::Result<Region> {
        if len == 0 {
            return Err(einval("empty mapping"));
        }
        // SAFETY: a fresh anonymous mapping at an address the kernel chooses;
        // no existing memory is affected. The result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| einval("mmap returned NULL"))?;
        Ok(Region { ptr, len })
    }

    #[inline]
    fn in_bounds(&self, off: usize, len: usize) -> bool {
        off.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// The 32-bit status word at `off`, shared with the kernel.
    #[inline]
    pub(super) fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
        if !self.in_bounds(off, 4) || !off.is_multiple_of(4) {
            return None;
        }
        // The mapping is page-aligned, so `off % 4 == 0` means the address is
        // 4-byte aligned.
        // SAFETY: in bounds and aligned (checked above); the mapping lives as
        // long as `&self`; AtomicU32 has the size and alignment of u32, and
        // concurrent access by the kernel to a status word is exactly what
        // atomics are for.
        Some(unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(off).cast::<u32>()) })
    }

    /// A native-endian u32 (kernel ring header field) at `off`.
    #[inline]
    pub(super) fn read_u32(&self, off: usize) -> Option<u32> {
        if !self.in_bounds(off, 4) {
            return None;
        }
        // SAFETY: the 4 bytes at `off` are inside the mapping (checked);
        // read_unaligned has no alignment requirement.
        Some(unsafe { self.ptr.as_ptr().add(off).cast::<u32>().read_unaligned() })
    }

    /// A native-endian u16 (kernel ring header field) at `off`.
    #[inline]
    pub(super) fn read_u16(&self, off: usize) -> Option<u16> {
        if !self.in_bounds(off, 2) {
            return None;
        }
        // SAFETY: the 2 bytes at `off` are inside the mapping (checked).
        Some(unsafe { self.ptr.as_ptr().add(off).cast::<u16>().read_unaligned() })
    }

    /// Store a native-endian u32 at `off`; false if out of bounds.
    #[inline]
    pub(super) fn write_u32(&mut self, off: usize, value: u32) -> bool {
        if !self.in_bounds(off, 4) {
            return false;
        }
        // SAFETY: the 4 bytes at `off` are inside the mapping (checked), and
        // `&mut self` excludes other Rust accesses.
        unsafe {
            self.ptr
                .as_ptr()
                .add(off)
                .cast::<u32>()
                .write_unaligned(value)
        };
        true
    }

    /// Store a native-endian u16 at `off` (unit tests fake kernel headers).
    #[cfg(test)]
    pub(super) fn write_u16(&mut self, off: usize, value: u16) -> bool {
        self.copy_in(off, &value.to_ne_bytes())
    }

    /// Copy `dst.len()` bytes starting at `off` out of the mapping.
    #[inline]
    pub(super) fn copy_out(&self, off: usize, dst: &mut [u8]) -> bool {
        if !self.in_bounds(off, dst.len()) {
            return false;
        }
        // SAFETY: source range inside the mapping (checked); `dst` is a
        // distinct Rust buffer, so the ranges cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        };
        true
    }

    /// Copy `src` into the mapping at `off`.
    #[inline]
    pub(super) fn copy_in(&mut self, off: usize, src: &[u8]) -> bool {
        if !self.in_bounds(off, src.len()) {
            return false;
        }
        // SAFETY: destination range inside the mapping (checked); `src` is a
        // distinct Rust buffer; `&mut self` excludes other Rust accesses.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
        };
        true
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe exactly the mapping made in `map`,
        // which nothing else references once `self` is being dropped.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast::<libc::c_void>(), self.len);
        }
    }
}

fn ifreq_for(ifname: &str) -> io::Result<libc::ifreq> {
    let c = ifname_c(ifname)?;
    // SAFETY: ifreq is plain integers, arrays and a union of such (and a raw
    // pointer); all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in ifr.ifr_name.iter_mut().zip(c.as_bytes()) {
        *dst = src as libc::c_char;
    }
    Ok(ifr)
}

fn ioctl_ifreq(sock: &OwnedFd, request: libc::c_ulong, ifr: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: `ifr` is a live, writable ifreq; the requests used here
    // (SIOCGIFHWADDR, SIOCGIFMTU, SIOCETHTOOL) read the name and write at
    // most one ifreq, or, for SIOCETHTOOL, follow `ifru_data` to the
    // caller's live ethtool struct.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), request as _, ifr as *mut libc::ifreq) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `SIOCGIFHWADDR`: the interface's hardware address and ARPHRD type.
pub(super) fn hw_addr(sock: &OwnedFd, ifname: &str) -> io::Result<([u8; 6], u16)> {
    let mut ifr = ifreq_for(ifname)?;
    ioctl_ifreq(sock, libc::SIOCGIFHWADDR, &mut ifr)?;
    // SAFETY: after a successful SIOCGIFHWADDR the kernel has written the
    // `ifru_hwaddr` member of the union.
    let sa = unsafe { ifr.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (dst, &src) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *dst = src as u8;
    }
    Ok((mac, sa.sa_family))
}

/// `SIOCGIFMTU`.
pub(super) fn mtu(sock: &OwnedFd, ifname: &str) -> io::Result<u32> {
    let mut ifr = ifreq_for(ifname)?;
    ioctl_ifreq(sock, libc::SIOCGIFMTU, &mut ifr)?;
    // SAFETY: after a successful SIOCGIFMTU the kernel has written the
    // `ifru_mtu` member of the union.
    let mtu = unsafe { ifr.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| einval("negative MTU"))
}

/// `struct ethtool_value` of `<linux/ethtool.h>`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// One legacy `SIOCETHTOOL` command carrying an `ethtool_value`
/// (`ETHTOOL_G*`/`ETHTOOL_S*`); returns the `data` the kernel left.
pub(super) fn ethtool_value(sock: &OwnedFd, ifname: &str, cmd: u32, data: u32) -> io::Result<u32> {
    let mut value = EthtoolValue { cmd, data };
    let mut ifr = ifreq_for(ifname)?;
    ifr.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast::<libc::c_char>();
    ioctl_ifreq(sock, libc::SIOCETHTOOL, &mut ifr)?;
    Ok(value.data)
}

/// The IPv4 addresses the kernel has on `ifname` (getifaddrs(3)).
pub(super) fn ipv4_addrs(ifname: &str) -> io::Result<Vec<Ipv4Addr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is a live out-pointer; on success the list is freed
    // below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a non-null node of the list getifaddrs returned,
        // which stays valid until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_name.is_null() || ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: `ifa_name` is a non-null NUL-terminated string owned by
        // the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) };
        if name.to_bytes() != ifname.as_bytes() {
            continue;
        }
        // SAFETY: `ifa_addr` is non-null and points to a sockaddr of the
        // family its `sa_family` says.
        let family = unsafe { (*ifa.ifa_addr).sa_family };
        if i32::from(family) != libc::AF_INET {
            continue;
        }
        // SAFETY: the family is AF_INET, so the address is a sockaddr_in;
        // read_unaligned copies it without alignment assumptions.
        let sin = unsafe { ifa.ifa_addr.cast::<libc::sockaddr_in>().read_unaligned() };
        out.push(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}
