//! Rate-limited drop summaries for the log: the dataplane never logs per
//! packet; the control thread calls [`DropLog::tick`] every loop and, at
//! most once per interval, logs one line with the drop reasons whose
//! counters moved since the last summary (nothing when none did).

use dataplane::counters::{Counters, DropReason};
use std::time::{Duration, Instant};

/// Default interval between two summaries.
pub const DEFAULT_DROP_LOG_INTERVAL_MS: u64 = 10_000;

/// The summary state; see the module docs.
#[derive(Debug)]
pub struct DropLog {
    interval: Duration,
    last_at: Option<Instant>,
    last: [u64; DropReason::COUNT],
}

/// The reasons whose counter grew from `before` to `now`, with the growth,
/// in [`DropReason::ALL`] order.
pub fn grown(
    before: &[u64; DropReason::COUNT],
    now: &[u64; DropReason::COUNT],
) -> Vec<(DropReason, u64)> {
    DropReason::ALL
        .iter()
        .zip(before.iter().zip(now))
        .filter(|(_, (b, n))| n > b)
        .map(|(r, (b, n))| (*r, n - b))
        .collect()
}

/// `reason=n reason=n …`.
pub fn render(grown: &[(DropReason, u64)]) -> String {
    grown
        .iter()
        .map(|(r, n)| format!("{}={n}", r.name()))
        .collect::<Vec<_>>()
        .join(" ")
}

impl DropLog {
    /// Summaries at most every `interval_ms` (0: never).
    pub fn new(interval_ms: u64) -> Self {
        DropLog {
            interval: Duration::from_millis(interval_ms),
            last_at: None,
            last: [0; DropReason::COUNT],
        }
    }

    /// Log a summary if one is due; `totals` (the counters summed over the
    /// workers) is read only then. Returns what was logged.
    pub fn tick(&mut self, now: Instant, totals: impl FnOnce() -> Counters) -> Option<String> {
        if self.interval.is_zero() {
            return None;
        }
        let Some(last_at) = self.last_at else {
            // The first look only sets the baseline.
            self.last_at = Some(now);
            self.last = totals().drops;
            return None;
        };
        let elapsed = now.saturating_duration_since(last_at);
        if elapsed < self.interval {
            return None;
        }
        let current = totals().drops;
        let grown = grown(&self.last, &current);
        self.last = current;
        self.last_at = Some(now);
        if grown.is_empty() {
            return None;
        }
        let total: u64 = grown.iter().map(|(_, n)| n).sum();
        let text = render(&grown);
        tracing::info!(
            drops = %text,
            total,
            interval_ms = elapsed.as_millis() as u64,
            "packets dropped since the last summary"
        );
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(reason: DropReason, n: u64) -> Counters {
        let mut c = Counters::default();
        for _ in 0..n {
            c.drop(reason);
        }
        c
    }

    #[test]
    fn summaries_are_rate_limited_and_only_name_what_moved() {
        let t0 = Instant::now();
        let mut log = DropLog::new(1000);
        assert_eq!(
            log.tick(t0, || with(DropReason::NoFlow, 5)),
            None,
            "baseline"
        );
        let mut read = false;
        assert_eq!(
            log.tick(t0 + Duration::from_millis(500), || {
                read = true;
                with(DropReason::NoFlow, 9)
            }),
            None,
            "not due yet"
        );
        assert!(!read, "counters are not read before the summary is due");
        let mut c = with(DropReason::NoFlow, 9);
        c.drop(DropReason::TxFull);
        assert_eq!(
            log.tick(t0 + Duration::from_millis(1000), || c.clone())
                .as_deref(),
            Some("no_flow=4 tx_full=1")
        );
        assert_eq!(
            log.tick(t0 + Duration::from_millis(2500), || c.clone()),
            None,
            "nothing moved"
        );
        assert_eq!(DropLog::new(0).tick(t0, || c.clone()), None, "off");
    }
}
