//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Terms used here:
//!
//! * a *sum* is the 16-bit one's-complement sum of a byte string taken as
//!   big-endian 16-bit words (an odd last byte is padded with a zero byte),
//!   folded but not complemented; it is never 0 for data that has a non-zero
//!   byte;
//! * a *checksum* is the complemented sum, the value stored in a header.
//!
//! A header (or pseudo-header + segment) verifies when the sum over it,
//! checksum field included, is `0xffff`.
//!
//! [`sum`] adds 64-bit native-endian words with end-around carry and folds at
//! the end; RFC 1071 §2(A,B) shows this equals the 16-bit big-endian sum up to
//! one final byte swap, because 2^16 ≡ 1 (mod 2^16 − 1).
//!
//! [`update_u16`] and [`update_u32`] are RFC 1624 equation 3,
//! `HC' = ~(~HC + ~m + m')`, which (unlike equation 2) never produces the
//! `-0` checksum `0xffff` for data whose recomputed checksum would be `0x0000`.
//! The result equals a full recomputation bit for bit whenever neither the
//! old nor the new data is all zeros (always true for IPv4 headers, whose
//! version nibble is 4, and for TCP/UDP, whose pseudo-header carries the
//! protocol number).
//! UDP over IPv4 reserves the checksum 0 for "no checksum" (RFC 768): use
//! [`update_udp_u16`]/[`update_udp_u32`], which keep 0 as 0 and send a
//! computed 0 as `0xffff`.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Fold a 64-bit one's-complement accumulator to 16 bits.
#[inline(always)]
fn fold64(mut acc: u64) -> u16 {
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    let mut s = acc as u32;
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// Fold a 32-bit accumulator of 16-bit words to 16 bits.
#[inline(always)]
fn fold32(mut acc: u32) -> u16 {
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    acc as u16
}

/// One's-complement sum of `data` (RFC 1071), folded, not complemented.
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    // Native-endian folding gives the byte-swapped sum on little-endian
    // machines; from_be undoes that (and is a no-op on big-endian ones).
    u16::from_be(fold64(sum_native(data)))
}

/// `a + b` with end-around carry (one's-complement addition of 64-bit
/// accumulators).
#[inline(always)]
fn add_carry(a: u64, b: u64) -> u64 {
    let (s, carry) = a.overflowing_add(b);
    s + u64::from(carry)
}

/// Unfolded one's-complement sum of `data` taken as native-endian words.
#[inline(always)]
fn sum_native(data: &[u8]) -> u64 {
    let mut acc: u64 = 0;
    let mut rest = data;
    while let Some((w, r)) = rest.split_first_chunk::<8>() {
        acc = add_carry(acc, u64::from_ne_bytes(*w));
        rest = r;
    }
    // The tail (< 8 bytes) as a 4-, a 2- and a 1-byte piece, each added as
    // its own native-endian value: every piece starts at an even offset, and
    // a 16-bit word adds the same modulo 2^16 - 1 in any lane of the
    // accumulator. An odd last byte is padded with a zero byte after it (it
    // is the high byte of its big-endian word). Fixed-size reads only: no
    // variable-length copy (which compiles to a memcpy call).
    let mut tail: u64 = 0;
    if let Some((w, r)) = rest.split_first_chunk::<4>() {
        tail += u64::from(u32::from_ne_bytes(*w));
        rest = r;
    }
    if let Some((w, r)) = rest.split_first_chunk::<2>() {
        tail += u64::from(u16::from_ne_bytes(*w));
        rest = r;
    }
    if let Some(&b) = rest.first() {
        tail += u64::from(u16::from_ne_bytes([b, 0]));
    }
    add_carry(acc, tail)
}

/// One's-complement addition of two sums (the first must cover an even
/// number of bytes for the result to be the sum of the concatenation).
#[inline(always)]
pub fn add(a: u16, b: u16) -> u16 {
    fold32(u32::from(a) + u32::from(b))
}

/// The checksum to store for `data`: the complement of its sum.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// Sum of the IPv4 pseudo-header of TCP and UDP (RFC 793 §3.1, RFC 768):
/// source, destination, zero + protocol, and the L4 length in bytes.
#[inline]
pub fn pseudo_header_sum(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, l4_len_bytes: u16) -> u16 {
    let s = u32::from(src);
    let d = u32::from(dst);
    fold32(
        (s >> 16)
            + (s & 0xffff)
            + (d >> 16)
            + (d & 0xffff)
            + u32::from(protocol)
            + u32::from(l4_len_bytes),
    )
}

