//! The NAT stage: rewrite each tracked packet to the other side of its flow
//! and pick its egress port and next-hop MAC.
//!
//! * Client → service (original direction): destination becomes the backend,
//!   source becomes the flow's SNAT tuple (or stays the client without SNAT);
//!   out of the backend's next-hop port.
//! * Backend → gateway (reply direction): source becomes the service address
//!   the client used, destination the client; out of the port the client's
//!   packets came in on, to the MAC they came from.
//!
//! In both cases the new 4-tuple is the *reverse of the other direction's
//! key*, which is why a flow stores exactly its two keys.
//!
//! Checksums are updated incrementally (RFC 1624 eq. 3) for the IPv4 header
//! and the TCP/UDP checksum, whose pseudo-header covers the addresses; a UDP
//! checksum of 0 ("none", RFC 768) stays 0. TTL is decremented as a router
//! does (RFC 1812 §5.3.1); a packet that would leave with TTL 0 is dropped.
//! A SYN or SYN-ACK leaving a port with an `mss_clamp` has its MSS option
//! clamped ([`super::mss_clamp`]).
//!
//! A packet with a partial checksum (`meta.offload.needs_csum`: a GSO/GRO
//! super-packet from a driver with offloads on) keeps it partial: its
//! checksum field is the pseudo-header seed, updated for the addresses
//! only (`rewrite_ports_partial`); the device, the kernel's GSO or
//! [`crate::wire::gso`] completes it per segment.

use super::FlowSlot;
use super::mss_clamp::{self, Clamped};
use super::neighbour::NeighbourCtx;
use crate::counters::ServiceCounters;
use crate::counters::{Counters, DropReason};
use crate::driver::Frame;
use crate::flow::{FlowKey, Proto};
use crate::packet::{PacketKind, PacketMeta, Verdict};
use crate::snapshot::Snapshot;
use crate::wire::ipv4;
use crate::wire::tcp::flags as tcp_flags;

/// Offset of the checksum field inside a TCP / UDP header.
const TCP_CHECKSUM_OFFSET: usize = 16;
const UDP_CHECKSUM_OFFSET: usize = 6;

/// Never inlined into [`super::Pipeline::process`]: the per-packet loop
/// gets its own registers (inlined into the one function that holds the
/// whole IPv4 pipeline it spilled more: out of line, about 30 instructions
/// fewer per established packet and per new flow, `pipeline-probe`).
#[inline(never)]
pub fn run<F: Frame>(
    snap: &Snapshot,
    frames: &mut [F],
    metas: &mut [PacketMeta],
    flows: &[FlowSlot],
    neighbours: &mut NeighbourCtx<'_>,
    services: &mut ServiceCounters,
    counters: &mut Counters,
) {
    for (i, ((frame, meta), slot)) in frames
        .iter_mut()
        .zip(metas.iter_mut())
        .zip(flows.iter())
        .enumerate()
    {
        if !meta.is_pending() {
            continue;
        }
        let Some(plan) = slot.plan() else {
            continue;
        };
        let Some(port) = snap.ports.get(plan.out_port as usize) else {
            meta.drop(DropReason::NoRoute);
            continue;
        };
        if let Err(reason) = rewrite_packet(frame.data_mut(), meta, &meta.key, &plan.key, true) {
            meta.drop(reason);
            continue;
        }
        if meta.tcp_flags & (tcp_flags::SYN | tcp_flags::RST) == tcp_flags::SYN
            && let Some(mss) = port.mss_clamp
        {
            clamp_syn(frame, meta, mss, counters);
        }
        let buf = frame.data_mut();
        // Translated already: a packet awaiting its neighbour gets its
        // Ethernet addresses when the neighbour stage releases it.
        meta.verdict = neighbours.forward(buf, plan.out_port, port.mac, plan.next, i);
        if !matches!(meta.verdict, Verdict::Drop(_)) {
            services.count(
                plan.service,
                plan.backend,
                u64::from(meta.l3_end - meta.l3_offset),
            );
        }
    }
}

