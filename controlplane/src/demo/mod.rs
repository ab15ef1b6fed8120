//! `portico demo`: the main job on its embedded default.
//!
//! * As root: [`live`] builds a throw-away network of namespaces
//!   ([`topology`]: a client, the gateway's two veth ports, three backends
//!   running nginx or the built-in HTTP server), starts `portico run` on it
//!   with a built-in configuration, sends real HTTP requests and UDP queries
//!   through the VIP and the NodePort and HTTP requests (`curl -6`) through
//!   an IPv6 VIP ([`topology::Topology::enable_ipv6`]), prints the per-backend distribution,
//!   latencies and the gateway's counters, and removes everything (also on
//!   Ctrl-C or failure). Then [`kernel_path`] has Linux's NAT forward the
//!   same services in the same namespaces and the demo prints both
//!   latencies.
//! * `--mem`, or without root: [`mem`] runs the same pipeline on the
//!   in-memory driver against simulated clients and backends, IPv4 and
//!   IPv6 (the kernel-path comparison is IPv4 only).

pub mod kernel_path;
pub mod live;
pub mod mem;
pub mod topology;

/// `portico demo`.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Run the pipeline on the in-memory driver instead (no root needed).
    #[arg(long)]
    pub mem: bool,
    /// TCP connections to open (half to the VIP, half to the NodePort);
    /// in memory, that many per family. Default: 300 on the network, 3000
    /// in memory.
    #[arg(long)]
    pub connections: Option<u32>,
    /// UDP queries to send to the VIP (in memory: to each family's VIP).
    /// Default: 100 on the network, 3000 in memory.
    #[arg(long)]
    pub queries: Option<u32>,
    /// Backends behind each service.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=32))]
    pub backends: u8,
    /// Use the built-in HTTP server even when nginx is installed.
    #[arg(long)]
    pub no_nginx: bool,
}

/// Run the demo `args` asks for.
pub fn run(args: &DemoArgs) -> anyhow::Result<()> {
    let mem_args = mem::MemDemoArgs {
        connections: args.connections.unwrap_or(3000),
        queries: args.queries.unwrap_or(3000),
        backends: args.backends,
    };
    if args.mem {
        return mem::run(&mem_args);
    }
    if let Err(why) = live::can_run() {
        println!("portico demo: {why}");
        println!(
            "  The network demo needs root: sudo cargo run --release -p portico -- demo\n  \
             Running the in-memory demo instead (portico demo --mem).\n"
        );
        return mem::run(&mem_args);
    }
    live::run(&live::LiveDemoArgs {
        connections: args.connections.unwrap_or(300),
        queries: args.queries.unwrap_or(100),
        backends: usize::from(args.backends),
        prefer_nginx: !args.no_nginx,
    })
}