/// Whether a TCP/UDP segment over IPv4 (checksum field included) verifies.
///
/// The pseudo-header is added to the segment's native-endian accumulator as
/// the bytes it stands for, and the total is folded once; `0xffff` is the
/// same in either byte order.
#[inline]
pub fn verify_l4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, segment: &[u8]) -> bool {
    let Ok(len) = u16::try_from(segment.len()) else {
        return false;
    };
    let pseudo = u64::from(u32::from_ne_bytes(src.octets()))
        + u64::from(u32::from_ne_bytes(dst.octets()))
        + u64::from(u16::from_ne_bytes([0, protocol]))
        + u64::from(u16::from_ne_bytes(len.to_be_bytes()));
    fold64(add_carry(sum_native(segment), pseudo)) == 0xffff
}

/// The checksum to store in a TCP/UDP segment over IPv4 whose checksum field
/// is zero (UDP callers map a result of 0 to `0xffff`). Segments longer than
/// 65535 bytes cannot exist over IPv4; their length is taken modulo 2^16.
#[inline]
pub fn l4_checksum(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, segment: &[u8]) -> u16 {
    let len = segment.len() as u16;
    !add(pseudo_header_sum(src, dst, protocol, len), sum(segment))
}

/// Sum of the IPv6 pseudo-header of an upper-layer checksum (RFC 8200
/// §8.1: TCP, UDP, ICMPv6): source, destination, the 32-bit upper-layer
/// length and the 24 zero bits + next header. No IPv6 header has a checksum
/// of its own.
#[inline]
pub fn pseudo_header_sum_v6(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    next_header: u8,
    upper_len_bytes: u32,
) -> u16 {
    let mut acc: u32 = 0;
    for addr in [src, dst] {
        for w in addr.segments() {
            acc += u32::from(w);
        }
    }
    acc += (upper_len_bytes >> 16) + (upper_len_bytes & 0xffff) + u32::from(next_header);
    fold32(fold32(acc).into())
}

/// Whether an upper-layer message over IPv6 (TCP, UDP, ICMPv6; checksum
/// field included) verifies.
///
/// As [`verify_l4`]: the pseudo-header (RFC 8200 §8.1) is added to the
/// segment's native-endian accumulator as the bytes it stands for (each
/// address as two 64-bit words, the 32-bit length, the zero bytes + next
/// header as one 32-bit word), and the total is folded once.
#[inline]
pub fn verify_l4_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, segment: &[u8]) -> bool {
    let Ok(len) = u32::try_from(segment.len()) else {
        return false;
    };
    let (s, d) = (
        u128::from_ne_bytes(src.octets()),
        u128::from_ne_bytes(dst.octets()),
    );
    let addrs = add_carry(
        add_carry(s as u64, (s >> 64) as u64),
        add_carry(d as u64, (d >> 64) as u64),
    );
    let rest = u64::from(u32::from_ne_bytes(len.to_be_bytes()))
        + u64::from(u32::from_ne_bytes([0, 0, 0, next_header]));
    fold64(add_carry(add_carry(sum_native(segment), addrs), rest)) == 0xffff
}

/// The checksum to store in an upper-layer message over IPv6 whose checksum
/// field is zero. UDP over IPv6 must send a checksum (RFC 8200 §8.1): its
/// callers map a result of 0 to `0xffff`.
#[inline]
pub fn l4_checksum_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, segment: &[u8]) -> u16 {
    let len = u32::try_from(segment.len()).unwrap_or(u32::MAX);
    !add(
        pseudo_header_sum_v6(src, dst, next_header, len),
        sum(segment),
    )
}

/// RFC 1624 eq. 3 terms `~m + m'` of a 128-bit field (an IPv6 address)
/// changing from `old` to `new`, as an unfolded one's-complement
/// accumulator of native-endian words (as [`sum`]'s, so no byte swap of
/// the addresses): combine several fields' terms with [`add_terms`] and
/// apply them once with [`apply_terms`] — one fold for a whole NAT
/// rewrite instead of one per 16-bit word.
#[inline(always)]
pub fn terms_ipv6(old: Ipv6Addr, new: Ipv6Addr) -> u64 {
    // The two native-endian 64-bit halves of each address (which half is
    // which does not matter to a sum).
    let (o, n) = (
        u128::from_ne_bytes(old.octets()),
        u128::from_ne_bytes(new.octets()),
    );
    add_carry(
        add_carry(!(o as u64), n as u64),
        add_carry(!((o >> 64) as u64), (n >> 64) as u64),
    )
}

