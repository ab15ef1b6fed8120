//! One packet socket on one interface: its TPACKET_V3 RX ring and its TX
//! ring, and the walks over them.
//!
//! Ring protocol (Documentation/networking/packet_mmap.rst):
//!
//! * RX blocks are filled by the kernel in order `0..rx_block_count`, round
//!   robin. A block belongs to user space while its `block_status` has
//!   `TP_STATUS_USER`; we read it with `Acquire`, walk its `num_pkts` frames
//!   (`offset_to_first_pkt`, then each frame's `tp_next_offset`), and hand
//!   it back by storing `TP_STATUS_KERNEL` with `Release` as soon as its last
//!   frame is copied out. A burst may stop inside a block (the `max` of the
//!   burst, or an empty pool); the cursor remembers where.
//! * TX slots (`tx_frame_count` frames of `tx_frame_size` bytes,
//!   `frames_per_block` to a block) are used in order. A slot is free when its
//!   `tp_status` is `TP_STATUS_AVAILABLE`; we copy the frame after the
//!   48-byte `tpacket3_hdr`, set `tp_len`, and store `TP_STATUS_SEND_REQUEST`
//!   with `Release`. The kernel sends requested slots in ring order and marks
//!   them available again when the skb is freed, so the first busy slot at
//!   the cursor means the ring is full.

use super::fixup;
use super::{AfPacketFrame, PortStats};
use crate::driver::sys::Region;
use std::mem::offset_of;
use std::sync::atomic::Ordering;

/// Offsets in `struct tpacket_block_desc` (the V1 block header).
const BLOCK_STATUS: usize =
    offset_of!(libc::tpacket_block_desc, hdr) + offset_of!(libc::tpacket_hdr_v1, block_status);
const BLOCK_NUM_PKTS: usize =
    offset_of!(libc::tpacket_block_desc, hdr) + offset_of!(libc::tpacket_hdr_v1, num_pkts);
const BLOCK_FIRST_PKT: usize = offset_of!(libc::tpacket_block_desc, hdr)
    + offset_of!(libc::tpacket_hdr_v1, offset_to_first_pkt);

/// Offsets in `struct tpacket3_hdr`.
const H_NEXT_OFFSET: usize = offset_of!(libc::tpacket3_hdr, tp_next_offset);
const H_SNAPLEN: usize = offset_of!(libc::tpacket3_hdr, tp_snaplen);
const H_LEN: usize = offset_of!(libc::tpacket3_hdr, tp_len);
const H_STATUS: usize = offset_of!(libc::tpacket3_hdr, tp_status);
const H_MAC: usize = offset_of!(libc::tpacket3_hdr, tp_mac);
const H_VLAN_TCI: usize =
    offset_of!(libc::tpacket3_hdr, hv1) + offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tci);
const H_VLAN_TPID: usize =
    offset_of!(libc::tpacket3_hdr, hv1) + offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tpid);

/// Where TX frame data starts in a slot: `TPACKET3_HDRLEN - sizeof(struct
/// sockaddr_ll)`, i.e. the header rounded up to `TPACKET_ALIGNMENT` (the
/// kernel's default when `PACKET_TX_HAS_OFF` is not set).
pub(super) const TX_DATA_OFFSET: usize =
    libc::TPACKET3_HDRLEN - std::mem::size_of::<libc::sockaddr_ll>();

const _: () = assert!(TX_DATA_OFFSET == 48);
const _: () = assert!(BLOCK_STATUS == 8 && BLOCK_NUM_PKTS == 12 && BLOCK_FIRST_PKT == 16);
const _: () = assert!(H_STATUS == 20 && H_MAC == 24 && H_VLAN_TCI == 32 && H_VLAN_TPID == 36);

/// RX ring geometry and the walk's cursor.
#[derive(Debug)]
pub(super) struct RxRing {
    pub(super) block_size: usize,
    pub(super) block_count: usize,
    /// Block the walk is in (or will open next).
    block: usize,
    /// The block at `block` is ours (status was USER) and not yet returned.
    open: bool,
    /// Frames of the open block not yet consumed.
    remaining: u32,
    /// Offset of the next frame header from the start of the open block.
    next_off: usize,
}

impl RxRing {
    pub(super) fn new(block_size: usize, block_count: usize) -> Self {
        RxRing {
            block_size,
            block_count,
            block: 0,
            open: false,
            remaining: 0,
            next_off: 0,
        }
    }

    pub(super) fn len_bytes(&self) -> usize {
        self.block_size * self.block_count
    }

    /// Frames are waiting in an open block (no syscall needed to know).
    pub(super) fn has_open_frames(&self) -> bool {
        self.open && self.remaining > 0
    }
}

/// TX ring geometry (after the RX ring in the mapping) and the cursor.
#[derive(Debug)]
pub(super) struct TxRing {
    /// Offset of the TX ring in the mapping (= RX ring length).
    pub(super) base: usize,
    pub(super) block_size: usize,
    pub(super) block_count: usize,
    pub(super) frame_size: usize,
    pub(super) frames_per_block: usize,
    /// Next slot to fill.
    cursor: usize,
    /// A previous `send` failed: kick again even if this burst adds nothing.
    pub(super) kick_pending: bool,
}

