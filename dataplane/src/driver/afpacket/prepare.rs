//! Interface preparation, run once per port before the workers open their
//! sockets (`portico run` calls [`prepare_interface`] for each port):
//!
//! * [`interface_info`]: ifindex, MAC (`SIOCGIFHWADDR`) and MTU
//!   (`SIOCGIFMTU`);
//! * [`disable_offloads`]: GRO, GSO, TSO and LRO off with the legacy ethtool
//!   ioctls (`ETHTOOL_SGRO`/`SGSO`/`STSO`, `ETHTOOL_SFLAGS` for LRO), read
//!   back with the matching getters. GRO and LRO merge received segments
//!   into frames above the MTU, which the driver would have to drop; GSO and
//!   TSO would do the same to frames the kernel sends on the port;
//! * [`enable_gso_offloads`] instead, for GSO/GRO pass-through (`gso`):
//!   GRO on (a NIC's driver merges received segments into super-packets
//!   the socket takes whole), GSO and TSO on (a super-packet the driver
//!   sends goes to the device whole: a NIC cuts it, a veth hands it to the
//!   peer's stack as one skb), LRO off (Linux turns it off on forwarding
//!   devices: it merges without the metadata to cut again). On a veth
//!   super-packets come two ways (both seen in `tests/tests/gso.rs`): a
//!   local sender's TCP skb crosses the pair whole when the peer has
//!   TSO/GSO on; and when the peer segments (offloads off), GRO on our end
//!   turns on veth's NAPI receive path, whose GRO merges the MTU frames
//!   again;
//! * [`kernel_ipv4_addrs`]: the IPv4 addresses the kernel has on the
//!   interface. An address Portico owns must not be among them, or the
//!   kernel answers ARP and connections for it too; the caller warns.
//!
//! Promiscuous mode is not set here: it is a membership of each worker's
//! socket (see the module docs of the driver).
//!
//! Everything here acts on the calling thread's network namespace.

use super::AfPacketError;
use crate::driver::sys;
use crate::wire::MacAddr;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;

// <linux/ethtool.h> command numbers (stable kernel ABI).
const ETHTOOL_GTXCSUM: u32 = 0x16;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_GGSO: u32 = 0x23;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_SFLAGS: u32 = 0x26;
const ETHTOOL_GGRO: u32 = 0x2b;
const ETHTOOL_SGRO: u32 = 0x2c;
/// `ETH_FLAG_LRO` in the `ETHTOOL_GFLAGS` word.
const ETH_FLAG_LRO: u32 = 1 << 15;

/// What the kernel says about an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceInfo {
    pub ifname: String,
    pub ifindex: u32,
    pub mac: MacAddr,
    pub mtu: u32,
}

/// Receive/segmentation offloads, `true` = on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffloadState {
    pub gro: bool,
    pub gso: bool,
    pub tso: bool,
    pub lro: bool,
}

impl OffloadState {
    /// Every offload that merges or splits frames is off.
    pub fn all_off(&self) -> bool {
        !(self.gro || self.gso || self.tso || self.lro)
    }

    /// What GSO/GRO pass-through wants: GRO, GSO and TSO on, LRO off.
    pub fn pass_through(&self) -> bool {
        self.gro && self.gso && self.tso && !self.lro
    }
}

/// The result of [`prepare_interface`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedInterface {
    pub info: InterfaceInfo,
    /// Offloads as read back after turning them off (some devices cannot
    /// turn every one off; the caller warns if `!all_off()`).
    pub offloads: OffloadState,
    /// IPv4 addresses the kernel has on the interface.
    pub kernel_ipv4_addrs: Vec<Ipv4Addr>,
}

fn ioctl_socket(ifname: &str) -> Result<OwnedFd, AfPacketError> {
    sys::ioctl_socket().map_err(|source| AfPacketError::Socket {
        ifname: ifname.to_string(),
        source,
    })
}

fn ioctl_err(ifname: &str, request: &'static str) -> impl FnOnce(io::Error) -> AfPacketError {
    move |source| {
        if source.raw_os_error() == Some(libc::ENODEV) {
            AfPacketError::NoSuchInterface {
                ifname: ifname.to_string(),
                source,
            }
        } else {
            AfPacketError::Ioctl {
                ifname: ifname.to_string(),
                request,
                source,
            }
        }
    }
}