/// RFC 1624 eq. 3 terms of a 16-bit field changing from `old` to `new`
/// (a port), in [`terms_ipv6`]'s native-endian accumulator.
#[inline(always)]
pub fn terms_u16(old: u16, new: u16) -> u64 {
    u64::from((!old).to_be()) + u64::from(new.to_be())
}

/// One's-complement addition of two [`terms_ipv6`]/[`terms_u16`]
/// accumulators.
#[inline(always)]
pub fn add_terms(a: u64, b: u64) -> u64 {
    add_carry(a, b)
}

/// RFC 1624 eq. 3, `HC' = ~(~HC + terms)`: the checksum `csum` after the
/// fields whose accumulated [`terms_ipv6`]/[`terms_u16`] are `terms`
/// changed, with one fold. Bit for bit what updating word by word gives
/// whenever no intermediate sum is the all-zero one (see the module docs).
#[inline(always)]
pub fn apply_terms(csum: u16, terms: u64) -> u16 {
    !u16::from_be(fold64(add_carry(u64::from((!csum).to_be()), terms)))
}

/// RFC 1624 eq. 3 for a 128-bit field (an IPv6 address): the terms of its
/// eight words summed once and folded once ([`terms_ipv6`]).
#[inline]
pub fn update_ipv6(csum: u16, old: Ipv6Addr, new: Ipv6Addr) -> u16 {
    apply_terms(csum, terms_ipv6(old, new))
}

/// RFC 1624 eq. 3: the checksum after one 16-bit word changed from `old` to
/// `new`.
#[inline(always)]
pub fn update_u16(csum: u16, old: u16, new: u16) -> u16 {
    !fold32(u32::from(!csum) + u32::from(!old) + u32::from(new))
}

/// RFC 1624 eq. 3 for a 32-bit field (an IPv4 address, or two adjacent
/// 16-bit words), as two word updates.
#[inline(always)]
pub fn update_u32(csum: u16, old: u32, new: u32) -> u16 {
    !fold32(
        u32::from(!csum)
            + u32::from(!(old >> 16) as u16)
            + u32::from(!(old as u16))
            + (new >> 16)
            + (new & 0xffff),
    )
}

/// [`update_u16`] for a UDP checksum: 0 ("no checksum", RFC 768) stays 0,
/// and a result of 0 is sent as `0xffff`.
#[inline(always)]
pub fn update_udp_u16(csum: u16, old: u16, new: u16) -> u16 {
    if csum == 0 {
        return 0;
    }
    match update_u16(csum, old, new) {
        0 => 0xffff,
        c => c,
    }
}

