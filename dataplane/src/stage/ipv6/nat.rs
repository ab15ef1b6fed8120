//! The IPv6 NAT rewrite: addresses and ports from one side of a flow to
//! the other, as the IPv4 stage ([`crate::stage::nat`]) does, with what
//! IPv6 changes (RFC 8200): no header checksum to update, the TCP/UDP
//! checksum updated incrementally over the pseudo-header's 128-bit
//! addresses (RFC 1624 eq. 3, [`checksum::update_ipv6`]), a UDP checksum
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

/// Rewrite the packet at `meta`'s offsets from `old` to `new` and
/// decrement its hop limit.
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
    let Some(ip) = frame.get_mut(l3..end) else {
        return Err(DropReason::Internal);
    };
    let mut p = wire6::Packet::new_unchecked(ip);
    let hop = p.hop_limit();
    if hop <= 1 {
        return Err(DropReason::Ipv6HopLimitExpired);
    }
    p.set_hop_limit(hop - 1);
    p.set_src_addr(new.src_ip);
    p.set_dst_addr(new.dst_ip);
    let Some(seg) = frame.get_mut(l4..end) else {
        return Err(DropReason::Internal);
    };
    if meta.offload.needs_csum {
        return rewrite_partial(seg, old, new);
    }
    rewrite_l4(seg, old, new)
}

/// [`rewrite_l4`] for a partial checksum: the ports, and the seed (a
/// folded sum, not complemented) moved by the address terms only:
/// `seed' = seed + ~m + m'` (RFC 1624 eq. 3 without the outer complements).
#[cold]
#[inline(never)]
fn rewrite_partial(seg: &mut [u8], old: &FlowKey6, new: &FlowKey6) -> Result<(), DropReason> {
    let (csum_at, malformed) = match old.proto {
        Proto::Tcp => (TCP_CHECKSUM_OFFSET, DropReason::TcpMalformed),
        Proto::Udp => (UDP_CHECKSUM_OFFSET, DropReason::UdpMalformed),
        Proto::Icmp => return Err(DropReason::Internal),
    };
    let Some(h) = seg.get_mut(..csum_at + 2) else {
        return Err(malformed);
    };
    let seed = u16::from_be_bytes([h[csum_at], h[csum_at + 1]]);
    let moved = checksum::update_ipv6(!seed, old.src_ip, new.src_ip);
    let seed = !checksum::update_ipv6(moved, old.dst_ip, new.dst_ip);
    h[..2].copy_from_slice(&new.src_port.to_be_bytes());
    h[2..4].copy_from_slice(&new.dst_port.to_be_bytes());
    h[csum_at..csum_at + 2].copy_from_slice(&seed.to_be_bytes());
    Ok(())
}

/// The TCP/UDP header at the start of `seg` from `old` to `new`: ports,
/// and the checksum when `seg` holds it (an ICMPv6 error's quote may stop
/// after 8 bytes of TCP).
pub(super) fn rewrite_l4(seg: &mut [u8], old: &FlowKey6, new: &FlowKey6) -> Result<(), DropReason> {
    let csum_at = match old.proto {
        Proto::Tcp => TCP_CHECKSUM_OFFSET,
        Proto::Udp => UDP_CHECKSUM_OFFSET,
        Proto::Icmp => return Err(DropReason::Internal),
    };
    match seg.get_mut(..csum_at + 2) {
        Some(h) => patch(h, csum_at, old, new),
        None => {
            let Some(h) = seg.get_mut(..4) else {
                return Err(DropReason::IcmpMalformed);
            };
            h[..2].copy_from_slice(&new.src_port.to_be_bytes());
            h[2..].copy_from_slice(&new.dst_port.to_be_bytes());
        }
    }
    Ok(())
}

/// Ports and checksum of the L4 header `h` (at least 8 bytes).
fn patch(h: &mut [u8], csum_at: usize, old: &FlowKey6, new: &FlowKey6) {
    let Some(&[c0, c1]) = h.get(csum_at..csum_at + 2) else {
        return;
    };
    let mut csum = u16::from_be_bytes([c0, c1]);
    csum = checksum::update_ipv6(csum, old.src_ip, new.src_ip);
    csum = checksum::update_ipv6(csum, old.dst_ip, new.dst_ip);
    csum = checksum::update_u16(csum, old.src_port, new.src_port);
    csum = checksum::update_u16(csum, old.dst_port, new.dst_port);
    if csum_at == UDP_CHECKSUM_OFFSET && csum == 0 {
        csum = 0xffff;
    }
    if let Some(b) = h.get_mut(0..4) {
        b[..2].copy_from_slice(&new.src_port.to_be_bytes());
        b[2..].copy_from_slice(&new.dst_port.to_be_bytes());
    }
    if let Some(b) = h.get_mut(csum_at..csum_at + 2) {
        b.copy_from_slice(&csum.to_be_bytes());
    }
}
