//! TCP segments of the harness in both families: built with options, and
//! read back from what the gateway sent, so that a step can answer the
//! gateway's last segment as its peer would (the client's ACK of a SYN
//! cookie, the backend's SYN-ACK to a proxied flow's SYN, an in-window
//! RST that earns a challenge ACK); with [`Marks`], ECN codepoints in the
//! IP header and SACK blocks in the options.

use crate::wire::tcp::{self, SynOptions, flags as F, option};
use crate::wire::{MacAddr, build, checksum, ethernet, ipv4, ipv6};
use std::net::IpAddr;

/// A TCP segment the gateway sent, as its receiver sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Sent {
    pub macs: (MacAddr, MacAddr),
    pub src: (IpAddr, u16),
    pub dst: (IpAddr, u16),
    pub flags: u8,
    pub seq: u32,
    pub ack: u32,
    /// Sequence space it takes: payload, SYN and FIN.
    pub len: u32,
    /// `(TSval, TSecr)` (RFC 7323 §3).
    pub ts: Option<(u32, u32)>,
}

impl Sent {
    /// The TCP segment of an Ethernet/IPv4 or Ethernet/IPv6 (no extension
    /// header) frame, if it is one.
    pub fn read(frame: &[u8]) -> Option<Sent> {
        let eth = frame.get(..14)?;
        let macs = (
            MacAddr(eth[6..12].try_into().ok()?),
            MacAddr(eth[..6].try_into().ok()?),
        );
        let (src, dst, seg) = match u16::from_be_bytes([eth[12], eth[13]]) {
            ethernet::ethertype::IPV4 => {
                let ip = ipv4::Packet::new_checked(frame.get(14..)?).ok()?;
                if ip.protocol() != 6 {
                    return None;
                }
                let seg = frame.get(14 + ip.header_len()..14 + usize::from(ip.total_len()))?;
                (ip.src_addr().into(), ip.dst_addr().into(), seg)
            }
            ethernet::ethertype::IPV6 => {
                let ip = ipv6::Packet::new_checked(frame.get(14..)?).ok()?;
                if ip.next_header() != 6 {
                    return None;
                }
                let end = 14 + ipv6::HEADER_LEN + usize::from(ip.payload_len());
                (
                    ip.src_addr().into(),
                    ip.dst_addr().into(),
                    frame.get(14 + ipv6::HEADER_LEN..end)?,
                )
            }
            _ => return None,
        };
        let t = tcp::Packet::new_checked(seg).ok()?;
        let opts = SynOptions::parse(seg.get(tcp::HEADER_LEN..t.header_len())?);
        let flags = t.flags();
        Some(Sent {
            macs,
            src: (src, t.src_port()),
            dst: (dst, t.dst_port()),
            flags,
            seq: t.seq_number(),
            ack: t.ack_number(),
            len: t.payload().len() as u32 + u32::from(flags & (F::SYN | F::FIN) != 0),
            ts: opts.ts,
        })
    }

    /// The receiver's answer: `flags`, its sequence number the segment's
    /// acknowledgment moved by `dseq`, its acknowledgment the end of the
    /// segment moved by `dack`. A SYN carries MSS 1460 and window scale 5;
    /// timestamps, when the segment had them, echo its TSval; `marks` add
    /// ECN and SACK blocks.
    pub fn answer(
        &self,
        (flags, dseq, dack): (u8, i8, i8),
        marks: Marks,
        payload: &[u8],
    ) -> Vec<u8> {
        let seq = self.ack.wrapping_add_signed(i32::from(dseq));
        let ack = self
            .seq
            .wrapping_add(self.len)
            .wrapping_add_signed(i32::from(dack));
        let ts = self
            .ts
            .map(|(val, ecr)| (ecr.wrapping_add(1), val))
            .filter(|_| flags & F::ACK != 0);
        let mut opts = options(flags & F::SYN != 0, ts);
        marks.add_sack(&mut opts, flags, ack);
        let mut frame = tcp_frame(
            (self.macs.1, self.macs.0),
            (self.dst, self.src),
            (flags, seq, ack),
            &opts,
            payload,
        );
        marks.set_ecn(&mut frame);
        frame
    }
}

/// ECN and SACK on a segment the harness sends, from one operand byte:
/// bits 0–1 the ECN field, bits 2–3 the SACK blocks, bit 4 a D-SACK block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Marks {
    /// The IP header's ECN field (RFC 3168 §5): 0 Not-ECT, 1 ECT(1),
    /// 2 ECT(0), 3 CE. (The TCP flags ECE and CWR are in the flags
    /// operand: SYN + ECE + CWR is an ECN-setup SYN, RFC 3168 §6.1.1.)
    pub ecn: u8,
    /// SACK blocks above the acknowledgment (RFC 2018 §3), 1,000 bytes
    /// each with a gap of 1,000 before each one.
    pub sack_blocks: u8,
    /// A D-SACK block first (RFC 2883 §4): 400 bytes below the
    /// acknowledgment, already acknowledged.
    pub dsack: bool,
}

