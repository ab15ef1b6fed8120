//! A throw-away network of namespaces around one Portico gateway, shared by
//! `portico demo` and the end-to-end tests.
//!
//! ```text
//!  client ns                gateway ns (portico run)                 lan ns           backend ns × N
//!  192.0.2.100/24 ── veth ── [outside]  node 192.0.2.1, VIP 192.0.2.10
//!  default via 192.0.2.1     [inside]   SNAT 10.1.0.1   ── veth ── bridge ── veth ── 10.1.0.1x/24
//!                                                                                  default via 10.1.0.1
//!                                                                                  HTTP :8080, UDP :5353
//!  with [`Topology::enable_ipv6`] also:
//!  2001:db8:c::100/64        node 2001:db8:c::1, VIP 2001:db8:c::10
//!  default via 2001:db8:c::1 SNAT fd00:1::1                             fd00:1::1x/64
//!                                                                       default via fd00:1::1
//!                                                                       HTTP [fd00:1::1x]:8080
//! ```
//!
//! Invariants:
//! * the gateway namespace has no IPv4 address and kernel forwarding off:
//!   only Portico answers ARP for its addresses and carries packets between
//!   the client and the backends (the owned addresses live only in Portico);
//! * IPv6 is off in every namespace, so no router solicitations or MLD
//!   reports reach the gateway as noise, unless [`Topology::enable_ipv6`]
//!   turns it on for the client's and the backends' interfaces (never the
//!   gateway's or the LAN bridge's): there, router solicitations and DAD
//!   are off (`router_solicitations=0`, `accept_dad=0`, addresses
//!   `nodad`) and router advertisements ignored, but the kernel's MLD
//!   reports for its solicited-node groups still reach the gateway's
//!   ports, where Portico drops and counts them (`icmp_unsupported` in
//!   `portico stats`' drops);
//! * TSO/GSO/GRO are off on every veth end the gateway's ports talk to, so
//!   no frame above the MTU reaches an af_packet port; with the afxdp driver
//!   TX checksum offload is off there too (XDP frames carry no "checksum
//!   partial" mark, so they must arrive with complete checksums);
//! * the backends' default route points at the SNAT address, so replies to
//!   un-NATed flows (`snat = false`) also return through the gateway;
//! * every namespace and process is owned by a guard ([`crate::netns`]):
//!   dropping the [`Topology`] stops its servers (by PID) and deletes its
//!   namespaces (by unique name), and with them every veth and the bridge.
//!   Declare the [`GatewayRun`] after the topology so it is stopped first.

use crate::admin::{self, StatsReport};
use crate::netns::{
    Netns, Process, TempDir, Veth, have, nginx, run, unique_name, veth, wait_until,
};
pub use nic_config::DriverKind;
use std::fmt::Write as _;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
pub const NODE_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const VIP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
/// An address of the client subnet nobody has.
pub const UNOWNED_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 77);
pub const SNAT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
pub const HTTP_PORT: u16 = 80;
pub const NODE_PORT: u16 = 30080;
pub const DNS_PORT: u16 = 53;
pub const BACKEND_HTTP_PORT: u16 = 8080;
pub const BACKEND_UDP_PORT: u16 = 5353;
/// The IPv6 addresses of [`Topology::enable_ipv6`]: the client's, the
/// gateway's node address and VIP (in the client's /64), the IPv6 SNAT
/// address (in the backends' /64).
pub const CLIENT_ADDR6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 0x100);
pub const NODE_ADDR6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 1);
pub const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 0x10);
pub const SNAT_ADDR6: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 1);

/// IPv6 address of backend `i` (`fd00:1::10` + i).
pub fn backend_addr6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x10 + i.min(200) as u16)
}

/// Address of backend `i` (`10.1.0.10` + i).
pub fn backend_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 1, 0, 10u8.saturating_add(i.min(200) as u8))
}

/// Name of backend `i` in answers (`b0`, `b1`, …).
pub fn backend_name(i: usize) -> String {
    format!("b{i}")
}

/// What to build.
#[derive(Clone, Debug)]
pub struct TopologyConfig {
    /// Backend namespaces, 1..=32.
    pub backends: usize,
    /// The `portico` binary (for `portico tool …` helpers and `portico run`).
    pub portico: PathBuf,
    /// Use nginx for HTTP when it is installed (else the built-in server).
    pub prefer_nginx: bool,
    /// The gateway ports' driver (`afpacket` or `afxdp`). For afxdp the
    /// gateway's veths get [`AFXDP_QUEUES`] queues, one per worker.
    pub driver: DriverKind,
}

