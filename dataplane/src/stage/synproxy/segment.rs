//! The TCP segments the SYN proxy reads, writes in place and queues: the
//! handshake's options (RFC 9293 §3.2: MSS; RFC 7323 §2: window scale, §3:
//! timestamps; RFC 2018: SACK-permitted), timestamp shifts, answers written over the received frame,
//! sequence shifts with incremental checksums (RFC 1624), the [`Outbox`]
//! of window updates, and the RST that answers a segment without a flow
//! ([`reset_in_place`]). Generic over the family: the L3 header and the
//! pseudo-header are [`StageFamily`]'s. Nothing here allocates.

use crate::conntrack::{NO_WSCALE, Splice};
use crate::counters::{Counters, DropReason};
use crate::driver::Frame;
use crate::flow::FlowKeyOf;
use crate::packet::{PacketKind, PacketMeta, PortId, Verdict};
use crate::snapshot::Snapshot;
use crate::stage::family::StageFamily;
use crate::stage::local::LOCAL_TTL;
use crate::stage::neighbour::set_l2;
use crate::stage::{Egress, MAX_BATCH};
use crate::wire::{checksum, ethernet, ipv6, tcp};

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
/// short, then the window scale, then the MSS), from `key.src` to
/// `key.dst` (the caller swaps the packet's addresses if it answers), the
/// TTL / hop limit set to `ttl` if given. Returns the options written.
fn rewrite<A: StageFamily, F: Frame>(
    frame: &mut F,
    meta: &mut PacketMeta,
    key: &FlowKeyOf<A>,
    f: Fields,
    opts: &SynOptions,
    ttl: Option<u8>,
) -> SynOptions {
    let Fields {
        seq,
        ack,
        flags,
        window,
    } = f;
    // The L3 header first: an IPv6 one may lose extension headers and
    // move the TCP header up.
    if !A::answer_l3(frame.data_mut(), meta, key, 0, ttl) {
        return SynOptions::NONE;
    }
    let l4 = usize::from(meta.l4_offset);
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
        let csum = A::tcp_checksum(key, seg);
        tcp::Packet::new_unchecked(&mut buf[l4..end]).set_checksum(csum);
    }
    A::answer_l3(buf, meta, key, end - l4, None);
    frame.truncate(end);
    meta.l3_end = end as u16;
    meta.tcp_flags = flags;
    opts
}

/// Answer the segment in place: the same connection, back to its sender
/// out of the port it came in on (Ethernet addresses swapped, TTL / hop
/// limit [`LOCAL_TTL`]). Returns the options that fit.
pub(super) fn answer_in_place<A: StageFamily, F: Frame>(
    frame: &mut F,
    meta: &mut PacketMeta,
    port_mac: [u8; 6],
    f: Fields,
    opts: &SynOptions,
) -> SynOptions {
    let back = A::key(meta).reversed();
    let written = rewrite(frame, meta, &back, f, opts, Some(LOCAL_TTL));
    let buf = frame.data_mut();
    let sender = ethernet::Packet::new_unchecked(&buf[..]).src_addr().0;
    set_l2(buf, port_mac, sender);
    meta.verdict = Verdict::Reply;
    written
}

/// Turn a client's TCP segment into a RST from the service back to the
/// client (RFC 9293 §3.10.7.1: seq from the segment's ACK if it has one,
/// else seq 0 and ACK covering the segment). Returns false if the frame is
/// not a TCP segment this can answer (another RST, say).
pub(crate) fn reset_in_place<A: StageFamily, F: Frame>(
    snap: &Snapshot,
    frame: &mut F,
    meta: &mut PacketMeta,
) -> bool {
    if meta.kind != PacketKind::Tcp || meta.tcp_flags & tcp::flags::RST != 0 {
        return false;
    }
    let Some(port) = snap.ports.get(usize::from(meta.in_port)) else {
        return false;
    };
    let Some(seg) = Segment::read(frame.data(), meta) else {
        return false;
    };
    let payload_len = usize::from(meta.l3_end)
        .saturating_sub(usize::from(meta.l4_offset) + seg.header_len) as u32;
    let (seq, ack, flags) = if meta.tcp_flags & tcp::flags::ACK != 0 {
        (seg.ack, 0, tcp::flags::RST)
    } else {
        let syn_fin = u32::from(meta.tcp_flags & (tcp::flags::SYN | tcp::flags::FIN) != 0);
        (
            0,
            seg.seq.wrapping_add(payload_len + syn_fin),
            tcp::flags::RST | tcp::flags::ACK,
        )
    };
    let f = Fields {
        seq,
        ack,
        flags,
        window: 0,
    };
    answer_in_place::<A, F>(frame, meta, port.mac, f, &SynOptions::NONE);
    true
}

/// Turn the client's handshake ACK (or a later ACK while the backend has
/// not answered) into the SYN the backend gets, still addressed as the
/// client sent it (the NAT stage translates it). With timestamps, the SYN
/// carries the client's TSval `client_ts` (so the backend echoes the
/// client's own clock) and TSecr 0.
pub(super) fn backend_syn_in_place<A: StageFamily, F: Frame>(
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
    let key = *A::key(meta);
    let f = Fields {
        seq: sp.client_isn,
        ack: 0,
        flags: tcp::flags::SYN,
        window: u16::MAX,
    };
    rewrite(frame, meta, &key, f, &opts, None);
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

/// Longest generated ACK without options: Ethernet + IPv6 + TCP.
const ACK_FRAME_LEN: usize = ethernet::HEADER_LEN + ipv6::HEADER_LEN + tcp::HEADER_LEN;
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
    pub(super) fn push_ack<A: StageFamily>(
        &mut self,
        port: PortId,
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        key: &FlowKeyOf<A>,
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
        let l4_len = tcp::HEADER_LEN + opt_len;
        let frame_len = ethernet::HEADER_LEN + A::L3_HEADER_LEN + l4_len;
        *p = port;
        *l = frame_len;
        let buf = &mut buf[..frame_len];
        buf[0..6].copy_from_slice(&dst_mac);
        buf[6..12].copy_from_slice(&src_mac);
        buf[12..14].copy_from_slice(&A::ETHERTYPE.to_be_bytes());
        let (ip, seg) = buf[ethernet::HEADER_LEN..].split_at_mut(A::L3_HEADER_LEN);
        {
            let mut t = tcp::Packet::new_unchecked(&mut seg[..]);
            t.set_src_port(key.src_port);
            t.set_dst_port(key.dst_port);
            t.set_seq_number(seq);
            t.set_ack_number(ack);
            t.set_data_offset_words((l4_len / 4) as u8);
            t.set_flags(tcp::flags::ACK);
            t.set_window(window);
            t.set_urgent_pointer(0);
            t.set_checksum(0);
        }
        seg[tcp::HEADER_LEN..].copy_from_slice(&opt_bytes[..opt_len]);
        let csum = A::tcp_checksum(key, seg);
        tcp::Packet::new_unchecked(&mut seg[..]).set_checksum(csum);
        A::write_l3(ip, key, l4_len, LOCAL_TTL);
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