/// Options of at most 40 bytes (RFC 9293 §3.1: data offset ≤ 15 words).
const MAX_OPTIONS_LEN: usize = tcp::MAX_HEADER_LEN - tcp::HEADER_LEN;

impl Marks {
    pub fn from_byte(b: u8) -> Self {
        Marks {
            ecn: b & 3,
            sack_blocks: b >> 2 & 3,
            dsack: b & 0x10 != 0,
        }
    }

    /// Append the SACK option to `opts` of a segment with `flags` and
    /// acknowledgment `ack`: as many of the blocks as fit, none on a SYN
    /// (SACK blocks follow the handshake, RFC 2018 §3).
    pub fn add_sack(&self, opts: &mut Vec<u8>, flags: u8, ack: u32) {
        if flags & F::SYN != 0 {
            return;
        }
        let dsack = self
            .dsack
            .then(|| (ack.wrapping_sub(500), ack.wrapping_sub(100)));
        let above = (0..u32::from(self.sack_blocks)).map(|i| {
            let left = ack.wrapping_add(1_000 * (2 * i + 1));
            (left, left.wrapping_add(1_000))
        });
        let room = MAX_OPTIONS_LEN.saturating_sub(opts.len() + 4) / 8;
        let blocks: Vec<(u32, u32)> = dsack.into_iter().chain(above).take(room).collect();
        if blocks.is_empty() {
            return;
        }
        opts.extend([
            option::NOP,
            option::NOP,
            option::SACK,
            2 + 8 * blocks.len() as u8,
        ]);
        for (left, right) in blocks {
            opts.extend(left.to_be_bytes());
            opts.extend(right.to_be_bytes());
        }
    }

    /// Set the ECN field of `frame`'s IPv4 header (and its checksum) or
    /// IPv6 header (the traffic class's low 2 bits).
    pub fn set_ecn(&self, frame: &mut [u8]) {
        if self.ecn == 0 || frame.len() < 14 + ipv6::HEADER_LEN {
            return;
        }
        match u16::from_be_bytes([frame[12], frame[13]]) {
            ethernet::ethertype::IPV4 => {
                let mut ip = ipv4::Packet::new_unchecked(&mut frame[14..]);
                let tos = ip.tos() & !3 | self.ecn;
                ip.set_tos(tos);
                ip.fill_checksum();
            }
            ethernet::ethertype::IPV6 => {
                frame[15] = frame[15] & !0x30 | self.ecn << 4;
            }
            _ => {}
        }
    }
}

/// An options area: with `syn`, MSS 1460, SACK-permitted and window scale
/// 5 (Linux's layout); timestamps `(TSval, TSecr)` when given.
pub(super) fn options(syn: bool, ts: Option<(u32, u32)>) -> Vec<u8> {
    let mut o = Vec::with_capacity(20);
    if syn {
        o.extend([option::MSS, 4, 0x05, 0xb4, option::SACK_PERMITTED, 2]);
    }
    if let Some((val, ecr)) = ts {
        if !syn {
            o.extend([option::NOP, option::NOP]);
        }
        o.extend([option::TIMESTAMP, 10]);
        o.extend(val.to_be_bytes());
        o.extend(ecr.to_be_bytes());
    } else if syn {
        o.extend([option::NOP, option::NOP]);
    }
    if syn {
        o.extend([option::NOP, option::WSCALE, 3, 5]);
    }
    o
}