/// RX/TX queues of the gateway's veths with the afxdp driver; the gateway
/// must run this many workers (AF_XDP binds one socket per queue).
pub const AFXDP_QUEUES: u32 = 2;

/// Which HTTP server the backends run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpServer {
    Nginx,
    BuiltIn,
}

/// One backend namespace.
#[derive(Debug)]
pub struct Backend {
    pub name: String,
    pub addr: Ipv4Addr,
    pub ifname: String,
    pub ns: Netns,
}

/// The namespaces, links and backend servers. Field order is drop order:
/// processes first, then their directories, then the namespaces.
#[derive(Debug)]
pub struct Topology {
    servers: Vec<Process>,
    _server_dirs: Vec<TempDir>,
    pub http_server: HttpServer,
    pub backends: Vec<Backend>,
    pub lan: Netns,
    pub client: Netns,
    pub gateway: Netns,
    /// The gateway's interface towards the client.
    pub outside_if: String,
    /// The gateway's interface towards the backends.
    pub inside_if: String,
    /// The client's interface.
    pub client_if: String,
    pub portico: PathBuf,
    /// Configuration, admin socket and logs of the gateway.
    pub dir: TempDir,
    /// The driver [`Topology::config_toml`] writes for the ports.
    pub driver: DriverKind,
    /// [`Topology::enable_ipv6`] ran: the configuration has the IPv6
    /// addresses and the `web6` service.
    pub ipv6: bool,
}

/// The services of the gateway's configuration.
#[derive(Clone, Debug)]
pub struct ServiceOptions {
    /// Full NAT (`snat = true`) or keep the client address.
    pub snat: bool,
    /// `session_affinity = "client_ip"`.
    pub client_ip_affinity: bool,
    /// Which backends (indices) the services have.
    pub backends: Vec<usize>,
    /// Worker threads.
    pub workers: u32,
    /// Further `[dataplane.*]` tables, as TOML (e.g.
    /// `"[dataplane.snat]\nquarantine_s = 0\n"`); empty for the defaults.
    pub dataplane_extra: String,
    /// Further lines of the web service's `[[service]]` table, as TOML
    /// (e.g. `"syn_proxy = \"on\"\n"`); empty for the defaults.
    pub web_extra: String,
}

impl ServiceOptions {
    /// Full NAT, no affinity, every backend of `topology`, two workers.
    pub fn all(topology: &Topology) -> Self {
        ServiceOptions {
            snat: true,
            client_ip_affinity: false,
            backends: (0..topology.backends.len()).collect(),
            workers: 2,
            dataplane_extra: String::new(),
            web_extra: String::new(),
        }
    }
}

fn quiet_ipv6(ns: &Netns) -> io::Result<()> {
    for key in [
        "net.ipv6.conf.all.disable_ipv6=1",
        "net.ipv6.conf.default.disable_ipv6=1",
    ] {
        ns.exec("sysctl", &["-qw", key])?;
    }
    Ok(())
}

