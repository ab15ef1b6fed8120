//! IPv6 end to end through the real `portico run` (issue 17, "Tests and
//! figures"): real nginx listening on `[::]:8080` in backend namespaces,
//! `curl -6` in the client namespace.
//!
//! ```text
//!  client ns                  gateway ns (portico run)                    lan ns          backend ns × N
//!  2001:db8::100/64 ── veth ── [outside] node 2001:db8::1, VIP 2001:db8::10
//!  192.0.2.100/24               node 192.0.2.1
//!                              [inside]  SNAT fd00:1::1  ── veth ── bridge ── veth ── fd00:1::1x/64
//!                                        SNAT 10.1.0.1                                10.1.0.1x/24
//!                                                                                   default via the SNATs
//! ```
//!
//! Dual-stack throughout (nginx listens on `0.0.0.0:8080` and `[::]:8080`);
//! the static-config tests serve IPv6 only, the Kubernetes test both.
//!
//! The gateway namespace has IPv6 off (only Portico answers NDP for its
//! addresses); the client and the backends have it on, without duplicate
//! address detection. GSO/GRO/TSO are off on the ends facing the gateway,
//! TX checksum offload stays on with af_packet (the client's and the
//! backends' TCP arrives `CHECKSUM_PARTIAL`: the driver completes it) and
//! is off with afxdp. Every namespace and process is owned by a guard and
//! removed by name/PID on drop, also when a test fails.
//!
//! One file, whole (~1000 lines): the suite's own dual-stack topology and
//! the scenarios that share it; the demo topology
//! ([`portico::demo::topology`]) the other suites use is IPv4-only.

mod common;

use common::{DriverKind, PORTICO, number, parse_curl, tally};
use dataplane::wire::{MacAddr, build, ipv6::next_header};
use portico::demo::topology::spawn_run;
use portico_tests::{
    Netns, Process, RawSocket, TempDir, Veth, in_netns, require_programs, require_root,
    unique_name, veth, wait_until,
};
use serde_json::Value;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::Duration;

const CLIENT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x100);
const NODE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const VIP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
const SNAT: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 1);
/// The IPv4 side of the dual-stack topology (the Kubernetes test).
const CLIENT4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
const NODE4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const SNAT4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
const HTTP_PORT: u16 = 80;
const NODE_PORT: u16 = 30080;
const BACKEND_PORT: u16 = 8080;
const DNS_PORT: u16 = 53;
const BACKEND_UDP_PORT: u16 = 5353;
/// Requests per check; each backend gets some of them (Maglev over random
/// client ports).
const REQUESTS: usize = 60;

fn backend_addr(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x10 + i as u16)
}

fn backend_addr4(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 1, 0, 10 + i as u8)
}

/// Shape of the backend side.
#[derive(Clone, Copy)]
struct Shape {
    backends: usize,
    driver: DriverKind,
    /// MTU of every link behind the gateway's inside port (the client side
    /// keeps 1500).
    inside_mtu: Option<u32>,
}

/// The namespaces, links and nginx backends. Field order is drop order:
/// servers, their directories, then the namespaces.
struct Topo6 {
    servers: Vec<Process>,
    server_dirs: Vec<TempDir>,
    backends: Vec<(String, Ipv6Addr, Netns)>,
    lan: Netns,
    client: Netns,
    gateway: Netns,
    outside_if: String,
    inside_if: String,
    client_if: String,
    dir: TempDir,
    driver: DriverKind,
}

fn sysctls(ns: &Netns, keys: &[&str]) {
    for key in keys {
        ns.exec("sysctl", &["-qw", key]).expect("sysctl");
    }
}

const V6_ON: &[&str] = &[
    "net.ipv6.conf.all.disable_ipv6=0",
    "net.ipv6.conf.default.disable_ipv6=0",
    "net.ipv6.conf.all.accept_dad=0",
    "net.ipv6.conf.default.accept_dad=0",
];
const V6_OFF: &[&str] = &[
    "net.ipv6.conf.all.disable_ipv6=1",
    "net.ipv6.conf.default.disable_ipv6=1",
];

