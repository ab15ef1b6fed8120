//! The SYN flood scenario's figures as markdown: per defence the median
//! over the runs (and whether it meets issue 15's goal), then every
//! sample.
//!
//! Invariants: ratios are taken within a cell (the flooded wrk run against
//! the quiet one just before it, same gateway, same minute), never across
//! runs; a figure a datapath does not have (the kernel's RSS, its SNAT
//! ports apart from its flows) is shown as "–".

use super::report::spread;
use super::run::{Defence, FloodReport, FloodSample, Holding};
use std::fmt::Write as _;

/// Issue 15's goal: connections keep this fraction of their quiet rate
/// under the flood, with no failed request.
pub const GOAL_KEPT: f64 = 0.9;

/// The median of `values` (NaN when there are none).
fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    spread(values).map_or(f64::NAN, |s| s.median)
}

fn opt(v: Option<u64>) -> String {
    v.map_or("–".to_owned(), |v| v.to_string())
}

fn mib(v: Option<u64>) -> String {
    v.map_or("–".to_owned(), |kb| format!("{:.1}", kb as f64 / 1024.0))
}

fn rss(before: Holding, during: Holding, after: Holding) -> String {
    if before.rss_kb.is_none() {
        return "–".to_owned();
    }
    format!(
        "{} / {} / {}",
        mib(before.rss_kb),
        mib(during.rss_kb),
        mib(after.rss_kb)
    )
}

/// Whether a sample meets [`GOAL_KEPT`] with no failed request under the
/// flood (neither a wrk error nor a SYN retransmitted by the client: a
/// connection that waited a retransmission timeout has failed its
/// first attempt).
pub fn meets_goal(s: &FloodSample) -> bool {
    s.kept() >= GOAL_KEPT && s.flooded.errors.total() == 0 && s.flooded.syn_retransmits == 0
}