impl Topology {
    /// Build the namespaces and links and start the backend servers.
    pub fn build(config: &TopologyConfig) -> io::Result<Topology> {
        if !(1..=32).contains(&config.backends) {
            return Err(io::Error::other("backends must be 1..=32"));
        }
        let http_server = if config.prefer_nginx && have("nginx") {
            HttpServer::Nginx
        } else {
            HttpServer::BuiltIn
        };
        let client = Netns::new("pc")?;
        let gateway = Netns::new("pg")?;
        let lan = Netns::new("pl")?;
        let mut t = Topology {
            servers: Vec::new(),
            _server_dirs: Vec::new(),
            http_server,
            backends: Vec::new(),
            lan,
            client,
            gateway,
            outside_if: unique_name("go"),
            inside_if: unique_name("gi"),
            client_if: unique_name("co"),
            portico: config.portico.clone(),
            dir: TempDir::new("portico-demo")?,
            driver: config.driver,
            ipv6: false,
        };
        let queues = if config.driver == DriverKind::Afxdp {
            AFXDP_QUEUES
        } else {
            1
        };
        for ns in [&t.client, &t.gateway, &t.lan] {
            quiet_ipv6(ns)?;
        }
        t.gateway
            .exec("sysctl", &["-qw", "net.ipv4.ip_forward=0"])?;

        let client_cidr = format!("{CLIENT_ADDR}/24");
        Veth::new(&t.gateway, &t.outside_if, &t.client, &t.client_if)
            .addrs(None, Some(&client_cidr))
            .queues(queues)
            .create()?;
        t.client.exec(
            "ip",
            &["route", "add", "default", "via", &NODE_ADDR.to_string()],
        )?;
        t.offloads_off(&t.client, &t.client_if)?;

        let bridge = "br0";
        t.lan.exec(
            "ip",
            &[
                "link",
                "add",
                bridge,
                "type",
                "bridge",
                "mcast_snooping",
                "0",
            ],
        )?;
        t.lan.exec("ip", &["link", "set", bridge, "up"])?;
        // A plain L2 switch: with br_netfilter in the kernel, every bridged
        // IP frame would also walk the LAN namespace's (empty) netfilter
        // hooks, work that a real switch does not do and that veth charges
        // to whoever transmits (Portico's worker, or the kernel NAT's
        // softirq). Absent when br_netfilter is not built: nothing to do.
        for key in [
            "net.bridge.bridge-nf-call-iptables=0",
            "net.bridge.bridge-nf-call-ip6tables=0",
            "net.bridge.bridge-nf-call-arptables=0",
        ] {
            let _ = t.lan.exec_unchecked("sysctl", &["-qw", key]);
        }
        let lan_gw = unique_name("lg");
        Veth::new(&t.gateway, &t.inside_if, &t.lan, &lan_gw)
            .queues(queues)
            .create()?;
        t.lan
            .exec("ip", &["link", "set", &lan_gw, "master", bridge])?;
        t.offloads_off(&t.lan, &lan_gw)?;

        for i in 0..config.backends {
            let ns = Netns::new("pb")?;
            quiet_ipv6(&ns)?;
            let (lan_if, ifname) = (unique_name("lb"), unique_name("be"));
            let addr = backend_addr(i);
            let cidr = format!("{addr}/24");
            veth(&t.lan, &lan_if, None, &ns, &ifname, Some(&cidr))?;
            t.lan
                .exec("ip", &["link", "set", &lan_if, "master", bridge])?;
            t.offloads_off(&t.lan, &lan_if)?;
            t.offloads_off(&ns, &ifname)?;
            ns.exec(
                "ip",
                &["route", "add", "default", "via", &SNAT_ADDR.to_string()],
            )?;
            t.backends.push(Backend {
                name: backend_name(i),
                addr,
                ifname,
                ns,
            });
        }
        t.start_servers()?;
        Ok(t)
    }

    /// IPv6 on the client's and the backends' interfaces (see the module
    /// docs for the noise it lets through), their addresses and default
    /// routes, and an HTTP server on each backend's IPv6 address (the
    /// built-in one, also when the IPv4 servers are nginx); from then on
    /// [`Topology::config_toml`] adds the IPv6 addresses and the `web6`
    /// service (TCP [`VIP6`]:[`HTTP_PORT`], full NAT from [`SNAT_ADDR6`]).
    pub fn enable_ipv6(&mut self) -> io::Result<()> {
        let portico = self.portico_str()?.to_owned();
        let portico = portico.as_str();
        let on = |ns: &Netns, ifname: &str, cidr: String, via: Ipv6Addr| -> io::Result<()> {
            for key in [
                "accept_ra=0",
                "router_solicitations=0",
                "accept_dad=0",
                "disable_ipv6=0",
            ] {
                ns.exec("sysctl", &["-qw", &format!("net.ipv6.conf.{ifname}.{key}")])?;
            }
            ns.exec("ip", &["-6", "addr", "add", &cidr, "dev", ifname, "nodad"])?;
            ns.exec(
                "ip",
                &["-6", "route", "add", "default", "via", &via.to_string()],
            )
            .map(|_| ())
        };
        on(
            &self.client,
            &self.client_if,
            format!("{CLIENT_ADDR6}/64"),
            NODE_ADDR6,
        )?;
        for (i, b) in self.backends.iter().enumerate() {
            on(
                &b.ns,
                &b.ifname,
                format!("{}/64", backend_addr6(i)),
                SNAT_ADDR6,
            )?;
            let http = std::net::SocketAddrV6::new(backend_addr6(i), BACKEND_HTTP_PORT, 0, 0);
            self.servers.push(b.ns.spawn_logged(
                portico,
                &[
                    "tool",
                    "http-serve",
                    "--listen",
                    &http.to_string(),
                    "--name",
                    &b.name,
                ],
                &self.dir.path.join(format!("{}-http6.log", b.name)),
            )?);
        }
        let ready = wait_until(Duration::from_secs(20), || {
            self.backends
                .iter()
                .all(|b| listening(&b.ns, "-6ltnH", BACKEND_HTTP_PORT))
        });
        if !ready {
            return Err(io::Error::other(
                "the backends' IPv6 HTTP servers did not start listening within 20 s",
            ));
        }
        self.ipv6 = true;
        Ok(())
    }