/// Out of the loop: only SYNs leaving a port with a clamp come here.
#[cold]
#[inline(never)]
fn clamp_syn<F: Frame>(frame: &mut F, meta: &mut PacketMeta, mss: u16, counters: &mut Counters) {
    if meta.kind == PacketKind::Tcp && mss_clamp::clamp(frame, meta, mss) != Clamped::No {
        counters.mss_clamped += 1;
    }
}

/// RFC 1624 eq. 3 terms `~m + m'` of a 32-bit field changing from `old` to
/// `new`, as two 16-bit words, not folded. Adding several fields' terms to
/// `~HC` and folding once gives bit for bit the checksum of updating field
/// by field (a fold is 0 only for an all-zero sum either way, and otherwise
/// the unique representative in `1..=0xffff`).
#[inline(always)]
fn delta32(old: u32, new: u32) -> u32 {
    u32::from(!(old >> 16) as u16) + u32::from(!(old as u16)) + (new >> 16) + (new & 0xffff)
}

/// `!fold(!csum + delta)`: apply accumulated RFC 1624 terms (`delta` below
/// 2^31) to a checksum.
#[inline(always)]
fn apply_delta(csum: u16, delta: u32) -> u16 {
    let mut acc = u32::from(!csum) + delta;
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    !(acc as u16)
}

/// Offsets inside the IPv4 header.
const IP_TTL: usize = 8;
const IP_PROTOCOL: usize = 9;
const IP_CHECKSUM: usize = 10;
const IP_SRC: usize = 12;
const IP_DST: usize = 16;

/// Rewrite the IPv4 addresses and L4 ports of the packet at `meta`'s
/// offsets from `old` to `new`, updating checksums incrementally, and
/// decrement the TTL when `forwarding`.
///
/// One length check per header, then fixed offsets; the address terms are
/// computed once and shared by the IPv4 header checksum and the TCP/UDP
/// pseudo-header.
#[inline]
pub fn rewrite_packet(
    frame: &mut [u8],
    meta: &PacketMeta,
    old: &FlowKey,
    new: &FlowKey,
    forwarding: bool,
) -> Result<(), DropReason> {
    let (l3, l4, end) = (
        usize::from(meta.l3_offset),
        usize::from(meta.l4_offset),
        usize::from(meta.l3_end),
    );
    if l3 > l4 || l4 > end {
        return Err(DropReason::Ipv4BadLength);
    }
    let Some(packet) = frame.get_mut(l3..end) else {
        return Err(DropReason::Ipv4BadLength);
    };
    let (ip, seg) = packet.split_at_mut(l4 - l3);
    let Some(h) = ip.first_chunk_mut::<{ ipv4::HEADER_LEN }>() else {
        return Err(DropReason::Ipv4BadLength);
    };
    let addr_delta = delta32(u32::from(old.src_ip), u32::from(new.src_ip))
        + delta32(u32::from(old.dst_ip), u32::from(new.dst_ip));
    let mut ip_delta = addr_delta;
    if forwarding {
        let ttl = h[IP_TTL];
        if ttl <= 1 {
            return Err(DropReason::Ipv4TtlExpired);
        }
        let proto = h[IP_PROTOCOL];
        h[IP_TTL] = ttl - 1;
        ip_delta += u32::from(!u16::from_be_bytes([ttl, proto]))
            + u32::from(u16::from_be_bytes([ttl - 1, proto]));
    }
    let ip_csum = u16::from_be_bytes([h[IP_CHECKSUM], h[IP_CHECKSUM + 1]]);
    let ip_csum = apply_delta(ip_csum, ip_delta);
    h[IP_CHECKSUM..IP_CHECKSUM + 2].copy_from_slice(&ip_csum.to_be_bytes());
    h[IP_SRC..IP_SRC + 4].copy_from_slice(&new.src_ip.octets());
    h[IP_DST..IP_DST + 4].copy_from_slice(&new.dst_ip.octets());
    if meta.offload.needs_csum {
        return rewrite_ports_partial(seg, old, new, addr_delta);
    }
    rewrite_ports(seg, old, new, addr_delta, true)
}