impl Topo6 {
    fn build(shape: Shape) -> Topo6 {
        let client = Netns::new("p6c").expect("client ns");
        let gateway = Netns::new("p6g").expect("gateway ns");
        let lan = Netns::new("p6l").expect("lan ns");
        sysctls(&client, V6_ON);
        sysctls(&gateway, V6_OFF);
        sysctls(&lan, V6_OFF);
        gateway
            .exec("sysctl", &["-qw", "net.ipv4.ip_forward=0"])
            .expect("forwarding off");
        let mut t = Topo6 {
            servers: Vec::new(),
            server_dirs: Vec::new(),
            backends: Vec::new(),
            lan,
            client,
            gateway,
            outside_if: unique_name("g6o"),
            inside_if: unique_name("g6i"),
            client_if: unique_name("c6o"),
            dir: TempDir::new("portico-v6").expect("temp dir"),
            driver: shape.driver,
        };
        let queues = if shape.driver == DriverKind::Afxdp {
            portico::demo::topology::AFXDP_QUEUES
        } else {
            1
        };
        let client_cidr = format!("{CLIENT}/64");
        Veth::new(&t.gateway, &t.outside_if, &t.client, &t.client_if)
            .addrs(None, Some(&client_cidr))
            .queues(queues)
            .create()
            .expect("client veth");
        t.client
            .exec(
                "ip",
                &["addr", "add", &format!("{CLIENT4}/24"), "dev", &t.client_if],
            )
            .expect("client IPv4 address");
        t.offloads_off(&t.client, &t.client_if);

        t.lan
            .exec(
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
            )
            .expect("bridge");
        let mtu = shape.inside_mtu.unwrap_or(1500);
        t.lan
            .exec("ip", &["link", "set", "br0", "mtu", &mtu.to_string(), "up"])
            .expect("bridge up");
        let lan_gw = unique_name("l6g");
        Veth::new(&t.gateway, &t.inside_if, &t.lan, &lan_gw)
            .mtus(mtu, mtu)
            .queues(queues)
            .create()
            .expect("inside veth");
        t.lan
            .exec("ip", &["link", "set", &lan_gw, "master", "br0"])
            .expect("enslave");
        t.offloads_off(&t.lan, &lan_gw);
        for i in 0..shape.backends {
            let ns = Netns::new("p6b").expect("backend ns");
            sysctls(&ns, V6_ON);
            let (lan_if, ifname) = (unique_name("l6b"), unique_name("b6e"));
            let addr = backend_addr(i);
            let cidr = format!("{addr}/64");
            if shape.inside_mtu.is_some() {
                Veth::new(&t.lan, &lan_if, &ns, &ifname)
                    .addrs(None, Some(&cidr))
                    .mtus(mtu, mtu)
                    .create()
                    .expect("backend veth");
            } else {
                veth(&t.lan, &lan_if, None, &ns, &ifname, Some(&cidr)).expect("backend veth");
            }
            t.lan
                .exec("ip", &["link", "set", &lan_if, "master", "br0"])
                .expect("enslave");
            t.offloads_off(&t.lan, &lan_if);
            t.offloads_off(&ns, &ifname);
            // With a smaller inside MTU the backends still advertise the
            // client side's MSS (1440, as hosts behind a 1500-byte LAN
            // would), so the client's segments are too big for the inside
            // port and the gateway answers with Packet Too Big.
            ns.exec("ip", &["-6", "route", "add", "default", "via", "fd00:1::1"])
                .expect("backend default route");
            if shape.inside_mtu.is_some() {
                // The SNAT address is on-link: the connected route is the
                // one whose MSS the backend advertises.
                ns.exec(
                    "ip",
                    &[
                        "-6",
                        "route",
                        "replace",
                        "fd00:1::/64",
                        "dev",
                        &ifname,
                        "metric",
                        "256",
                        "advmss",
                        "1440",
                    ],
                )
                .expect("backend advmss");
            }
            ns.exec(
                "ip",
                &[
                    "addr",
                    "add",
                    &format!("{}/24", backend_addr4(i)),
                    "dev",
                    &ifname,
                ],
            )
            .expect("backend IPv4 address");
            ns.exec(
                "ip",
                &["route", "add", "default", "via", &SNAT4.to_string()],
            )
            .expect("backend IPv4 default route");
            let name = format!("b{i}");
            let (p, dir) = nginx6(&ns, &name);
            t.servers.push(p);
            t.server_dirs.push(dir);
            let udp = format!("[::]:{BACKEND_UDP_PORT}");
            t.servers.push(
                ns.spawn(
                    PORTICO,
                    &["tool", "udp-echo", "--listen", &udp, "--name", &name],
                )
                .expect("udp-echo starts"),
            );
            t.backends.push((name, addr, ns));
        }
        let ready = wait_until(Duration::from_secs(20), || {
            t.backends.iter().all(|(_, _, ns)| {
                [("-ltnH", BACKEND_PORT), ("-lunH", BACKEND_UDP_PORT)]
                    .iter()
                    .all(|(flags, port)| {
                        ns.exec("ss", &[flags, "sport", "=", &format!(":{port}")])
                            .is_ok_and(|o| !String::from_utf8_lossy(&o.stdout).trim().is_empty())
                    })
            })
        });
        assert!(
            ready,
            "nginx on [::]:8080 and udp-echo on [::]:5353 listen in every backend"
        );
        t
    }

    fn offloads_off(&self, ns: &Netns, ifname: &str) {
        let mut args = vec!["tool", "offloads-off", ifname];
        if self.driver == DriverKind::Afxdp {
            args.push("--tx-checksum");
        }
        ns.exec(PORTICO, &args).expect("offloads off");
    }

