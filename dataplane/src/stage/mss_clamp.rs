//! MSS clamping per egress port (`mss_clamp` of a port): a TCP SYN or
//! SYN-ACK leaving a port with a clamp announces at most that maximum
//! segment size (RFC 9293 §3.7.1, RFC 6691), so that the two ends never
//! send segments the path behind the port cannot carry, even where ICMP
//! "fragmentation needed" (RFC 1191) is filtered on the way: the path-MTU
//! black hole of issue 15. What Linux's `TCPMSS` target (`xt_TCPMSS.c`,
//! `--set-mss` / `--clamp-mss-to-pmtu`) does in a `FORWARD -o port` rule:
//!
//! * an MSS option above the clamp is lowered to it, never raised;
//! * a SYN without an MSS option, header only, gets one of
//!   `min(clamp, 536)` appended (RFC 9293 §3.7.1: without the option the
//!   peer assumes 536, so this changes what the peer sends only when the
//!   clamp is below 536), growing the frame by 4 bytes when the driver can
//!   ([`Frame::extend`]); a SYN carrying data or a full options area is left
//!   alone, as Linux leaves it;
//! * the TCP checksum is updated incrementally (RFC 1624 eq. 3; a 16-bit
//!   field at an odd offset contributes its bytes swapped), and so is the
//!   IPv4 header checksum when the packet grows.
//!
//! Runs in the NAT stage on translated packets (the forwarding path's only
//! exit), and the SYN proxy's own SYN-ACK caps its MSS the same way
//! (`stage::synproxy`). Only packets with SYN set and RST clear are looked
//! at: established traffic pays one flag test. Nothing here allocates.

use crate::driver::Frame;
use crate::packet::PacketMeta;
use crate::wire::tcp::{self, Options, off as field, option};
use crate::wire::{checksum, ipv4};

/// The MSS a host assumes of a peer whose SYN has no MSS option (RFC 9293
/// §3.7.1, IPv4).
pub const DEFAULT_MSS: u16 = 536;

/// What [`clamp`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clamped {
    /// The MSS was within the clamp, or the segment could not be changed.
    No,
    /// The MSS option was lowered to the clamp.
    Lowered,
    /// An MSS option of `min(clamp, 536)` was appended.
    Added,
}

/// Offset of the IPv4 total length field.
const IP_TOTAL_LEN: usize = 2;
const IP_CHECKSUM: usize = 10;

/// Clamp the MSS of the TCP SYN or SYN-ACK at `meta`'s offsets to `mss`
/// (the caller checked the SYN flag).
pub fn clamp<F: Frame>(frame: &mut F, meta: &mut PacketMeta, mss: u16) -> Clamped {
    let (l3, l4, end) = (
        usize::from(meta.l3_offset),
        usize::from(meta.l4_offset),
        usize::from(meta.l3_end),
    );
    let Some(seg) = frame.data_mut().get_mut(l4..end) else {
        return Clamped::No;
    };
    let Ok(p) = tcp::Packet::new_checked(&seg[..]) else {
        return Clamped::No;
    };
    let header_len = p.header_len();
    let found = Options::new(&seg[tcp::HEADER_LEN..header_len])
        .find(|&(_, kind, body)| kind == option::MSS && body.len() == 2)
        .map(|(at, _, body)| {
            (
                tcp::HEADER_LEN + at + 2,
                u16::from_be_bytes([body[0], body[1]]),
            )
        });
    match found {
        Some((_, old)) if old <= mss => Clamped::No,
        Some((at, old)) => {
            let csum = u16::from_be_bytes([seg[field::CHECKSUM], seg[field::CHECKSUM + 1]]);
            // A word at an odd offset adds its bytes to two words of the
            // sum: the same as adding the byte-swapped value.
            let csum = if at % 2 == 0 {
                checksum::update_u16(csum, old, mss)
            } else {
                checksum::update_u16(csum, old.swap_bytes(), mss.swap_bytes())
            };
            seg[at..at + 2].copy_from_slice(&mss.to_be_bytes());
            seg[field::CHECKSUM..field::CHECKSUM + 2].copy_from_slice(&csum.to_be_bytes());
            Clamped::Lowered
        }
        None => add(frame, meta, (l3, l4, end), header_len, mss.min(DEFAULT_MSS)),
    }
}

/// Append an MSS option of `mss` to a header-only segment (Linux's
/// `tcpmss_mangle_packet` for a SYN without one).
fn add<F: Frame>(
    frame: &mut F,
    meta: &mut PacketMeta,
    (l3, l4, end): (usize, usize, usize),
    header_len: usize,
    mss: u16,
) -> Clamped {
    if l4 + header_len != end || header_len + 4 > tcp::MAX_HEADER_LEN || !frame.extend(end + 4) {
        return Clamped::No;
    }
    let Some(buf) = frame.data_mut().get_mut(l3..end + 4) else {
        return Clamped::No;
    };
    let (ip, seg) = buf.split_at_mut(l4 - l3);
    let Some(h) = ip.first_chunk_mut::<{ ipv4::HEADER_LEN }>() else {
        return Clamped::No;
    };
    let seg_len = (end - l4) as u16;
    let [hi, lo] = mss.to_be_bytes();
    seg[header_len..header_len + 4].copy_from_slice(&[option::MSS, 4, hi, lo]);
    let old_word = u16::from_be_bytes([seg[field::DATA_OFF], seg[field::FLAGS]]);
    seg[field::DATA_OFF] = (seg[field::DATA_OFF] & 0x0f) | (((header_len + 4) / 4) as u8) << 4;
    let new_word = u16::from_be_bytes([seg[field::DATA_OFF], seg[field::FLAGS]]);
    let mut csum = u16::from_be_bytes([seg[field::CHECKSUM], seg[field::CHECKSUM + 1]]);
    csum = checksum::update_u16(csum, old_word, new_word);
    // The new words (absent before: zero in the sum) and the
    // pseudo-header's TCP length.
    csum = checksum::update_u16(csum, 0, u16::from_be_bytes([option::MSS, 4]));
    csum = checksum::update_u16(csum, 0, mss);
    csum = checksum::update_u16(csum, seg_len, seg_len + 4);
    seg[field::CHECKSUM..field::CHECKSUM + 2].copy_from_slice(&csum.to_be_bytes());
    let total = u16::from_be_bytes([h[IP_TOTAL_LEN], h[IP_TOTAL_LEN + 1]]);
    let ip_csum = u16::from_be_bytes([h[IP_CHECKSUM], h[IP_CHECKSUM + 1]]);
    let ip_csum = checksum::update_u16(ip_csum, total, total + 4);
    h[IP_TOTAL_LEN..IP_TOTAL_LEN + 2].copy_from_slice(&(total + 4).to_be_bytes());
    h[IP_CHECKSUM..IP_CHECKSUM + 2].copy_from_slice(&ip_csum.to_be_bytes());
    meta.l3_end += 4;
    Clamped::Added
}
