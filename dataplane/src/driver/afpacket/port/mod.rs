//! One packet socket on one interface: its RX ring (`TPACKET_V2` frames
//! or `TPACKET_V3` blocks, see [`RxMode`]) and its TX ring, and the walks
//! over them.
//!
//! Ring protocol (Documentation/networking/packet_mmap.rst):
//!
//! * RX: see `frames.rs` (V2, a status word per slot, handed over per
//!   frame) and `blocks.rs` (V3, a status word per block, handed over when
//!   the block is full or its retire timer fires). Both copy each frame
//!   into a pool buffer with the same checks ([`take_frame`]).
//! * TX slots (`tx_frame_count` frames of `tx_frame_size` bytes,
//!   `frames_per_block` to a block) are used in order, with the header of
//!   the socket's version (a socket has one `PACKET_VERSION` for both
//!   rings: `tpacket2_hdr` or `tpacket3_hdr`). A slot is free when its
//!   `tp_status` is `TP_STATUS_AVAILABLE`; we copy the frame after the
//!   header (offset 32 in V2, 48 in V3), set `tp_len`, and store
//!   `TP_STATUS_SEND_REQUEST` with `Release`. The kernel sends requested
//!   slots in ring order and marks them available again when the skb is
//!   freed, so the first busy slot at the cursor means the ring is full.

mod blocks;
mod frames;

use super::fixup;
use super::pool::{GSO_MAX_FRAME, Pools};
use super::{AfPacketFrame, PortStats, RxMode};
use crate::driver::Frame;
use crate::driver::sys::Region;
use crate::packet::Offload;
use crate::wire::{ethernet, vnet};
pub(super) use frames::MAC_OFFSET as V2_MAC_OFFSET;
use std::sync::atomic::Ordering;

/// Where TX frame data starts in a slot: `TPACKET3_HDRLEN - sizeof(struct
/// sockaddr_ll)`, i.e. the header rounded up to `TPACKET_ALIGNMENT` (the
/// kernel's default when `PACKET_TX_HAS_OFF` is not set); likewise for V2.
const V3_TX_DATA_OFFSET: usize = libc::TPACKET3_HDRLEN - std::mem::size_of::<libc::sockaddr_ll>();
const V2_TX_DATA_OFFSET: usize = libc::TPACKET2_HDRLEN - std::mem::size_of::<libc::sockaddr_ll>();

const _: () = assert!(V3_TX_DATA_OFFSET == 48 && V2_TX_DATA_OFFSET == 32);

/// Where the fields a TX slot needs are in the socket's header version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TxLayout {
    status: usize,
    len: usize,
    snaplen: usize,
    /// V3's `tp_next_offset` (must be 0 on TX); none in V2.
    next_offset: Option<usize>,
    data: usize,
}

impl TxLayout {
    const fn of(mode: RxMode) -> TxLayout {
        match mode {
            RxMode::Frames => TxLayout {
                status: frames::H_STATUS,
                len: frames::H_LEN,
                snaplen: frames::H_SNAPLEN,
                next_offset: None,
                data: V2_TX_DATA_OFFSET,
            },
            RxMode::Blocks => TxLayout {
                status: blocks::H_STATUS,
                len: blocks::H_LEN,
                snaplen: blocks::H_SNAPLEN,
                next_offset: Some(blocks::H_NEXT_OFFSET),
                data: V3_TX_DATA_OFFSET,
            },
        }
    }
}

/// Bytes of a TX slot before the frame, in the header version of `mode`.
pub(super) const fn tx_data_offset(mode: RxMode) -> usize {
    TxLayout::of(mode).data
}

/// The RX ring of one socket, in the socket's header version.
#[derive(Debug)]
pub(super) enum RxRing {
    Frames(frames::FrameRing),
    Blocks(blocks::BlockRing),
    /// No ring: frames arrive by `recvmmsg` ([`RxPath::Recvmsg`](super::RxPath::Recvmsg),
    /// see `receiver.rs`).
    None,
}

