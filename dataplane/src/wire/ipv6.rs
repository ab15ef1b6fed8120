//! IPv6 headers (RFC 8200 §3) and the walk of their extension headers
//! (RFC 8200 §4) to the upper-layer header.
//!
//! Layout of the fixed header: version (4 bits), traffic class (8 bits),
//! flow label (20 bits) (0..4), payload length (4..6), next header (6), hop
//! limit (7), source (8..24), destination (24..40). There is no header
//! checksum: the upper layers' pseudo-header covers the addresses
//! ([`super::checksum::pseudo_header_sum_v6`], RFC 8200 §8.1).
//!
//! `new_checked` guarantees `40 + payload_len <= buffer.len()`; the buffer
//! may be longer than the packet (Ethernet padding): use
//! [`Packet::payload`] for what follows the fixed header. A payload length
//! of 0 with a Hop-by-Hop header is a jumbogram (RFC 2675), which no
//! Ethernet link carries: its walk ends as truncated.
//!
//! [`walk`] follows the chain of extension headers with a bound on their
//! number ([`MAX_EXT_HEADERS`]) and total length ([`MAX_EXT_BYTES`]), as
//! RFC 8200 §4 lets a node do and RFC 7112 asks of a chain that must reach
//! the upper-layer header in the first fragment: a chain that is too long,
//! truncated, or has a Hop-by-Hop header anywhere but first (RFC 8200 §4.1)
//! is an error the parse stage drops and counts by reason.

use super::field::{ipv6_at, set_bytes, set_u8, set_u16, u8_at, u16_at, u32_at};
use super::{Error, Header, check_min};
use std::net::Ipv6Addr;

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;
/// Most extension headers [`walk`] follows before giving up.
pub const MAX_EXT_HEADERS: usize = 8;
/// Most bytes of extension headers [`walk`] follows before giving up.
pub const MAX_EXT_BYTES: usize = 512;
/// The minimum link MTU of IPv6 (RFC 8200 §5): a Packet Too Big never
/// announces less.
pub const MIN_MTU: u16 = 1280;

/// Next Header values (IANA "Assigned Internet Protocol Numbers").
pub mod next_header {
    pub const HOP_BY_HOP: u8 = 0;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const ESP: u8 = 50;
    pub const AH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const NO_NEXT: u8 = 59;
    pub const DEST_OPTS: u8 = 60;
    pub const MOBILITY: u8 = 135;
    pub const HIP: u8 = 139;
    pub const SHIM6: u8 = 140;
}

mod off {
    pub const VER_TC_FLOW: usize = 0;
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
}

/// A view of an IPv6 packet.
#[derive(Clone, Copy, Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// A view whose fixed header and payload fit the buffer. The version
    /// field is not checked.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Packet { buffer };
        let len = p.buffer.as_ref().len();
        check_min(Header::Ipv6, len, HEADER_LEN)?;
        let total = HEADER_LEN + usize::from(p.payload_len());
        if total > len {
            return Err(Error::BadLength {
                header: Header::Ipv6,
                field_bytes: usize::from(p.payload_len()),
                min_bytes: 0,
                max_bytes: len - HEADER_LEN,
            });
        }
        Ok(p)
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn version(&self) -> u8 {
        u8_at(self.buffer.as_ref(), off::VER_TC_FLOW) >> 4
    }

    /// Traffic class (DSCP and ECN).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        ((u16_at(self.buffer.as_ref(), off::VER_TC_FLOW) >> 4) & 0xff) as u8
    }

    /// The 20-bit flow label.
    #[inline]
    pub fn flow_label(&self) -> u32 {
        u32_at(self.buffer.as_ref(), off::VER_TC_FLOW) & 0x000f_ffff
    }

    /// Bytes after the fixed header (extension headers included).
    #[inline]
    pub fn payload_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::PAYLOAD_LEN)
    }

    /// The first extension header's or the upper layer's protocol.
    #[inline]
    pub fn next_header(&self) -> u8 {
        u8_at(self.buffer.as_ref(), off::NEXT_HEADER)
    }

    #[inline]
    pub fn hop_limit(&self) -> u8 {
        u8_at(self.buffer.as_ref(), off::HOP_LIMIT)
    }

    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        ipv6_at(self.buffer.as_ref(), off::SRC)
    }

    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        ipv6_at(self.buffer.as_ref(), off::DST)
    }

    /// The bytes after the fixed header, `payload_len` of them (fewer if
    /// the buffer is shorter: only on an unchecked view).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = (HEADER_LEN + usize::from(self.payload_len())).min(b.len());
        b.get(HEADER_LEN..end).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Version 6, traffic class and flow label in one write.
    #[inline]
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let word = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        set_bytes(self.buffer.as_mut(), off::VER_TC_FLOW, &word.to_be_bytes());
    }

    #[inline]
    pub fn set_payload_len(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::PAYLOAD_LEN, value);
    }

    #[inline]
    pub fn set_next_header(&mut self, value: u8) {
        set_u8(self.buffer.as_mut(), off::NEXT_HEADER, value);
    }

    #[inline]
    pub fn set_hop_limit(&mut self, value: u8) {
        set_u8(self.buffer.as_mut(), off::HOP_LIMIT, value);
    }

    #[inline]
    pub fn set_src_addr(&mut self, value: Ipv6Addr) {
        set_bytes(self.buffer.as_mut(), off::SRC, &value.octets());
    }

    #[inline]
    pub fn set_dst_addr(&mut self, value: Ipv6Addr) {
        set_bytes(self.buffer.as_mut(), off::DST, &value.octets());
    }

    /// The payload, mutable (see [`Packet::payload`]).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = (HEADER_LEN + usize::from(self.payload_len())).min(self.buffer.as_ref().len());
        self.buffer
            .as_mut()
            .get_mut(HEADER_LEN..end)
            .unwrap_or(&mut [])
    }
}

