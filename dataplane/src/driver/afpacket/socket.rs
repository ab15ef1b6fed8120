//! The packet-socket calls of the driver (`AF_PACKET`/`SOCK_RAW`), over
//! the shared wrappers in [`crate::driver::sys`]. No `unsafe` here.

use crate::driver::sys;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

/// `ETH_P_ALL` in network byte order, as `sockaddr_ll.sll_protocol` wants it.
pub(super) const ETH_P_ALL_BE: u16 = (libc::ETH_P_ALL as u16).to_be();

/// An `AF_PACKET`/`SOCK_RAW` socket bound to no protocol yet: it receives
/// nothing until [`bind_packet`], so rings can be set up first.
pub(super) fn packet_socket() -> io::Result<OwnedFd> {
    sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0)
}

/// Bind a packet socket to `ifindex` for `protocol_be` (network byte order).
pub(super) fn bind_packet(fd: impl AsFd, ifindex: u32, protocol_be: u16) -> io::Result<()> {
    let ifindex =
        libc::c_int::try_from(ifindex).map_err(|_| sys::einval("ifindex out of range"))?;
    let sll = libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as libc::c_ushort,
        sll_protocol: protocol_be,
        sll_ifindex: ifindex,
        ..sys::zeroed()
    };
    sys::bind(fd, &sll)
}

/// `PACKET_STATISTICS` (V3 layout). Reading resets the kernel's counters.
pub(super) fn packet_statistics(fd: impl AsFd) -> io::Result<libc::tpacket_stats_v3> {
    let zero: libc::tpacket_stats_v3 = sys::zeroed();
    sys::getsockopt(fd, libc::SOL_PACKET, libc::PACKET_STATISTICS, zero).map(|(s, _)| s)
}

/// Ask the kernel to transmit every TX ring slot marked `SEND_REQUEST`
/// without waiting for completion (the one syscall of a TX burst).
pub(super) fn kick_tx(fd: impl AsFd) -> io::Result<()> {
    sys::send_empty(fd)
}
