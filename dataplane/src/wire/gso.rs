//! Finishing offloads in software, for a frame with an [`Offload`] that
//! goes somewhere that takes none (a handoff ring between workers, the
//! host path's TAP, a test that checks what the wire would carry):
//!
//! * [`complete_checksum`]: what a device does with `NEEDS_CSUM` — the
//!   one's-complement sum (RFC 1071) of `csum_start..end`, whose checksum
//!   field holds the pseudo-header seed, complemented into that field;
//! * [`segment`]: what the kernel's GSO (`tcp_gso_segment`,
//!   `__udp_gso_segment`) does with a super-packet — cut the payload into
//!   `gso_size` pieces, each with a copy of the headers: IPv4 total length,
//!   identification (+1 per segment) and header checksum, or the IPv6
//!   payload length; TCP sequence number (+`gso_size` per segment), FIN
//!   and PSH on the last segment only, CWR on the first only (RFC 9293
//!   §3.1, RFC 3168 §6.1.2), or the UDP length; and a complete L4
//!   checksum per segment.
//!
//! The frame's Ethernet header may carry one 802.1Q tag. Nothing allocates:
//! segments are built in a caller's buffer one at a time.

use super::checksum;
use super::ethernet::{self, ethertype};
use super::vnet::{Gso, Offload};
use super::{ipv4, ipv6, tcp, udp};

/// Why a frame's offload cannot be finished in software.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GsoError {
    #[error("the checksum range or field lies outside the frame")]
    BadChecksumRange,
    #[error("not an IPv4/IPv6 packet whose L4 header starts at csum_start")]
    BadHeaders,
    #[error("a segment does not fit the {0}-byte buffer")]
    BufferTooSmall(usize),
}

/// Complete the L4 checksum of a `NEEDS_CSUM` frame in place (a frame
/// without it is left alone). `frame` ends where the packet ends.
pub fn complete_checksum(frame: &mut [u8], o: &Offload) -> Result<(), GsoError> {
    if !o.needs_csum {
        return Ok(());
    }
    let start = usize::from(o.csum_start);
    let field = start + usize::from(o.csum_offset);
    if field + 2 > frame.len() {
        return Err(GsoError::BadChecksumRange);
    }
    let mut csum = !checksum::sum(&frame[start..]);
    // A UDP checksum of 0 means "none" (RFC 768): send 0xffff instead.
    if csum == 0 && o.csum_offset == 6 {
        csum = 0xffff;
    }
    frame[field..field + 2].copy_from_slice(&csum.to_be_bytes());
    Ok(())
}

/// Where the headers of a super-packet are.
struct Layout {
    l3: usize,
    l4: usize,
    /// End of the L4 header.
    hdr_end: usize,
    /// End of the packet (IP length).
    end: usize,
    v4: bool,
    tcp: bool,
}

fn layout(frame: &[u8], o: &Offload) -> Result<Layout, GsoError> {
    let bad = GsoError::BadHeaders;
    let l3 = match frame.get(12..14) {
        Some(&[0x81, 0x00]) => ethernet::HEADER_LEN + ethernet::VLAN_TAG_LEN,
        Some(_) => ethernet::HEADER_LEN,
        None => return Err(bad),
    };
    let et = frame.get(l3 - 2..l3).ok_or(bad)?;
    let v4 = u16::from_be_bytes([et[0], et[1]]) == ethertype::IPV4;
    let l4 = usize::from(o.csum_start);
    let end = if v4 {
        let ip = frame.get(l3..l3 + ipv4::HEADER_LEN).ok_or(bad)?;
        l3 + usize::from(u16::from_be_bytes([ip[2], ip[3]]))
    } else if u16::from_be_bytes([et[0], et[1]]) == ethertype::IPV6 {
        let ip = frame.get(l3..l3 + ipv6::HEADER_LEN).ok_or(bad)?;
        l3 + ipv6::HEADER_LEN + usize::from(u16::from_be_bytes([ip[4], ip[5]]))
    } else {
        return Err(bad);
    };
    let tcp = o.gso != Gso::UdpL4;
    let l4_hdr = if tcp {
        let doff = frame.get(l4 + 12).ok_or(bad)?;
        usize::from(doff >> 4) * 4
    } else {
        udp::HEADER_LEN
    };
    let hdr_end = l4 + l4_hdr;
    let min_l4 = l3
        + if v4 {
            ipv4::HEADER_LEN
        } else {
            ipv6::HEADER_LEN
        };
    if l4 < min_l4 || (tcp && l4_hdr < tcp::HEADER_LEN) || hdr_end > end || end > frame.len() {
        return Err(bad);
    }
    Ok(Layout {
        l3,
        l4,
        hdr_end,
        end,
        v4,
        tcp,
    })
}

