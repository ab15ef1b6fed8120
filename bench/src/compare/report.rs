//! The samples of a comparison summarised over its runs: median and
//! min–max of every figure, ratios to the kernel datapaths within the same
//! run, CPU per unit of work; and the markdown tables.
//!
//! Invariants:
//! * a ratio is always taken within one run (Portico's figure over the
//!   kernel's at the same load and service count in the same run), and only
//!   then summarised over the runs (median), so slow phases of the shared
//!   machine that hit a whole run cancel out;
//! * CPU per unit divides the CPU seconds of a load by the work it
//!   completed ([`super::run::Load::per`]), per run, then takes the median;
//! * figures that could not be computed (no such row, zero work) print `–`.

use super::run::{Datapath, Latency, Load, Report, Sample, UpdateSample};
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// Median, min and max of some values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

/// The spread of `values`; `None` when empty (NaNs are dropped).
pub fn spread(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some(Spread {
        median,
        min: v[0],
        max: v[n - 1],
        n,
    })
}

/// One (load, services, datapath) over the runs.
#[derive(Clone, Debug)]
pub struct Row {
    pub load: Load,
    pub services: usize,
    pub datapath: Datapath,
    pub value: Spread,
    pub vs_iptables: Option<Spread>,
    pub vs_nftables: Option<Spread>,
    /// Portico: the process's CPU; kernel: machine system+irq+softirq.
    pub gateway_us_per_unit: Option<Spread>,
    /// The whole rig's CPU per unit ([`super::run::CpuUse::rig_s`]).
    pub rig_us_per_unit: Option<Spread>,
    pub rig_vs_iptables: Option<Spread>,
    pub syn_retransmits: Spread,
    pub paws_rejects: Spread,
    pub errors: Spread,
    /// Request latency over the runs (wrk loads), `None` for the others.
    pub latency: Option<LatencyRow>,
}

/// Request latency of one [`Row`] over the runs, ms.
#[derive(Clone, Debug)]
pub struct LatencyRow {
    pub p50_ms: Spread,
    /// p50 minus the nftables datapath's p50 in the same run.
    pub p50_vs_nftables_ms: Option<Spread>,
    pub p99_ms: Spread,
    pub mean_ms: Spread,
}

fn per_unit(cpu_s: f64, units: f64) -> f64 {
    if units > 0.0 {
        cpu_s * 1e6 / units
    } else {
        f64::NAN
    }
}

/// CPU the datapath itself is charged with, µs per unit (see [`Row`]).
pub fn gateway_us(s: &Sample) -> f64 {
    let cpu = match s.cpu.gateway_s {
        Some(g) => g,
        None if s.datapath.is_kernel() => s.cpu.machine_kernel_s,
        None => f64::NAN,
    };
    per_unit(cpu, s.units)
}

pub fn rig_us(s: &Sample) -> f64 {
    per_unit(s.cpu.rig_s(), s.units)
}

/// `compare(figure(s), figure(base))` of every sample against the `base`
/// datapath's sample of the same run, load and service count.
fn within_run(
    samples: &[&Sample],
    all: &[Sample],
    base: Datapath,
    figure: impl Fn(&Sample) -> f64,
    compare: impl Fn(f64, f64) -> Option<f64>,
) -> Option<Spread> {
    spread(samples.iter().filter_map(|s| {
        let b = all.iter().find(|b| {
            b.run == s.run && b.load == s.load && b.services == s.services && b.datapath == base
        })?;
        let (x, y) = (figure(s), figure(b));
        (x.is_finite() && y.is_finite()).then(|| compare(x, y))?
    }))
}

fn ratios(
    samples: &[&Sample],
    all: &[Sample],
    base: Datapath,
    figure: impl Fn(&Sample) -> f64,
) -> Option<Spread> {
    within_run(samples, all, base, figure, |x, y| (y > 0.0).then(|| x / y))
}

fn latency_row(samples: &[&Sample], all: &[Sample]) -> Option<LatencyRow> {
    let of =
        |g: fn(&Latency) -> f64| spread(samples.iter().filter_map(|s| s.latency.as_ref().map(g)));
    let p50 = |s: &Sample| s.latency.map_or(f64::NAN, |l| l.p50_ms);
    Some(LatencyRow {
        p50_ms: of(|l| l.p50_ms)?,
        p50_vs_nftables_ms: within_run(samples, all, Datapath::Nftables, p50, |x, y| Some(x - y)),
        p99_ms: of(|l| l.p99_ms)?,
        mean_ms: of(|l| l.mean_ms)?,
    })
}

