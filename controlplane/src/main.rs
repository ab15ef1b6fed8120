//! `portico`: the gateway binary.
//!
//! Subcommands so far:
//! * `demo` — the pipeline on the in-memory driver: simulated clients open
//!   TCP connections and send UDP queries to a VIP and a NodePort, simulated
//!   backends answer, and the demo prints where connections landed, what the
//!   pipeline cost per packet, and the gateway's counters. (The
//!   network-namespace demo with real servers arrives with the af_packet
//!   driver.)

mod demo;

use clap::{Parser, Subcommand};

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
    /// Run the packet pipeline on the in-memory driver against simulated
    /// clients and backends, and print what happened.
    Demo(demo::DemoArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Demo(args) => demo::run(&args),
    }
}
