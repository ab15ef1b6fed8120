//! [`StageFamily`] for IPv4 (RFC 791).

use super::StageFamily;
use crate::counters::DropReason;
use crate::flow::{FlowKey, Proto};
use crate::packet::PacketMeta;
use crate::snapshot::{Listener, NextHop, OwnedAddr, Snapshot};
use crate::wire::{checksum, ethernet, ipv4};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

impl StageFamily for Ipv4Addr {
    const L3_HEADER_LEN: usize = ipv4::HEADER_LEN;
    const ETHERTYPE: u16 = ethernet::ethertype::IPV4;
    const HOP_EXPIRED: DropReason = DropReason::Ipv4TtlExpired;
    const COOKIE_MSS: [u16; 8] = [536, 1024, 1220, 1360, 1400, 1440, 1452, 1460];

    #[inline(always)]
    fn key(meta: &PacketMeta) -> &FlowKey {
        &meta.key
    }

    #[inline(always)]
    fn listener(snap: &Snapshot, proto: Proto, addr: Self, port: u16) -> Option<&Listener> {
        snap.listener(proto, addr, port)
    }

    #[inline(always)]
    fn owned(snap: &Snapshot, addr: Self) -> Option<&OwnedAddr> {
        snap.owned(addr)
    }

    #[inline(always)]
    fn socket_of(addr: &SocketAddr) -> Option<SocketAddrV4> {
        match addr {
            SocketAddr::V4(s) => Some(*s),
            SocketAddr::V6(_) => None,
        }
    }

    #[inline(always)]
    fn next_hop(hop: &NextHop) -> Option<Self> {
        hop.v4()
    }

    #[inline(always)]
    fn hop_limit(l3: &[u8]) -> u8 {
        ipv4::Packet::new_unchecked(l3).ttl()
    }

    #[inline]
    fn tcp_checksum(key: &FlowKey, seg: &[u8]) -> u16 {
        checksum::l4_checksum(key.src_ip, key.dst_ip, ipv4::protocol::TCP, seg)
    }

    /// IPv4 keeps the packet's header and its options (`l4_offset`
    /// stays), as the IPv4 answers always did.
    fn answer_l3(
        buf: &mut [u8],
        meta: &mut PacketMeta,
        key: &FlowKey,
        l4_len: usize,
        ttl: Option<u8>,
    ) -> bool {
        let (l3, l4) = (usize::from(meta.l3_offset), usize::from(meta.l4_offset));
        let Some(h) = buf.get_mut(l3..l4) else {
            return false;
        };
        let mut ip = ipv4::Packet::new_unchecked(h);
        ip.set_src_addr(key.src_ip);
        ip.set_dst_addr(key.dst_ip);
        ip.set_total_len((l4 - l3 + l4_len) as u16);
        if let Some(ttl) = ttl {
            ip.set_ttl(ttl);
        }
        ip.fill_checksum();
        true
    }

    fn write_l3(h: &mut [u8], key: &FlowKey, l4_len: usize, ttl: u8) {
        let mut ip = ipv4::Packet::new_unchecked(h);
        ip.set_version_ihl(5);
        ip.set_tos(0);
        ip.set_total_len((ipv4::HEADER_LEN + l4_len) as u16);
        ip.set_ident(0);
        ip.set_flags_frag(true, false, 0);
        ip.set_ttl(ttl);
        ip.set_protocol(ipv4::protocol::TCP);
        ip.set_src_addr(key.src_ip);
        ip.set_dst_addr(key.dst_ip);
        ip.fill_checksum();
    }

    #[inline]
    fn mss_for_mtu(mtu: u16) -> u16 {
        mtu.saturating_sub(40)
    }

    #[inline(always)]
    fn source_key(src: Self, _: u8) -> u128 {
        u128::from(u32::from(src))
    }
}
