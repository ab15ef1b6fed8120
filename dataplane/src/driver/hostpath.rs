//! The host path: the exception path of DPDK/VPP appliances (DPVS's KNI,
//! VPP's linux-cp) on every driver. Traffic addressed to the appliance
//! itself (BGP, SSH, health probes of the box) needs the kernel's TCP
//! stack, but with AF_XDP and DPDK the kernel never sees the ports'
//! frames. So each data port with host addresses gets a kernel TAP
//! interface in the gateway's namespace (its *host interface*) that
//! carries those addresses, with the port's MAC and MTU:
//!
//! ```text
//!   wire -> port -> worker: parse, classify -- Verdict::Host --> write(TAP queue) -> kernel
//!   kernel -> TAP queue -> worker: read (bounded batch) -> driver tx -> port -> wire
//! ```
//!
//! * **What goes to the kernel**: exactly the frames the pipeline gives
//!   [`Verdict::Host`](crate::packet::Verdict::Host): ARP whose target is
//!   a host address of the receiving port (requests and replies), IPv4
//!   to a host address (TCP and UDP that match no listener and no flow,
//!   which host addresses never have; ICMP echo; ICMP errors about the
//!   kernel's own packets; fragments and protocols the pipeline does not
//!   parse, which it would drop), and the same for IPv6: NDP whose target
//!   (solicitations) or destination (advertisements, router messages) is
//!   a host address of the receiving port ([`crate::stage::ndp`]), and
//!   IPv6 to a host address (TCP/UDP without flow or listener, ICMPv6
//!   echo, ICMPv6 errors about the kernel's packets, fragments and other
//!   protocols; [`crate::stage::ipv6`], [`crate::stage::local`]). The
//!   dataplane answers no ARP, NDP, ICMP or ICMPv6 for a host address and
//!   never announces one; nothing else reaches the kernel. The frame is
//!   written unchanged to the receiving port's TAP.
//! * **What comes from the kernel**: every frame the kernel sends out of
//!   a TAP (its ARP, its TCP segments, its ICMP; with IPv6 host addresses
//!   also its NDP, MLD reports and router solicitation, see
//!   [`ipv6_settings`]), already a whole Ethernet frame from the port's
//!   MAC; the worker copies it into a driver buffer
//!   ([`super::Driver::frame_from`]) and transmits it out of the port.
//! * **Bounded, never blocking**: the TAP queues are non-blocking. A write
//!   the queue does not take (`EAGAIN`/`ENOBUFS`/`ENOMEM`) is dropped and
//!   counted as `host_queue_full`; an interface that is down (`EIO`) or a
//!   port without a host path as `host_path_down`. (A frame the tun driver
//!   takes goes to the kernel's input backlog, whose overflow the kernel
//!   counts as the TAP's `rx_dropped`.) A poll reads at most
//!   [`HOST_BATCH`] frames per port; what the kernel sends meanwhile waits
//!   in the TAP queue (`txqueuelen`), whose overflow the kernel counts as
//!   the TAP's `tx_dropped`.
//! * **Per worker**: the TAP is multi-queue, one queue per worker
//!   ([`HostPath`] holds a worker's queue of every port); the kernel
//!   spreads its frames over the queues by flow, each worker sends what
//!   its queue holds. Readable queues also end the worker's idle wait
//!   ([`super::Driver::wake_on_readable`]).
//! * **Off the fast path**: host addresses are owned addresses with the
//!   `host` role ([`crate::snapshot::OwnedAddr`]); the pipeline looks at
//!   the role only where it already looked the address up for a packet
//!   that is not forwarded (ARP, ICMP echo, a conntrack miss without a
//!   listener, an ICMP error without a flow). Established and new flows
//!   pay nothing.
//!
//! [`create_host_interface`] makes the TAP and its queues (the gateway
//! calls it once per port at start); [`isolate_kernel_interface`] keeps
//! the kernel from answering on a port's own kernel interface (af_packet
//! and DPDK's `net_af_packet` leave the kernel a copy of every frame).
//! The system calls are in `driver/sys/tap.rs`; the address goes in with
//! rtnetlink (`afxdp::netlink`).

use super::afxdp::netlink;
use super::sys;
use crate::counters::DropReason;
use crate::packet::PortId;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

/// Frames read from one TAP queue per poll at most.
pub const HOST_BATCH: usize = 64;
/// The read buffer: the largest frame a TAP sends (jumbo MTU 9216 plus
/// an Ethernet header and a VLAN tag), rounded up.
const READ_BUF_BYTES: usize = 9216 + 64;

/// Why a host interface could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HostPathError {
    #[error(
        "host interface {name}: opening queue {queue} of the TAP failed: {source} (needs CAP_NET_ADMIN and /dev/net/tun; is the name taken by another interface?)"
    )]
    Open {
        name: String,
        queue: usize,
        source: io::Error,
    },
    #[error("host interface {name}: setting its {what} failed: {source}")]
    Configure {
        name: String,
        what: &'static str,
        source: io::Error,
    },
    #[error("port interface {name}: {what}: {source}")]
    Isolate {
        name: String,
        what: String,
        source: io::Error,
    },
}

