//! The Linux calls the kernel-socket drivers (af_packet, AF_XDP) share, in
//! one place: sockets and their options, `poll(2)`, interface ioctls, and
//! the memory mappings of rings and UMEMs.
//!
//! * `fd`: descriptors and sockets (`socket`, `bind`, `setsockopt`,
//!   `getsockopt`, empty `send`/`recv` kicks, `if_nametoindex`, `poll`,
//!   the page size, [`SendBatch`]'s `sendmmsg(2)` of gathered frames, [`RecvBatch`]'s
//!   `recvmmsg(2)` of scattered ones with their `PACKET_AUXDATA`),
//!   and [`Plain`], the types the kernel may write into;
//! * `region`: [`Region`], one `mmap(2)` mapping with bounds-checked
//!   accessors (af_packet's RX/TX rings, AF_XDP's rings and UMEM);
//! * `poll`: [`PollSet`], a driver's sockets waited on together (the idle
//!   sleep of every kernel-socket driver);
//! * `iface`: the interface ioctls (`SIOCGIFHWADDR`, `SIOCGIFMTU`,
//!   `SIOCETHTOOL`, the driver's name among them) and `getifaddrs(3)`;
//! * `tap`: the host path's multi-queue TAP (`TUNSETIFF`, its MAC, MTU
//!   and up flag, non-blocking `read`/`write` of frames), for
//!   [`crate::driver::hostpath`].
//!
//! Only `fd.rs`, `region.rs`, `iface.rs` and `tap.rs` contain `unsafe` code (each
//! opts in with `#![allow(unsafe_code)]`, every block with its `SAFETY:`
//! argument); everything they export takes and returns plain Rust values
//! (`io::Result`, owned fds, copies of bytes), except `&AtomicU32` words
//! shared with the kernel (see [`Region`]). Driver-specific calls stay with
//! their driver (AF_XDP's `bpf(2)`, netlink and UMEM chunks in
//! `afxdp/sys.rs`; DPDK's FFI in `dpdk/sys.rs`).

mod fd;
mod iface;
mod poll;
mod region;
mod tap;

pub(crate) use fd::{
    Plain, Received, RecvBatch, SendBatch, bind, einval, getsockopt, if_index, owned_fd, page_size,
    recv, recv_empty, send_empty, send_to, setsockopt, setsockopt_program, socket,
    take_socket_error, zeroed,
};
pub(crate) use iface::{
    driver_name, ethtool_value, hw_addr, ioctl_socket, ipv4_addrs, mtu, rx_queue_count,
};
pub(crate) use poll::PollSet;
pub(crate) use region::Region;
pub(crate) use tap::{open_tap_queue, read_frame, set_hw_addr, set_mtu, set_up, write_frame};