    fn config(&self, snat: bool) -> String {
        let backends = |port: u16| -> String {
            self.backends
                .iter()
                .map(|(_, a, _)| format!("\n    {{ address = \"{a}\", port = {port} }},"))
                .collect()
        };
        format!(
            r#"[dataplane]
workers = 2
idle = "adaptive"

[dataplane.conntrack]
capacity = 65536

{ports}
[[service]]
name = "web6"
protocol = "tcp"
vip = "{VIP}"
port = {HTTP_PORT}
node_port = {NODE_PORT}
snat = {snat}
backends = [{http}
]

[[service]]
name = "dns6"
protocol = "udp"
vip = "{VIP}"
port = {DNS_PORT}
snat = {snat}
backends = [{udp}
]
"#,
            http = backends(BACKEND_PORT),
            udp = backends(BACKEND_UDP_PORT),
            ports = self.ports_toml(),
        )
    }

    /// The two `[[port]]` tables: dual-stack node and SNAT addresses.
    fn ports_toml(&self) -> String {
        format!(
            r#"[[port]]
name = "outside"
driver = "{driver}"
interface = "{outside}"
role = "outside"
node_addresses = ["{NODE4}/24", "{NODE}/64"]

[[port]]
name = "inside"
driver = "{driver}"
interface = "{inside}"
role = "inside"
snat_addresses = ["{SNAT4}/24", "{SNAT}/64"]
"#,
            driver = self.driver,
            outside = self.outside_if,
            inside = self.inside_if,
        )
    }

    /// Start `portico run` on `config` and wait until `curl -6` of the VIP
    /// answers.
    fn gateway(&self, config: &str) -> Gw {
        let config_path = self.dir.path.join("portico.toml");
        std::fs::write(&config_path, config).expect("write config");
        let socket = self.dir.path.join("portico.sock");
        let log = self.dir.path.join("portico.log");
        let process =
            spawn_run(&self.gateway, PORTICO, &config_path, &socket, &log, &[]).expect("spawn");
        let gw = Gw {
            _process: process,
            socket,
            log,
        };
        let url = format!("http://[{VIP}]/");
        let ok = wait_until(Duration::from_secs(30), || {
            self.curl(&url, 1).first().is_some_and(Option::is_some)
        });
        assert!(
            ok,
            "curl -6 of the VIP never answered; stats {:?}; gateway log:\n{}",
            gw.stats_json().ok(),
            gw.log_text()
        );
        gw
    }

    /// `count` GETs of `url` with `curl -6` in the client, one connection
    /// each: each body (`None` for a failed transfer).
    fn curl(&self, url: &str, count: usize) -> Vec<Option<String>> {
        let mut args = vec!["-6", "-sS", "--max-time", "5", "-w", "\n== %{http_code}\n"];
        args.extend(["-H", "Connection: close"]);
        args.extend(std::iter::repeat_n(url, count));
        let out = self
            .client
            .exec_unchecked("curl", &args)
            .expect("curl runs");
        parse_curl(&String::from_utf8_lossy(&out.stdout), count)
    }

    fn mac_of(ns: &Netns, ifname: &str) -> MacAddr {
        let text = portico::demo::topology::Topology::mac_of(ns, ifname).expect("MAC");
        let mut mac = [0u8; 6];
        for (b, part) in mac.iter_mut().zip(text.split(':')) {
            *b = u8::from_str_radix(part, 16).expect("hex MAC");
        }
        MacAddr(mac)
    }
}

/// nginx on `[::]:8080` in `ns`: `GET /` answers `backend NAME saw
/// $remote_addr`, `/data/` is a WebDAV directory (PUT stores, GET serves).
fn nginx6(ns: &Netns, name: &str) -> (Process, TempDir) {
    let dir = TempDir::new("ngx6").expect("nginx dir");
    let d = dir.path.display();
    std::fs::create_dir_all(dir.path.join("www/data")).expect("www");
    let conf = format!(
        "user root;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\ndaemon off;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d};\n  fastcgi_temp_path {d};\n  uwsgi_temp_path {d};\n  scgi_temp_path {d};\n  client_max_body_size 64m;\n\
           server {{\n    listen 0.0.0.0:{BACKEND_PORT} reuseport;\n    listen [::]:{BACKEND_PORT} ipv6only=on reuseport;\n    root {d}/www;\n\
             location = / {{ return 200 \"backend {name} saw $remote_addr\\n\"; }}\n\
             location /data/ {{ dav_methods PUT; create_full_put_path on; }}\n  }}\n}}\n"
    );
    let conf_path = dir.path.join("nginx.conf");
    std::fs::write(&conf_path, conf).expect("nginx.conf");
    let p = ns
        .spawn(
            "nginx",
            &[
                "-c",
                conf_path.to_str().expect("utf-8"),
                "-p",
                dir.path.to_str().expect("utf-8"),
            ],
        )
        .expect("nginx starts");
    (p, dir)
}

/// A running `portico run`, stopped by PID on drop.
struct Gw {
    _process: Process,
    socket: PathBuf,
    log: PathBuf,
}

impl Gw {
    fn stats_json(&self) -> Result<Value, String> {
        let (raw, _) = portico::admin::fetch(&self.socket).map_err(|e| e.to_string())?;
        serde_json::from_str(&raw).map_err(|e| e.to_string())
    }

    fn stats(&self) -> Value {
        self.stats_json().expect("stats")
    }

