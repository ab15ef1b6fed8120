//! Shared by the end-to-end suites: the topology of `portico demo`
//! ([`portico::demo::topology`]) with `portico run` on it, and clients in
//! the client namespace.
//!
//! Every suite builds its own topology (unique namespace names) and drops
//! it at the end, also when it fails: the gateway guard is declared after
//! the topology, so the gateway stops before the namespaces go.
#![allow(dead_code)] // each suite uses a part

pub mod bulk;
pub mod kube;
pub mod router;

use portico::demo::live::parse_body;
pub use portico::demo::topology::DriverKind;
use portico::demo::topology::{GatewayRun, ServiceOptions, Topology, TopologyConfig};
use portico_tests::{have, require_root, wait_until};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// The `portico` binary built from the sources under test.
pub const PORTICO: &str = env!("CARGO_BIN_EXE_portico-e2e");

/// A counter of the port named `name` in a stats report.
pub fn port_counter(report: &Value, name: &str, counter: &str) -> u64 {
    let ports = report["ports"].as_array().expect("ports in the report");
    let port = ports
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no port {name} in {report}"));
    number(port, &format!("/{counter}"))
}

/// The ESTABLISHED rows of a `portico flows --json` listing whose client
/// is `client` (an IP address).
pub fn established_from(listing: &Value, client: std::net::IpAddr) -> Vec<Value> {
    let prefix = std::net::SocketAddr::new(client, 0).to_string();
    let prefix = prefix.trim_end_matches('0');
    listing["flows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| {
            f["state"] == "ESTABLISHED"
                && f["orig_src"]
                    .as_str()
                    .is_some_and(|s| s.starts_with(prefix))
        })
        .cloned()
        .collect()
}

/// The value of the sample `series` (name and labels exactly as exposed).
pub fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

