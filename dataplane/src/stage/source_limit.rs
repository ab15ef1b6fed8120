//! Per-source new-flow rate limit (`[dataplane] new_flows_per_source_per_s`):
//! a token bucket per client address, in a small fixed table per worker.
//! For IPv6 a source is a prefix (`[dataplane] source_prefix_len_v6`, a /64
//! by default: one host owns a /64, so a per-address limit would be trivial
//! to evade); the flow stage gives the limiter the bucket key
//! ([`super::family::StageFamily::source_key`]), one table for both
//! families (an IPv4 key is below 2^32, an IPv6 prefix almost never is).
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

/// Buckets per worker.
pub const SLOTS: usize = 4096;
/// Tokens are counted in thousandths (refill per millisecond).
const MILLI: u64 = 1000;

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    addr: u128,
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
    /// Bits of an IPv6 source that make its bucket key.
    prefix_len_v6: u8,
    key: u64,
    buckets: Box<[Bucket]>,
}

impl SourceLimit {
    /// A limiter of `rate_per_s` new flows per source and second (0: off;
    /// then nothing is allocated), IPv6 sources counted by their first
    /// `prefix_len_v6` bits.
    pub fn new(rate_per_s: u32, prefix_len_v6: u8) -> Self {
        let key = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
            | 1;
        let slots = if rate_per_s == 0 { 0 } else { SLOTS };
        SourceLimit {
            rate_per_s,
            prefix_len_v6: prefix_len_v6.min(128),
            key,
            buckets: vec![Bucket::default(); slots].into_boxed_slice(),
        }
    }

    /// Whether the limit is on.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.rate_per_s != 0
    }

    /// The IPv6 prefix length a source is counted by.
    #[inline]
    pub fn prefix_len_v6(&self) -> u8 {
        self.prefix_len_v6
    }

    /// May the source of bucket key `addr` (an IPv4 address, an IPv6
    /// prefix: [`super::family::StageFamily::source_key`]) open one more
    /// flow at `now_ms`? Takes a token if so.
    #[inline]
    pub fn allow(&mut self, addr: u128, now_ms: u64) -> bool {
        if self.rate_per_s == 0 {
            return true;
        }
        let folded = (addr >> 64) as u64 ^ addr as u64;
        let slot = (folded.wrapping_mul(self.key) >> 52) as usize % SLOTS;
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
    use crate::stage::family::StageFamily;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(a: Ipv4Addr) -> u128 {
        StageFamily::source_key(a, 64)
    }

    #[test]
    fn a_source_gets_its_burst_then_its_rate() {
        let mut l = SourceLimit::new(10, 64);
        let a = Ipv4Addr::new(198, 51, 100, 7);
        let allowed = (0..20).filter(|_| l.allow(v4(a), 1_000)).count();
        assert_eq!(allowed, 10, "the burst");
        assert!(!l.allow(v4(a), 1_050), "half a token after 50 ms");
        assert!(l.allow(v4(a), 1_100), "one token after 100 ms");
        assert!(!l.allow(v4(a), 1_100));
        let allowed = (0..20).filter(|_| l.allow(v4(a), 10_000)).count();
        assert_eq!(allowed, 10, "refilled up to the burst only");
    }

    #[test]
    fn sources_are_limited_separately_and_zero_is_off() {
        let mut l = SourceLimit::new(1, 64);
        let a = Ipv4Addr::new(198, 51, 100, 7);
        let b = Ipv4Addr::new(198, 51, 100, 8);
        assert!(l.allow(v4(a), 0));
        assert!(!l.allow(v4(a), 0));
        assert!(
            l.allow(v4(b), 0) || l.allow(v4(b), 0),
            "another source has its own"
        );
        let mut off = SourceLimit::new(0, 64);
        assert!((0..1000).all(|_| off.allow(v4(a), 0)));
        assert!(!off.enabled());
    }

    #[test]
    fn an_ipv6_source_is_its_prefix() {
        let mut l = SourceLimit::new(1, 64);
        let a: Ipv6Addr = "2001:db8:1:2::7".parse().unwrap();
        let same_64: Ipv6Addr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other_64: Ipv6Addr = "2001:db8:1:3::7".parse().unwrap();
        let p = l.prefix_len_v6();
        assert!(l.allow(StageFamily::source_key(a, p), 0));
        assert!(
            !l.allow(StageFamily::source_key(same_64, p), 0),
            "another address of the /64 shares its budget"
        );
        assert!(
            l.allow(StageFamily::source_key(other_64, p), 0),
            "another /64"
        );
        let mut per_addr = SourceLimit::new(1, 128);
        let p = per_addr.prefix_len_v6();
        assert!(per_addr.allow(StageFamily::source_key(a, p), 0));
        assert!(
            per_addr.allow(StageFamily::source_key(same_64, p), 0),
            "/128"
        );
    }
}
