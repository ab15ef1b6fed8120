//! Reclaiming entries: compaction of the table into a fresh generation
//! (see "Reclaiming entries (generations)" in [the module docs](super)).

use super::GcOutcome;
use super::family::{FamilyTable, MAC_STATIC, Slot, Slots, use_stamp};
use super::key::{NeighbourAddr, SlotKey};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

impl<A: NeighbourAddr> FamilyTable<A> {
    /// Whether the entry in `slot` (key set) may be dropped at `now_ms`; an
    /// entry never used is stamped now instead.
    fn reclaimable(&self, slot: &Slot<A>, now_ms: u64) -> bool {
        if slot.mac.load(Ordering::Acquire) & MAC_STATIC != 0 {
            return false;
        }
        let used = slot.used_ms.load(Ordering::Relaxed);
        if used == 0 {
            let _ = slot.used_ms.compare_exchange(
                0,
                use_stamp(now_ms),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            return false;
        }
        now_ms.saturating_sub(used) >= self.config.gc_stale_ms
    }

    /// Reclaim entries unused for `gc_stale_ms` when there are any and at
    /// least `gc_min_entries` entries are in use: publish a new generation
    /// holding every other entry (see the module docs). Cold path: walks
    /// the table and allocates one generation; call it periodically from a
    /// thread that is not a worker.
    pub fn collect_garbage(&self, now_ms: u64) -> GcOutcome {
        let mut retired = self.retired.lock().unwrap_or_else(PoisonError::into_inner);
        // Free the replaced generations no worker holds any more (a view
        // holds a counted reference: arc-swap pays its debt on the swap).
        retired.retain(|g| Arc::strong_count(g) > 1);
        let old = self.current.load_full();
        let mut outcome = GcOutcome::default();
        let mut reclaimable = 0u64;
        for slot in old.slots.iter() {
            if slot.key.get().is_none() {
                continue;
            }
            outcome.entries += 1;
            if self.reclaimable(slot, now_ms) {
                reclaimable += 1;
            }
        }
        if reclaimable == 0 || outcome.entries < u64::from(self.config.gc_min_entries) {
            return outcome;
        }
        let fresh = Slots::new(old.slots.len());
        for slot in old.slots.iter() {
            // (An IPv6 key still being written is skipped: the entry is
            // lost with the old generation, like any change made there.)
            let Some((port, addr)) = slot.key.get() else {
                continue;
            };
            if self.reclaimable(slot, now_ms) {
                outcome.reclaimed += 1;
                continue;
            }
            // The fresh generation is private until the store below, which
            // publishes every write made to it.
            let Some(copy) = fresh.find(port, addr, true) else {
                continue; // cannot happen: same size, fewer keys
            };
            copy.mac
                .store(slot.mac.load(Ordering::Acquire), Ordering::Relaxed);
            for (to, from) in [
                (&copy.confirmed_ms, &slot.confirmed_ms),
                (&copy.requested_ms, &slot.requested_ms),
                (&copy.used_ms, &slot.used_ms),
            ] {
                to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            copy.probes
                .store(slot.probes.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        self.current.store(Arc::new(fresh));
        self.generation.fetch_add(1, Ordering::Release);
        retired.push(old);
        self.reclaimed
            .fetch_add(outcome.reclaimed, Ordering::Relaxed);
        self.compactions.fetch_add(1, Ordering::Relaxed);
        outcome.compacted = true;
        outcome
    }
}
