//! TCP headers (RFC 9293).
//!
//! Layout: source port (0..2), destination port (2..4), sequence number
//! (4..8), acknowledgment number (8..12), data offset (high nibble of 12, in
//! 32-bit words), flags (13: CWR ECE URG ACK PSH RST SYN FIN, see
//! [`flags`](mod@flags)), window (14..16), checksum (16..18), urgent
//! pointer (18..20), options up to data offset × 4.
//!
//! The view's buffer is the whole segment (header + payload, no Ethernet
//! padding): the checksum covers exactly the buffer plus the IPv4
//! pseudo-header.

use super::checksum;
use super::field::{set_u8, set_u16, set_u32, u8_at, u16_at, u32_at};
use super::ipv4::protocol;
use super::{Error, Header, check_min};
use std::net::Ipv4Addr;

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;
/// Length of a header with the most options (data offset 15 words).
pub const MAX_HEADER_LEN: usize = 60;

/// TCP flag bits as they sit in the flags byte of the header (and in
/// `PacketMeta::tcp_flags`).
pub mod flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
}

/// Offsets of the header's fields.
pub mod off {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub const ACK: usize = 8;
    pub const DATA_OFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
}

/// Bit `i` set: flags byte value `i` (with PSH, ECE and CWR cleared) is a
/// combination some TCP stack sends. Mirrors Linux's `tcp_valid_flags` table
/// (net/netfilter/nf_conntrack_proto_tcp.c): SYN, SYN|URG, SYN|ACK, RST,
/// RST|ACK, FIN|ACK, FIN|ACK|URG, ACK, ACK|URG.
const VALID_FLAG_COMBOS: u64 = {
    use flags::*;
    (1 << SYN)
        | (1 << (SYN | URG))
        | (1 << (SYN | ACK))
        | (1 << RST)
        | (1 << (RST | ACK))
        | (1 << (FIN | ACK))
        | (1 << (FIN | ACK | URG))
        | (1 << ACK)
        | (1 << (ACK | URG))
};

/// Whether a flags byte is a combination a real stack sends (rejects no
/// SYN/ACK/RST/FIN at all, SYN+FIN, SYN+RST, FIN without ACK, FIN+RST, ...).
/// PSH, ECE and CWR never make a combination invalid.
#[inline(always)]
pub const fn flags_are_valid(flags: u8) -> bool {
    use flags::*;
    let idx = flags & (FIN | SYN | RST | ACK | URG);
    (VALID_FLAG_COMBOS >> idx) & 1 == 1
}

/// Option kinds of the handshake (RFC 9293 §3.2, RFC 7323 §2, RFC 2018).
pub mod option {
    pub const EOL: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WSCALE: u8 = 3;
    pub const SACK_PERMITTED: u8 = 4;
    /// RFC 2018 §3: SACK blocks (left and right edge, 8 bytes each).
    pub const SACK: u8 = 5;
    /// RFC 7323 §3: TSval, TSecr.
    pub const TIMESTAMP: u8 = 8;
}

/// Handshake options of a SYN or SYN-ACK (`None`: absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SynOptions {
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub sack: bool,
    /// `(TSval, TSecr)`.
    pub ts: Option<(u32, u32)>,
}

impl SynOptions {
    pub const NONE: SynOptions = SynOptions {
        mss: None,
        wscale: None,
        sack: false,
        ts: None,
    };

    /// Parse an options area (the header bytes after the first 20).
    /// Malformed options end the walk; what was read before stays.
    pub fn parse(options: &[u8]) -> SynOptions {
        let mut opts = SynOptions::NONE;
        for (_, kind, body) in Options::new(options) {
            match (kind, body) {
                (option::MSS, &[hi, lo]) => opts.mss = Some(u16::from_be_bytes([hi, lo])),
                (option::WSCALE, &[w]) => opts.wscale = Some(w),
                (option::SACK_PERMITTED, &[]) => opts.sack = true,
                (option::TIMESTAMP, &[a, b, c, d, e, f, g, h]) => {
                    opts.ts = Some((
                        u32::from_be_bytes([a, b, c, d]),
                        u32::from_be_bytes([e, f, g, h]),
                    ));
                }
                _ => {}
            }
        }
        opts
    }
}

/// The options of an options area (RFC 9293 §3.1): `(offset of the kind
/// byte, kind, body)` of each option but NOP, up to EOL. A malformed
/// option (length below 2 or past the area) ends the walk.
#[derive(Clone, Debug)]
pub struct Options<'a> {
    area: &'a [u8],
    at: usize,
}

