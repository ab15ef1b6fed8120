//! A tier of `portico run` instances behind a BGP router (issue 13 §4):
//!
//! ```text
//!  client 203.0.113.100 ── router (BIRD 2, ECMP FIB) ── br0 192.0.2.254/24 ──┬── instance 0 (192.0.2.1) ──┐
//!                          ip_forward, L4 multipath hash                      ├── instance 1 (192.0.2.2) ──┼── lan br0 ── nginx backends 10.1.0.10+
//!                                                                             └── instance 2 (192.0.2.3) ──┘   (SNAT 10.1.0.1+i)
//! ```
//!
//! Each instance is one namespace with its own node address (its BGP
//! router id), host address (the BGP source and NEXT_HOP, [`next_hop`]) and
//! SNAT address, announcing the VIP [`TIER_VIP`] to the router over eBGP.
//! The BGP connection is the instance namespace's kernel's, over the
//! outside port's host path (issue 13 §1: its TAP; no address on the data
//! veth), so it runs through the workers on every driver; each instance
//! chooses its driver ([`TierConfig::drivers`]).
//!
//! The router is BIRD 2 ([`TierRouter::Bird`]), whose kernel protocol
//! exports the merged multipath route into the router namespace's FIB
//! (`net.ipv4.fib_multipath_hash_policy=1`: flows spread by their ports),
//! or GoBGP ([`TierRouter::Gobgp`]), which keeps the paths in its RIB only
//! (it programs no FIB: that variant checks the announcements, BIRD's the
//! forwarding).
//!
//! Every resource is a guard (namespaces, processes, directories): the
//! tier is removed on drop, processes first.

use crate::{Netns, Process, TempDir, nginx, unique_name, veth, wait_until};
use portico::admin::{self, StatsReport};
use portico::demo::topology::{DriverKind, spawn_run};
use portico_netns::Veth;
use portico_netns::bird::Bird;
use portico_netns::gobgp::GoBgp;
use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

/// The VIP every instance serves and announces.
pub const TIER_VIP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
/// The client's address (behind the router).
pub const TIER_CLIENT: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 100);
/// The router's address on the instances' segment.
pub const TIER_ROUTER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 254);
pub const ROUTER_ASN: u32 = 65000;
pub const TIER_ASN: u32 = 65001;
const BACKEND_PORT: u16 = 8080;

/// Instance `i`'s node address (its BGP router id).
pub fn instance_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 1 + i as u8)
}

/// Instance `i`'s host address: its BGP source, so the NEXT_HOP of its
/// path at the router.
pub fn next_hop(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 101 + i as u8)
}

fn backend_addr(j: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 1, 0, 10 + j as u8)
}

/// The router daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierRouter {
    /// BIRD 2 with a kernel protocol: ECMP in the router's FIB.
    Bird,
    /// GoBGP: the paths in its RIB, no FIB.
    Gobgp,
}

/// What to build.
#[derive(Clone, Debug)]
pub struct TierConfig {
    /// One `portico run` instance per entry (1..=8), on that driver
    /// (af_packet or AF_XDP).
    pub drivers: Vec<DriverKind>,
    pub router: TierRouter,
    /// nginx backends, 1..=16.
    pub backends: usize,
    /// The `portico` binary.
    pub portico: PathBuf,
    /// `[bgp] shutdown_drain_s` of every instance.
    pub shutdown_drain_s: u16,
}

/// One running instance.
#[derive(Debug)]
pub struct Instance {
    /// `None` once stopped.
    process: Option<Process>,
    pub socket: PathBuf,
    pub log: PathBuf,
    pub ns: Netns,
}

