//! The IPv6 half of the parse stage (RFC 8200): the fixed header, the
//! bounded walk of the extension headers ([`wire::ipv6::walk`]), then TCP,
//! UDP (shared with IPv4 in the parent module), ICMPv6 echo and errors
//! (RFC 4443) and NDP (RFC 4861 §7.1, checked by [`wire::ndp::parse`]).
//! The checks and their reasons are the second table of the
//! [parent module](super).
//!
//! [`wire::ipv6::walk`]: crate::wire::ipv6::walk
//! [`wire::ndp::parse`]: crate::wire::ndp::parse

use super::{be16, off16, parse_tcp, parse_udp};
use crate::counters::DropReason;
use crate::flow::{FlowKey6, Proto};
use crate::packet::{Family, PacketKind, PacketMeta};
use crate::wire::icmpv6::{self, msg_type};
use crate::wire::ipv6::{self, next_header};
use crate::wire::{Error, checksum, ndp};
use std::net::Ipv6Addr;

/// Bytes of the inner upper layer an ICMPv6 error must quote (the ports,
/// and as much as an ICMPv4 error must).
const ERROR_INNER_L4_BYTES: usize = 8;

/// The reason of a failed extension-header walk.
#[inline(always)]
fn chain_reason(e: Error) -> DropReason {
    match e {
        Error::Ipv6HopByHopNotFirst => DropReason::Ipv6HopByHopMisplaced,
        Error::Ipv6ExtChainTooLong { .. } => DropReason::Ipv6ExtChainTooLong,
        _ => DropReason::Ipv6ExtTruncated,
    }
}

#[inline(always)]
pub(super) fn parse_ipv6(
    ip: &[u8],
    l3: usize,
    verified: bool,
    meta: &mut PacketMeta,
) -> Result<(), DropReason> {
    let Some(h) = ip.first_chunk::<{ ipv6::HEADER_LEN }>() else {
        return Err(DropReason::Ipv6Truncated);
    };
    let hv = ipv6::Packet::new_unchecked(h);
    if hv.version() != 6 {
        return Err(DropReason::Ipv6BadVersion);
    }
    let total = ipv6::HEADER_LEN + usize::from(hv.payload_len());
    if total > ip.len() || l3 + total > usize::from(u16::MAX) {
        return Err(DropReason::Ipv6BadLength);
    }
    let payload = ip.get(ipv6::HEADER_LEN..total).unwrap_or(&[]);
    let (src, dst) = (hv.src_addr(), hv.dst_addr());
    meta.family = Family::V6;
    // Kept for the local stage if the frame is dropped as a fragment or an
    // unsupported protocol (a host address may take it).
    meta.key6.dst_ip = dst;
    let chain = ipv6::walk(hv.next_header(), payload).map_err(chain_reason)?;
    if chain.fragment.is_some() {
        return Err(DropReason::Ipv6Fragment);
    }
    let seg = payload.get(chain.l4_offset..).unwrap_or(&[]);
    let dad =
        chain.protocol == next_header::ICMPV6 && seg.first() == Some(&msg_type::NEIGHBOR_SOLICIT);
    if src.is_multicast() || src.is_loopback() || (src.is_unspecified() && !dad) {
        return Err(DropReason::Ipv6BadSource);
    }
    let l4 = l3 + ipv6::HEADER_LEN + chain.l4_offset;
    meta.l4_offset = off16(l4);
    meta.l3_end = off16(l3 + total);
    match chain.protocol {
        next_header::TCP => parse_tcp(seg, src, dst, verified, meta),
        next_header::UDP => parse_udp(seg, src, dst, verified, meta),
        next_header::ICMPV6 => parse_icmpv6(seg, l4, (src, dst), hv.hop_limit(), verified, meta),
        _ => Err(DropReason::UnsupportedProtocol),
    }
}

