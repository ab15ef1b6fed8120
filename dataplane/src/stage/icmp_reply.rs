//! ICMP errors the gateway originates about packets it cannot forward, so
//! that a sender learns why instead of timing out:
//!
//! * **Fragmentation needed and DF set** (RFC 792 type 3 code 4, with the
//!   next-hop MTU of RFC 1191 §4) for a packet with DF set that is larger
//!   than the MTU of the port it would leave by (dropped as `too_big`; the
//!   gateway never fragments). Without it a client behind a larger-MTU link
//!   never learns the path MTU: a path-MTU black hole.
//! * **Time exceeded in transit** (RFC 792 type 11 code 0, RFC 1812
//!   §5.3.1) for a packet whose TTL runs out at the gateway (dropped as
//!   `ipv4_ttl_expired`): what makes traceroute show the gateway.
//!
//! The error is built in place over the dropped frame and sent back out of
//! the port the packet came in on, to the MAC it came from (RFC 1812
//! §4.3.2.4): IPv4 header from the gateway's address on that port (the
//! packet's destination when the port has none), ICMP header, then the
//! offending packet's IP header and first 8 bytes of payload (RFC 792,
//! RFC 1812 §4.3.2.3). Never about an ICMP error, a fragment other than
//! the first, or a packet from a source that is not a unicast host
//! (RFC 1812 §4.3.2.7: those are dropped by parse already), and only when
//! the received frame is long enough to hold the error (a bare 20+8-byte
//! probe in a minimum-size frame is not answered: frames do not grow).
//!
//! Rate-limited per worker by a token bucket of [`ICMP_ERRORS_PER_S`] after
//! a burst of [`ICMP_ERROR_BURST`] (Linux's `icmp_msgs_per_sec` and
//! `icmp_msgs_burst` defaults), so a flood of oversize or TTL-1 packets
//! cannot turn the gateway into a reflector. A packet answered is still
//! counted under its drop reason (it was not forwarded), and under
//! `icmp_errors_sent`; one the bucket refused under
//! `icmp_errors_rate_limited`.
//!
//! IPv6 packets dropped as `too_big` or `ipv6_hop_limit_expired` get their
//! ICMPv6 counterparts (Packet Too Big, Time Exceeded: see
//! [`super::ipv6::reply`]) under the same limiter.
//!
//! Cold path: the stage looks only at packets already dropped for one of
//! these reasons.

use super::neighbour::set_l2;
use crate::counters::{Counters, DropReason};
use crate::driver::Frame;
use crate::packet::{Family, PacketKind, PacketMeta, Verdict};
use crate::snapshot::Snapshot;
use crate::wire::{ethernet, icmp, ipv4};

/// Errors a worker sends per second at most, after a burst.
pub const ICMP_ERRORS_PER_S: u64 = 1000;
/// Errors a worker may send at once after a quiet period.
pub const ICMP_ERROR_BURST: u64 = 50;
/// Payload bytes of the offending packet quoted after its IP header.
const QUOTED_PAYLOAD: usize = 8;
/// TTL of the errors the gateway originates.
const ERROR_TTL: u8 = super::local::LOCAL_TTL;

/// A token bucket in milli-tokens, refilled from the worker's clock.
#[derive(Clone, Copy, Debug)]
pub struct IcmpErrorLimiter {
    milli_tokens: u64,
    last_ms: u64,
}

impl Default for IcmpErrorLimiter {
    fn default() -> Self {
        IcmpErrorLimiter {
            milli_tokens: ICMP_ERROR_BURST * 1000,
            last_ms: 0,
        }
    }
}

impl IcmpErrorLimiter {
    /// Take one token at `now_ms` if there is one.
    fn take(&mut self, now_ms: u64) -> bool {
        let elapsed = now_ms.saturating_sub(self.last_ms);
        self.last_ms = self.last_ms.max(now_ms);
        self.milli_tokens = self
            .milli_tokens
            .saturating_add(elapsed.saturating_mul(ICMP_ERRORS_PER_S))
            .min(ICMP_ERROR_BURST * 1000);
        if self.milli_tokens >= 1000 {
            self.milli_tokens -= 1000;
            true
        } else {
            false
        }
    }
}

pub fn run<F: Frame>(
    snap: &Snapshot,
    frames: &mut [F],
    metas: &mut [PacketMeta],
    counters: &mut Counters,
    limiter: &mut IcmpErrorLimiter,
    now_ms: u64,
) {
    for (frame, meta) in frames.iter_mut().zip(metas.iter_mut()) {
        let (icmp_type, code, mtu) = match meta.verdict {
            Verdict::Drop(reason) if meta.family == Family::V6 => {
                if meta.kind != PacketKind::IcmpError
                    && let Some(error) = super::ipv6::reply::error_for(reason, meta)
                {
                    send6(
                        snap,
                        frame,
                        meta,
                        reason,
                        error,
                        (counters, limiter, now_ms),
                    );
                }
                continue;
            }
            Verdict::Drop(DropReason::TooBig) if meta.egress_mtu > 0 => (
                icmp::kind::DEST_UNREACHABLE,
                icmp::unreachable::FRAG_NEEDED,
                meta.egress_mtu,
            ),
            Verdict::Drop(DropReason::Ipv4TtlExpired) => (icmp::kind::TIME_EXCEEDED, 0, 0),
            _ => continue,
        };
        let Verdict::Drop(reason) = meta.verdict else {
            continue;
        };
        if meta.kind == PacketKind::IcmpError || !answerable(frame.data(), meta, icmp_type) {
            continue;
        }
        if !limiter.take(now_ms) {
            counters.icmp_errors_rate_limited += 1;
            continue;
        }
        if build_error(snap, frame, meta, icmp_type, code, mtu) {
            // The packet itself was not forwarded: still a drop.
            counters.drop(reason);
            counters.icmp_errors_sent += 1;
            meta.verdict = Verdict::Reply;
        }
    }
}