/// An Ethernet/IPv4 or Ethernet/IPv6 TCP frame (by the addresses' family;
/// mixed families give an empty frame), window 1024, checksums filled.
pub(super) fn tcp_frame(
    (src_mac, dst_mac): (MacAddr, MacAddr),
    ((src, sport), (dst, dport)): ((IpAddr, u16), (IpAddr, u16)),
    (flags, seq, ack): (u8, u32, u32),
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let header_len = tcp::HEADER_LEN + options.len().next_multiple_of(4);
    let mut seg = vec![0u8; header_len];
    seg[tcp::HEADER_LEN..tcp::HEADER_LEN + options.len()].copy_from_slice(options);
    seg.extend_from_slice(payload);
    let mut t = tcp::Packet::new_unchecked(&mut seg[..]);
    t.set_src_port(sport);
    t.set_dst_port(dport);
    t.set_seq_number(seq);
    t.set_ack_number(ack);
    t.set_data_offset_words((header_len / 4) as u8);
    t.set_flags(flags);
    t.set_window(1024);
    let (ethertype, ip) = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            t.fill_checksum(s, d);
            (ethernet::ethertype::IPV4, build::ipv4_packet(s, d, 6, &seg))
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let csum = checksum::l4_checksum_v6(s, d, 6, &seg);
            tcp::Packet::new_unchecked(&mut seg[..]).set_checksum(csum);
            (
                ethernet::ethertype::IPV6,
                build::ipv6_packet(s, d, 6, build::DEFAULT_HOP_LIMIT, &seg),
            )
        }
        _ => return Vec::new(),
    };
    build::ethernet_frame(src_mac, dst_mac, ethertype, &ip)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    /// A frame built here reads back as what it was built from, in both
    /// families, and its answer swaps the ends and moves the numbers.
    #[test]
    fn frames_read_back_and_answers_mirror_them() {
        let macs = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
        let v4: (IpAddr, IpAddr) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        let v6: (IpAddr, IpAddr) = (Ipv6Addr::LOCALHOST.into(), Ipv6Addr::UNSPECIFIED.into());
        for (a, b) in [v4, v6] {
            let f = tcp_frame(
                macs,
                ((a, 1), (b, 2)),
                (F::SYN | F::ACK, 100, 200),
                &options(true, Some((7, 9))),
                b"",
            );
            let sent = Sent::read(&f).expect("a TCP frame");
            assert_eq!(sent.macs, macs);
            assert_eq!((sent.src, sent.dst), ((a, 1), (b, 2)));
            assert_eq!(
                (sent.flags, sent.seq, sent.ack, sent.len),
                (0x12, 100, 200, 1)
            );
            assert_eq!(sent.ts, Some((7, 9)));
            let back =
                Sent::read(&sent.answer((F::ACK, 0, -1), Marks::default(), b"xy")).expect("answer");
            assert_eq!((back.src, back.dst), ((b, 2), (a, 1)));
            assert_eq!((back.seq, back.ack, back.len), (200, 100, 2));
            assert_eq!(back.ts, Some((10, 7)), "echoes the TSval");
        }
    }

    /// Marks set the ECN field (the IPv4 header checksum still verifies)
    /// and add SACK blocks that fit beside timestamps; none on a SYN.
    #[test]
    fn marks_set_the_ecn_field_and_add_sack_blocks() {
        let macs = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
        let v4: (IpAddr, IpAddr) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        let v6: (IpAddr, IpAddr) = (Ipv6Addr::LOCALHOST.into(), Ipv6Addr::UNSPECIFIED.into());
        // CE, three blocks and a D-SACK block: three of the four fit
        // beside the timestamps (12 + 4 + 3 * 8 = 40 bytes).
        let marks = Marks::from_byte(0b1_11_11);
        assert_eq!((marks.ecn, marks.sack_blocks, marks.dsack), (3, 3, true));
        for (a, b) in [v4, v6] {
            let syn = Sent::read(&tcp_frame(
                macs,
                ((a, 1), (b, 2)),
                (F::SYN, 100_000, 0),
                &options(true, Some((7, 9))),
                b"",
            ))
            .expect("a SYN");
            let frame = syn.answer((F::ACK, 0, 0), marks, b"");
            let ecn = match a {
                IpAddr::V4(_) => {
                    let ip = ipv4::Packet::new_checked(&frame[14..]).expect("IPv4");
                    assert!(ip.verify_checksum());
                    ip.tos() & 3
                }
                IpAddr::V6(_) => {
                    ipv6::Packet::new_checked(&frame[14..])
                        .expect("IPv6")
                        .traffic_class()
                        & 3
                }
            };
            assert_eq!(ecn, 3, "CE");
            let back = Sent::read(&frame).expect("answer");
            let seg = &frame[frame.len() - tcp::MAX_HEADER_LEN..];
            let t = tcp::Packet::new_checked(seg).expect("TCP");
            assert_eq!(t.header_len(), tcp::MAX_HEADER_LEN, "{seg:?}");
            // NOP NOP TS(10) NOP NOP SACK(2 + 3 * 8)
            let opts = &seg[tcp::HEADER_LEN..];
            assert_eq!(opts[12..16], [1, 1, option::SACK, 26]);
            let edges: Vec<u32> = opts[16..]
                .chunks(4)
                .map(|e| u32::from_be_bytes(e.try_into().expect("4 bytes")))
                .collect();
            let ack = back.ack;
            assert_eq!(
                edges,
                [
                    ack - 500,
                    ack - 100,
                    ack + 1_000,
                    ack + 2_000,
                    ack + 3_000,
                    ack + 4_000
                ]
            );
            let mut syn_opts = options(true, None);
            let len = syn_opts.len();
            marks.add_sack(&mut syn_opts, F::SYN, 1);
            assert_eq!(syn_opts.len(), len, "no SACK blocks on a SYN");
        }
    }
}
