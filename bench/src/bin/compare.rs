//! `compare`: Portico vs the kernel's NAT in kube-proxy's iptables and
//! nftables rule shapes, on one namespace topology (issue 5, first cut).
//!
//! ```text
//! compare [--services 1,1000] [--duration-s 3] [--rate PPS] [--flows 1000]
//!         [--backends 2] [--workers 1] [--update-at 1000]
//!         [--iptables-restore iptables-restore] [--results bench/RESULTS.md]
//!         [--portico PATH] [--pktgen PATH]
//! ```
//!
//! Needs root, `ip netns`, iptables and nft. Prints a markdown table (every
//! figure also as a ratio to the iptables row at the same service count)
//! and, with `--results`, appends it with the command, date and machine to
//! that file. Every namespace and process is removed at the end.

use clap::Parser;
use portico_bench::compare::run::{CompareConfig, markdown, run};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(Debug, Parser)]
#[command(name = "compare", about = "Portico vs kernel NAT (kube-proxy shapes)")]
struct Cli {
    /// Service counts to measure at.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 1000])]
    services: Vec<usize>,
    #[arg(long, default_value_t = 3.0)]
    duration_s: f64,
    /// Frames per second; as fast as possible when absent.
    #[arg(long)]
    rate: Option<u64>,
    #[arg(long, default_value_t = 1000)]
    flows: u32,
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=32))]
    backends: u8,
    /// Portico worker threads.
    #[arg(long, default_value_t = 1)]
    workers: u32,
    /// Time programming one endpoint removal at this service count (must be
    /// one of --services).
    #[arg(long)]
    update_at: Option<usize>,
    #[arg(long, default_value = "iptables-restore")]
    iptables_restore: String,
    /// Append the table to this markdown file.
    #[arg(long)]
    results: Option<PathBuf>,
    /// Default: `portico` next to this binary.
    #[arg(long)]
    portico: Option<PathBuf>,
    /// Default: `pktgen` next to this binary.
    #[arg(long)]
    pktgen: Option<PathBuf>,
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
        "{} vCPU {cpu}, Linux {}, {}, {}",
        shell("nproc", &[]),
        shell("uname", &["-r"]),
        shell("iptables", &["--version"]),
        shell("nft", &["--version"])
    )
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = CompareConfig {
        portico: cli.portico.unwrap_or_else(|| sibling("portico")),
        pktgen: cli.pktgen.unwrap_or_else(|| sibling("pktgen")),
        services: cli.services,
        duration_s: cli.duration_s,
        rate: cli.rate,
        flows: cli.flows,
        backends: usize::from(cli.backends),
        workers: cli.workers,
        iptables_restore: cli.iptables_restore,
        update_at: cli.update_at,
    };
    let report = match run(&config) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("compare: {e}");
            return ExitCode::FAILURE;
        }
    };
    let table = markdown(&report);
    println!("{table}");
    if let Some(path) = cli.results {
        let command: Vec<String> = std::env::args().collect();
        let heading = "## Portico vs kernel NAT (issue 5, first cut)";
        let existing = std::fs::read_to_string(&path).unwrap_or_default();
        let mut text = String::new();
        if !existing.contains(heading) {
            text.push_str(&format!("\n{heading}\n"));
        }
        text.push_str(&format!(
            "\nDate: {}. Machine: {}.\nCommand: `{}`\n\n{table}",
            shell("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            machine(),
            command.join(" ")
        ));
        let appended = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = appended {
            eprintln!("compare: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
