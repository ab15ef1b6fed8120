//! The connect-retry delays of RFC 4271 §8 (ConnectRetryTimer): from
//! `connect_retry_s`, doubling per failure up to `connect_retry_max_s`,
//! with the jitter of RFC 4271 §10 (×0.75..1).

use std::time::Duration;

use crate::config::PeerConfig;

/// Connect-retry delays: exponential with jitter.
#[derive(Debug)]
pub(super) struct Backoff {
    base: Duration,
    max: Duration,
    failures: u32,
    seed: u64,
}

impl Backoff {
    pub fn new(cfg: &PeerConfig) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Backoff {
            base: Duration::from_secs(u64::from(cfg.connect_retry_s.max(1))),
            max: Duration::from_secs(u64::from(
                cfg.connect_retry_max_s.max(cfg.connect_retry_s).max(1),
            )),
            failures: 0,
            seed: u64::from(nanos) | 1,
        }
    }

    pub fn next_delay(&mut self) -> Duration {
        let full = self
            .base
            .saturating_mul(1u32 << self.failures.min(16))
            .min(self.max);
        self.failures = self.failures.saturating_add(1);
        // xorshift64: jitter needs no quality.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let permille = 750 + (self.seed % 251) as u32;
        full * permille / 1000
    }

    pub fn reset(&mut self) {
        self.failures = 0;
    }
}
