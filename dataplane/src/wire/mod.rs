//! Zero-copy header views and checksums.
//!
//! Each protocol has a `Packet<T: AsRef<[u8]>>` view in the style of smoltcp's
//! `wire` module: the view borrows (or owns) the bytes and reads or writes the
//! fields in place, in network byte order, without copying.
//!
//! * `Packet::new_unchecked(buf)` wraps any buffer.
//! * `Packet::new_checked(buf)` also checks that every fixed field and the
//!   variable-length header (IPv4 IHL, TCP data offset, UDP length) fit in
//!   `buf`, and returns [`Error`] otherwise.
//!
//! Invariants:
//!
//! * No getter or setter panics, whatever the buffer: a field that lies
//!   (partly) outside the buffer reads as 0 and is not written. On a view made
//!   with `new_checked` every field is inside the buffer, and after inlining
//!   the compiler folds the per-field bounds checks into the up-front length
//!   check, so the fallback costs nothing on the hot path.
//! * Checksums are the Internet checksum of RFC 1071; NAT rewrites update them
//!   incrementally with RFC 1624 equation 3 (see [`checksum`]).
//! * [`build`] holds allocating frame builders for tests, benches and the
//!   packet generator; nothing on the packet path uses it.
//!
//! Sub-modules: [`ethernet`] (with one 802.1Q tag), [`arp`] (Ethernet/IPv4
//! only, RFC 826), [`ipv4`] (RFC 791), [`ipv6`] (RFC 8200, with the walk of
//! its extension headers), [`tcp`] (RFC 9293), [`udp`] (RFC 768),
//! [`icmp`] (RFC 792), [`icmpv6`] (RFC 4443), [`ndp`] (RFC 4861: neighbour
//! solicitation and advertisement), [`checksum`] (with the IPv6
//! pseudo-header), [`vnet`] (the `virtio_net_hdr` of GSO/GRO
//! super-packets and partial checksums) and [`gso`] (finishing those
//! offloads in software).

pub mod arp;
pub mod build;
pub mod checksum;
pub mod ethernet;
mod field;
pub mod gso;
pub mod icmp;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod ndp;
pub mod tcp;
pub mod udp;
pub mod vnet;

pub use ethernet::MacAddr;

/// The header a [`Error`] is about.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Header {
    Ethernet,
    Vlan,
    Arp,
    Ipv4,
    Tcp,
    Udp,
    Icmp,
    Ipv6,
    /// An IPv6 extension header.
    Ipv6Ext,
    Icmpv6,
}

impl std::fmt::Display for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Header::Ethernet => "Ethernet",
            Header::Vlan => "802.1Q",
            Header::Arp => "ARP",
            Header::Ipv4 => "IPv4",
            Header::Tcp => "TCP",
            Header::Udp => "UDP",
            Header::Icmp => "ICMP",
            Header::Ipv6 => "IPv6",
            Header::Ipv6Ext => "IPv6 extension",
            Header::Icmpv6 => "ICMPv6",
        })
    }
}

/// Why a `new_checked` view (or a helper built on one) refused a buffer.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum Error {
    /// The buffer ends before the fixed part of the header.
    #[error("{header} header needs {needed_bytes} bytes, buffer has {len_bytes}")]
    Truncated {
        header: Header,
        needed_bytes: usize,
        len_bytes: usize,
    },
    /// A length field (IPv4 IHL or total length, TCP data offset, UDP length)
    /// is below its minimum or points beyond the buffer.
    #[error("{header} length field is {field_bytes} bytes, valid is {min_bytes}..={max_bytes}")]
    BadLength {
        header: Header,
        field_bytes: usize,
        min_bytes: usize,
        max_bytes: usize,
    },
    /// ARP for a hardware/protocol pair other than Ethernet/IPv4.
    #[error("ARP htype {htype} ptype {ptype:#06x} hlen {hlen} plen {plen} is not Ethernet/IPv4")]
    ArpNotEthernetIpv4 {
        htype: u16,
        ptype: u16,
        hlen: u8,
        plen: u8,
    },
    /// More than one stacked VLAN tag, or an 802.1ad service tag.
    #[error("stacked VLAN tags are not supported")]
    VlanStacked,
    /// An IPv6 Hop-by-Hop Options header that does not follow the fixed
    /// header (RFC 8200 §4.1).
    #[error("IPv6 Hop-by-Hop Options header after another extension header")]
    Ipv6HopByHopNotFirst,
    /// More IPv6 extension headers, or more bytes of them, than the walk
    /// follows ([`ipv6::MAX_EXT_HEADERS`], [`ipv6::MAX_EXT_BYTES`]).
    #[error("IPv6 extension header chain of {headers} headers / {bytes} bytes is too long")]
    Ipv6ExtChainTooLong { headers: usize, bytes: usize },
}

/// `Ok(())` if `len >= needed`, the `Truncated` error otherwise.
#[inline]
fn check_min(header: Header, len: usize, needed: usize) -> Result<(), Error> {
    if len < needed {
        Err(Error::Truncated {
            header,
            needed_bytes: needed,
            len_bytes: len,
        })
    } else {
        Ok(())
    }
}
