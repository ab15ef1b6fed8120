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

use super::{FlowSlot, NeighbourCtx};
use crate::counters::DropReason;
use crate::driver::Frame;
use crate::flow::{FlowKey, Proto};
use crate::packet::{PacketKind, PacketMeta, Verdict, tcp_flags};
use crate::snapshot::Snapshot;
use crate::wire::{MacAddr, checksum, ethernet, ipv4, tcp};

/// Offset of the checksum field inside a TCP / UDP header.
const TCP_CHECKSUM_OFFSET: usize = 16;
const UDP_CHECKSUM_OFFSET: usize = 6;

pub fn run<F: Frame>(
    snap: &Snapshot,
    frames: &mut [F],
    metas: &mut [PacketMeta],
    flows: &[FlowSlot],
    neighbours: &mut NeighbourCtx<'_>,
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
        let buf = frame.data_mut();
        if let Err(reason) = rewrite_packet(buf, meta, &meta.key, &plan.key, true) {
            meta.drop(reason);
            continue;
        }
        match neighbours.resolve(plan.out_port, plan.next, i) {
            Ok(mac) => {
                set_l2(buf, port.mac, mac);
                meta.verdict = Verdict::Forward(plan.out_port);
            }
            // Translated already; the worker sets L2 once the MAC is known.
            Err(verdict) => meta.verdict = verdict,
        }
    }
}

/// Set the Ethernet source and destination.
#[inline]
pub(crate) fn set_l2(frame: &mut [u8], src: [u8; 6], dst: [u8; 6]) {
    let mut eth = ethernet::Packet::new_unchecked(frame);
    eth.set_dst_addr(MacAddr(dst));
    eth.set_src_addr(MacAddr(src));
}

/// Rewrite the IPv4 addresses and L4 ports of the packet at `meta`'s
/// offsets from `old` to `new`, updating checksums incrementally, and
/// decrement the TTL when `forwarding`.
#[inline]
pub(crate) fn rewrite_packet(
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
    let Some(ip_bytes) = frame.get_mut(l3..end) else {
        return Err(DropReason::Ipv4BadLength);
    };
    let mut ip = ipv4::Packet::new_unchecked(ip_bytes);
    let mut ip_csum = ip.checksum();
    if forwarding {
        let ttl = ip.ttl();
        if ttl <= 1 {
            return Err(DropReason::Ipv4TtlExpired);
        }
        let proto = ip.protocol();
        ip.set_ttl(ttl - 1);
        ip_csum = checksum::update_u16(
            ip_csum,
            u16::from_be_bytes([ttl, proto]),
            u16::from_be_bytes([ttl - 1, proto]),
        );
    }
    let (old_src, new_src) = (u32::from(old.src_ip), u32::from(new.src_ip));
    let (old_dst, new_dst) = (u32::from(old.dst_ip), u32::from(new.dst_ip));
    ip_csum = checksum::update_u32(ip_csum, old_src, new_src);
    ip_csum = checksum::update_u32(ip_csum, old_dst, new_dst);
    ip.set_src_addr(new.src_ip);
    ip.set_dst_addr(new.dst_ip);
    ip.set_checksum(ip_csum);

    let Some(seg) = frame.get_mut(l4..end) else {
        return Err(DropReason::Ipv4BadLength);
    };
    rewrite_l4(seg, old, new, true)
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
    let (csum_off, udp) = match old.proto {
        Proto::Tcp => (TCP_CHECKSUM_OFFSET, false),
        Proto::Udp => (UDP_CHECKSUM_OFFSET, true),
        Proto::Icmp => return Ok(()),
    };
    if seg.len() < 4 {
        return Err(if udp {
            DropReason::UdpMalformed
        } else {
            DropReason::TcpMalformed
        });
    }
    seg[0..2].copy_from_slice(&new.src_port.to_be_bytes());
    seg[2..4].copy_from_slice(&new.dst_port.to_be_bytes());
    let Some(field) = seg.get_mut(csum_off..csum_off + 2) else {
        return if full_header {
            Err(if udp {
                DropReason::UdpMalformed
            } else {
                DropReason::TcpMalformed
            })
        } else {
            Ok(())
        };
    };
    let mut csum = u16::from_be_bytes([field[0], field[1]]);
    if udp && csum == 0 {
        return Ok(());
    }
    let words = [
        (u32::from(old.src_ip), u32::from(new.src_ip)),
        (u32::from(old.dst_ip), u32::from(new.dst_ip)),
        (
            u32::from(old.src_port) << 16 | u32::from(old.dst_port),
            u32::from(new.src_port) << 16 | u32::from(new.dst_port),
        ),
    ];
    for (o, n) in words {
        csum = checksum::update_u32(csum, o, n);
    }
    if udp && csum == 0 {
        csum = 0xffff;
    }
    field.copy_from_slice(&csum.to_be_bytes());
    Ok(())
}

