//! What the gateway answers itself over IPv6: ICMPv6 echo requests to its
//! IPv6 addresses (RFC 4443 §4.2, in place, out of the port they came in
//! on), and the ICMPv6 errors about packets it does not forward
//! ([`build_error`], called by [`crate::stage::icmp_reply`] under the same
//! rate limit as the IPv4 errors): Packet Too Big (RFC 4443 §3.2: the
//! egress MTU, for every packet over it, since IPv6 routers never
//! fragment, RFC 8200 §5) and Time Exceeded, hop limit exceeded in transit
//! (RFC 4443 §3.3).
//!
//! An error quotes the invoking packet's IPv6 header, its extension
//! headers and 8 bytes of its upper layer (RFC 4443 §2.4(c) allows less
//! than the minimum MTU's worth), is sent from the gateway's first IPv6
//! address on the receiving port (the packet's destination when there is
//! none) with hop limit 64, never about an ICMPv6 error (§2.4(e)), and
//! only if the frame can hold it (the driver may grow it).

use crate::counters::DropReason;
use crate::driver::Frame;
use crate::packet::{PacketMeta, Verdict};
use crate::snapshot::Snapshot;
use crate::stage::local::LOCAL_TTL;
use crate::stage::neighbour::set_l2;
use crate::wire::icmpv6::{self, msg_type};
use crate::wire::ipv6::{self as wire6, next_header};
use crate::wire::{checksum, ethernet};

/// Answer an ICMPv6 echo request to an owned IPv6 address in place.
pub fn answer_echo(snap: &Snapshot, frame: &mut [u8], meta: &mut PacketMeta) {
    let dst = meta.key6.dst_ip;
    match snap.owned6(dst) {
        None => return meta.drop(DropReason::NotOwned),
        Some(o) if o.host => {
            meta.verdict = Verdict::Host;
            return;
        }
        Some(_) => {}
    }
    if meta.icmp_type != msg_type::ECHO_REQUEST {
        return meta.drop(DropReason::IcmpUnsupported);
    }
    let Some(port) = snap.ports.get(usize::from(meta.in_port)) else {
        return meta.drop(DropReason::NoRoute);
    };
    let (l3, l4, end) = (
        usize::from(meta.l3_offset),
        usize::from(meta.l4_offset),
        usize::from(meta.l3_end),
    );
    let src = meta.key6.src_ip;
    if let Some(bytes) = frame.get_mut(l4..end) {
        // The pseudo-header's addresses swap (same sum); only the type
        // changes.
        let mut msg = icmpv6::Packet::new_unchecked(bytes);
        let old = u16::from_be_bytes([msg_type::ECHO_REQUEST, meta.icmp_code]);
        let new = u16::from_be_bytes([msg_type::ECHO_REPLY, meta.icmp_code]);
        msg.set_msg_type(msg_type::ECHO_REPLY);
        msg.set_checksum(checksum::update_u16(msg.checksum(), old, new));
    }
    if let Some(bytes) = frame.get_mut(l3..end) {
        let mut ip = wire6::Packet::new_unchecked(bytes);
        ip.set_src_addr(dst);
        ip.set_dst_addr(src);
        ip.set_hop_limit(LOCAL_TTL);
    }
    let requester = ethernet::Packet::new_unchecked(&frame[..]).src_addr();
    set_l2(frame, port.mac, requester.0);
    meta.verdict = Verdict::Reply;
}

/// Bytes of the upper layer quoted after the invoking packet's headers.
const QUOTED_PAYLOAD: usize = 8;

/// The ICMPv6 error for a packet dropped as `reason`, if it gets one:
/// `(type, code, MTU)`.
pub fn error_for(reason: DropReason, meta: &PacketMeta) -> Option<(u8, u8, u32)> {
    match reason {
        DropReason::TooBig if meta.egress_mtu > 0 => Some((
            msg_type::PACKET_TOO_BIG,
            0,
            u32::from(meta.egress_mtu.max(wire6::MIN_MTU)),
        )),
        DropReason::Ipv6HopLimitExpired => Some((msg_type::TIME_EXCEEDED, 0, 0)),
        _ => None,
    }
}

/// Rewrite `frame` into the ICMPv6 error about itself; false (nothing
/// sent, the packet stays dropped) when the frame cannot hold it.
pub fn build_error<F: Frame>(
    snap: &Snapshot,
    frame: &mut F,
    meta: &PacketMeta,
    (icmp_type, code, mtu): (u8, u8, u32),
) -> bool {
    let Some(port) = snap.ports.get(usize::from(meta.in_port)) else {
        return false;
    };
    let (l3, l4, end) = (
        usize::from(meta.l3_offset),
        usize::from(meta.l4_offset),
        usize::from(meta.l3_end),
    );
    let quote = (l4 - l3.min(l4)) + end.saturating_sub(l4).min(QUOTED_PAYLOAD);
    let icmp_at = l3 + wire6::HEADER_LEN;
    let quote_at = icmp_at + icmpv6::HEADER_LEN;
    let new_end = quote_at + quote;
    if frame.data().len() < new_end && !frame.extend(new_end) {
        return false;
    }
    let buf = frame.data_mut();
    if buf.len() < new_end {
        return false;
    }
    let (sender, original_dst) = {
        let ip = wire6::Packet::new_unchecked(&buf[l3..]);
        (ip.src_addr(), ip.dst_addr())
    };
    let from = snap
        .ndp_source
        .get(usize::from(meta.in_port))
        .copied()
        .flatten()
        .unwrap_or(original_dst);
    // The quote moves 48 bytes up; copy_within handles the overlap.
    buf.copy_within(l3..l3 + quote, quote_at);
    {
        let mut msg = icmpv6::Packet::new_unchecked(&mut buf[icmp_at..new_end]);
        msg.set_msg_type(icmp_type);
        msg.set_msg_code(code);
        msg.set_mtu(mtu);
        msg.set_checksum(0);
        msg.fill_checksum(from, sender);
    }
    {
        let mut ip = wire6::Packet::new_unchecked(&mut buf[l3..quote_at]);
        ip.set_version_tc_flow(0, 0);
        ip.set_payload_len((new_end - icmp_at) as u16);
        ip.set_next_header(next_header::ICMPV6);
        ip.set_hop_limit(LOCAL_TTL);
        ip.set_src_addr(from);
        ip.set_dst_addr(sender);
    }
    let requester = ethernet::Packet::new_unchecked(&buf[..]).src_addr().0;
    set_l2(buf, port.mac, requester);
    frame.truncate(new_end);
    true
}
