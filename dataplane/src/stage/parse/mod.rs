//! The parse stage: one pass over each frame fills its [`PacketMeta`]
//! (offsets, flow key, hash); no later stage parses the frame again.
//!
//! Every frame ends either parsed (verdict [`Verdict::Pending`]) or dropped
//! under exactly one [`DropReason`], checked in this order:
//!
//! | check | reason |
//! |---|---|
//! | frame < 14 bytes | `EthTruncated` |
//! | 802.1Q tag cut off, a second stacked tag (0x8100/0x88a8 inside), or an outer 802.1ad tag | `VlanMalformed` |
//! | EtherType other than IPv4/IPv6/ARP | `UnsupportedEthertype` |
//! | ARP < 28 bytes, or not htype 1 / ptype 0x0800 / hlen 6 / plen 4 (RFC 826) | `ArpMalformed` |
//! | IPv4 < 20 bytes | `Ipv4Truncated` |
//! | version ≠ 4 | `Ipv4BadVersion` |
//! | IHL < 5, or IHL×4 beyond the frame | `Ipv4BadIhl` |
//! | total length < IHL×4, or beyond the frame | `Ipv4BadLength` |
//! | header checksum (always verified, RFC 1071) | `Ipv4BadChecksum` |
//! | MF set or fragment offset ≠ 0 | `Ipv4Fragment` |
//! | source multicast, 255.255.255.255, loopback or 0.0.0.0 (RFC 1812 §5.3.7) | `Ipv4BadSource` |
//! | protocol not ICMP/TCP/UDP | `UnsupportedProtocol` |
//! | TCP < 20 bytes, data offset < 5 or beyond the IP payload | `TcpMalformed` |
//! | TCP flags outside Linux conntrack's `tcp_valid_flags` table | `TcpBadFlags` |
//! | TCP checksum, unless the driver verified it | `TcpBadChecksum` |
//! | UDP < 8 bytes, length field < 8 or beyond the IP payload | `UdpMalformed` |
//! | UDP checksum if non-zero, unless the driver verified it (RFC 768) | `UdpBadChecksum` |
//! | ICMP < 8 bytes | `IcmpMalformed` |
//! | ICMP checksum, unless the driver verified it | `IcmpBadChecksum` |
//! | ICMP error whose inner IPv4 header is incomplete, not version 4, not followed by 8 bytes, or not TCP/UDP | `IcmpMalformed` |
//! | ICMP type other than echo request/reply, unreachable, time exceeded, parameter problem | `IcmpUnsupported` |
//! | the driver's offload metadata does not fit the packet (see `check_offload`) | `GsoMalformed` |
//!
//! IPv6 (EtherType 0x86DD, also under one 802.1Q tag; the `ipv6` submodule):
//!
//! | check | reason |
//! |---|---|
//! | IPv6 < 40 bytes | `Ipv6Truncated` |
//! | version ≠ 6 | `Ipv6BadVersion` |
//! | 40 + payload length beyond the frame | `Ipv6BadLength` |
//! | more than 8 extension headers or 512 bytes of them (RFC 8200 §4, RFC 7112) | `Ipv6ExtChainTooLong` |
//! | an extension header runs past the payload | `Ipv6ExtTruncated` |
//! | Hop-by-Hop header not first (RFC 8200 §4.1) | `Ipv6HopByHopMisplaced` |
//! | a Fragment header | `Ipv6Fragment` |
//! | source multicast or loopback, or `::` except for an NDP solicitation (DAD) | `Ipv6BadSource` |
//! | upper layer not ICMPv6/TCP/UDP | `UnsupportedProtocol` |
//! | TCP: as IPv4 (`TcpMalformed`, `TcpBadFlags`, `TcpBadChecksum`) | |
//! | UDP: as IPv4, and a zero checksum is bad (RFC 8200 §8.1) | `UdpMalformed`, `UdpBadChecksum` |
//! | ICMPv6 < 8 bytes | `IcmpMalformed` |
//! | ICMPv6 checksum, unless the driver verified it (RFC 4443 §2.3) | `IcmpBadChecksum` |
//! | NDP (types 133..=137) hop limit ≠ 255 (RFC 4861 §7.1) | `NdpBadHopLimit` |
//! | NS/NA option of length 0 or past the message (§7.1.1, §7.1.2) | `NdpBadOption` |
//! | NDP code ≠ 0, NS/NA body short, multicast target, bad DAD, solicited NA to multicast | `NdpMalformed` |
//! | ICMPv6 error whose inner IPv6 header is incomplete, not version 6, its chain bad, not followed by 8 bytes of TCP/UDP | `IcmpMalformed` |
//! | ICMPv6 type other than echo, NDP, unreachable, packet too big, time exceeded, parameter problem | `IcmpUnsupported` |
//!
//! A frame dropped as `Ipv4Fragment`, `Ipv6Fragment` or
//! `UnsupportedProtocol` keeps its family and its destination in
//! `key.dst_ip` or `key6.dst_ip` (everything else of its meta is empty): the local stage gives such a frame to the host path when the
//! destination is a host address (the kernel reassembles fragments and
//! speaks the other protocols), and leaves the drop otherwise.
//!
//! Invariants of a parsed meta:
//!
//! * `l3_offset` is 14 or 18; `l3_end = l3_offset + total length` (ARP:
//!   `l3_offset + 28`) and `l3_end <= frame.len()`: bytes after it are
//!   Ethernet padding. For IPv4 kinds `l3_offset + 20 <= l4_offset <= l3_end`
//!   and the L4 header (TCP with its options) lies within `l4_offset..l3_end`.
//! * For `IcmpError`, `inner_l3_offset = l4_offset + 8`, the inner IPv4 header
//!   and 8 bytes after it lie below `l3_end`, and `key` is the inner 5-tuple as
//!   the inner header states it (inner source = `key.src_ip`). Inner checksums
//!   are not verified: error messages carry truncated packets (RFC 792).
//! * For `IcmpEcho` both key ports are the echo identifier.
//! * `family` says which key is valid: `key` for IPv4 kinds (and ARP),
//!   `key6` for IPv6 ones. For IPv6 `l3_offset + 40 <= l4_offset <= l3_end`
//!   (extension headers lie between), and for an ICMPv6 `IcmpError`
//!   `inner_l4_offset` is after the inner packet's extension headers.
//! * `hash` = the table hash of the valid key (the pipeline's
//!   [`TableHasher`], keyed per process) for every IP kind; 0 for ARP.
//!
//! Nothing here allocates, locks or panics, whatever the bytes: every read
//! goes through a length check made once per header (`first_chunk`), after
//! which the field reads are on fixed-size arrays.

