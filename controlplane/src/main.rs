//! `portico`: the gateway binary.
//!
//! * `check --config FILE` — validate a configuration and print the plan, or
//!   every problem with its field path.
//! * `demo` — the pipeline on the in-memory driver against simulated clients
//!   and backends.

use clap::{Parser, Subcommand};
use portico::demo;
use std::path::PathBuf;

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

#[derive(Subcommand, Debug)]
enum Command {
    /// Validate a configuration file and print the resulting plan.
    Check {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Run the packet pipeline on the in-memory driver against simulated
    /// clients and backends, and print what happened.
    Demo(demo::DemoArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Check { config } => match nic_config::load(&config) {
            Ok(plan) => {
                print!("{plan}");
                Ok(())
            }
            Err(e) => {
                eprintln!("{}: invalid configuration:\n{e}", config.display());
                std::process::exit(2);
            }
        },
        Command::Demo(args) => demo::run(&args),
    }
}