/// `/metrics` of the gateway (default address, in its namespace), or
/// `None` while it does not answer.
pub fn scrape(t: &Topology) -> Option<String> {
    let out = t
        .gateway
        .exec_unchecked(
            "curl",
            &["-sS", "--max-time", "2", "http://127.0.0.1:9464/metrics"],
        )
        .expect("curl runs");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Run the `portico` under test (in the current namespace: the admin
/// socket is a file).
pub fn portico(args: &[&str]) -> std::process::Output {
    std::process::Command::new(PORTICO)
        .args(args)
        .output()
        .expect("portico runs")
}

/// The topology with `backends` backends, or `None` (after a loud SKIP)
/// without root.
pub fn topology(test: &str, backends: usize) -> Option<Topology> {
    topology_on(test, backends, DriverKind::Afpacket)
}

/// [`topology`] with the gateway's ports on `driver` (afpacket or afxdp;
/// afxdp topologies give the gateway's veths one queue per worker, and
/// [`ServiceOptions::all`]'s two workers match).
pub fn topology_on(test: &str, backends: usize, driver: DriverKind) -> Option<Topology> {
    if !require_root(test) {
        return None;
    }
    assert!(
        have("curl") && have("ss"),
        "curl and iproute2 are installed by tests/run.sh"
    );
    Some(
        Topology::build(&TopologyConfig {
            backends,
            portico: PORTICO.into(),
            prefer_nginx: true,
            driver,
        })
        .expect("build the namespace topology"),
    )
}

/// Start `portico run` with `options` and wait until the VIP answers HTTP
/// (the first request also resolves ARP both ways).
pub fn gateway(t: &Topology, options: &ServiceOptions) -> GatewayRun {
    gateway_with(t, &t.config_toml(options), &[])
}

/// [`gateway`] with a configuration of its own and `env` (`NAME=value`
/// each) in the gateway's environment.
pub fn gateway_with(t: &Topology, config: &str, env: &[&str]) -> GatewayRun {
    let gw = t
        .start_gateway_with_env(config, env)
        .expect("portico run starts");
    let url = format!("http://{}/", portico::demo::topology::VIP);
    let ok = wait_until(Duration::from_secs(30), || {
        curl(t, &url, 1, true).first().is_some_and(Option::is_some)
    });
    assert!(
        ok,
        "HTTP through the VIP never answered; stats {:?}; gateway log:\n{}",
        gw.stats_raw().map(|s| s.0),
        gw.log_text()
    );
    gw
}

/// `count` GETs of `url` with one curl in the client namespace: each body
/// (`None` for a failed transfer). With `close`, every request has its own
/// connection (`Connection: close`); without, curl reuses one connection.
pub fn curl(t: &Topology, url: &str, count: usize, close: bool) -> Vec<Option<String>> {
    let mut args = vec!["-sS", "--max-time", "5", "-w", "\n== %{http_code}\n"];
    if close {
        args.extend(["-H", "Connection: close"]);
    }
    args.extend(std::iter::repeat_n(url, count));
    let out = t.client_exec("curl", &args).expect("curl runs");
    parse_curl(&String::from_utf8_lossy(&out.stdout), count)
}

/// Bodies of a curl run with `-w "\n== %{http_code}\n"`, `count` transfers.
pub fn parse_curl(text: &str, count: usize) -> Vec<Option<String>> {
    let mut bodies = Vec::new();
    let mut body: Option<String> = None;
    for line in text.lines() {
        if let Some(status) = line.strip_prefix("== ") {
            bodies.push(if status.trim() == "200" {
                body.take()
            } else {
                None
            });
            body = None;
        } else if !line.trim().is_empty() {
            body = Some(line.trim().to_owned());
        }
    }
    bodies.resize(count, None);
    bodies
}

/// Answers per backend name, and per address the backends saw, of
/// successful bodies; panics on a body that is not a backend's answer.
pub fn tally(
    bodies: &[Option<String>],
) -> (BTreeMap<String, usize>, BTreeMap<String, usize>, usize) {
    let mut per_backend = BTreeMap::new();
    let mut per_source = BTreeMap::new();
    let mut failed = 0;
    for body in bodies {
        match body {
            Some(b) => {
                let (name, saw) =
                    parse_body(b).unwrap_or_else(|| panic!("not a backend's answer: {b:?}"));
                *per_backend.entry(name).or_default() += 1;
                *per_source.entry(saw).or_default() += 1;
            }
            None => failed += 1,
        }
    }
    (per_backend, per_source, failed)
}

/// `portico stats --json` of the gateway, parsed.
pub fn stats(gw: &GatewayRun) -> Value {
    let (raw, _) = gw.stats_raw().expect("the admin socket answers");
    serde_json::from_str(&raw).expect("stats are JSON")
}

pub fn number(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{pointer} missing in {v}"))
}

/// Counters are published by the workers a few times a second: wait until
/// `f` holds for a fresh report (up to 10 s) and return that report.
pub fn stats_until(gw: &GatewayRun, mut f: impl FnMut(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let ok = wait_until(Duration::from_secs(10), || {
        last = stats(gw);
        f(&last)
    });
    assert!(ok, "the counters never satisfied the condition: {last}");
    last
}

/// A `Tcp:`/`TcpExt:` counter of the client namespace (`/proc/net/snmp`
/// and `/proc/net/netstat`, which show the reader's namespace).
pub fn client_tcp_counter(t: &Topology, file: &str, group: &str, name: &str) -> u64 {
    let out = t
        .client
        .exec("cat", &[file])
        .expect("read the client's counters");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines().filter(|l| l.starts_with(&format!("{group}:")));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        panic!("no {group} in {file}: {text}");
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no {group} {name} in {file}"))
}

/// `portico tool http-get` in the client namespace: `count` GETs of the
/// VIP's HTTP port, `concurrency` at once, each within 5 s, the whole run
/// within `limit`. Returns how many were answered with 200 and the first
/// five other result lines.
pub fn http_get(t: &Topology, count: u64, concurrency: u32, limit: Duration) -> (u64, Vec<String>) {
    use portico::demo::topology::{HTTP_PORT, VIP};
    let out = t
        .client
        .spawn(
            PORTICO,
            &[
                "tool",
                "http-get",
                "--target",
                &format!("{VIP}:{HTTP_PORT}"),
                "--count",
                &count.to_string(),
                "--concurrency",
                &concurrency.to_string(),
                "--timeout-ms",
                "5000",
            ],
        )
        .expect("start http-get")
        .wait_output(limit)
        .expect("http-get finishes");
    let text = String::from_utf8_lossy(&out.stdout);
    let ok = text.lines().filter(|l| l.starts_with("ok 200 ")).count() as u64;
    let failures = text
        .lines()
        .filter(|l| !l.starts_with("ok 200 "))
        .take(5)
        .map(str::to_owned)
        .collect();
    (ok, failures)
}
