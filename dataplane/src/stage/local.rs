//! Traffic for the gateway itself: ARP requests for owned addresses (RFC 826)
//! and ICMP echo requests to owned addresses (RFC 792) are answered in place,
//! out of the port they came in on. ARP for an owned address is answered
//! only on the port the address lives on, so a gateway with two ports never
//! claims an address on the wrong segment.

use crate::counters::{Counters, DropReason};
use crate::driver::Frame;
use crate::neighbour::Neighbours;
use crate::packet::{PacketKind, PacketMeta, Verdict};
use crate::snapshot::Snapshot;
use crate::wire::{MacAddr, arp, checksum, ethernet, icmp, ipv4};

const ARP_OP_REQUEST: u16 = 1;
const ICMP_ECHO_REPLY: u8 = 0;
const ICMP_ECHO_REQUEST: u8 = 8;
/// TTL of packets the gateway originates.
pub const LOCAL_TTL: u8 = 64;

pub fn run<F: Frame>(
    snap: &Snapshot,
    frames: &mut [F],
    metas: &mut [PacketMeta],
    counters: &mut Counters,
    neighbours: &Neighbours<'_>,
    now_ms: u64,
) {
    for (frame, meta) in frames.iter_mut().zip(metas.iter_mut()) {
        if !meta.is_pending() {
            continue;
        }
        match meta.kind {
            PacketKind::Arp => {
                if answer_arp(snap, frame.data_mut(), meta, neighbours, now_ms) {
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
}

/// Answer a request for an owned address; learn the sender's MAC from
/// replies to our requests and from requests of neighbours already in the
/// table (never from strangers: the table is not theirs to fill). Returns
/// whether the neighbour table learned something.
fn answer_arp(
    snap: &Snapshot,
    frame: &mut [u8],
    meta: &mut PacketMeta,
    neighbours: &Neighbours<'_>,
    now_ms: u64,
) -> bool {
    let Some(port) = snap.ports.get(meta.in_port as usize) else {
        meta.drop(DropReason::NoRoute);
        return false;
    };
    let our_mac = MacAddr(port.mac);
    let l3 = meta.l3_offset as usize;
    let Some(arp_bytes) = frame.get_mut(l3..) else {
        meta.drop(DropReason::ArpMalformed);
        return false;
    };
    let mut pkt = arp::Packet::new_unchecked(arp_bytes);
    let (sender_ip, sender_mac) = (pkt.sender_proto_addr(), pkt.sender_hw_addr());
    let target = pkt.target_proto_addr();
    let ours = snap.owned(target).is_some_and(|o| o.port == meta.in_port);
    let learned = (ours || sender_ip == target)
        && !sender_ip.is_unspecified()
        && neighbours.learn(meta.in_port, sender_ip, sender_mac.0, now_ms, true);
    match pkt.operation() {
        ARP_OP_REQUEST if ours => {
            pkt.make_reply(our_mac);
            let mut eth = ethernet::Packet::new_unchecked(&mut frame[..]);
            eth.set_dst_addr(sender_mac);
            eth.set_src_addr(our_mac);
            meta.verdict = Verdict::Reply;
        }
        _ if learned => meta.verdict = Verdict::Consumed,
        _ => meta.drop(DropReason::ArpNotOwned),
    }
    learned
}

fn answer_echo(snap: &Snapshot, frame: &mut [u8], meta: &mut PacketMeta) {
    let dst = meta.key.dst_ip;
    if snap.owned(dst).is_none() {
        return meta.drop(DropReason::NotOwned);
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
    let mut eth = ethernet::Packet::new_unchecked(&mut frame[..]);
    let requester = eth.src_addr();
    eth.set_dst_addr(requester);
    eth.set_src_addr(MacAddr(port.mac));
    meta.verdict = Verdict::Reply;
}
