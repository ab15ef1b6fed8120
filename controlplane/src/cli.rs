//! The `portico` command line (the binary's `main` calls [`main`]).
//!
//! * `check --config FILE` — validate a configuration and print the plan, or
//!   every problem with its field path.
//! * `run --config FILE` — run the gateway on the configured interfaces;
//!   SIGHUP reloads the file, SIGTERM/SIGINT stop.
//! * `run … --metrics-addr ADDR` — also serve Prometheus metrics at
//!   `http://ADDR/metrics` (default 127.0.0.1:9464, `off` for none).
//! * `stats` — print the live counters of a running gateway.
//! * `services [--json]` — each service with its listeners and backends
//!   (weight, condition, packets, bytes), like `ipvsadm -Ln`. (`flows`, the
//!   conntrack listing, is not implemented: the tables belong to the
//!   workers.)
//! * `simulate --config FILE 'tcp A:P -> B:Q' [--json]` — run one packet
//!   through the dataplane's own pipeline built from the file and print the
//!   listener, service, affinity, Maglev slot, backend, SNAT tuple and
//!   verdict (or drop reason). (`--live`, against a running gateway, is not
//!   implemented.)
//! * `demo` — as root, a real gateway on veth interfaces between network
//!   namespaces with real clients and backends; `demo --mem` (or without
//!   root) the pipeline on the in-memory driver.
//! * `tool …` (hidden) — helpers run inside namespaces by the demo and the
//!   end-to-end tests.
//!
//! Exit codes: 0 success, 1 runtime failure, 2 invalid configuration.

use crate::{admin, demo, gateway, simulate, tool};
use clap::{Parser, Subcommand, ValueEnum};
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "portico",
    version,
    about = "Kubernetes north-south load-balancing gateway"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Validate a configuration file and print the resulting plan.
    Check {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Run the gateway: SIGHUP reloads the configuration file,
    /// SIGTERM/SIGINT stop it. Logs go to stderr (RUST_LOG filters them).
    Run {
        #[arg(long, short)]
        config: PathBuf,
        #[arg(long, value_enum, default_value = "text")]
        log_format: LogFormat,
        /// Unix socket serving `portico stats`.
        #[arg(long, default_value = admin::DEFAULT_SOCKET)]
        admin_socket: PathBuf,
        /// Address serving Prometheus metrics at /metrics (`off`: none).
        #[arg(long, default_value = admin::DEFAULT_METRICS_ADDR, value_parser = parse_metrics_addr)]
        metrics_addr: MetricsAddr,
    },
    /// Each service with its listeners and backends (weight, condition,
    /// traffic), like `ipvsadm -Ln`.
    Services {
        #[arg(long, default_value = admin::DEFAULT_SOCKET)]
        admin_socket: PathBuf,
        /// Print the services as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the live counters of a running gateway.
    Stats {
        #[arg(long, default_value = admin::DEFAULT_SOCKET)]
        admin_socket: PathBuf,
        /// Print the raw JSON report.
        #[arg(long)]
        json: bool,
    },
    /// Where would this packet go, and why: runs the first packet of a
    /// connection through the same pipeline code the dataplane runs, built
    /// from a configuration file.
    Simulate {
        #[arg(long, short)]
        config: PathBuf,
        /// The packet: 'tcp 198.51.100.7:40000 -> 203.0.113.10:80' or
        /// 'udp A:P -> B:Q'.
        flow: String,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Build a throw-away network of namespaces (client, gateway, three
    /// backends), run the gateway on it, send real HTTP and UDP through the
    /// VIP and the NodePort, print what happened and remove everything.
    /// Needs root; `--mem` (or no root) runs the pipeline in memory instead.
    Demo(demo::DemoArgs),
    /// Helpers for the demo and the end-to-end tests.
    #[command(subcommand, hide = true)]
    Tool(tool::ToolCommand),
}

/// `--metrics-addr`: an address, or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MetricsAddr(Option<SocketAddr>);

fn parse_metrics_addr(s: &str) -> Result<MetricsAddr, String> {
    if s == "off" {
        return Ok(MetricsAddr(None));
    }
    s.parse()
        .map(|a| MetricsAddr(Some(a)))
        .map_err(|e| format!("{s:?} is not `address:port` or `off`: {e}"))
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_thread_names(true);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn run(
    config: PathBuf,
    log_format: LogFormat,
    admin_socket: PathBuf,
    metrics_addr: MetricsAddr,
) -> ExitCode {
    let plan = match nic_config::load(&config) {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("{}: invalid configuration:\n{e}", config.display());
            return ExitCode::from(2);
        }
    };
    init_logging(log_format);
    // Before anything starts, so that a signal during start-up is queued
    // rather than fatal.
    let mut signals = match gateway::signals() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot start");
            return ExitCode::FAILURE;
        }
    };
    let result = gateway::Gateway::start(plan, &config, &admin_socket, metrics_addr.0)
        .and_then(|gw| gw.serve(&mut signals));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "portico failed");
            ExitCode::FAILURE
        }
    }
}

/// `portico simulate`: exit 2 for a bad flow spec or configuration, 1 when
/// the simulation itself fails.
fn run_simulate(config: &std::path::Path, flow: &str, json: bool) -> ExitCode {
    let result = flow
        .parse::<simulate::FlowSpec>()
        .and_then(|spec| Ok((simulate::load_plan(config)?, spec)))
        .and_then(|(plan, spec)| simulate::simulate(&plan, &spec));
    match result {
        Ok(outcome) if json => match serde_json::to_string_pretty(&outcome) {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("portico simulate: {e}");
                ExitCode::FAILURE
            }
        },
        Ok(outcome) => {
            print!("{outcome}");
            ExitCode::SUCCESS
        }
        Err(
            e @ (simulate::SimulateError::BadSpec { .. } | simulate::SimulateError::Config { .. }),
        ) => {
            eprintln!("portico simulate: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("portico simulate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Parse the command line and run it.
pub fn main() -> anyhow::Result<ExitCode> {
    match Cli::parse().command {
        Command::Check { config } => match nic_config::load(&config) {
            Ok(plan) => {
                print!("{plan}");
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("{}: invalid configuration:\n{e}", config.display());
                Ok(ExitCode::from(2))
            }
        },
        Command::Run {
            config,
            log_format,
            admin_socket,
            metrics_addr,
        } => Ok(run(config, log_format, admin_socket, metrics_addr)),
        Command::Services { admin_socket, json } => match admin::fetch(&admin_socket) {
            Ok((_, report)) if json => match serde_json::to_string_pretty(&report.services) {
                Ok(text) => {
                    println!("{text}");
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("portico services: {e}");
                    Ok(ExitCode::FAILURE)
                }
            },
            Ok((_, report)) => {
                print!("{}", admin::ServicesTable(&report.services));
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("portico services: {e}");
                Ok(ExitCode::FAILURE)
            }
        },
        Command::Stats { admin_socket, json } => match admin::fetch(&admin_socket) {
            Ok((raw, report)) => {
                if json {
                    print!("{raw}");
                } else {
                    print!("{report}");
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("portico stats: {e}");
                Ok(ExitCode::FAILURE)
            }
        },
        Command::Simulate { config, flow, json } => Ok(run_simulate(&config, &flow, json)),
        Command::Demo(args) => demo::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Tool(cmd) => tool::run(&cmd).map(|()| ExitCode::SUCCESS),
    }
}