#[inline(always)]
fn parse_icmpv6(
    msg: &[u8],
    l4: usize,
    (src, dst): (Ipv6Addr, Ipv6Addr),
    hop_limit: u8,
    verified: bool,
    meta: &mut PacketMeta,
) -> Result<(), DropReason> {
    let Some(h) = msg.first_chunk::<{ icmpv6::HEADER_LEN }>() else {
        return Err(DropReason::IcmpMalformed);
    };
    if !verified && !checksum::verify_l4_v6(src, dst, next_header::ICMPV6, msg) {
        return Err(DropReason::IcmpBadChecksum);
    }
    let m = icmpv6::Packet::new_unchecked(h);
    let (icmp_type, code) = (m.msg_type(), m.msg_code());
    meta.icmp_type = icmp_type;
    meta.icmp_code = code;
    match icmp_type {
        msg_type::ECHO_REQUEST | msg_type::ECHO_REPLY => {
            let ident = m.echo_ident();
            meta.kind = PacketKind::IcmpEcho;
            meta.key6 = FlowKey6::new(Proto::Icmp, src, ident, dst, ident);
            Ok(())
        }
        msg_type::ROUTER_SOLICIT..=msg_type::REDIRECT => {
            parse_ndp(msg, (src, dst), hop_limit, icmp_type, code)?;
            meta.kind = PacketKind::Ndp;
            meta.key6 = FlowKey6::new(Proto::Icmp, src, 0, dst, 0);
            Ok(())
        }
        msg_type::DEST_UNREACHABLE
        | msg_type::PACKET_TOO_BIG
        | msg_type::TIME_EXCEEDED
        | msg_type::PARAMETER_PROBLEM => parse_error(msg, l4, meta),
        _ => Err(DropReason::IcmpUnsupported),
    }
}

/// RFC 4861 §7.1: every NDP message arrives with hop limit 255 and code 0;
/// solicitations and advertisements get the full checks of
/// [`ndp::parse`]. Router messages and redirects are the host's business
/// (the gateway is not an IPv6 router for them): only the common checks.
#[cold]
fn parse_ndp(
    msg: &[u8],
    (src, dst): (Ipv6Addr, Ipv6Addr),
    hop_limit: u8,
    icmp_type: u8,
    code: u8,
) -> Result<(), DropReason> {
    if icmp_type != msg_type::NEIGHBOR_SOLICIT && icmp_type != msg_type::NEIGHBOR_ADVERT {
        if hop_limit != ndp::HOP_LIMIT {
            return Err(DropReason::NdpBadHopLimit);
        }
        if code != 0 {
            return Err(DropReason::NdpMalformed);
        }
        return Ok(());
    }
    match ndp::parse(src, dst, hop_limit, msg) {
        Ok(_) => Ok(()),
        Err(ndp::Invalid::HopLimit(_)) => Err(DropReason::NdpBadHopLimit),
        Err(ndp::Invalid::BadOption { .. }) => Err(DropReason::NdpBadOption),
        Err(ndp::Invalid::Checksum) => Err(DropReason::IcmpBadChecksum),
        Err(_) => Err(DropReason::NdpMalformed),
    }
}

/// An ICMPv6 error: the inner IPv6 header, its extension headers (walked
/// over the quoted bytes only: the quote is truncated), and the first
/// 8 bytes of its TCP or UDP header.
#[inline(always)]
fn parse_error(msg: &[u8], l4: usize, meta: &mut PacketMeta) -> Result<(), DropReason> {
    let inner = msg.get(icmpv6::HEADER_LEN..).unwrap_or(&[]);
    let Some(ih) = inner.first_chunk::<{ ipv6::HEADER_LEN }>() else {
        return Err(DropReason::IcmpMalformed);
    };
    let iv = ipv6::Packet::new_unchecked(ih);
    if iv.version() != 6 {
        return Err(DropReason::IcmpMalformed);
    }
    let quoted = inner.get(ipv6::HEADER_LEN..).unwrap_or(&[]);
    let Ok(chain) = ipv6::walk(iv.next_header(), quoted) else {
        return Err(DropReason::IcmpMalformed);
    };
    let proto = match chain.protocol {
        next_header::TCP => Proto::Tcp,
        next_header::UDP => Proto::Udp,
        _ => return Err(DropReason::IcmpMalformed),
    };
    if chain.fragment.is_some_and(|f| f.offset_bytes != 0)
        || quoted.len() < chain.l4_offset + ERROR_INNER_L4_BYTES
    {
        return Err(DropReason::IcmpMalformed);
    }
    // TCP and UDP both start with source and destination port.
    let Some(&[sp_hi, sp_lo, dp_hi, dp_lo]) = quoted.get(chain.l4_offset..chain.l4_offset + 4)
    else {
        return Err(DropReason::IcmpMalformed);
    };
    let inner_l3 = l4 + icmpv6::HEADER_LEN;
    meta.kind = PacketKind::IcmpError;
    meta.inner_l3_offset = off16(inner_l3);
    meta.inner_l4_offset = off16(inner_l3 + ipv6::HEADER_LEN + chain.l4_offset);
    meta.key6 = FlowKey6::new(
        proto,
        iv.src_addr(),
        be16(sp_hi, sp_lo),
        iv.dst_addr(),
        be16(dp_hi, dp_lo),
    );
    Ok(())
}