/// Index, MAC and MTU of `ifname`.
pub fn interface_info(ifname: &str) -> Result<InterfaceInfo, AfPacketError> {
    let ifindex = sys::if_index(ifname).map_err(|source| AfPacketError::NoSuchInterface {
        ifname: ifname.to_string(),
        source,
    })?;
    let sock = ioctl_socket(ifname)?;
    let (mac, hw_type) = sys::hw_addr(&sock, ifname).map_err(ioctl_err(ifname, "SIOCGIFHWADDR"))?;
    if hw_type != libc::ARPHRD_ETHER {
        return Err(AfPacketError::Ioctl {
            ifname: ifname.to_string(),
            request: "SIOCGIFHWADDR (not an Ethernet interface)",
            source: io::Error::from_raw_os_error(libc::EPROTONOSUPPORT),
        });
    }
    let mtu = sys::mtu(&sock, ifname).map_err(ioctl_err(ifname, "SIOCGIFMTU"))?;
    Ok(InterfaceInfo {
        ifname: ifname.to_string(),
        ifindex,
        mac: MacAddr(mac),
        mtu,
    })
}

/// Current GRO/GSO/TSO/LRO state of `ifname`.
pub fn offload_state(ifname: &str) -> Result<OffloadState, AfPacketError> {
    let sock = ioctl_socket(ifname)?;
    read_offloads(&sock, ifname)
}

fn read_offloads(sock: &OwnedFd, ifname: &str) -> Result<OffloadState, AfPacketError> {
    let get = |cmd, name| sys::ethtool_value(sock, ifname, cmd, 0).map_err(ioctl_err(ifname, name));
    Ok(OffloadState {
        gro: get(ETHTOOL_GGRO, "SIOCETHTOOL ETHTOOL_GGRO")? != 0,
        gso: get(ETHTOOL_GGSO, "SIOCETHTOOL ETHTOOL_GGSO")? != 0,
        tso: get(ETHTOOL_GTSO, "SIOCETHTOOL ETHTOOL_GTSO")? != 0,
        lro: get(ETHTOOL_GFLAGS, "SIOCETHTOOL ETHTOOL_GFLAGS")? & ETH_FLAG_LRO != 0,
    })
}

