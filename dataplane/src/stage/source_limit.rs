//! Per-source new-flow rate limit (`[dataplane] new_flows_per_source_per_s`):
//! a token bucket per client address, in a small fixed table per worker.
//!
//! The table is direct-mapped: [`SLOTS`] buckets, the slot of an address
//! chosen by a keyed multiplicative hash (a per-pipeline random key, so a
//! client cannot aim its addresses at one slot). A bucket holds one address;
//! another address landing there takes the bucket over with a full burst
//! (the limit is a defence against a few heavy sources, not an exact
//! accounting of many light ones). Each bucket refills `rate` tokens per
//! second up to a burst of `rate`; a new flow takes one token, and a source
//! without one has its flow refused (`new_flow_rate_limited`).
//!
//! Allocated once ([`SourceLimit::new`]); [`SourceLimit::allow`] does a few
//! integer operations and never allocates.

use std::hash::{BuildHasher, Hasher};
use std::net::Ipv4Addr;

/// Buckets per worker.
pub const SLOTS: usize = 4096;
/// Tokens are counted in thousandths (refill per millisecond).
const MILLI: u64 = 1000;

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    addr: u32,
    /// Thousandths of a token.
    tokens: u64,
    last_ms: u64,
    used: bool,
}

/// One worker's per-source new-flow limiter.
#[derive(Debug)]
pub struct SourceLimit {
    /// New flows per second and source; 0: no limit.
    rate_per_s: u32,
    key: u64,
    buckets: Box<[Bucket]>,
}

impl SourceLimit {
    /// A limiter of `rate_per_s` new flows per source and second (0: off;
    /// then nothing is allocated).
    pub fn new(rate_per_s: u32) -> Self {
        let key = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
            | 1;
        let slots = if rate_per_s == 0 { 0 } else { SLOTS };
        SourceLimit {
            rate_per_s,
            key,
            buckets: vec![Bucket::default(); slots].into_boxed_slice(),
        }
    }

    /// Whether the limit is on.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.rate_per_s != 0
    }

    /// May `src` open one more flow at `now_ms`? Takes a token if so.
    #[inline]
    pub fn allow(&mut self, src: Ipv4Addr, now_ms: u64) -> bool {
        if self.rate_per_s == 0 {
            return true;
        }
        let addr = u32::from(src);
        let slot = (u64::from(addr).wrapping_mul(self.key) >> 52) as usize % SLOTS;
        let burst = u64::from(self.rate_per_s) * MILLI;
        let Some(b) = self.buckets.get_mut(slot) else {
            return true;
        };
        if !b.used || b.addr != addr {
            *b = Bucket {
                addr,
                tokens: burst,
                last_ms: now_ms,
                used: true,
            };
        } else {
            let elapsed = now_ms.saturating_sub(b.last_ms);
            b.tokens = (b.tokens + elapsed * u64::from(self.rate_per_s)).min(burst);
            b.last_ms = now_ms.max(b.last_ms);
        }
        if b.tokens >= MILLI {
            b.tokens -= MILLI;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_gets_its_burst_then_its_rate() {
        let mut l = SourceLimit::new(10);
        let a = Ipv4Addr::new(198, 51, 100, 7);
        let allowed = (0..20).filter(|_| l.allow(a, 1_000)).count();
        assert_eq!(allowed, 10, "the burst");
        assert!(!l.allow(a, 1_050), "half a token after 50 ms");
        assert!(l.allow(a, 1_100), "one token after 100 ms");
        assert!(!l.allow(a, 1_100));
        let allowed = (0..20).filter(|_| l.allow(a, 10_000)).count();
        assert_eq!(allowed, 10, "refilled up to the burst only");
    }

    #[test]
    fn sources_are_limited_separately_and_zero_is_off() {
        let mut l = SourceLimit::new(1);
        let a = Ipv4Addr::new(198, 51, 100, 7);
        let b = Ipv4Addr::new(198, 51, 100, 8);
        assert!(l.allow(a, 0));
        assert!(!l.allow(a, 0));
        assert!(l.allow(b, 0) || l.allow(b, 0), "another source has its own");
        let mut off = SourceLimit::new(0);
        assert!((0..1000).all(|_| off.allow(a, 0)));
        assert!(!off.enabled());
    }
}