impl Instance {
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(Process::pid)
    }

    pub fn stats(&self) -> Option<StatsReport> {
        admin::fetch(&self.socket).ok().map(|(_, r)| r)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Send a signal (`"TERM"`, …) without waiting.
    pub fn signal(&self, name: &str) -> io::Result<()> {
        match &self.process {
            Some(p) => p.signal(name),
            None => Err(io::Error::other("instance not running")),
        }
    }

    /// Whether the process still runs (reaping it if not).
    pub fn is_running(&mut self) -> bool {
        self.process.as_mut().is_some_and(|p| !p.has_exited())
    }

    /// Wait up to `timeout` for the exit after a signal.
    pub fn wait_exit(&mut self, timeout: Duration) -> io::Result<Option<ExitStatus>> {
        match self.process.as_mut() {
            Some(p) => p.wait_exit(timeout),
            None => Ok(None),
        }
    }
}

/// The tier; field order is drop order (processes, then directories, then
/// namespaces).
#[derive(Debug)]
pub struct Tier {
    pub instances: Vec<Instance>,
    /// With [`TierRouter::Bird`].
    pub bird: Option<Bird>,
    /// With [`TierRouter::Gobgp`].
    pub gobgp: Option<GoBgp>,
    _servers: Vec<Process>,
    _server_dirs: Vec<TempDir>,
    pub dir: TempDir,
    pub client: Netns,
    pub router: Netns,
    pub lan: Netns,
    backends: Vec<Netns>,
    portico: PathBuf,
}

