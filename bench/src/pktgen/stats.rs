//! The statistics of a run: a fixed-memory latency histogram with its
//! percentiles, loss and reordering from sequence numbers, and ratios.
//!
//! Invariants:
//! * Recording never allocates: the histogram's buckets are allocated once,
//!   when it is made.
//! * Percentiles are ordered (`min <= p50 <= p90 <= p99 <= max`) and each is
//!   within 1/64 of the exact value (values below 128 exactly).

/// Sub-buckets per power of two: values are kept to 1/64 (≈1.6 %).
const SUB_BITS: u32 = 6;
const SUB: usize = 1 << SUB_BITS;
/// Values below this are exact.
const LINEAR: u64 = 2 * SUB as u64;
const BUCKETS: usize = 2 * SUB + (63 - SUB_BITS as usize) * SUB;

/// A log-linear histogram of u64 values (latencies in ns) with fixed memory:
/// values below 128 are exact, larger ones are kept to within 1/64 of their
/// value. Percentiles report the upper edge of the bucket holding the rank,
/// capped at the exact maximum, so `p50 <= p90 <= p99 <= max`.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Box<[u64]>,
    count: u64,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

fn bucket_of(value: u64) -> usize {
    if value < LINEAR {
        return value as usize;
    }
    let exp = 63 - value.leading_zeros(); // >= 7
    let mantissa = (value >> (exp - SUB_BITS)) as usize; // in [64, 128)
    LINEAR as usize + (exp as usize - SUB_BITS as usize - 1) * SUB + (mantissa - SUB)
}

/// Largest value that falls in `bucket`.
fn bucket_high(bucket: usize) -> u64 {
    if bucket < LINEAR as usize {
        return bucket as u64;
    }
    let rel = bucket - LINEAR as usize;
    let exp = (rel / SUB) as u32 + SUB_BITS + 1;
    let mantissa = (SUB + rel % SUB) as u64;
    let shift = exp - SUB_BITS;
    ((mantissa + 1) << shift).wrapping_sub(1)
}

impl Histogram {
    pub fn record(&mut self, value: u64) {
        if let Some(c) = self.counts.get_mut(bucket_of(value)) {
            *c += 1;
        }
        self.count += 1;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }
    pub fn count(&self) -> u64 {
        self.count
    }
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }
    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }
    /// The value at quantile `q` (0..=1): the smallest bucket edge with at
    /// least `ceil(q * count)` values at or below it. `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (bucket, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(bucket_high(bucket).min(self.max).max(self.min));
            }
        }
        Some(self.max)
    }
}

/// Latency percentiles in ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Percentiles {
    pub samples: u64,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

impl Histogram {
    pub fn percentiles(&self) -> Option<Percentiles> {
        Some(Percentiles {
            samples: self.count,
            min_ns: self.min()?,
            p50_ns: self.quantile(0.50)?,
            p90_ns: self.quantile(0.90)?,
            p99_ns: self.quantile(0.99)?,
            max_ns: self.max()?,
        })
    }
}

/// Loss seen by a sink from sequence numbers (a sender's sequence starts at
/// 0): expected = highest sequence + 1, loss = expected - received
/// (saturating). A sequence at or below the highest seen counts as
/// reordered; a duplicated frame counts as received, so duplicates hide
/// loss (af_packet over veth does not duplicate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqTracker {
    pub received: u64,
    pub highest: Option<u64>,
    pub reordered: u64,
}

impl SeqTracker {
    pub fn record(&mut self, seq: u64) {
        self.received += 1;
        match self.highest {
            Some(h) if seq <= h => self.reordered += 1,
            _ => self.highest = Some(seq),
        }
    }
    pub fn expected(&self) -> u64 {
        self.highest.map_or(0, |h| h.saturating_add(1))
    }
    pub fn lost(&self) -> u64 {
        self.expected().saturating_sub(self.received)
    }
}

/// `part / whole`, 0 when `whole` is 0.
pub fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn histogram_quantiles_are_within_a_64th_of_exact(
            mut values in proptest::collection::vec(0u64..10_000_000_000, 1..500),
            q in 0.0f64..=1.0,
        ) {
            let mut h = Histogram::default();
            for &v in &values {
                h.record(v);
            }
            values.sort_unstable();
            let rank = ((q * values.len() as f64).ceil() as usize).max(1);
            let exact = values[rank - 1];
            let got = h.quantile(q).unwrap();
            prop_assert!(got >= exact, "got {} exact {}", got, exact);
            prop_assert!(got - exact <= exact / 64, "got {} exact {}", got, exact);
            let p = h.percentiles().unwrap();
            prop_assert!(p.min_ns <= p.p50_ns && p.p50_ns <= p.p90_ns);
            prop_assert!(p.p90_ns <= p.p99_ns && p.p99_ns <= p.max_ns);
            prop_assert_eq!(p.max_ns, *values.last().unwrap());
            prop_assert_eq!(p.min_ns, values[0]);
        }

        #[test]
        fn seq_tracker_loss_is_missing_distinct_sequences(
            keep in proptest::collection::vec(any::<bool>(), 1..300),
        ) {
            let mut t = SeqTracker::default();
            let kept: Vec<u64> = keep.iter().enumerate().filter(|(_, k)| **k).map(|(i, _)| i as u64).collect();
            for &s in &kept {
                t.record(s);
            }
            let expected = kept.last().map_or(0, |l| l + 1);
            prop_assert_eq!(t.expected(), expected);
            prop_assert_eq!(t.lost(), expected - kept.len() as u64);
            prop_assert_eq!(t.reordered, 0);
        }
    }

    #[test]
    fn histogram_bucket_edges_are_monotonic_and_cover_u64() {
        let mut prev = None;
        for b in 0..BUCKETS {
            let high = bucket_high(b);
            assert_eq!(bucket_of(high), b, "bucket {b}");
            if let Some(p) = prev {
                assert!(high > p);
                assert_eq!(bucket_of(p + 1), b);
            }
            prev = Some(high);
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert!(Histogram::default().percentiles().is_none());
    }

    #[test]
    fn reordered_sequences_do_not_count_as_new() {
        let mut t = SeqTracker::default();
        for s in [0, 2, 1, 3] {
            t.record(s);
        }
        assert_eq!((t.expected(), t.lost(), t.reordered), (4, 0, 1));
    }
}
