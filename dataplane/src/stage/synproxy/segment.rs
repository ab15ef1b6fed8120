//! The TCP segments the SYN proxy reads, writes in place and queues: the
//! handshake's options (RFC 9293 §3.2: MSS; RFC 7323 §2: window scale, §3:
//! timestamps; RFC 2018: SACK-permitted), timestamp shifts, answers written over the received frame,
//! sequence shifts with incremental checksums (RFC 1624), and the
//! [`Outbox`] of window updates. Nothing here allocates.

use crate::conntrack::{NO_WSCALE, Splice};
use crate::counters::{Counters, DropReason};
use crate::driver::Frame;
use crate::flow::FlowKey;
use crate::packet::{PacketMeta, PortId, Verdict};
use crate::stage::local::LOCAL_TTL;
use crate::stage::neighbour::set_l2;
use crate::stage::{Egress, MAX_BATCH};
use crate::wire::{checksum, ethernet, ipv4, tcp};

pub(super) use crate::wire::tcp::SynOptions;
use crate::wire::tcp::option::{
    MSS as OPT_MSS, NOP as OPT_NOP, TIMESTAMP as OPT_TIMESTAMP, WSCALE as OPT_WSCALE,
};

/// The fields of a segment the proxy writes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Fields {
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
}

/// The fixed fields of a received segment the proxy needs.
#[derive(Clone, Copy, Debug)]
pub(super) struct Segment {
    pub seq: u32,
    pub ack: u32,
    pub window: u16,
    /// Header length with options.
    pub header_len: usize,
}

/// Longest options area the proxy writes: MSS, window scale, timestamps.
const MAX_OPTIONS: usize = 20;

/// The options as bytes (each padded to 4 with NOPs) and their length
/// (SACK is never offered, see [`super::cookie`]).
fn encode(opts: &SynOptions) -> ([u8; MAX_OPTIONS], usize) {
    let mut out = [0u8; MAX_OPTIONS];
    let mut n = 0;
    if let Some(mss) = opts.mss {
        let [hi, lo] = mss.to_be_bytes();
        out[n..n + 4].copy_from_slice(&[OPT_MSS, 4, hi, lo]);
        n += 4;
    }
    if let Some(w) = opts.wscale {
        out[n..n + 4].copy_from_slice(&[OPT_NOP, OPT_WSCALE, 3, w]);
        n += 4;
    }
    if let Some((val, ecr)) = opts.ts {
        out[n..n + 4].copy_from_slice(&[OPT_NOP, OPT_NOP, OPT_TIMESTAMP, 10]);
        out[n + 4..n + 8].copy_from_slice(&val.to_be_bytes());
        out[n + 8..n + 12].copy_from_slice(&ecr.to_be_bytes());
        n += 12;
    }
    (out, n)
}

impl Segment {
    /// The segment at `meta`'s offsets, if its header fits.
    pub fn read(data: &[u8], meta: &PacketMeta) -> Option<Segment> {
        let seg = data.get(usize::from(meta.l4_offset)..usize::from(meta.l3_end))?;
        let p = tcp::Packet::new_checked(seg).ok()?;
        Some(Segment {
            seq: p.seq_number(),
            ack: p.ack_number(),
            window: p.window(),
            header_len: p.header_len(),
        })
    }

    /// The handshake options of this segment.
    pub fn syn_options(&self, data: &[u8], meta: &PacketMeta) -> SynOptions {
        let start = usize::from(meta.l4_offset) + tcp::HEADER_LEN;
        let end = usize::from(meta.l4_offset) + self.header_len;
        data.get(start..end)
            .map_or(SynOptions::NONE, SynOptions::parse)
    }
}