use crate::counters::DropReason;
use crate::driver::Frame;
use crate::flow::{FlowKey, FlowKeyOf, IpFamily, Proto, TableHasher};
use crate::packet::{Family, Gso, Offload, PacketKind, PacketMeta, PortId, Verdict};
use crate::wire::ethernet::{self, ethertype};
use crate::wire::ipv4::protocol;
use crate::wire::{arp, checksum, icmp, ipv4, tcp, udp};
use std::net::{Ipv4Addr, Ipv6Addr};

mod ipv6;

/// Parse one frame into its metadata, or the reason to drop it.
#[inline]
pub fn parse_frame(
    frame: &[u8],
    in_port: PortId,
    checksum_verified: bool,
    hasher: &TableHasher,
) -> Result<PacketMeta, DropReason> {
    let mut meta = PacketMeta::empty(in_port);
    parse_into(frame, checksum_verified, hasher, &mut meta)?;
    Ok(meta)
}

/// Parse a batch: `metas[i]` becomes the metadata of `frames[i]`, with
/// verdict [`Verdict::Pending`], or an empty meta with verdict
/// [`Verdict::Drop`] and the reason. `metas` must be at least as long as
/// `frames`; frames without a meta slot are left unparsed.
#[inline]
pub fn parse_batch<F: Frame>(
    frames: &[F],
    in_port: PortId,
    metas: &mut [PacketMeta],
    hasher: &TableHasher,
) {
    debug_assert!(metas.len() >= frames.len(), "one meta slot per frame");
    for (frame, meta) in frames.iter().zip(metas.iter_mut()) {
        meta.reset(in_port);
        let mut parsed = parse_into(frame.data(), frame.checksum_verified(), hasher, meta);
        let offload = frame.offload();
        if parsed.is_ok() && !offload.is_none() {
            parsed = check_offload(frame.data(), offload, meta);
        }
        if let Err(reason) = parsed {
            let (family, dst, dst6) = (meta.family, meta.key.dst_ip, meta.key6.dst_ip);
            *meta = PacketMeta::empty(in_port);
            meta.verdict = Verdict::Drop(reason);
            if matches!(
                reason,
                DropReason::Ipv4Fragment
                    | DropReason::Ipv6Fragment
                    | DropReason::UnsupportedProtocol
            ) {
                // The local stage may still hand it to a host address.
                meta.family = family;
                meta.key.dst_ip = dst;
                meta.key6.dst_ip = dst6;
            }
        }
    }
}