/// [`update_u32`] for a UDP checksum, with the rules of [`update_udp_u16`].
#[inline(always)]
pub fn update_udp_u32(csum: u16, old: u32, new: u32) -> u16 {
    if csum == 0 {
        return 0;
    }
    match update_u32(csum, old, new) {
        0 => 0xffff,
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The textbook RFC 1071 loop over big-endian 16-bit words.
    fn reference_sum(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for pair in data.chunks(2) {
            let hi = u32::from(pair[0]) << 8;
            let lo = pair.get(1).map_or(0, |&b| u32::from(b));
            acc += hi | lo;
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: 00 01 f2 03 f4 f5 f6 f7 sums to 0xddf2.
        assert_eq!(
            sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
        // The same bytes plus an odd byte.
        assert_eq!(
            sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7, 0x01]),
            0xdef2
        );
    }

    #[test]
    fn known_ipv4_header() {
        // A classic example header with checksum 0xb861.
        let hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&hdr), 0xb861);
    }

    proptest! {
        #[test]
        fn fast_sum_matches_reference(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            prop_assert_eq!(sum(&data), reference_sum(&data));
        }

        /// The single-fold verification equals summing the pseudo-header
        /// and the segment separately (RFC 793 §3.1), for valid segments
        /// (checksum filled) and random ones alike.
        #[test]
        fn verify_l4_matches_reference(
            mut seg in proptest::collection::vec(any::<u8>(), 0..200),
            (src, dst, proto) in (any::<u32>(), any::<u32>(), any::<u8>()),
            fill in any::<bool>(),
        ) {
            let (src, dst) = (Ipv4Addr::from(src), Ipv4Addr::from(dst));
            if fill && seg.len() >= 2 {
                seg[0..2].fill(0);
                let c = l4_checksum(src, dst, proto, &seg);
                seg[0..2].copy_from_slice(&c.to_be_bytes());
                prop_assert!(verify_l4(src, dst, proto, &seg));
            }
            let pseudo = pseudo_header_sum(src, dst, proto, seg.len() as u16);
            let reference = add(pseudo, reference_sum(&seg)) == 0xffff;
            prop_assert_eq!(verify_l4(src, dst, proto, &seg), reference);
        }

        #[test]
        fn filled_checksum_verifies(mut data in proptest::collection::vec(any::<u8>(), 2..200)) {
            data[0] = 0;
            data[1] = 0;
            let c = checksum(&data);
            data[0..2].copy_from_slice(&c.to_be_bytes());
            prop_assert_eq!(sum(&data), 0xffff);
        }

        #[test]
        fn update_u16_matches_recompute(
            mut data in proptest::collection::vec(any::<u8>(), 8..64),
            word in 2usize..4,
            new in any::<u16>(),
        ) {
            // Checksum field at 0..2, a fixed non-zero word at 2..4 (so no
            // sum is ever the all-zero one), the changed word at 4..8.
            data[0..4].copy_from_slice(&[0, 0, 0x45, 0]);
            let c = checksum(&data);
            let off = word * 2;
            let old = u16::from_be_bytes([data[off], data[off + 1]]);
            data[off..off + 2].copy_from_slice(&new.to_be_bytes());
            prop_assert_eq!(update_u16(c, old, new), checksum(&data));
        }

        #[test]
        fn update_u32_matches_recompute(
            mut data in proptest::collection::vec(any::<u8>(), 8..64),
            new in any::<u32>(),
        ) {
            data[0..4].copy_from_slice(&[0, 0, 0x45, 0]);
            let c = checksum(&data);
            let old = u32::from_be_bytes([data[4], data[5], data[6], data[7]]);
            data[4..8].copy_from_slice(&new.to_be_bytes());
            prop_assert_eq!(update_u32(c, old, new), checksum(&data));
        }
    }

    /// Random IPv6 addresses, with the edge cases of a 16-bit word sum
    /// among them: all zeros, all ones, two addresses one word apart.
    fn edge_addr6() -> impl Strategy<Value = Ipv6Addr> {
        prop_oneof![
            4 => any::<[u8; 16]>().prop_map(Ipv6Addr::from),
            1 => Just(Ipv6Addr::UNSPECIFIED),
            1 => Just(Ipv6Addr::from([0xff; 16])),
            2 => any::<u16>().prop_map(|w| Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, w)),
        ]
    }

    fn edge_port() -> impl Strategy<Value = u16> {
        prop_oneof![3 => any::<u16>(), 1 => Just(0), 1 => Just(0xffff)]
    }

    /// The IPv6 pseudo-header laid out as bytes (RFC 8200 §8.1).
    fn v6_pseudo_bytes(src: Ipv6Addr, dst: Ipv6Addr, nh: u8, len: u32) -> Vec<u8> {
        let mut b = Vec::with_capacity(40);
        b.extend_from_slice(&src.octets());
        b.extend_from_slice(&dst.octets());
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, nh]);
        b
    }

    proptest! {
        #[test]
        fn ipv6_checksums_match_the_byte_layout_and_verify(
            src in any::<[u8; 16]>(),
            dst in any::<[u8; 16]>(),
            nh in any::<u8>(),
            mut seg in proptest::collection::vec(any::<u8>(), 8..200),
        ) {
            let (src, dst) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
            seg[6] = 0;
            seg[7] = 0;
            let mut whole = v6_pseudo_bytes(src, dst, nh, seg.len() as u32);
            whole.extend_from_slice(&seg);
            prop_assert_eq!(reference_sum(&whole), add(pseudo_header_sum_v6(src, dst, nh, seg.len() as u32), sum(&seg)));
            // A random (unfilled) checksum field: the single-fold
            // verification agrees with the byte layout's sum.
            prop_assert_eq!(verify_l4_v6(src, dst, nh, &seg), reference_sum(&whole) == 0xffff);
            let c = l4_checksum_v6(src, dst, nh, &seg);
            seg[6..8].copy_from_slice(&c.to_be_bytes());
            prop_assert!(verify_l4_v6(src, dst, nh, &seg));
            seg[0] ^= 0x40;
            prop_assert!(!verify_l4_v6(src, dst, nh, &seg));
        }

        #[test]
        fn ipv6_address_updates_equal_a_recomputation(
            src in any::<[u8; 16]>(),
            dst in any::<[u8; 16]>(),
            new_src in any::<[u8; 16]>(),
            mut seg in proptest::collection::vec(any::<u8>(), 8..100),
        ) {
            let (src, dst, new_src) = (Ipv6Addr::from(src), Ipv6Addr::from(dst), Ipv6Addr::from(new_src));
            seg[6] = 0;
            seg[7] = 0;
            // TCP's protocol number keeps the pseudo-header non-zero.
            let before = l4_checksum_v6(src, dst, 6, &seg);
            let after = l4_checksum_v6(new_src, dst, 6, &seg);
            prop_assert_eq!(update_ipv6(before, src, new_src), after);
        }

        /// A whole IPv6 NAT rewrite — both addresses and both ports, their
        /// terms summed once and folded once — equals a full recomputation
        /// over the new pseudo-header and segment, also when the checksum
        /// before was `0x0000` or (UDP's "computed 0", RFC 768 / RFC 8200
        /// §8.1) `0xffff`, and for all-zero / all-ones / one-word-apart
        /// addresses.
        #[test]
        fn ipv6_nat_terms_equal_a_recomputation(
            (src, dst, new_src, new_dst) in (edge_addr6(), edge_addr6(), edge_addr6(), edge_addr6()),
            (sp, dp, nsp, ndp) in (edge_port(), edge_port(), edge_port(), edge_port()),
            udp in any::<bool>(),
            edge in 0u8..3,
            mut seg in proptest::collection::vec(any::<u8>(), 10..120),
        ) {
            let (nh, at) = if udp { (17, 6) } else { (6, 16) };
            if seg.len() < at + 2 {
                seg.resize(at + 2, 0x5a);
            }
            seg[..2].copy_from_slice(&sp.to_be_bytes());
            seg[2..4].copy_from_slice(&dp.to_be_bytes());
            seg[at..at + 2].fill(0);
            // A word after the checksum field that `edge` may set so the
            // checksum comes out 0x0000.
            let free = if udp { 8 } else { 4 };
            if edge != 0 {
                seg[free..free + 2].fill(0);
                let c = l4_checksum_v6(src, dst, nh, &seg);
                seg[free..free + 2].copy_from_slice(&c.to_be_bytes());
            }
            let mut before = l4_checksum_v6(src, dst, nh, &seg);
            if edge != 0 {
                prop_assert_eq!(before, 0x0000);
            }
            if edge == 2 {
                // The same sum written as -0, as UDP sends a computed 0.
                before = 0xffff;
            }
            seg[at..at + 2].copy_from_slice(&before.to_be_bytes());
            prop_assert!(verify_l4_v6(src, dst, nh, &seg));

            let terms = add_terms(
                add_terms(terms_ipv6(src, new_src), terms_ipv6(dst, new_dst)),
                terms_u16(sp, nsp) + terms_u16(dp, ndp),
            );
            let updated = apply_terms(before, terms);
            seg[..2].copy_from_slice(&nsp.to_be_bytes());
            seg[2..4].copy_from_slice(&ndp.to_be_bytes());
            seg[at..at + 2].fill(0);
            let full = l4_checksum_v6(new_src, new_dst, nh, &seg);
            prop_assert_eq!(updated, full);
            // And address by address, as `update_ipv6` does.
            let stepwise = update_ipv6(update_ipv6(before, src, new_src), dst, new_dst);
            prop_assert_eq!(
                apply_terms(stepwise, terms_u16(sp, nsp) + terms_u16(dp, ndp)),
                full
            );
            seg[at..at + 2].copy_from_slice(&updated.to_be_bytes());
            prop_assert!(verify_l4_v6(new_src, new_dst, nh, &seg));
        }
    }
}
