//! The conntrack index: a fixed-size, open-addressing hash table from a
//! flow key's hash to an index entry (`slot << 1 | dir`).
//!
//! # Layout
//! * `homes + MAX_PROBE` entries of 8 bytes, `tag << 32 | value`, where `tag` is the low
//!   32 bits of the key's keyed hash ([`TableHasher`](crate::flow::TableHasher),
//!   a per-process secret, so a sender cannot precompute colliding tuples)
//!   and `value` the index entry. An empty entry is [`EMPTY`] (its value
//!   `u32::MAX` is never a valid entry: slots are below 2^30).
//! * Entries are grouped in 64-byte, 64-byte-aligned [`Line`]s, so a probe
//!   sequence touches as few cache lines as possible and one prefetch brings a
//!   whole neighbourhood in.
//! * An entry's *home* is `tag * homes >> 32` (Lemire's multiply-shift
//!   range reduction), so `homes` need not be a power of two: the table is
//!   sized to the load bound itself, not to the next power of two above it
//!   (at 2^20 flows, 22.9 B per flow instead of 32 B). An entry lies at home
//!   or after it, and every entry between its home and it is occupied
//!   (linear probing). Hence a lookup stops at the first empty entry.
//! * No wrap-around: after the `homes` home entries come [`MAX_PROBE`]
//!   overflow entries, where the probe sequences of the last homes end
//!   (bounded probing keeps them inside), so a probe only ever moves
//!   forward.
//!
//! # Invariants
//! * The table is allocated once in [`Index::new`] and never grows or
//!   shrinks: [`Index::insert`] refuses once `len == max_len`, which the
//!   caller never reaches (it holds at most two entries per flow, and
//!   `max_len` is sized for that), so at least `entries - max_len` entries
//!   are always empty and every probe loop terminates.
//! * Removal uses backward-shift deletion (Knuth, TAOCP vol. 3, 6.4,
//!   Algorithm R): entries after the hole that may move into it do, so there
//!   are no tombstones and the probe sequences never degrade under churn.
//! * Load factor (live entries / homes) is at most [`MAX_LOAD_PERCENT`]%:
//!   an unsuccessful lookup
//!   reads ~1/(1-load)^2 / 2 entries on average, about one or two lines.
//! * **Ordered placement**: every cluster is sorted by tag, hence by home
//!   (see [`Index::insert`]), which keeps displacements short and even and
//!   ends a lookup at the first greater tag.
//! * **Bounded probing**: no entry lies more than [`MAX_PROBE`] - 1 entries
//!   after its home ([`Index::insert`] refuses with [`IndexFull::Crowded`]
//!   rather than go further; backward-shift deletion only moves entries
//!   towards their homes), so every lookup reads at most [`MAX_PROBE`]
//!   entries (8 lines) whatever the keys — the worst case a hash flood can
//!   force. With the keyed hash and ordered placement at <= 53% load a
//!   displacement that long is astronomically rare (a simulation of 2^21
//!   random entries at 70 % load: longest 19, against 113 with first-come
//!   placement; at 53 % shorter still); the caller answers a refusal with
//!   its own early drop in that window ([`Index::window`]).
//!
//! Nothing here allocates after construction, locks, or panics.

/// A free entry.
pub(super) const EMPTY: u64 = u64::MAX;
/// Highest load (live entries / table entries) the table is sized for:
/// 53 %, what the 128 B per IPv4 flow leaves for the index (30.2 B per
/// flow) beside the 64 B record, the 32 B TCP line and the splice array.
/// New flows get cheaper as the load falls (the probe's IPv4 new flow:
/// 2,238.8 instructions at 70 %, 2,200.5 at 56 %, 2,194.4 at 53 %;
/// bench/RESULTS.md "Flow memory").
pub(super) const MAX_LOAD_PERCENT: usize = 53;
/// Entries per 64-byte line.
const LINE_ENTRIES: usize = 8;
/// Longest probe sequence: an entry is at most `MAX_PROBE - 1` entries
/// after its home.
pub(super) const MAX_PROBE: usize = 8 * LINE_ENTRIES;

/// One cache line of entries.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Line([u64; LINE_ENTRIES]);

const EMPTY_LINE: Line = Line([EMPTY; LINE_ENTRIES]);

/// Start pulling the cache line holding `word` towards L1, for later use.
///
/// Stable Rust has no safe prefetch instruction (`_mm_prefetch` needs
/// `unsafe`, `core::hint::prefetch_read` is unstable), so this is a plain
/// load kept alive by [`std::hint::black_box`]: nothing waits on its value,
/// so an out-of-order core keeps issuing the next independent loads while
/// this one misses, and a pass of such loads over a batch overlaps its cache
/// misses just like a pass of prefetches (bounded by the reorder window
/// rather than by the line-fill buffers alone).
#[inline(always)]
pub(crate) fn touch(word: &u64) {
    std::hint::black_box(*word);
}

