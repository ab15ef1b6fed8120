//! The IPv6 NAT rewrite: addresses and ports from one side of a flow to
//! the other, as the IPv4 stage ([`crate::stage::nat`]) does, with what
//! IPv6 changes (RFC 8200): no header checksum to update, the TCP/UDP
//! checksum updated incrementally over the pseudo-header's 128-bit
//! addresses and the ports (RFC 1624 eq. 3: the terms `~m + m'` of both
//! addresses, as 64-bit words with end-around carry, [`checksum::terms_ipv6`],
//! and of both ports summed once and folded once — not word by word), a UDP checksum
//! never 0 (RFC 8200 §8.1: a computed 0 is sent as `0xffff`), and the hop
//! limit decremented (RFC 8200 §3); a packet that arrives with hop limit
//! 1 or 0 is not forwarded (`ipv6_hop_limit_expired`, answered with Time
//! Exceeded by `stage::icmp_reply`).
//!
//! A packet whose checksum is still partial (`meta.offload.needs_csum`: a
//! GSO/GRO super-packet, `TcpV6` or `UdpL4`) holds the pseudo-header seed
//! in its checksum field; the seed moves with the addresses only (the
//! ports are in the data the device sums when it cuts the segments), as
//! `stage::nat` does for IPv4.

use crate::counters::DropReason;
use crate::flow::{FlowKey6, Proto};
use crate::packet::PacketMeta;
use crate::wire::{checksum, ipv6 as wire6};

const TCP_CHECKSUM_OFFSET: usize = 16;
const UDP_CHECKSUM_OFFSET: usize = 6;

/// Offsets inside the IPv6 header (RFC 8200 §3).
const HOP_LIMIT: usize = 7;
const SRC: usize = 8;
const DST: usize = 24;

/// Rewrite the packet at `meta`'s offsets from `old` to `new` and
/// decrement its hop limit.
///
/// One length check per header, then fixed offsets; the RFC 1624 terms of
/// the two 128-bit addresses are summed once ([`checksum::terms_ipv6`]) and
/// folded once with the ports' into the TCP/UDP checksum.
#[inline]
pub fn rewrite(
    frame: &mut [u8],
    meta: &PacketMeta,
    old: &FlowKey6,
    new: &FlowKey6,
) -> Result<(), DropReason> {
    let (l3, l4, end) = (
        usize::from(meta.l3_offset),
        usize::from(meta.l4_offset),
        usize::from(meta.l3_end),
    );
    if l3 > l4 {
        return Err(DropReason::Internal);
    }
    let Some(packet) = frame.get_mut(l3..end) else {
        return Err(DropReason::Internal);
    };
    let Some((ip, seg)) = packet.split_at_mut_checked(l4 - l3) else {
        return Err(DropReason::Internal);
    };
    let Some(h) = ip.first_chunk_mut::<{ wire6::HEADER_LEN }>() else {
        return Err(DropReason::Internal);
    };
    let hop = h[HOP_LIMIT];
    if hop <= 1 {
        return Err(DropReason::Ipv6HopLimitExpired);
    }
    h[HOP_LIMIT] = hop - 1;
    h[SRC..SRC + 16].copy_from_slice(&new.src_ip.octets());
    h[DST..DST + 16].copy_from_slice(&new.dst_ip.octets());
    let addr_terms = address_terms(old, new);
    if meta.offload.needs_csum {
        return rewrite_partial(seg, old, new, addr_terms);
    }
    rewrite_ports(seg, old, new, addr_terms)
}

/// The RFC 1624 terms of both addresses of `old` becoming `new`'s.
#[inline(always)]
fn address_terms(old: &FlowKey6, new: &FlowKey6) -> u64 {
    checksum::add_terms(
        checksum::terms_ipv6(old.src_ip, new.src_ip),
        checksum::terms_ipv6(old.dst_ip, new.dst_ip),
    )
}

/// Where the checksum of a `proto` header is, and the drop reason of a
/// header too short for the rewrite (ICMPv6 is not rewritten here).
#[inline(always)]
fn l4_checksum_at(proto: Proto) -> Result<(usize, DropReason), DropReason> {
    match proto {
        Proto::Tcp => Ok((TCP_CHECKSUM_OFFSET, DropReason::TcpMalformed)),
        Proto::Udp => Ok((UDP_CHECKSUM_OFFSET, DropReason::UdpMalformed)),
        Proto::Icmp => Err(DropReason::Internal),
    }
}

/// [`rewrite_l4`] for a partial checksum: the ports, and the seed (a
/// folded sum, not complemented) moved by the address terms only:
/// `seed' = seed + ~m + m'` (RFC 1624 eq. 3 without the outer complements).
#[cold]
#[inline(never)]
fn rewrite_partial(
    seg: &mut [u8],
    old: &FlowKey6,
    new: &FlowKey6,
    addr_terms: u64,
) -> Result<(), DropReason> {
    let (csum_at, malformed) = l4_checksum_at(old.proto)?;
    let Some(h) = seg.get_mut(..csum_at + 2) else {
        return Err(malformed);
    };
    let seed = u16::from_be_bytes([h[csum_at], h[csum_at + 1]]);
    let seed = !checksum::apply_terms(!seed, addr_terms);
    h[..2].copy_from_slice(&new.src_port.to_be_bytes());
    h[2..4].copy_from_slice(&new.dst_port.to_be_bytes());
    h[csum_at..csum_at + 2].copy_from_slice(&seed.to_be_bytes());
    Ok(())
}

/// The TCP/UDP header at the start of `seg` from `old` to `new`: ports,
/// and the checksum when `seg` holds it (an ICMPv6 error's quote may stop
/// after 8 bytes of TCP).
pub(super) fn rewrite_l4(seg: &mut [u8], old: &FlowKey6, new: &FlowKey6) -> Result<(), DropReason> {
    if matches!(old.proto, Proto::Tcp | Proto::Udp) && seg.len() < 4 {
        return Err(DropReason::IcmpMalformed);
    }
    rewrite_ports(seg, old, new, address_terms(old, new))
}

/// Ports of the TCP/UDP header at the start of `seg`, and its checksum
/// (addresses, by `addr_terms`, and ports) when `seg` holds it.
#[inline(always)]
fn rewrite_ports(
    seg: &mut [u8],
    old: &FlowKey6,
    new: &FlowKey6,
    addr_terms: u64,
) -> Result<(), DropReason> {
    let (csum_at, malformed) = l4_checksum_at(old.proto)?;
    let Some(ports) = seg.first_chunk_mut::<4>() else {
        return Err(malformed);
    };
    ports[..2].copy_from_slice(&new.src_port.to_be_bytes());
    ports[2..].copy_from_slice(&new.dst_port.to_be_bytes());
    let Some(field) = seg
        .get_mut(csum_at..)
        .and_then(|f| f.first_chunk_mut::<2>())
    else {
        return Ok(());
    };
    let port_terms = checksum::terms_u16(old.src_port, new.src_port)
        + checksum::terms_u16(old.dst_port, new.dst_port);
    let mut csum = checksum::apply_terms(
        u16::from_be_bytes(*field),
        checksum::add_terms(addr_terms, port_terms),
    );
    if csum_at == UDP_CHECKSUM_OFFSET && csum == 0 {
        csum = 0xffff;
    }
    *field = csum.to_be_bytes();
    Ok(())
}
