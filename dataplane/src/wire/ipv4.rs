//! IPv4 headers (RFC 791).
//!
//! Layout: version+IHL (0), DSCP/ECN (1), total length (2..4),
//! identification (4..6), flags+fragment offset (6..8; 0x4000 DF, 0x2000 MF,
//! low 13 bits the offset in 8-byte units), TTL (8), protocol (9), header
//! checksum (10..12), source (12..16), destination (16..20), options up to
//! IHL×4 bytes.
//!
//! `new_checked` guarantees `20 <= header_len <= total_len <= buffer.len()`;
//! the buffer may be longer than the packet (Ethernet padding): use
//! [`Packet::payload`] for the L4 bytes, never `buffer[header_len..]`.

use super::checksum;
use super::field::{ipv4_at, set_bytes, set_u8, set_u16, u8_at, u16_at};
use super::{Error, Header, check_min};
use std::net::Ipv4Addr;

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;
/// Largest header (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;

/// IP protocol numbers (IANA).
pub mod protocol {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
}

/// Don't Fragment.
pub const FLAG_DF: u16 = 0x4000;
/// More Fragments.
pub const FLAG_MF: u16 = 0x2000;
/// Fragment offset bits (8-byte units).
pub const FRAG_OFFSET_MASK: u16 = 0x1fff;