/// The index table. See the module docs.
#[derive(Debug)]
pub(super) struct Index {
    lines: Vec<Line>,
    /// Home entries (a multiple of [`LINE_ENTRIES`]); [`MAX_PROBE`]
    /// overflow entries follow them.
    homes: usize,
    len: usize,
    max_len: usize,
}

#[inline(always)]
fn tag_of(hash: u64) -> u32 {
    hash as u32
}

#[inline(always)]
fn entry_tag(entry: u64) -> u32 {
    (entry >> 32) as u32
}

#[inline(always)]
fn entry_value(entry: u64) -> u32 {
    entry as u32
}

/// Why the table could not be allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct IndexAllocError;

/// Why [`Index::insert`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum IndexFull {
    /// The table holds `max_len` entries.
    Full,
    /// No free entry within [`MAX_PROBE`] of the key's home.
    Crowded,
}

impl Index {
    /// A table for at most `max_len` entries at no more than
    /// [`MAX_LOAD_PERCENT`]% load (at least one line).
    pub(super) fn new(max_len: usize) -> Result<Self, IndexAllocError> {
        let homes = max_len
            .checked_mul(100)
            .map(|x| x.div_ceil(MAX_LOAD_PERCENT))
            .and_then(|x| x.max(LINE_ENTRIES).checked_next_multiple_of(LINE_ENTRIES))
            .filter(|&h| u32::try_from(h).is_ok())
            .ok_or(IndexAllocError)?;
        let line_count = (homes + MAX_PROBE) / LINE_ENTRIES;
        let mut lines = Vec::new();
        lines
            .try_reserve_exact(line_count)
            .map_err(|_| IndexAllocError)?;
        lines.resize(line_count, EMPTY_LINE);
        Ok(Index {
            lines,
            homes,
            len: 0,
            max_len,
        })
    }