impl TxRing {
    pub(super) fn new(
        base: usize,
        block_size: usize,
        block_count: usize,
        frame_size: usize,
    ) -> Self {
        TxRing {
            base,
            block_size,
            block_count,
            frame_size,
            frames_per_block: block_size / frame_size.max(1),
            cursor: 0,
            kick_pending: false,
        }
    }

    pub(super) fn frame_count(&self) -> usize {
        self.frames_per_block * self.block_count
    }

    pub(super) fn len_bytes(&self) -> usize {
        self.block_size * self.block_count
    }

    /// Largest frame a slot holds.
    pub(super) fn max_payload(&self) -> usize {
        self.frame_size.saturating_sub(TX_DATA_OFFSET)
    }

    fn slot_offset(&self, index: usize) -> usize {
        let fpb = self.frames_per_block.max(1);
        self.base + (index / fpb) * self.block_size + (index % fpb) * self.frame_size
    }
}

/// What the RX walk needs besides the ring: limits and counters.
pub(super) struct RxContext<'a> {
    pub(super) mtu: u32,
    pub(super) stats: &'a mut PortStats,
}

/// Walk the RX ring: copy up to `max` frames into pool buffers appended to
/// `out`. No syscall, no allocation beyond `out`'s spare capacity.
pub(super) fn rx_walk(
    region: &mut Region,
    rx: &mut RxRing,
    ctx: RxContext<'_>,
    pool: &mut Vec<AfPacketFrame>,
    out: &mut Vec<AfPacketFrame>,
    max: usize,
) -> usize {
    let RxContext { mtu, stats } = ctx;
    let mut taken = 0;
    loop {
        if rx.open && rx.remaining == 0 {
            release_block(region, rx);
        }
        if taken >= max {
            break;
        }
        if !rx.open && !open_block(region, rx, stats) {
            break;
        }
        if rx.remaining == 0 {
            continue;
        }
        if pool.is_empty() {
            // Leave the frame in the ring; the next burst takes it.
            stats.rx_pool_empty += 1;
            break;
        }
        let block_start = rx.block * rx.block_size;
        let block_end = block_start + rx.block_size;
        let hdr = block_start + rx.next_off;
        let Some(h) = read_rx_header(region, hdr, block_end) else {
            // A header outside its block: give the whole block back.
            stats.rx_ring_errors += 1;
            rx.remaining = 0;
            continue;
        };
        rx.remaining -= 1;
        if rx.remaining > 0 {
            if h.next_offset == 0 {
                stats.rx_ring_errors += 1;
                rx.remaining = 0;
            } else {
                rx.next_off += h.next_offset as usize;
            }
        }
        if let Some(frame) = take_frame(region, &h, hdr, block_end, mtu, stats, pool) {
            stats.rx_frames += 1;
            stats.rx_bytes += frame.len as u64;
            out.push(frame);
            taken += 1;
        }
    }
    taken
}

fn open_block(region: &Region, rx: &mut RxRing, stats: &mut PortStats) -> bool {
    let base = rx.block * rx.block_size;
    let Some(status) = region.atomic_u32(base + BLOCK_STATUS) else {
        return false;
    };
    if status.load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
        return false;
    }
    let num = region.read_u32(base + BLOCK_NUM_PKTS).unwrap_or(0);
    let first = region.read_u32(base + BLOCK_FIRST_PKT).unwrap_or(0) as usize;
    rx.open = true;
    rx.next_off = first;
    rx.remaining = num;
    if num > 0 && first >= rx.block_size {
        stats.rx_ring_errors += 1;
        rx.remaining = 0;
    }
    true
}

fn release_block(region: &Region, rx: &mut RxRing) {
    let base = rx.block * rx.block_size;
    if let Some(status) = region.atomic_u32(base + BLOCK_STATUS) {
        status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
    }
    rx.open = false;
    rx.remaining = 0;
    rx.block = (rx.block + 1) % rx.block_count.max(1);
}

#[derive(Debug)]
struct RxHeader {
    next_offset: u32,
    snaplen: usize,
    len: usize,
    status: u32,
    mac: usize,
    vlan_tci: u16,
    vlan_tpid: u16,
}

fn read_rx_header(region: &Region, hdr: usize, block_end: usize) -> Option<RxHeader> {
    if hdr.checked_add(size_of::<libc::tpacket3_hdr>())? > block_end {
        return None;
    }
    Some(RxHeader {
        next_offset: region.read_u32(hdr + H_NEXT_OFFSET)?,
        snaplen: region.read_u32(hdr + H_SNAPLEN)? as usize,
        len: region.read_u32(hdr + H_LEN)? as usize,
        status: region.read_u32(hdr + H_STATUS)?,
        mac: usize::from(region.read_u16(hdr + H_MAC)?),
        // The TCI is a u32 field holding a 16-bit value.
        vlan_tci: region.read_u32(hdr + H_VLAN_TCI)? as u16,
        vlan_tpid: region.read_u16(hdr + H_VLAN_TPID)?,
    })
}