/// A set command that the device refuses because the feature is fixed
/// (`EOPNOTSUPP`) is not an error here: the read-back shows what stuck.
fn ignore_unsupported(r: io::Result<u32>) -> io::Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Turn one legacy ethtool feature on or off (`ETHTOOL_SGRO`, `_SGSO`,
/// `_STSO`), tolerating devices where it is fixed.
fn set_feature(
    sock: &OwnedFd,
    ifname: &str,
    cmd: u32,
    name: &'static str,
    on: bool,
) -> Result<(), AfPacketError> {
    ignore_unsupported(sys::ethtool_value(sock, ifname, cmd, u32::from(on)))
        .map_err(ioctl_err(ifname, name))
}

/// Turn GRO on or off (tests use it to prove [`disable_offloads`] works).
pub fn set_gro(ifname: &str, on: bool) -> Result<OffloadState, AfPacketError> {
    let sock = ioctl_socket(ifname)?;
    set_feature(&sock, ifname, ETHTOOL_SGRO, "SIOCETHTOOL ETHTOOL_SGRO", on)?;
    read_offloads(&sock, ifname)
}

/// Turn GRO, GSO, TSO and LRO off; returns the state read back afterwards.
pub fn disable_offloads(ifname: &str) -> Result<OffloadState, AfPacketError> {
    let sock = ioctl_socket(ifname)?;
    let before = read_offloads(&sock, ifname)?;
    if before.gro {
        set_feature(
            &sock,
            ifname,
            ETHTOOL_SGRO,
            "SIOCETHTOOL ETHTOOL_SGRO",
            false,
        )?;
    }
    if before.tso {
        set_feature(
            &sock,
            ifname,
            ETHTOOL_STSO,
            "SIOCETHTOOL ETHTOOL_STSO",
            false,
        )?;
    }
    if before.gso {
        set_feature(
            &sock,
            ifname,
            ETHTOOL_SGSO,
            "SIOCETHTOOL ETHTOOL_SGSO",
            false,
        )?;
    }
    if before.lro {
        clear_lro(&sock, ifname)?;
    }
    read_offloads(&sock, ifname)
}

/// Turn LRO off. `SFLAGS` takes the whole flag word: clear only LRO, so
/// no other flag (which the device may not allow changing) changes.
fn clear_lro(sock: &OwnedFd, ifname: &str) -> Result<(), AfPacketError> {
    let flags = sys::ethtool_value(sock, ifname, ETHTOOL_GFLAGS, 0)
        .map_err(ioctl_err(ifname, "SIOCETHTOOL ETHTOOL_GFLAGS"))?;
    ignore_unsupported(sys::ethtool_value(
        sock,
        ifname,
        ETHTOOL_SFLAGS,
        flags & !ETH_FLAG_LRO,
    ))
    .map_err(ioctl_err(ifname, "SIOCETHTOOL ETHTOOL_SFLAGS"))
}

/// Turn GRO, GSO and TSO on and LRO off (GSO/GRO pass-through, see the
/// module docs); returns the state read back (a device may keep a feature
/// fixed: the caller warns).
pub fn enable_gso_offloads(ifname: &str) -> Result<OffloadState, AfPacketError> {
    let sock = ioctl_socket(ifname)?;
    set_feature(
        &sock,
        ifname,
        ETHTOOL_SGRO,
        "SIOCETHTOOL ETHTOOL_SGRO",
        true,
    )?;
    set_feature(
        &sock,
        ifname,
        ETHTOOL_SGSO,
        "SIOCETHTOOL ETHTOOL_SGSO",
        true,
    )?;
    set_feature(
        &sock,
        ifname,
        ETHTOOL_STSO,
        "SIOCETHTOOL ETHTOOL_STSO",
        true,
    )?;
    let state = read_offloads(&sock, ifname)?;
    if state.lro {
        clear_lro(&sock, ifname)?;
    }
    read_offloads(&sock, ifname)
}

/// Turn TX checksum offload of `ifname` on or off (`ETHTOOL_STXCSUM`);
/// returns the state read back. With it on, the kernel hands frames it
/// sends to a veth peer with only a partial (pseudo-header) L4 checksum;
/// af_packet reports that (`TP_STATUS_CSUMNOTREADY`) and the driver
/// completes it, but XDP has no such metadata, so the peers of an AF_XDP
/// port on the same host must send complete checksums.
pub fn set_tx_checksum(ifname: &str, on: bool) -> Result<bool, AfPacketError> {
    let sock = ioctl_socket(ifname)?;
    set_feature(
        &sock,
        ifname,
        ETHTOOL_STXCSUM,
        "SIOCETHTOOL ETHTOOL_STXCSUM",
        on,
    )?;
    let v = sys::ethtool_value(&sock, ifname, ETHTOOL_GTXCSUM, 0)
        .map_err(ioctl_err(ifname, "SIOCETHTOOL ETHTOOL_GTXCSUM"))?;
    Ok(v != 0)
}

/// IPv4 addresses the kernel has on `ifname`.
pub fn kernel_ipv4_addrs(ifname: &str) -> Result<Vec<Ipv4Addr>, AfPacketError> {
    sys::ipv4_addrs(ifname).map_err(|source| AfPacketError::ListAddresses {
        ifname: ifname.to_string(),
        source,
    })
}

/// Which of `owned` the kernel also has on `ifname` (it would answer ARP and
/// connections for them alongside Portico).
pub fn kernel_owned_conflicts(
    ifname: &str,
    owned: &[Ipv4Addr],
) -> Result<Vec<Ipv4Addr>, AfPacketError> {
    let kernel = kernel_ipv4_addrs(ifname)?;
    Ok(owned
        .iter()
        .copied()
        .filter(|a| kernel.contains(a))
        .collect())
}

/// Everything a port needs before workers open it: info, offloads off (on,
/// with `gso`: [`enable_gso_offloads`]), the kernel's addresses.
pub fn prepare_interface(ifname: &str, gso: bool) -> Result<PreparedInterface, AfPacketError> {
    let info = interface_info(ifname)?;
    let offloads = if gso {
        enable_gso_offloads(ifname)?
    } else {
        disable_offloads(ifname)?
    };
    let kernel_ipv4_addrs = kernel_ipv4_addrs(ifname)?;
    Ok(PreparedInterface {
        info,
        offloads,
        kernel_ipv4_addrs,
    })
}
