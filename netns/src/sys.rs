//! The syscalls of this crate: entering a namespace, raw `AF_PACKET`
//! sockets. All of the crate's `unsafe` code is here, each block with the
//! reason it is sound; the rest of the crate calls these safe functions.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

/// `ETH_P_ALL` in network byte order, as `socket(2)` and `sockaddr_ll` want it.
const ETH_P_ALL_BE: u16 = (libc::ETH_P_ALL as u16).to_be();

/// The effective user id of the process.
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Move the calling thread into the network namespace whose handle is
/// `path` (e.g. `/var/run/netns/<name>`). Only this thread moves.
pub(crate) fn enter_netns(path: &Path) -> io::Result<()> {
    let file = File::open(path)?;
    // SAFETY: `file` is an open descriptor for the whole call; setns only
    // changes the calling thread's network namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The index of interface `ifname` in the calling thread's namespace.
fn if_index(ifname: &str) -> io::Result<u32> {
    let name = CString::new(ifname).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "an interface name has no NUL byte",
        )
    })?;
    // SAFETY: `name` is a NUL-terminated string alive for the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(index)
}

/// A `SOCK_RAW` packet socket for every protocol, bound to `ifname` (in the
/// calling thread's namespace).
pub(crate) fn packet_socket(ifname: &str) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::c_int::from(ETH_P_ALL_BE),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let ifindex = if_index(ifname)?;
    // SAFETY: sockaddr_ll is plain integers; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETH_P_ALL_BE;
    sll.sll_ifindex = libc::c_int::try_from(ifindex)
        .map_err(|_| io::Error::other(format!("interface index {ifindex} out of range")))?;
    // SAFETY: `sll` is a live sockaddr_ll of the size passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const sll).cast::<libc::sockaddr>(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// `setsockopt(fd, level, name, value)` for a plain-data option value.
fn setsockopt<T: Copy>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points at a live `T` of the size passed, which the
    // kernel only reads.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast::<libc::c_void>(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Frames the socket itself sends are not looped back to it.
pub(crate) fn ignore_outgoing(fd: &OwnedFd) -> io::Result<()> {
    let one: libc::c_int = 1;
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one)
}

/// `recv` gives up after `timeout` (at least a microsecond).
pub(crate) fn set_recv_timeout(fd: &OwnedFd, timeout: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::from(timeout.subsec_micros().max(1)),
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)
}

/// Send `buf` as one frame; the number of bytes the kernel took.
pub(crate) fn send(fd: &OwnedFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live buffer of `buf.len()` bytes the kernel only
    // reads.
    let rc = unsafe {
        libc::send(
            fd.as_raw_fd(),
            buf.as_ptr().cast::<libc::c_void>(),
            buf.len(),
            0,
        )
    };
    usize::try_from(rc).map_err(|_| io::Error::last_os_error())
}

/// Receive one frame into `buf`; its length (truncated to `buf`).
pub(crate) fn recv(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes.
    let rc = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast::<libc::c_void>(),
            buf.len(),
            0,
        )
    };
    usize::try_from(rc).map_err(|_| io::Error::last_os_error())
}