/// Apply the size checks and copy one frame into a pool buffer, restoring a
/// VLAN tag the kernel moved into metadata and completing a partial
/// checksum. `None` when the frame is dropped (counted).
fn take_frame(
    region: &Region,
    h: &RxHeader,
    hdr: usize,
    block_end: usize,
    mtu: u32,
    stats: &mut PortStats,
    pool: &mut Vec<AfPacketFrame>,
) -> Option<AfPacketFrame> {
    let data = hdr + h.mac;
    if data
        .checked_add(h.snaplen)
        .is_none_or(|end| end > block_end)
    {
        stats.rx_ring_errors += 1;
        return None;
    }
    // The kernel strips an accelerated 802.1Q tag into tp_vlan_tci before
    // taps see the frame (always for received frames); put it back.
    let tag_in_meta = h.status & libc::TP_STATUS_VLAN_VALID != 0;
    let tag_len = if tag_in_meta { 4 } else { 0 };
    let tagged = tag_in_meta
        || region
            .read_u16(data + 12)
            .is_some_and(|et| h.snaplen >= 14 && fixup::is_vlan_tpid(u16::from_be(et)));
    if h.len + tag_len > fixup::max_frame_len(mtu, tagged) {
        stats.rx_too_big += 1;
        return None;
    }
    if h.snaplen < h.len {
        stats.rx_truncated += 1;
        return None;
    }
    let mut frame = pool.pop()?;
    let len = h.snaplen + tag_len;
    let copied = match frame.buf.get_mut(..len) {
        None => false,
        Some(dst) if tag_in_meta && h.snaplen >= 12 => {
            let tpid = if h.status & libc::TP_STATUS_VLAN_TPID_VALID != 0 && h.vlan_tpid != 0 {
                h.vlan_tpid
            } else {
                crate::wire::ethernet::ethertype::VLAN
            };
            let (addrs, rest) = dst.split_at_mut(12);
            let (tag, payload) = rest.split_at_mut(4);
            tag[..2].copy_from_slice(&tpid.to_be_bytes());
            tag[2..].copy_from_slice(&h.vlan_tci.to_be_bytes());
            region.copy_out(data, addrs) && region.copy_out(data + 12, payload)
        }
        Some(dst) => region.copy_out(data, &mut dst[..h.snaplen]),
    };
    if !copied {
        stats.rx_ring_errors += 1;
        pool.push(frame);
        return None;
    }
    if tag_in_meta {
        stats.rx_vlan_restored += 1;
    }
    frame.len = if tag_in_meta && h.snaplen < 12 {
        h.snaplen
    } else {
        len
    };
    frame.checksum_verified = h.status & libc::TP_STATUS_CSUM_VALID != 0;
    if h.status & libc::TP_STATUS_CSUMNOTREADY != 0 {
        if fixup::complete_l4_checksum(frame.buf.get_mut(..frame.len).unwrap_or_default()) {
            stats.rx_csum_completed += 1;
            frame.checksum_verified = true;
        } else {
            stats.rx_csum_partial_left += 1;
        }
    }
    Some(frame)
}

/// Fill free TX slots from the front of `frames`; returns how many frames it
/// took (sent or dropped as too big). Frames it took go back to `pool`.
pub(super) fn tx_fill(
    region: &mut Region,
    tx: &mut TxRing,
    mtu: u32,
    stats: &mut PortStats,
    pool: &mut Vec<AfPacketFrame>,
    frames: &mut Vec<AfPacketFrame>,
) -> (usize, usize) {
    let count = tx.frame_count();
    let mut taken = 0;
    let mut queued = 0;
    for frame in frames.iter() {
        let bytes = &frame.buf[..frame.len.min(frame.buf.len())];
        let tagged = bytes
            .get(12..14)
            .is_some_and(|t| fixup::is_vlan_tpid(u16::from_be_bytes([t[0], t[1]])));
        if bytes.len() > fixup::max_frame_len(mtu, tagged) || bytes.len() > tx.max_payload() {
            stats.tx_too_big += 1;
            taken += 1;
            continue;
        }
        let slot = tx.slot_offset(tx.cursor);
        let Some(status) = region.atomic_u32(slot + H_STATUS) else {
            break;
        };
        if status.load(Ordering::Acquire) != libc::TP_STATUS_AVAILABLE {
            break;
        }
        let len = bytes.len() as u32;
        let ok = region.copy_in(slot + TX_DATA_OFFSET, bytes)
            && region.write_u32(slot + H_NEXT_OFFSET, 0)
            && region.write_u32(slot + H_LEN, len)
            && region.write_u32(slot + H_SNAPLEN, len);
        if !ok {
            break;
        }
        if let Some(status) = region.atomic_u32(slot + H_STATUS) {
            status.store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        }
        tx.cursor = (tx.cursor + 1) % count.max(1);
        stats.tx_frames += 1;
        stats.tx_bytes += u64::from(len);
        taken += 1;
        queued += 1;
    }
    pool.extend(frames.drain(..taken));
    (taken, queued)
}

#[cfg(test)]
mod tests;
