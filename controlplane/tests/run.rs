//! `portico run` and `portico stats` as a user runs them: the built binary,
//! real interfaces (veth pairs between network namespaces), a real client
//! (curl) and a real backend (nginx).
//!
//! Topology of the namespace test:
//!
//! ```text
//!   client ns                 gateway ns (portico run, 2 workers)             backend ns
//!   192.0.2.100/24 ── veth ── [outside: 192.0.2.1, VIP 192.0.2.10]
//!                             [inside: SNAT 10.1.0.1]            ── veth ── 10.1.0.10/24 nginx :8080
//! ```
//!
//! The gateway namespace has no addresses and no forwarding: only Portico
//! can answer ARP for the VIP and carry the connection to the backend. The
//! backend is a static `[[neighbour]]` of the configuration. The kernel is
//! given the node address on the outside interface, which `portico run`
//! must warn about.

mod common;

use common::{BIN, curl, mac_of, number, portico, stats, topology, wait_until};
use portico_tests::{Process, TempDir, have, nginx, require_root};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

#[test]
fn an_invalid_file_exits_2_listing_every_problem() {
    let dir = TempDir::new("prun").expect("temp dir");
    let config = dir.path.join("bad.toml");
    std::fs::write(
        &config,
        r#"
        [dataplane]
        workers = 0
        [[port]]
        name = "lan"
        driver = "afpacket"
        interface = "eth0"
        role = "both"
        node_addresses = ["192.0.2.1/24"]
        [[service]]
        name = "web"
        protocol = "tcp"
        vip = "192.0.2.10"
        port = 0
        backends = []
        "#,
    )
    .expect("write config");
    let socket = dir.path.join("portico.sock");
    let out = portico(&[
        "run",
        "--config",
        config.to_str().expect("utf-8 path"),
        "--admin-socket",
        socket.to_str().expect("utf-8 path"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("dataplane.workers"), "{stderr}");
    assert!(stderr.contains("service[0].port"), "{stderr}");
    assert!(!socket.exists(), "nothing started");
}

#[test]
fn stats_without_a_gateway_fails_with_one_line() {
    let dir = TempDir::new("pstat").expect("temp dir");
    let socket = dir.path.join("none.sock");
    let out = portico(&[
        "stats",
        "--admin-socket",
        socket.to_str().expect("utf-8 path"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not running"), "{stderr}");
}

/// The gateway's configuration for the test topology. `services` is the
/// `[[service]]` part, `conntrack_capacity` a setting only a restart
/// changes.
fn config(outside: &str, inside: &str, backend_mac: &str, services: &str, capacity: u32) -> String {
    format!(
        r#"
[dataplane]
workers = 2
idle = "adaptive"
[dataplane.conntrack]
capacity = {capacity}
[dataplane.affinity]
capacity = 1024

[[port]]
name = "outside"
driver = "afpacket"
interface = "{outside}"
role = "outside"
node_addresses = ["192.0.2.1/24"]

[[port]]
name = "inside"
driver = "afpacket"
interface = "{inside}"
role = "inside"
snat_addresses = ["10.1.0.1/24"]

[[neighbour]]
address = "10.1.0.10"
mac = "{backend_mac}"
{services}
"#
    )
}

const WEB: &str = r#"
[[service]]
name = "web"
protocol = "tcp"
vip = "192.0.2.10"
port = 80
backends = [{ address = "10.1.0.10", port = 8080 }]
"#;

const WEB_AND_ALT: &str = r#"
[[service]]
name = "web"
protocol = "tcp"
vip = "192.0.2.10"
port = 80
backends = [{ address = "10.1.0.10", port = 8080 }]

[[service]]
name = "alt"
protocol = "tcp"
vip = "192.0.2.10"
port = 8081
backends = [{ address = "10.1.0.10", port = 8080 }]
"#;

/// Replace the file in one step, so a reload never reads half of it.
fn write_config(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write config");
    std::fs::rename(&tmp, path).expect("rename config");
}

fn signal(process: &Process, name: &str) {
    let pid = process.pid().expect("running").to_string();
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{name} {pid}");
}

/// The JSON log lines of the gateway.
fn log_lines(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Whether a log line at `level` has `field` == `value` (string fields).
fn logged(log: &Path, level: &str, field: &str, value: &str) -> bool {
    log_lines(log).iter().any(|l| {
        l["level"] == level
            && l["fields"][field]
                .as_str()
                .is_some_and(|v| v.contains(value))
    })
}

#[test]
fn run_serves_reloads_on_sighup_and_stops_on_sigterm() {
    if !require_root("run::run_serves_reloads_on_sighup_and_stops_on_sigterm") {
        return;
    }
    assert!(
        have("nginx") && have("curl"),
        "nginx and curl are installed by tests/run.sh"
    );
    let t = topology("r");
    let backend_mac = mac_of(&t.backend, &t.backend_if);
    let (nginx_proc, _nginx_dir) = nginx(&t.backend, "one", "10.1.0.10:8080").expect("nginx");
    let _nginx = nginx_proc; // stopped with SIGTERM by its guard

    let dir = TempDir::new("prun").expect("temp dir");
    let config_path = dir.path.join("portico.toml");
    let socket: PathBuf = dir.path.join("admin").join("portico.sock");
    let log: PathBuf = dir.path.join("portico.log");
    let good = config(&t.outside, &t.inside, &backend_mac, WEB, 4096);
    write_config(&config_path, &good);

    // An owned address the kernel also has: logged as a warning at start.
    t.gateway
        .exec("ip", &["addr", "add", "192.0.2.1/32", "dev", &t.outside])
        .expect("kernel address");

    let command = format!(
        "exec {BIN} run --config {} --admin-socket {} --log-format json --drop-log-interval-s 1 2>{}",
        config_path.display(),
        socket.display(),
        log.display()
    );
    let mut gw = t.gateway.spawn("sh", &["-c", &command]).expect("spawn");

    // (b) it starts and serves; the counters grow with real traffic.
    wait_until("the admin socket answers", &log, || {
        stats(&socket).is_some()
    });
    assert!(
        logged(&log, "WARN", "address", "192.0.2.1"),
        "kernel/Portico address clash warned about"
    );
    let before = stats(&socket).expect("stats");
    let generation = number(&before, "/snapshot/generation");
    assert_eq!(number(&before, "/workers/1/worker"), 1, "two workers");
    for name in ["no_flow", "not_owned", "tx_full", "handoff_full"] {
        assert!(
            before["total"]["drops"].get(name).is_some(),
            "{name} reported"
        );
    }
    let mut body = None;
    wait_until("curl through the VIP succeeds", &log, || {
        body = curl(&t.client, "http://192.0.2.10/");
        body.is_some()
    });
    assert_eq!(
        body.as_deref(),
        Some("backend one saw 10.1.0.1"),
        "full NAT"
    );
    let after = stats(&socket).expect("stats");
    assert!(
        number(&after, "/total/rx_packets") > number(&before, "/total/rx_packets"),
        "rx grows: {after}"
    );
    assert!(number(&after, "/total/flows_created") >= 1, "{after}");
    assert!(
        number(&after, "/total/local_replies") >= 1,
        "ARP for the VIP answered: {after}"
    );
    assert_eq!(after["ports"][0]["name"], "outside");
    // Workers copy their driver's port stats out a few times a second.
    wait_until("the driver stats show the connection", &log, || {
        stats(&socket).is_some_and(|s| {
            number(&s, "/ports/0/rx_frames") >= 3
                && number(&s, "/ports/0/tx_frames") >= 3
                && number(&s, "/ports/1/rx_frames") >= 3
                && number(&s, "/ports/1/tx_frames") >= 3
        })
    });
    if have("ping") {
        let out = t
            .client
            .exec_unchecked("ping", &["-c", "2", "-W", "2", "192.0.2.1"])
            .expect("ping runs");
        assert!(out.status.success(), "ping of the node address");
    } else {
        portico::netns::skip(
            "ping of the node address",
            "ping is missing (tests/run.sh installs iputils-ping)",
        );
    }
    // The human-readable table names the ports.
    let table = portico(&[
        "stats",
        "--admin-socket",
        socket.to_str().expect("utf-8 path"),
    ]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("outside") && table.contains(&t.outside),
        "{table}"
    );

    // (c) an invalid file is rejected with its problems; the old config
    // keeps serving.
    write_config(&config_path, &good.replace("workers = 2", "workers = 0"));
    signal(&gw, "HUP");
    wait_until("the invalid reload is logged", &log, || {
        logged(&log, "ERROR", "path", "dataplane.workers")
    });
    assert_eq!(
        number(&stats(&socket).expect("stats"), "/snapshot/generation"),
        generation
    );
    assert_eq!(
        curl(&t.client, "http://192.0.2.10/").as_deref(),
        Some("backend one saw 10.1.0.1"),
        "still serving after a rejected reload"
    );

    // A change only a restart can apply is refused too.
    write_config(
        &config_path,
        &config(&t.outside, &t.inside, &backend_mac, WEB, 8192),
    );
    signal(&gw, "HUP");
    wait_until("the restart-only change is logged", &log, || {
        logged(&log, "ERROR", "change", "dataplane.conntrack.capacity")
    });
    assert_eq!(
        number(&stats(&socket).expect("stats"), "/snapshot/generation"),
        generation
    );
    assert!(
        curl(&t.client, "http://192.0.2.10:8081/").is_none(),
        "no listener on 8081 yet"
    );
    // Drops are not logged per packet but summarised, at most once a
    // second here (--drop-log-interval-s 1), naming the reason.
    wait_until("the drop summary names no_listener", &log, || {
        log_lines(&log).iter().any(|l| {
            l["level"] == "INFO"
                && l["fields"]["message"] == "packets dropped since the last summary"
                && l["fields"]["drops"]
                    .as_str()
                    .is_some_and(|d| d.contains("no_listener="))
        })
    });

    // A valid change is applied: a new generation, the new listener works,
    // the old one still does.
    write_config(
        &config_path,
        &config(&t.outside, &t.inside, &backend_mac, WEB_AND_ALT, 4096),
    );
    signal(&gw, "HUP");
    wait_until("the generation increases", &log, || {
        stats(&socket).is_some_and(|s| number(&s, "/snapshot/generation") == generation + 1)
    });
    let mut alt = None;
    wait_until("the new listener answers", &log, || {
        alt = curl(&t.client, "http://192.0.2.10:8081/");
        alt.is_some()
    });
    assert_eq!(alt.as_deref(), Some("backend one saw 10.1.0.1"));
    assert_eq!(
        curl(&t.client, "http://192.0.2.10/").as_deref(),
        Some("backend one saw 10.1.0.1")
    );

    // (d) SIGTERM: exit 0 within seconds, socket removed.
    let status = gw
        .terminate(Duration::from_secs(10))
        .expect("wait for portico")
        .unwrap_or_else(|| {
            panic!(
                "portico did not stop on SIGTERM; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
    assert!(status.success(), "exit status {status}");
    assert!(!socket.exists(), "admin socket removed at exit");
    assert!(logged(&log, "INFO", "message", "stopped"));
}