/// What a port's host interface looks like.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostInterfaceSpec {
    /// The TAP's name (at most 15 bytes).
    pub name: String,
    /// The port's MAC: the kernel's frames leave with it, and peers' ARP
    /// entries for a host address point at the port.
    pub mac: [u8; 6],
    /// The port's MTU.
    pub mtu: u16,
    /// The host addresses (of either family) with their prefix lengths.
    pub addresses: Vec<(IpAddr, u8)>,
}

/// Create the TAP `spec.name` with `queues` queues (one per worker), give
/// it the port's MAC and MTU and its addresses, set its IPv6 (see
/// [`ipv6_settings`]), and bring it up. Returns the queues; the interface
/// disappears when the last one closes.
pub fn create_host_interface(
    spec: &HostInterfaceSpec,
    queues: usize,
) -> Result<Vec<OwnedFd>, HostPathError> {
    let name = &spec.name;
    let fds = (0..queues.max(1))
        .map(|queue| {
            sys::open_tap_queue(name).map_err(|source| HostPathError::Open {
                name: name.clone(),
                queue,
                source,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let configure = |what: &'static str| {
        move |source| HostPathError::Configure {
            name: name.clone(),
            what,
            source,
        }
    };
    let sock = sys::ioctl_socket().map_err(configure("control socket"))?;
    sys::set_hw_addr(&sock, name, spec.mac).map_err(configure("MAC address"))?;
    sys::set_mtu(&sock, name, u32::from(spec.mtu)).map_err(configure("MTU"))?;
    let with_v6 = spec.addresses.iter().any(|(a, _)| a.is_ipv6());
    for (key, value) in ipv6_settings(with_v6) {
        let path = format!("/proc/sys/net/ipv6/conf/{name}/{key}");
        match std::fs::write(&path, value) {
            // A kernel without IPv6 has no such files: fine without IPv6
            // host addresses.
            Err(e) if e.kind() == io::ErrorKind::NotFound && !with_v6 => {}
            Err(e) => return Err(configure("IPv6 settings")(e)),
            Ok(()) => {}
        }
    }
    let index = sys::if_index(name).map_err(configure("interface index"))?;
    for &(addr, prefix_len) in &spec.addresses {
        netlink::add_address(index, addr, prefix_len).map_err(configure("address"))?;
    }
    sys::set_up(&sock, name, true).map_err(configure("up flag"))?;
    Ok(fds)
}

/// The TAP's `net.ipv6.conf.<tap>.*` settings, in the order written.
/// Without IPv6 host addresses, IPv6 is off (no MLD, router solicitations
/// or duplicate address detection from the kernel onto the wire). With
/// them, IPv6 is on: the kernel gets its link-local address
/// ([`kernel_link_local`]: `addr_gen_mode = 0`, EUI-64 of the port's MAC,
/// whatever the namespace's default) and sends its own NDP (solicitations for
/// the peers, advertisements for the host addresses), MLD reports and a
/// router solicitation out of the TAP, which the workers send out of the
/// port; but it takes no configuration from the wire (`accept_ra = 0`,
/// `autoconf = 0`: the host addresses are the configuration's), and skips
/// duplicate address detection (`accept_dad = 0`, for the link-local
/// address too; the global ones are added with `nodad`, see
/// [`netlink::add_address`]) so every address is usable at once.
pub fn ipv6_settings(with_ipv6: bool) -> &'static [(&'static str, &'static str)] {
    if with_ipv6 {
        &[
            ("addr_gen_mode", "0"),
            ("accept_ra", "0"),
            ("autoconf", "0"),
            ("accept_dad", "0"),
            ("disable_ipv6", "0"),
        ]
    } else {
        &[("disable_ipv6", "1")]
    }
}

/// The link-local address the kernel gives a host interface with IPv6
/// host addresses (`addr_gen_mode = 0`, [`ipv6_settings`]): `fe80::/64`
/// with the modified EUI-64 interface identifier of the port's MAC
/// (RFC 4291 §2.5.1 and appendix A, RFC 2464 §5). The snapshot holds it as
/// a host address of the port, so NDP and traffic for it reach the kernel
/// too (its router solicitation and MLD reports leave from it).
pub fn kernel_link_local(mac: [u8; 6]) -> Ipv6Addr {
    let [a, b, c, d, e, f] = mac;
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        a ^ 0x02,
        b,
        c,
        0xff,
        0xfe,
        d,
        e,
        f,
    ])
}

/// Bring a host interface down or up again (an operator's `ip link set`;
/// tests use it to stop the kernel from taking frames).
pub fn set_host_interface_up(name: &str, up: bool) -> io::Result<()> {
    let sock = sys::ioctl_socket()?;
    sys::set_up(&sock, name, up)
}