/// Turn a client's TCP segment into a RST from the service back to the
/// client (RFC 9293 §3.10.7.1: seq from the segment's ACK if it has one,
/// else seq 0 and ACK covering the segment). Returns false if the frame is
/// not a TCP segment this can answer (another RST, say).
pub(crate) fn reset_in_place<F: Frame>(
    snap: &Snapshot,
    frame: &mut F,
    meta: &mut PacketMeta,
) -> bool {
    if meta.kind != PacketKind::Tcp || meta.tcp_flags & tcp_flags::RST != 0 {
        return false;
    }
    let Some(port) = snap.ports.get(meta.in_port as usize) else {
        return false;
    };
    let (l3, l4, end) = (
        usize::from(meta.l3_offset),
        usize::from(meta.l4_offset),
        usize::from(meta.l3_end),
    );
    let buf = frame.data_mut();
    let Some(seg) = buf.get(l4..end) else {
        return false;
    };
    let in_tcp = tcp::Packet::new_unchecked(seg);
    let payload_len = seg.len().saturating_sub(in_tcp.header_len()) as u32;
    let (seq, ack, flags) = if meta.tcp_flags & tcp_flags::ACK != 0 {
        (in_tcp.ack_number(), 0, tcp_flags::RST)
    } else {
        let syn_fin = u32::from(meta.tcp_flags & (tcp_flags::SYN | tcp_flags::FIN) != 0);
        (
            0,
            in_tcp.seq_number().wrapping_add(payload_len + syn_fin),
            tcp_flags::RST | tcp_flags::ACK,
        )
    };
    let key = meta.key.reversed();
    let ip_header_len = l4 - l3;
    let total_len = ip_header_len + tcp::HEADER_LEN;
    {
        let Some(seg) = buf.get_mut(l4..l4 + tcp::HEADER_LEN) else {
            return false;
        };
        let mut out = tcp::Packet::new_unchecked(seg);
        out.set_src_port(key.src_port);
        out.set_dst_port(key.dst_port);
        out.set_seq_number(seq);
        out.set_ack_number(ack);
        out.set_data_offset_words(5);
        out.set_flags(flags);
        out.set_window(0);
        out.set_urgent_pointer(0);
        out.set_checksum(0);
        let csum = checksum::l4_checksum(key.src_ip, key.dst_ip, 6, out.into_inner());
        tcp::Packet::new_unchecked(&mut buf[l4..l4 + tcp::HEADER_LEN]).set_checksum(csum);
    }
    {
        let mut ip = ipv4::Packet::new_unchecked(&mut buf[l3..l4]);
        ip.set_src_addr(key.src_ip);
        ip.set_dst_addr(key.dst_ip);
        ip.set_total_len(total_len as u16);
        ip.set_ttl(super::local::LOCAL_TTL);
        ip.fill_checksum();
    }
    let requester = ethernet::Packet::new_unchecked(&buf[..]).src_addr().0;
    set_l2(buf, port.mac, requester);
    frame.truncate(l3 + total_len);
    meta.l3_end = (l3 + total_len) as u16;
    meta.verdict = Verdict::Reply;
    true
}
