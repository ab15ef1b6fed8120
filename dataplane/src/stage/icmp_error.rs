//! Translation of ICMP errors about tracked flows (RFC 5508 §4 for NAT
//! behaviour; RFC 792, RFC 1191 for the messages).
//!
//! An ICMP destination-unreachable (including fragmentation-needed, which
//! path-MTU discovery depends on), time-exceeded or parameter-problem message
//! carries the start of the packet that caused it. That inner packet is one
//! the gateway sent, so its 5-tuple *reversed* is one of the keys of a tracked
//! flow:
//! * the reply key: the error came from the backend side about a packet the
//!   gateway sent to the backend. It is sent on to the client with the inner
//!   packet restored to what the client sent (client → service address) and
//!   the outer header from the service address to the client;
//! * the original key: the error came from the client side about a reply the
//!   gateway sent to the client. It is sent on to the backend with the inner
//!   packet restored to what the backend sent.
//!
//! An error about no tracked flow whose quoted packet came from a host
//! address is the kernel's (see [`crate::driver::hostpath`]): verdict
//! [`Verdict::Host`].
//!
//! The inner IPv4 header checksum and, when present in the quoted bytes, the
//! inner TCP/UDP checksum are updated incrementally; the ICMP checksum is
//! recomputed over the message (errors are rare and short).

use super::L2Next;
use super::flow::FlowCtx;
use super::nat::rewrite_l4;
use super::neighbour::NeighbourCtx;
use crate::conntrack::Dir;
use crate::counters::DropReason;
use crate::driver::Frame;
use crate::flow::FlowKey;
use crate::packet::{PacketKind, PacketMeta, Verdict};
use crate::snapshot::Snapshot;
use crate::wire::{checksum, icmp, ipv4};

pub fn run<F: Frame>(
    ctx: &mut FlowCtx<'_>,
    snap: &Snapshot,
    frames: &mut [F],
    metas: &mut [PacketMeta],
    neighbours: &mut NeighbourCtx<'_>,
) {
    for (i, (frame, meta)) in frames.iter_mut().zip(metas.iter_mut()).enumerate() {
        if !meta.is_pending() || meta.kind != PacketKind::IcmpError {
            continue;
        }
        let quoted = meta.key.reversed();
        let Some((id, dir)) = ctx.ct.lookup(&quoted, ctx.ct.hash(&quoted)) else {
            // An error about a packet the kernel sent from a host address
            // (the quoted source; the error is addressed to it) is the
            // kernel's: path-MTU discovery of its sessions depends on it.
            if snap.owned(meta.key.src_ip).is_some_and(|o| o.host) {
                meta.verdict = Verdict::Host;
            } else {
                meta.drop(DropReason::IcmpErrorNoFlow);
            }
            continue;
        };
        let flow = ctx.ct.flow(id);
        if flow.is_expired(ctx.now_ms) {
            meta.drop(DropReason::IcmpErrorNoFlow);
            continue;
        }
        // `inner_new`: the quoted packet as the receiver of the error sent it.
        let (inner_new, hop) = match dir {
            Dir::Reply => (
                *flow.orig(),
                Some((flow.client_port, L2Next::Mac(flow.client_mac))),
            ),
            Dir::Original => (
                *flow.reply(),
                snap.backend(flow.backend)
                    .and_then(|b| b.next_hop)
                    .and_then(|h| Some((h.port, L2Next::Neighbour(h.v4()?)))),
            ),
        };
        let Some((out_port, next)) = hop else {
            meta.drop(DropReason::NoRoute);
            continue;
        };
        let Some(port) = snap.ports.get(out_port as usize) else {
            meta.drop(DropReason::NoRoute);
            continue;
        };
        // Outer: from the address the receiver talks to, to the receiver.
        let outer_src = inner_new.dst_ip;
        let outer_dst = inner_new.src_ip;
        match translate(
            frame.data_mut(),
            meta,
            &meta.key,
            &inner_new,
            outer_src,
            outer_dst,
        ) {
            Ok(()) => {
                ctx.counters.icmp_errors_translated += 1;
                meta.verdict = neighbours.forward(frame.data_mut(), out_port, port.mac, next, i);
            }
            Err(reason) => meta.drop(reason),
        }
    }
}

fn translate(
    buf: &mut [u8],
    meta: &PacketMeta,
    inner_old: &FlowKey,
    inner_new: &FlowKey,
    outer_src: std::net::Ipv4Addr,
    outer_dst: std::net::Ipv4Addr,
) -> Result<(), DropReason> {
    let (l3, l4, end) = (
        usize::from(meta.l3_offset),
        usize::from(meta.l4_offset),
        usize::from(meta.l3_end),
    );
    let (il3, il4) = (
        usize::from(meta.inner_l3_offset),
        usize::from(meta.inner_l4_offset),
    );
    if !(l3 < l4 && l4 < il3 && il3 < il4 && il4 <= end && end <= buf.len()) {
        return Err(DropReason::IcmpMalformed);
    }

    // Inner IPv4 header: addresses, incremental header checksum.
    {
        let mut inner = ipv4::Packet::new_unchecked(&mut buf[il3..il4]);
        let mut c = inner.checksum();
        c = checksum::update_u32(c, u32::from(inner_old.src_ip), u32::from(inner_new.src_ip));
        c = checksum::update_u32(c, u32::from(inner_old.dst_ip), u32::from(inner_new.dst_ip));
        inner.set_src_addr(inner_new.src_ip);
        inner.set_dst_addr(inner_new.dst_ip);
        inner.set_checksum(c);
    }
    // Inner ports (+ checksum when quoted).
    rewrite_l4(&mut buf[il4..end], inner_old, inner_new, false)?;

    // Outer IPv4 header.
    {
        let mut outer = ipv4::Packet::new_unchecked(&mut buf[l3..l4]);
        let ttl = outer.ttl();
        if ttl <= 1 {
            return Err(DropReason::Ipv4TtlExpired);
        }
        let proto = outer.protocol();
        let mut c = outer.checksum();
        c = checksum::update_u16(
            c,
            u16::from_be_bytes([ttl, proto]),
            u16::from_be_bytes([ttl - 1, proto]),
        );
        c = checksum::update_u32(c, u32::from(outer.src_addr()), u32::from(outer_src));
        c = checksum::update_u32(c, u32::from(outer.dst_addr()), u32::from(outer_dst));
        outer.set_ttl(ttl - 1);
        outer.set_src_addr(outer_src);
        outer.set_dst_addr(outer_dst);
        outer.set_checksum(c);
    }

    // ICMP checksum over the whole message.
    let msg = &mut buf[l4..end];
    icmp::Packet::new_unchecked(&mut *msg).set_checksum(0);
    let c = checksum::checksum(msg);
    icmp::Packet::new_unchecked(msg).set_checksum(c);
    Ok(())
}