/// Cut a super-packet into wire frames, each built in `buf` and handed to
/// `emit`; a frame that is not a super-packet is emitted once, its
/// checksum completed. Returns the number of frames emitted.
pub fn segment(
    frame: &[u8],
    o: &Offload,
    buf: &mut [u8],
    mut emit: impl FnMut(&[u8]),
) -> Result<usize, GsoError> {
    if !o.is_gso() {
        let cap = buf.len();
        let out = buf
            .get_mut(..frame.len())
            .ok_or(GsoError::BufferTooSmall(cap))?;
        out.copy_from_slice(frame);
        complete_checksum(out, o)?;
        emit(out);
        return Ok(1);
    }
    let l = layout(frame, o)?;
    let gso = usize::from(o.gso_size);
    let payload = &frame[l.hdr_end..l.end];
    let count = payload.len().div_ceil(gso).max(1);
    let ip_id = u16::from_be_bytes([frame[l.l3 + 4], frame[l.l3 + 5]]);
    let seq = u32::from_be_bytes([
        frame[l.l4 + 4],
        frame[l.l4 + 5],
        frame[l.l4 + 6],
        frame[l.l4 + 7],
    ]);
    let seg_o = Offload {
        gso: Gso::None,
        gso_size: 0,
        ecn: false,
        needs_csum: true,
        ..*o
    };
    let cap = buf.len();
    for k in 0..count {
        let chunk = payload.get(k * gso..((k + 1) * gso).min(payload.len()));
        let chunk = chunk.unwrap_or(&[]);
        let len = l.hdr_end + chunk.len();
        let out = buf.get_mut(..len).ok_or(GsoError::BufferTooSmall(cap))?;
        out[..l.hdr_end].copy_from_slice(&frame[..l.hdr_end]);
        out[l.hdr_end..].copy_from_slice(chunk);
        let l3_len = (len - l.l3) as u16;
        let l4_len = (len - l.l4) as u16;
        if l.v4 {
            let mut ip = ipv4::Packet::new_unchecked(&mut out[l.l3..l.l4]);
            ip.set_total_len(l3_len);
            ip.set_ident(ip_id.wrapping_add(k as u16));
            ip.fill_checksum();
        } else {
            out[l.l3 + 4..l.l3 + 6].copy_from_slice(&(l3_len - 40).to_be_bytes());
        }
        // The seed of this segment: the pseudo-header with its own length.
        let seed = pseudo_seed(out, &l, l4_len);
        if l.tcp {
            let h = &mut out[l.l4..l.hdr_end];
            let s = seq.wrapping_add((k * gso) as u32);
            h[4..8].copy_from_slice(&s.to_be_bytes());
            if k + 1 < count {
                h[13] &= !(tcp::flags::FIN | tcp::flags::PSH);
            }
            if k > 0 {
                h[13] &= !tcp::flags::CWR;
            }
            h[16..18].copy_from_slice(&seed.to_be_bytes());
        } else {
            let h = &mut out[l.l4..l.hdr_end];
            h[4..6].copy_from_slice(&l4_len.to_be_bytes());
            h[6..8].copy_from_slice(&seed.to_be_bytes());
        }
        complete_checksum(out, &seg_o)?;
        emit(out);
    }
    Ok(count)
}

/// The pseudo-header sum (not complemented) of the segment in `out`.
fn pseudo_seed(out: &[u8], l: &Layout, l4_len: u16) -> u16 {
    let proto = if l.tcp {
        ipv4::protocol::TCP
    } else {
        ipv4::protocol::UDP
    };
    if l.v4 {
        let ip = ipv4::Packet::new_unchecked(&out[l.l3..l.l4]);
        checksum::pseudo_header_sum(ip.src_addr(), ip.dst_addr(), proto, l4_len)
    } else {
        let ip = ipv6::Packet::new_unchecked(&out[l.l3..l.l4]);
        checksum::pseudo_header_sum_v6(ip.src_addr(), ip.dst_addr(), proto, u32::from(l4_len))
    }
}

#[cfg(test)]
mod tests;