    /// Entries held.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Entries the table was sized for (`max_len`).
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.max_len
    }

    /// Total entries (live + empty), overflow entries included.
    #[inline]
    pub(super) fn entries(&self) -> usize {
        self.homes + MAX_PROBE
    }

    /// Bytes allocated.
    #[inline]
    pub(super) fn allocation_size(&self) -> usize {
        self.lines.capacity() * std::mem::size_of::<Line>()
    }

    #[inline(always)]
    fn home(&self, tag: u32) -> usize {
        ((u64::from(tag) * self.homes as u64) >> 32) as usize
    }

    /// Where the probe for `hash` starts (tests).
    #[cfg(test)]
    pub(super) fn home_of(&self, hash: u64) -> usize {
        self.home(tag_of(hash))
    }

    #[inline(always)]
    fn get(&self, pos: usize) -> u64 {
        self.lines
            .get(pos / LINE_ENTRIES)
            .map_or(EMPTY, |l| l.0[pos % LINE_ENTRIES])
    }

    #[inline(always)]
    fn set(&mut self, pos: usize, entry: u64) {
        if let Some(l) = self.lines.get_mut(pos / LINE_ENTRIES) {
            l.0[pos % LINE_ENTRIES] = entry;
        }
    }

    /// Prefetch the line where the probe for `hash` starts.
    #[inline(always)]
    pub(super) fn prefetch(&self, hash: u64) {
        if let Some(line) = self.lines.get(self.home(tag_of(hash)) / LINE_ENTRIES) {
            touch(&line.0[0]);
        }
    }

    /// The first entry value with `hash`'s tag for which `eq` holds.
    // A counted loop over `home..home + MAX_PROBE` measured 4 instructions
    // more per lookup (pipeline-probe).
    #[allow(clippy::explicit_counter_loop)]
    #[inline(always)]
    pub(super) fn find(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let tag = tag_of(hash);
        let mut pos = self.home(tag);
        // No entry lies MAX_PROBE or more after its home; clusters are
        // sorted by tag, so a greater tag (or an empty entry) ends the
        // search.
        for _ in 0..MAX_PROBE {
            let e = self.get(pos);
            let t = entry_tag(e);
            if t > tag || e == EMPTY {
                return None;
            }
            if t == tag && eq(entry_value(e)) {
                return Some(entry_value(e));
            }
            pos += 1;
        }
        None
    }

    /// Add `value` under `hash`. The caller guarantees the key is not
    /// present. Refuses (and changes nothing) when the table already holds
    /// `max_len` entries, or when the entry or one it would displace would
    /// end up [`MAX_PROBE`] or more entries after its home.
    ///
    /// Ordered placement (Amble and Knuth's ordered hash tables, the
    /// Robin Hood arrangement of Celis): the new entry goes before the
    /// first entry of its cluster with a greater tag, and the entries from
    /// there to the cluster's end move up by one, so every cluster stays
    /// sorted by tag, hence by home (a home grows with its tag). The
    /// occupied entries are those first-come linear probing would occupy,
    /// but displacement is spread evenly: in a simulation of 2^21 random
    /// entries at 70 % load the longest is 19 entries, where first-come
    /// placement reaches 113 (and refuses >100 keys at this bound).
    pub(super) fn insert(&mut self, hash: u64, value: u32) -> Result<(), IndexFull> {
        if self.len >= self.max_len {
            return Err(IndexFull::Full);
        }
        let tag = tag_of(hash);
        let home = self.home(tag);
        // Where the new entry goes...
        let mut at = home;
        loop {
            let e = self.get(at);
            if e == EMPTY || entry_tag(e) > tag {
                break;
            }
            at += 1;
            if at - home >= MAX_PROBE {
                return Err(IndexFull::Crowded);
            }
        }
        // ...and the end of the run that moves up.
        let mut end = at;
        while self.get(end) != EMPTY {
            end += 1;
        }
        // Every entry that moves has its home at or after `home` (sorted),
        // so only a run reaching MAX_PROBE past `home` needs a closer look.
        if end - home >= MAX_PROBE
            && (at..end).any(|pos| pos + 1 - self.home(entry_tag(self.get(pos))) >= MAX_PROBE)
        {
            return Err(IndexFull::Crowded);
        }
        // `end` is empty and in the table: an entry moved there lies
        // within MAX_PROBE of a home below `homes`.
        for pos in (at..end).rev() {
            let e = self.get(pos);
            self.set(pos + 1, e);
        }
        self.set(at, u64::from(tag) << 32 | u64::from(value));
        self.len += 1;
        Ok(())
    }

    /// The values in `hash`'s probe window (the [`MAX_PROBE`] entries from
    /// its home), where an early drop frees room for a refused insert.
    pub(super) fn window(&self, hash: u64) -> impl Iterator<Item = u32> + '_ {
        let home = self.home(tag_of(hash));
        (0..MAX_PROBE)
            .map(move |i| self.get(home + i))
            .filter(|&e| e != EMPTY)
            .map(entry_value)
    }

    /// Remove exactly the entry `value` stored under `hash` (by identity),
    /// shifting later entries of its cluster back. Returns whether it was
    /// there.
    #[allow(clippy::explicit_counter_loop)]
    pub(super) fn remove(&mut self, hash: u64, value: u32) -> bool {
        let tag = tag_of(hash);
        let mut pos = self.home(tag);
        let mut found = None;
        for _ in 0..MAX_PROBE {
            let e = self.get(pos);
            if e == EMPTY {
                break;
            }
            if entry_value(e) == value {
                found = Some(pos);
                break;
            }
            pos += 1;
        }
        let Some(mut hole) = found else {
            return false;
        };
        // The cluster ends at an empty entry (past the last one, `get`
        // reads EMPTY).
        for j in hole + 1..self.entries() {
            let e = self.get(j);
            if e == EMPTY {
                break;
            }
            // `e` may fill the hole if the hole lies on its probe path,
            // i.e. within [home(e), j).
            if self.home(entry_tag(e)) <= hole {
                self.set(hole, e);
                hole = j;
            }
        }
        self.set(hole, EMPTY);
        self.len -= 1;
        true
    }

    /// Every live entry is reachable from its home without crossing an empty
    /// entry, and `len` counts the live entries (tests).
    #[cfg(test)]
    pub(super) fn check_invariants(&self) {
        let mut live = 0;
        for pos in 0..self.entries() {
            let e = self.get(pos);
            if e == EMPTY {
                continue;
            }
            live += 1;
            let home = self.home(entry_tag(e));
            assert!(home <= pos, "entry {pos} lies before its home {home}");
            let displacement = pos - home;
            assert!(
                displacement < MAX_PROBE,
                "entry {pos} is {displacement} from home"
            );
            if pos > 0 {
                let before = self.get(pos - 1);
                assert!(
                    before == EMPTY || entry_tag(before) <= entry_tag(e),
                    "cluster not sorted by tag at {pos}"
                );
            }
            let mut p = home;
            while p != pos {
                assert_ne!(self.get(p), EMPTY, "gap on the probe path of {pos}");
                p += 1;
            }
        }
        assert_eq!(live, self.len);
    }

    /// Longest distance of an entry from its home (tests, stats).
    #[cfg(test)]
    pub(super) fn max_displacement(&self) -> usize {
        (0..self.entries())
            .filter(|&p| self.get(p) != EMPTY)
            .map(|p| p - self.home(entry_tag(self.get(p))))
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn sizing_and_alignment() {
        let ix = Index::new(2 << 20).expect("alloc");
        // 2M entries at <= 53% load: 3,956,896 homes (2^21 / 0.53, in
        // whole lines) and 64 overflow entries, of 8 bytes.
        assert_eq!(ix.entries(), 3_956_896 + MAX_PROBE);
        assert_eq!(ix.allocation_size(), (3_956_896 + MAX_PROBE) * 8);
        // Every home entry is reachable: the highest tag's home is the last.
        assert_eq!(ix.home(u32::MAX), 3_956_895);
        assert_eq!(ix.home(0), 0);
        assert_eq!(std::mem::align_of::<Line>(), 64);
        assert_eq!(std::mem::size_of::<Line>(), 64);
        assert!(Index::new(usize::MAX).is_err());
        let tiny = Index::new(1).expect("alloc");
        assert_eq!(tiny.entries(), LINE_ENTRIES + MAX_PROBE);
    }

    #[test]
    fn full_table_refuses_and_colliding_hashes_stay_exact() {
        // Every hash has the same home and tag: one long cluster.
        let mut ix = Index::new(5).expect("alloc");
        for v in 0..5 {
            assert_eq!(ix.insert(0x1234, v), Ok(()));
        }
        assert_eq!(ix.insert(0x1234, 99), Err(IndexFull::Full));
        for v in 0..5 {
            assert_eq!(ix.find(0x1234, |x| x == v), Some(v));
        }
        assert!(ix.remove(0x1234, 2));
        assert!(!ix.remove(0x1234, 2));
        assert_eq!(ix.find(0x1234, |x| x == 2), None);
        assert_eq!(ix.find(0x1234, |x| x == 4), Some(4));
        ix.check_invariants();
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64),
        Remove(usize),
    }

    proptest! {
        /// Against a model, in a small table where clusters run into the
        /// overflow entries: every live value is found under its hash, removed ones are
        /// not, and no probe path has a gap.
        #[test]
        fn model_check(ops in proptest::collection::vec(
            prop_oneof![
                // Few distinct hashes and homes: heavy clustering.
                (0u64..64).prop_map(|h| Op::Insert(h.wrapping_mul(0x9e37_79b9) ^ (h << 3))),
                (0usize..64).prop_map(Op::Remove),
            ],
            1..300,
        )) {
            let mut ix = Index::new(11).expect("alloc");
            let mut model: HashMap<u32, u64> = HashMap::new();
            let mut next = 0u32;
            for op in ops {
                match op {
                    Op::Insert(h) => {
                        let ok = ix.insert(h, next).is_ok();
                        prop_assert_eq!(ok, model.len() < 11);
                        if ok {
                            model.insert(next, h);
                        }
                        next += 1;
                    }
                    Op::Remove(i) => {
                        let mut vals: Vec<_> = model.keys().copied().collect();
                        vals.sort_unstable();
                        if let Some(&v) = vals.get(i % vals.len().max(1)) {
                            let h = model.remove(&v).expect("model");
                            prop_assert!(ix.remove(h, v));
                            prop_assert_eq!(ix.find(h, |x| x == v), None);
                        }
                    }
                }
                ix.check_invariants();
                prop_assert_eq!(ix.len(), model.len());
                for (&v, &h) in &model {
                    prop_assert_eq!(ix.find(h, |x| x == v), Some(v));
                }
            }
        }
    }

    #[test]
    fn probing_is_bounded_and_a_crowded_home_is_refused() {
        // One home for every key: the first MAX_PROBE fit, the next is
        // refused although the table has room, and lookups stay exact.
        let mut ix = Index::new(4 * MAX_PROBE).expect("alloc");
        for v in 0..MAX_PROBE as u32 {
            assert_eq!(ix.insert(0x40, v), Ok(()));
        }
        assert_eq!(ix.insert(0x40, 999), Err(IndexFull::Crowded));
        assert_eq!(ix.len(), MAX_PROBE);
        assert_eq!(ix.window(0x40).count(), MAX_PROBE);
        assert_eq!(
            ix.find(0x40, |v| v == MAX_PROBE as u32 - 1),
            Some(MAX_PROBE as u32 - 1)
        );
        assert_eq!(ix.max_displacement(), MAX_PROBE - 1);
        // Freeing one entry of the window makes room again.
        assert!(ix.remove(0x40, 3));
        assert_eq!(ix.insert(0x40, 999), Ok(()));
        ix.check_invariants();
    }
}
