//! The free addresses of one pool as disjoint, non-adjacent intervals, so
//! that a pool of any size (a /8, an IPv6 /64) costs memory by its number
//! of holes, not its number of addresses.
//!
//! Invariants: intervals are `start <= end`, of one family, pairwise
//! disjoint and never adjacent (`end + 1 < next start` within a family): a
//! released address merges with its neighbours. Addresses are kept as
//! `IpAddr` (IPv4 sorts before IPv6), the arithmetic is on their numbers
//! (`nic_config::addr`), so both families share this code.

use nic_config::IpRange;
use nic_config::addr::{addr_bits, addr_from_bits};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Free addresses, as `start → end` (inclusive) intervals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FreeRanges {
    intervals: BTreeMap<IpAddr, IpAddr>,
}

/// The address after `a` in its family, `None` at the family's end.
fn next(a: IpAddr) -> Option<IpAddr> {
    match a {
        IpAddr::V4(v) => u32::from(v)
            .checked_add(1)
            .map(|n| Ipv4Addr::from(n).into()),
        IpAddr::V6(v) => u128::from(v)
            .checked_add(1)
            .map(|n| Ipv6Addr::from(n).into()),
    }
}

/// The address before `a` in its family, `None` at the family's start.
fn prev(a: IpAddr) -> Option<IpAddr> {
    addr_bits(a).checked_sub(1).map(|n| addr_from_bits(a, n))
}

/// The family's lowest address.
fn family_start(ipv4: bool) -> IpAddr {
    if ipv4 {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    }
}

impl FreeRanges {
    /// Every address of `ranges` free; `ranges` must be disjoint.
    pub(crate) fn new(ranges: impl IntoIterator<Item = IpRange>) -> Self {
        let mut free = FreeRanges::default();
        for r in ranges {
            free.insert(r.first, r.last);
        }
        free
    }

    /// Whether `addr` is free.
    pub(crate) fn contains(&self, addr: IpAddr) -> bool {
        self.intervals
            .range(..=addr)
            .next_back()
            .is_some_and(|(_, &end)| addr <= end && end.is_ipv4() == addr.is_ipv4())
    }

    /// Mark `addr` used; false if it was not free.
    pub(crate) fn take(&mut self, addr: IpAddr) -> bool {
        if !self.contains(addr) {
            return false;
        }
        let Some((&start, &end)) = self.intervals.range(..=addr).next_back() else {
            return false;
        };
        self.intervals.remove(&start);
        if start < addr
            && let Some(before) = prev(addr)
        {
            self.intervals.insert(start, before);
        }
        if addr < end
            && let Some(after) = next(addr)
        {
            self.intervals.insert(after, end);
        }
        true
    }

    /// Mark `addr` free again; false if it already was.
    pub(crate) fn give_back(&mut self, addr: IpAddr) -> bool {
        if self.contains(addr) {
            return false;
        }
        self.insert(addr, addr);
        true
    }

    /// Insert `[first, last]` (one family, not overlapping anything free),
    /// merging with adjacent intervals.
    fn insert(&mut self, first: IpAddr, last: IpAddr) {
        let (mut start, mut end) = (first, last);
        if let Some((&s, &e)) = self.intervals.range(..first).next_back()
            && next(e) == Some(first)
        {
            self.intervals.remove(&s);
            start = s;
        }
        if let Some(after) = next(last)
            && let Some(e) = self.intervals.remove(&after)
        {
            end = e;
        }
        self.intervals.insert(start, end);
    }

    /// The lowest free address of the family (`ipv4`) for which `usable`
    /// holds. `usable` rejects at most a few addresses in a row (the
    /// `.0`/`.255` pairs), so this looks at a bounded number of addresses
    /// per interval.
    pub(crate) fn lowest(&self, ipv4: bool, usable: impl Fn(IpAddr) -> bool) -> Option<IpAddr> {
        const MAX_SKIP: u128 = 2;
        for (&start, &end) in self.intervals.range(family_start(ipv4)..) {
            if start.is_ipv4() != ipv4 {
                break;
            }
            let (s, e) = (addr_bits(start), addr_bits(end));
            let last = e.min(s.saturating_add(MAX_SKIP));
            if let Some(a) = (s..=last)
                .map(|n| addr_from_bits(start, n))
                .find(|&a| usable(a))
            {
                return Some(a);
            }
        }
        None
    }

