//! UDP headers (RFC 768).
//!
//! Layout: source port (0..2), destination port (2..4), length (4..6, header
//! + payload in bytes), checksum (6..8).
//!
//! Over IPv4 a checksum of 0 means "no checksum" and is accepted unverified;
//! a computed checksum of 0 is therefore sent as `0xffff` (RFC 768), and
//! incremental updates keep 0 as 0 ([`checksum::update_udp_u16`]). The length
//! field, not the buffer, bounds the datagram: `new_checked` guarantees
//! `8 <= length <= buffer.len()`.

use super::checksum;
use super::field::{set_u16, u16_at};
use super::ipv4::protocol;
use super::{Error, Header, check_min};
use std::net::Ipv4Addr;

pub const HEADER_LEN: usize = 8;

mod off {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

/// A view of a UDP datagram.
#[derive(Clone, Copy, Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// A view whose header fits and whose length field is within
    /// `8..=buffer.len()`.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Packet { buffer };
        let len = p.buffer.as_ref().len();
        check_min(Header::Udp, len, HEADER_LEN)?;
        let field = usize::from(p.len());
        if field < HEADER_LEN || field > len {
            return Err(Error::BadLength {
                header: Header::Udp,
                field_bytes: field,
                min_bytes: HEADER_LEN,
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
    pub fn src_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::SRC_PORT)
    }

    #[inline]
    pub fn dst_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::DST_PORT)
    }

    /// Length field: header + payload in bytes.
    #[inline]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::LENGTH)
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::CHECKSUM)
    }

    /// The datagram as the length field bounds it (empty if it does not fit).
    #[inline]
    pub fn datagram(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .get(..usize::from(self.len()))
            .unwrap_or(&[])
    }

    /// Payload after the header, up to the length field.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        self.datagram().get(HEADER_LEN..).unwrap_or(&[])
    }

    /// Whether the checksum verifies; a zero checksum ("none") always does.
    /// False if the length field does not fit the buffer.
    #[inline]
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        match self.buffer.as_ref().get(..usize::from(self.len())) {
            Some(d) if d.len() >= HEADER_LEN => checksum::verify_l4(src, dst, protocol::UDP, d),
            _ => false,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    pub fn set_src_port(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::SRC_PORT, value);
    }

    #[inline]
    pub fn set_dst_port(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::DST_PORT, value);
    }

    #[inline]
    pub fn set_len(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::LENGTH, value);
    }

    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::CHECKSUM, value);
    }

    /// Compute and store the checksum over pseudo-header + the datagram (as
    /// the length field bounds it); a computed 0 is stored as `0xffff`.
    #[inline]
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let end = usize::from(self.len());
        let c = match self.buffer.as_ref().get(..end) {
            Some(d) => checksum::l4_checksum(src, dst, protocol::UDP, d),
            None => return,
        };
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// Rewrite the source port, updating a non-zero checksum incrementally.
    #[inline]
    pub fn set_src_port_incremental(&mut self, port: u16) {
        let c = checksum::update_udp_u16(self.checksum(), self.src_port(), port);
        self.set_src_port(port);
        self.set_checksum(c);
    }

    /// Rewrite the destination port, updating a non-zero checksum
    /// incrementally.
    #[inline]
    pub fn set_dst_port_incremental(&mut self, port: u16) {
        let c = checksum::update_udp_u16(self.checksum(), self.dst_port(), port);
        self.set_dst_port(port);
        self.set_checksum(c);
    }

    /// Account for a pseudo-header address change; a zero checksum stays 0.
    #[inline]
    pub fn update_checksum_for_addr(&mut self, old: Ipv4Addr, new: Ipv4Addr) {
        let c = checksum::update_udp_u32(self.checksum(), old.into(), new.into());
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::build;
    use proptest::prelude::*;

    #[test]
    fn fields_read_back_and_zero_checksum_means_none() {
        let (s, d) = (Ipv4Addr::new(10, 1, 1, 1), Ipv4Addr::new(10, 2, 2, 2));
        let ip = build::ipv4_udp(s, 5353, d, 53, b"query");
        let mut seg = ip[20..].to_vec();
        let mut p = Packet::new_checked(&mut seg[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (5353, 53, 13));
        assert_eq!(p.payload(), b"query");
        assert!(p.verify_checksum(s, d));
        assert!(!p.verify_checksum(d, d));
        p.set_checksum(0);
        assert!(p.verify_checksum(d, d));
        p.update_checksum_for_addr(s, d);
        p.set_src_port_incremental(1);
        assert_eq!(p.checksum(), 0);
    }

    #[test]
    fn computed_zero_is_sent_as_ffff() {
        // Find a payload word that makes the computed checksum 0: the sum
        // without it is S, so a word of !S (= 0xffff - S) brings it to 0xffff.
        let (s, d) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let ip = build::ipv4_udp(s, 1, d, 2, &[0, 0]);
        let mut seg = ip[20..].to_vec();
        seg[6..8].copy_from_slice(&[0, 0]);
        let partial = checksum::add(
            checksum::pseudo_header_sum(s, d, protocol::UDP, seg.len() as u16),
            checksum::sum(&seg),
        );
        seg[8..10].copy_from_slice(&(!partial).to_be_bytes());
        assert_eq!(checksum::l4_checksum(s, d, protocol::UDP, &seg), 0);
        let mut p = Packet::new_checked(&mut seg[..]).unwrap();
        p.fill_checksum(s, d);
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum(s, d));
    }

    #[test]
    fn new_checked_checks_length_field() {
        let ip = build::ipv4_udp(Ipv4Addr::LOCALHOST, 1, Ipv4Addr::LOCALHOST, 2, b"ab");
        let mut seg = ip[20..].to_vec();
        Packet::new_unchecked(&mut seg[..]).set_len(7);
        assert!(matches!(
            Packet::new_checked(&seg[..]),
            Err(Error::BadLength { field_bytes: 7, .. })
        ));
        Packet::new_unchecked(&mut seg[..]).set_len(11);
        assert!(Packet::new_checked(&seg[..]).is_err());
        Packet::new_unchecked(&mut seg[..]).set_len(9);
        let p = Packet::new_checked(&seg[..]).unwrap();
        assert_eq!(p.payload(), b"a");
        assert!(Packet::new_checked(&seg[..7]).is_err());
    }

    proptest! {
        /// NAT rewrites with incremental updates equal a full recompute,
        /// with the 0 ("none") and 0xffff rules.
        #[test]
        fn incremental_nat_equals_recompute(
            src in any::<u32>(), dst in any::<u32>(), sport in any::<u16>(), dport in any::<u16>(),
            new_src in any::<u32>(), new_dst in any::<u32>(), new_sport in any::<u16>(),
            new_dport in any::<u16>(), no_checksum in any::<bool>(),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let (src, dst, new_src, new_dst) =
                (Ipv4Addr::from(src), Ipv4Addr::from(dst), Ipv4Addr::from(new_src), Ipv4Addr::from(new_dst));
            let ip = build::ipv4_udp(src, sport, dst, dport, &payload);
            let mut seg = ip[20..].to_vec();
            let mut p = Packet::new_checked(&mut seg[..]).unwrap();
            prop_assert_ne!(p.checksum(), 0);
            if no_checksum {
                p.set_checksum(0);
            }
            p.update_checksum_for_addr(src, new_src);
            p.update_checksum_for_addr(dst, new_dst);
            p.set_src_port_incremental(new_sport);
            p.set_dst_port_incremental(new_dport);
            let incremental = p.checksum();
            prop_assert!(p.verify_checksum(new_src, new_dst));
            if no_checksum {
                prop_assert_eq!(incremental, 0);
            } else {
                prop_assert_ne!(incremental, 0);
                p.fill_checksum(new_src, new_dst);
                prop_assert_eq!(incremental, p.checksum());
            }
        }

        /// The rule at the edge: a checksum that becomes 0 after an update is
        /// sent as 0xffff, as a full recompute would.
        #[test]
        fn update_to_zero_becomes_ffff(old in any::<u16>(), sum_rest in 1u16..=0xfffe) {
            // Choose the checksum so that replacing `old` by `new` makes the
            // recomputed checksum 0 (new = old + checksum-diff).
            let csum = !checksum::add(sum_rest, old);
            // A stored 0 means "no checksum" and is never updated.
            prop_assume!(csum != 0);
            let new = !sum_rest; // sum_rest + new = 0xffff -> checksum 0
            prop_assert_eq!(checksum::update_u16(csum, old, new), 0);
            prop_assert_eq!(checksum::update_udp_u16(csum, old, new), 0xffff);
        }
    }
}
