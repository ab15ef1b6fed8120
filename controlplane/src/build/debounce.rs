//! Coalescing bursts of changes: a key marked dirty is reported once, when
//! things have been quiet for `debounce_ms` since the last mark, but never
//! later than `max_delay_ms` after the first mark of the burst, so a
//! never-ending stream of events cannot starve the rebuild.
//!
//! The caller supplies the clock (milliseconds, monotonic), so the
//! debouncer is pure and its timing is testable without sleeping. A clock
//! that goes backwards is treated as standing still.

use std::collections::BTreeSet;

/// Dirty keys waiting for a quiet moment. See the module docs.
#[derive(Clone, Debug)]
pub struct Debouncer<K: Ord> {
    debounce_ms: u64,
    max_delay_ms: u64,
    pending: BTreeSet<K>,
    /// Time of the first mark of the current burst.
    first_ms: u64,
    /// Time of the latest mark.
    last_ms: u64,
}

impl<K: Ord> Debouncer<K> {
    /// `max_delay_ms` below `debounce_ms` is raised to it.
    pub fn new(debounce_ms: u64, max_delay_ms: u64) -> Self {
        Debouncer {
            debounce_ms,
            max_delay_ms: max_delay_ms.max(debounce_ms),
            pending: BTreeSet::new(),
            first_ms: 0,
            last_ms: 0,
        }
    }

    /// Mark `key` dirty at `now_ms`.
    pub fn mark(&mut self, key: K, now_ms: u64) {
        if self.pending.is_empty() {
            self.first_ms = now_ms;
            self.last_ms = now_ms;
        } else {
            self.last_ms = self.last_ms.max(now_ms);
        }
        self.pending.insert(key);
    }

    /// When the pending keys are due; `None` when nothing is pending.
    pub fn deadline_ms(&self) -> Option<u64> {
        if self.pending.is_empty() {
            return None;
        }
        let quiet = self.last_ms.saturating_add(self.debounce_ms);
        let latest = self.first_ms.saturating_add(self.max_delay_ms);
        Some(quiet.min(latest))
    }

    /// The pending keys, in order, if they are due at `now_ms` (the burst
    /// ends); else `None`.
    pub fn poll(&mut self, now_ms: u64) -> Option<Vec<K>> {
        let deadline = self.deadline_ms()?;
        if now_ms < deadline {
            return None;
        }
        Some(std::mem::take(&mut self.pending).into_iter().collect())
    }

    /// Keys waiting.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fires_after_the_quiet_time() {
        let mut d = Debouncer::new(20, 200);
        assert_eq!(d.deadline_ms(), None);
        assert_eq!(d.poll(1000), None);
        d.mark("b", 1000);
        d.mark("a", 1010);
        d.mark("b", 1015);
        assert_eq!(d.deadline_ms(), Some(1035));
        assert_eq!(d.poll(1034), None);
        assert_eq!(d.poll(1035), Some(vec!["a", "b"]));
        assert_eq!(d.poll(5000), None);
        assert_eq!(d.pending(), 0);
    }

    #[test]
    fn a_long_burst_fires_at_the_max_delay() {
        let mut d = Debouncer::new(20, 100);
        let mut fired = Vec::new();
        // An event every 10 ms, for 1 s: never quiet for 20 ms.
        for t in (0..1000).step_by(10) {
            d.mark(t, t);
            if let Some(keys) = d.poll(t + 5) {
                fired.push((t + 5, keys.len()));
            }
        }
        // Every burst is cut at 100 ms after its first event.
        assert_eq!(fired.first(), Some(&(105, 11)));
        assert!(
            fired.windows(2).all(|w| w[1].0 - w[0].0 <= 110),
            "{fired:?}"
        );
        assert_eq!(fired.iter().map(|f| f.1).sum::<usize>() + d.pending(), 100);
    }

    #[test]
    fn zero_debounce_fires_at_once_and_backwards_clocks_do_not_panic() {
        let mut d = Debouncer::new(0, 0);
        d.mark(1, 50);
        assert_eq!(d.poll(50), Some(vec![1]));
        let mut d = Debouncer::new(20, 5);
        d.mark(1, 100);
        d.mark(2, 90);
        assert_eq!(d.deadline_ms(), Some(120));
        assert_eq!(d.poll(u64::MAX), Some(vec![1, 2]));
        let mut d = Debouncer::new(20, 200);
        d.mark(1, u64::MAX - 1);
        assert_eq!(d.deadline_ms(), Some(u64::MAX));
    }

    proptest! {
        /// Every marked key is reported exactly once, no sooner than the
        /// quiet time after the latest mark and no later than the max
        /// delay after the first (when polled every millisecond).
        #[test]
        fn every_key_fires_once_within_the_bounds(
            gaps in prop::collection::vec(0u64..40, 1..60),
            debounce in 0u64..30,
            factor in 1u64..5,
        ) {
            let max = debounce * factor;
            let mut d = Debouncer::new(debounce, max);
            let mut marks = Vec::new();
            let mut t = 0;
            for (i, g) in gaps.iter().enumerate() {
                t += g;
                marks.push((t, i));
            }
            let end = t + max + 1;
            let mut next = 0;
            let mut burst: Vec<u64> = Vec::new();
            let mut seen = Vec::new();
            for now in 0..=end {
                while next < marks.len() && marks[next].0 == now {
                    d.mark(marks[next].1, now);
                    burst.push(now);
                    next += 1;
                }
                if let Some(keys) = d.poll(now) {
                    let (first, last) = (burst[0], *burst.last().unwrap());
                    prop_assert!(now == (last + debounce).min(first + max), "fired at {now}, burst {first}..{last}");
                    prop_assert_eq!(keys.len(), burst.len());
                    seen.extend(keys);
                    burst.clear();
                }
            }
            seen.sort();
            prop_assert_eq!(seen, (0..gaps.len()).collect::<Vec<_>>());
        }
    }
}
