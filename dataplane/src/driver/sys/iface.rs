//! Interface facts and settings through the legacy ioctls (`SIOCGIFHWADDR`,
//! `SIOCGIFMTU`, `SIOCETHTOOL` with `ethtool_value`, `ethtool_drvinfo` and
//! `ethtool_channels`)
//! and `getifaddrs(3)`. Everything acts on the calling thread's network
//! namespace.
//!
//! Invariants: every `ifreq` carries a name that fits `IFNAMSIZ` with its
//! NUL; a `SIOCETHTOOL` request points `ifru_data` at a live ethtool struct
//! of the layout its command expects, for the duration of the call.
#![allow(unsafe_code)]

use super::fd::{einval, ifname_c, socket, zeroed};
use std::ffi::CStr;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// An `AF_INET` datagram socket, the usual handle for interface ioctls.
pub(crate) fn ioctl_socket() -> io::Result<OwnedFd> {
    socket(libc::AF_INET, libc::SOCK_DGRAM, 0)
}

pub(super) fn ifreq_for(ifname: &str) -> io::Result<libc::ifreq> {
    let c = ifname_c(ifname)?;
    let mut ifr: libc::ifreq = zeroed();
    for (dst, &src) in ifr.ifr_name.iter_mut().zip(c.as_bytes()) {
        *dst = src as libc::c_char;
    }
    Ok(ifr)
}

pub(super) fn ioctl_ifreq(
    sock: impl AsFd,
    request: libc::c_ulong,
    ifr: &mut libc::ifreq,
) -> io::Result<()> {
    // SAFETY: `ifr` is a live, writable ifreq; the requests used here
    // (SIOCGIFHWADDR, SIOCGIFMTU, SIOCETHTOOL; the TAP module's
    // TUNSETIFF, SIOCSIFHWADDR, SIOCSIFMTU, SIOCGIFFLAGS, SIOCSIFFLAGS)
    // read the name and at most one ifreq and write at most one ifreq, or,
    // for SIOCETHTOOL, follow `ifru_data` to the caller's live ethtool
    // struct (module invariant).
    let rc = unsafe {
        libc::ioctl(
            sock.as_fd().as_raw_fd(),
            request as _,
            ifr as *mut libc::ifreq,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `SIOCGIFHWADDR`: the interface's hardware address and ARPHRD type.
pub(crate) fn hw_addr(sock: impl AsFd, ifname: &str) -> io::Result<([u8; 6], u16)> {
    let mut ifr = ifreq_for(ifname)?;
    ioctl_ifreq(sock, libc::SIOCGIFHWADDR, &mut ifr)?;
    // SAFETY: after a successful SIOCGIFHWADDR the kernel has written the
    // `ifru_hwaddr` member of the union (plain integers either way).
    let sa = unsafe { ifr.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (dst, &src) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *dst = src as u8;
    }
    Ok((mac, sa.sa_family))
}

/// `SIOCGIFMTU`.
pub(crate) fn mtu(sock: impl AsFd, ifname: &str) -> io::Result<u32> {
    let mut ifr = ifreq_for(ifname)?;
    ioctl_ifreq(sock, libc::SIOCGIFMTU, &mut ifr)?;
    // SAFETY: after a successful SIOCGIFMTU the kernel has written the
    // `ifru_mtu` member of the union (an integer either way).
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
pub(crate) fn ethtool_value(sock: impl AsFd, ifname: &str, cmd: u32, data: u32) -> io::Result<u32> {
    let mut value = EthtoolValue { cmd, data };
    let mut ifr = ifreq_for(ifname)?;
    ifr.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast::<libc::c_char>();
    ioctl_ifreq(sock, libc::SIOCETHTOOL, &mut ifr)?;
    Ok(value.data)
}

/// `struct ethtool_drvinfo` of `<linux/ethtool.h>`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct EthtoolDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

const ETHTOOL_GDRVINFO: u32 = 0x3;

/// The name of `ifname`'s kernel driver (`ETHTOOL_GDRVINFO`: `"veth"`,
/// `"virtio_net"`, `"mlx5_core"`, ...).
pub(crate) fn driver_name(sock: impl AsFd, ifname: &str) -> io::Result<String> {
    let mut info = EthtoolDrvinfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        version: [0; 32],
        fw_version: [0; 32],
        bus_info: [0; 32],
        erom_version: [0; 32],
        reserved2: [0; 12],
        n_priv_flags: 0,
        n_stats: 0,
        testinfo_len: 0,
        eedump_len: 0,
        regdump_len: 0,
    };
    let mut ifr = ifreq_for(ifname)?;
    ifr.ifr_ifru.ifru_data = (&mut info as *mut EthtoolDrvinfo).cast::<libc::c_char>();
    ioctl_ifreq(sock, libc::SIOCETHTOOL, &mut ifr)?;
    let name =
        CStr::from_bytes_until_nul(&info.driver).map_err(|_| einval("driver name without NUL"))?;
    Ok(name.to_string_lossy().into_owned())
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
pub(crate) fn rx_queue_count(ifname: &str) -> io::Result<Option<u32>> {
    let sock = ioctl_socket()?;
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    let mut ifr = ifreq_for(ifname)?;
    ifr.ifr_ifru.ifru_data = (&mut ch as *mut EthtoolChannels).cast::<libc::c_char>();
    match ioctl_ifreq(&sock, libc::SIOCETHTOOL, &mut ifr) {
        Ok(()) => Ok(Some(ch.rx_count + ch.combined_count)),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The IPv4 addresses the kernel has on `ifname` (getifaddrs(3)).
pub(crate) fn ipv4_addrs(ifname: &str) -> io::Result<Vec<Ipv4Addr>> {
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
