//! ICMP for IPv4 (RFC 792, RFC 1191 for "fragmentation needed").
//!
//! Layout: type (0), code (1), checksum (2..4, over the whole ICMP message),
//! then 4 type-specific bytes: identifier (4..6) and sequence number (6..8)
//! for echo; unused / next-hop MTU (6..8, RFC 1191) / pointer for errors.
//! Error messages carry the offending IPv4 header plus at least 8 bytes of
//! its payload from [`ERROR_INNER_OFFSET`] on (RFC 792; RFC 1812 §4.3.2.3
//! lets routers send more). The inner packet is usually truncated, so its L4
//! checksum cannot be verified.

use super::checksum;
use super::field::{set_u8, set_u16, u8_at, u16_at};
use super::{Error, Header, check_min};

/// Length of the ICMP header (type, code, checksum, 4 type-specific bytes).
pub const HEADER_LEN: usize = 8;
/// Offset of the embedded IPv4 packet in an error message.
pub const ERROR_INNER_OFFSET: usize = 8;
/// Bytes of inner payload an error must carry after the inner IPv4 header.
pub const ERROR_INNER_L4_BYTES: usize = 8;

/// ICMP message types used by the gateway.
pub mod kind {
    pub const ECHO_REPLY: u8 = 0;
    pub const DEST_UNREACHABLE: u8 = 3;
    pub const ECHO_REQUEST: u8 = 8;
    pub const TIME_EXCEEDED: u8 = 11;
    pub const PARAMETER_PROBLEM: u8 = 12;
}

/// Codes of destination unreachable.
pub mod unreachable {
    pub const NET: u8 = 0;
    pub const HOST: u8 = 1;
    pub const PROTOCOL: u8 = 2;
    pub const PORT: u8 = 3;
    /// Fragmentation needed and DF set (RFC 1191: MTU in bytes 6..8).
    pub const FRAG_NEEDED: u8 = 4;
}

/// Echo request or reply.
#[inline(always)]
pub const fn is_echo(icmp_type: u8) -> bool {
    matches!(icmp_type, kind::ECHO_REQUEST | kind::ECHO_REPLY)
}

/// An error message that embeds the offending packet (destination
/// unreachable, time exceeded, parameter problem).
#[inline(always)]
pub const fn is_error(icmp_type: u8) -> bool {
    matches!(
        icmp_type,
        kind::DEST_UNREACHABLE | kind::TIME_EXCEEDED | kind::PARAMETER_PROBLEM
    )
}

mod off {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const ECHO_IDENT: usize = 4;
    pub const ECHO_SEQ: usize = 6;
    pub const NEXT_HOP_MTU: usize = 6;
}

/// A view of an ICMP message (header + body, no Ethernet padding).
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
        check_min(Header::Icmp, buffer.as_ref().len(), HEADER_LEN)?;
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

    /// Echo identifier (echo request/reply only).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::ECHO_IDENT)
    }

    /// Echo sequence number (echo request/reply only).
    #[inline]
    pub fn echo_seq(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::ECHO_SEQ)
    }

    /// Next-hop MTU in bytes of a "fragmentation needed" error (RFC 1191).
    #[inline]
    pub fn next_hop_mtu(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::NEXT_HOP_MTU)
    }

    /// Body after the 8-byte header: echo data, or the embedded packet of an
    /// error (empty if the header does not fit).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(HEADER_LEN..).unwrap_or(&[])
    }

    /// Whether the checksum over the whole message verifies.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        let b = self.buffer.as_ref();
        b.len() >= HEADER_LEN && checksum::sum(b) == 0xffff
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
    pub fn set_next_hop_mtu(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::NEXT_HOP_MTU, value);
    }

    /// Mutable body after the header (the embedded packet of an error).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        self.buffer
            .as_mut()
            .get_mut(HEADER_LEN..)
            .unwrap_or(&mut [])
    }

    /// Compute and store the checksum over the whole message.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }

    /// Rewrite the echo identifier, updating the checksum incrementally
    /// (NAT of ICMP echo uses the identifier as the port).
    #[inline]
    pub fn set_echo_ident_incremental(&mut self, value: u16) {
        let c = checksum::update_u16(self.checksum(), self.echo_ident(), value);
        self.set_echo_ident(value);
        self.set_checksum(c);
    }

    /// Turn an echo request into its reply in place (type 0, checksum
    /// updated incrementally); the IPv4 addresses are the caller's job.
    #[inline]
    pub fn make_echo_reply(&mut self) {
        let old = u16::from_be_bytes([self.msg_type(), self.msg_code()]);
        let new = u16::from_be_bytes([kind::ECHO_REPLY, self.msg_code()]);
        let c = checksum::update_u16(self.checksum(), old, new);
        self.set_msg_type(kind::ECHO_REPLY);
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::build;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    #[test]
    fn echo_fields_and_reply_in_place() {
        let ip = build::ipv4_icmp_echo(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            kind::ECHO_REQUEST,
            0x1234,
            7,
            b"ping",
        );
        let mut msg = ip[20..].to_vec();
        let mut p = Packet::new_checked(&mut msg[..]).unwrap();
        assert_eq!((p.msg_type(), p.msg_code()), (kind::ECHO_REQUEST, 0));
        assert_eq!((p.echo_ident(), p.echo_seq()), (0x1234, 7));
        assert_eq!(p.payload(), b"ping");
        assert!(p.verify_checksum());
        p.make_echo_reply();
        assert_eq!(p.msg_type(), kind::ECHO_REPLY);
        let incremental = p.checksum();
        assert!(p.verify_checksum());
        p.fill_checksum();
        assert_eq!(p.checksum(), incremental);
        assert!(Packet::new_checked(&msg[..7]).is_err());
    }

    #[test]
    fn error_embeds_inner_packet_at_offset_8() {
        let inner = build::ipv4_udp(
            Ipv4Addr::new(10, 0, 0, 2),
            53,
            Ipv4Addr::new(10, 0, 0, 1),
            999,
            b"x",
        );
        let ip = build::ipv4_icmp_error(
            Ipv4Addr::new(10, 0, 0, 254),
            Ipv4Addr::new(10, 0, 0, 2),
            kind::DEST_UNREACHABLE,
            unreachable::FRAG_NEEDED,
            &inner,
        );
        let msg = &ip[20..];
        let p = Packet::new_checked(msg).unwrap();
        assert!(is_error(p.msg_type()) && !is_echo(p.msg_type()));
        assert_eq!(p.msg_code(), unreachable::FRAG_NEEDED);
        assert_eq!(&msg[ERROR_INNER_OFFSET..], &inner[..]);
        assert_eq!(p.payload(), &inner[..]);
        assert!(p.verify_checksum());
    }

    proptest! {
        #[test]
        fn ident_rewrite_equals_recompute(ident in any::<u16>(), new in any::<u16>(), seq in any::<u16>(),
                                          data in proptest::collection::vec(any::<u8>(), 0..40)) {
            let ip = build::ipv4_icmp_echo(Ipv4Addr::new(1, 2, 3, 4), Ipv4Addr::new(5, 6, 7, 8),
                                           kind::ECHO_REQUEST, ident, seq, &data);
            let mut msg = ip[20..].to_vec();
            let mut p = Packet::new_checked(&mut msg[..]).unwrap();
            p.set_echo_ident_incremental(new);
            let incremental = p.checksum();
            prop_assert!(p.verify_checksum());
            p.fill_checksum();
            prop_assert_eq!(incremental, p.checksum());
        }
    }
}