/// [`rewrite_ports`] for a packet whose L4 checksum is still partial
/// (`NEEDS_CSUM`, a GSO/GRO super-packet): the field holds the
/// pseudo-header seed — the folded sum, *not* complemented — and whoever
/// sends the packet adds the L4 header and payload to it. The seed
/// changes with the addresses (they are in the pseudo-header) but not with
/// the ports (they are in the data the device sums): `seed' = seed + ~m +
/// m'` over the address words only (RFC 1624 eq. 3 without the outer
/// complements).
#[cold]
#[inline(never)]
fn rewrite_ports_partial(
    seg: &mut [u8],
    old: &FlowKey,
    new: &FlowKey,
    addr_delta: u32,
) -> Result<(), DropReason> {
    let csum_off = match old.proto {
        Proto::Tcp => TCP_CHECKSUM_OFFSET,
        Proto::Udp => UDP_CHECKSUM_OFFSET,
        Proto::Icmp => return Ok(()),
    };
    let seed = seg
        .get(csum_off..csum_off + 2)
        .map(|f| u16::from_be_bytes([f[0], f[1]]));
    // The ports (and the lengths checks) as for any packet, then the
    // field becomes the seed moved by the address terms only.
    rewrite_ports(seg, old, new, addr_delta, true)?;
    if let (Some(seed), Some(field)) = (seed, seg.get_mut(csum_off..csum_off + 2)) {
        field.copy_from_slice(&(!apply_delta(!seed, addr_delta)).to_be_bytes());
    }
    Ok(())
}

/// Rewrite ports (and fix the checksum for addresses and ports) of a TCP or
/// UDP header at the start of `seg`. With `full_header == false` (the
/// truncated inner packet of an ICMP error) a checksum field beyond `seg` is
/// left alone.
pub(crate) fn rewrite_l4(
    seg: &mut [u8],
    old: &FlowKey,
    new: &FlowKey,
    full_header: bool,
) -> Result<(), DropReason> {
    let addr_delta = delta32(u32::from(old.src_ip), u32::from(new.src_ip))
        + delta32(u32::from(old.dst_ip), u32::from(new.dst_ip));
    rewrite_ports(seg, old, new, addr_delta, full_header)
}