/// Take the driver's offload metadata of a parsed frame into its meta, or
/// refuse it (`GsoMalformed`): a partial checksum must start at the L4
/// header of a TCP/UDP packet (IPv6: after the extension headers) with the
/// field where that protocol has it; a super-packet must be TCP of its own
/// family (`TcpV4` over IPv4, `TcpV6` over IPv6) without SYN or RST, or UDP
/// (`UdpL4`, either family). A super-packet's largest segment length is
/// what MTU checks use (`segment_l3_len`: the DF rule for IPv4, Packet Too
/// Big for IPv6). Out of line: only frames of a driver with offloads on
/// come here.
#[cold]
#[inline(never)]
fn check_offload(frame: &[u8], o: Offload, meta: &mut PacketMeta) -> Result<(), DropReason> {
    let (csum_offset, l4_header_len) = match meta.kind {
        PacketKind::Tcp => {
            let doff = frame.get(usize::from(meta.l4_offset) + 12).copied();
            (16, usize::from(doff.unwrap_or(0) >> 4) * 4)
        }
        PacketKind::Udp => (6, udp::HEADER_LEN),
        _ => return Err(DropReason::GsoMalformed),
    };
    if !o.needs_csum || o.csum_start != meta.l4_offset || o.csum_offset != csum_offset {
        return Err(DropReason::GsoMalformed);
    }
    let gso_fits = match o.gso {
        Gso::None => true,
        Gso::TcpV4 | Gso::TcpV6 => {
            meta.kind == PacketKind::Tcp
                && meta.family
                    == (if o.gso == Gso::TcpV4 {
                        Family::V4
                    } else {
                        Family::V6
                    })
                && meta.tcp_flags & (tcp::flags::SYN | tcp::flags::RST) == 0
        }
        Gso::UdpL4 => meta.kind == PacketKind::Udp,
    };
    if !gso_fits {
        return Err(DropReason::GsoMalformed);
    }
    if o.is_gso() {
        let headers = usize::from(meta.l4_offset - meta.l3_offset) + l4_header_len;
        let l3_len = usize::from(meta.l3_end - meta.l3_offset);
        meta.segment_l3_len = off16((headers + usize::from(o.gso_size)).min(l3_len));
    }
    meta.offload = o;
    Ok(())
}

/// Offsets are u16 in the meta; every offset is below `l3_end`, which this
/// checks fits.
#[inline(always)]
fn off16(v: usize) -> u16 {
    v as u16
}

#[inline(always)]
fn be16(hi: u8, lo: u8) -> u16 {
    u16::from_be_bytes([hi, lo])
}

/// Fill `meta` (pre-set to `PacketMeta::empty`) from `frame`.
#[inline(always)]
fn parse_into(
    frame: &[u8],
    verified: bool,
    hasher: &TableHasher,
    meta: &mut PacketMeta,
) -> Result<(), DropReason> {
    let Some(eth) = frame.first_chunk::<{ ethernet::HEADER_LEN }>() else {
        return Err(DropReason::EthTruncated);
    };
    let mut ether = be16(eth[12], eth[13]);
    let mut l3 = ethernet::HEADER_LEN;
    if ether == ethertype::VLAN {
        let Some(&[tci_hi, tci_lo, inner_hi, inner_lo]) = frame.get(14..18) else {
            return Err(DropReason::VlanMalformed);
        };
        ether = be16(inner_hi, inner_lo);
        if ether == ethertype::VLAN || ether == ethertype::QINQ {
            return Err(DropReason::VlanMalformed);
        }
        meta.vlan = Some(be16(tci_hi, tci_lo) & ethernet::VLAN_ID_MASK);
        l3 += ethernet::VLAN_TAG_LEN;
    } else if ether == ethertype::QINQ {
        return Err(DropReason::VlanMalformed);
    }
    meta.l3_offset = off16(l3);
    let rest = frame.get(l3..).unwrap_or(&[]);
    match ether {
        ethertype::IPV4 => parse_ipv4(rest, l3, verified, meta).map(|()| {
            meta.hash = hasher.hash(&meta.key);
        }),
        ethertype::ARP => parse_arp(rest, l3, meta),
        ethertype::IPV6 => ipv6::parse_ipv6(rest, l3, verified, meta).map(|()| {
            meta.hash = hasher.hash(&meta.key6);
        }),
        _ => Err(DropReason::UnsupportedEthertype),
    }
}

#[inline(always)]
fn parse_arp(rest: &[u8], l3: usize, meta: &mut PacketMeta) -> Result<(), DropReason> {
    let Some(a) = rest.first_chunk::<{ arp::PACKET_LEN }>() else {
        return Err(DropReason::ArpMalformed);
    };
    if !arp::Packet::new_unchecked(a).is_ethernet_ipv4() {
        return Err(DropReason::ArpMalformed);
    }
    meta.kind = PacketKind::Arp;
    meta.l3_end = off16(l3 + arp::PACKET_LEN);
    Ok(())
}

