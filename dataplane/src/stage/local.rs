//! Traffic for the gateway itself: ARP requests for owned addresses (RFC 826,
//! answered and learned from by the neighbour stage, see
//! [`super::neighbour`]) and ICMP echo requests to owned addresses (RFC 792)
//! are answered in place, out of the port they came in on. ARP for an owned
//! address is answered only on the port the address lives on, so a gateway
//! with two ports never claims an address on the wrong segment. NDP
//! messages (IPv6's ARP) go to the NDP stage ([`super::ndp`]), which
//! answers and learns the same way.
//!
//! Host addresses are not answered here: ARP whose target is a host address
//! of the receiving port, ICMP echo requests and replies to a host address,
//! and IPv4 fragments and other protocols (OSPF, GRE, VRRP, ...) the parse
//! stage would drop but a host address may take, get [`Verdict::Host`] (the kernel answers, through the port's
//! host path; see [`crate::driver::hostpath`]).

use super::neighbour::{NeighbourCtx, set_l2};
use crate::counters::{Counters, DropReason};
use crate::driver::Frame;
use crate::packet::{Family, PacketKind, PacketMeta, Verdict};
use crate::snapshot::Snapshot;
use crate::wire::{checksum, ethernet, icmp, ipv4};

const ICMP_ECHO_REPLY: u8 = 0;
const ICMP_ECHO_REQUEST: u8 = 8;
/// TTL of packets the gateway originates.
pub const LOCAL_TTL: u8 = 64;

/// Returns whether an IPv6 packet is left pending (for
/// [`super::ipv6`]).
pub fn run<F: Frame>(
    snap: &Snapshot,
    frames: &mut [F],
    metas: &mut [PacketMeta],
    counters: &mut Counters,
    neighbours: &NeighbourCtx<'_>,
) -> bool {
    let mut any_v6 = false;
    for (frame, meta) in frames.iter_mut().zip(metas.iter_mut()) {
        if meta.family == Family::V6 {
            if meta.kind == PacketKind::Ndp && meta.is_pending() {
                answer_ndp(snap, frame, meta, counters, neighbours);
            } else {
                any_v6 |= ipv6_gate(snap, meta);
            }
            continue;
        }
        if !meta.is_pending() {
            if let Verdict::Drop(DropReason::Ipv4Fragment | DropReason::UnsupportedProtocol) =
                meta.verdict
            {
                unparsed_to_host(snap, meta);
            }
            continue;
        }
        match meta.kind {
            PacketKind::Arp => {
                if neighbours.answer_arp(snap, frame.data_mut(), meta) {
                    counters.arp_learned += 1;
                }
            }
            PacketKind::IcmpEcho => answer_echo(snap, frame.data_mut(), meta),
            _ => continue,
        }
        if meta.verdict == Verdict::Reply {
            counters.local_replies += 1;
        }
    }
    any_v6
}

/// Fragments and other protocols (the parse stage kept their destination)
/// are the kernel's when they are for a host address. Out of line: the
/// loop carries only the verdict check.
#[cold]
#[inline(never)]
fn unparsed_to_host(snap: &Snapshot, meta: &mut PacketMeta) {
    if snap.owned(meta.key.dst_ip).is_some_and(|o| o.host) {
        meta.verdict = Verdict::Host;
    }
}

/// NDP for the gateway: the neighbour stage's ([`super::ndp`]). Out of
/// line: IPv4 batches carry only the family check.
#[cold]
#[inline(never)]
fn answer_ndp<F: Frame>(
    snap: &Snapshot,
    frame: &mut F,
    meta: &mut PacketMeta,
    counters: &mut Counters,
    neighbours: &NeighbourCtx<'_>,
) {
    if neighbours.answer_ndp(snap, frame, meta) {
        counters.ndp_learned += 1;
    }
    if meta.verdict == Verdict::Reply {
        counters.local_replies += 1;
    }
}

/// IPv6 packets: fragments and other protocols for a host address are the
/// kernel's; a parsed one is left for the IPv6 stages ([`super::ipv6`],
/// which send it to the host path too when it is for a host address).
/// Whether the packet is pending.
#[cold]
#[inline(never)]
fn ipv6_gate(snap: &Snapshot, meta: &mut PacketMeta) -> bool {
    if let Verdict::Drop(DropReason::Ipv6Fragment | DropReason::UnsupportedProtocol) = meta.verdict
        && snap.owned6(meta.key6.dst_ip).is_some_and(|o| o.host)
    {
        meta.verdict = Verdict::Host;
    }
    meta.is_pending()
}

fn answer_echo(snap: &Snapshot, frame: &mut [u8], meta: &mut PacketMeta) {
    let dst = meta.key.dst_ip;
    match snap.owned(dst) {
        None => return meta.drop(DropReason::NotOwned),
        // The kernel answers (and sends) echoes of its host addresses.
        Some(o) if o.host => {
            meta.verdict = Verdict::Host;
            return;
        }
        Some(_) => {}
    }
    if meta.icmp_type != ICMP_ECHO_REQUEST {
        return meta.drop(DropReason::IcmpUnsupported);
    }
    let Some(port) = snap.ports.get(meta.in_port as usize) else {
        return meta.drop(DropReason::NoRoute);
    };
    let (l3, l4, end) = (
        meta.l3_offset as usize,
        meta.l4_offset as usize,
        meta.l3_end as usize,
    );
    if let Some(bytes) = frame.get_mut(l4..end) {
        let mut msg = icmp::Packet::new_unchecked(bytes);
        let old = u16::from_be_bytes([ICMP_ECHO_REQUEST, meta.icmp_code]);
        let new = u16::from_be_bytes([ICMP_ECHO_REPLY, meta.icmp_code]);
        msg.set_msg_type(ICMP_ECHO_REPLY);
        msg.set_checksum(checksum::update_u16(msg.checksum(), old, new));
    }
    if let Some(bytes) = frame.get_mut(l3..end) {
        let mut ip = ipv4::Packet::new_unchecked(bytes);
        let src = ip.src_addr();
        ip.set_src_addr(dst);
        ip.set_dst_addr(src);
        let old_ttl = u16::from_be_bytes([ip.ttl(), ip.protocol()]);
        ip.set_ttl(LOCAL_TTL);
        let new_ttl = u16::from_be_bytes([LOCAL_TTL, ip.protocol()]);
        ip.set_checksum(checksum::update_u16(ip.checksum(), old_ttl, new_ttl));
    }
    let requester = ethernet::Packet::new_unchecked(&frame[..]).src_addr();
    set_l2(frame, port.mac, requester.0);
    meta.verdict = Verdict::Reply;
}