/// Rewrite the segment at `meta`'s offsets as a header-only segment with
/// `seq`, `ack`, `flags`, `window` and as many of `opts` as fit (growing
/// the frame when the driver can; the timestamps go first when room is
/// short, then the window scale, then the MSS), keeping the packet's own addresses (the
/// caller swaps them if it answers). Returns the options written.
fn rewrite<F: Frame>(
    frame: &mut F,
    meta: &mut PacketMeta,
    key: &FlowKey,
    f: Fields,
    opts: &SynOptions,
) -> SynOptions {
    let Fields {
        seq,
        ack,
        flags,
        window,
    } = f;
    let (l3, l4) = (usize::from(meta.l3_offset), usize::from(meta.l4_offset));
    let mut opts = *opts;
    opts.sack = false;
    let (bytes, len) = loop {
        let (bytes, len) = encode(&opts);
        let end = l4 + tcp::HEADER_LEN + len;
        if frame.data().len() >= end || frame.extend(end) {
            break (bytes, len);
        }
        if opts.ts.take().is_none() && opts.wscale.take().is_none() && opts.mss.take().is_none() {
            break (bytes, 0);
        }
    };
    let end = l4 + tcp::HEADER_LEN + len;
    let buf = frame.data_mut();
    if buf.len() < end {
        return SynOptions::NONE;
    }
    {
        let seg = &mut buf[l4..end];
        seg[tcp::HEADER_LEN..].copy_from_slice(&bytes[..len]);
        let mut out = tcp::Packet::new_unchecked(&mut seg[..]);
        out.set_src_port(key.src_port);
        out.set_dst_port(key.dst_port);
        out.set_seq_number(seq);
        out.set_ack_number(ack);
        out.set_data_offset_words(((tcp::HEADER_LEN + len) / 4) as u8);
        out.set_flags(flags);
        out.set_window(window);
        out.set_urgent_pointer(0);
        out.set_checksum(0);
        let csum = checksum::l4_checksum(key.src_ip, key.dst_ip, ipv4::protocol::TCP, seg);
        tcp::Packet::new_unchecked(&mut buf[l4..end]).set_checksum(csum);
    }
    {
        let mut ip = ipv4::Packet::new_unchecked(&mut buf[l3..l4]);
        ip.set_src_addr(key.src_ip);
        ip.set_dst_addr(key.dst_ip);
        ip.set_total_len((end - l3) as u16);
        ip.fill_checksum();
    }
    frame.truncate(end);
    meta.l3_end = end as u16;
    meta.tcp_flags = flags;
    opts
}

/// Answer the segment in place: the same connection, back to its sender
/// out of the port it came in on (Ethernet addresses swapped, TTL
/// [`LOCAL_TTL`]). Returns the options that fit.
pub(super) fn answer_in_place<F: Frame>(
    frame: &mut F,
    meta: &mut PacketMeta,
    port_mac: [u8; 6],
    f: Fields,
    opts: &SynOptions,
) -> SynOptions {
    let back = meta.key.reversed();
    let l3 = usize::from(meta.l3_offset);
    if let Some(h) = frame.data_mut().get_mut(l3..l3 + ipv4::HEADER_LEN) {
        ipv4::Packet::new_unchecked(h).set_ttl(LOCAL_TTL);
    }
    let written = rewrite(frame, meta, &back, f, opts);
    let buf = frame.data_mut();
    let sender = ethernet::Packet::new_unchecked(&buf[..]).src_addr().0;
    set_l2(buf, port_mac, sender);
    meta.verdict = Verdict::Reply;
    written
}

/// Turn the client's handshake ACK (or a later ACK while the backend has
/// not answered) into the SYN the backend gets, still addressed as the
/// client sent it (the NAT stage translates it). With timestamps, the SYN
/// carries the client's TSval `client_ts` (so the backend echoes the
/// client's own clock) and TSecr 0.
pub(super) fn backend_syn_in_place<F: Frame>(
    frame: &mut F,
    meta: &mut PacketMeta,
    sp: &Splice,
    client_ts: Option<u32>,
) {
    let opts = SynOptions {
        mss: Some(sp.client_mss),
        wscale: (sp.client_wscale != NO_WSCALE).then_some(sp.client_wscale),
        sack: false,
        ts: client_ts.filter(|_| sp.timestamps).map(|v| (v, 0)),
    };
    let key = meta.key;
    let f = Fields {
        seq: sp.client_isn,
        ack: 0,
        flags: tcp::flags::SYN,
        window: u16::MAX,
    };
    rewrite(frame, meta, &key, f, &opts);
}

/// Offsets of the sequence, acknowledgment, window and checksum fields.
const SEQ: usize = 4;
const ACK: usize = 8;
const WINDOW: usize = 14;
const CSUM: usize = 16;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The TCP header of the packet, if whole.
fn header<'a, F: Frame>(
    frame: &'a mut F,
    meta: &PacketMeta,
) -> Option<&'a mut [u8; tcp::HEADER_LEN]> {
    frame
        .data_mut()
        .get_mut(usize::from(meta.l4_offset)..)?
        .first_chunk_mut::<{ tcp::HEADER_LEN }>()
}