impl<'a> Options<'a> {
    pub fn new(area: &'a [u8]) -> Self {
        Options { area, at: 0 }
    }
}

impl<'a> Iterator for Options<'a> {
    type Item = (usize, u8, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let at = self.at;
            let kind = *self.area.get(at)?;
            match kind {
                option::EOL => return None,
                option::NOP => {
                    self.at += 1;
                    continue;
                }
                _ => {}
            }
            let len = usize::from(*self.area.get(at + 1)?);
            let body = if len < 2 {
                None
            } else {
                self.area.get(at + 2..at + len)
            };
            let Some(body) = body else {
                self.at = self.area.len();
                return None;
            };
            self.at = at + len;
            return Some((at, kind, body));
        }
    }
}

/// A view of a TCP segment.
#[derive(Clone, Copy, Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// A view whose header, options included, fits the buffer.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Packet { buffer };
        let len = p.buffer.as_ref().len();
        check_min(Header::Tcp, len, HEADER_LEN)?;
        let hlen = p.header_len();
        if hlen < HEADER_LEN || hlen > len {
            return Err(Error::BadLength {
                header: Header::Tcp,
                field_bytes: hlen,
                min_bytes: HEADER_LEN,
                max_bytes: len.min(60),
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

    #[inline]
    pub fn seq_number(&self) -> u32 {
        u32_at(self.buffer.as_ref(), off::SEQ)
    }

    #[inline]
    pub fn ack_number(&self) -> u32 {
        u32_at(self.buffer.as_ref(), off::ACK)
    }

    /// Data offset field: header length in 32-bit words.
    #[inline]
    pub fn data_offset_words(&self) -> u8 {
        u8_at(self.buffer.as_ref(), off::DATA_OFF) >> 4
    }

    /// Header length in bytes, options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.data_offset_words()) * 4
    }

    /// The flags byte (see [`flags`](mod@flags)).
    #[inline]
    pub fn flags(&self) -> u8 {
        u8_at(self.buffer.as_ref(), off::FLAGS)
    }

    #[inline]
    pub fn window(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::WINDOW)
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::CHECKSUM)
    }

    #[inline]
    pub fn urgent_pointer(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::URGENT)
    }

    /// Payload after the header (empty if the header does not fit).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(self.header_len()..).unwrap_or(&[])
    }

    /// Whether the checksum over pseudo-header + the whole buffer verifies.
    #[inline]
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        checksum::verify_l4(src, dst, protocol::TCP, self.buffer.as_ref())
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
    pub fn set_seq_number(&mut self, value: u32) {
        set_u32(self.buffer.as_mut(), off::SEQ, value);
    }

    #[inline]
    pub fn set_ack_number(&mut self, value: u32) {
        set_u32(self.buffer.as_mut(), off::ACK, value);
    }

    /// Set the data offset in 32-bit words (reserved bits cleared).
    #[inline]
    pub fn set_data_offset_words(&mut self, words: u8) {
        set_u8(self.buffer.as_mut(), off::DATA_OFF, words << 4);
    }

    #[inline]
    pub fn set_flags(&mut self, value: u8) {
        set_u8(self.buffer.as_mut(), off::FLAGS, value);
    }

    #[inline]
    pub fn set_window(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::WINDOW, value);
    }

    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::CHECKSUM, value);
    }

    #[inline]
    pub fn set_urgent_pointer(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::URGENT, value);
    }

    /// Compute and store the checksum over pseudo-header + the whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum(src, dst, protocol::TCP, self.buffer.as_ref());
        self.set_checksum(c);
    }

    /// Rewrite the source port, updating the checksum incrementally.
    #[inline]
    pub fn set_src_port_incremental(&mut self, port: u16) {
        let c = checksum::update_u16(self.checksum(), self.src_port(), port);
        self.set_src_port(port);
        self.set_checksum(c);
    }

    /// Rewrite the destination port, updating the checksum incrementally.
    #[inline]
    pub fn set_dst_port_incremental(&mut self, port: u16) {
        let c = checksum::update_u16(self.checksum(), self.dst_port(), port);
        self.set_dst_port(port);
        self.set_checksum(c);
    }

    /// Account for a pseudo-header address change (NAT of the IPv4 header
    /// that carries this segment).
    #[inline]
    pub fn update_checksum_for_addr(&mut self, old: Ipv4Addr, new: Ipv4Addr) {
        let c = checksum::update_u32(self.checksum(), old.into(), new.into());
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::flags::*;
    use super::*;
    use crate::wire::{build, ipv4};
    use proptest::prelude::*;

    #[test]
    fn flag_table_matches_linux() {
        for ok in [
            SYN,
            SYN | URG,
            SYN | ACK,
            RST,
            RST | ACK,
            FIN | ACK,
            FIN | ACK | URG,
            ACK,
            ACK | URG,
        ] {
            assert!(flags_are_valid(ok), "{ok:#x}");
            assert!(
                flags_are_valid(ok | PSH | ECE | CWR),
                "{ok:#x} + PSH/ECE/CWR"
            );
        }
        for bad in [
            0,
            PSH,
            SYN | FIN,
            SYN | RST,
            FIN,
            FIN | RST,
            FIN | RST | ACK,
            SYN | ACK | URG,
            RST | URG,
            URG,
        ] {
            assert!(!flags_are_valid(bad), "{bad:#x}");
        }
        let valid = (0..=255u8).filter(|&f| flags_are_valid(f)).count();
        // 9 combos × 8 settings of PSH/ECE/CWR.
        assert_eq!(valid, 9 * 8);
    }

    #[test]
    fn fields_read_back() {
        let (s, d) = (Ipv4Addr::new(10, 1, 1, 1), Ipv4Addr::new(10, 2, 2, 2));
        let ip = build::ipv4_tcp(s, 40000, d, 443, SYN | ACK, 7, 9, b"xyz");
        let ipp = ipv4::Packet::new_checked(&ip[..]).unwrap();
        let p = Packet::new_checked(ipp.payload()).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (40000, 443));
        assert_eq!((p.seq_number(), p.ack_number()), (7, 9));
        assert_eq!(p.flags(), SYN | ACK);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.window(), build::DEFAULT_WINDOW);
        assert_eq!(p.payload(), b"xyz");
        assert!(p.verify_checksum(s, d));
        assert!(!p.verify_checksum(s, Ipv4Addr::new(10, 2, 2, 3)));
    }

    #[test]
    fn new_checked_checks_data_offset() {
        let mut seg = [0u8; 24];
        let mut p = Packet::new_unchecked(&mut seg[..]);
        p.set_data_offset_words(4);
        assert!(matches!(
            Packet::new_checked(&seg[..]),
            Err(Error::BadLength {
                field_bytes: 16,
                ..
            })
        ));
        Packet::new_unchecked(&mut seg[..]).set_data_offset_words(7);
        assert!(matches!(
            Packet::new_checked(&seg[..]),
            Err(Error::BadLength {
                field_bytes: 28,
                ..
            })
        ));
        Packet::new_unchecked(&mut seg[..]).set_data_offset_words(6);
        assert!(Packet::new_checked(&seg[..]).is_ok());
        assert!(Packet::new_checked(&seg[..19]).is_err());
    }

    proptest! {
        /// SNAT/DNAT rewrites with incremental updates equal a full recompute.
        #[test]
        fn incremental_nat_equals_recompute(
            src in any::<u32>(), dst in any::<u32>(), sport in any::<u16>(), dport in any::<u16>(),
            new_src in any::<u32>(), new_dst in any::<u32>(), new_sport in any::<u16>(),
            new_dport in any::<u16>(), flags in any::<u8>(), seq in any::<u32>(),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let (src, dst, new_src, new_dst) =
                (Ipv4Addr::from(src), Ipv4Addr::from(dst), Ipv4Addr::from(new_src), Ipv4Addr::from(new_dst));
            let ip = build::ipv4_tcp(src, sport, dst, dport, flags, seq, 0, &payload);
            let mut seg = ip[20..].to_vec();
            let mut p = Packet::new_checked(&mut seg[..]).unwrap();
            prop_assert!(p.verify_checksum(src, dst));
            p.update_checksum_for_addr(src, new_src);
            p.update_checksum_for_addr(dst, new_dst);
            p.set_src_port_incremental(new_sport);
            p.set_dst_port_incremental(new_dport);
            let incremental = p.checksum();
            prop_assert!(p.verify_checksum(new_src, new_dst));
            p.fill_checksum(new_src, new_dst);
            prop_assert_eq!(incremental, p.checksum());
        }
    }
}