    /// GRO/GSO/TSO back on at every veth end of the client, the LAN and
    /// the backends (for a gateway with `[dataplane.afpacket] gso = true`:
    /// TCP then crosses the pairs and the bridge as super-packets, as it
    /// does between namespaces by default).
    pub fn offloads_on(&self) -> io::Result<()> {
        let portico = self.portico_str()?;
        let on = |ns: &Netns, ifname: &str| {
            ns.exec(portico, &["tool", "offloads-on", ifname])
                .map(|_| ())
        };
        on(&self.client, &self.client_if)?;
        let out = self
            .lan
            .exec("ip", &["-o", "link", "show", "type", "veth"])?;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // "12: lg1234@if11: <...>"
            if let Some(name) = line.split(": ").nth(1).and_then(|n| n.split('@').next()) {
                on(&self.lan, name)?;
            }
        }
        for b in &self.backends {
            on(&b.ns, &b.ifname)?;
        }
        Ok(())
    }

    /// Offloads off on a veth end; for afxdp also TX checksum offload
    /// on the ends facing the gateway (XDP frames carry no "checksum
    /// partial" mark, so the gateway needs complete checksums).
    fn offloads_off(&self, ns: &Netns, ifname: &str) -> io::Result<()> {
        let portico = self.portico_str()?;
        let mut args = vec!["tool", "offloads-off", ifname];
        if self.driver == DriverKind::Afxdp {
            args.push("--tx-checksum");
        }
        ns.exec(portico, &args).map(|_| ())
    }

    fn portico_str(&self) -> io::Result<&str> {
        self.portico
            .to_str()
            .ok_or_else(|| io::Error::other("the portico path is not UTF-8"))
    }

    fn start_servers(&mut self) -> io::Result<()> {
        let portico = self.portico_str()?.to_owned();
        let mut servers = Vec::new();
        let mut dirs = Vec::new();
        for b in &self.backends {
            let http = format!("{}:{BACKEND_HTTP_PORT}", b.addr);
            let udp = format!("{}:{BACKEND_UDP_PORT}", b.addr);
            match self.http_server {
                HttpServer::Nginx => {
                    let (p, dir) = nginx(&b.ns, &b.name, &http)?;
                    servers.push(p);
                    dirs.push(dir);
                }
                HttpServer::BuiltIn => servers.push(b.ns.spawn_logged(
                    &portico,
                    &["tool", "http-serve", "--listen", &http, "--name", &b.name],
                    &self.dir.path.join(format!("{}-http.log", b.name)),
                )?),
            }
            servers.push(b.ns.spawn_logged(
                &portico,
                &["tool", "udp-echo", "--listen", &udp, "--name", &b.name],
                &self.dir.path.join(format!("{}-udp.log", b.name)),
            )?);
        }
        self.servers = servers;
        self._server_dirs = dirs;
        let ready = wait_until(Duration::from_secs(20), || {
            self.backends.iter().all(|b| {
                listening(&b.ns, "-ltnH", BACKEND_HTTP_PORT)
                    && listening(&b.ns, "-lunH", BACKEND_UDP_PORT)
            })
        });
        if !ready {
            return Err(io::Error::other(
                "backend servers did not start listening within 20 s",
            ));
        }
        Ok(())
    }

    /// The MAC of `ifname` in `ns`.
    pub fn mac_of(ns: &Netns, ifname: &str) -> io::Result<String> {
        let out = ns.exec("ip", &["-o", "link", "show", ifname])?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .map(str::to_owned)
            .ok_or_else(|| io::Error::other(format!("no MAC in {text}")))
    }

    /// The gateway's configuration file for `options`.
    pub fn config_toml(&self, options: &ServiceOptions) -> String {
        let mut http_backends = String::new();
        let mut udp_backends = String::new();
        for &i in &options.backends {
            let addr = backend_addr(i);
            let _ = write!(
                http_backends,
                "\n    {{ address = \"{addr}\", port = {BACKEND_HTTP_PORT} }},"
            );
            let _ = write!(
                udp_backends,
                "\n    {{ address = \"{addr}\", port = {BACKEND_UDP_PORT} }},"
            );
        }
        // With IPv6: the addresses of both families and an IPv6 service.
        let (node6, snat6, web6) = if self.ipv6 {
            let backends: String = options
                .backends
                .iter()
                .map(|&i| {
                    format!(
                        "\n    {{ address = \"{}\", port = {BACKEND_HTTP_PORT} }},",
                        backend_addr6(i)
                    )
                })
                .collect();
            (
                format!(", \"{NODE_ADDR6}/64\""),
                format!(", \"{SNAT_ADDR6}/64\""),
                format!(
                    "\n[[service]]\nname = \"web6\"\nprotocol = \"tcp\"\nvip = \"{VIP6}\"\nport = {HTTP_PORT}\nsnat = {snat}\nbackends = [{backends}\n]\n",
                    snat = options.snat
                ),
            )
        } else {
            Default::default()
        };
        let affinity = if options.client_ip_affinity {
            "session_affinity = \"client_ip\"\naffinity_timeout_s = 600\n"
        } else {
            ""
        };
        format!(
            r#"# Written by portico's namespace topology (demo / end-to-end tests).
[dataplane]
workers = {workers}
idle = "adaptive"

[dataplane.conntrack]
capacity = 65536

[dataplane.affinity]
capacity = 4096
{extra}
[[port]]
name = "outside"
driver = "{driver}"
interface = "{outside}"
role = "outside"
node_addresses = ["{NODE_ADDR}/24"{node6}]

[[port]]
name = "inside"
driver = "{driver}"
interface = "{inside}"
role = "inside"
snat_addresses = ["{SNAT_ADDR}/24"{snat6}]

[[service]]
name = "web"
protocol = "tcp"
vip = "{VIP}"
port = {HTTP_PORT}
node_port = {NODE_PORT}
snat = {snat}
{affinity}{web_extra}backends = [{http_backends}
]

[[service]]
name = "dns"
protocol = "udp"
vip = "{VIP}"
port = {DNS_PORT}
snat = {snat}
backends = [{udp_backends}
]
{web6}"#,
            workers = options.workers,
            outside = self.outside_if,
            inside = self.inside_if,
            snat = options.snat,
            extra = options.dataplane_extra,
            web_extra = options.web_extra,
            driver = self.driver,
        )
    }

    /// Write `config` and start `portico run` in the gateway namespace; wait
    /// (up to 30 s) until its admin socket answers.
    pub fn start_gateway(&self, config: &str) -> io::Result<GatewayRun> {
        self.start_gateway_with_env(config, &[])
    }

    /// [`Topology::start_gateway`] with `env` (`NAME=value` each) in the
    /// gateway's environment (e.g. `PORTICO_TEST_HOOKS=1`).
    pub fn start_gateway_with_env(&self, config: &str, env: &[&str]) -> io::Result<GatewayRun> {
        let config_path = self.dir.path.join("portico.toml");
        write_atomically(&config_path, config)?;
        let socket = self.dir.path.join("portico.sock");
        let log = self.dir.path.join("portico.log");
        let process = spawn_run(
            &self.gateway,
            self.portico_str()?,
            &config_path,
            &socket,
            &log,
            env,
        )?;
        let mut gw = GatewayRun {
            process,
            config_path,
            socket,
            log,
        };
        let mut exited = false;
        let up = wait_until(Duration::from_secs(30), || {
            exited = gw.process.has_exited();
            exited || gw.stats().is_some()
        });
        if exited || !up {
            return Err(io::Error::other(format!(
                "portico run did not come up; its log:\n{}",
                gw.log_text()
            )));
        }
        Ok(gw)
    }

    /// Run a command in the client namespace (whatever its exit status).
    pub fn client_exec(&self, cmd: &str, args: &[&str]) -> io::Result<std::process::Output> {
        self.client.exec_unchecked(cmd, args)
    }

    /// Run `portico tool …` in the client namespace and return its stdout
    /// (the tool bounds its own duration).
    pub fn client_tool(&self, args: &[&str]) -> io::Result<String> {
        let mut full = vec!["tool"];
        full.extend_from_slice(args);
        let out = self.client.exec(self.portico_str()?, &full)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

fn listening(ns: &Netns, flags: &str, port: u16) -> bool {
    ns.exec("ss", &[flags, "sport", "=", &format!(":{port}")])
        .is_ok_and(|o| !String::from_utf8_lossy(&o.stdout).trim().is_empty())
}

fn path_str(path: &Path) -> io::Result<&str> {
    path.to_str()
        .ok_or_else(|| io::Error::other(format!("{} is not UTF-8", path.display())))
}

/// Start `portico run` (the binary `portico`) in `ns` on `config` with its
/// admin socket at `socket`, JSON logs appended to `log` and `env`
/// (`NAME=value` each) in its environment; the guard's PID is the
/// gateway's (`env` execs it).
pub fn spawn_run(
    ns: &Netns,
    portico: &str,
    config: &Path,
    socket: &Path,
    log: &Path,
    env: &[&str],
) -> io::Result<Process> {
    let mut argv: Vec<&str> = env.to_vec();
    argv.extend([
        portico,
        "run",
        "--config",
        path_str(config)?,
        "--admin-socket",
        path_str(socket)?,
        "--log-format",
        "json",
    ]);
    ns.spawn_logged("env", &argv, log)
}

/// Replace a file in one step, so a reload never reads half of it.
pub fn write_atomically(path: &Path, text: &str) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// A running `portico run`, stopped (SIGTERM, then SIGKILL) on drop.
#[derive(Debug)]
pub struct GatewayRun {
    process: Process,
    pub config_path: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl GatewayRun {
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// The raw JSON report and its parsed form, or `None` while the admin
    /// socket does not answer.
    pub fn stats_raw(&self) -> Option<(String, StatsReport)> {
        admin::fetch(&self.socket).ok()
    }

    pub fn stats(&self) -> Option<StatsReport> {
        self.stats_raw().map(|(_, report)| report)
    }

    /// Everything the gateway logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Rewrite the configuration file and send SIGHUP.
    pub fn reload(&self, config: &str) -> io::Result<()> {
        write_atomically(&self.config_path, config)?;
        self.process.signal("HUP")
    }

    /// Send a signal (`"TERM"`, …) without waiting.
    pub fn signal(&self, name: &str) -> io::Result<()> {
        self.process.signal(name)
    }

    /// Wait up to `timeout` for the gateway to exit (after
    /// [`GatewayRun::signal`]); `None` if it still runs.
    pub fn wait_exit(&mut self, timeout: Duration) -> io::Result<Option<ExitStatus>> {
        self.process.wait_exit(timeout)
    }

    /// SIGTERM and wait up to `timeout` for the exit.
    pub fn stop(mut self, timeout: Duration) -> io::Result<Option<ExitStatus>> {
        self.process.terminate(timeout)
    }

    /// User and system CPU time of the gateway process so far, in clock
    /// ticks (`/proc/PID/stat` fields 14 and 15).
    pub fn cpu_ticks(&self) -> io::Result<u64> {
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::other("gateway not running"))?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        // The command name (field 2) may contain spaces: split after ')'.
        let rest = stat
            .rsplit_once(')')
            .map(|(_, r)| r)
            .ok_or_else(|| io::Error::other("bad /proc/PID/stat"))?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // `rest` starts at field 3 (state): utime is field 14, stime 15.
        let field = |n: usize| -> io::Result<u64> {
            fields
                .get(n - 3)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| io::Error::other("bad /proc/PID/stat"))
        };
        Ok(field(14)? + field(15)?)
    }
}

/// Clock ticks per second for [`GatewayRun::cpu_ticks`] (`getconf CLK_TCK`,
/// 100 when it cannot be read).
pub fn clock_ticks_per_s() -> u64 {
    run("getconf", &["CLK_TCK"])
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}
