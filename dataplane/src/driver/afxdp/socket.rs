//! Opening an AF_XDP socket: UMEM registration, ring sizes and mappings
//! ([`open_socket`]), the bind with its zero-copy fallback ([`bind_own`]),
//! and the interface's RX queue count ([`rx_queue_count`]).

use super::ring::{Entry, Ring, RingOffsets};
use super::umem::Umem;
use super::{
    AfXdpConfig, AfXdpError, BusyPoll, BusyPollState, XdpRingConfig, ZeroCopy, invalid, sys,
};
use crate::driver::sys::{self as driver_sys, Region};
use std::os::fd::{AsFd, OwnedFd};

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

pub(super) fn ring_size(ifname: &str, what: &str, v: u32) -> Result<u32, AfXdpError> {
    if v.is_power_of_two() && v >= 64 {
        Ok(v)
    } else {
        Err(invalid(
            ifname,
            format!("{what} {v} must be a power of two, at least 64"),
        ))
    }
}

pub(super) fn flag_names(flags: u16) -> String {
    let mut names = Vec::new();
    for (bit, name) in [
        (libc::XDP_SHARED_UMEM, "XDP_SHARED_UMEM"),
        (libc::XDP_COPY, "XDP_COPY"),
        (libc::XDP_ZEROCOPY, "XDP_ZEROCOPY"),
        (libc::XDP_USE_NEED_WAKEUP, "XDP_USE_NEED_WAKEUP"),
        (libc::XDP_USE_SG, "XDP_USE_SG"),
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
pub(super) struct OpenSocket {
    pub(super) fd: OwnedFd,
    pub(super) rx: Ring,
    pub(super) tx: Ring,
    pub(super) fill: Ring,
    pub(super) comp: Ring,
}

/// A new, unconfigured `AF_XDP` socket.
fn new_socket(ifname: &str) -> Result<OwnedFd, AfXdpError> {
    sys::xdp_socket().map_err(|source| AfXdpError::Socket {
        ifname: ifname.to_string(),
        source,
    })
}

/// How a failed socket `option` of `ifname` is reported.
fn option_error(ifname: &str, option: &'static str) -> impl Fn(std::io::Error) -> AfXdpError {
    move |source| AfXdpError::SocketOption {
        ifname: ifname.to_string(),
        option,
        source,
    }
}

/// Open a socket; register `umem` on it when given (the UMEM owner), and
/// give it its own fill/completion rings either way.
pub(super) fn open_socket(
    ifname: &str,
    rings: &XdpRingConfig,
    register: Option<&Umem>,
) -> Result<OpenSocket, AfXdpError> {
    let fd = new_socket(ifname)?;
    let opt = |option| option_error(ifname, option);
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
    let map_ring = |what, o, entry, size, pgoff| map_ring(&fd, ifname, what, o, entry, size, pgoff);
    let mut rx = map_rx_ring(&fd, ifname, &off, rings)?;
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

/// Map one ring of `fd` (`o`: its offsets from `XDP_MMAP_OFFSETS`).
fn map_ring(
    fd: &OwnedFd,
    ifname: &str,
    what: &'static str,
    o: &libc::xdp_ring_offset,
    entry: Entry,
    size: u32,
    pgoff: u64,
) -> Result<Ring, AfXdpError> {
    let offsets = RingOffsets::from_kernel(o);
    let len = offsets.map_len(size, entry);
    let map = Region::shared(fd, len, pgoff).map_err(|source| AfXdpError::Mmap {
        ifname: ifname.to_string(),
        what,
        len_bytes: len,
        source,
    })?;
    Ring::new(map, offsets, entry, size)
        .ok_or_else(|| invalid(ifname, format!("{what} of {size} entries does not fit")))
}

/// Map the RX ring of `fd`.
fn map_rx_ring(
    fd: &OwnedFd,
    ifname: &str,
    off: &libc::xdp_mmap_offsets,
    rings: &XdpRingConfig,
) -> Result<Ring, AfXdpError> {
    map_ring(
        fd,
        ifname,
        "RX ring",
        &off.rx,
        Entry::Desc,
        rings.rx_ring,
        libc::XDP_PGOFF_RX_RING as u64,
    )
}

/// A socket with an RX ring only, not bound: what joins the buffer pool of
/// a socket already bound to the same (device, queue), whose fill and
/// completion rings it then shares (the kernel refuses own ones there).
pub(super) fn open_rx_socket(
    ifname: &str,
    rings: &XdpRingConfig,
) -> Result<(OwnedFd, Ring), AfXdpError> {
    let fd = new_socket(ifname)?;
    let opt = |option| option_error(ifname, option);
    driver_sys::setsockopt(&fd, libc::SOL_XDP, libc::XDP_RX_RING, &rings.rx_ring)
        .map_err(opt("XDP_RX_RING"))?;
    let off = sys::mmap_offsets(fd.as_fd()).map_err(opt("XDP_MMAP_OFFSETS"))?;
    let mut rx = map_rx_ring(&fd, ifname, &off, rings)?;
    rx.init_consumer();
    Ok((fd, rx))
}

/// Bind the UMEM owner's socket per `zero_copy`, with `XDP_USE_SG` when
/// `sg` (the sockets sharing its UMEM inherit it); returns whether it runs
/// zero-copy.
pub(super) fn bind_own(
    s: &OpenSocket,
    ifname: &str,
    ifindex: u32,
    queue: u32,
    config: &AfXdpConfig,
    sg: bool,
) -> Result<bool, AfXdpError> {
    let wake = if config.need_wakeup {
        libc::XDP_USE_NEED_WAKEUP
    } else {
        0
    } | if sg { libc::XDP_USE_SG } else { 0 };
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

/// Ask for busy polling on `fd` (see [`BusyPoll`]); the first option the
/// kernel refuses ends the attempt (the socket then works as without).
pub(super) fn enable_busy_poll(fd: impl AsFd, busy_poll: Option<BusyPoll>) -> BusyPollState {
    let Some(bp) = busy_poll else {
        return BusyPollState::Off;
    };
    let clamp = |v: u32| libc::c_int::try_from(v).unwrap_or(libc::c_int::MAX);
    for (option, name, value) in [
        (libc::SO_PREFER_BUSY_POLL, "SO_PREFER_BUSY_POLL", 1),
        (libc::SO_BUSY_POLL, "SO_BUSY_POLL", clamp(bp.us)),
        (
            libc::SO_BUSY_POLL_BUDGET,
            "SO_BUSY_POLL_BUDGET",
            clamp(bp.budget),
        ),
    ] {
        if let Err(e) = driver_sys::setsockopt(fd.as_fd(), libc::SOL_SOCKET, option, &value) {
            return BusyPollState::Refused {
                option: name,
                errno: e.raw_os_error().unwrap_or(0),
            };
        }
    }
    BusyPollState::On
}