impl Tier {
    /// Build the namespaces, start BIRD, the backends and every instance,
    /// and wait until each instance's admin socket answers.
    pub fn build(config: &TierConfig) -> io::Result<Tier> {
        if !(1..=8).contains(&config.drivers.len()) || !(1..=16).contains(&config.backends) {
            return Err(io::Error::other("instances 1..=8, backends 1..=16"));
        }
        let portico = config.portico.clone();
        let portico_str = portico
            .to_str()
            .ok_or_else(|| io::Error::other("the portico path is not UTF-8"))?
            .to_owned();
        // With an AF_XDP instance, TX checksum offload off too on every end
        // whose frames can reach it: XDP frames carry no "checksum partial"
        // mark, so they need complete checksums.
        let any_afxdp = config.drivers.contains(&DriverKind::Afxdp);
        let offloads_off = |ns: &Netns, ifname: &str| {
            let mut args = vec!["tool", "offloads-off", ifname];
            if any_afxdp {
                args.push("--tx-checksum");
            }
            ns.exec(&portico_str, &args)
        };
        let client = Netns::new("tc")?;
        let router = Netns::new("tr")?;
        let lan = Netns::new("tl")?;
        for key in [
            "net.ipv4.ip_forward=1",
            "net.ipv4.fib_multipath_hash_policy=1",
        ] {
            router.exec("sysctl", &["-qw", key])?;
        }
        // Client ↔ router.
        let (c_if, r_if) = (unique_name("c"), unique_name("r"));
        veth(
            &client,
            &c_if,
            Some(&format!("{TIER_CLIENT}/24")),
            &router,
            &r_if,
            Some("203.0.113.1/24"),
        )?;
        client.exec("ip", &["route", "add", "default", "via", "203.0.113.1"])?;
        offloads_off(&client, &c_if)?;
        offloads_off(&router, &r_if)?;
        for (ns, addr) in [(&router, Some(format!("{TIER_ROUTER}/24"))), (&lan, None)] {
            ns.exec(
                "ip",
                &[
                    "link",
                    "add",
                    "br0",
                    "type",
                    "bridge",
                    "mcast_snooping",
                    "0",
                ],
            )?;
            if let Some(a) = addr {
                ns.exec("ip", &["addr", "add", &a, "dev", "br0"])?;
            }
            ns.exec("ip", &["link", "set", "br0", "up"])?;
        }
        // The router's own packets (BGP) leave from br0.
        offloads_off(&router, "br0")?;
        // Backends on the LAN bridge.
        let mut backends = Vec::new();
        let mut servers = Vec::new();
        let mut server_dirs = Vec::new();
        for j in 0..config.backends {
            let ns = Netns::new("tb")?;
            let (l_if, b_if) = (unique_name("l"), unique_name("b"));
            veth(
                &lan,
                &l_if,
                None,
                &ns,
                &b_if,
                Some(&format!("{}/24", backend_addr(j))),
            )?;
            lan.exec("ip", &["link", "set", &l_if, "master", "br0"])?;
            offloads_off(&lan, &l_if)?;
            offloads_off(&ns, &b_if)?;
            let (p, d) = nginx(
                &ns,
                &format!("b{j}"),
                &format!("{}:{BACKEND_PORT}", backend_addr(j)),
            )?;
            servers.push(p);
            server_dirs.push(d);
            backends.push(ns);
        }
        let dir = TempDir::new("tier")?;
        // Instances.
        let mut namespaces = Vec::new();
        let mut protocols = String::new();
        let mut neighbors = String::new();
        let mut instance_sections = String::new();
        for (i, &driver) in config.drivers.iter().enumerate() {
            let ns = Netns::new("ti")?;
            let (out_if, r_end) = (unique_name("go"), unique_name("rb"));
            let (in_if, l_end) = (unique_name("gi"), unique_name("lb"));
            Veth::new(&ns, &out_if, &router, &r_end).create()?;
            router.exec("ip", &["link", "set", &r_end, "master", "br0"])?;
            Veth::new(&ns, &in_if, &lan, &l_end).create()?;
            lan.exec("ip", &["link", "set", &l_end, "master", "br0"])?;
            for (n, ifname) in [
                (&ns, &out_if),
                (&router, &r_end),
                (&ns, &in_if),
                (&lan, &l_end),
            ] {
                offloads_off(n, ifname)?;
            }
            instance_sections.push_str(&instance_section(i, driver, &out_if, &in_if));
            protocols.push_str(&format!(
                "protocol bgp i{i} {{\n  local {TIER_ROUTER} as {ROUTER_ASN};\n  \
                 neighbor {} as {TIER_ASN};\n  passive on;\n  hold time 9;\n  \
                 error wait time 1, 2;\n  ipv4 {{ import all; export none; }};\n}}\n",
                next_hop(i)
            ));
            neighbors.push_str(&format!(
                "\n[[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"{}\"\n    \
                 peer-as = {TIER_ASN}\n  [neighbors.transport.config]\n    passive-mode = true\n  \
                 [neighbors.timers.config]\n    hold-time = 9\n    keepalive-interval = 3\n",
                next_hop(i)
            ));
            namespaces.push(ns);
        }
        // One file for the whole tier, as the shipped Deployment's
        // ConfigMap: each instance runs as its [[instance]].
        let config_path = dir.path.join("portico.toml");
        std::fs::write(
            &config_path,
            tier_config(config.backends, config.shutdown_drain_s, &instance_sections),
        )?;
        let (bird, gobgp) = match config.router {
            TierRouter::Bird => (
                Some(Bird::start(
                    &router,
                    &format!(
                        "router id {TIER_ROUTER};\nprotocol device {{ }}\n\
                         protocol kernel {{ ipv4 {{ export all; }}; merge paths on; }}\n{protocols}"
                    ),
                )),
                None,
            ),
            TierRouter::Gobgp => (
                None,
                Some(GoBgp::start(
                    &router,
                    &format!(
                        "[global.config]\n  as = {ROUTER_ASN}\n  router-id = \"{TIER_ROUTER}\"\n  \
                         port = 179\n{neighbors}"
                    ),
                )),
            ),
        };
        let mut instances = Vec::new();
        for (i, ns) in namespaces.into_iter().enumerate() {
            let socket = dir.path.join(format!("portico-{i}.sock"));
            let log = dir.path.join(format!("portico-{i}.log"));
            let instance = format!("PORTICO_INSTANCE={}", instance_name(i));
            let process = spawn_run(&ns, &portico_str, &config_path, &socket, &log, &[&instance])?;
            instances.push(Instance {
                process: Some(process),
                socket,
                log,
                ns,
            });
        }
        let tier = Tier {
            instances,
            bird,
            gobgp,
            _servers: servers,
            _server_dirs: server_dirs,
            dir,
            client,
            router,
            lan,
            backends,
            portico,
        };
        for (i, inst) in tier.instances.iter().enumerate() {
            if !wait_until(Duration::from_secs(30), || inst.stats().is_some()) {
                return Err(io::Error::other(format!(
                    "instance {i} did not come up; its log:\n{}",
                    inst.log_text()
                )));
            }
        }
        Ok(tier)
    }