/// [`rewrite_l4`] with the pseudo-header address terms already computed.
#[inline(always)]
fn rewrite_ports(
    seg: &mut [u8],
    old: &FlowKey,
    new: &FlowKey,
    addr_delta: u32,
    full_header: bool,
) -> Result<(), DropReason> {
    let (csum_off, udp) = match old.proto {
        Proto::Tcp => (TCP_CHECKSUM_OFFSET, false),
        Proto::Udp => (UDP_CHECKSUM_OFFSET, true),
        Proto::Icmp => return Ok(()),
    };
    let malformed = if udp {
        DropReason::UdpMalformed
    } else {
        DropReason::TcpMalformed
    };
    let Some(ports) = seg.first_chunk_mut::<4>() else {
        return Err(malformed);
    };
    ports[0..2].copy_from_slice(&new.src_port.to_be_bytes());
    ports[2..4].copy_from_slice(&new.dst_port.to_be_bytes());
    let Some(field) = seg
        .get_mut(csum_off..)
        .and_then(|f| f.first_chunk_mut::<2>())
    else {
        return if full_header { Err(malformed) } else { Ok(()) };
    };
    let csum = u16::from_be_bytes(*field);
    if udp && csum == 0 {
        return Ok(());
    }
    let port_delta = delta32(
        u32::from(old.src_port) << 16 | u32::from(old.dst_port),
        u32::from(new.src_port) << 16 | u32::from(new.dst_port),
    );
    let mut csum = apply_delta(csum, addr_delta + port_delta);
    if udp && csum == 0 {
        csum = 0xffff;
    }
    *field = csum.to_be_bytes();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::parse::parse_frame;
    use crate::wire::checksum;
    use crate::wire::{MacAddr, build};
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    fn frame(key: &FlowKey, payload: &[u8]) -> Vec<u8> {
        let (s, sp, d, dp) = (key.src_ip, key.src_port, key.dst_ip, key.dst_port);
        match key.proto {
            Proto::Tcp => build::eth_ipv4_tcp(A, B, s, sp, d, dp, tcp_flags::ACK, 7, 9, payload),
            _ => build::eth_ipv4_udp(A, B, s, sp, d, dp, payload),
        }
    }

    fn addr() -> impl Strategy<Value = Ipv4Addr> {
        // 1.0.0.0 up to (not including) 127.0.0.0: unicast, not loopback,
        // so the parse stage accepts it as a source.
        (0x0100_0000u32..0x7f00_0000).prop_map(Ipv4Addr::from)
    }

    proptest! {
        /// The incremental rewrite (one accumulated RFC 1624 update for the
        /// addresses, ports and TTL) equals the frame built from scratch
        /// for the new tuple, TTL one lower, byte for byte; a UDP checksum
        /// of 0 ("none") stays 0.
        #[test]
        fn rewrite_matches_full_recomputation(
            udp in any::<bool>(),
            no_udp_checksum in any::<bool>(),
            (s, d, ns, nd) in (addr(), addr(), addr(), addr()),
            (sp, dp, nsp, ndp) in (1u16.., 1u16.., 1u16.., 1u16..),
            payload in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let proto = if udp { Proto::Udp } else { Proto::Tcp };
            let old = FlowKey::new(proto, s, sp, d, dp);
            let new = FlowKey::new(proto, ns, nsp, nd, ndp);
            let mut got = frame(&old, &payload);
            let mut want = frame(&new, &payload);
            if udp && no_udp_checksum {
                got[40..42].fill(0);
                want[40..42].fill(0);
            }
            let meta = parse_frame(&got, 0, false, &crate::flow::TableHasher::from_seed(1)).expect("valid frame");
            rewrite_packet(&mut got, &meta, &old, &new, true).expect("rewrite");
            let mut ip = ipv4::Packet::new_unchecked(&mut want[14..34]);
            ip.set_ttl(build::DEFAULT_TTL - 1);
            ip.fill_checksum();
            prop_assert_eq!(got, want);
        }

        /// A frame with a partial checksum (`NEEDS_CSUM`: the field holds
        /// the pseudo-header seed), rewritten, then completed in software
        /// as the device would, equals the frame built from scratch for the
        /// new tuple; and a super-packet rewritten and cut into segments
        /// gives segments that all verify.
        #[test]
        fn partial_checksum_rewrite_completes_to_the_full_checksum(
            udp in any::<bool>(),
            (s, d, ns, nd) in (addr(), addr(), addr(), addr()),
            (sp, dp, nsp, ndp) in (1u16.., 1u16.., 1u16.., 1u16..),
            payload in proptest::collection::vec(any::<u8>(), 0..3000),
            gso_size in 500u16..1500,
        ) {
            let proto = if udp { Proto::Udp } else { Proto::Tcp };
            let old = FlowKey::new(proto, s, sp, d, dp);
            let new = FlowKey::new(proto, ns, nsp, nd, ndp);
            let mut got = frame(&old, &payload);
            let mut want = frame(&new, &payload);
            let mut ip = ipv4::Packet::new_unchecked(&mut want[14..34]);
            ip.set_ttl(build::DEFAULT_TTL - 1);
            ip.fill_checksum();
            let offload = build::make_partial(&mut got, 0);
            let hasher = crate::flow::TableHasher::from_seed(1);
            let mut meta = parse_frame(&got, 0, true, &hasher).expect("valid frame");
            meta.offload = offload;
            rewrite_packet(&mut got, &meta, &old, &new, true).expect("rewrite");
            crate::wire::gso::complete_checksum(&mut got, &offload).expect("complete");
            prop_assert_eq!(&got, &want);

            // The same payload as a super-packet.
            let mut sp_frame = frame(&old, &payload);
            let offload = build::make_partial(&mut sp_frame, gso_size);
            meta.offload = offload;
            meta.l3_end = (sp_frame.len()) as u16;
            rewrite_packet(&mut sp_frame, &meta, &old, &new, true).expect("rewrite");
            let mut buf = [0u8; 1600];
            let mut joined = Vec::new();
            crate::wire::gso::segment(&sp_frame, &offload, &mut buf, |seg| {
                let ip = ipv4::Packet::new_unchecked(&seg[14..]);
                assert!(ip.verify_checksum());
                assert_eq!((ip.src_addr(), ip.dst_addr()), (ns, nd));
                let l4 = &seg[34..];
                assert!(checksum::verify_l4(ns, nd, if udp { 17 } else { 6 }, l4));
                assert_eq!(&l4[..4], &[nsp.to_be_bytes(), ndp.to_be_bytes()].concat()[..]);
                joined.extend_from_slice(&l4[if udp { 8 } else { 20 }..]);
            }).expect("segment");
            prop_assert_eq!(joined, payload);
        }

        /// The IPv6 counterpart (`stage::ipv6::nat`): a partial checksum
        /// rewritten, then completed as the device would, equals the frame
        /// built for the new tuple (hop limit one lower); a `TcpV6`/`UdpL4`
        /// super-packet rewritten and cut as the kernel's GSO would cut it
        /// gives segments whose checksums equal a full recomputation.
        #[test]
        fn partial_checksum_rewrite_completes_to_the_full_checksum_over_ipv6(
            udp in any::<bool>(),
            (s, d, ns, nd) in (addr6(), addr6(), addr6(), addr6()),
            (sp, dp, nsp, ndp) in (1u16.., 1u16.., 1u16.., 1u16..),
            payload in proptest::collection::vec(any::<u8>(), 0..3000),
            gso_size in 500u16..1400,
        ) {
            use crate::flow::FlowKey6;
            use crate::wire::ipv6;
            use crate::wire::vnet::Gso;
            let proto = if udp { Proto::Udp } else { Proto::Tcp };
            let old = FlowKey6::new(proto, s, sp, d, dp);
            let new = FlowKey6::new(proto, ns, nsp, nd, ndp);
            let mut got = frame6(&old, &payload);
            let mut want = frame6(&new, &payload);
            ipv6::Packet::new_unchecked(&mut want[14..54]).set_hop_limit(build::DEFAULT_HOP_LIMIT - 1);
            let offload = build::make_partial(&mut got, 0);
            let hasher = crate::flow::TableHasher::from_seed(1);
            let mut meta = parse_frame(&got, 0, true, &hasher).expect("valid frame");
            meta.offload = offload;
            crate::stage::ipv6::nat::rewrite(&mut got, &meta, &old, &new).expect("rewrite");
            crate::wire::gso::complete_checksum(&mut got, &offload).expect("complete");
            prop_assert_eq!(&got, &want);

            let mut sp_frame = frame6(&old, &payload);
            let offload = build::make_partial(&mut sp_frame, gso_size);
            prop_assert_eq!(offload.gso, if udp { Gso::UdpL4 } else { Gso::TcpV6 });
            meta.offload = offload;
            meta.l3_end = sp_frame.len() as u16;
            crate::stage::ipv6::nat::rewrite(&mut sp_frame, &meta, &old, &new).expect("rewrite");
            let mut buf = [0u8; 1600];
            let mut joined = Vec::new();
            let hdr = if udp { 8 } else { 20 };
            crate::wire::gso::segment(&sp_frame, &offload, &mut buf, |seg| {
                let ip = ipv6::Packet::new_unchecked(&seg[14..54]);
                assert_eq!((ip.src_addr(), ip.dst_addr()), (ns, nd));
                let l4 = &seg[54..];
                assert!(checksum::verify_l4_v6(ns, nd, if udp { 17 } else { 6 }, l4));
                // The checksum equals one computed from scratch.
                let mut zeroed = l4.to_vec();
                let at = if udp { 6 } else { 16 };
                zeroed[at..at + 2].fill(0);
                let mut full = checksum::l4_checksum_v6(ns, nd, if udp { 17 } else { 6 }, &zeroed);
                if udp && full == 0 {
                    full = 0xffff;
                }
                assert_eq!(u16::from_be_bytes([l4[at], l4[at + 1]]), full);
                assert_eq!(&l4[..4], &[nsp.to_be_bytes(), ndp.to_be_bytes()].concat()[..]);
                joined.extend_from_slice(&l4[hdr..]);
            }).expect("segment");
            prop_assert_eq!(joined, payload);
        }
    }

    proptest! {
        /// The IPv6 rewrite (both addresses' and both ports' RFC 1624 terms
        /// summed once, folded once) equals the frame built from scratch for
        /// the new tuple, hop limit one lower, byte for byte — also when the
        /// checksum before is `0x0000` (TCP) or the `0xffff` UDP sends for a
        /// computed 0 (RFC 8200 §8.1).
        #[test]
        fn rewrite_matches_full_recomputation_over_ipv6(
            udp in any::<bool>(),
            zero_checksum in any::<bool>(),
            (s, d, ns, nd) in (addr6(), addr6(), addr6(), addr6()),
            (sp, dp, nsp, ndp) in (1u16.., 1u16.., 1u16.., 1u16..),
            mut payload in proptest::collection::vec(any::<u8>(), 2..40),
        ) {
            use crate::flow::FlowKey6;
            use crate::wire::ipv6;
            let proto = if udp { Proto::Udp } else { Proto::Tcp };
            let old = FlowKey6::new(proto, s, sp, d, dp);
            let new = FlowKey6::new(proto, ns, nsp, nd, ndp);
            let at = 54 + if udp { 6 } else { 16 };
            if zero_checksum {
                // The first payload word set to the checksum it makes
                // when zero: the sum becomes -0, the checksum 0.
                payload[..2].fill(0);
                let c = frame6(&old, &payload)[at..at + 2].to_vec();
                payload[..2].copy_from_slice(&c);
            }
            let mut got = frame6(&old, &payload);
            if zero_checksum {
                let want_field = if udp { [0xff, 0xff] } else { [0, 0] };
                prop_assert_eq!(&got[at..at + 2], &want_field[..]);
            }
            let mut want = frame6(&new, &payload);
            ipv6::Packet::new_unchecked(&mut want[14..54]).set_hop_limit(build::DEFAULT_HOP_LIMIT - 1);
            let hasher = crate::flow::TableHasher::from_seed(1);
            let meta = parse_frame(&got, 0, false, &hasher).expect("valid frame");
            crate::stage::ipv6::nat::rewrite(&mut got, &meta, &old, &new).expect("rewrite");
            prop_assert_eq!(got, want);
        }
    }

    fn frame6(key: &crate::flow::FlowKey6, payload: &[u8]) -> Vec<u8> {
        let (s, d) = ((key.src_ip, key.src_port), (key.dst_ip, key.dst_port));
        match key.proto {
            Proto::Tcp => build::eth_ipv6_tcp(A, B, s, d, tcp_flags::ACK, 7, 9, payload),
            _ => build::eth_ipv6_udp(A, B, s, d, payload),
        }
    }

    fn addr6() -> impl Strategy<Value = std::net::Ipv6Addr> {
        // Global unicast (2000::/3): the parse stage takes it as a source.
        any::<u128>().prop_map(|a| std::net::Ipv6Addr::from_bits((a >> 3) | (1 << 125)))
    }
}
