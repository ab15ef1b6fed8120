//! The TCP quarantine: reply keys of released TCP tuples, oldest first.
//!
//! A fixed-capacity FIFO ring of `(reply key, released_ms)` plus a
//! [`hashbrown::HashTable`] index from reply key to ring slot. Both are
//! allocated in [`Quarantine::new`] and never grow:
//!
//! * The ring holds at most `capacity` entries. Pushing into a full ring
//!   forgets the front (oldest) entry first; if that entry was still live it is
//!   counted as an overflow by the caller (it leaves quarantine early).
//! * An entry removed from the middle of the ring (its tuple was handed out
//!   again) becomes a tombstone: it stays in its slot, is no longer indexed, and
//!   is dropped when it reaches the front.
//! * The index holds only live entries, so at most `capacity` items. It is
//!   created with room for `2 * capacity` items, so hashbrown always rehashes in
//!   place when its deleted markers run out and never reallocates (hashbrown
//!   only grows when the item count exceeds half its full capacity).
//! * Entries are pushed with non-decreasing `released_ms` (the allocator keeps
//!   its own monotonic "now"), so the front is always the oldest entry and
//!   lazy expiry only ever looks at the front.

use crate::flow::{FlowKeyOf, IpFamily, TableHasher};
use hashbrown::HashTable;

/// One ring slot.
#[derive(Clone, Copy, Debug)]
struct Entry<A> {
    key: FlowKeyOf<A>,
    released_ms: u64,
    /// False for tombstones and never-used slots.
    live: bool,
}

impl<A: IpFamily> Entry<A> {
    const EMPTY: Entry<A> = Entry {
        key: FlowKeyOf::new(
            crate::flow::Proto::Tcp,
            A::UNSPECIFIED,
            0,
            A::UNSPECIFIED,
            0,
        ),
        released_ms: 0,
        live: false,
    };
}

/// A quarantined tuple found by [`Quarantine::find`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    /// Ring slot, valid until the quarantine is next mutated.
    pub slot: u32,
    pub released_ms: u64,
}

#[derive(Debug)]
pub(crate) struct Quarantine<A> {
    ring: Box<[Entry<A>]>,
    /// Slot of the oldest entry.
    head: usize,
    /// Entries in the ring, tombstones included.
    len: usize,
    /// Entries that are live (indexed).
    live: usize,
    /// Live entries, by ring slot.
    index: HashTable<u32>,
    /// Places keys in `index` (the conntrack's keyed hash: the allocator
    /// hands the same hash to both).
    hasher: TableHasher,
}

impl<A: IpFamily> Quarantine<A> {
    /// `capacity` must be at least 1 and at most `u32::MAX` (the allocator
    /// checks both).
    pub(crate) fn new(capacity: usize, hasher: TableHasher) -> Self {
        let capacity = capacity.max(1);
        Quarantine {
            ring: vec![Entry::EMPTY; capacity].into_boxed_slice(),
            head: 0,
            len: 0,
            live: 0,
            index: HashTable::with_capacity(capacity.saturating_mul(2)),
            hasher,
        }
    }

    /// Where `key` goes in the index.
    #[inline]
    pub(crate) fn hash(&self, key: &FlowKeyOf<A>) -> u64 {
        self.hasher.hash(key)
    }

    /// Live (indexed) entries, including expired ones not purged yet.
    #[inline]
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// The live entry for `key`, if any (expired or not: the caller decides).
    #[inline]
    pub(crate) fn find(&self, key: &FlowKeyOf<A>) -> Option<Found> {
        if self.live == 0 {
            return None;
        }
        self.find_hashed(key, self.hasher.hash(key))
    }

    /// [`Quarantine::find`] with `hash = hasher.hash(key)` already known.
    #[inline]
    pub(crate) fn find_hashed(&self, key: &FlowKeyOf<A>, hash: u64) -> Option<Found> {
        if self.live == 0 {
            return None;
        }
        debug_assert_eq!(hash, self.hasher.hash(key), "hash");
        let ring = &self.ring;
        self.index
            .find(hash, |&slot| {
                ring.get(slot as usize).is_some_and(|e| e.key == *key)
            })
            .and_then(|&slot| {
                ring.get(slot as usize).map(|e| Found {
                    slot,
                    released_ms: e.released_ms,
                })
            })
    }