/// Replace a 32-bit field, updating the checksum.
fn set_u32(h: &mut [u8; tcp::HEADER_LEN], at: usize, new: u32) {
    let old = u32_at(h, at);
    let csum = u16::from_be_bytes([h[CSUM], h[CSUM + 1]]);
    let csum = checksum::update_u32(csum, old, new);
    h[at..at + 4].copy_from_slice(&new.to_be_bytes());
    h[CSUM..CSUM + 2].copy_from_slice(&csum.to_be_bytes());
}

/// The TCP checksum field, as it is.
pub(super) fn checksum_field<F: Frame>(frame: &mut F, meta: &PacketMeta) -> Option<u16> {
    header(frame, meta).map(|h| u16::from_be_bytes([h[CSUM], h[CSUM + 1]]))
}

/// Overwrite the TCP checksum field.
pub(super) fn set_checksum_field<F: Frame>(frame: &mut F, meta: &PacketMeta, value: u16) {
    if let Some(h) = header(frame, meta) {
        h[CSUM..CSUM + 2].copy_from_slice(&value.to_be_bytes());
    }
}

/// Set the sequence number.
pub(super) fn set_seq<F: Frame>(frame: &mut F, meta: &PacketMeta, seq: u32) {
    if let Some(h) = header(frame, meta) {
        set_u32(h, SEQ, seq);
    }
}

/// Add `delta` to the acknowledgment number.
#[inline]
pub(super) fn shift_ack<F: Frame>(frame: &mut F, meta: &PacketMeta, delta: u32) {
    if let Some(h) = header(frame, meta) {
        let ack = u32_at(h, ACK).wrapping_add(delta);
        set_u32(h, ACK, ack);
    }
}

/// Subtract `delta` from the sequence number and map the window.
#[inline]
pub(super) fn shift_seq_and_window<F: Frame>(
    frame: &mut F,
    meta: &PacketMeta,
    delta: u32,
    window: impl Fn(u16) -> u16,
) {
    if let Some(h) = header(frame, meta) {
        let seq = u32_at(h, SEQ).wrapping_sub(delta);
        set_u32(h, SEQ, seq);
        let old = u16::from_be_bytes([h[WINDOW], h[WINDOW + 1]]);
        let new = window(old);
        if new != old {
            let csum = u16::from_be_bytes([h[CSUM], h[CSUM + 1]]);
            let csum = checksum::update_u16(csum, old, new);
            h[WINDOW..WINDOW + 2].copy_from_slice(&new.to_be_bytes());
            h[CSUM..CSUM + 2].copy_from_slice(&csum.to_be_bytes());
        }
    }
}

/// Where the timestamp option's TSval (`Tsval`) or TSecr (`Tsecr`) sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TsField {
    Tsval = 2,
    Tsecr = 6,
}

/// Add `delta` to the TSval or TSecr of the segment's timestamp option, if
/// it has one, updating the checksum (a field at an odd offset adds its
/// bytes swapped pairwise to the sum).
#[inline]
pub(super) fn shift_timestamp<F: Frame>(
    frame: &mut F,
    meta: &PacketMeta,
    field: TsField,
    delta: u32,
) {
    let l4 = usize::from(meta.l4_offset);
    let Some(seg) = frame.data_mut().get_mut(l4..usize::from(meta.l3_end)) else {
        return;
    };
    let Ok(header_len) = tcp::Packet::new_checked(&seg[..]).map(|p| p.header_len()) else {
        return;
    };
    let Some(at) = tcp::Options::new(&seg[tcp::HEADER_LEN..header_len])
        .find(|&(_, kind, body)| kind == OPT_TIMESTAMP && body.len() == 8)
        .map(|(at, _, _)| tcp::HEADER_LEN + at + field as usize)
    else {
        return;
    };
    let old = u32_at(seg, at);
    let new = old.wrapping_add(delta);
    let swap = |v: u32| ((v & 0x00ff_00ff) << 8) | ((v >> 8) & 0x00ff_00ff);
    let csum = u16::from_be_bytes([seg[CSUM], seg[CSUM + 1]]);
    let csum = if at % 2 == 0 {
        checksum::update_u32(csum, old, new)
    } else {
        checksum::update_u32(csum, swap(old), swap(new))
    };
    seg[at..at + 4].copy_from_slice(&new.to_be_bytes());
    seg[CSUM..CSUM + 2].copy_from_slice(&csum.to_be_bytes());
}

/// Length of a generated ACK: Ethernet + IPv4 + TCP, no options.
const ACK_FRAME_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + tcp::HEADER_LEN;
/// Length of the timestamp option with its two NOPs.
const TS_OPTION_LEN: usize = 12;