    /// Wait (up to 10 s) for a report satisfying `f`.
    fn stats_until(&self, mut f: impl FnMut(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        let ok = wait_until(Duration::from_secs(10), || {
            last = self.stats_json().unwrap_or(Value::Null);
            f(&last)
        });
        assert!(ok, "the counters never satisfied the condition: {last}");
        last
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Root, nginx and curl, or `None` after a loud SKIP.
fn setup(test: &str, shape: Shape) -> Option<Topo6> {
    if !require_root(test)
        || !require_programs(test, &["nginx", "curl", "ss"], "tests/run.sh installs them")
    {
        return None;
    }
    Some(Topo6::build(shape))
}

/// Every request answered, every backend answering, all from `source`.
fn assert_all_answered(
    label: &str,
    gw: &Gw,
    bodies: &[Option<String>],
    backends: usize,
    source: &str,
) {
    let (per_backend, per_source, failed) = tally(bodies);
    assert_eq!(
        failed,
        0,
        "{label}: failed requests; answers {per_backend:?}; drops {}",
        gw.stats()["total"]["drops"]
    );
    assert_eq!(per_backend.len(), backends, "{label}: {per_backend:?}");
    assert_eq!(
        per_source.keys().collect::<Vec<_>>(),
        vec![source],
        "{label}: the address the backends saw"
    );
}

/// (a) the VIP over IPv6 with full NAT from the IPv6 SNAT address,
/// (b) the NodePort over IPv6, (d) NDP both ways: the client resolved the
/// VIP to the gateway port's MAC, the gateway resolved the backends.
fn vip_node_port_and_ndp_on(driver: DriverKind) {
    let Some(t) = setup(
        "ipv6::vip_and_node_port_over_ipv6_with_full_nat",
        Shape {
            backends: 2,
            driver,
            inside_mtu: None,
        },
    ) else {
        return;
    };
    let gw = t.gateway(&t.config(true));
    let snat = SNAT.to_string();
    let vip = t.curl(&format!("http://[{VIP}]/"), REQUESTS);
    assert_all_answered("VIP", &gw, &vip, 2, &snat);
    let np = t.curl(&format!("http://[{NODE}]:{NODE_PORT}/"), REQUESTS);
    assert_all_answered("NodePort", &gw, &np, 2, &snat);

    // UDP over IPv6 (the client's datagrams also arrive CHECKSUM_PARTIAL
    // with af_packet): every query answered, by both backends, from SNAT.
    const QUERIES: usize = 40;
    let out = t
        .client
        .exec(
            PORTICO,
            &[
                "tool",
                "udp-query",
                "--target",
                &format!("[{VIP}]:{DNS_PORT}"),
                "--count",
                &QUERIES.to_string(),
                "--timeout-ms",
                "2000",
            ],
        )
        .expect("udp-query runs");
    let answers: Vec<Option<String>> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            l.strip_prefix("ok ")
                .and_then(|rest| rest.split_once(' '))
                .map(|(_, body)| body.to_owned())
        })
        .collect();
    assert_eq!(answers.len(), QUERIES, "a line per query");
    assert_all_answered("UDP", &gw, &answers, 2, &snat);

    // (d) The client's neighbour entry of the VIP is the gateway port's MAC.
    let gw_mac =
        portico::demo::topology::Topology::mac_of(&t.gateway, &t.outside_if).expect("gateway MAC");
    let neigh = t
        .client
        .exec("ip", &["-6", "neigh", "show", &VIP.to_string()])
        .expect("ip neigh");
    let neigh = String::from_utf8_lossy(&neigh.stdout);
    assert!(
        neigh.contains(&format!("lladdr {gw_mac}")),
        "client neighbour entry of the VIP: {neigh:?}, gateway MAC {gw_mac}"
    );
    // The gateway solicited the backends and learned them.
    let csum_ports = |s: &Value| {
        s["ports"].as_array().is_some_and(|ps| {
            ps.iter()
                .all(|p| p["rx_csum_completed"].as_u64() >= Some(REQUESTS as u64))
        })
    };
    let s = gw.stats_until(|s| {
        s.pointer("/total/ndp_learned").and_then(Value::as_u64) >= Some(2)
            && s.pointer("/total/ndp_solicits_sent")
                .and_then(Value::as_u64)
                >= Some(2)
            && s.pointer("/total/flows_created").and_then(Value::as_u64)
                >= Some(2 * REQUESTS as u64)
            && (driver != DriverKind::Afpacket || csum_ports(s))
    });
    assert!(
        number(&s, "/total/flows_created") >= 2 * REQUESTS as u64,
        "a flow per connection: {s}"
    );
    assert!(number(&s, "/total/snat_allocations") >= 1, "{s}");
    if driver == DriverKind::Afpacket {
        // The client and the backends send with TX checksum offload: their
        // TCP arrives CHECKSUM_PARTIAL and the driver completed it (else it
        // would be dropped as tcp_bad_checksum).
        assert_eq!(number(&s, "/total/drops/tcp_bad_checksum"), 0, "{s}");
        assert_eq!(number(&s, "/total/drops/udp_bad_checksum"), 0, "{s}");
        assert!(
            csum_ports(&s),
            "partial IPv6 checksums completed on both ports: {s}"
        );
    }
}

#[test]
fn vip_and_node_port_over_ipv6_with_full_nat() {
    vip_node_port_and_ndp_on(DriverKind::Afpacket);
}

#[test]
fn vip_and_node_port_over_ipv6_with_full_nat_afxdp() {
    vip_node_port_and_ndp_on(DriverKind::Afxdp);
}

/// (c) `snat = false` over IPv6: the backends see the client's address
/// (their default route is the SNAT address, so replies come back through
/// the gateway).
#[test]
fn ipv6_without_snat_the_backends_see_the_client() {
    let Some(t) = setup(
        "ipv6::ipv6_without_snat_the_backends_see_the_client",
        Shape {
            backends: 2,
            driver: DriverKind::Afpacket,
            inside_mtu: None,
        },
    ) else {
        return;
    };
    let gw = t.gateway(&t.config(false));
    let vip = t.curl(&format!("http://[{VIP}]/"), REQUESTS);
    assert_all_answered("VIP without SNAT", &gw, &vip, 2, &CLIENT.to_string());
    let s = gw.stats();
    assert_eq!(number(&s, "/total/snat_allocations"), 0, "{s}");
}

fn sha256(ns: &Netns, path: &str) -> String {
    let out = ns.exec("sha256sum", &[path]).expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// (e) An MTU step: 1500 on the client side, 1280 behind the gateway. A
/// 4 MB upload through the VIP gets Packet Too Big from the gateway, the
/// client learns the path MTU and the transfer completes (the stored file
/// has the sent sha256); the 4 MB download back completes too.
#[test]
fn mtu_step_packet_too_big_reaches_the_client_and_transfers_complete() {
    let Some(t) = setup(
        "ipv6::mtu_step_packet_too_big_reaches_the_client_and_transfers_complete",
        Shape {
            backends: 1,
            driver: DriverKind::Afpacket,
            inside_mtu: Some(1280),
        },
    ) else {
        return;
    };
    let gw = t.gateway(&t.config(true));
    let before = gw.stats();
    let src = t.dir.path.join("big.bin");
    let src_s = src.to_str().expect("utf-8").to_owned();
    t.client
        .exec(
            "dd",
            &[
                "if=/dev/urandom",
                &format!("of={src_s}"),
                "bs=1M",
                "count=4",
                "status=none",
            ],
        )
        .expect("make a 4 MB file");
    let want = sha256(&t.client, &src_s);
    let url = format!("http://[{VIP}]/data/big.bin");
    let put = t
        .client
        .exec_unchecked(
            "curl",
            &[
                "-6",
                "-sS",
                "--max-time",
                "30",
                "-T",
                &src_s,
                "-w",
                "%{http_code}",
                &url,
            ],
        )
        .expect("curl -T runs");
    let code = String::from_utf8_lossy(&put.stdout).trim().to_owned();
    assert!(
        code == "201" || code == "204",
        "PUT answered {code}: {}; stats {}",
        String::from_utf8_lossy(&put.stderr),
        gw.stats()
    );
    let (_, _, backend) = &t.backends[0];
    let stored = t.server_dirs[0].path.join("www/data/big.bin");
    assert_eq!(
        sha256(backend, stored.to_str().expect("utf-8")),
        want,
        "the upload arrived whole"
    );
    // Packet Too Big came from the gateway and the client learned 1280.
    let s = gw.stats_until(|s| {
        s.pointer("/total/icmp_errors_sent").and_then(Value::as_u64)
            > before
                .pointer("/total/icmp_errors_sent")
                .and_then(Value::as_u64)
    });
    let route = t
        .client
        .exec("ip", &["-6", "route", "get", &VIP.to_string()])
        .expect("ip route get");
    let route = String::from_utf8_lossy(&route.stdout);
    assert!(
        route.contains("mtu 1280"),
        "the client's path MTU towards the VIP: {route:?}; stats {s}"
    );
    let dst = t.dir.path.join("back.bin");
    let dst_s = dst.to_str().expect("utf-8").to_owned();
    let get = t
        .client
        .exec_unchecked(
            "curl",
            &[
                "-6",
                "-sS",
                "--max-time",
                "30",
                "-o",
                &dst_s,
                "-w",
                "%{http_code}",
                &url,
            ],
        )
        .expect("curl GET runs");
    assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), "200");
    assert_eq!(
        sha256(&t.client, &dst_s),
        want,
        "the download arrived whole"
    );
}