    /// Free addresses, without the buggy IPv4 ones when `avoid_buggy_ips`
    /// (counted per interval, not by enumeration).
    #[cfg(test)]
    pub(crate) fn count(&self, avoid_buggy_ips: bool) -> u128 {
        self.intervals
            .iter()
            .filter_map(|(&s, &e)| IpRange::new(s, e))
            .map(|r| r.usable_count(avoid_buggy_ips))
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

    fn ip(n: u32) -> IpAddr {
        Ipv4Addr::from(n).into()
    }

    fn ip6(n: u128) -> IpAddr {
        Ipv6Addr::from(n).into()
    }

    fn range(first: IpAddr, last: IpAddr) -> IpRange {
        IpRange::new(first, last).unwrap()
    }

    #[test]
    fn take_splits_and_give_back_merges() {
        let mut f = FreeRanges::new([range(ip(10), ip(19))]);
        assert!(f.take(ip(15)));
        assert!(!f.take(ip(15)));
        assert_eq!(f.intervals(), 2);
        assert!(f.take(ip(10)) && f.take(ip(19)));
        assert_eq!(f.lowest(true, |_| true), Some(ip(11)));
        assert_eq!(f.lowest(false, |_| true), None);
        assert!(f.give_back(ip(15)));
        assert!(!f.give_back(ip(15)));
        assert!(f.give_back(ip(10)) && f.give_back(ip(19)));
        assert_eq!(f, FreeRanges::new([range(ip(10), ip(19))]));
        assert!(!f.take(ip(9)) && !f.take(ip(20)));
    }

    #[test]
    fn lowest_skips_unusable_addresses() {
        let f = FreeRanges::new([
            range(ip(0x0a00_00ff), ip(0x0a00_0100)),
            range(ip(0x0a00_0200), ip(0x0a00_0202)),
        ]);
        let not_buggy = |a: IpAddr| !nic_config::is_buggy_ip(a);
        assert_eq!(f.lowest(true, not_buggy), Some(ip(0x0a00_0201)));
        assert_eq!(
            FreeRanges::new([range(ip(u32::MAX), ip(u32::MAX))]).lowest(true, |_| true),
            Some(ip(u32::MAX))
        );
        assert_eq!(FreeRanges::default().lowest(true, |_| true), None);
    }

    #[test]
    fn both_families_in_one_pool_stay_apart() {
        // The last IPv4 address and the first IPv6 one are not adjacent.
        let mut f = FreeRanges::new([
            range(ip(u32::MAX - 1), ip(u32::MAX)),
            range(ip6(0x2001_0db8 << 96), ip6((0x2001_0db8 << 96) + 0xff)),
        ]);
        assert_eq!(f.intervals(), 2);
        assert_eq!(f.lowest(true, |_| true), Some(ip(u32::MAX - 1)));
        assert_eq!(f.lowest(false, |_| true), Some(ip6(0x2001_0db8 << 96)));
        assert!(f.take(ip(u32::MAX - 1)) && f.take(ip(u32::MAX)));
        assert_eq!(f.lowest(true, |_| true), None, "IPv4 used up, IPv6 left");
        assert_eq!(f.count(false), 256);
        assert!(!f.contains(ip6(u128::from(u32::MAX))));
        assert!(f.give_back(ip(u32::MAX)) && f.give_back(ip(u32::MAX - 1)));
        assert_eq!(f.intervals(), 2);
        // An IPv6 /64: one interval, counted without enumeration.
        let big = FreeRanges::new(["2001:db8::/64".parse::<IpRange>().unwrap()]);
        assert_eq!(big.count(true), 1 << 64);
    }

    proptest! {
        /// Against a set model: take/give_back/contains/lowest agree with
        /// a plain set of free addresses, and intervals never touch.
        #[test]
        fn matches_a_set(ops in prop::collection::vec((any::<bool>(), 0u32..64), 0..200)) {
            let mut f = FreeRanges::new([range(ip(0), ip(31)), range(ip(40), ip(63))]);
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
                prop_assert_eq!(f.lowest(true, |a| !addr_bits(a).is_multiple_of(3)), model.iter().copied().find(|a| a % 3 != 0).map(ip));
                let v: Vec<(u128, u128)> = f.intervals.iter().map(|(&s, &e)| (addr_bits(s), addr_bits(e))).collect();
                for w in v.windows(2) {
                    prop_assert!(w[0].1 + 1 < w[1].0, "{:?}", v);
                }
            }
        }

        /// The same against a set model for IPv6 addresses next to IPv4
        /// ones in one pool.
        #[test]
        fn matches_a_set_in_both_families(ops in prop::collection::vec((any::<bool>(), any::<bool>(), 0u32..64), 0..200)) {
            let base6: u128 = 0x2001_0db8 << 96;
            let at = |v4: bool, n: u32| if v4 { ip(n) } else { ip6(base6 + u128::from(n)) };
            let mut f = FreeRanges::new([
                range(ip(0), ip(31)),
                range(ip6(base6), ip6(base6 + 63)),
            ]);
            let mut model: std::collections::BTreeSet<IpAddr> =
                (0..32).map(ip).chain((0..64).map(|n| ip6(base6 + n))).collect();
            for (take, v4, n) in ops {
                let a = at(v4, n);
                if take {
                    prop_assert_eq!(f.take(a), model.remove(&a));
                } else if !v4 || n < 32 {
                    prop_assert_eq!(f.give_back(a), model.insert(a));
                }
                for fam in [true, false] {
                    prop_assert_eq!(
                        f.lowest(fam, |_| true),
                        model.iter().copied().find(|x| x.is_ipv4() == fam)
                    );
                }
                prop_assert_eq!(f.count(false), model.len() as u128);
            }
        }
    }
}