impl RxRing {
    /// A V2 ring of `block_count` blocks of `block_size` bytes, cut into
    /// slots of `frame_size` bytes.
    pub(super) fn frames(block_size: usize, block_count: usize, frame_size: usize) -> Self {
        RxRing::Frames(frames::FrameRing::new(block_size, block_count, frame_size))
    }

    /// A V3 ring of `block_count` blocks of `block_size` bytes.
    pub(super) fn blocks(block_size: usize, block_count: usize) -> Self {
        RxRing::Blocks(blocks::BlockRing::new(block_size, block_count))
    }

    pub(super) fn len_bytes(&self) -> usize {
        match self {
            RxRing::Frames(r) => r.len_bytes(),
            RxRing::Blocks(r) => r.len_bytes(),
            RxRing::None => 0,
        }
    }

    /// Frames are waiting at the walk's cursor (no syscall needed to know).
    pub(super) fn has_frames(&self, region: &Region) -> bool {
        match self {
            RxRing::Frames(r) => r.has_frames(region),
            RxRing::Blocks(r) => r.has_frames(region),
            RxRing::None => false,
        }
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
    layout: TxLayout,
    /// `PACKET_VNET_HDR`: each slot's data starts with a `virtio_net_hdr`.
    vnet: Option<TxVnet>,
}

/// What the `virtio_net_hdr` in front of each TX slot's frame says, on a
/// socket with `PACKET_VNET_HDR` (with `gso`, and on a TX-ring socket
/// without it, for [`TxVnet::linear_max_bytes`]).
///
/// Why the linear part matters (Linux `tpacket_snd`/`tpacket_fill_skb`):
/// the kernel copies the first `max(hdr_len, hard_header_len)` bytes of a
/// slot into the new skb and attaches the rest as zero-copy fragments of
/// the ring's pages. A veth (or any device that hands the skb to another
/// stack) must not keep those pages, so it copies every fragment again
/// into a freshly allocated page (`skb_copy_ubufs`): 5.7 % of a worker
/// echoing UDP at 180k/s, plus the page allocation. A frame copied whole
/// into the linear part costs one small copy and no page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::driver::afpacket) struct TxVnet {
    /// Super-packets leave whole (the port's `gso`).
    pub(in crate::driver::afpacket) gso: bool,
    /// Frames without offload up to this many bytes go whole into the
    /// skb's linear part (`hdr_len` = the frame's length); longer ones
    /// from the Ethernet header on as fragments of the ring's pages.
    pub(in crate::driver::afpacket) linear_max_bytes: usize,
}

impl TxRing {
    /// Slots in the header version of `mode`.
    pub(super) fn new(
        mode: RxMode,
        base: usize,
        block_size: usize,
        block_count: usize,
        frame_size: usize,
        vnet: Option<TxVnet>,
    ) -> Self {
        TxRing {
            base,
            block_size,
            block_count,
            frame_size,
            frames_per_block: block_size / frame_size.max(1),
            cursor: 0,
            kick_pending: false,
            layout: TxLayout::of(mode),
            vnet,
        }
    }

    pub(super) fn frame_count(&self) -> usize {
        self.frames_per_block * self.block_count
    }

    pub(super) fn len_bytes(&self) -> usize {
        self.block_size * self.block_count
    }

    /// Bytes of the `virtio_net_hdr` before each frame (0 without one).
    fn vnet_len(&self) -> usize {
        if self.vnet.is_some() {
            vnet::HEADER_LEN
        } else {
            0
        }
    }

    /// Super-packets leave whole.
    fn gso(&self) -> bool {
        self.vnet.is_some_and(|v| v.gso)
    }

    /// Largest frame a slot holds.
    pub(super) fn max_payload(&self) -> usize {
        self.frame_size
            .saturating_sub(self.layout.data + self.vnet_len())
    }

    fn slot_offset(&self, index: usize) -> usize {
        let fpb = self.frames_per_block.max(1);
        self.base + (index / fpb) * self.block_size + (index % fpb) * self.frame_size
    }
}

/// What the RX walk needs besides the ring: limits and counters.
pub(super) struct RxContext<'a> {
    pub(super) mtu: u32,
    /// `PACKET_VNET_HDR`: a `virtio_net_hdr` precedes each frame.
    pub(super) gso: bool,
    pub(super) stats: &'a mut PortStats,
}