/// (f) Bad IPv6 input from a raw socket in the client namespace: an
/// extension-header chain that is too long, one that runs past the
/// payload, a fragment, a truncated IPv6 header and a Neighbour
/// Solicitation with hop limit 64 are each dropped and counted by their
/// reason; `curl -6` of the VIP works right after.
#[test]
fn bad_ipv6_input_is_dropped_by_reason_and_service_continues() {
    let Some(t) = setup(
        "ipv6::bad_ipv6_input_is_dropped_by_reason_and_service_continues",
        Shape {
            backends: 1,
            driver: DriverKind::Afpacket,
            inside_mtu: None,
        },
    ) else {
        return;
    };
    let gw = t.gateway(&t.config(true));
    let src = Topo6::mac_of(&t.client, &t.client_if);
    let dst = Topo6::mac_of(&t.gateway, &t.outside_if);
    let syn = build::eth_ipv6_tcp(
        src,
        dst,
        (CLIENT, 40001),
        (VIP, HTTP_PORT),
        dataplane::wire::tcp::flags::SYN,
        1,
        0,
        b"",
    );
    let mut too_long = syn.clone();
    build::with_dest_opts(&mut too_long, 9, 0);
    let mut ext_truncated = syn.clone();
    build::with_dest_opts(&mut ext_truncated, 1, 0);
    ext_truncated[54 + 1] = 10; // 88 bytes of options in a 28-byte payload
    let mut fragment = syn.clone();
    fragment.splice(54..54, [next_header::TCP, 0, 0, 1, 0, 0, 0, 7]);
    let len = u16::from_be_bytes([fragment[18], fragment[19]]) + 8;
    fragment[18..20].copy_from_slice(&len.to_be_bytes());
    fragment[14 + 6] = next_header::FRAGMENT;
    let truncated = syn[..14 + 30].to_vec();
    let mut ndp = build::ndp_solicit(src, CLIENT, VIP);
    ndp[14 + 7] = 64;
    const COPIES: u64 = 5;
    let cases: [(&str, &[u8]); 5] = [
        ("ipv6_ext_chain_too_long", &too_long),
        ("ipv6_ext_truncated", &ext_truncated),
        ("ipv6_fragment", &fragment),
        ("ipv6_truncated", &truncated),
        ("ndp_bad_hop_limit", &ndp),
    ];
    let before = gw.stats();
    in_netns(&t.client, || {
        let sock = RawSocket::open(&t.client_if).expect("raw socket");
        for (_, frame) in &cases {
            for _ in 0..COPIES {
                sock.send(frame).expect("send");
            }
        }
    });
    let drops = |s: &Value, reason: &str| {
        number(s, &format!("/total/drops/{reason}"))
            - number(&before, &format!("/total/drops/{reason}"))
    };
    let after = gw.stats_until(|s| cases.iter().all(|(r, _)| drops(s, r) >= COPIES));
    for (reason, _) in &cases {
        // Nothing else the client's kernel sends lands in these reasons.
        assert_eq!(drops(&after, reason), COPIES, "drops of {reason}: {after}");
    }
    let ok = t.curl(&format!("http://[{VIP}]/"), 10);
    assert_all_answered("VIP after bad input", &gw, &ok, 1, &SNAT.to_string());
}

