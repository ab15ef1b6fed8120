//! [`StageFamily`] for IPv6 (RFC 8200).

use super::StageFamily;
use crate::counters::DropReason;
use crate::flow::{FlowKey6, Proto};
use crate::packet::PacketMeta;
use crate::snapshot::{Listener, NextHop, OwnedAddr, Snapshot};
use crate::wire::ipv6::{self as wire6, next_header};
use crate::wire::{checksum, ethernet};
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};

impl StageFamily for Ipv6Addr {
    const L3_HEADER_LEN: usize = wire6::HEADER_LEN;
    const ETHERTYPE: u16 = ethernet::ethertype::IPV6;
    const HOP_EXPIRED: DropReason = DropReason::Ipv6HopLimitExpired;
    /// Linux's IPv6 table starts at 1220 (RFC 8200 §5: every link carries
    /// 1280 bytes, less 40 of IPv6 and 20 of TCP); then the usual MTUs
    /// (1280, 1400, 1460, 1480 tunnels, 1492 PPPoE, 1500) less 60.
    const COOKIE_MSS: [u16; 8] = [1220, 1280, 1340, 1380, 1400, 1420, 1432, 1440];

    #[inline(always)]
    fn key(meta: &PacketMeta) -> &FlowKey6 {
        &meta.key6
    }

    #[inline(always)]
    fn listener(snap: &Snapshot, proto: Proto, addr: Self, port: u16) -> Option<&Listener> {
        snap.listener6(proto, addr, port)
    }

    #[inline(always)]
    fn owned(snap: &Snapshot, addr: Self) -> Option<&OwnedAddr> {
        snap.owned6(addr)
    }

    #[inline(always)]
    fn socket_of(addr: &SocketAddr) -> Option<SocketAddrV6> {
        match addr {
            SocketAddr::V6(s) => Some(*s),
            SocketAddr::V4(_) => None,
        }
    }

    #[inline(always)]
    fn next_hop(hop: &NextHop) -> Option<Self> {
        hop.v6()
    }

    #[inline(always)]
    fn hop_limit(l3: &[u8]) -> u8 {
        wire6::Packet::new_unchecked(l3).hop_limit()
    }

    #[inline]
    fn tcp_checksum(key: &FlowKey6, seg: &[u8]) -> u16 {
        checksum::l4_checksum_v6(key.src_ip, key.dst_ip, next_header::TCP, seg)
    }

    /// Extension headers are dropped: the TCP header moves up to right
    /// after the fixed header (its bytes are rewritten by the caller).
    fn answer_l3(
        buf: &mut [u8],
        meta: &mut PacketMeta,
        key: &FlowKey6,
        l4_len: usize,
        ttl: Option<u8>,
    ) -> bool {
        let l3 = usize::from(meta.l3_offset);
        let l4 = l3 + wire6::HEADER_LEN;
        let old_l4 = usize::from(meta.l4_offset);
        if buf.len() < l4 || old_l4 < l4 {
            return false;
        }
        if old_l4 != l4 {
            let end = buf.len().min(old_l4 + l4_len);
            buf.copy_within(old_l4..end, l4);
            meta.l4_offset = l4 as u16;
        }
        let mut ip = wire6::Packet::new_unchecked(&mut buf[l3..l4]);
        ip.set_payload_len(l4_len as u16);
        ip.set_next_header(next_header::TCP);
        ip.set_src_addr(key.src_ip);
        ip.set_dst_addr(key.dst_ip);
        if let Some(ttl) = ttl {
            ip.set_hop_limit(ttl);
        }
        true
    }

    fn write_l3(h: &mut [u8], key: &FlowKey6, l4_len: usize, ttl: u8) {
        let mut ip = wire6::Packet::new_unchecked(h);
        ip.set_version_tc_flow(0, 0);
        ip.set_payload_len(l4_len as u16);
        ip.set_next_header(next_header::TCP);
        ip.set_hop_limit(ttl);
        ip.set_src_addr(key.src_ip);
        ip.set_dst_addr(key.dst_ip);
    }

    #[inline]
    fn mss_for_mtu(mtu: u16) -> u16 {
        mtu.saturating_sub(60).max(wire6::MIN_MTU - 60)
    }

    #[inline]
    fn source_key(src: Self, v6_prefix_len: u8) -> u128 {
        let bits = u128::from(src);
        match v6_prefix_len.min(128) {
            0 => 0,
            n => bits & (u128::MAX << (128 - u32::from(n))),
        }
    }
}