/// Every row of the report, ordered by load, service count, datapath.
pub fn rows(report: &Report) -> Vec<Row> {
    let keys: BTreeSet<(Load, usize, Datapath)> = report
        .samples
        .iter()
        .map(|s| (s.load, s.services, s.datapath))
        .collect();
    let all = &report.samples;
    keys.into_iter()
        .filter_map(|(load, services, datapath)| {
            let samples: Vec<&Sample> = all
                .iter()
                .filter(|s| s.load == load && s.services == services && s.datapath == datapath)
                .collect();
            let f = |g: fn(&Sample) -> f64| spread(samples.iter().map(|s| g(s)));
            Some(Row {
                load,
                services,
                datapath,
                value: f(|s| s.value)?,
                vs_iptables: ratios(&samples, all, Datapath::Iptables, |s| s.value),
                vs_nftables: ratios(&samples, all, Datapath::Nftables, |s| s.value),
                gateway_us_per_unit: f(gateway_us),
                rig_us_per_unit: f(rig_us),
                rig_vs_iptables: ratios(&samples, all, Datapath::Iptables, rig_us),
                syn_retransmits: f(|s| s.syn_retransmits as f64)?,
                paws_rejects: f(|s| s.paws_rejects as f64)?,
                errors: f(|s| s.errors as f64)?,
                latency: latency_row(&samples, all),
            })
        })
        .collect()
}

/// One (services, datapath) update timing over the runs, with ratios.
#[derive(Clone, Debug)]
pub struct UpdateRow {
    pub services: usize,
    pub datapath: Datapath,
    pub millis: Spread,
    pub vs_iptables: Option<Spread>,
    pub vs_nftables: Option<Spread>,
}

pub fn update_rows(report: &Report) -> Vec<UpdateRow> {
    let keys: BTreeSet<(usize, Datapath)> = report
        .updates
        .iter()
        .map(|u| (u.services, u.datapath))
        .collect();
    let ratio = |u: &UpdateSample, base: Datapath| {
        report
            .updates
            .iter()
            .find(|b| b.run == u.run && b.services == u.services && b.datapath == base)
            .filter(|b| b.millis > 0.0)
            .map(|b| u.millis / b.millis)
    };
    keys.into_iter()
        .filter_map(|(services, datapath)| {
            let mine: Vec<&UpdateSample> = report
                .updates
                .iter()
                .filter(|u| u.services == services && u.datapath == datapath)
                .collect();
            Some(UpdateRow {
                services,
                datapath,
                millis: spread(mine.iter().map(|u| u.millis))?,
                vs_iptables: spread(mine.iter().filter_map(|u| ratio(u, Datapath::Iptables))),
                vs_nftables: spread(mine.iter().filter_map(|u| ratio(u, Datapath::Nftables))),
            })
        })
        .collect()
}