/// Walk the RX ring: copy up to `max` frames into pool buffers appended to
/// `out`. No syscall, no allocation beyond `out`'s spare capacity.
pub(super) fn rx_walk(
    region: &mut Region,
    rx: &mut RxRing,
    ctx: RxContext<'_>,
    pool: &mut Pools,
    out: &mut Vec<AfPacketFrame>,
    max: usize,
) -> usize {
    match rx {
        RxRing::Frames(r) => r.walk(region, ctx, pool, out, max),
        RxRing::Blocks(r) => r.walk(region, ctx, pool, out, max),
        RxRing::None => 0,
    }
}

/// One frame's header fields, whatever the ring's version (or the
/// `PACKET_AUXDATA` of a frame received by `recvmmsg`, see `receiver.rs`).
#[derive(Debug)]
pub(super) struct RxHeader {
    /// Bytes of the frame at hand (without a tag the kernel moved to
    /// `vlan_tci`).
    pub(super) snaplen: usize,
    /// Bytes of the frame on the wire (likewise).
    pub(super) len: usize,
    pub(super) status: u32,
    /// Offset of the MAC header from the frame's header.
    pub(super) mac: usize,
    pub(super) vlan_tci: u16,
    pub(super) vlan_tpid: u16,
}

impl RxHeader {
    /// The kernel moved an 802.1Q tag into `vlan_tci` (to be put back).
    pub(super) fn tag_in_meta(&self) -> bool {
        self.status & libc::TP_STATUS_VLAN_VALID != 0
    }

    /// The tag to put back at offset 12: TPID and TCI, big-endian.
    pub(super) fn tag(&self) -> [u8; 4] {
        let tpid = if self.status & libc::TP_STATUS_VLAN_TPID_VALID != 0 && self.vlan_tpid != 0 {
            self.vlan_tpid
        } else {
            ethernet::ethertype::VLAN
        };
        let [a, b] = tpid.to_be_bytes();
        let [c, d] = self.vlan_tci.to_be_bytes();
        [a, b, c, d]
    }
}

/// The size checks of a received frame (`tagged`: it carries a tag, in
/// the frame or in `h`; `tag_len`: 4 when the tag is in `h`): at most the
/// MTU unless it is a super-packet (`rx_too_big`), and not truncated
/// (`rx_truncated`). Counts the frame it refuses.
pub(super) fn rx_admit(
    h: &RxHeader,
    tagged: bool,
    tag_len: usize,
    offload: Offload,
    mtu: u32,
    stats: &mut PortStats,
) -> bool {
    // A super-packet is as long as its segments together; each segment is
    // held to the MTU by the pipeline (per `gso_size`).
    let limit = if offload.is_gso() {
        GSO_MAX_FRAME
    } else {
        fixup::max_frame_len(mtu, tagged)
    };
    if h.len + tag_len > limit {
        stats.rx_too_big += 1;
        return false;
    }
    if h.snaplen < h.len {
        stats.rx_truncated += 1;
        return false;
    }
    true
}

/// Mark a frame taken from either RX path (its bytes in place, a tag put
/// back): its offload, whether its checksum is verified (completing a
/// partial one), and the counters of both.
pub(super) fn rx_finish(
    frame: &mut AfPacketFrame,
    h: &RxHeader,
    offload: Offload,
    stats: &mut PortStats,
) {
    frame.offload = Offload::NONE;
    if h.tag_in_meta() {
        stats.rx_vlan_restored += 1;
    }
    frame.checksum_verified = h.status & libc::TP_STATUS_CSUM_VALID != 0;
    if offload.is_gso() {
        // The seed stays: whoever sends the segments completes each one.
        // A local sender's super-packet is trusted, as the kernel trusts a
        // CHECKSUM_PARTIAL skb.
        frame.offload = offload;
        frame.checksum_verified = true;
        stats.rx_gso_frames += 1;
    } else if h.status & libc::TP_STATUS_CSUMNOTREADY != 0 {
        if fixup::complete_l4_checksum(frame.buf.get_mut(..frame.len).unwrap_or_default()) {
            stats.rx_csum_completed += 1;
            frame.checksum_verified = true;
        } else {
            stats.rx_csum_partial_left += 1;
        }
    }
}

