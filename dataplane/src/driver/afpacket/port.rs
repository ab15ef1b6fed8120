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
mod tests {
    use super::*;
    use crate::driver::Frame;
    use crate::packet::tcp_flags;
    use crate::wire::{MacAddr, build, checksum, ipv4};
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    const BLOCK: usize = 4096;
    const MTU: u32 = 1500;
    const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    fn pool(n: usize) -> Vec<AfPacketFrame> {
        (0..n)
            .map(|_| AfPacketFrame {
                buf: vec![0u8; fixup::max_frame_len(MTU, true)].into_boxed_slice(),
                len: 0,
                checksum_verified: false,
            })
            .collect()
    }

    /// A frame as the kernel would describe it in the ring.
    #[derive(Clone, Default)]
    struct Fake {
        bytes: Vec<u8>,
        status: u32,
        /// Wire length if different from `bytes.len()` (truncation, too big).
        len: Option<u32>,
        vlan_tci: u16,
        vlan_tpid: u16,
    }

    fn fake(bytes: Vec<u8>) -> Fake {
        Fake {
            bytes,
            status: libc::TP_STATUS_USER,
            ..Fake::default()
        }
    }

    /// Lay `frames` out in block `block` the way TPACKET_V3 does and hand
    /// the block to user space.
    fn write_block(region: &mut Region, block: usize, frames: &[Fake]) {
        write_block_sized(region, BLOCK, block, frames);
    }

    fn write_block_sized(region: &mut Region, block_size: usize, block: usize, frames: &[Fake]) {
        let base = block * block_size;
        const MAC: usize = 64;
        assert!(region.write_u32(base + BLOCK_NUM_PKTS, frames.len() as u32));
        assert!(region.write_u32(base + BLOCK_FIRST_PKT, 48));
        let mut off = 48;
        for (i, f) in frames.iter().enumerate() {
            let hdr = base + off;
            let next = if i + 1 == frames.len() {
                0
            } else {
                (MAC + f.bytes.len()).div_ceil(16) * 16
            };
            assert!(region.write_u32(hdr + H_NEXT_OFFSET, next as u32));
            assert!(region.write_u32(hdr + H_SNAPLEN, f.bytes.len() as u32));
            assert!(region.write_u32(hdr + H_LEN, f.len.unwrap_or(f.bytes.len() as u32)));
            assert!(region.write_u32(hdr + H_STATUS, f.status));
            assert!(region.write_u16(hdr + H_MAC, MAC as u16));
            assert!(region.write_u32(hdr + H_VLAN_TCI, u32::from(f.vlan_tci)));
            assert!(region.write_u16(hdr + H_VLAN_TPID, f.vlan_tpid));
            assert!(region.copy_in(hdr + MAC, &f.bytes));
            off += next;
        }
        region
            .atomic_u32(base + BLOCK_STATUS)
            .unwrap()
            .store(libc::TP_STATUS_USER, Ordering::Release);
    }

    fn block_status(region: &Region, block: usize) -> u32 {
        region
            .atomic_u32(block * BLOCK + BLOCK_STATUS)
            .unwrap()
            .load(Ordering::Acquire)
    }

    fn walk(
        region: &mut Region,
        rx: &mut RxRing,
        stats: &mut PortStats,
        pool: &mut Vec<AfPacketFrame>,
        max: usize,
    ) -> Vec<AfPacketFrame> {
        let mut out = Vec::new();
        let n = rx_walk(
            region,
            rx,
            RxContext { mtu: MTU, stats },
            pool,
            &mut out,
            max,
        );
        assert_eq!(n, out.len());
        out
    }

    fn udp(len: usize, id: u8) -> Vec<u8> {
        let payload = vec![id; len - 42];
        build::eth_ipv4_udp(
            A,
            B,
            Ipv4Addr::new(10, 0, 0, 1),
            1000,
            Ipv4Addr::new(10, 0, 0, 2),
            2000,
            &payload,
        )
    }

