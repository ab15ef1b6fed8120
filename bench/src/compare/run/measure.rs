//! Reading what a load cost and did: CPU ticks (`/proc/stat`,
//! `/proc/PID/stat`), TCP counters (`netstat`) and wrk's summary.

use portico_netns::Netns;
use serde::Serialize;
use std::io;

/// Machine-wide CPU ticks — see [`CpuUse`].
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct MachineTicks {
    pub(super) busy: u64,
    pub(super) kernel: u64,
    pub(super) softirq: u64,
}

pub(super) fn proc_stat_ticks() -> io::Result<MachineTicks> {
    let text = std::fs::read_to_string("/proc/stat")?;
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| io::Error::other("no cpu line in /proc/stat"))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    let softirq = at(5) + at(6);
    let kernel = at(2) + softirq;
    Ok(MachineTicks {
        busy: at(0) + at(1) + kernel,
        kernel,
        softirq,
    })
}

/// Fields 14.. of `/proc/PID/stat` (utime, stime, cutime, cstime), or
/// `None` when the process is gone.
pub(super) fn pid_cpu_fields(pid: &str) -> Option<[u64; 4]> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces: split after ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11) // fields 3..=13
        .take(4)
        .filter_map(|v| v.parse().ok())
        .collect();
    Some([*f.first()?, *f.get(1)?, *f.get(2)?, *f.get(3)?])
}

/// CPU ticks of the comparison's own processes: per PID in its namespaces
/// (utime + stime + their reaped children's), and this process's reaped
/// children (cutime + cstime).
#[derive(Clone, Debug, Default)]
pub(super) struct OurTicks {
    pub(super) per_pid: std::collections::HashMap<String, u64>,
    pub(super) reaped_children: u64,
}

impl OurTicks {
    /// Ticks between `self` (before) and `after`; a process that started
    /// in between counts whole.
    pub(super) fn delta(&self, after: &OurTicks) -> u64 {
        let live: u64 = after
            .per_pid
            .iter()
            .map(|(pid, &t)| t.saturating_sub(self.per_pid.get(pid).copied().unwrap_or(0)))
            .sum();
        live + after.reaped_children.saturating_sub(self.reaped_children)
    }
}

/// A TcpExt counter table (`/proc/net/netstat` read inside a namespace):
/// the value of every counter whose name satisfies `want`, summed.
pub fn tcpext_sum(netstat: &str, want: impl Fn(&str) -> bool) -> u64 {
    let mut lines = netstat.lines();
    let mut sum = 0;
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let (Some(("TcpExt", names)), Some(("TcpExt", values))) =
            (names.split_once(": "), values.split_once(": "))
        else {
            continue;
        };
        for (name, value) in names.split_whitespace().zip(values.split_whitespace()) {
            if want(name) {
                sum += value.parse::<u64>().unwrap_or(0);
            }
        }
    }
    sum
}

pub(super) fn ns_tcpext(ns: &Netns, want: impl Fn(&str) -> bool) -> u64 {
    ns.exec("cat", &["/proc/net/netstat"])
        .map(|o| tcpext_sum(&String::from_utf8_lossy(&o.stdout), want))
        .unwrap_or(0)
}

pub(super) fn is_syn_retrans(name: &str) -> bool {
    name == "TCPSynRetrans"
}

pub(super) fn is_paws(name: &str) -> bool {
    name.starts_with("PAWS")
}

/// wrk's failed requests by kind: its "Socket errors:" line (connect,
/// read, write, timeout) and "Non-2xx or 3xx responses:".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WrkErrors {
    pub connect: u64,
    pub read: u64,
    pub write: u64,
    pub timeout: u64,
    pub non_2xx: u64,
}

impl WrkErrors {
    pub fn total(&self) -> u64 {
        self.connect + self.read + self.write + self.timeout + self.non_2xx
    }
}

/// The failed requests of a wrk summary (all zero when it reports none).
pub fn parse_wrk_errors(text: &str) -> WrkErrors {
    // "Socket errors: connect 0, read 1, write 0, timeout 2" and
    // "Non-2xx or 3xx responses: 3".
    let mut errors = WrkErrors::default();
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Socket errors:") {
            for part in rest.split(',') {
                let mut words = part.split_whitespace();
                let (Some(kind), Some(n)) = (words.next(), words.next()) else {
                    continue;
                };
                let n = n.parse::<u64>().unwrap_or(0);
                match kind {
                    "connect" => errors.connect += n,
                    "read" => errors.read += n,
                    "write" => errors.write += n,
                    "timeout" => errors.timeout += n,
                    _ => {}
                }
            }
        } else if let Some(rest) = line.strip_prefix("Non-2xx or 3xx responses:") {
            errors.non_2xx += rest.trim().parse::<u64>().unwrap_or(0);
        }
    }
    errors
}

/// wrk's request latency (`--latency`), in ms: the mean of its thread
/// statistics ("    Latency   812.00us  …") and the percentiles of its
/// distribution ("     50%  812.00us"). With `c` connections kept busy,
/// Little's law ties the mean to the rate (`mean = c / rate`): at equal
/// throughput two datapaths have the same mean and differ only in the
/// shape (p50 against p99); the round trip of the path alone is the p50 of
/// a load with one request in flight ([`Load::Rtt`](super::Load::Rtt)).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Latency {
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
}

/// A wrk duration ("812.00us", "1.25ms", "1.50s", "2.00m") in ms.
fn wrk_duration_ms(value: &str) -> Option<f64> {
    let value = value.trim();
    let split = value.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = value.split_at(split);
    let number: f64 = number.trim().parse().ok()?;
    let per_ms = match unit.trim() {
        "us" => 1e-3,
        "ms" => 1.0,
        "s" => 1e3,
        "m" => 60e3,
        _ => return None,
    };
    Some(number * per_ms)
}

/// [`Latency`] from wrk's output; `None` unless the mean and all three
/// percentiles are there.
pub fn parse_wrk_latency(text: &str) -> Option<Latency> {
    let percentile = |p: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(p))
            .and_then(wrk_duration_ms)
    };
    let mean_ms = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Latency "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(wrk_duration_ms)?;
    Some(Latency {
        mean_ms,
        p50_ms: percentile("50%")?,
        p90_ms: percentile("90%")?,
        p99_ms: percentile("99%")?,
    })
}

/// wrk's summary: (requests, requests/s, errors).
pub fn parse_wrk(text: &str) -> Option<(u64, f64, u64)> {
    let requests = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())?;
    let per_s = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())?;
    Some((requests, per_s, parse_wrk_errors(text).total()))
}

/// Resident set size of process `pid` (`VmRSS` of `/proc/PID/status`), KiB.
pub fn rss_kb(pid: u32) -> io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no VmRSS line in /proc/{pid}/status")))
}
