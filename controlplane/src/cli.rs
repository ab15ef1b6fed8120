//! The `portico` command line (the binary's `main` calls [`main`]).
//!
//! * `check --config FILE` — validate a configuration and print the plan, or
//!   every problem with its field path.
//! * `run --config FILE` — run the gateway on the configured interfaces;
//!   SIGHUP reloads the file, SIGTERM/SIGINT stop.
//! * `run … --metrics-addr ADDR` — also serve Prometheus metrics at
//!   `http://ADDR/metrics` (default 127.0.0.1:9464, `off` for none).
//! * `stats [--json] [--rate-interval-ms 1000]` — print the live counters of a
//!   running gateway, with rates over the last interval.
//! * `run … --log-format json --log-level debug --drop-log-interval-s 10` —
//!   structured logs; drops are summarised at most once per interval (never
//!   logged per packet).
//! * `services [--json]` — each service with its listeners and backends
//!   (weight, condition, packets, bytes, new and active flows), like
//!   `ipvsadm -Ln`.
//! * `bgp [--json]` — the BGP sessions (router, ASNs, state, uptime,
//!   prefixes sent, updates sent/received, flaps, last error) and what is
//!   announced, or why nothing is (watchdog, stopping).
//! * `flows [--service S] [--backend A:P] [--limit N] [--json]` — the
//!   workers' conntrack entries with both tuples, state, age and expiry,
//!   like `conntrack -L`.
//! * `simulate --config FILE | --live  'tcp A:P -> B:Q' [--json]` — run one
//!   packet through the dataplane's own pipeline built from the file, or
//!   inside the running gateway against its live snapshot (also reporting a
//!   tracked flow with that tuple), and print the listener, service,
//!   affinity, Maglev slot, backend, SNAT tuple and verdict (or drop
//!   reason).
//!
//! Every command talking to a running gateway fails with one line and exit
//! status 1 when the gateway is not running or the socket is not
//! accessible.
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
        /// Check the plan of this `[[instance]]` (default
        /// `$PORTICO_INSTANCE`; without either, every instance is checked
        /// and the first one's plan printed).
        #[arg(long)]
        instance: Option<String>,
    },
    /// Run the gateway: SIGHUP reloads the configuration file,
    /// SIGTERM/SIGINT stop it. Logs go to stderr (RUST_LOG filters them).
    Run {
        #[arg(long, short)]
        config: PathBuf,
        #[arg(long, value_enum, default_value = "text")]
        log_format: LogFormat,
        /// Least severe level logged: error, warn, info, debug, trace
        /// (RUST_LOG, when set, takes precedence).
        #[arg(long, default_value = "info")]
        log_level: tracing::Level,
        /// Seconds between two drop summaries in the log (0: none).
        #[arg(long, default_value_t = admin::DEFAULT_DROP_LOG_INTERVAL_MS / 1000)]
        drop_log_interval_s: u64,
        /// Unix socket serving `portico stats`.
        #[arg(long, default_value = admin::DEFAULT_SOCKET)]
        admin_socket: PathBuf,
        /// Group (name or gid) that owns the admin socket and whose members
        /// may use it, besides root and the gateway's user.
        #[arg(long)]
        admin_group: Option<String>,
        /// Address serving Prometheus metrics at /metrics (`off`: none).
        #[arg(long, default_value = admin::DEFAULT_METRICS_ADDR, value_parser = parse_metrics_addr)]
        metrics_addr: MetricsAddr,
        /// Run as this `[[instance]]` of the file: its own node and SNAT
        /// addresses, its name in the tier's per-VIP ARP election. Default
        /// `$PORTICO_INSTANCE` (the Kubernetes manifests set it from the
        /// pod's name); needed when the file declares instances.
        #[arg(long)]
        instance: Option<String>,
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
    /// The BGP sessions of a running gateway (state, uptime, prefixes sent,
    /// updates, flaps, last error) and what it announces.
    Bgp {
        #[arg(long, default_value = admin::DEFAULT_SOCKET)]
        admin_socket: PathBuf,
        /// Print the BGP report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The conntrack entries of a running gateway (both tuples, state, age,
    /// expiry, service and backend), like `conntrack -L`.
    Flows {
        #[arg(long, default_value = admin::DEFAULT_SOCKET)]
        admin_socket: PathBuf,
        /// Only flows of this service (by name).
        #[arg(long)]
        service: Option<String>,
        /// Only flows to this backend (`address:port`).
        #[arg(long)]
        backend: Option<String>,
        /// List at most this many entries (at most 100,000).
        #[arg(long, default_value_t = admin::DEFAULT_FLOW_LIMIT, value_parser = parse_flow_limit)]
        limit: usize,
        /// Print the entries as JSON.
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
        /// Milliseconds between the two reports rates are computed from
        /// (text output; 0: no rates).
        #[arg(long, default_value_t = 1000)]
        rate_interval_ms: u64,
    },
    /// Where would this packet go, and why: runs the first packet of a
    /// connection through the same pipeline code the dataplane runs, built
    /// from a configuration file (`--config`) or inside the running gateway
    /// on its live snapshot (`--live`).
    Simulate {
        #[arg(long, short, required_unless_present = "live", conflicts_with = "live")]
        config: Option<PathBuf>,
        /// Ask the running gateway (its admin socket).
        #[arg(long)]
        live: bool,
        #[arg(long, default_value = admin::DEFAULT_SOCKET)]
        admin_socket: PathBuf,
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

fn init_logging(format: LogFormat, level: tracing::Level) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level.as_str()));
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

/// `portico run`'s options.
struct RunArgs {
    config: PathBuf,
    log_format: LogFormat,
    log_level: tracing::Level,
    drop_log_interval_s: u64,
    admin_socket: PathBuf,
    admin_group: Option<String>,
    metrics_addr: MetricsAddr,
    instance: Option<String>,
}

/// The environment variable naming the instance when `--instance` is not
/// given.
pub const INSTANCE_ENV: &str = "PORTICO_INSTANCE";

/// `--instance`, else a non-empty `$PORTICO_INSTANCE`.
fn instance_name(flag: Option<String>) -> Option<String> {
    flag.or_else(|| std::env::var(INSTANCE_ENV).ok())
        .filter(|s| !s.is_empty())
}

/// `--limit` of `portico flows`: 1 to [`admin::MAX_FLOW_LIMIT`].
fn parse_flow_limit(text: &str) -> Result<usize, String> {
    let limit: usize = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of flows"))?;
    if limit == 0 || limit > admin::MAX_FLOW_LIMIT {
        return Err(format!(
            "{limit} is outside 1..={} (filter by --service or --backend instead)",
            admin::MAX_FLOW_LIMIT
        ));
    }
    Ok(limit)
}

fn run(args: RunArgs) -> ExitCode {
    let RunArgs {
        config,
        log_format,
        log_level,
        drop_log_interval_s,
        admin_socket,
        admin_group,
        metrics_addr,
        instance,
    } = args;
    let admin_access = match admin::AdminAccess::for_group(admin_group.as_deref()) {
        Ok(access) => access,
        Err(e) => {
            eprintln!("--admin-group: {e}");
            return ExitCode::from(2);
        }
    };
    let instance = instance_name(instance);
    let choice = match &instance {
        Some(name) => nic_config::InstanceChoice::Named(name),
        None => nic_config::InstanceChoice::Unnamed,
    };
    let plan = match nic_config::load_instance(&config, choice) {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("{}: invalid configuration:\n{e}", config.display());
            return ExitCode::from(2);
        }
    };
    init_logging(log_format, log_level);
    // Before anything starts, so that a signal during start-up is queued
    // rather than fatal.
    let mut signals = match gateway::signals() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot start");
            return ExitCode::FAILURE;
        }
    };
    let result =
        gateway::Gateway::start(plan, &config, &admin_socket, admin_access, metrics_addr.0)
            .and_then(|mut gw| {
                // Ports, rings and sockets are open: keep only what the
                // running gateway needs (gateway::privileges).
                gw.drop_privileges()?;
                // Only now do the workers poll their ports.
                gw.release_workers();
                gw.set_drop_log_interval_ms(drop_log_interval_s.saturating_mul(1000));
                gw.serve(&mut signals)
            });
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