    /// Turns the live entry at `slot` into a tombstone. No-op for a slot that
    /// is not live.
    pub(crate) fn remove_slot(&mut self, slot: u32) {
        let Some(entry) = self.ring.get_mut(slot as usize) else {
            return;
        };
        if !entry.live {
            return;
        }
        entry.live = false;
        let hash = self.hasher.hash(&entry.key);
        if let Ok(occupied) = self.index.find_entry(hash, |&s| s == slot) {
            occupied.remove();
        }
        self.live = self.live.saturating_sub(1);
    }

    /// Quarantines `key` from `released_ms` on (replacing an entry for the
    /// same key). Returns true when the ring was full and a live entry had to
    /// be forgotten before its time.
    pub(crate) fn push(&mut self, key: FlowKeyOf<A>, released_ms: u64) -> bool {
        if let Some(found) = self.find(&key) {
            self.remove_slot(found.slot);
        }
        let mut overflowed = false;
        if self.len == self.ring.len() {
            overflowed = self.pop_front();
        }
        let slot = (self.head + self.len) % self.ring.len();
        let Some(entry) = self.ring.get_mut(slot) else {
            return overflowed;
        };
        *entry = Entry {
            key,
            released_ms,
            live: true,
        };
        self.len += 1;
        self.live += 1;
        let (ring, hasher) = (&self.ring, &self.hasher);
        // `slot < capacity <= u32::MAX`, checked by the allocator.
        self.index
            .insert_unique(hasher.hash(&key), slot as u32, |&s| {
                ring.get(s as usize).map_or(0, |e| hasher.hash(&e.key))
            });
        overflowed
    }

    /// Drops the front entry; true if it was live.
    fn pop_front(&mut self) -> bool {
        if self.len == 0 {
            return false;
        }
        let slot = self.head;
        let was_live = self.ring.get(slot).is_some_and(|e| e.live);
        // `slot < ring.len() <= u32::MAX`.
        self.remove_slot(slot as u32);
        self.head = (self.head + 1) % self.ring.len();
        self.len -= 1;
        was_live
    }

    /// Drops front entries that are tombstones or older than `quarantine_ms`
    /// at `now_ms`, looking at no more than `max_entries` of them. Returns the
    /// number of entries dropped.
    #[inline(always)]
    pub(crate) fn expire(&mut self, now_ms: u64, quarantine_ms: u64, max_entries: usize) -> usize {
        // Every allocation calls this: an empty quarantine costs one test.
        if self.len == 0 {
            return 0;
        }
        self.expire_front(now_ms, quarantine_ms, max_entries)
    }

