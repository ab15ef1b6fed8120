//! Pacing of the leader's status writes: Kubernetes has no batch update of
//! Service statuses (one PATCH per Service), so a cold start with 10,000
//! LoadBalancer Services owes 10,000 requests at once. The pacer admits them
//! at a bounded rate (a token bucket) with a bounded number in flight, so
//! the API server sees a steady, predictable load instead of a flood.
//!
//! Invariants:
//! * at most `max_in_flight` requests are admitted and not yet
//!   [`StatusPacer::finished`];
//! * over any interval of `t` ms, at most `burst + rate_per_s * t / 1000`
//!   requests are admitted (tokens refill continuously, capped at `burst`);
//! * a single change after a quiet period goes out at once (a full bucket).
//!
//! Pure bookkeeping: the caller passes the time in milliseconds from any
//! fixed epoch (so tests need no clock).

/// A token bucket plus an in-flight cap.
#[derive(Clone, Debug)]
pub struct StatusPacer {
    rate_per_s: u32,
    burst: u32,
    max_in_flight: usize,
    /// Tokens, in thousandths (a token per `1000 / rate_per_s` ms).
    milli_tokens: u64,
    refilled_at_ms: u64,
    in_flight: usize,
    admitted: u64,
}

impl StatusPacer {
    /// The pacer `[kubernetes]` configures (`status_writes_per_s`,
    /// `status_write_burst`, `status_writes_in_flight`).
    pub fn from_plan(plan: &nic_config::StatusWritesPlan) -> Self {
        StatusPacer::new(plan.per_s, plan.burst, plan.in_flight)
    }

    /// A pacer with a full bucket at time 0. `rate_per_s`, `burst` and
    /// `max_in_flight` are raised to at least 1.
    pub fn new(rate_per_s: u32, burst: u32, max_in_flight: usize) -> Self {
        let burst = burst.max(1);
        StatusPacer {
            rate_per_s: rate_per_s.max(1),
            burst,
            max_in_flight: max_in_flight.max(1),
            milli_tokens: u64::from(burst) * 1000,
            refilled_at_ms: 0,
            in_flight: 0,
            admitted: 0,
        }
    }

    fn refill(&mut self, now_ms: u64) {
        let elapsed_ms = now_ms.saturating_sub(self.refilled_at_ms);
        let cap = u64::from(self.burst) * 1000;
        self.milli_tokens = self
            .milli_tokens
            .saturating_add(elapsed_ms.saturating_mul(u64::from(self.rate_per_s)))
            .min(cap);
        self.refilled_at_ms = self.refilled_at_ms.max(now_ms);
    }

    /// How many of `wanted` requests may start at `now_ms`; they count as
    /// in flight until [`Self::finished`].
    pub fn admit(&mut self, now_ms: u64, wanted: usize) -> usize {
        self.refill(now_ms);
        let by_tokens = (self.milli_tokens / 1000) as usize;
        let by_flight = self.max_in_flight.saturating_sub(self.in_flight);
        let n = wanted.min(by_tokens).min(by_flight);
        self.milli_tokens -= n as u64 * 1000;
        self.in_flight += n;
        self.admitted += n as u64;
        n
    }

    /// Give back an admitted request that was not sent after all (nothing
    /// owed once looked at): its slot and its token.
    pub fn unused(&mut self) {
        if self.in_flight > 0 {
            self.in_flight -= 1;
            self.admitted -= 1;
            self.milli_tokens = (self.milli_tokens + 1000).min(u64::from(self.burst) * 1000);
        }
    }

    /// An admitted request completed (either way).
    pub fn finished(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Requests admitted and not finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Requests admitted since the start.
    pub fn admitted(&self) -> u64 {
        self.admitted
    }

    /// When the next request may start, at `now_ms` or later; `None` while
    /// the in-flight cap is reached (a completion frees a slot).
    pub fn next_at_ms(&self, now_ms: u64) -> Option<u64> {
        if self.in_flight >= self.max_in_flight {
            return None;
        }
        let mut at_refill = self.clone();
        at_refill.refill(now_ms);
        let missing = 1000u64.saturating_sub(at_refill.milli_tokens);
        Some(now_ms + missing.div_ceil(u64::from(self.rate_per_s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_pacer_sends_one_change_at_once() {
        let mut p = StatusPacer::new(200, 50, 8);
        assert_eq!(p.next_at_ms(1_000), Some(1_000));
        assert_eq!(p.admit(1_000, 1), 1);
        p.finished();
        assert_eq!(p.in_flight(), 0);
    }

    #[test]
    fn never_more_in_flight_than_the_cap() {
        let mut p = StatusPacer::new(1_000_000, 1_000, 8);
        assert_eq!(p.admit(0, 100), 8);
        assert_eq!(p.admit(10, 100), 0);
        assert_eq!(p.next_at_ms(10), None, "a completion frees a slot");
        p.finished();
        p.finished();
        assert_eq!(p.admit(10, 100), 2);
        assert_eq!(p.in_flight(), 8);
    }

    #[test]
    fn ten_thousand_owed_writes_go_out_at_the_rate() {
        // 10,000 statuses owed at once; completions are immediate, so only
        // the token bucket limits. Step the clock as the caller would: to
        // the pacer's next time.
        let (rate, burst) = (200u32, 50u32);
        let mut p = StatusPacer::new(rate, burst, 8);
        let mut now_ms = 0u64;
        let mut sent = 0usize;
        let mut admitted_by = Vec::new();
        while sent < 10_000 {
            let n = p.admit(now_ms, 10_000 - sent);
            for _ in 0..n {
                p.finished();
            }
            sent += n;
            admitted_by.push((now_ms, sent));
            now_ms = p.next_at_ms(now_ms).expect("nothing stays in flight");
        }
        // Rate bound at every point: burst + rate * t.
        for (t, total) in &admitted_by {
            let bound = u64::from(burst) + u64::from(rate) * t / 1000;
            assert!(*total as u64 <= bound, "{total} sent by {t} ms > {bound}");
        }
        // And not slower than the rate: (10,000 - burst) / 200 per s.
        let expected_ms = (10_000 - u64::from(burst)) * 1000 / u64::from(rate);
        assert!(
            now_ms.abs_diff(expected_ms) <= 10,
            "finished at {now_ms} ms, expected about {expected_ms} ms"
        );
        assert_eq!(p.admitted(), 10_000);
    }

    #[test]
    fn tokens_refill_up_to_the_burst_only() {
        let mut p = StatusPacer::new(100, 5, 100);
        assert_eq!(p.admit(0, 100), 5);
        for _ in 0..5 {
            p.finished();
        }
        // After an hour idle the bucket holds `burst`, not 360,000.
        assert_eq!(p.admit(3_600_000, 100), 5);
        assert_eq!(p.next_at_ms(3_600_000), Some(3_600_010));
    }

    #[test]
    fn an_unused_admission_is_given_back() {
        let mut p = StatusPacer::new(100, 2, 2);
        assert_eq!(p.admit(0, 2), 2);
        p.unused();
        assert_eq!(p.in_flight(), 1);
        assert_eq!(p.admitted(), 1);
        assert_eq!(p.admit(0, 5), 1);
    }
}