/// Frames the SYN proxy generates besides a batch's verdicts (the window
/// update to a client whose backend connection just opened): a fixed
/// array, filled by the flow stage, sent by the worker after the batch
/// through [`crate::stage::Pipeline::send_arp_requests`]. Full: the update is
/// not sent (counted as `syn_proxy_outbox_full`); the client's zero-window
/// probe then gets the backend's window from the backend itself.
#[derive(Debug)]
pub struct Outbox {
    frames: Box<[[u8; ACK_FRAME_LEN + TS_OPTION_LEN]; MAX_BATCH]>,
    /// Each frame's length (with or without the timestamp option).
    lens: [usize; MAX_BATCH],
    ports: [PortId; MAX_BATCH],
    len: usize,
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox {
            frames: Box::new([[0; ACK_FRAME_LEN + TS_OPTION_LEN]; MAX_BATCH]),
            lens: [0; MAX_BATCH],
            ports: [0; MAX_BATCH],
            len: 0,
        }
    }
}

impl Outbox {
    /// Queue an ACK for `key` (as it travels) out of `port`, with the
    /// timestamp option `ts` (TSval, TSecr) if any; false when full.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push_ack(
        &mut self,
        port: PortId,
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        key: &FlowKey,
        seq: u32,
        ack: u32,
        window: u16,
        ts: Option<(u32, u32)>,
    ) -> bool {
        let (Some(buf), Some(p), Some(l)) = (
            self.frames.get_mut(self.len),
            self.ports.get_mut(self.len),
            self.lens.get_mut(self.len),
        ) else {
            return false;
        };
        let opts = SynOptions {
            ts,
            ..SynOptions::NONE
        };
        let (opt_bytes, opt_len) = encode(&opts);
        let frame_len = ACK_FRAME_LEN + opt_len;
        *p = port;
        *l = frame_len;
        let buf = &mut buf[..frame_len];
        buf[0..6].copy_from_slice(&dst_mac);
        buf[6..12].copy_from_slice(&src_mac);
        buf[12..14].copy_from_slice(&ethernet::ethertype::IPV4.to_be_bytes());
        let (ip, seg) = buf[ethernet::HEADER_LEN..].split_at_mut(ipv4::HEADER_LEN);
        {
            let mut t = tcp::Packet::new_unchecked(&mut seg[..]);
            t.set_src_port(key.src_port);
            t.set_dst_port(key.dst_port);
            t.set_seq_number(seq);
            t.set_ack_number(ack);
            t.set_data_offset_words(((tcp::HEADER_LEN + opt_len) / 4) as u8);
            t.set_flags(tcp::flags::ACK);
            t.set_window(window);
            t.set_urgent_pointer(0);
            t.set_checksum(0);
        }
        seg[tcp::HEADER_LEN..].copy_from_slice(&opt_bytes[..opt_len]);
        let csum = checksum::l4_checksum(key.src_ip, key.dst_ip, ipv4::protocol::TCP, seg);
        tcp::Packet::new_unchecked(&mut seg[..]).set_checksum(csum);
        let mut h = ipv4::Packet::new_unchecked(ip);
        h.set_version_ihl(5);
        h.set_tos(0);
        h.set_total_len((ipv4::HEADER_LEN + tcp::HEADER_LEN + opt_len) as u16);
        h.set_ident(0);
        h.set_flags_frag(true, false, 0);
        h.set_ttl(LOCAL_TTL);
        h.set_protocol(ipv4::protocol::TCP);
        h.set_src_addr(key.src_ip);
        h.set_dst_addr(key.dst_ip);
        h.fill_checksum();
        self.len += 1;
        true
    }

    /// Frames queued and not sent yet.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Send every queued frame through `out` (a driver buffer each; an empty
    /// pool drops the frame as `pool_exhausted`) and empty the outbox.
    pub fn send<F>(&mut self, out: &mut impl Egress<F>, counters: &mut Counters) {
        for ((bytes, &len), &port) in self
            .frames
            .iter()
            .zip(self.lens.iter())
            .zip(self.ports.iter())
            .take(self.len)
        {
            match out.frame_from(&bytes[..len]) {
                Some(frame) => {
                    if out.send(port, frame, counters) {
                        counters.syn_proxy_window_updates += 1;
                    }
                }
                None => counters.drop(DropReason::PoolExhausted),
            }
        }
        self.len = 0;
    }
}
