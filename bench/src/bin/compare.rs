//! `compare`: Portico vs the kernel's NAT in kube-proxy's iptables and
//! nftables rule shapes, on one namespace topology (issue 5).
//!
//! ```text
//! compare [--runs 3] [--services 1,1000,10000] [--duration-s 3]
//!         [--loads udp,conn,keepalive,churn,iperf] [--portico-driver afpacket]...
//!         [--udp-rate PPS] [--flows 1000] [--backends 2] [--workers 1]
//!         [--wrk-connections 32] [--churn-connections 64] [--churn-ports 1024]
//!         [--iptables-restore iptables-restore] [--quick]
//!         [--results bench/RESULTS.md] [--plots bench/plots] [--json FILE]
//!         [--portico PATH] [--pktgen PATH] [--offloads-on]
//! compare --syn-flood [--runs 3] [--duration-s 3] [--flood-rate PPS]
//!         [--defences portico-off,portico-on,kernel-syncookies,kernel-synproxy]
//!         [--settle-s 3] [--wrk-connections 32] [--backends 2] [--workers 1]
//!         [--results bench/RESULTS.md] [--json FILE]
//! ```
//!
//! `--syn-flood` (issue 15) measures instead, per SYN defence, new
//! connections/s (wrk, `Connection: close`) and failed requests without and
//! under a flood of spoofed SYNs (`pktgen send --proto syn-flood`, as fast
//! as it goes unless `--flood-rate`), the flows and SNAT ports held and the
//! gateway's RSS before, during and after; see
//! `portico_bench::compare::run::run_syn_flood`.
//!
//! `--portico-driver afxdp|dpdk` add rows for the fast drivers (one worker
//! per gateway veth queue); `dpdk` needs the binaries built with
//! `--features dpdk` (libdpdk-dev). `afpacket-blocks` (the `TPACKET_V3`
//! block ring) and `afxdp-busy-poll` (AF_XDP with busy polling) add rows
//! for those variants of the drivers; `afpacket-gso` (GSO/GRO
//! pass-through) with `--offloads-on` (GRO/GSO/TSO left on at every veth,
//! so TCP crosses as super-packets and the kernel rows forward with their
//! offloads too).
//!
//! Needs root, `ip netns`, iptables, nft, nginx, wrk and iperf3 (a load
//! whose program is missing is skipped, loudly). `--quick` is the smoke
//! run: 1 run, 1 s loads, 1 and 100 services. Prints the markdown tables
//! (median and min–max over the runs, every figure also as a ratio to the
//! kernel's in the same run); `--results` appends them with the command,
//! date, machine and load average to that file, `--plots` draws the SVG
//! plots, `--json` writes every raw sample. Every namespace and process is
//! removed at the end.

use clap::Parser;
use portico_bench::compare::flood_report::flood_markdown;
use portico_bench::compare::plot::plot_all;
use portico_bench::compare::report::markdown;
use portico_bench::compare::run::{
    CompareConfig, Datapath, Defence, FloodConfig, Load, PorticoDriver, Report, run, run_syn_flood,
};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

#[derive(Debug, Parser)]
#[command(name = "compare", about = "Portico vs kernel NAT (kube-proxy shapes)")]
struct Cli {
    /// Repetitions of the whole sequence (median and min–max over them).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    runs: u32,
    /// Service counts to measure at (at least the 3 measured services are
    /// always there).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 1000, 10000])]
    services: Vec<usize>,
    /// Length of every load, in seconds.
    #[arg(long, default_value_t = 3.0)]
    duration_s: f64,
    #[arg(long, value_delimiter = ',', default_values_t = Load::ALL.map(|l| l.key().to_owned()))]
    loads: Vec<String>,
    /// Portico driver of a Portico row; repeat for several rows.
    #[arg(long = "portico-driver", default_values_t = ["afpacket".to_owned()])]
    portico_drivers: Vec<String>,
    /// UDP frames per second; as fast as possible when absent.
    #[arg(long)]
    udp_rate: Option<u64>,
    #[arg(long, default_value_t = 1000)]
    flows: u32,
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=32))]
    backends: u8,
    /// Portico worker threads.
    #[arg(long, default_value_t = 1)]
    workers: u32,
    #[arg(long, default_value_t = 32)]
    wrk_connections: u32,
    #[arg(long, default_value_t = 64)]
    churn_connections: u32,
    /// Ephemeral ports the churn load's client may use.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(2..=20000))]
    churn_ports: u32,
    #[arg(long, default_value = "iptables-restore")]
    iptables_restore: String,
    /// TOML appended to every Portico row's configuration file (e.g.
    /// "[dataplane.afpacket]\nrx_frame_count = 16384").
    #[arg(long)]
    portico_extra: Option<String>,
    /// TOML keys added to every Portico row's `[dataplane]` table (e.g.
    /// "idle_spin_polls = 64").
    #[arg(long)]
    portico_dataplane: Option<String>,
    /// Leave GRO/GSO/TSO on at every veth of the topology (for
    /// `--portico-driver afpacket-gso` and the kernel with offloads).
    #[arg(long)]
    offloads_on: bool,
    /// Kernel rows to run: `iptables`, `nftables`, both (the default) or
    /// `none` (a Portico row alone, e.g. to profile it at 10,000 services
    /// without the kernel's minutes of rule loading; no ratios then).
    #[arg(long, value_delimiter = ',', default_values_t = ["iptables".to_owned(), "nftables".to_owned()])]
    kernel: Vec<String>,
    /// Smoke run: 1 run, 1 s loads, 1 and 100 services (overrides those).
    #[arg(long)]
    quick: bool,
    /// Append the tables to this markdown file.
    #[arg(long)]
    results: Option<PathBuf>,
    /// Draw the plots (SVG) into this directory.
    #[arg(long)]
    plots: Option<PathBuf>,
    /// Write every raw sample as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Default: `portico` next to this binary.
    #[arg(long)]
    portico: Option<PathBuf>,
    /// Default: `pktgen` next to this binary.
    #[arg(long)]
    pktgen: Option<PathBuf>,
    /// Run the SYN flood scenario instead of the loads.
    #[arg(long)]
    syn_flood: bool,
    /// `--syn-flood`: spoofed SYNs per second; as fast as pktgen goes when
    /// absent.
    #[arg(long, requires = "syn_flood")]
    flood_rate: Option<u64>,
    /// `--syn-flood`: the defences to measure, in this order.
    #[arg(long, value_delimiter = ',', requires = "syn_flood",
          default_values_t = Defence::ALL.map(|d| d.key().to_owned()))]
    defences: Vec<String>,
    /// `--syn-flood`: quiet seconds after the flood before the "after"
    /// sample.
    #[arg(long, default_value_t = 3.0, requires = "syn_flood")]
    settle_s: f64,
}

fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .unwrap_or_else(|| PathBuf::from(name))
}

fn shell(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_default();
    format!(
        "{} vCPU {cpu}, Linux {}, {}, {}, {}, {}",
        shell("nproc", &[]),
        shell("uname", &["-r"]),
        shell("iptables", &["--version"]),
        shell("nft", &["--version"]),
        shell("sh", &["-c", "wrk -v 2>&1 | head -1"]),
        shell("sh", &["-c", "iperf3 --version 2>&1 | head -1"]),
    )
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// `target` relative to the directory of `from` when it lies below it.
fn relative(target: &Path, from: &Path) -> String {
    let base = from.parent().unwrap_or(Path::new(""));
    target
        .strip_prefix(base)
        .unwrap_or(target)
        .to_string_lossy()
        .into_owned()
}

fn config(cli: &Cli) -> Result<CompareConfig, String> {
    let loads = cli
        .loads
        .iter()
        .map(|l| l.parse::<Load>().map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let drivers = cli
        .portico_drivers
        .iter()
        .map(|d| d.parse::<PorticoDriver>().map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    if !(cli.duration_s > 0.0 && cli.duration_s <= 600.0) {
        return Err("--duration-s must be in (0, 600]".into());
    }
    let mut kernel = Vec::new();
    for k in &cli.kernel {
        match k.as_str() {
            "iptables" => kernel.push(Datapath::Iptables),
            "nftables" => kernel.push(Datapath::Nftables),
            "none" => {}
            other => {
                return Err(format!(
                    "--kernel {other}: expected iptables, nftables or none"
                ));
            }
        }
    }
    let (runs, duration_s, services) = if cli.quick {
        (1, 1.0, vec![1, 100])
    } else {
        (cli.runs as usize, cli.duration_s, cli.services.clone())
    };
    Ok(CompareConfig {
        portico: cli.portico.clone().unwrap_or_else(|| sibling("portico")),
        pktgen: cli.pktgen.clone().unwrap_or_else(|| sibling("pktgen")),
        services,
        runs,
        duration_s,
        udp_rate: cli.udp_rate,
        flows: cli.flows,
        backends: usize::from(cli.backends),
        workers: cli.workers,
        drivers,
        loads,
        wrk_connections: cli.wrk_connections,
        churn_connections: cli.churn_connections,
        churn_ports: cli.churn_ports,
        iptables_restore: cli.iptables_restore.clone(),
        portico_extra: cli.portico_extra.clone().unwrap_or_default(),
        portico_dataplane: cli.portico_dataplane.clone().unwrap_or_default(),
        offloads_on: cli.offloads_on,
        kernel,
    })
}

fn flood_config(cli: &Cli) -> Result<FloodConfig, String> {
    let defences = cli
        .defences
        .iter()
        .map(|d| d.parse::<Defence>().map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    if cli.flood_rate == Some(0) {
        return Err("--flood-rate must be positive".into());
    }
    if !(cli.settle_s >= 0.0 && cli.settle_s <= 120.0) {
        return Err("--settle-s must be in [0, 120]".into());
    }
    Ok(FloodConfig {
        rate_pps: cli.flood_rate,
        defences,
        settle_s: cli.settle_s,
    })
}

/// Append `text` under `heading` (written once) to `path`.
fn append_section(path: &Path, heading: &str, text: &str) -> std::io::Result<()> {
    let existing = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = String::new();
    if !existing.contains(heading) {
        out.push_str(&format!("\n{heading}\n"));
    }
    out.push_str(text);
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .and_then(|mut f| f.write_all(out.as_bytes()))
}

/// Write `value` as pretty JSON to `path`.
fn write_json(path: &Path, value: &impl serde::Serialize) -> std::io::Result<()> {
    serde_json::to_string_pretty(value)
        .map_err(std::io::Error::other)
        .and_then(|j| std::fs::write(path, j))
}

/// The UTC date and time now, as the run headers print it.
fn now_utc() -> String {
    shell("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
}

/// The run's header: start date, machine, command, load average.
fn run_header(started: &str, load_before: &str, elapsed_s: f64) -> String {
    let command: Vec<String> = std::env::args().collect();
    format!(
        "\n### Run of {started}\n\nMachine: {}.\nCommand: `{}` ({elapsed_s:.0} s).\n\
         Load average before / after: {load_before} / {} — the machine was shared with other \
         builds meanwhile: read the ratios (taken within each run), not the absolute figures.\n",
        machine(),
        command.join(" "),
        load_average(),
    )
}

fn syn_flood_main(cli: &Cli, config: &CompareConfig) -> ExitCode {
    let flood = match flood_config(cli) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("compare: {e}");
            return ExitCode::FAILURE;
        }
    };
    let load_before = load_average();
    let started = now_utc();
    let report = match run_syn_flood(config, &flood) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("compare: {e}");
            return ExitCode::FAILURE;
        }
    };
    let table = flood_markdown(&report);
    println!("{table}");
    if let Some(path) = &cli.json
        && let Err(e) = write_json(path, &report)
    {
        eprintln!("compare: {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    if let Some(path) = &cli.results {
        let text = format!(
            "{}{table}",
            run_header(&started, &load_before, report.elapsed_s)
        );
        if let Err(e) = append_section(path, SYN_FLOOD_HEADING, &text) {
            eprintln!("compare: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// The RESULTS.md section of `--syn-flood`.
const SYN_FLOOD_HEADING: &str = "## SYN flood: Portico's syn-proxy vs the kernel (issue 15)";

fn append_results(
    path: &Path,
    table: &str,
    plots: &[PathBuf],
    (started, load_before): (&str, &str),
    report: &Report,
) -> std::io::Result<()> {
    let mut text = format!(
        "{}{table}",
        run_header(started, load_before, report.elapsed_s)
    );
    if !plots.is_empty() {
        text.push_str("\nPlots: ");
        let links: Vec<String> = plots
            .iter()
            .map(|p| {
                let rel = relative(p, path);
                let name = p
                    .file_name()
                    .map_or(rel.clone(), |n| n.to_string_lossy().into_owned());
                format!("[{name}]({rel})")
            })
            .collect();
        text.push_str(&links.join(" · "));
        text.push('\n');
    }
    append_section(path, "## Portico vs kernel NAT (issue 5)", &text)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match config(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("compare: {e}");
            return ExitCode::FAILURE;
        }
    };
    if cli.syn_flood {
        return syn_flood_main(&cli, &config);
    }
    let load_before = load_average();
    let started = now_utc();
    let report = match run(&config) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("compare: {e}");
            return ExitCode::FAILURE;
        }
    };
    let table = markdown(&report);
    println!("{table}");
    if let Some(path) = &cli.json
        && let Err(e) = write_json(path, &report)
    {
        eprintln!("compare: {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    let mut plots = Vec::new();
    if let Some(dir) = &cli.plots {
        match plot_all(&report, dir) {
            Ok(p) => plots = p,
            Err(e) => {
                eprintln!("compare: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(path) = &cli.results
        && let Err(e) = append_results(path, &table, &plots, (&started, &load_before), &report)
    {
        eprintln!("compare: {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel_rows(args: &[&str]) -> Result<Vec<Datapath>, String> {
        let cli = Cli::try_parse_from(std::iter::once("compare").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        config(&cli).map(|c| c.kernel)
    }

    #[test]
    fn kernel_rows_default_to_both_and_can_be_narrowed_or_dropped() {
        assert_eq!(
            kernel_rows(&[]),
            Ok(vec![Datapath::Iptables, Datapath::Nftables])
        );
        assert_eq!(
            kernel_rows(&["--kernel", "nftables"]),
            Ok(vec![Datapath::Nftables])
        );
        assert_eq!(kernel_rows(&["--kernel", "none"]), Ok(vec![]));
        let err = kernel_rows(&["--kernel", "iptables,pf"]).unwrap_err();
        assert!(err.contains("--kernel pf"), "{err}");
    }
}
