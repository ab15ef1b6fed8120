//! Per-frame fix-ups driven by the RX ring's `tp_status` metadata, which only
//! the driver sees: completing checksums the kernel left partial, and the
//! size limits frames are held to.
//!
//! * `TP_STATUS_CSUMNOTREADY`: the skb was `CHECKSUM_PARTIAL` (a local sender
//!   with checksum offload; the NIC, or here nobody, was to finish it). The
//!   TCP/UDP checksum field holds only the pseudo-header sum. We compute the
//!   full RFC 1071 checksum over the pseudo-header and the segment: for IPv4
//!   (RFC 9293 §3.1, RFC 768) as far as the total length says; for IPv6
//!   (RFC 8200 §8.1) over the upper-layer header found by walking the
//!   extension headers with the bounded [`ipv6::walk`], as far as the
//!   payload length says (a TCP segment) or the UDP length field says. A
//!   UDP result of 0 is sent as `0xffff` (RFC 768; RFC 8200 §8.1 forbids a
//!   zero UDP checksum over IPv6). Fragments, over-long or truncated
//!   extension chains and anything else are left untouched, for the stages
//!   to drop by their reason.
//! * Frame size limits: an untagged frame carries at most `mtu` bytes after
//!   its 14-byte Ethernet header; one 802.1Q tag adds 4 bytes (IEEE 802.1Q).

use crate::wire::checksum;
use crate::wire::ethernet::{self, ethertype};
use crate::wire::ipv4::{self, protocol};
use crate::wire::ipv6::{self, next_header};
use crate::wire::{tcp, udp};
use std::net::Ipv6Addr;

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

/// Replace the partial TCP/UDP checksum of an IPv4 or IPv6 frame (optionally
/// with one 802.1Q tag) by the full one. Returns false, leaving the frame
/// untouched, when it is not an unfragmented IPv4/IPv6 TCP/UDP packet whose
/// headers fit.
pub(super) fn complete_l4_checksum(frame: &mut [u8]) -> bool {
    let Ok(l3) = ethernet::Packet::new_unchecked(&*frame).l3_info() else {
        return false;
    };
    let Some(ip_bytes) = frame.get_mut(l3.offset..) else {
        return false;
    };
    match l3.ethertype {
        ethertype::IPV4 => complete_ipv4(ip_bytes),
        ethertype::IPV6 => complete_ipv6(ip_bytes),
        _ => false,
    }
}

