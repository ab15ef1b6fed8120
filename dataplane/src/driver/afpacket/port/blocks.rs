//! The `TPACKET_V3` RX ring ([`RxMode::Blocks`](super::super::RxMode)):
//! variable-size frames packed into blocks the kernel hands over whole.
//!
//! Blocks are filled by the kernel in order `0..block_count`, round robin.
//! A block belongs to user space while its `block_status` has
//! `TP_STATUS_USER`; we read it with `Acquire`, walk its `num_pkts` frames
//! (`offset_to_first_pkt`, then each frame's `tp_next_offset`), and hand it
//! back by storing `TP_STATUS_KERNEL` with `Release` as soon as its last
//! frame is copied out. A burst may stop inside a block (the `max` of the
//! burst, or an empty pool); the cursor remembers where.
//!
//! The kernel marks a block `TP_STATUS_USER` (and wakes `poll(2)`) only
//! when it is full or its retire timer fires (`tp_retire_blk_tov`, at
//! least 1 ms and one jiffy): a lone frame waits for the timer.

use super::{RxContext, RxHeader, take_frame};
use crate::driver::afpacket::pool::Pools;
use crate::driver::afpacket::{AfPacketFrame, PortStats};
use crate::driver::sys::Region;
use std::mem::offset_of;
use std::sync::atomic::Ordering;

/// Offsets in `struct tpacket_block_desc` (the V1 block header).
pub(super) const BLOCK_STATUS: usize =
    offset_of!(libc::tpacket_block_desc, hdr) + offset_of!(libc::tpacket_hdr_v1, block_status);
pub(super) const BLOCK_NUM_PKTS: usize =
    offset_of!(libc::tpacket_block_desc, hdr) + offset_of!(libc::tpacket_hdr_v1, num_pkts);
pub(super) const BLOCK_FIRST_PKT: usize = offset_of!(libc::tpacket_block_desc, hdr)
    + offset_of!(libc::tpacket_hdr_v1, offset_to_first_pkt);

/// Offsets in `struct tpacket3_hdr`.
pub(super) const H_NEXT_OFFSET: usize = offset_of!(libc::tpacket3_hdr, tp_next_offset);
pub(super) const H_SNAPLEN: usize = offset_of!(libc::tpacket3_hdr, tp_snaplen);
pub(super) const H_LEN: usize = offset_of!(libc::tpacket3_hdr, tp_len);
pub(super) const H_STATUS: usize = offset_of!(libc::tpacket3_hdr, tp_status);
pub(super) const H_MAC: usize = offset_of!(libc::tpacket3_hdr, tp_mac);
pub(super) const H_VLAN_TCI: usize =
    offset_of!(libc::tpacket3_hdr, hv1) + offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tci);
pub(super) const H_VLAN_TPID: usize =
    offset_of!(libc::tpacket3_hdr, hv1) + offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tpid);

const _: () = assert!(BLOCK_STATUS == 8 && BLOCK_NUM_PKTS == 12 && BLOCK_FIRST_PKT == 16);
const _: () = assert!(H_STATUS == 20 && H_MAC == 24 && H_VLAN_TCI == 32 && H_VLAN_TPID == 36);

/// V3 RX ring geometry and the walk's cursor.
#[derive(Debug)]
pub(in crate::driver::afpacket) struct BlockRing {
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

impl BlockRing {
    pub(super) fn new(block_size: usize, block_count: usize) -> Self {
        BlockRing {
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

    /// Frames are waiting in an open block, or the next block is ours (no
    /// syscall needed to know).
    pub(super) fn has_frames(&self, region: &Region) -> bool {
        (self.open && self.remaining > 0)
            || (!self.open && block_is_user(region, self.block * self.block_size))
    }

    /// Walk the ring: copy up to `max` frames into pool buffers appended
    /// to `out`.
    pub(super) fn walk(
        &mut self,
        region: &mut Region,
        mut ctx: RxContext<'_>,
        pool: &mut Pools,
        out: &mut Vec<AfPacketFrame>,
        max: usize,
    ) -> usize {
        let mut taken = 0;
        loop {
            if self.open && self.remaining == 0 {
                self.release_block(region);
            }
            if taken >= max {
                break;
            }
            if !self.open && !self.open_block(region, ctx.stats) {
                break;
            }
            if self.remaining == 0 {
                continue;
            }
            if !pool.ready() {
                // Leave the frame in the ring; the next burst takes it.
                ctx.stats.rx_pool_empty += 1;
                break;
            }
            let block_start = self.block * self.block_size;
            let block_end = block_start + self.block_size;
            let hdr = block_start + self.next_off;
            let Some((h, next_offset)) = read_header(region, hdr, block_end) else {
                // A header outside its block: give the whole block back.
                ctx.stats.rx_ring_errors += 1;
                self.remaining = 0;
                continue;
            };
            self.remaining -= 1;
            if self.remaining > 0 {
                if next_offset == 0 {
                    ctx.stats.rx_ring_errors += 1;
                    self.remaining = 0;
                } else {
                    self.next_off += next_offset as usize;
                }
            }
            if let Some(frame) = take_frame(region, &h, hdr, block_end, &mut ctx, pool) {
                ctx.stats.rx_frames += 1;
                ctx.stats.rx_bytes += frame.len as u64;
                out.push(frame);
                taken += 1;
            }
        }
        taken
    }

    fn open_block(&mut self, region: &Region, stats: &mut PortStats) -> bool {
        let base = self.block * self.block_size;
        if !block_is_user(region, base) {
            return false;
        }
        let num = region.read_u32(base + BLOCK_NUM_PKTS).unwrap_or(0);
        let first = region.read_u32(base + BLOCK_FIRST_PKT).unwrap_or(0) as usize;
        self.open = true;
        self.next_off = first;
        self.remaining = num;
        if num > 0 && first >= self.block_size {
            stats.rx_ring_errors += 1;
            self.remaining = 0;
        }
        true
    }

    fn release_block(&mut self, region: &Region) {
        let base = self.block * self.block_size;
        if let Some(status) = region.atomic_u32(base + BLOCK_STATUS) {
            status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
        }
        self.open = false;
        self.remaining = 0;
        self.block = (self.block + 1) % self.block_count.max(1);
    }
}

fn block_is_user(region: &Region, base: usize) -> bool {
    region
        .atomic_u32(base + BLOCK_STATUS)
        .is_some_and(|s| s.load(Ordering::Acquire) & libc::TP_STATUS_USER != 0)
}

/// A V3 frame header and its `tp_next_offset`.
fn read_header(region: &Region, hdr: usize, block_end: usize) -> Option<(RxHeader, u32)> {
    if hdr.checked_add(size_of::<libc::tpacket3_hdr>())? > block_end {
        return None;
    }
    Some((
        RxHeader {
            snaplen: region.read_u32(hdr + H_SNAPLEN)? as usize,
            len: region.read_u32(hdr + H_LEN)? as usize,
            status: region.read_u32(hdr + H_STATUS)?,
            mac: usize::from(region.read_u16(hdr + H_MAC)?),
            // The TCI is a u32 field holding a 16-bit value.
            vlan_tci: region.read_u32(hdr + H_VLAN_TCI)? as u16,
            vlan_tpid: region.read_u16(hdr + H_VLAN_TPID)?,
        },
        region.read_u32(hdr + H_NEXT_OFFSET)?,
    ))
}