    #[test]
    fn walk_copies_frames_returns_blocks_and_wraps() {
        let mut region = Region::anonymous(2 * BLOCK).unwrap();
        let mut rx = RxRing::new(BLOCK, 2);
        let (mut stats, mut pool) = (PortStats::default(), pool(16));
        let b0 = [fake(udp(60, 1)), fake(udp(700, 2)), fake(udp(100, 3))];
        let b1 = [fake(udp(1000, 4)), fake(udp(42, 5))];
        write_block(&mut region, 0, &b0);
        write_block(&mut region, 1, &b1);
        let out = walk(&mut region, &mut rx, &mut stats, &mut pool, 64);
        let want: Vec<&[u8]> = b0.iter().chain(&b1).map(|f| &f.bytes[..]).collect();
        let got: Vec<&[u8]> = out.iter().map(|f| f.data()).collect();
        assert_eq!(got, want);
        assert_eq!(block_status(&region, 0), libc::TP_STATUS_KERNEL);
        assert_eq!(block_status(&region, 1), libc::TP_STATUS_KERNEL);
        assert_eq!(stats.rx_frames, 5);
        assert!(!rx.has_open_frames());
        // Nothing more until the kernel hands block 0 back again.
        assert!(walk(&mut region, &mut rx, &mut stats, &mut pool, 64).is_empty());
        write_block(&mut region, 0, &[fake(udp(80, 6))]);
        let out = walk(&mut region, &mut rx, &mut stats, &mut pool, 64);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].data(), &udp(80, 6)[..]);
    }

    #[test]
    fn a_burst_stops_inside_a_block_and_the_next_resumes_there() {
        let mut region = Region::anonymous(2 * BLOCK).unwrap();
        let mut rx = RxRing::new(BLOCK, 2);
        let (mut stats, mut pool) = (PortStats::default(), pool(16));
        let frames: Vec<Fake> = (0..5).map(|i| fake(udp(60 + i, i as u8))).collect();
        write_block(&mut region, 0, &frames);
        let mut got = Vec::new();
        for expect in [2, 2, 1] {
            let out = walk(&mut region, &mut rx, &mut stats, &mut pool, 2);
            assert_eq!(out.len(), expect);
            got.extend(out.iter().map(|f| f.data().to_vec()));
            let released = block_status(&region, 0) == libc::TP_STATUS_KERNEL;
            assert_eq!(released, got.len() == 5, "block returned only when walked");
            assert_eq!(rx.has_open_frames(), got.len() < 5);
        }
        assert_eq!(
            got,
            frames.iter().map(|f| f.bytes.clone()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn an_empty_pool_leaves_frames_in_the_ring() {
        let mut region = Region::anonymous(BLOCK).unwrap();
        let mut rx = RxRing::new(BLOCK, 1);
        let (mut stats, mut pool) = (PortStats::default(), pool(1));
        write_block(&mut region, 0, &[fake(udp(60, 1)), fake(udp(61, 2))]);
        let first = walk(&mut region, &mut rx, &mut stats, &mut pool, 64);
        assert_eq!(first.len(), 1);
        assert_eq!(stats.rx_pool_empty, 1);
        assert_eq!(block_status(&region, 0), libc::TP_STATUS_USER);
        pool.extend(first);
        let second = walk(&mut region, &mut rx, &mut stats, &mut pool, 64);
        assert_eq!(second[0].data(), &udp(61, 2)[..]);
        assert_eq!(block_status(&region, 0), libc::TP_STATUS_KERNEL);
    }

    #[test]
    fn status_flags_drive_checks_and_fixups() {
        const BIG_BLOCK: usize = 4 * BLOCK;
        let mut region = Region::anonymous(BIG_BLOCK).unwrap();
        let mut rx = RxRing::new(BIG_BLOCK, 1);
        let (mut stats, mut pool) = (PortStats::default(), pool(16));

        // CHECKSUM_PARTIAL TCP: the field holds the pseudo-header sum.
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let good_tcp = build::eth_ipv4_tcp(A, B, src, 40000, dst, 80, tcp_flags::SYN, 7, 0, b"");
        let mut partial_tcp = good_tcp.clone();
        let pseudo = checksum::pseudo_header_sum(src, dst, ipv4::protocol::TCP, 20);
        partial_tcp[14 + 20 + 16..14 + 20 + 18].copy_from_slice(&pseudo.to_be_bytes());
        assert_ne!(partial_tcp, good_tcp);

        let untagged = udp(100, 9);
        let tagged = build::with_vlan(&untagged, 42);
        let qinq_outer = {
            let mut t = build::with_vlan(&untagged, 5);
            t[12..14].copy_from_slice(&0x88a8u16.to_be_bytes());
            t
        };
        let frames = [
            Fake {
                status: libc::TP_STATUS_USER | libc::TP_STATUS_CSUM_VALID,
                ..fake(udp(60, 1))
            },
            Fake {
                status: libc::TP_STATUS_USER | libc::TP_STATUS_CSUMNOTREADY,
                ..fake(partial_tcp)
            },
            Fake {
                status: libc::TP_STATUS_USER | libc::TP_STATUS_VLAN_VALID,
                vlan_tci: 42,
                ..fake(untagged.clone())
            },
            Fake {
                status: libc::TP_STATUS_USER
                    | libc::TP_STATUS_VLAN_VALID
                    | libc::TP_STATUS_VLAN_TPID_VALID,
                vlan_tci: 5,
                vlan_tpid: 0x88a8,
                ..fake(untagged.clone())
            },
            // Too big: 1515 bytes untagged on an MTU of 1500.
            fake(udp(1515, 3)),
            // Too big once its stripped tag is counted: 1515 + 4 > 1518.
            Fake {
                status: libc::TP_STATUS_USER | libc::TP_STATUS_VLAN_VALID,
                vlan_tci: 1,
                ..fake(udp(1515, 4))
            },
            // Truncated by the ring.
            Fake {
                len: Some(300),
                ..fake(udp(200, 5))
            },
            fake(udp(1514, 6)),
        ];
        write_block_sized(&mut region, BIG_BLOCK, 0, &frames);
        let out = walk(&mut region, &mut rx, &mut stats, &mut pool, 64);
        let got: Vec<(&[u8], bool)> = out
            .iter()
            .map(|f| (f.data(), f.checksum_verified()))
            .collect();
        assert_eq!(
            got,
            vec![
                (&udp(60, 1)[..], true),
                (&good_tcp[..], true),
                (&tagged[..], false),
                (&qinq_outer[..], false),
                (&udp(1514, 6)[..], false),
            ]
        );
        assert_eq!(stats.rx_csum_completed, 1);
        assert_eq!(stats.rx_vlan_restored, 2);
        assert_eq!(stats.rx_too_big, 2);
        assert_eq!(stats.rx_truncated, 1);
        assert_eq!(stats.rx_frames, 5);
        assert_eq!(pool.len() + out.len(), 16);
    }

    proptest! {
        /// Whatever the kernel (or a bug) leaves in the ring, the walk stays
        /// in bounds, never panics, respects `max` and loses no buffer.
        #[test]
        fn garbage_rings_never_panic_or_leak(
            bytes in proptest::collection::vec(any::<u8>(), 2 * BLOCK),
            max in 0usize..80,
        ) {
            let mut region = Region::anonymous(2 * BLOCK).unwrap();
            prop_assert!(region.copy_in(0, &bytes));
            for b in 0..2 {
                region.atomic_u32(b * BLOCK + BLOCK_STATUS).unwrap()
                    .store(libc::TP_STATUS_USER, Ordering::Release);
            }
            let mut rx = RxRing::new(BLOCK, 2);
            let (mut stats, mut pool) = (PortStats::default(), pool(8));
            let mut held = Vec::new();
            for _ in 0..3 {
                let out = walk(&mut region, &mut rx, &mut stats, &mut pool, max);
                prop_assert!(out.len() <= max);
                for f in &out {
                    prop_assert!(f.data().len() <= fixup::max_frame_len(MTU, true));
                }
                held.extend(out);
            }
            prop_assert_eq!(pool.len() + held.len(), 8);
        }
    }

    fn tx_frames(lens: &[usize]) -> Vec<AfPacketFrame> {
        let mut p = pool(lens.len());
        for (f, (&len, id)) in p.iter_mut().zip(lens.iter().zip(0u8..)) {
            let bytes = udp(len, id);
            f.buf[..len].copy_from_slice(&bytes);
            f.len = len;
        }
        p
    }

    #[test]
    fn tx_fill_uses_free_slots_in_order_and_stops_at_a_busy_one() {
        // Two blocks of two 2048-byte slots.
        let mut region = Region::anonymous(2 * BLOCK).unwrap();
        let mut tx = TxRing::new(0, BLOCK, 2, 2048);
        assert_eq!(tx.frame_count(), 4);
        let (mut stats, mut pool) = (PortStats::default(), Vec::with_capacity(16));
        let mut frames = tx_frames(&[60, 100, 1516, 200, 300, 400]);
        let (taken, queued) = tx_fill(
            &mut region,
            &mut tx,
            MTU,
            &mut stats,
            &mut pool,
            &mut frames,
        );
        // The 1516-byte untagged frame is above the MTU: taken and dropped.
        assert_eq!((taken, queued), (5, 4));
        assert_eq!(stats.tx_too_big, 1);
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].data(), &udp(400, 5)[..]);
        assert_eq!(pool.len(), 5);
        let expect = [
            (0, udp(60, 0)),
            (2048, udp(100, 1)),
            (BLOCK, udp(200, 3)),
            (BLOCK + 2048, udp(300, 4)),
        ];
        for (slot, bytes) in &expect {
            let status = region
                .atomic_u32(slot + H_STATUS)
                .unwrap()
                .load(Ordering::Acquire);
            assert_eq!(status, libc::TP_STATUS_SEND_REQUEST);
            assert_eq!(region.read_u32(slot + H_LEN), Some(bytes.len() as u32));
            let mut data = vec![0u8; bytes.len()];
            assert!(region.copy_out(slot + TX_DATA_OFFSET, &mut data));
            assert_eq!(&data, bytes);
        }
        // Full ring: nothing taken.
        let (taken, _) = tx_fill(
            &mut region,
            &mut tx,
            MTU,
            &mut stats,
            &mut pool,
            &mut frames,
        );
        assert_eq!(taken, 0);
        // The kernel frees slot 0: the cursor wrapped to it.
        region
            .atomic_u32(H_STATUS)
            .unwrap()
            .store(libc::TP_STATUS_AVAILABLE, Ordering::Release);
        let (taken, queued) = tx_fill(
            &mut region,
            &mut tx,
            MTU,
            &mut stats,
            &mut pool,
            &mut frames,
        );
        assert_eq!((taken, queued), (1, 1));
        assert_eq!(region.read_u32(H_LEN), Some(400));
        assert!(frames.is_empty());
        assert_eq!(stats.tx_frames, 5);
    }
}