    /// [`Self::expire`] of a non-empty quarantine.
    #[inline(never)]
    fn expire_front(&mut self, now_ms: u64, quarantine_ms: u64, max_entries: usize) -> usize {
        let mut dropped = 0;
        while dropped < max_entries {
            let Some(front) = self.ring.get(self.head).copied() else {
                break;
            };
            if self.len == 0
                || (front.live && now_ms.saturating_sub(front.released_ms) < quarantine_ms)
            {
                break;
            }
            self.pop_front();
            dropped += 1;
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{FlowKey, Proto};
    use std::net::Ipv4Addr;

    fn key(port: u16) -> FlowKey {
        FlowKey::new(
            Proto::Tcp,
            Ipv4Addr::new(10, 1, 0, 1),
            8080,
            Ipv4Addr::new(192, 0, 2, 1),
            port,
        )
    }

    #[test]
    fn push_find_remove() {
        let mut q = Quarantine::new(4, TableHasher::from_seed(3));
        assert!(!q.push(key(1), 10));
        assert!(!q.push(key(2), 20));
        assert_eq!(q.find(&key(1)).map(|f| f.released_ms), Some(10));
        assert_eq!(q.find(&key(2)).map(|f| f.released_ms), Some(20));
        assert_eq!(q.find(&key(3)), None);
        let f = q.find(&key(1)).map(|f| f.slot);
        q.remove_slot(f.unwrap_or(u32::MAX));
        assert_eq!(q.find(&key(1)), None);
        assert_eq!(q.live(), 1);
    }

    #[test]
    fn full_ring_forgets_oldest_and_reports_only_live_overflows() {
        let mut q = Quarantine::new(3, TableHasher::from_seed(3));
        for p in 1..=3 {
            assert!(!q.push(key(p), u64::from(p)));
        }
        // Tombstone the oldest: overwriting it is not an overflow.
        let slot = q.find(&key(1)).map(|f| f.slot).unwrap_or(u32::MAX);
        q.remove_slot(slot);
        assert!(!q.push(key(4), 4));
        // Now the front (key 2) is live: pushing forgets it early.
        assert!(q.push(key(5), 5));
        assert_eq!(q.find(&key(2)), None);
        for p in 3..=5 {
            assert!(q.find(&key(p)).is_some(), "key {p} lost");
        }
        assert_eq!(q.live(), 3);
    }

    #[test]
    fn pushing_same_key_again_refreshes_it() {
        let mut q = Quarantine::new(4, TableHasher::from_seed(3));
        q.push(key(1), 10);
        q.push(key(1), 50);
        assert_eq!(q.live(), 1);
        assert_eq!(q.find(&key(1)).map(|f| f.released_ms), Some(50));
        // The stale entry at the front is a tombstone and goes away on expiry.
        assert_eq!(q.expire(60, 100, 8), 1);
        assert_eq!(q.find(&key(1)).map(|f| f.released_ms), Some(50));
    }

    #[test]
    fn expire_is_fifo_and_bounded() {
        let mut q = Quarantine::new(8, TableHasher::from_seed(3));
        for p in 0..6u16 {
            q.push(key(p), u64::from(p) * 10);
        }
        // At 100 with a 75 ms quarantine, entries released at 0, 10, 20 are old.
        assert_eq!(q.expire(100, 75, 2), 2);
        assert_eq!(q.expire(100, 75, 8), 1);
        assert_eq!(q.find(&key(2)), None);
        assert!(q.find(&key(3)).is_some());
        assert_eq!(q.live(), 3);
    }

    #[test]
    fn churn_far_beyond_capacity_keeps_index_consistent() {
        let mut q = Quarantine::new(16, TableHasher::from_seed(3));
        let index_bytes = q.index.allocation_size();
        for i in 0..10_000u32 {
            let p = (i % 37) as u16;
            q.push(key(p), u64::from(i));
            if i % 3 == 0
                && let Some(f) = q.find(&key(((i / 3) % 37) as u16))
            {
                q.remove_slot(f.slot);
            }
            assert!(q.live() <= 16);
            assert_eq!(q.index.len(), q.live());
            assert_eq!(q.index.allocation_size(), index_bytes);
        }
        // Exactly the live ring entries are findable.
        let live_in_ring = q.ring.iter().filter(|e| e.live).count();
        assert_eq!(live_in_ring, q.live());
        for e in q.ring.iter().filter(|e| e.live) {
            assert_eq!(q.find(&e.key).map(|f| f.released_ms), Some(e.released_ms));
        }
    }

    #[test]
    fn index_never_reallocates_at_full_occupancy() {
        // A full ring under churn: every push evicts the front, so the index
        // sits at `capacity` items while deleted markers pile up. They must be
        // reclaimed in place, never by growing the table.
        let capacity = 1000;
        let mut q = Quarantine::new(capacity, TableHasher::from_seed(3));
        let index_bytes = q.index.allocation_size();
        for i in 0..200_000u32 {
            let k = FlowKey::new(
                Proto::Tcp,
                Ipv4Addr::from(0x0a00_0000 + (i % 50_000)),
                8080,
                Ipv4Addr::new(192, 0, 2, 1),
                (i % 60_000) as u16,
            );
            q.push(k, u64::from(i));
            assert_eq!(
                q.index.allocation_size(),
                index_bytes,
                "index grew at push {i}"
            );
        }
        assert_eq!(q.live(), capacity);
    }
}