/// The [`Offload`] of a received `virtio_net_hdr` (`tag_len`: a tag put
/// back in front of the checksum start). `None` for one the driver cannot
/// pass on (UFO, an unknown GSO type). A frame that is not a super-packet
/// gets [`Offload::NONE`]: its checksum is completed in software (from
/// `TP_STATUS_CSUMNOTREADY`), as without gso.
pub(super) fn decode_offload(raw: &[u8; vnet::HEADER_LEN], tag_len: u16) -> Option<Offload> {
    let o = Offload::decode(raw, tag_len).ok()?;
    Some(if o.is_gso() { o } else { Offload::NONE })
}

/// Apply the size checks and copy one frame into a pool buffer, restoring a
/// VLAN tag the kernel moved into metadata and completing a partial
/// checksum (with `gso`: taking the `virtio_net_hdr` in front of the frame
/// as its [`Offload`], see [`rx_offload`]). `None` when the frame is
/// dropped (counted).
fn take_frame(
    region: &Region,
    h: &RxHeader,
    hdr: usize,
    block_end: usize,
    ctx: &mut RxContext<'_>,
    pool: &mut Pools,
) -> Option<AfPacketFrame> {
    let (mtu, stats) = (ctx.mtu, &mut *ctx.stats);
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
    let tag_in_meta = h.tag_in_meta();
    let tag_len = if tag_in_meta { 4 } else { 0 };
    let tagged = tag_in_meta
        || region
            .read_u16(data + 12)
            .is_some_and(|et| h.snaplen >= 14 && fixup::is_vlan_tpid(u16::from_be(et)));
    let offload = if ctx.gso {
        match rx_offload(region, data, hdr, tag_len as u16) {
            Some(o) => o,
            None => {
                stats.rx_offload_bad += 1;
                return None;
            }
        }
    } else {
        Offload::NONE
    };
    if !rx_admit(h, tagged, tag_len, offload, mtu, stats) {
        return None;
    }
    let mut frame = pool.pop_for(h.snaplen + tag_len)?;
    let len = h.snaplen + tag_len;
    let copied = match frame.buf.get_mut(..len) {
        None => false,
        Some(dst) if tag_in_meta && h.snaplen >= 12 => {
            let (addrs, rest) = dst.split_at_mut(12);
            let (tag, payload) = rest.split_at_mut(4);
            tag.copy_from_slice(&h.tag());
            region.copy_out(data, addrs) && region.copy_out(data + 12, payload)
        }
        Some(dst) => region.copy_out(data, &mut dst[..h.snaplen]),
    };
    if !copied {
        stats.rx_ring_errors += 1;
        pool.push(frame);
        return None;
    }
    frame.len = if tag_in_meta && h.snaplen < 12 {
        h.snaplen
    } else {
        len
    };
    rx_finish(&mut frame, h, offload, stats);
    Some(frame)
}

/// The `virtio_net_hdr` in front of the frame at `data` (the kernel writes
/// it right before the MAC header), shifted by a VLAN tag put back in front
/// of the checksum start. `None` for a header outside the slot or one the
/// driver cannot pass on (UFO, an unknown GSO type).
fn rx_offload(region: &Region, data: usize, hdr: usize, tag_len: u16) -> Option<Offload> {
    let at = data.checked_sub(vnet::HEADER_LEN)?;
    if at < hdr {
        return None;
    }
    let mut raw = [0u8; vnet::HEADER_LEN];
    if !region.copy_out(at, &mut raw) {
        return None;
    }
    decode_offload(&raw, tag_len)
}