/// RFC 1812 §5.3.7: never forward from these sources.
#[inline(always)]
fn is_bad_source(src: Ipv4Addr) -> bool {
    src.is_multicast() || src.is_broadcast() || src.is_loopback() || src.is_unspecified()
}

#[inline(always)]
fn parse_ipv4(
    ip: &[u8],
    l3: usize,
    verified: bool,
    meta: &mut PacketMeta,
) -> Result<(), DropReason> {
    let Some(h) = ip.first_chunk::<{ ipv4::HEADER_LEN }>() else {
        return Err(DropReason::Ipv4Truncated);
    };
    let hv = ipv4::Packet::new_unchecked(h);
    if hv.version() != 4 {
        return Err(DropReason::Ipv4BadVersion);
    }
    let ihl = hv.header_len();
    if ihl < ipv4::HEADER_LEN || ihl > ip.len() {
        return Err(DropReason::Ipv4BadIhl);
    }
    let total = usize::from(hv.total_len());
    // The l3_end <= u16::MAX condition only bites on frames over 64 KiB,
    // which no driver delivers; refuse them rather than wrap an offset.
    if total < ihl || total > ip.len() || l3 + total > usize::from(u16::MAX) {
        return Err(DropReason::Ipv4BadLength);
    }
    let Some(header) = ip.get(..ihl) else {
        return Err(DropReason::Ipv4BadIhl);
    };
    if checksum::sum(header) != 0xffff {
        return Err(DropReason::Ipv4BadChecksum);
    }
    if hv.is_fragment() {
        meta.key.dst_ip = hv.dst_addr();
        return Err(DropReason::Ipv4Fragment);
    }
    let src = hv.src_addr();
    if is_bad_source(src) {
        return Err(DropReason::Ipv4BadSource);
    }
    let dst = hv.dst_addr();
    let l4_payload = ip.get(ihl..total).unwrap_or(&[]);
    let l4 = l3 + ihl;
    meta.l4_offset = off16(l4);
    meta.l3_end = off16(l3 + total);
    match hv.protocol() {
        protocol::TCP => parse_tcp(l4_payload, src, dst, verified, meta)?,
        protocol::UDP => parse_udp(l4_payload, src, dst, verified, meta)?,
        protocol::ICMP => parse_icmp(l4_payload, l4, src, dst, verified, meta)?,
        _ => {
            meta.key.dst_ip = dst;
            return Err(DropReason::UnsupportedProtocol);
        }
    }
    Ok(())
}

/// What the TCP/UDP parsers need of a family: the pseudo-header checksum
/// and where the key goes. Monomorphised: the IPv4 path is what it was.
trait L4Family: IpFamily {
    /// Whether `segment` (checksum included) verifies over `src -> dst`.
    fn verify_l4(src: Self, dst: Self, protocol: u8, segment: &[u8]) -> bool;
    /// Whether a zero UDP checksum means "none" (IPv4) rather than bad
    /// (IPv6, RFC 8200 §8.1).
    const UDP_ZERO_CHECKSUM_OK: bool;
    fn set_key(meta: &mut PacketMeta, key: FlowKeyOf<Self>);
}

impl L4Family for Ipv4Addr {
    const UDP_ZERO_CHECKSUM_OK: bool = true;

    #[inline(always)]
    fn verify_l4(src: Self, dst: Self, protocol: u8, segment: &[u8]) -> bool {
        checksum::verify_l4(src, dst, protocol, segment)
    }

    #[inline(always)]
    fn set_key(meta: &mut PacketMeta, key: FlowKey) {
        meta.key = key;
    }
}

impl L4Family for Ipv6Addr {
    const UDP_ZERO_CHECKSUM_OK: bool = false;

    #[inline(always)]
    fn verify_l4(src: Self, dst: Self, protocol: u8, segment: &[u8]) -> bool {
        checksum::verify_l4_v6(src, dst, protocol, segment)
    }

    #[inline(always)]
    fn set_key(meta: &mut PacketMeta, key: crate::flow::FlowKey6) {
        meta.family = Family::V6;
        meta.key6 = key;
    }
}

