//! Per-frame fix-ups driven by the RX ring's `tp_status` metadata, which only
//! the driver sees: completing checksums the kernel left partial, and the
//! size limits frames are held to.
//!
//! * `TP_STATUS_CSUMNOTREADY`: the skb was `CHECKSUM_PARTIAL` (a local sender
//!   with checksum offload; the NIC, or here nobody, was to finish it). The
//!   TCP/UDP checksum field holds only the pseudo-header sum. We compute the
//!   full RFC 1071 checksum over the IPv4 pseudo-header and the segment
//!   (RFC 9293 §3.1, RFC 768), as far as the IPv4 total length says; a UDP
//!   result of 0 is sent as `0xffff` (RFC 768).
//! * Frame size limits: an untagged frame carries at most `mtu` bytes after
//!   its 14-byte Ethernet header; one 802.1Q tag adds 4 bytes (IEEE 802.1Q).

use crate::wire::ethernet::{self, ethertype};
use crate::wire::ipv4::{self, protocol};
use crate::wire::{tcp, udp};

/// The largest frame (Ethernet header included, no FCS) a port of `mtu`
/// accepts, with or without one VLAN tag.
#[inline]
pub(super) fn max_frame_len(mtu: u32, tagged: bool) -> usize {
    let mtu = usize::try_from(mtu).unwrap_or(usize::MAX);
    let tag = if tagged { ethernet::VLAN_TAG_LEN } else { 0 };
    mtu.saturating_add(ethernet::HEADER_LEN + tag)
}

/// Whether the EtherType at offset 12 of `frame` is a VLAN TPID.
#[inline]
pub(super) fn is_vlan_tpid(tpid: u16) -> bool {
    tpid == ethertype::VLAN || tpid == ethertype::QINQ
}

/// Replace the partial TCP/UDP checksum of an IPv4 frame (optionally with one
/// 802.1Q tag) by the full one. Returns false, leaving the frame untouched,
/// when it is not an unfragmented IPv4 TCP/UDP packet whose headers fit.
pub(super) fn complete_l4_checksum(frame: &mut [u8]) -> bool {
    let Ok(l3) = ethernet::Packet::new_unchecked(&*frame).l3_info() else {
        return false;
    };
    if l3.ethertype != ethertype::IPV4 {
        return false;
    }
    let Some(ip_bytes) = frame.get_mut(l3.offset..) else {
        return false;
    };
    let Ok(ip) = ipv4::Packet::new_checked(&*ip_bytes) else {
        return false;
    };
    if ip.version() != 4 || ip.is_fragment() {
        return false;
    }
    let (src, dst, proto) = (ip.src_addr(), ip.dst_addr(), ip.protocol());
    let (start, end) = (ip.header_len(), usize::from(ip.total_len()));
    let Some(segment) = ip_bytes.get_mut(start..end) else {
        return false;
    };
    match proto {
        protocol::TCP => match tcp::Packet::new_checked(segment) {
            Ok(mut seg) => {
                seg.fill_checksum(src, dst);
                true
            }
            Err(_) => false,
        },
        protocol::UDP => {
            // The UDP length must cover the header and fit the IP payload.
            let Ok(mut seg) = udp::Packet::new_checked(segment) else {
                return false;
            };
            seg.fill_checksum(src, dst);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{MacAddr, build, checksum};
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    /// Overwrite the L4 checksum of an untagged (or tagged, `l3_off`) frame
    /// with what a CHECKSUM_PARTIAL skb carries: the folded pseudo-header sum.
    fn make_partial(frame: &mut [u8], l3_off: usize, csum_off_in_l4: usize) {
        let ip = ipv4::Packet::new_checked(&frame[l3_off..]).unwrap();
        let (src, dst, proto, hl) = (ip.src_addr(), ip.dst_addr(), ip.protocol(), ip.header_len());
        let l4_len = ip.total_len() - hl as u16;
        let partial = checksum::pseudo_header_sum(src, dst, proto, l4_len);
        let at = l3_off + hl + csum_off_in_l4;
        frame[at..at + 2].copy_from_slice(&partial.to_be_bytes());
    }

    fn l4_verifies(frame: &[u8], l3_off: usize) -> bool {
        let ip = ipv4::Packet::new_checked(&frame[l3_off..]).unwrap();
        checksum::verify_l4(ip.src_addr(), ip.dst_addr(), ip.protocol(), ip.payload())
    }

    proptest! {
        #[test]
        fn partial_tcp_checksum_is_completed(
            src in any::<u32>(), dst in any::<u32>(), sport in any::<u16>(), dport in any::<u16>(),
            seq in any::<u32>(), payload in proptest::collection::vec(any::<u8>(), 0..300),
            vlan in proptest::option::of(1u16..4095),
        ) {
            let mut f = build::eth_ipv4_tcp(A, B, Ipv4Addr::from(src), sport, Ipv4Addr::from(dst),
                dport, crate::wire::tcp::flags::ACK, seq, 1, &payload);
            if let Some(v) = vlan { f = build::with_vlan(&f, v); }
            let l3 = if vlan.is_some() { 18 } else { 14 };
            let good = f.clone();
            make_partial(&mut f, l3, 16);
            prop_assert!(complete_l4_checksum(&mut f));
            prop_assert!(l4_verifies(&f, l3));
            prop_assert_eq!(f, good);
        }

        #[test]
        fn partial_udp_checksum_is_completed(
            src in any::<u32>(), dst in any::<u32>(), sport in any::<u16>(), dport in any::<u16>(),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut f = build::eth_ipv4_udp(A, B, Ipv4Addr::from(src), sport, Ipv4Addr::from(dst),
                dport, &payload);
            let good = f.clone();
            make_partial(&mut f, 14, 6);
            prop_assert!(complete_l4_checksum(&mut f));
            prop_assert!(l4_verifies(&f, 14));
            prop_assert_ne!(&f[14 + 20 + 6..14 + 20 + 8], &[0u8, 0][..]);
            prop_assert_eq!(f, good);
        }

        #[test]
        fn arbitrary_bytes_never_panic_and_change_nothing_when_refused(
            mut bytes in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let before = bytes.clone();
            if !complete_l4_checksum(&mut bytes) {
                prop_assert_eq!(bytes, before);
            }
        }
    }

    #[test]
    fn non_ipv4_and_fragments_are_left_alone() {
        let arp = build::arp_request(A, Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut f = arp.clone();
        assert!(!complete_l4_checksum(&mut f));
        assert_eq!(f, arp);

        let mut frag = build::eth_ipv4_udp(
            A,
            B,
            Ipv4Addr::new(10, 0, 0, 1),
            1,
            Ipv4Addr::new(10, 0, 0, 2),
            2,
            b"x",
        );
        ipv4::Packet::new_unchecked(&mut frag[14..]).set_flags_frag(false, true, 0);
        let before = frag.clone();
        assert!(!complete_l4_checksum(&mut frag));
        assert_eq!(frag, before);
    }

    #[test]
    fn frame_limits_follow_the_mtu_and_one_tag() {
        assert_eq!(max_frame_len(1500, false), 1514);
        assert_eq!(max_frame_len(1500, true), 1518);
        assert_eq!(max_frame_len(9000, false), 9014);
        assert!(is_vlan_tpid(0x8100) && is_vlan_tpid(0x88a8) && !is_vlan_tpid(0x0800));
    }
}