/// A dual-stack LoadBalancer Service (`ipFamilyPolicy: RequireDualStack`)
/// driven by the real kube-apiserver: pools of both families, an
/// EndpointSlice per address type over nginx backends; Portico writes one
/// address per family to `status.loadBalancer.ingress`, and `curl -4` and
/// `curl -6` through them reach both backends from the SNAT address of
/// their family. The Service asks for the SYN proxy (annotation): both
/// families are proxied (every request a validated cookie and a splice)
/// and the Service gets no Warning Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_stack_kubernetes_service_answers_on_both_families() {
    use common::kube::{WAIT, eventually};
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::api::{Api, PostParams};
    use serde_json::json;
    use std::net::IpAddr;

    const TEST: &str = "ipv6::a_dual_stack_kubernetes_service_answers_on_both_families";
    let Some(t) = setup(
        TEST,
        Shape {
            backends: 2,
            driver: DriverKind::Afpacket,
            inside_mtu: None,
        },
    ) else {
        return;
    };
    let Some((_link, cluster)) = common::kube::api_server_into(TEST, &t.gateway, 253).await else {
        return;
    };
    let config = format!(
        r#"[dataplane]
workers = 1
idle = "adaptive"

{ports}
[kubernetes]
kubeconfig = "{kubeconfig}"
serve_unclassed = true
debounce_ms = 5
debounce_max_ms = 50
lease_name = "portico-e2e6"
lease_duration_ms = 3000
renew_deadline_ms = 2000
retry_period_ms = 300

[[address_pool]]
name = "public"
addresses = ["192.0.2.20-192.0.2.29", "2001:db8::20-2001:db8::2f"]
"#,
        ports = t.ports_toml(),
        kubeconfig = cluster.kubeconfig_path().display(),
    );
    let config_path = t.dir.path.join("portico.toml");
    std::fs::write(&config_path, config).expect("write config");
    let socket = t.dir.path.join("portico.sock");
    let log = t.dir.path.join("portico.log");
    let _gw = spawn_run(&t.gateway, PORTICO, &config_path, &socket, &log, &[]).expect("spawn");
    let log = || std::fs::read_to_string(&log).unwrap_or_default();

    let client = cluster.client();
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": "web", "namespace": "default",
                      "annotations": { "portico.dev/syn-proxy": "on" } },
        "spec": {
            "type": "LoadBalancer",
            "ipFamilyPolicy": "RequireDualStack",
            "ipFamilies": ["IPv4", "IPv6"],
            "ports": [{ "name": "http", "port": 80, "targetPort": BACKEND_PORT, "protocol": "TCP" }],
        },
    }))
    .expect("the Service manifest");
    Api::<Service>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &service)
        .await
        .expect("create the dual-stack Service");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    for (family, addrs) in [
        (
            "IPv4",
            (0..2)
                .map(|i| backend_addr4(i).to_string())
                .collect::<Vec<_>>(),
        ),
        (
            "IPv6",
            (0..2).map(|i| backend_addr(i).to_string()).collect(),
        ),
    ] {
        let endpoints: Vec<Value> = addrs
            .iter()
            .map(|a| json!({ "addresses": [a], "conditions": { "ready": true, "serving": true, "terminating": false } }))
            .collect();
        let slice: EndpointSlice = serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": format!("web-{}", family.to_lowercase()),
                "namespace": "default",
                "labels": { "kubernetes.io/service-name": "web" },
            },
            "addressType": family,
            "ports": [{ "name": "http", "port": BACKEND_PORT, "protocol": "TCP" }],
            "endpoints": endpoints,
        }))
        .expect("the EndpointSlice manifest");
        slices
            .create(&PostParams::default(), &slice)
            .await
            .expect("create the EndpointSlice");
    }
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let (v4, v6) = eventually("an address of each family in the status", async || {
        let svc = services.get_opt("web").await.ok().flatten()?;
        let ips = portico::source::kube::status::ingress_addresses(&svc);
        let v4 = ips.iter().find_map(|a| match a {
            IpAddr::V4(a) => Some(*a),
            IpAddr::V6(_) => None,
        })?;
        let v6 = ips.iter().find_map(|a| match a {
            IpAddr::V6(a) => Some(*a),
            IpAddr::V4(_) => None,
        })?;
        Some((v4, v6))
    })
    .await;
    assert!(
        (Ipv4Addr::new(192, 0, 2, 20)..=Ipv4Addr::new(192, 0, 2, 29)).contains(&v4),
        "{v4} is from the IPv4 range"
    );
    let v6_first: Ipv6Addr = "2001:db8::20".parse().expect("address");
    let v6_last: Ipv6Addr = "2001:db8::2f".parse().expect("address");
    assert!(
        (v6_first..=v6_last).contains(&v6),
        "{v6} is from the IPv6 range"
    );

    let counter = |path: &str| {
        let (raw, _) = portico::admin::fetch(&socket).expect("stats");
        let v: Value = serde_json::from_str(&raw).expect("stats JSON");
        number(&v, path)
    };
    for (flag, url, snat) in [
        ("-4", format!("http://{v4}/"), SNAT4.to_string()),
        ("-6", format!("http://[{v6}]/"), SNAT.to_string()),
    ] {
        let validated_before = counter("/total/syn_cookies_validated");
        let spliced_before = counter("/total/syn_proxy_spliced");
        let curl = |count: usize| {
            let mut args = vec![flag, "-sS", "--max-time", "5", "-w", "\n== %{http_code}\n"];
            args.extend(["-H", "Connection: close"]);
            args.extend(std::iter::repeat_n(url.as_str(), count));
            let out = t.client.exec_unchecked("curl", &args).expect("curl runs");
            parse_curl(&String::from_utf8_lossy(&out.stdout), count)
        };
        let deadline = std::time::Instant::now() + WAIT;
        while curl(1)[0].is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "curl {flag} {url} never answered; log:\n{}",
                log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (per_backend, per_source, failed) = tally(&curl(REQUESTS));
        assert_eq!(failed, 0, "curl {flag}: {per_backend:?}; log:\n{}", log());
        assert_eq!(
            per_backend.len(),
            2,
            "curl {flag}: both backends answer: {per_backend:?}"
        );
        assert_eq!(
            per_source.keys().cloned().collect::<Vec<_>>(),
            vec![snat],
            "curl {flag}: the backends see the SNAT address of the family"
        );
        let ok = wait_until(Duration::from_secs(10), || {
            counter("/total/syn_proxy_spliced") - spliced_before >= REQUESTS as u64
                && counter("/total/syn_cookies_validated") - validated_before >= REQUESTS as u64
        });
        assert!(
            ok,
            "curl {flag}: every connection through the SYN proxy; validated {} (before {validated_before})",
            counter("/total/syn_cookies_validated")
        );
    }
    assert_eq!(counter("/total/drops/syn_cookie_invalid"), 0);
    // No Warning Event about the Service (as SynProxyNotForIPv6 was).
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let warnings: Vec<String> = events
        .list(&Default::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("web")
                && e.type_.as_deref() == Some("Warning")
        })
        .map(|e| format!("{:?}: {:?}", e.reason, e.note))
        .collect();
    assert!(warnings.is_empty(), "Warning Events: {warnings:?}");
}