/// [`complete_l4_checksum`] of an IPv4 packet.
fn complete_ipv4(ip_bytes: &mut [u8]) -> bool {
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

/// [`complete_l4_checksum`] of an IPv6 packet: the upper-layer header is
/// where the extension chain ends, the pseudo-header (RFC 8200 §8.1) carries
/// the final source and destination (a Routing header is not followed: the
/// local sender's packets this sees carry none to a later segment).
fn complete_ipv6(ip_bytes: &mut [u8]) -> bool {
    let Ok(ip) = ipv6::Packet::new_checked(&*ip_bytes) else {
        return false;
    };
    if ip.version() != 6 {
        return false;
    }
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let Ok(chain) = ipv6::walk(ip.next_header(), ip.payload()) else {
        return false;
    };
    if chain.fragment.is_some() {
        return false;
    }
    let start = ipv6::HEADER_LEN + chain.l4_offset;
    let end = ipv6::HEADER_LEN + usize::from(ip.payload_len());
    let Some(segment) = ip_bytes.get_mut(start..end) else {
        return false;
    };
    let (segment, csum_at) = match chain.protocol {
        next_header::TCP => {
            if tcp::Packet::new_checked(&*segment).is_err() {
                return false;
            }
            (segment, 16)
        }
        next_header::UDP => {
            let Ok(dgram) = udp::Packet::new_checked(&*segment) else {
                return false;
            };
            let len = usize::from(dgram.len());
            (&mut segment[..len], 6)
        }
        _ => return false,
    };
    fill_v6(segment, csum_at, src, dst, chain.protocol);
    true
}

/// Zero the checksum field at `csum_at` of `segment` and store the full
/// checksum over the IPv6 pseudo-header and `segment` (a UDP 0 as `0xffff`).
fn fill_v6(segment: &mut [u8], csum_at: usize, src: Ipv6Addr, dst: Ipv6Addr, proto: u8) {
    segment[csum_at..csum_at + 2].copy_from_slice(&[0, 0]);
    let c = match checksum::l4_checksum_v6(src, dst, proto, segment) {
        0 if proto == next_header::UDP => 0xffff,
        c => c,
    };
    segment[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
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

    /// The IPv6 counterpart of [`make_partial`]: the pseudo-header sum over
    /// the upper-layer length (from `l4_off` to the end of the payload, or
    /// the UDP length) in the field at `csum_off_in_l4`.
    fn make_partial_v6(frame: &mut [u8], l4_off: usize, csum_off_in_l4: usize, proto: u8) {
        let ip = ipv6::Packet::new_checked(&frame[14..]).unwrap();
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let end = 14 + ipv6::HEADER_LEN + usize::from(ip.payload_len());
        let len = if proto == next_header::UDP {
            u32::from(u16::from_be_bytes([frame[l4_off + 4], frame[l4_off + 5]]))
        } else {
            (end - l4_off) as u32
        };
        let partial = checksum::pseudo_header_sum_v6(src, dst, proto, len);
        let at = l4_off + csum_off_in_l4;
        frame[at..at + 2].copy_from_slice(&partial.to_be_bytes());
    }

    fn l4_verifies_v6(frame: &[u8], l4_off: usize, proto: u8) -> bool {
        let ip = ipv6::Packet::new_checked(&frame[14..]).unwrap();
        let end = 14 + ipv6::HEADER_LEN + usize::from(ip.payload_len());
        checksum::verify_l4_v6(ip.src_addr(), ip.dst_addr(), proto, &frame[l4_off..end])
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
        fn partial_ipv6_tcp_checksum_is_completed_after_extension_headers(
            src in any::<u128>(), dst in any::<u128>(), sport in any::<u16>(), dport in any::<u16>(),
            seq in any::<u32>(), payload in proptest::collection::vec(any::<u8>(), 0..300),
            exts in 0usize..=4, ext_words in 0u8..4,
        ) {
            let mut f = build::eth_ipv6_tcp(A, B, (Ipv6Addr::from(src), sport),
                (Ipv6Addr::from(dst), dport), crate::wire::tcp::flags::ACK, seq, 1, &payload);
            let l4 = build::with_dest_opts(&mut f, exts, ext_words);
            prop_assert!(l4_verifies_v6(&f, l4, next_header::TCP));
            let good = f.clone();
            make_partial_v6(&mut f, l4, 16, next_header::TCP);
            prop_assert!(complete_l4_checksum(&mut f));
            prop_assert!(l4_verifies_v6(&f, l4, next_header::TCP));
            prop_assert_eq!(f, good);
        }

        #[test]
        fn partial_ipv6_udp_checksum_is_completed_and_never_zero(
            src in any::<u128>(), dst in any::<u128>(), sport in any::<u16>(), dport in any::<u16>(),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            vlan in proptest::option::of(1u16..4095), exts in 0usize..=2,
        ) {
            let mut f = build::eth_ipv6_udp(A, B, (Ipv6Addr::from(src), sport),
                (Ipv6Addr::from(dst), dport), &payload);
            let l4 = build::with_dest_opts(&mut f, exts, 0);
            let good = f.clone();
            make_partial_v6(&mut f, l4, 6, next_header::UDP);
            let (mut f, l4) = match vlan {
                Some(v) => (build::with_vlan(&f, v), l4 + 4),
                None => (f, l4),
            };
            prop_assert!(complete_l4_checksum(&mut f));
            prop_assert_ne!(&f[l4 + 6..l4 + 8], &[0u8, 0][..]);
            let f = if vlan.is_some() { [&f[..12], &f[16..]].concat() } else { f };
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

    /// A UDP datagram whose checksum comes out as 0 is sent as `0xffff`
    /// (RFC 8200 §8.1: over IPv6 a zero UDP checksum means none, which is
    /// not allowed).
    #[test]
    fn ipv6_udp_zero_result_is_sent_as_all_ones() {
        let (src, dst): (Ipv6Addr, Ipv6Addr) =
            ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
        // Choose the last two payload bytes so that the full sum is 0xffff
        // (checksum 0): the pseudo-header and the rest with a zero pad.
        let mut payload = vec![0x5au8; 10];
        let f = build::eth_ipv6_udp(A, B, (src, 7), (dst, 9), &payload);
        let dgram = &f[14 + 40..];
        let c = u16::from_be_bytes([dgram[6], dgram[7]]);
        // Adding the checksum to the payload's last word turns the sum into
        // 0xffff, so the complement (the checksum) becomes 0.
        let last = u16::from_be_bytes([payload[8], payload[9]]);
        payload[8..10]
            .copy_from_slice(&checksum::add(last, if c == 0xffff { 0 } else { c }).to_be_bytes());
        let mut f = build::eth_ipv6_udp(A, B, (src, 7), (dst, 9), &payload);
        let mut zeroed = f[14 + 40..].to_vec();
        zeroed[6..8].copy_from_slice(&[0, 0]);
        assert_eq!(
            checksum::l4_checksum_v6(src, dst, next_header::UDP, &zeroed),
            0,
            "the fixture's checksum computes to 0"
        );
        make_partial_v6(&mut f, 14 + 40, 6, next_header::UDP);
        assert!(complete_l4_checksum(&mut f));
        assert_eq!(&f[14 + 40 + 6..14 + 40 + 8], &[0xff, 0xff]);
        assert!(l4_verifies_v6(&f, 14 + 40, next_header::UDP));
    }

    /// Fragments, over-long or truncated extension chains and ICMPv6 are
    /// left untouched, for the stages to drop or check by their reason.
    #[test]
    fn ipv6_fragments_bad_chains_and_other_protocols_are_left_alone() {
        let (src, dst): (Ipv6Addr, Ipv6Addr) =
            ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
        let base = build::eth_ipv6_udp(A, B, (src, 7), (dst, 9), b"payload");
        // A chain of more extension headers than the walk allows.
        let mut long = base.clone();
        build::with_dest_opts(&mut long, ipv6::MAX_EXT_HEADERS + 1, 0);
        // A chain whose last header's length runs past the payload.
        let mut truncated = base.clone();
        build::with_dest_opts(&mut truncated, 1, 0);
        truncated[14 + 40 + 1] = 10;
        // An atomic fragment (offset 0, M = 0) in front of the UDP header.
        let mut frag = base.clone();
        let at = 14 + 40;
        frag.splice(at..at, [next_header::UDP, 0, 0, 0, 0, 0, 0, 1]);
        {
            let mut ip = ipv6::Packet::new_unchecked(&mut frag[14..]);
            let len = ip.payload_len() + 8;
            ip.set_payload_len(len);
            ip.set_next_header(next_header::FRAGMENT);
        }
        let echo = build::eth_ipv6_echo(A, B, (src, dst), 128, (1, 2), b"ping");
        for mut f in [long, truncated, frag, echo] {
            let before = f.clone();
            assert!(!complete_l4_checksum(&mut f));
            assert_eq!(f, before);
        }
    }

    #[test]
    fn frame_limits_follow_the_mtu_and_one_tag() {
        assert_eq!(max_frame_len(1500, false), 1514);
        assert_eq!(max_frame_len(1500, true), 1518);
        assert_eq!(max_frame_len(9000, false), 9014);
        assert!(is_vlan_tpid(0x8100) && is_vlan_tpid(0x88a8) && !is_vlan_tpid(0x0800));
    }
}