/// Fill free TX slots from the front of `frames`; returns how many frames it
/// took (sent or dropped as too big). Frames it took go back to `pool`.
pub(super) fn tx_fill(
    region: &mut Region,
    tx: &mut TxRing,
    mtu: u32,
    stats: &mut PortStats,
    pool: &mut Pools,
    frames: &mut Vec<AfPacketFrame>,
) -> (usize, usize) {
    let count = tx.frame_count();
    let mut taken = 0;
    let mut queued = 0;
    for frame in frames.iter() {
        let bytes = frame.data();
        let gso = tx.gso() && frame.offload.is_gso();
        if !tx_fits(frame, mtu, tx.gso(), tx.max_payload()) {
            stats.tx_too_big += 1;
            taken += 1;
            continue;
        }
        let slot = tx.slot_offset(tx.cursor);
        let l = tx.layout;
        let Some(status) = region.atomic_u32(slot + l.status) else {
            break;
        };
        if status.load(Ordering::Acquire) != libc::TP_STATUS_AVAILABLE {
            break;
        }
        let vnet_len = tx.vnet_len();
        let len = bytes.len() as u32;
        let slot_len = (vnet_len + bytes.len()) as u32;
        let ok = tx.vnet.is_none_or(|v| {
            region.copy_in(
                slot + l.data,
                &vnet_header(&frame.offload, bytes, v.linear_max_bytes),
            )
        }) && region.copy_in(slot + l.data + vnet_len, bytes)
            && l.next_offset
                .is_none_or(|off| region.write_u32(slot + off, 0))
            && region.write_u32(slot + l.len, slot_len)
            && region.write_u32(slot + l.snaplen, slot_len);
        if !ok {
            break;
        }
        if let Some(status) = region.atomic_u32(slot + l.status) {
            status.store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        }
        tx.cursor = (tx.cursor + 1) % count.max(1);
        stats.tx_frames += 1;
        stats.tx_bytes += u64::from(len);
        stats.tx_gso_frames += u64::from(gso);
        taken += 1;
        queued += 1;
    }
    for frame in frames.drain(..taken) {
        pool.push(frame);
    }
    (taken, queued)
}

/// Whether `frame` may leave a port of `mtu`: at most the MTU (plus its
/// Ethernet header and tag) unless it is a super-packet on a socket with
/// vnet headers (`vnet`), and at most `max_payload` bytes (a TX slot's
/// room, or the largest super-packet) either way.
pub(super) fn tx_fits(frame: &AfPacketFrame, mtu: u32, vnet: bool, max_payload: usize) -> bool {
    let bytes = frame.data();
    let tagged = bytes
        .get(12..14)
        .is_some_and(|t| fixup::is_vlan_tpid(u16::from_be_bytes([t[0], t[1]])));
    let gso = vnet && frame.offload.is_gso();
    (gso || bytes.len() <= fixup::max_frame_len(mtu, tagged)) && bytes.len() <= max_payload
}

/// The `virtio_net_hdr` of `o` for `bytes`, sent in front of the frame
/// (at the start of a TX slot's data, or as the first part of a
/// `sendmsg`): the kernel then takes a super-packet whole (segmented by
/// the device, the peer veth, or the kernel's GSO when the device cannot)
/// and a partial checksum for the device to finish. `hdr_len` covers the
/// headers up to the end of the L4 header (VPP's `fill_gso_offload` does
/// the same); a frame that is not a super-packet and has at most
/// `linear_max_bytes` bytes is covered whole (see [`TxVnet`]).
pub(super) fn vnet_header(
    o: &Offload,
    bytes: &[u8],
    linear_max_bytes: usize,
) -> [u8; vnet::HEADER_LEN] {
    let linear = u16::try_from(bytes.len()).ok().filter(|_| !o.is_gso());
    let hdr_len = if let Some(len) = linear.filter(|_| bytes.len() <= linear_max_bytes) {
        len
    } else if o.needs_csum {
        let l4 = usize::from(o.csum_start);
        let l4_len = match o.gso {
            crate::packet::Gso::UdpL4 => 8,
            _ if o.csum_offset == 6 => 8,
            _ => bytes.get(l4 + 12).map_or(20, |d| usize::from(d >> 4) * 4),
        };
        (l4 + l4_len).min(bytes.len()) as u16
    } else {
        ethernet::HEADER_LEN as u16
    };
    o.encode(hdr_len)
}

#[cfg(test)]
mod tests;