    /// The router's FIB entry for the VIP (`ip route show VIP`).
    pub fn router_route(&self) -> String {
        self.router
            .exec("ip", &["route", "show", &format!("{TIER_VIP}")])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// `portico tool http-get` from the client: `count` GETs of the VIP,
    /// each on a new connection, `concurrency` at a time; its stdout lines
    /// (`ok STATUS MICROS BODY` / `err MICROS ERROR`).
    pub fn http_get(&self, count: u32, concurrency: u32) -> io::Result<Process> {
        self.client.spawn(
            path_str(&self.portico)?,
            &[
                "tool",
                "http-get",
                "--target",
                &format!("{TIER_VIP}:80"),
                "--count",
                &count.to_string(),
                "--concurrency",
                &concurrency.to_string(),
                "--timeout-ms",
                "3000",
            ],
        )
    }

    /// The backend namespaces (for diagnostics).
    pub fn backend_count(&self) -> usize {
        self.backends.len()
    }
}

/// Instance `i`'s name in the tier (`PORTICO_INSTANCE`).
pub fn instance_name(i: usize) -> String {
    format!("tier-{i}")
}

/// Instance `i`'s `[[instance]]`: its BGP identifier (its node address),
/// its interfaces and driver, its node, host (BGP source and NEXT_HOP) and
/// SNAT addresses.
fn instance_section(i: usize, driver: DriverKind, outside: &str, inside: &str) -> String {
    let node = instance_addr(i);
    let host = next_hop(i);
    let snat = Ipv4Addr::new(10, 1, 0, 1 + i as u8);
    format!(
        r#"
[[instance]]
name = "{name}"
bgp_router_id = "{node}"

[[instance.port]]
name = "outside"
driver = "{driver}"
interface = "{outside}"
node_addresses = ["{node}/24"]
host_addresses = ["{host}/24"]

[[instance.port]]
name = "inside"
driver = "{driver}"
interface = "{inside}"
snat_addresses = ["{snat}/24"]
"#,
        name = instance_name(i)
    )
}

/// The tier's one portico.toml: no `[kubernetes]`, so the VIP is announced
/// by BGP only (no instance answers ARP for it).
fn tier_config(backends: usize, drain_s: u16, instances: &str) -> String {
    let backends: Vec<String> = (0..backends)
        .map(|j| {
            format!(
                "{{ address = \"{}\", port = {BACKEND_PORT} }}",
                backend_addr(j)
            )
        })
        .collect();
    format!(
        r#"# The tier (tests/src/tier.rs): one file, one [[instance]] per box.
[dataplane]
workers = 1
idle = "adaptive"

[dataplane.conntrack]
capacity = 16384

# Each instance sets its interface and driver in [[instance.port]].
[[port]]
name = "outside"
driver = "afpacket"
interface = "unset"
role = "outside"

[[port]]
name = "inside"
driver = "afpacket"
interface = "unset"
role = "inside"

[[route]]
destination = "0.0.0.0/0"
via = "{TIER_ROUTER}"

[[service]]
name = "web"
protocol = "tcp"
vip = "{TIER_VIP}"
port = 80
bgp_advertisements = ["tier"]
backends = [{backends}]

[bgp]
shutdown_drain_s = {drain_s}

[[bgp.peer]]
address = "{TIER_ROUTER}"
peer_asn = {ROUTER_ASN}
my_asn = {TIER_ASN}
hold_time_s = 9
connect_retry_s = 1
connect_retry_max_s = 2

[[bgp.advertisement]]
name = "tier"
communities = ["{TIER_ASN}:100"]
{instances}"#,
        backends = backends.join(", ")
    )
}

fn path_str(path: &Path) -> io::Result<&str> {
    path.to_str()
        .ok_or_else(|| io::Error::other(format!("{} is not UTF-8", path.display())))
}