/// A Fragment header (RFC 8200 §4.5) found by [`walk`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FragmentInfo {
    /// Offset of this fragment's data in the original packet, in bytes.
    pub offset_bytes: u16,
    /// The M flag: more fragments follow.
    pub more: bool,
    pub ident: u32,
}

/// Where [`walk`] ended: the upper-layer protocol and where its header
/// starts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Chain {
    /// The upper-layer protocol: TCP, UDP, ICMPv6, [`next_header::NO_NEXT`],
    /// [`next_header::ESP`] (encrypted: the walk cannot go on), or any other
    /// value the walk does not know as an extension header.
    pub protocol: u8,
    /// Offset of the upper-layer header from the start of the IPv6 payload
    /// (the total length of the extension headers).
    pub l4_offset: usize,
    /// Extension headers walked.
    pub headers: u8,
    /// The Fragment header, if the chain has one. A fragment with a
    /// non-zero offset has no upper-layer header: `protocol` is then the
    /// Fragment header's Next Header and `l4_offset` where its data starts.
    pub fragment: Option<FragmentInfo>,
}

/// Walk the extension headers of an IPv6 payload, starting with the fixed
/// header's Next Header `first` (RFC 8200 §4: Hop-by-Hop, Routing,
/// Fragment, Destination Options, AH (RFC 4302 §2.2: its length is in
/// 4-byte units), and Mobility, HIP and Shim6, which share the
/// generic format). Bounded by [`MAX_EXT_HEADERS`] and [`MAX_EXT_BYTES`].
pub fn walk(first: u8, payload: &[u8]) -> Result<Chain, Error> {
    let mut protocol = first;
    let mut at = 0usize;
    let mut headers = 0u8;
    let mut fragment = None;
    loop {
        let len = match protocol {
            next_header::HOP_BY_HOP
            | next_header::ROUTING
            | next_header::DEST_OPTS
            | next_header::MOBILITY
            | next_header::HIP
            | next_header::SHIM6 => {
                if protocol == next_header::HOP_BY_HOP && headers != 0 {
                    return Err(Error::Ipv6HopByHopNotFirst);
                }
                (usize::from(u8_at(payload, at + 1)) + 1) * 8
            }
            next_header::AH => (usize::from(u8_at(payload, at + 1)) + 2) * 4,
            next_header::FRAGMENT => 8,
            _ => {
                return Ok(Chain {
                    protocol,
                    l4_offset: at,
                    headers,
                    fragment,
                });
            }
        };
        if usize::from(headers) >= MAX_EXT_HEADERS || at + len > MAX_EXT_BYTES {
            return Err(Error::Ipv6ExtChainTooLong {
                headers: usize::from(headers) + 1,
                bytes: at + len,
            });
        }
        if at + len > payload.len() {
            return Err(Error::Truncated {
                header: Header::Ipv6Ext,
                needed_bytes: at + len,
                len_bytes: payload.len(),
            });
        }
        let next = u8_at(payload, at);
        if protocol == next_header::FRAGMENT {
            let field = u16_at(payload, at + 2);
            let info = FragmentInfo {
                offset_bytes: field & 0xfff8,
                more: field & 1 != 0,
                ident: u32_at(payload, at + 4),
            };
            fragment = Some(info);
            if info.offset_bytes != 0 {
                // Not the first fragment: what follows is data.
                return Ok(Chain {
                    protocol: next,
                    l4_offset: at + len,
                    headers: headers + 1,
                    fragment,
                });
            }
        }
        headers += 1;
        at += len;
        protocol = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn packet(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN + payload.len()];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_version_tc_flow(0xb8, 0x12345);
        p.set_payload_len(payload.len() as u16);
        p.set_next_header(next);
        p.set_hop_limit(64);
        p.set_src_addr("2001:db8::1".parse().unwrap());
        p.set_dst_addr("2001:db8:1::10".parse().unwrap());
        b[HEADER_LEN..].copy_from_slice(payload);
        b
    }

    #[test]
    fn fields_read_back() {
        let b = packet(next_header::TCP, &[0u8; 20]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xb8);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 20);
        assert_eq!(p.next_header(), next_header::TCP);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "2001:db8:1::10".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload().len(), 20);
    }

    #[test]
    fn short_or_overlong_payloads_are_refused_and_padding_is_not_payload() {
        assert!(matches!(
            Packet::new_checked(&[0u8; 39][..]),
            Err(Error::Truncated { .. })
        ));
        let mut b = packet(next_header::UDP, &[0u8; 8]);
        b[5] = 9; // payload length 9 > 8 bytes present
        assert!(matches!(
            Packet::new_checked(&b[..]),
            Err(Error::BadLength { .. })
        ));
        let mut padded = packet(next_header::UDP, &[0u8; 8]);
        padded.extend_from_slice(&[0xee; 10]);
        assert_eq!(Packet::new_checked(&padded[..]).unwrap().payload().len(), 8);
    }

    #[test]
    fn the_walk_reaches_the_upper_layer_through_every_extension_kind() {
        // Hop-by-Hop (8), Destination Options (16), Routing (8), AH (12:
        // length 1 → 12 bytes), then TCP.
        let mut chain = Vec::new();
        chain.extend_from_slice(&[next_header::DEST_OPTS, 0, 1, 4, 0, 0, 0, 0]);
        chain.extend_from_slice(&[next_header::ROUTING, 1]);
        chain.extend_from_slice(&[1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        chain.extend_from_slice(&[next_header::AH, 0, 0, 0, 0, 0, 0, 0]);
        chain.extend_from_slice(&[next_header::TCP, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        chain.extend_from_slice(&[0u8; 20]);
        let c = walk(next_header::HOP_BY_HOP, &chain).unwrap();
        assert_eq!(c.protocol, next_header::TCP);
        assert_eq!(c.l4_offset, 8 + 16 + 8 + 12);
        assert_eq!(c.headers, 4);
        assert_eq!(c.fragment, None);
    }

    #[test]
    fn fragments_are_reported_and_later_fragments_have_no_upper_layer_header() {
        let first = [
            next_header::UDP,
            0,
            0x00,
            0x01,
            0,
            0,
            0x12,
            0x34,
            0,
            0,
            0,
            0,
        ];
        let c = walk(next_header::FRAGMENT, &first).unwrap();
        assert_eq!(c.protocol, next_header::UDP);
        assert_eq!(c.l4_offset, 8);
        assert_eq!(
            c.fragment,
            Some(FragmentInfo {
                offset_bytes: 0,
                more: true,
                ident: 0x1234
            })
        );
        let later = [
            next_header::UDP,
            0,
            0x05,
            0x90,
            0,
            0,
            0x12,
            0x34,
            1,
            2,
            3,
            4,
        ];
        let c = walk(next_header::FRAGMENT, &later).unwrap();
        assert_eq!(c.fragment.unwrap().offset_bytes, 0x590);
        assert!(!c.fragment.unwrap().more);
    }

    #[test]
    fn bad_chains_are_errors() {
        // Hop-by-Hop after another extension header.
        let chain = [
            next_header::HOP_BY_HOP,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            6,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        ];
        assert_eq!(
            walk(next_header::DEST_OPTS, &chain),
            Err(Error::Ipv6HopByHopNotFirst)
        );
        // Nine Destination Options headers.
        let mut long = Vec::new();
        for _ in 0..9 {
            long.extend_from_slice(&[next_header::DEST_OPTS, 0, 1, 4, 0, 0, 0, 0]);
        }
        assert!(matches!(
            walk(next_header::DEST_OPTS, &long),
            Err(Error::Ipv6ExtChainTooLong { headers: 9, .. })
        ));
        // One header claiming 2,048 bytes.
        assert!(matches!(
            walk(next_header::DEST_OPTS, &[6, 255, 0, 0, 0, 0, 0, 0]),
            Err(Error::Ipv6ExtChainTooLong { .. })
        ));
        // Truncated.
        assert!(matches!(
            walk(next_header::ROUTING, &[6, 1, 0, 0, 0, 0, 0, 0]),
            Err(Error::Truncated {
                header: Header::Ipv6Ext,
                ..
            })
        ));
        assert!(matches!(
            walk(next_header::HOP_BY_HOP, &[]),
            Err(Error::Truncated { .. })
        ));
    }

    proptest! {
        /// Any bytes: the walk never panics, and an upper layer it finds
        /// starts inside the payload and within the bounds.
        #[test]
        fn the_walk_is_total_and_bounded(first in any::<u8>(), payload in proptest::collection::vec(any::<u8>(), 0..700)) {
            if let Ok(c) = walk(first, &payload) {
                prop_assert!(c.l4_offset <= payload.len());
                prop_assert!(c.l4_offset <= MAX_EXT_BYTES);
                prop_assert!(usize::from(c.headers) <= MAX_EXT_HEADERS);
            }
        }

        /// Any buffer: views never panic.
        #[test]
        fn views_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..100)) {
            let p = Packet::new_unchecked(&buf[..]);
            let _ = (p.version(), p.traffic_class(), p.flow_label(), p.payload_len(),
                     p.next_header(), p.hop_limit(), p.src_addr(), p.dst_addr(), p.payload().len());
            if let Ok(p) = Packet::new_checked(&buf[..]) {
                prop_assert_eq!(p.payload().len(), usize::from(p.payload_len()));
            }
        }
    }
}
