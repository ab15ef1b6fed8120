//! Expiry and early drop: bounded sweeps of the slab from one persistent
//! cursor (see "Time and expiry" and "Early drop" in [the module
//! docs](super)).

use super::{Conntrack, Flow};
use crate::flow::IpFamily;

impl<A: IpFamily> Conntrack<A> {
    /// Examines up to `max_scan` slots from the persistent cursor (wrapping
    /// around), removes the expired flows and calls `on_expired` with each
    /// removed record. Returns how many were removed.
    pub fn expire(
        &mut self,
        now_ms: u64,
        max_scan: u32,
        mut on_expired: impl FnMut(&Flow<A>),
    ) -> u32 {
        let scan = max_scan.min(self.slab.len() as u32);
        let mut removed = 0;
        for _ in 0..scan {
            let slot = self.cursor;
            self.advance_cursor();
            let expired = self
                .slab
                .get(slot as usize)
                .is_some_and(|f| f.is_live() && f.is_expired(now_ms));
            if expired && let Some(flow) = self.unlink(slot) {
                on_expired(&flow);
                removed += 1;
            }
        }
        removed
    }

    /// [`Conntrack::expire`] with the configured `expiry_scan_per_poll`.
    #[inline]
    pub fn poll_expire(&mut self, now_ms: u64, on_expired: impl FnMut(&Flow<A>)) -> u32 {
        self.expire(now_ms, self.expiry_scan_per_poll, on_expired)
    }

    #[inline]
    pub(super) fn advance_cursor(&mut self) {
        let next = self.cursor.wrapping_add(1);
        self.cursor = if next as usize >= self.slab.len() {
            0
        } else {
            next
        };
    }

    /// Linux-style early drop: scan up to `early_drop_scan` slots from the
    /// cursor; the first expired flow wins, else the first unreplied one. The
    /// cursor moves past the victim (or past the scanned window), so the
    /// flow about to take the victim's slot is examined last.
    pub(super) fn early_drop_victim(&mut self, now_ms: u64) -> Option<u32> {
        let scan = self.early_drop_scan.min(self.slab.len() as u32);
        let mut evictable: Option<(u32, u32)> = None;
        for _ in 0..scan {
            let slot = self.cursor;
            self.advance_cursor();
            let Some(f) = self.slab.get(slot as usize) else {
                continue;
            };
            if !f.is_live() {
                continue;
            }
            if f.is_expired(now_ms) {
                return Some(slot);
            }
            if evictable.is_none() && f.evictable() {
                evictable = Some((slot, self.cursor));
            }
        }
        let (slot, after) = evictable?;
        self.cursor = after;
        Some(slot)
    }
}