/// Keep the kernel from answering on a port's own kernel interface
/// `ifname` (in the calling thread's namespace) now that it has host
/// addresses on a TAP: af_packet and DPDK's `net_af_packet` leave the
/// kernel a copy of every frame, and by Linux's weak host model it would
/// answer ARP for (`arp_ignore`) and accept packets to (`rp_filter`) the
/// TAP's addresses there too, twice over. `arp_ignore = 8` answers no ARP
/// on the interface; `rp_filter = 1` (strict) drops every packet whose
/// source the kernel routes elsewhere (through the TAP), which is every
/// packet, as the port interface has no address and no route. IPv6 has no
/// `rp_filter` (and Linux would accept a copy of a TCP segment to an IPv6
/// host address there and answer it through the TAP): the interface's
/// IPv6 is turned off (`disable_ipv6 = 1`; the kernel then takes no IPv6
/// frame from it and sends none — the dataplane owns the port's IPv6).
pub fn isolate_kernel_interface(ifname: &str) -> Result<(), HostPathError> {
    let settings = [
        ("ipv4", "arp_ignore", "8"),
        ("ipv4", "rp_filter", "1"),
        ("ipv6", "disable_ipv6", "1"),
    ];
    for (family, key, value) in settings {
        let path = format!("/proc/sys/net/{family}/conf/{ifname}/{key}");
        match std::fs::write(&path, value) {
            // A kernel without IPv6 has nothing to isolate.
            Err(e) if e.kind() == io::ErrorKind::NotFound && family == "ipv6" => {}
            Err(source) => {
                return Err(HostPathError::Isolate {
                    name: ifname.to_owned(),
                    what: format!("writing {value} to {path}"),
                    source,
                });
            }
            Ok(()) => {}
        }
    }
    Ok(())
}

/// One worker's host path: its queue of each port's TAP (`None`: the port
/// has no host addresses) and a read buffer, allocated once.
pub struct HostPath {
    queues: Vec<Option<OwnedFd>>,
    buf: Box<[u8]>,
}

impl std::fmt::Debug for HostPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.queues
                    .iter()
                    .map(|q| q.as_ref().map(AsRawFd::as_raw_fd)),
            )
            .finish()
    }
}

impl HostPath {
    /// A host path over `queues`, indexed by port id.
    pub fn new(queues: Vec<Option<OwnedFd>>) -> Self {
        HostPath {
            queues,
            buf: vec![0u8; READ_BUF_BYTES].into_boxed_slice(),
        }
    }

    /// Number of port slots (ports beyond it have no host path).
    pub fn ports(&self) -> usize {
        self.queues.len()
    }

    /// The queue descriptors, for the idle wait.
    pub fn fds(&self) -> Vec<RawFd> {
        self.queues
            .iter()
            .flatten()
            .map(|fd| fd.as_fd().as_raw_fd())
            .collect()
    }

    /// Write `frame` (received on `port`) to the port's TAP queue, without
    /// waiting.
    pub fn send(&mut self, port: PortId, frame: &[u8]) -> Result<(), DropReason> {
        let Some(Some(fd)) = self.queues.get(usize::from(port)) else {
            return Err(DropReason::HostPathDown);
        };
        match sys::write_frame(fd, frame) {
            Ok(_) => Ok(()),
            Err(e) => match e.raw_os_error() {
                Some(libc::EAGAIN | libc::ENOBUFS | libc::ENOMEM) => Err(DropReason::HostQueueFull),
                _ => Err(DropReason::HostPathDown),
            },
        }
    }

    /// The next frame the kernel sent out of `port`'s TAP, if one is
    /// waiting (valid until the next call).
    #[inline]
    pub fn recv(&mut self, port: PortId) -> Option<&[u8]> {
        let fd = self.queues.get(usize::from(port))?.as_ref()?;
        let n = sys::read_frame(fd, &mut self.buf).ok()?;
        self.buf.get(..n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_link_local_is_the_modified_eui64_of_the_mac() {
        // RFC 4291 appendix A: flip the universal/local bit, ff:fe inside.
        assert_eq!(
            kernel_link_local([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
            "fe80::5054:ff:fe12:3456".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            kernel_link_local([0x02, 0, 0, 0, 0, 0x01]),
            "fe80::ff:fe00:1".parse::<Ipv6Addr>().unwrap()
        );
    }

    #[test]
    fn ipv6_is_on_only_with_ipv6_host_addresses() {
        assert_eq!(ipv6_settings(false), &[("disable_ipv6", "1")]);
        let on = ipv6_settings(true);
        assert_eq!(on.last(), Some(&("disable_ipv6", "0")), "enabled last");
        for key in ["addr_gen_mode", "accept_ra", "autoconf", "accept_dad"] {
            assert!(on.iter().any(|(k, _)| *k == key), "{key}");
        }
    }
}