#[inline(always)]
fn parse_tcp<A: L4Family>(
    seg: &[u8],
    src: A,
    dst: A,
    verified: bool,
    meta: &mut PacketMeta,
) -> Result<(), DropReason> {
    let Some(h) = seg.first_chunk::<{ tcp::HEADER_LEN }>() else {
        return Err(DropReason::TcpMalformed);
    };
    let t = tcp::Packet::new_unchecked(h);
    let doff = t.header_len();
    if doff < tcp::HEADER_LEN || doff > seg.len() {
        return Err(DropReason::TcpMalformed);
    }
    let flags = t.flags();
    if !tcp::flags_are_valid(flags) {
        return Err(DropReason::TcpBadFlags);
    }
    if !verified && !A::verify_l4(src, dst, protocol::TCP, seg) {
        return Err(DropReason::TcpBadChecksum);
    }
    meta.kind = PacketKind::Tcp;
    meta.tcp_flags = flags;
    A::set_key(
        meta,
        FlowKeyOf::new(Proto::Tcp, src, t.src_port(), dst, t.dst_port()),
    );
    Ok(())
}

#[inline(always)]
fn parse_udp<A: L4Family>(
    seg: &[u8],
    src: A,
    dst: A,
    verified: bool,
    meta: &mut PacketMeta,
) -> Result<(), DropReason> {
    let Some(h) = seg.first_chunk::<{ udp::HEADER_LEN }>() else {
        return Err(DropReason::UdpMalformed);
    };
    let u = udp::Packet::new_unchecked(h);
    let len = usize::from(u.len());
    if len < udp::HEADER_LEN || len > seg.len() {
        return Err(DropReason::UdpMalformed);
    }
    if !A::UDP_ZERO_CHECKSUM_OK && u.checksum() == 0 {
        return Err(DropReason::UdpBadChecksum);
    }
    if !verified && u.checksum() != 0 {
        let datagram = seg.get(..len).unwrap_or(&[]);
        if !A::verify_l4(src, dst, protocol::UDP, datagram) {
            return Err(DropReason::UdpBadChecksum);
        }
    }
    meta.kind = PacketKind::Udp;
    A::set_key(
        meta,
        FlowKeyOf::new(Proto::Udp, src, u.src_port(), dst, u.dst_port()),
    );
    Ok(())
}

#[inline(always)]
fn parse_icmp(
    msg: &[u8],
    l4: usize,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    verified: bool,
    meta: &mut PacketMeta,
) -> Result<(), DropReason> {
    let Some(h) = msg.first_chunk::<{ icmp::HEADER_LEN }>() else {
        return Err(DropReason::IcmpMalformed);
    };
    if !verified && checksum::sum(msg) != 0xffff {
        return Err(DropReason::IcmpBadChecksum);
    }
    let m = icmp::Packet::new_unchecked(h);
    let (icmp_type, code) = (m.msg_type(), m.msg_code());
    meta.icmp_type = icmp_type;
    meta.icmp_code = code;
    if icmp::is_echo(icmp_type) {
        let ident = m.echo_ident();
        meta.kind = PacketKind::IcmpEcho;
        meta.key = FlowKey::new(Proto::Icmp, src, ident, dst, ident);
        return Ok(());
    }
    if !icmp::is_error(icmp_type) {
        return Err(DropReason::IcmpUnsupported);
    }
    let inner = msg.get(icmp::ERROR_INNER_OFFSET..).unwrap_or(&[]);
    let Some(ih) = inner.first_chunk::<{ ipv4::HEADER_LEN }>() else {
        return Err(DropReason::IcmpMalformed);
    };
    let iv = ipv4::Packet::new_unchecked(ih);
    let inner_ihl = iv.header_len();
    if iv.version() != 4
        || inner_ihl < ipv4::HEADER_LEN
        || inner.len() < inner_ihl + icmp::ERROR_INNER_L4_BYTES
    {
        return Err(DropReason::IcmpMalformed);
    }
    let proto = match iv.protocol() {
        protocol::TCP => Proto::Tcp,
        protocol::UDP => Proto::Udp,
        _ => return Err(DropReason::IcmpMalformed),
    };
    // TCP and UDP both start with source and destination port.
    let Some(&[sp_hi, sp_lo, dp_hi, dp_lo]) = inner.get(inner_ihl..inner_ihl + 4) else {
        return Err(DropReason::IcmpMalformed);
    };
    let inner_l3 = l4 + icmp::ERROR_INNER_OFFSET;
    meta.kind = PacketKind::IcmpError;
    meta.inner_l3_offset = off16(inner_l3);
    meta.inner_l4_offset = off16(inner_l3 + inner_ihl);
    meta.key = FlowKey::new(
        proto,
        iv.src_addr(),
        be16(sp_hi, sp_lo),
        iv.dst_addr(),
        be16(dp_hi, dp_lo),
    );
    Ok(())
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_ipv6;