fn num(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn spread_text(s: &Spread) -> String {
    if s.n > 1 {
        format!("{} ({}–{})", num(s.median), num(s.min), num(s.max))
    } else {
        num(s.median)
    }
}

fn ratio_text(s: Option<&Spread>) -> String {
    match s {
        Some(s) if s.n > 1 => format!("{:.2}× ({:.2}–{:.2})", s.median, s.min, s.max),
        Some(s) => format!("{:.2}×", s.median),
        None => "–".into(),
    }
}

fn opt_text(s: Option<&Spread>) -> String {
    s.map_or("–".into(), |s| num(s.median))
}

/// The markdown tables: one per load, one for the update timings, then the
/// failures and skipped loads.
pub fn markdown(report: &Report) -> String {
    let rows = rows(report);
    let mut out = String::new();
    let loads: BTreeSet<Load> = rows.iter().map(|r| r.load).collect();
    for load in loads {
        let tcp_state = matches!(load, Load::NewConnections | Load::Churn);
        let latency = rows.iter().any(|r| r.load == load && r.latency.is_some());
        let _ = writeln!(
            out,
            "\n#### {} — {}, median (min–max) over runs\n",
            load.title(),
            load.unit()
        );
        let errors = match load {
            Load::Udp => "lost echoes",
            Load::Iperf => "TCP retransmits",
            _ => "errors",
        };
        let _ = write!(
            out,
            "| services | datapath | {unit} | × iptables | × nftables | gateway CPU µs/{per} | rig CPU µs/{per} | rig CPU × iptables | {errors} |",
            unit = load.unit(),
            per = load.per()
        );
        if tcp_state {
            out.push_str(" client SYN retransmits | backend PAWS rejects |");
        }
        if latency {
            out.push_str(" p50 ms | p50 − nftables ms | p99 ms | mean ms |");
        }
        out.push_str("\n|---:|---|---:|---:|---:|---:|---:|---:|---:|");
        if tcp_state {
            out.push_str("---:|---:|");
        }
        if latency {
            out.push_str("---:|---:|---:|---:|");
        }
        out.push('\n');
        for r in rows.iter().filter(|r| r.load == load) {
            let own = |d: Datapath, s: Option<&Spread>| {
                if r.datapath == d {
                    "1×".to_owned()
                } else {
                    ratio_text(s)
                }
            };
            let _ = write!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.services,
                r.datapath.name(),
                spread_text(&r.value),
                own(Datapath::Iptables, r.vs_iptables.as_ref()),
                own(Datapath::Nftables, r.vs_nftables.as_ref()),
                opt_text(r.gateway_us_per_unit.as_ref()),
                opt_text(r.rig_us_per_unit.as_ref()),
                own(Datapath::Iptables, r.rig_vs_iptables.as_ref()),
                spread_text(&r.errors),
            );
            if tcp_state {
                let _ = write!(
                    out,
                    " {} | {} |",
                    spread_text(&r.syn_retransmits),
                    spread_text(&r.paws_rejects)
                );
            }
            if latency {
                let ms = |s: &Spread| format!("{:.3}", s.median);
                let _ = match &r.latency {
                    Some(l) => write!(
                        out,
                        " {} | {} | {} | {} |",
                        ms(&l.p50_ms),
                        match (&l.p50_vs_nftables_ms, r.datapath) {
                            (_, Datapath::Nftables) => "0".to_owned(),
                            (Some(d), _) => format!("{:+.3}", d.median),
                            (None, _) => "–".to_owned(),
                        },
                        ms(&l.p99_ms),
                        ms(&l.mean_ms)
                    ),
                    None => write!(out, " – | – | – | – |"),
                };
            }
            out.push('\n');
        }
    }
    let updates = update_rows(report);
    if !updates.is_empty() {
        out.push_str(
            "\n#### Programming one endpoint removal — ms, median (min–max) over runs\n\n\
             | services | datapath | ms | × iptables | × nftables |\n|---:|---|---:|---:|---:|\n",
        );
        for u in &updates {
            let own = |d: Datapath, s: Option<&Spread>| {
                if u.datapath == d {
                    "1×".to_owned()
                } else {
                    ratio_text(s)
                }
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                u.services,
                u.datapath.name(),
                spread_text(&u.millis),
                own(Datapath::Iptables, u.vs_iptables.as_ref()),
                own(Datapath::Nftables, u.vs_nftables.as_ref()),
            );
        }
    }
    if let (Some(busy), Some(kernel), Some(softirq)) = (
        spread(report.baseline_busy_per_s.iter().copied()),
        spread(report.baseline_kernel_per_s.iter().copied()),
        spread(report.baseline_softirq_per_s.iter().copied()),
    ) {
        let _ = writeln!(
            out,
            "\nIdle baseline (machine, CPU-s per s, median over runs, subtracted from the machine \
             figures): busy {:.2}, system+irq+softirq {:.2}, irq+softirq {:.3}. Whole comparison: {:.0} s.",
            busy.median, kernel.median, softirq.median, report.elapsed_s
        );
    }
    for f in &report.failures {
        let _ = writeln!(
            out,
            "\n**Not measured**: run {} {} at {} services: {}",
            f.run,
            f.datapath.name(),
            f.services,
            f.what
        );
    }
    for s in &report.skipped_loads {
        let _ = writeln!(out, "\n**Skipped load**: {s}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::run::{CpuUse, PorticoDriver};

    fn sample(run: usize, datapath: Datapath, value: f64, busy_s: f64) -> Sample {
        Sample {
            run,
            datapath,
            services: 1000,
            load: Load::NewConnections,
            value,
            units: value * 2.0,
            cpu: CpuUse {
                wall_s: 2.0,
                gateway_s: (!datapath.is_kernel()).then_some(busy_s / 4.0),
                ours_s: busy_s * 0.75,
                softirq_s: busy_s * 0.25,
                machine_kernel_s: busy_s / 2.0,
                machine_busy_s: busy_s * 1.5,
            },
            syn_retransmits: run as u64,
            paws_rejects: 0,
            latency: None,
            errors: 0,
        }
    }

    #[test]
    fn spread_is_median_min_max() {
        assert_eq!(spread([]), None);
        let s = spread([3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(spread([4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
    }

    #[test]
    fn ratios_are_taken_within_a_run_then_summarised() {
        let p = Datapath::Portico(PorticoDriver::AfPacket);
        // Run 0 is slow for everyone, run 1 fast: Portico is 2× iptables in
        // both, which a ratio of medians would also say, but 4× / 1× mixed
        // runs would not.
        let report = Report {
            samples: vec![
                sample(0, p, 200.0, 1.0),
                sample(0, Datapath::Iptables, 100.0, 1.0),
                sample(1, p, 2000.0, 1.0),
                sample(1, Datapath::Iptables, 1000.0, 2.0),
                sample(0, Datapath::Nftables, 400.0, 1.0),
            ],
            ..Report::default()
        };
        let rows = rows(&report);
        let portico = rows.iter().find(|r| r.datapath == p).unwrap();
        let r = portico.vs_iptables.unwrap();
        assert_eq!((r.median, r.min, r.max, r.n), (2.0, 2.0, 2.0, 2));
        // Only run 0 has an nftables figure.
        let r = portico.vs_nftables.unwrap();
        assert_eq!((r.median, r.n), (0.5, 1));
        // CPU per unit: 1 s over 400 connections = 2500 µs; 1 s / 4000.
        let m = portico.rig_us_per_unit.unwrap();
        assert_eq!((m.min, m.max), (250.0, 2500.0));
        // The gateway's own CPU for Portico, system time for the kernel.
        assert_eq!(portico.gateway_us_per_unit.unwrap().max, 625.0);
        let ipt = rows
            .iter()
            .find(|r| r.datapath == Datapath::Iptables)
            .unwrap();
        assert_eq!(ipt.gateway_us_per_unit.unwrap().max, 2500.0);
        let table = markdown(&report);
        assert!(
            table.contains(
                "| 1000 | portico (af_packet) | 1100 (200–2000) | 2.00× (2.00–2.00) | 0.50× |"
            ),
            "{table}"
        );
        assert!(table.contains("client SYN retransmits"));
    }

    #[test]
    fn latency_columns_show_the_p50_difference_within_each_run() {
        let p = Datapath::Portico(PorticoDriver::AfPacket);
        let with = |run, datapath, p50_ms: f64| Sample {
            load: Load::Rtt,
            latency: Some(Latency {
                mean_ms: p50_ms + 0.01,
                p50_ms,
                p90_ms: p50_ms * 2.0,
                p99_ms: p50_ms * 3.0,
            }),
            ..sample(run, datapath, 1000.0, 1.0)
        };
        // Run 1 is slower for both datapaths: the difference within each
        // run is 0.05 ms, not the 0.45 ms between the medians' extremes.
        let report = Report {
            samples: vec![
                with(0, p, 0.15),
                with(0, Datapath::Nftables, 0.10),
                with(1, p, 0.55),
                with(1, Datapath::Nftables, 0.50),
                sample(0, p, 1000.0, 1.0),
            ],
            ..Report::default()
        };
        let rows = rows(&report);
        let portico = rows
            .iter()
            .find(|r| r.datapath == p && r.load == Load::Rtt)
            .unwrap();
        let l = portico.latency.as_ref().unwrap();
        let d = l.p50_vs_nftables_ms.unwrap();
        assert!(
            (d.min - 0.05).abs() < 1e-9 && (d.max - 0.05).abs() < 1e-9,
            "{d:?}"
        );
        assert!((l.p99_ms.median - 1.05).abs() < 1e-9);
        // The connection load without latency figures has no latency row.
        assert!(
            rows.iter()
                .all(|r| r.load != Load::NewConnections || r.latency.is_none())
        );
        let table = markdown(&report);
        assert!(
            table.contains("| p50 ms | p50 − nftables ms | p99 ms | mean ms |"),
            "{table}"
        );
        assert!(
            table.contains("| 0.350 | +0.050 | 1.050 | 0.360 |"),
            "{table}"
        );
        assert!(table.contains("| 0.300 | 0 | 0.900 | 0.310 |"), "{table}");
    }
}
