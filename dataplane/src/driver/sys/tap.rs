//! The host path's kernel side: a multi-queue TAP interface
//! (`/dev/net/tun`, `TUNSETIFF` with `IFF_TAP | IFF_NO_PI |
//! IFF_MULTI_QUEUE`; `Documentation/networking/tuntap.rst`), its settings
//! through the interface ioctls (`SIOCSIFHWADDR`, `SIOCSIFMTU`,
//! `SIOCGIFFLAGS`/`SIOCSIFFLAGS`), and `read(2)`/`write(2)` of whole
//! Ethernet frames on a queue. Everything acts on the calling thread's
//! network namespace.
//!
//! Invariants: every `ifreq` carries a name that fits `IFNAMSIZ` with its
//! NUL (built by `ifreq_for`); a queue descriptor is non-blocking and
//! close-on-exec, owned by one [`OwnedFd`]; a read or write moves at most
//! the length of the live Rust buffer it is given.
#![allow(unsafe_code)]

use super::fd::{cvt_size, owned_fd, zeroed};
use super::iface::{ifreq_for, ioctl_ifreq};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// `TUNSETIFF` = `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;

/// Open one queue of the multi-queue TAP `ifname`: the first open creates
/// the interface (down, without addresses), each further open attaches
/// one more queue. The interface lives as long as one queue is open (it is
/// not persistent). Non-blocking.
pub(crate) fn open_tap_queue(ifname: &str) -> io::Result<OwnedFd> {
    // SAFETY: the path is a NUL-terminated literal; open has no other
    // memory-safety preconditions.
    let raw = unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    // SAFETY: `raw` was just returned by open and is owned by nobody else.
    let fd = unsafe { owned_fd(raw)? };
    let mut ifr = ifreq_for(ifname)?;
    ifr.ifr_ifru.ifru_flags = IFF_TAP | IFF_NO_PI | IFF_MULTI_QUEUE;
    ioctl_ifreq(&fd, TUNSETIFF, &mut ifr)?;
    Ok(fd)
}

/// `SIOCSIFHWADDR`: set the Ethernet address of `ifname`.
pub(crate) fn set_hw_addr(sock: impl AsFd, ifname: &str, mac: [u8; 6]) -> io::Result<()> {
    let mut ifr = ifreq_for(ifname)?;
    let mut sa: libc::sockaddr = zeroed();
    sa.sa_family = libc::ARPHRD_ETHER;
    for (dst, src) in sa.sa_data.iter_mut().zip(mac) {
        *dst = src as libc::c_char;
    }
    ifr.ifr_ifru.ifru_hwaddr = sa;
    ioctl_ifreq(sock, libc::SIOCSIFHWADDR, &mut ifr)
}

/// `SIOCSIFMTU`: set the MTU of `ifname`.
pub(crate) fn set_mtu(sock: impl AsFd, ifname: &str, mtu: u32) -> io::Result<()> {
    let mut ifr = ifreq_for(ifname)?;
    ifr.ifr_ifru.ifru_mtu = libc::c_int::try_from(mtu).unwrap_or(libc::c_int::MAX);
    ioctl_ifreq(sock, libc::SIOCSIFMTU, &mut ifr)
}

/// Set (`up`) or clear `IFF_UP` on `ifname` (`SIOCGIFFLAGS`, then
/// `SIOCSIFFLAGS` with the other flags kept).
pub(crate) fn set_up(sock: impl AsFd, ifname: &str, up: bool) -> io::Result<()> {
    let sock = sock.as_fd();
    let mut ifr = ifreq_for(ifname)?;
    ioctl_ifreq(sock, libc::SIOCGIFFLAGS, &mut ifr)?;
    // SAFETY: after a successful SIOCGIFFLAGS the kernel has written the
    // `ifru_flags` member (a plain integer either way).
    let flags = unsafe { ifr.ifr_ifru.ifru_flags };
    let up_flag = libc::IFF_UP as libc::c_short;
    ifr.ifr_ifru.ifru_flags = if up {
        flags | up_flag
    } else {
        flags & !up_flag
    };
    ioctl_ifreq(sock, libc::SIOCSIFFLAGS, &mut ifr)
}

/// Write one whole frame to a TAP queue (the kernel receives it on the
/// interface). Non-blocking: `EAGAIN`/`ENOBUFS` when the queue is full,
/// `EIO` when the interface is down.
pub(crate) fn write_frame(fd: impl AsFd, frame: &[u8]) -> io::Result<usize> {
    // SAFETY: `frame` is a live buffer of `frame.len()` bytes; the kernel
    // reads at most that many.
    let rc = unsafe {
        libc::write(
            fd.as_fd().as_raw_fd(),
            frame.as_ptr().cast::<libc::c_void>(),
            frame.len(),
        )
    };
    cvt_size(rc)
}

/// Read one whole frame the kernel sent out of the TAP into `buf`; returns
/// its length. Non-blocking: `EAGAIN` when the queue is empty. A frame
/// longer than `buf` is truncated by the kernel.
pub(crate) fn read_frame(fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes; the
    // kernel writes at most that many.
    let rc = unsafe {
        libc::read(
            fd.as_fd().as_raw_fd(),
            buf.as_mut_ptr().cast::<libc::c_void>(),
            buf.len(),
        )
    };
    cvt_size(rc)
}