/// The markdown tables of a flood report.
pub fn flood_markdown(report: &FloodReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n| defence | runs | spoofed SYN/s (median) | conn/s without flood | conn/s under flood | kept (median, min–max) | failed requests / client SYN retransmits under flood (all runs) | goal met (≥ {:.0} %, 0 failed, 0 SYN retransmits) |\n|---|---|---|---|---|---|---|---|",
        GOAL_KEPT * 100.0
    );
    for defence in Defence::ALL {
        let samples: Vec<&FloodSample> = report
            .samples
            .iter()
            .filter(|s| s.defence == defence)
            .collect();
        if samples.is_empty() {
            continue;
        }
        let Some(kept) = spread(samples.iter().map(|s| s.kept())) else {
            continue;
        };
        let failed: u64 = samples.iter().map(|s| s.flooded.errors.total()).sum();
        let retransmits: u64 = samples.iter().map(|s| s.flooded.syn_retransmits).sum();
        let met = samples.iter().filter(|s| meets_goal(s)).count();
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} % ({:.0}–{:.0} %) | {failed} / {retransmits} | {met} of {} runs |",
            defence.name(),
            samples.len(),
            median(samples.iter().map(|s| s.flood_pps)),
            median(samples.iter().map(|s| s.quiet.conn_per_s)),
            median(samples.iter().map(|s| s.flooded.conn_per_s)),
            kept.median * 100.0,
            kept.min * 100.0,
            kept.max * 100.0,
            samples.len(),
        );
    }
    let _ = writeln!(
        out,
        "\nEvery cell (failed = wrk's connect / read / write / timeout errors and non-2xx answers; \
         flows: Portico's live flows or the gateway namespace's conntrack entries, the maximum of \
         the samples taken every 0.5 s during the flood; RSS of the Portico process):\n\n\
         | run | defence | load avg | SYN/s sent | conn/s quiet | conn/s flooded | kept | failed / SYN retransmits quiet | failed flooded (connect/read/write/timeout/non-2xx) | SYN retransmits flooded | flows before / during / after | SNAT ports during / after | RSS MiB before / during / after | outside RX ring drops | SYN cookies sent / validated |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for s in &report.samples {
        let e = s.flooded.errors;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} % | {} / {} | {} ({}/{}/{}/{}/{}) | {} | {} / {} / {} | {} / {} | {} | {} | {} / {} |",
            s.run,
            s.defence.key(),
            s.load_average,
            s.flood_pps,
            s.quiet.conn_per_s,
            s.flooded.conn_per_s,
            s.kept() * 100.0,
            s.quiet.errors.total(),
            s.quiet.syn_retransmits,
            e.total(),
            e.connect,
            e.read,
            e.write,
            e.timeout,
            e.non_2xx,
            s.flooded.syn_retransmits,
            s.before.flows,
            s.during.flows,
            s.after.flows,
            opt(s.during.snat_ports),
            opt(s.after.snat_ports),
            rss(s.before, s.during, s.after),
            opt(s.rx_ring_drops),
            opt(s.syn_cookies_sent),
            opt(s.syn_cookies_validated),
        );
    }
    if !report.failures.is_empty() {
        out.push_str("\nNot measured:\n\n");
        for f in &report.failures {
            let _ = writeln!(out, "- {f}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::run::{WrkErrors, WrkPhase};
    use super::*;

    fn sample(defence: Defence, quiet: f64, flooded: f64, timeouts: u64) -> FloodSample {
        FloodSample {
            run: 0,
            defence,
            quiet: WrkPhase {
                conn_per_s: quiet,
                requests: (quiet * 5.0) as u64,
                errors: WrkErrors::default(),
                syn_retransmits: 0,
            },
            flooded: WrkPhase {
                conn_per_s: flooded,
                requests: (flooded * 5.0) as u64,
                errors: WrkErrors {
                    timeout: timeouts,
                    ..WrkErrors::default()
                },
                syn_retransmits: timeouts / 2,
            },
            flood_sent: 1_000_000,
            flood_pps: 200_000.0,
            before: Holding {
                flows: 3,
                snat_ports: defence.is_kernel().then_some(0).or(Some(3)),
                rss_kb: (!defence.is_kernel()).then_some(20_480),
            },
            during: Holding::default(),
            after: Holding::default(),
            rx_ring_drops: None,
            syn_cookies_sent: None,
            syn_cookies_validated: None,
            load_average: "1.00 1.00 1.00".into(),
        }
    }

    #[test]
    fn the_goal_needs_the_rate_and_no_failure() {
        assert!(meets_goal(&sample(Defence::PorticoOn, 1000.0, 950.0, 0)));
        assert!(!meets_goal(&sample(Defence::PorticoOn, 1000.0, 950.0, 1)));
        assert!(!meets_goal(&sample(Defence::PorticoOn, 1000.0, 850.0, 0)));
        let mut retransmitted = sample(Defence::PorticoOn, 1000.0, 950.0, 0);
        retransmitted.flooded.syn_retransmits = 1;
        assert!(!meets_goal(&retransmitted));
    }

    #[test]
    fn the_summary_has_one_row_per_measured_defence_with_medians() {
        let report = FloodReport {
            samples: vec![
                sample(Defence::PorticoOn, 1000.0, 950.0, 0),
                sample(Defence::PorticoOn, 1000.0, 500.0, 0),
                sample(Defence::PorticoOn, 1000.0, 900.0, 0),
                sample(Defence::KernelSyncookies, 1000.0, 100.0, 40),
            ],
            failures: vec!["run 0 kernel-synproxy: nft: no synproxy".into()],
            elapsed_s: 1.0,
        };
        let md = flood_markdown(&report);
        let on = md
            .lines()
            .find(|l| l.starts_with("| portico (af_packet), syn_proxy on |"))
            .unwrap();
        assert!(on.contains("| 3 |"), "{on}");
        assert!(on.contains("| 90 % (50–95 %) |"), "{on}");
        assert!(on.contains("| 2 of 3 runs |"), "{on}");
        let kernel = md
            .lines()
            .find(|l| l.starts_with("| kernel nftables shape, backend syncookies |"))
            .unwrap();
        assert!(kernel.contains("| 40 / 20 | 0 of 1 runs |"), "{kernel}");
        assert!(!md.contains("| portico (af_packet), syn_proxy off |"));
        // Every cell, the kernel's RSS as "–", and what was not measured.
        assert_eq!(md.matches("| 0 | portico-on |").count(), 3);
        assert!(md.contains("| 0 | kernel-syncookies |"));
        assert!(md.contains("40 (0/0/0/40/0) | 20 |"), "{md}");
        assert!(md.contains("- run 0 kernel-synproxy: nft: no synproxy"));
        assert!(md.contains("| 20.0 / – / – |"), "{md}");
    }

    #[test]
    fn a_defence_without_samples_has_no_median() {
        assert!(median([]).is_nan());
        assert_eq!(median([3.0, 1.0, 2.0]), 2.0);
    }
}
