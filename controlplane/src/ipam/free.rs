//! The free addresses of one pool as disjoint, non-adjacent intervals, so
//! that a pool of any size (a /8 included) costs memory by its number of
//! holes, not its number of addresses.
//!
//! Invariants: intervals are `start <= end`, pairwise disjoint and never
//! adjacent (`end + 1 < next start`): a released address merges with its
//! neighbours.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// Free addresses, as `start → end` (inclusive) intervals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FreeRanges {
    intervals: BTreeMap<u32, u32>,
}

impl FreeRanges {
    /// Every address of `ranges` free; `ranges` must be disjoint.
    pub(crate) fn new(ranges: impl IntoIterator<Item = (Ipv4Addr, Ipv4Addr)>) -> Self {
        let mut free = FreeRanges::default();
        for (first, last) in ranges {
            free.insert(u32::from(first), u32::from(last));
        }
        free
    }

    /// Whether `addr` is free.
    pub(crate) fn contains(&self, addr: Ipv4Addr) -> bool {
        let a = u32::from(addr);
        self.intervals
            .range(..=a)
            .next_back()
            .is_some_and(|(_, &end)| a <= end)
    }

    /// Mark `addr` used; false if it was not free.
    pub(crate) fn take(&mut self, addr: Ipv4Addr) -> bool {
        let a = u32::from(addr);
        let Some((&start, &end)) = self.intervals.range(..=a).next_back() else {
            return false;
        };
        if a > end {
            return false;
        }
        self.intervals.remove(&start);
        if start < a {
            self.intervals.insert(start, a - 1);
        }
        if a < end {
            self.intervals.insert(a + 1, end);
        }
        true
    }

    /// Mark `addr` free again; false if it already was.
    pub(crate) fn give_back(&mut self, addr: Ipv4Addr) -> bool {
        if self.contains(addr) {
            return false;
        }
        let a = u32::from(addr);
        self.insert(a, a);
        true
    }

    /// Insert `[first, last]` (not overlapping anything free), merging with
    /// adjacent intervals.
    fn insert(&mut self, first: u32, last: u32) {
        let (mut start, mut end) = (first, last);
        if let Some((&s, &e)) = self.intervals.range(..first).next_back()
            && e.checked_add(1) == Some(first)
        {
            self.intervals.remove(&s);
            start = s;
        }
        if let Some(next) = last.checked_add(1)
            && let Some(e) = self.intervals.remove(&next)
        {
            end = e;
        }
        self.intervals.insert(start, end);
    }

    /// The lowest free address for which `usable` holds. `usable` rejects
    /// at most a few addresses in a row (the `.0`/`.255` pairs), so this
    /// looks at a bounded number of addresses per interval.
    pub(crate) fn lowest(&self, usable: impl Fn(Ipv4Addr) -> bool) -> Option<Ipv4Addr> {
        const MAX_SKIP: u32 = 2;
        for (&start, &end) in &self.intervals {
            let last = end.min(start.saturating_add(MAX_SKIP));
            if let Some(a) = (start..=last).map(Ipv4Addr::from).find(|&a| usable(a)) {
                return Some(a);
            }
        }
        None
    }

    /// Free addresses for which `usable` would hold, counted by
    /// enumeration; for tests.
    #[cfg(test)]
    pub(crate) fn count(&self, usable: impl Fn(Ipv4Addr) -> bool) -> u64 {
        self.intervals
            .iter()
            .map(|(&s, &e)| (s..=e).filter(|&a| usable(Ipv4Addr::from(a))).count() as u64)
            .sum()
    }

    /// Number of intervals; for tests.
    #[cfg(test)]
    pub(crate) fn intervals(&self) -> usize {
        self.intervals.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(n: u32) -> Ipv4Addr {
        Ipv4Addr::from(n)
    }

    #[test]
    fn take_splits_and_give_back_merges() {
        let mut f = FreeRanges::new([(ip(10), ip(19))]);
        assert!(f.take(ip(15)));
        assert!(!f.take(ip(15)));
        assert_eq!(f.intervals(), 2);
        assert!(f.take(ip(10)) && f.take(ip(19)));
        assert_eq!(f.lowest(|_| true), Some(ip(11)));
        assert!(f.give_back(ip(15)));
        assert!(!f.give_back(ip(15)));
        assert!(f.give_back(ip(10)) && f.give_back(ip(19)));
        assert_eq!(f, FreeRanges::new([(ip(10), ip(19))]));
        assert!(!f.take(ip(9)) && !f.take(ip(20)));
    }

    #[test]
    fn lowest_skips_unusable_addresses() {
        let f = FreeRanges::new([
            (ip(0x0a00_00ff), ip(0x0a00_0100)),
            (ip(0x0a00_0200), ip(0x0a00_0202)),
        ]);
        let not_buggy = |a: Ipv4Addr| !nic_config::is_buggy_ip(a);
        assert_eq!(f.lowest(not_buggy), Some(ip(0x0a00_0201)));
        assert_eq!(
            FreeRanges::new([(ip(u32::MAX), ip(u32::MAX))]).lowest(|_| true),
            Some(ip(u32::MAX))
        );
        assert_eq!(FreeRanges::default().lowest(|_| true), None);
    }

    proptest! {
        /// Against a set model: take/give_back/contains/lowest agree with
        /// a plain set of free addresses, and intervals never touch.
        #[test]
        fn matches_a_set(ops in prop::collection::vec((any::<bool>(), 0u32..64), 0..200)) {
            let mut f = FreeRanges::new([(ip(0), ip(31)), (ip(40), ip(63))]);
            let mut model: std::collections::BTreeSet<u32> = (0..32).chain(40..64).collect();
            for (take, n) in ops {
                if take {
                    prop_assert_eq!(f.take(ip(n)), model.remove(&n));
                } else if (0..32).contains(&n) || (40..64).contains(&n) {
                    prop_assert_eq!(f.give_back(ip(n)), model.insert(n));
                }
                for a in 0..64 {
                    prop_assert_eq!(f.contains(ip(a)), model.contains(&a));
                }
                prop_assert_eq!(f.lowest(|a| u32::from(a) % 3 != 0), model.iter().copied().find(|a| a % 3 != 0).map(ip));
                let v: Vec<(u32, u32)> = f.intervals.iter().map(|(&s, &e)| (s, e)).collect();
                for w in v.windows(2) {
                    prop_assert!(w[0].1 + 1 < w[1].0, "{:?}", v);
                }
            }
        }
    }
}