/// `portico simulate --live`: the running gateway simulates; exit 2 for a
/// bad flow spec (checked here first), 1 when the gateway cannot be asked.
fn run_simulate_live(socket: &std::path::Path, flow: &str, json: bool) -> ExitCode {
    if let Err(e) = flow.parse::<simulate::FlowSpec>() {
        eprintln!("portico simulate: {e}");
        return ExitCode::from(2);
    }
    let request = admin::Request::Simulate {
        flow: flow.to_owned(),
    };
    match admin::ask::<serde_json::Value>(socket, &request) {
        Ok((raw, _)) if json => {
            print!("{raw}");
            ExitCode::SUCCESS
        }
        Ok((_, value)) => {
            print!("{}", value["text"].as_str().unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("portico simulate: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_flows(socket: &std::path::Path, query: admin::FlowsQuery, json: bool) -> ExitCode {
    match admin::ask::<admin::FlowsReport>(socket, &admin::Request::Flows(query)) {
        Ok((raw, _)) if json => {
            print!("{raw}");
            ExitCode::SUCCESS
        }
        Ok((_, report)) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("portico flows: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Parse the command line and run it.
pub fn main() -> anyhow::Result<ExitCode> {
    match Cli::parse().command {
        Command::Check { config, instance } => match nic_config::load_instance(
            &config,
            match &instance_name(instance) {
                Some(name) => nic_config::InstanceChoice::Named(name),
                None => nic_config::InstanceChoice::Every,
            },
        ) {
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
            log_level,
            drop_log_interval_s,
            admin_socket,
            admin_group,
            metrics_addr,
            instance,
        } => Ok(run(RunArgs {
            config,
            log_format,
            log_level,
            drop_log_interval_s,
            admin_socket,
            admin_group,
            metrics_addr,
            instance,
        })),
        Command::Flows {
            admin_socket,
            service,
            backend,
            limit,
            json,
        } => Ok(run_flows(
            &admin_socket,
            admin::FlowsQuery {
                service,
                backend,
                limit,
            },
            json,
        )),
        Command::Services { admin_socket, json } => Ok(print_section(
            "services",
            &admin_socket,
            json,
            |r| serde_json::to_string_pretty(&r.services),
            |r| admin::ServicesTable(&r.services).to_string(),
        )),
        Command::Bgp { admin_socket, json } => Ok(print_section(
            "bgp",
            &admin_socket,
            json,
            |r| serde_json::to_string_pretty(&r.bgp),
            |r| admin::BgpTable(&r.bgp).to_string(),
        )),
        Command::Stats {
            admin_socket,
            json,
            rate_interval_ms,
        } => match admin::fetch(&admin_socket) {
            Ok((raw, _)) if json => {
                print!("{raw}");
                Ok(ExitCode::SUCCESS)
            }
            Ok((_, report)) if rate_interval_ms == 0 => {
                print!("{report}");
                Ok(ExitCode::SUCCESS)
            }
            Ok((_, before)) => {
                std::thread::sleep(std::time::Duration::from_millis(rate_interval_ms));
                match admin::fetch(&admin_socket) {
                    Ok((_, after)) => {
                        print!("{after}");
                        print!(
                            "{}",
                            admin::Rates {
                                before: &before,
                                after: &after
                            }
                        );
                        Ok(ExitCode::SUCCESS)
                    }
                    Err(e) => {
                        eprintln!("portico stats: {e}");
                        Ok(ExitCode::FAILURE)
                    }
                }
            }
            Err(e) => {
                eprintln!("portico stats: {e}");
                Ok(ExitCode::FAILURE)
            }
        },
        Command::Simulate {
            config,
            live,
            admin_socket,
            flow,
            json,
        } => Ok(match config {
            Some(config) if !live => run_simulate(&config, &flow, json),
            _ => run_simulate_live(&admin_socket, &flow, json),
        }),
        Command::Demo(args) => demo::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Tool(cmd) => tool::run(&cmd).map(|()| ExitCode::SUCCESS),
    }
}

/// `portico services` / `portico bgp`: one section of the running
/// gateway's report, as JSON or as text; errors are one line on stderr.
fn print_section(
    command: &str,
    admin_socket: &std::path::Path,
    json: bool,
    to_json: impl FnOnce(&admin::StatsReport) -> serde_json::Result<String>,
    to_text: impl FnOnce(&admin::StatsReport) -> String,
) -> ExitCode {
    let report = match admin::fetch(admin_socket) {
        Ok((_, report)) => report,
        Err(e) => {
            eprintln!("portico {command}: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !json {
        print!("{}", to_text(&report));
        return ExitCode::SUCCESS;
    }
    match to_json(&report) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("portico {command}: {e}");
            ExitCode::FAILURE
        }
    }
}
