//! ICMPv6 messages (RFC 4443): the header every message shares, echo, and
//! the errors the gateway reads (to translate them back to a flow's
//! client) and writes (Packet Too Big, Time Exceeded). Neighbour Discovery
//! messages are ICMPv6 too; their bodies are in [`super::ndp`].
//!
//! Layout: type (0), code (1), checksum (2..4) over the IPv6 pseudo-header
//! and the whole message (RFC 4443 §2.3, [`super::checksum::verify_l4_v6`]),
//! then 4 type-specific bytes (echo: identifier 4..6, sequence 6..8; Packet
//! Too Big: the MTU 4..8; Parameter Problem: the pointer 4..8) and the body
//! (an error's body is as much of the invoking packet as fits in the
//! minimum MTU, RFC 4443 §2.4(c)).

use super::checksum;
use super::field::{set_u8, set_u16, set_u32, u8_at, u16_at, u32_at};
use super::{Error, Header, check_min};
use std::net::Ipv6Addr;

/// Length of the header (type, code, checksum and the 4 type-specific
/// bytes).
pub const HEADER_LEN: usize = 8;

/// Message types (RFC 4443 §2.1, RFC 4861 §4).
pub mod msg_type {
    pub const DEST_UNREACHABLE: u8 = 1;
    pub const PACKET_TOO_BIG: u8 = 2;
    pub const TIME_EXCEEDED: u8 = 3;
    pub const PARAMETER_PROBLEM: u8 = 4;
    pub const ECHO_REQUEST: u8 = 128;
    pub const ECHO_REPLY: u8 = 129;
    pub const ROUTER_SOLICIT: u8 = 133;
    pub const ROUTER_ADVERT: u8 = 134;
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    pub const NEIGHBOR_ADVERT: u8 = 136;
    pub const REDIRECT: u8 = 137;
}

/// Whether `msg_type` is an error message (RFC 4443 §2.1: types 0..=127),
/// which must never be answered with another error (§2.4(e)).
#[inline]
pub fn is_error(msg_type: u8) -> bool {
    msg_type < 128
}

mod off {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const ECHO_IDENT: usize = 4;
    pub const ECHO_SEQ: usize = 6;
    pub const MTU: usize = 4;
}

/// A view of an ICMPv6 message (header + body, no Ethernet padding).
#[derive(Clone, Copy, Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// A view of at least the 8-byte header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        check_min(Header::Icmpv6, buffer.as_ref().len(), HEADER_LEN)?;
        Ok(Packet { buffer })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn msg_type(&self) -> u8 {
        u8_at(self.buffer.as_ref(), off::TYPE)
    }

    #[inline]
    pub fn msg_code(&self) -> u8 {
        u8_at(self.buffer.as_ref(), off::CODE)
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::CHECKSUM)
    }

    #[inline]
    pub fn echo_ident(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::ECHO_IDENT)
    }

    #[inline]
    pub fn echo_seq(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::ECHO_SEQ)
    }

    /// The MTU of a Packet Too Big (RFC 4443 §3.2).
    #[inline]
    pub fn mtu(&self) -> u32 {
        u32_at(self.buffer.as_ref(), off::MTU)
    }

    /// The body after the 8-byte header: echo data, or an error's invoking
    /// packet.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(HEADER_LEN..).unwrap_or(&[])
    }

    /// Whether the checksum over the pseudo-header of `src`/`dst` and the
    /// whole message verifies.
    #[inline]
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        b.len() >= HEADER_LEN
            && checksum::verify_l4_v6(src, dst, super::ipv6::next_header::ICMPV6, b)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    pub fn set_msg_type(&mut self, value: u8) {
        set_u8(self.buffer.as_mut(), off::TYPE, value);
    }

    #[inline]
    pub fn set_msg_code(&mut self, value: u8) {
        set_u8(self.buffer.as_mut(), off::CODE, value);
    }

    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::CHECKSUM, value);
    }

    #[inline]
    pub fn set_echo_ident(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::ECHO_IDENT, value);
    }

    #[inline]
    pub fn set_echo_seq(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::ECHO_SEQ, value);
    }

    #[inline]
    pub fn set_mtu(&mut self, value: u32) {
        set_u32(self.buffer.as_mut(), off::MTU, value);
    }

    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        self.buffer
            .as_mut()
            .get_mut(HEADER_LEN..)
            .unwrap_or(&mut [])
    }

    /// Compute and store the checksum for a message from `src` to `dst`.
    #[inline]
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum_v6(
            src,
            dst,
            super::ipv6::next_header::ICMPV6,
            self.buffer.as_ref(),
        );
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SRC: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    const DST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10);

    #[test]
    fn an_echo_request_fills_and_verifies() {
        let mut b = [0u8; 16];
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_msg_type(msg_type::ECHO_REQUEST);
        p.set_echo_ident(0x1234);
        p.set_echo_seq(7);
        p.payload_mut().copy_from_slice(b"portico!");
        p.fill_checksum(SRC, DST);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum(SRC, DST));
        assert!(!p.verify_checksum(DST, DST), "the pseudo-header counts");
        assert_eq!((p.echo_ident(), p.echo_seq()), (0x1234, 7));
        assert_eq!(p.payload(), b"portico!");
        assert!(!is_error(p.msg_type()));
    }

    #[test]
    fn a_packet_too_big_carries_its_mtu() {
        let mut b = [0u8; 8];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_msg_type(msg_type::PACKET_TOO_BIG);
        p.set_mtu(1400);
        assert_eq!(Packet::new_unchecked(&b[..]).mtu(), 1400);
        assert!(is_error(msg_type::PACKET_TOO_BIG));
        assert!(matches!(
            Packet::new_checked(&b[..7]),
            Err(Error::Truncated { .. })
        ));
    }

    proptest! {
        #[test]
        fn views_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..40)) {
            let p = Packet::new_unchecked(&buf[..]);
            let _ = (p.msg_type(), p.msg_code(), p.checksum(), p.echo_ident(), p.echo_seq(),
                     p.mtu(), p.payload().len(), p.verify_checksum(SRC, DST));
        }
    }
}
