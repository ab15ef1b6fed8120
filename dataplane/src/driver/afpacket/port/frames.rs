//! The `TPACKET_V2` RX ring ([`RxMode::Frames`](super::super::RxMode)):
//! fixed slots, each with its own status word.
//!
//! The kernel fills slots in order `0..frame_count`, round robin, and
//! marks each one `TP_STATUS_USER` (and wakes `poll(2)`) as soon as its
//! frame is written: no block to fill, no retire timer. We read the status
//! with `Acquire`, copy the frame out, and hand the slot back by storing
//! `TP_STATUS_KERNEL` with `Release`. A slot is `frame_size` bytes,
//! `frames_per_block` to a block (blocks are whole pages; the kernel
//! allocates them separately, so a slot never crosses a block).

use super::{RxContext, RxHeader, take_frame};
use crate::driver::afpacket::AfPacketFrame;
use crate::driver::afpacket::pool::Pools;
use crate::driver::sys::Region;
use std::mem::offset_of;
use std::sync::atomic::Ordering;

/// Offsets in `struct tpacket2_hdr`.
pub(super) const H_STATUS: usize = offset_of!(libc::tpacket2_hdr, tp_status);
pub(super) const H_LEN: usize = offset_of!(libc::tpacket2_hdr, tp_len);
pub(super) const H_SNAPLEN: usize = offset_of!(libc::tpacket2_hdr, tp_snaplen);
pub(super) const H_MAC: usize = offset_of!(libc::tpacket2_hdr, tp_mac);
pub(super) const H_VLAN_TCI: usize = offset_of!(libc::tpacket2_hdr, tp_vlan_tci);
pub(super) const H_VLAN_TPID: usize = offset_of!(libc::tpacket2_hdr, tp_vlan_tpid);

const _: () = assert!(H_STATUS == 0 && H_LEN == 4 && H_SNAPLEN == 8 && H_MAC == 12);
const _: () = assert!(H_VLAN_TCI == 24 && H_VLAN_TPID == 26);

/// Where the kernel puts a V2 frame's MAC header in its slot, at most:
/// `TPACKET_ALIGN(TPACKET2_HDRLEN + 16) - 14` (`tpacket_rcv` with no
/// `PACKET_RESERVE` and no vnet header). A slot must hold this much plus
/// the largest frame.
pub(in crate::driver::afpacket) const MAC_OFFSET: usize =
    (libc::TPACKET2_HDRLEN + 16).next_multiple_of(libc::TPACKET_ALIGNMENT) - 14;

const _: () = assert!(MAC_OFFSET == 66);

/// V2 RX ring geometry and the walk's cursor.
#[derive(Debug)]
pub(in crate::driver::afpacket) struct FrameRing {
    pub(super) block_size: usize,
    pub(super) block_count: usize,
    pub(super) frame_size: usize,
    frames_per_block: usize,
    /// Next slot to look at.
    cursor: usize,
}

impl FrameRing {
    pub(super) fn new(block_size: usize, block_count: usize, frame_size: usize) -> Self {
        FrameRing {
            block_size,
            block_count,
            frame_size,
            frames_per_block: block_size / frame_size.max(1),
            cursor: 0,
        }
    }

    pub(super) fn frame_count(&self) -> usize {
        self.frames_per_block * self.block_count
    }

    pub(super) fn len_bytes(&self) -> usize {
        self.block_size * self.block_count
    }

    fn slot_offset(&self, index: usize) -> usize {
        let fpb = self.frames_per_block.max(1);
        (index / fpb) * self.block_size + (index % fpb) * self.frame_size
    }

    fn slot_is_user(&self, region: &Region, slot: usize) -> bool {
        region
            .atomic_u32(slot + H_STATUS)
            .is_some_and(|s| s.load(Ordering::Acquire) & libc::TP_STATUS_USER != 0)
    }

    /// The slot at the cursor holds a frame (no syscall needed to know).
    pub(super) fn has_frames(&self, region: &Region) -> bool {
        self.slot_is_user(region, self.slot_offset(self.cursor))
    }

    /// Walk the ring: copy up to `max` frames into pool buffers appended
    /// to `out`, returning each slot as soon as it is copied.
    pub(super) fn walk(
        &mut self,
        region: &mut Region,
        mut ctx: RxContext<'_>,
        pool: &mut Pools,
        out: &mut Vec<AfPacketFrame>,
        max: usize,
    ) -> usize {
        let count = self.frame_count().max(1);
        let mut taken = 0;
        while taken < max {
            let slot = self.slot_offset(self.cursor);
            if !self.slot_is_user(region, slot) {
                break;
            }
            if !pool.ready() {
                // Leave the frame in the ring; the next burst takes it.
                ctx.stats.rx_pool_empty += 1;
                break;
            }
            match read_header(region, slot, self.frame_size) {
                Some(h) => {
                    let end = slot + self.frame_size;
                    if let Some(frame) = take_frame(region, &h, slot, end, &mut ctx, pool) {
                        ctx.stats.rx_frames += 1;
                        ctx.stats.rx_bytes += frame.len as u64;
                        out.push(frame);
                        taken += 1;
                    }
                }
                None => ctx.stats.rx_ring_errors += 1,
            }
            if let Some(status) = region.atomic_u32(slot + H_STATUS) {
                status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
            }
            self.cursor = (self.cursor + 1) % count;
        }
        taken
    }
}

fn read_header(region: &Region, slot: usize, frame_size: usize) -> Option<RxHeader> {
    if size_of::<libc::tpacket2_hdr>() > frame_size {
        return None;
    }
    Some(RxHeader {
        snaplen: region.read_u32(slot + H_SNAPLEN)? as usize,
        len: region.read_u32(slot + H_LEN)? as usize,
        status: region.read_u32(slot + H_STATUS)?,
        mac: usize::from(region.read_u16(slot + H_MAC)?),
        vlan_tci: region.read_u16(slot + H_VLAN_TCI)?,
        vlan_tpid: region.read_u16(slot + H_VLAN_TPID)?,
    })
}