/// TCP connections the kernel of `ns` accepted (`TcpPassiveOpens`: a SYN
/// that reached a listener).
fn passive_opens(ns: &Netns) -> u64 {
    let out = ns
        .exec("nstat", &["-asz", "TcpPassiveOpens"])
        .expect("nstat runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("TcpPassiveOpens"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("TcpPassiveOpens line")
}

/// A SYN to the VIP from a spoofed source of `2001:db8:0:f::/64`, port and
/// address from `n`.
fn spoofed_syn6(dst_mac: MacAddr, src_mac: MacAddr, n: u32) -> Vec<u8> {
    let src = Ipv6Addr::new(0x2001, 0xdb8, 0, 0xf, 0, 0, (n >> 16) as u16, n as u16);
    let sport = 1024 + (n.wrapping_mul(7919) % 60_000) as u16;
    build::eth_ipv6_tcp(
        src_mac,
        dst_mac,
        (src, sport),
        (VIP, HTTP_PORT),
        dataplane::wire::tcp::flags::SYN,
        n.wrapping_mul(2_654_435_761),
        0,
        b"",
    )
}

/// The SYN proxy over IPv6 end to end: a spoofed-source IPv6 SYN flood of
/// a fixed count is answered with cookies (every one counted) and none of
/// it reaches the backend (no flow, no SNAT tuple, no connection accepted
/// by the backend's kernel); real `curl -6` requests through the proxied
/// VIP are answered, each one exactly one validated cookie, one flow and
/// one connection at the backend.
#[test]
fn a_syn_proxied_ipv6_vip_answers_curl_and_a_spoofed_flood_only_gets_cookies() {
    const FLOOD_SYNS: u32 = 2_000;
    let Some(t) = setup(
        "ipv6::a_syn_proxied_ipv6_vip_answers_curl_and_a_spoofed_flood_only_gets_cookies",
        Shape {
            backends: 1,
            driver: DriverKind::Afpacket,
            inside_mtu: None,
        },
    ) else {
        return;
    };
    if !require_programs(
        "ipv6::a_syn_proxied_ipv6_vip_answers_curl_and_a_spoofed_flood_only_gets_cookies",
        &["nstat"],
        "iproute2",
    ) {
        return;
    }
    let config = t.config(true).replacen(
        &format!("node_port = {NODE_PORT}\n"),
        &format!("node_port = {NODE_PORT}\nsyn_proxy = \"on\"\n"),
        1,
    );
    let gw = t.gateway(&config);
    let backend_ns = &t.backends[0].2;
    // The gateway's start-up check made a connection already: every count
    // below is from here.
    let s0 = gw.stats();
    let before = |path: &str| number(&s0, path);
    let opens_before = passive_opens(backend_ns);
    let gw_mac = Topo6::mac_of(&t.gateway, &t.outside_if);
    let client_mac = Topo6::mac_of(&t.client, &t.client_if);
    let frames: Vec<Vec<u8>> = (0..FLOOD_SYNS)
        .map(|n| spoofed_syn6(gw_mac, client_mac, n))
        .collect();
    let sent = in_netns(&t.client, || {
        let sock = RawSocket::open(&t.client_if).expect("raw socket");
        let mut sent = 0u32;
        for (n, f) in frames.iter().enumerate() {
            while sock.send(f).is_err() {
                std::thread::sleep(Duration::from_millis(1));
            }
            sent += 1;
            // Paced (about 5,000 a second): the gateway under test is a
            // debug build sharing the machine.
            if n % 50 == 49 {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        sent
    });
    assert_eq!(sent, FLOOD_SYNS);
    let delta = |s: &Value, path: &str| number(s, path) - before(path);
    let s = gw.stats_until(|s| delta(s, "/total/syn_cookies_sent") >= u64::from(sent));
    assert_eq!(delta(&s, "/total/syn_cookies_sent"), u64::from(sent), "{s}");
    assert_eq!(delta(&s, "/total/syn_cookies_validated"), 0, "{s}");
    assert_eq!(delta(&s, "/total/flows_created"), 0, "no flow: {s}");
    assert_eq!(delta(&s, "/total/snat_allocations"), 0, "{s}");
    assert_eq!(
        passive_opens(backend_ns),
        opens_before,
        "no SYN of the flood reached the backend"
    );

    // Real clients through the proxy.
    let bodies = t.curl(&format!("http://[{VIP}]/"), REQUESTS);
    assert_all_answered("proxied VIP", &gw, &bodies, 1, &SNAT.to_string());
    let requests = REQUESTS as u64;
    let s = gw.stats_until(|s| delta(s, "/total/syn_proxy_spliced") >= requests);
    assert_eq!(delta(&s, "/total/syn_cookies_validated"), requests, "{s}");
    assert_eq!(delta(&s, "/total/syn_proxy_spliced"), requests, "{s}");
    assert_eq!(delta(&s, "/total/flows_created"), requests, "{s}");
    assert!(
        delta(&s, "/total/syn_cookies_sent") >= u64::from(sent) + requests,
        "{s}"
    );
    assert_eq!(number(&s, "/total/drops/syn_cookie_invalid"), 0, "{s}");
    assert_eq!(
        passive_opens(backend_ns) - opens_before,
        requests,
        "the backend accepted exactly the real connections"
    );
}