mod off {
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const TOTAL_LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

/// A view of an IPv4 packet.
#[derive(Clone, Copy, Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// A view whose header (with options) and total length fit the buffer.
    /// The version field is not checked.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Packet { buffer };
        let len = p.buffer.as_ref().len();
        check_min(Header::Ipv4, len, HEADER_LEN)?;
        let hlen = p.header_len();
        if hlen < HEADER_LEN || hlen > len {
            return Err(Error::BadLength {
                header: Header::Ipv4,
                field_bytes: hlen,
                min_bytes: HEADER_LEN,
                max_bytes: len.min(MAX_HEADER_LEN),
            });
        }
        let total = usize::from(p.total_len());
        if total < hlen || total > len {
            return Err(Error::BadLength {
                header: Header::Ipv4,
                field_bytes: total,
                min_bytes: hlen,
                max_bytes: len,
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
        u8_at(self.buffer.as_ref(), off::VER_IHL) >> 4
    }

    /// IHL field: header length in 32-bit words.
    #[inline]
    pub fn ihl_words(&self) -> u8 {
        u8_at(self.buffer.as_ref(), off::VER_IHL) & 0x0f
    }

    /// Header length in bytes (IHL × 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl_words()) * 4
    }

    /// DSCP and ECN byte.
    #[inline]
    pub fn tos(&self) -> u8 {
        u8_at(self.buffer.as_ref(), off::TOS)
    }

    /// Total length of the packet in bytes, header included.
    #[inline]
    pub fn total_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::TOTAL_LEN)
    }

    #[inline]
    pub fn ident(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::IDENT)
    }

    #[inline]
    pub fn dont_frag(&self) -> bool {
        u16_at(self.buffer.as_ref(), off::FLAGS_FRAG) & FLAG_DF != 0
    }

    #[inline]
    pub fn more_frags(&self) -> bool {
        u16_at(self.buffer.as_ref(), off::FLAGS_FRAG) & FLAG_MF != 0
    }

    /// Fragment offset in bytes (the field × 8).
    #[inline]
    pub fn frag_offset_bytes(&self) -> u16 {
        (u16_at(self.buffer.as_ref(), off::FLAGS_FRAG) & FRAG_OFFSET_MASK) * 8
    }

    /// MF set or a non-zero fragment offset.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        u16_at(self.buffer.as_ref(), off::FLAGS_FRAG) & (FLAG_MF | FRAG_OFFSET_MASK) != 0
    }

    #[inline]
    pub fn ttl(&self) -> u8 {
        u8_at(self.buffer.as_ref(), off::TTL)
    }

    #[inline]
    pub fn protocol(&self) -> u8 {
        u8_at(self.buffer.as_ref(), off::PROTOCOL)
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::CHECKSUM)
    }

    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        ipv4_at(self.buffer.as_ref(), off::SRC)
    }

    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        ipv4_at(self.buffer.as_ref(), off::DST)
    }

    /// Whether the header checksum verifies (false if the header does not
    /// fit the buffer).
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        match self.buffer.as_ref().get(..self.header_len()) {
            Some(h) if h.len() >= HEADER_LEN => checksum::sum(h) == 0xffff,
            _ => false,
        }
    }

    /// The L4 bytes: from the end of the header to the total length (empty if
    /// either does not fit the buffer).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let end = usize::from(self.total_len());
        self.buffer
            .as_ref()
            .get(self.header_len()..end)
            .unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Version 4 and the IHL in 32-bit words.
    #[inline]
    pub fn set_version_ihl(&mut self, ihl_words: u8) {
        set_u8(
            self.buffer.as_mut(),
            off::VER_IHL,
            0x40 | (ihl_words & 0x0f),
        );
    }

    /// Raw first byte (version and IHL), for tests that corrupt it.
    #[inline]
    pub fn set_version_ihl_byte(&mut self, value: u8) {
        set_u8(self.buffer.as_mut(), off::VER_IHL, value);
    }

    #[inline]
    pub fn set_tos(&mut self, value: u8) {
        set_u8(self.buffer.as_mut(), off::TOS, value);
    }

    #[inline]
    pub fn set_total_len(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::TOTAL_LEN, value);
    }

    #[inline]
    pub fn set_ident(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::IDENT, value);
    }

    /// Set DF, MF and the fragment offset (in bytes, rounded down to 8).
    #[inline]
    pub fn set_flags_frag(&mut self, dont_frag: bool, more_frags: bool, frag_offset_bytes: u16) {
        let mut v = (frag_offset_bytes / 8) & FRAG_OFFSET_MASK;
        if dont_frag {
            v |= FLAG_DF;
        }
        if more_frags {
            v |= FLAG_MF;
        }
        set_u16(self.buffer.as_mut(), off::FLAGS_FRAG, v);
    }

    #[inline]
    pub fn set_ttl(&mut self, value: u8) {
        set_u8(self.buffer.as_mut(), off::TTL, value);
    }

    #[inline]
    pub fn set_protocol(&mut self, value: u8) {
        set_u8(self.buffer.as_mut(), off::PROTOCOL, value);
    }

    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::CHECKSUM, value);
    }

    #[inline]
    pub fn set_src_addr(&mut self, addr: Ipv4Addr) {
        set_bytes(self.buffer.as_mut(), off::SRC, &addr.octets());
    }

    #[inline]
    pub fn set_dst_addr(&mut self, addr: Ipv4Addr) {
        set_bytes(self.buffer.as_mut(), off::DST, &addr.octets());
    }

    /// Compute and store the header checksum (no-op if the header does not
    /// fit the buffer).
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hlen = self.header_len();
        if hlen < HEADER_LEN {
            return;
        }
        if let Some(h) = self.buffer.as_ref().get(..hlen) {
            let c = checksum::checksum(h);
            self.set_checksum(c);
        }
    }

    /// Rewrite the source address, updating the header checksum
    /// incrementally (RFC 1624). L4 checksums are the caller's job.
    #[inline]
    pub fn set_src_addr_incremental(&mut self, addr: Ipv4Addr) {
        let c = checksum::update_u32(self.checksum(), self.src_addr().into(), addr.into());
        self.set_src_addr(addr);
        self.set_checksum(c);
    }

    /// Rewrite the destination address, updating the header checksum
    /// incrementally (RFC 1624). L4 checksums are the caller's job.
    #[inline]
    pub fn set_dst_addr_incremental(&mut self, addr: Ipv4Addr) {
        let c = checksum::update_u32(self.checksum(), self.dst_addr().into(), addr.into());
        self.set_dst_addr(addr);
        self.set_checksum(c);
    }

    /// Decrement the TTL and update the checksum incrementally; returns the
    /// new TTL, or `None` (and changes nothing) if the TTL is 0 or 1, i.e.
    /// the packet must not be forwarded (RFC 1812 §5.3.1).
    #[inline]
    pub fn decrement_ttl(&mut self) -> Option<u8> {
        let ttl = self.ttl();
        if ttl <= 1 {
            return None;
        }
        let proto = self.protocol();
        let old = u16::from_be_bytes([ttl, proto]);
        let new = u16::from_be_bytes([ttl - 1, proto]);
        let c = checksum::update_u16(self.checksum(), old, new);
        self.set_ttl(ttl - 1);
        self.set_checksum(c);
        Some(ttl - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::build;
    use proptest::prelude::*;

    fn packet() -> Vec<u8> {
        build::ipv4_udp(
            Ipv4Addr::new(192, 0, 2, 1),
            1234,
            Ipv4Addr::new(198, 51, 100, 2),
            53,
            b"hello",
        )
    }

    #[test]
    fn fields_read_back() {
        let b = packet();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(usize::from(p.total_len()), b.len());
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.frag_offset_bytes(), 0);
        assert_eq!(p.ttl(), build::DEFAULT_TTL);
        assert_eq!(p.protocol(), protocol::UDP);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(198, 51, 100, 2));
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 8 + 5);
    }

    #[test]
    fn fragment_fields_round_trip() {
        let mut b = packet();
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_flags_frag(false, true, 1480);
        assert!(p.more_frags() && !p.dont_frag() && p.is_fragment());
        assert_eq!(p.frag_offset_bytes(), 1480);
        p.set_flags_frag(false, false, 8);
        assert!(p.is_fragment() && !p.more_frags());
    }

    #[test]
    fn new_checked_refuses_bad_lengths() {
        let b = packet();
        assert!(matches!(
            Packet::new_checked(&b[..19]),
            Err(Error::Truncated {
                header: Header::Ipv4,
                ..
            })
        ));
        let mut short_ihl = b.clone();
        Packet::new_unchecked(&mut short_ihl[..]).set_version_ihl(4);
        assert!(matches!(
            Packet::new_checked(&short_ihl[..]),
            Err(Error::BadLength {
                field_bytes: 16,
                ..
            })
        ));
        let mut long_total = b.clone();
        Packet::new_unchecked(&mut long_total[..]).set_total_len(b.len() as u16 + 1);
        assert!(matches!(
            Packet::new_checked(&long_total[..]),
            Err(Error::BadLength { .. })
        ));
        // Padding after the packet is fine and excluded from the payload.
        let mut padded = b.clone();
        padded.extend_from_slice(&[0; 10]);
        let p = Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(p.payload().len(), 13);
    }

    #[test]
    fn decrement_ttl_stops_at_one() {
        let mut b = packet();
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_ttl(2);
        p.fill_checksum();
        assert_eq!(p.decrement_ttl(), Some(1));
        assert!(p.verify_checksum());
        assert_eq!(p.decrement_ttl(), None);
        assert_eq!(p.ttl(), 1);
    }

    proptest! {
        /// Incremental updates of addresses and TTL equal a full recompute.
        #[test]
        fn incremental_equals_recompute(
            src in any::<u32>(), dst in any::<u32>(), ttl in 2u8..=255,
            ident in any::<u16>(), new_src in any::<u32>(), new_dst in any::<u32>(),
        ) {
            let mut b = build::ipv4_udp(src.into(), 1, dst.into(), 2, &[]);
            let mut p = Packet::new_unchecked(&mut b[..]);
            p.set_ttl(ttl);
            p.set_ident(ident);
            p.fill_checksum();
            p.set_src_addr_incremental(new_src.into());
            p.set_dst_addr_incremental(new_dst.into());
            p.decrement_ttl();
            let incremental = p.checksum();
            prop_assert!(p.verify_checksum());
            p.fill_checksum();
            prop_assert_eq!(incremental, p.checksum());
        }

        #[test]
        fn getters_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let p = Packet::new_unchecked(&bytes[..]);
            let _ = (p.version(), p.header_len(), p.total_len(), p.ttl(), p.src_addr(),
                     p.dst_addr(), p.verify_checksum(), p.payload().len(), p.is_fragment());
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                prop_assert!(p.header_len() >= 20);
                prop_assert!(usize::from(p.total_len()) <= bytes.len());
            }
        }
    }
}
