//! `portico run`'s Prometheus endpoint and `portico services` against a
//! running gateway: the built binary on veth interfaces between network
//! namespaces, real HTTP (curl → nginx) through the VIP.
//!
//! Topology (as in `run.rs`):
//!
//! ```text
//!   client ns                 gateway ns (portico run, 2 workers)             backend ns
//!   192.0.2.100/24 ── veth ── [outside: 192.0.2.1, VIP 192.0.2.10]
//!                             [inside: SNAT 10.1.0.1]            ── veth ── 10.1.0.10/24 nginx :8080
//! ```
//!
//! The metrics listener runs in the gateway's namespace on its default
//! address (127.0.0.1:9464), so it is scraped from inside that namespace.

mod common;

use common::{BIN, curl, mac_of, portico, stats, topology, wait_until};
use portico_tests::{TempDir, have, nginx, require_root};
use serde_json::Value;

#[test]
fn services_without_a_gateway_fails_with_one_line() {
    let dir = TempDir::new("psvc").expect("temp dir");
    let socket = dir.path.join("none.sock");
    let out = portico(&[
        "services",
        "--admin-socket",
        socket.to_str().expect("utf-8 path"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not running"), "{stderr}");
}

/// The value of the sample `series` (name with its labels, exactly as
/// exposed) in a metrics text.
fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

#[test]
fn metrics_and_services_show_the_traffic_sent() {
    if !require_root("metrics::metrics_and_services_show_the_traffic_sent") {
        return;
    }
    assert!(
        have("nginx") && have("curl"),
        "nginx and curl are installed by tests/run.sh"
    );
    let t = topology("m");
    let (client, gateway, backend) = (&t.client, &t.gateway, &t.backend);
    let (outside, inside, backend_if) = (&t.outside, &t.inside, &t.backend_if);
    let backend_mac = mac_of(backend, backend_if);
    let (nginx_proc, _nginx_dir) = nginx(backend, "one", "10.1.0.10:8080").expect("nginx");
    let _nginx = nginx_proc; // stopped with SIGTERM by its guard

    let dir = TempDir::new("pmet").expect("temp dir");
    let config_path = dir.path.join("portico.toml");
    let socket = dir.path.join("portico.sock");
    let log = dir.path.join("portico.log");
    std::fs::write(
        &config_path,
        format!(
            r#"
[dataplane]
workers = 2
idle = "adaptive"

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

[[service]]
name = "web"
protocol = "tcp"
vip = "192.0.2.10"
port = 80
backends = [{{ address = "10.1.0.10", port = 8080, weight = 3 }}]
"#
        ),
    )
    .expect("write config");
    // No --metrics-addr: the default, 127.0.0.1:9464.
    let command = format!(
        "exec {BIN} run --config {} --admin-socket {} --log-format json 2>{}",
        config_path.display(),
        socket.display(),
        log.display()
    );
    let _gw = gateway.spawn("sh", &["-c", &command]).expect("spawn");
    wait_until("the admin socket answers", &log, || {
        stats(&socket).is_some()
    });

    let metrics_url = "http://127.0.0.1:9464/metrics";
    let first = curl(gateway, metrics_url).expect("metrics answer in the gateway namespace");
    assert!(first.contains("# TYPE portico_drops counter"), "{first}");
    assert_eq!(
        sample(&first, "portico_snapshot_generation"),
        Some(1),
        "{first}"
    );

    for _ in 0..3 {
        let mut ok = false;
        wait_until("curl through the VIP succeeds", &log, || {
            ok = curl(client, "http://192.0.2.10/").is_some();
            ok
        });
    }

    // Workers publish their counters a few times a second: wait until the
    // admin report and a scrape agree, and both saw the traffic.
    let web = r#"{service="web",protocol="tcp"}"#;
    let mut last = (None, None, String::new());
    wait_until("/metrics agrees with portico stats", &log, || {
        let Some(report) = stats(&socket) else {
            return false;
        };
        let Some(text) = curl(gateway, metrics_url) else {
            return false;
        };
        let want = report["services"][0]["packets"].as_u64();
        let got = sample(&text, &format!("portico_service_packets_total{web}"));
        let rx = sample(
            &text,
            &format!(r#"portico_port_rx_packets_total{{port="outside",interface="{outside}"}}"#),
        );
        let agree = report["services"][0]["name"] == "web"
            && want.is_some_and(|w| w >= 3 * 5)
            && got == want
            && rx.is_some_and(|r| r > 0);
        last = (want, got, text);
        agree
    });
    let (_, _, text) = last;
    let backend_series =
        r#"portico_backend_packets_total{service="web",protocol="tcp",backend="10.1.0.10:8080"}"#;
    assert!(
        sample(&text, backend_series).is_some_and(|p| p > 0),
        "{text}"
    );
    assert!(
        sample(&text, "portico_flows_created_total").is_some_and(|n| n >= 3),
        "{text}"
    );
    assert!(
        text.contains(r#"portico_drops_total{reason="no_flow"} "#),
        "{text}"
    );
    // The shared neighbour tables: the static backend, and the client
    // resolved by ARP. Two tables (IPv4 and IPv6) of the default 16,384
    // each.
    assert_eq!(
        sample(&text, "portico_neighbour_capacity"),
        Some(2 * 16_384),
        "{text}"
    );
    assert!(
        sample(&text, "portico_neighbour_entries").is_some_and(|n| n >= 1),
        "{text}"
    );
    assert_eq!(
        sample(&text, "portico_neighbour_refusals_total"),
        Some(0),
        "{text}"
    );
    let report = stats(&socket).expect("stats");
    assert_eq!(report["neighbours"]["statics"], 1, "{report}");
    assert!(
        text.ends_with("\n# EOF"),
        "the exposition ends with # EOF: {text}"
    );

    // `portico services`: the service, its VIP listener, its backend with
    // weight and condition.
    let out = portico(&[
        "services",
        "--admin-socket",
        socket.to_str().expect("utf-8 path"),
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("TCP") && l.contains("web")),
        "{table}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("192.0.2.10:80") && l.contains("(vip)")),
        "{table}"
    );
    assert!(
        lines.iter().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.first() == Some(&"->")
                && w.get(1) == Some(&"10.1.0.10:8080")
                && w.get(2) == Some(&"3")
                && w.get(3) == Some(&"ready")
                && w.get(4)
                    .and_then(|p| p.parse::<u64>().ok())
                    .is_some_and(|p| p > 0)
        }),
        "{table}"
    );
    let out = portico(&[
        "services",
        "--json",
        "--admin-socket",
        socket.to_str().expect("utf-8 path"),
    ]);
    let services: Value = serde_json::from_slice(&out.stdout).expect("services --json");
    assert_eq!(services[0]["name"], "web");
    assert_eq!(services[0]["listeners"][0]["address"], "192.0.2.10:80");
    assert_eq!(services[0]["listeners"][0]["kind"], "vip");
    assert_eq!(services[0]["backends"][0]["weight"], 3);
    assert_eq!(services[0]["backends"][0]["condition"], "ready");
}
