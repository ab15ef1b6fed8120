//! Translation of ICMPv6 errors about tracked IPv6 flows (RFC 4443 §3;
//! as [`crate::stage::icmp_error`] does for IPv4, RFC 5508 §4): the quoted
//! packet is one the gateway sent, so its tuple reversed is one of the
//! keys of a flow. An error from the backend side (about a packet the
//! gateway sent to the backend: Packet Too Big on the path to it, an
//! unreachable port) goes on to the client with the quoted packet restored
//! to what the client sent and the outer header from the service address;
//! one from the client side goes on to the backend, restored to what the
//! backend sent. An error about no flow whose quoted source is a host
//! address is the kernel's.
//!
//! The quoted IPv6 header has no checksum; the quoted TCP/UDP checksum is
//! updated incrementally when the quote holds it; the ICMPv6 checksum is
//! recomputed over the message (errors are rare and short); the outer hop
//! limit is decremented.

use super::Ipv6Tables;
use crate::conntrack::Dir;
use crate::counters::{Counters, DropReason};
use crate::packet::{PacketMeta, Verdict};
use crate::snapshot::Snapshot;
use crate::stage::L2Next;
use crate::stage::neighbour::{NeighbourCtx, set_l2};
use crate::wire::{icmpv6, ipv6 as wire6};

/// Translate the ICMPv6 error `meta` describes (packet `i` of the batch,
/// kind `IcmpError`, family V6) in place and give it its verdict; towards
/// a backend it may wait for the backend's NDP resolution like any
/// packet ([`NeighbourCtx::forward6`]).
pub fn translate(
    t: &Ipv6Tables,
    snap: &Snapshot,
    (buf, meta, i): (&mut [u8], &mut PacketMeta, usize),
    counters: &mut Counters,
    neighbours: &mut NeighbourCtx<'_>,
    now_ms: u64,
) {
    let quoted = meta.key6.reversed();
    let flow = match t.ct.lookup(&quoted, t.ct.hash(&quoted)) {
        Some((id, dir)) if !t.ct.flow(id).is_expired(now_ms) => Some((*t.ct.flow(id), dir)),
        _ => None,
    };
    let Some((flow, dir)) = flow else {
        if snap.owned6(meta.key6.src_ip).is_some_and(|o| o.host) {
            meta.verdict = Verdict::Host;
        } else {
            meta.drop(DropReason::IcmpErrorNoFlow);
        }
        return;
    };
    // `inner_new`: the quoted packet as the receiver of the error sent it.
    let (inner_new, out_port, next) = match dir {
        Dir::Reply => (*flow.orig(), flow.client_port, L2Next::Mac(flow.client_mac)),
        Dir::Original => {
            let Some(hop) = snap
                .backend(flow.backend)
                .and_then(|b| b.next_hop)
                .and_then(|h| Some((h.port, h.v6()?)))
            else {
                return meta.drop(DropReason::NoRoute);
            };
            (*flow.reply(), hop.0, L2Next::Neighbour(hop.1))
        }
    };
    let Some(port) = snap.ports.get(usize::from(out_port)) else {
        return meta.drop(DropReason::NoRoute);
    };
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
        return meta.drop(DropReason::IcmpMalformed);
    }
    {
        let mut inner = wire6::Packet::new_unchecked(&mut buf[il3..il4]);
        inner.set_src_addr(inner_new.src_ip);
        inner.set_dst_addr(inner_new.dst_ip);
    }
    if let Err(reason) = super::nat::rewrite_l4(&mut buf[il4..end], &meta.key6, &inner_new) {
        return meta.drop(reason);
    }
    // Outer: from the address the receiver talks to, to the receiver.
    let (outer_src, outer_dst) = (inner_new.dst_ip, inner_new.src_ip);
    {
        let mut outer = wire6::Packet::new_unchecked(&mut buf[l3..l4]);
        let hop = outer.hop_limit();
        if hop <= 1 {
            return meta.drop(DropReason::Ipv6HopLimitExpired);
        }
        outer.set_hop_limit(hop - 1);
        outer.set_src_addr(outer_src);
        outer.set_dst_addr(outer_dst);
    }
    icmpv6::Packet::new_unchecked(&mut buf[l4..end]).fill_checksum(outer_src, outer_dst);
    counters.icmp_errors_translated += 1;
    meta.verdict = match next {
        L2Next::Mac(mac) => {
            set_l2(buf, port.mac, mac);
            Verdict::Forward(out_port)
        }
        L2Next::Neighbour(addr) => neighbours.forward6(buf, out_port, port.mac, addr, i),
    };
}