/// The ICMPv6 error about an IPv6 packet dropped as `reason` (Packet Too
/// Big, Time Exceeded), under the same limiter.
#[cold]
#[inline(never)]
fn send6<F: Frame>(
    snap: &Snapshot,
    frame: &mut F,
    meta: &mut PacketMeta,
    reason: DropReason,
    error: (u8, u8, u32),
    (counters, limiter, now_ms): (&mut Counters, &mut IcmpErrorLimiter, u64),
) {
    if !limiter.take(now_ms) {
        counters.icmp_errors_rate_limited += 1;
        return;
    }
    if super::ipv6::reply::build_error(snap, frame, meta, error) {
        counters.drop(reason);
        counters.icmp_errors_sent += 1;
        meta.verdict = Verdict::Reply;
    }
}

/// Whether the dropped packet may be answered: a "fragmentation needed"
/// only for DF packets (without DF the gateway should fragment, which it
/// does not do: the drop stays silent), never about a non-first fragment
/// (parse drops fragments already), and only if the frame can hold the
/// error.
fn answerable(frame: &[u8], meta: &PacketMeta, icmp_type: u8) -> bool {
    let l3 = usize::from(meta.l3_offset);
    let Some(ip) = frame.get(l3..).map(ipv4::Packet::new_unchecked) else {
        return false;
    };
    if icmp_type == icmp::kind::DEST_UNREACHABLE && !ip.dont_frag() {
        return false;
    }
    let quote = quote_len(meta);
    frame.len() >= l3 + ipv4::HEADER_LEN + icmp::HEADER_LEN + quote
}

/// Bytes of the offending packet quoted: its IP header and up to 8 bytes
/// of its payload.
fn quote_len(meta: &PacketMeta) -> usize {
    let (l3, l4, end) = (
        usize::from(meta.l3_offset),
        usize::from(meta.l4_offset),
        usize::from(meta.l3_end),
    );
    (l4 - l3.min(l4)) + end.saturating_sub(l4).min(QUOTED_PAYLOAD)
}

/// Rewrite `frame` into the ICMP error about itself. False (frame left as
/// it may be half-written, the packet stays dropped) only if an offset is
/// out of the frame, which [`answerable`] already excluded.
fn build_error<F: Frame>(
    snap: &Snapshot,
    frame: &mut F,
    meta: &PacketMeta,
    icmp_type: u8,
    code: u8,
    mtu: u16,
) -> bool {
    let Some(port) = snap.ports.get(meta.in_port as usize) else {
        return false;
    };
    let l3 = usize::from(meta.l3_offset);
    let quote = quote_len(meta);
    let icmp_at = l3 + ipv4::HEADER_LEN;
    let quote_at = icmp_at + icmp::HEADER_LEN;
    let end = quote_at + quote;
    let buf = frame.data_mut();
    if buf.len() < end {
        return false;
    }
    let (sender, original_dst) = {
        let ip = ipv4::Packet::new_unchecked(&buf[l3..]);
        (ip.src_addr(), ip.dst_addr())
    };
    let from = snap
        .arp_source
        .get(meta.in_port as usize)
        .copied()
        .flatten()
        .unwrap_or(original_dst);
    // The quote moves 28 bytes up; copy_within handles the overlap.
    buf.copy_within(l3..l3 + quote, quote_at);
    {
        let mut msg = icmp::Packet::new_unchecked(&mut buf[icmp_at..end]);
        msg.set_msg_type(icmp_type);
        msg.set_msg_code(code);
        // Bytes 4..8: unused, or (RFC 1191) the next-hop MTU in 6..8.
        msg.set_echo_ident(0);
        msg.set_next_hop_mtu(mtu);
        msg.fill_checksum();
    }
    {
        let mut ip = ipv4::Packet::new_unchecked(&mut buf[l3..quote_at]);
        ip.set_version_ihl(5);
        ip.set_tos(0);
        ip.set_total_len((end - l3) as u16);
        ip.set_ident(0);
        ip.set_flags_frag(false, false, 0);
        ip.set_ttl(ERROR_TTL);
        ip.set_protocol(ipv4::protocol::ICMP);
        ip.set_src_addr(from);
        ip.set_dst_addr(sender);
        ip.fill_checksum();
    }
    let requester = ethernet::Packet::new_unchecked(&buf[..]).src_addr().0;
    set_l2(buf, port.mac, requester);
    frame.truncate(end);
    true
}
