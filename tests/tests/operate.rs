//! Operating a running gateway (issue 7): `portico stats`, /metrics,
//! `portico flows` and `portico simulate --live` against `portico run` in
//! the namespace topology (client, gateway, three nginx backends that answer
//! `backend bN saw ADDR`), checked against the traffic actually sent and
//! where it actually landed.

mod common;

use common::{
    PORTICO, established_from, gateway, number, portico, sample, scrape, stats, stats_until,
    topology,
};
use portico::demo::topology::{
    BACKEND_HTTP_PORT, CLIENT_ADDR, HTTP_PORT, ServiceOptions, VIP, backend_addr,
};
use portico_tests::{TempDir, wait_until};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn socket_arg(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// `backend bN saw …` → the backend's `address:port`.
fn backend_of_body(body: &str) -> String {
    let (name, _) = portico::demo::live::parse_body(body)
        .unwrap_or_else(|| panic!("not a backend's answer: {body:?}"));
    let i: usize = name
        .strip_prefix('b')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("backend name {name:?}"));
    format!("{}:{BACKEND_HTTP_PORT}", backend_addr(i))
}

/// Per-backend `flows_created` of the web service in a stats report.
fn web_backend_flows(report: &Value) -> BTreeMap<String, u64> {
    report["services"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["name"] == "web")
        .flat_map(|s| s["backends"].as_array().into_iter().flatten())
        .map(|b| {
            (
                b["address"].as_str().unwrap_or_default().to_owned(),
                b["flows_created"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn web(report: &Value) -> &Value {
    report["services"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "web"))
        .unwrap_or_else(|| panic!("no web service in {report}"))
}

#[test]
fn stats_and_metrics_count_exactly_the_connections_sent() {
    let Some(t) = topology(
        "operate::stats_and_metrics_count_exactly_the_connections_sent",
        3,
    ) else {
        return;
    };
    let gw = gateway(&t, &ServiceOptions::all(&t));
    // The start-up probe made a connection: wait until it is counted, then
    // count from there.
    let before = stats_until(&gw, |s| number(web(s), "/flows_created") >= 1);
    let before_backends = web_backend_flows(&before);

    const N: usize = 30;
    let url = format!("http://{VIP}/");
    let bodies = common::curl(&t, &url, N, true);
    let mut landed: BTreeMap<String, u64> = BTreeMap::new();
    for b in &bodies {
        let b = b.as_deref().expect("every request answered");
        *landed.entry(backend_of_body(b)).or_default() += 1;
    }
    assert!(
        landed.len() >= 2,
        "30 connections over 3 backends: {landed:?}"
    );

    let after = stats_until(&gw, |s| {
        number(web(s), "/flows_created") >= number(web(&before), "/flows_created") + N as u64
    });
    let w = web(&after);
    assert_eq!(
        number(w, "/flows_created") - number(web(&before), "/flows_created"),
        N as u64,
        "one new flow per connection"
    );
    // Per backend: exactly the connections each backend answered.
    let after_backends = web_backend_flows(&after);
    for (addr, n) in &after_backends {
        let delta = n - before_backends.get(addr).copied().unwrap_or(0);
        assert_eq!(
            delta,
            landed.get(addr).copied().unwrap_or(0),
            "{addr}: flows counted vs requests answered ({landed:?})"
        );
    }
    // Every connection is at least a handshake, a request, a response and
    // a close in both directions.
    let packets = number(w, "/packets") - number(web(&before), "/packets");
    assert!(
        packets >= 6 * N as u64,
        "{packets} packets for {N} connections"
    );
    let backend_packets: u64 = w["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .map(|b| b["packets"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(backend_packets, number(w, "/packets"), "backends sum up");
    // Conntrack by state sums to the live flows.
    let by_state: u64 = after["total"]["flows_by_state"]
        .as_object()
        .expect("flows_by_state")
        .values()
        .map(|v| v.as_u64().unwrap_or(0))
        .sum();
    assert_eq!(by_state, number(&after, "/total/live_flows"));

    // /metrics says the same, once both have seen the same publication.
    let series = r#"portico_service_flows_created_total{service="web",protocol="tcp"}"#;
    let mut last = String::new();
    let agree = wait_until(Duration::from_secs(10), || {
        let report = stats(&gw);
        let Some(text) = scrape(&t) else {
            return false;
        };
        let same = sample(&text, series) == web(&report)["flows_created"].as_u64()
            && sample(&text, "portico_conntrack_inserts_total")
                == report["total"]["flows_created"].as_u64();
        last = text;
        same
    });
    assert!(agree, "/metrics never agreed with portico stats:\n{last}");
    for (addr, n) in &after_backends {
        let series = format!(
            r#"portico_backend_flows_created_total{{service="web",protocol="tcp",backend="{addr}"}}"#
        );
        assert!(
            sample(&last, &series).is_some_and(|m| m >= *n),
            "{series} in\n{last}"
        );
    }
    assert!(
        last.contains("# TYPE portico_snapshot_build_seconds histogram"),
        "{last}"
    );
    assert_eq!(
        sample(&last, "portico_snapshot_build_seconds_count"),
        Some(1),
        "one build at start"
    );
    assert!(
        sample(
            &last,
            r#"portico_snat_ports_in_use{snat_ip="10.1.0.1",family="ipv4"}"#
        )
        .is_some(),
        "{last}"
    );
    assert!(
        last.contains(r#"portico_conntrack_flows{protocol="tcp",state="time_wait"} "#),
        "{last}"
    );

    // The text view shows rates over its interval.
    let out = portico(&[
        "stats",
        "--admin-socket",
        socket_arg(&gw.socket),
        "--rate-interval-ms",
        "300",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("rates over the last"), "{text}");
    assert!(text.contains("by state:"), "{text}");
}

#[test]
fn flows_lists_open_connections_with_the_backends_that_serve_them() {
    let Some(t) = topology(
        "operate::flows_lists_open_connections_with_the_backends_that_serve_them",
        3,
    ) else {
        return;
    };
    let gw = gateway(&t, &ServiceOptions::all(&t));
    const CONNECTIONS: usize = 6;
    let target = format!("{VIP}:{HTTP_PORT}");
    let holder = t
        .client
        .spawn(
            PORTICO,
            &[
                "tool",
                "http-keepalive",
                "--target",
                &target,
                "--connections",
                &CONNECTIONS.to_string(),
                "--duration-ms",
                "8000",
                "--interval-ms",
                "200",
            ],
        )
        .expect("keep-alive client");

    let socket = socket_arg(&gw.socket);
    let mut listing = Value::Null;
    let established = |v: &Value| established_from(v, CLIENT_ADDR.into());
    let seen = wait_until(Duration::from_secs(10), || {
        let out = portico(&[
            "flows",
            "--json",
            "--service",
            "web",
            "--admin-socket",
            socket,
        ]);
        if !out.status.success() {
            return false;
        }
        listing = serde_json::from_slice(&out.stdout).expect("flows --json");
        established(&listing).len() >= CONNECTIONS
    });
    assert!(seen, "never saw {CONNECTIONS} established flows: {listing}");
    let flows = established(&listing);
    assert_eq!(flows.len(), CONNECTIONS, "{listing}");
    for f in &flows {
        assert_eq!(f["service"], "web");
        assert_eq!(f["orig_dst"], target.as_str());
        assert_eq!(
            f["reply_dst"].as_str().map(|s| s.starts_with("10.1.0.1:")),
            Some(true)
        );
        assert_eq!(f["replied"], true);
        assert_eq!(f["snat"], true);
        assert!(f["expires_in_s"].as_u64().is_some_and(|s| s > 3600), "{f}");
    }
    // Services count them as active.
    let report = stats_until(&gw, |s| {
        number(web(s), "/flows_active") >= CONNECTIONS as u64
    });
    assert!(number(web(&report), "/flows_active") >= CONNECTIONS as u64);

    // The text listing, like conntrack -L.
    let out = portico(&["flows", "--service", "web", "--admin-socket", socket]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("tcp")
            && l.contains("ESTABLISHED")
            && l.contains(&format!("src={CLIENT_ADDR}"))
            && l.contains("[ASSURED]")
            && l.contains("service=web")),
        "{text}"
    );
    // --limit bounds the listing.
    let out = portico(&["flows", "--json", "--limit", "2", "--admin-socket", socket]);
    let limited: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(limited["flows"].as_array().map(Vec::len), Some(2));
    assert_eq!(limited["truncated"], true);
    // --limit is capped: the CLI refuses a larger one, and so does the
    // gateway when a client asks over the socket directly.
    let out = portico(&["flows", "--limit", "100001", "--admin-socket", socket]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("outside 1..=100000"),
        "{out:?}"
    );
    let huge: Result<(String, portico::admin::FlowsReport), _> = portico::admin::ask(
        Path::new(socket),
        &portico::admin::Request::Flows(portico::admin::FlowsQuery {
            limit: 10_000_000,
            ..Default::default()
        }),
    );
    let answer = format!("{huge:?}");
    assert!(answer.contains("above the maximum of 100000"), "{answer}");
    // An unknown service is an error, not an empty list.
    let out = portico(&["flows", "--service", "nope", "--admin-socket", socket]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no service named"));

    // Each connection's flow names the backend that answered it.
    let output = holder
        .wait_output(Duration::from_secs(30))
        .expect("keep-alive client finishes");
    let reports: Vec<portico::tool::KeepaliveReport> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("keep-alive report"))
        .collect();
    assert_eq!(reports.len(), CONNECTIONS);
    let mut per_backend: BTreeMap<String, usize> = BTreeMap::new();
    for r in &reports {
        assert_eq!(r.errors, 0, "{r:?}");
        assert_eq!(r.answers.len(), 1, "one backend per connection: {r:?}");
        let body = r.answers.keys().next().expect("answers");
        let backend = backend_of_body(body);
        let flow = flows
            .iter()
            .find(|f| f["orig_src"] == format!("{CLIENT_ADDR}:{}", r.local_port).as_str())
            .unwrap_or_else(|| panic!("no flow for port {} in {listing}", r.local_port));
        assert_eq!(flow["backend"], backend.as_str(), "{flow}");
        assert_eq!(flow["reply_src"], backend.as_str(), "{flow}");
        *per_backend.entry(backend).or_default() += 1;
    }
    // The backend filter lists exactly that backend's connections.
    for (backend, n) in &per_backend {
        let out = portico(&[
            "flows",
            "--json",
            "--backend",
            backend,
            "--admin-socket",
            socket,
        ]);
        let listed: Value = serde_json::from_slice(&out.stdout).expect("json");
        let rows = listed["flows"].as_array().expect("flows");
        assert!(rows.iter().all(|f| f["backend"] == backend.as_str()));
        let held = rows
            .iter()
            .filter(|f| {
                reports
                    .iter()
                    .any(|r| f["orig_src"] == format!("{CLIENT_ADDR}:{}", r.local_port).as_str())
            })
            .count();
        assert_eq!(held, *n, "{backend}: {listed}");
    }
}

#[test]
fn simulate_live_agrees_with_where_connections_landed() {
    let Some(t) = topology(
        "operate::simulate_live_agrees_with_where_connections_landed",
        3,
    ) else {
        return;
    };
    let gw = gateway(&t, &ServiceOptions::all(&t));
    let socket = socket_arg(&gw.socket);
    let url = format!("http://{VIP}/");
    let mut backends_seen = BTreeMap::<String, usize>::new();
    let mut macs = BTreeMap::new();
    for i in 0..24u16 {
        let port = 42_000 + i * 7;
        let out = t
            .client_exec(
                "curl",
                &[
                    "-sS",
                    "--max-time",
                    "5",
                    "--local-port",
                    &port.to_string(),
                    "-H",
                    "Connection: close",
                    &url,
                ],
            )
            .expect("curl runs");
        let body = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(out.status.success(), "port {port}: {body}");
        let landed = backend_of_body(&body);
        *backends_seen.entry(landed.clone()).or_default() += 1;

        let spec = format!("tcp {CLIENT_ADDR}:{port} -> {VIP}:{HTTP_PORT}");
        let out = portico(&[
            "simulate",
            "--live",
            "--json",
            &spec,
            "--admin-socket",
            socket,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let sim: Value = serde_json::from_slice(&out.stdout).expect("simulate --json");
        assert_eq!(sim["verdict"], "forward", "{sim}");
        assert_eq!(sim["service"], "web", "{sim}");
        assert_eq!(sim["listener"]["kind"], "vip", "{sim}");
        assert_eq!(
            sim["backend"]["address"],
            landed.as_str(),
            "simulated vs served for {spec}: {sim}"
        );
        // The connection's own flow is still tracked (TIME_WAIT or
        // closing), with the backend that served it.
        assert_eq!(sim["existing"]["backend"], landed.as_str(), "{sim}");
        assert_eq!(
            sim["existing"]["orig_src"],
            format!("{CLIENT_ADDR}:{port}").as_str()
        );
        let slot = sim["maglev"]["slot"].as_u64().expect("slot");
        assert!(slot < sim["maglev"]["table_size"].as_u64().expect("size"));
        assert_eq!(sim["maglev"]["backend"], landed.as_str(), "{sim}");
        // The next hop (the backend itself, on-link) as the gateway's own
        // neighbour table has it: the MAC of the backend's interface.
        let backend = t
            .backends
            .iter()
            .find(|b| landed.starts_with(&format!("{}:", b.addr)))
            .unwrap_or_else(|| panic!("no backend {landed}"));
        let mac = macs
            .entry(backend.addr)
            .or_insert_with(|| {
                portico::demo::topology::Topology::mac_of(&backend.ns, &backend.ifname)
                    .expect("backend MAC")
            })
            .clone();
        assert_eq!(
            sim["next_hop_neighbour"]["address"],
            backend.addr.to_string().as_str(),
            "{sim}"
        );
        assert_eq!(sim["next_hop_neighbour"]["mac"], mac.as_str(), "{sim}");
    }
    assert!(
        backends_seen.len() >= 2,
        "24 tuples should reach more than one backend: {backends_seen:?}"
    );
    // A fresh tuple: no existing flow; a port nobody listens on: the drop
    // reason; the text form.
    let out = portico(&[
        "simulate",
        "--live",
        &format!("tcp {CLIENT_ADDR}:45999 -> {VIP}:81"),
        "--admin-socket",
        socket,
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("drop: no_listener"), "{text}");
    assert!(text.contains("existing   none"), "{text}");
    assert!(text.contains("generation 1 (live)"), "{text}");
    // The text form of a forward names the next hop's live MAC.
    let out = portico(&[
        "simulate",
        "--live",
        &format!("tcp {CLIENT_ADDR}:{} -> {VIP}:{HTTP_PORT}", 42_000),
        "--admin-socket",
        socket,
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        macs.iter()
            .any(|(addr, mac)| text.contains(&format!("next hop   {addr} is at {mac}"))),
        "{text}"
    );
}

#[test]
fn admin_commands_fail_with_one_line_when_the_gateway_is_missing_or_forbidden() {
    let dir = TempDir::new("pops").expect("temp dir");
    let missing = dir.path.join("none.sock");
    let missing = socket_arg(&missing);
    let spec = "tcp 192.0.2.100:40000 -> 192.0.2.10:80";
    let commands: [Vec<&str>; 4] = [
        vec!["stats", "--admin-socket", missing],
        vec!["services", "--admin-socket", missing],
        vec!["flows", "--admin-socket", missing],
        vec!["simulate", "--live", spec, "--admin-socket", missing],
    ];
    for args in &commands {
        let out = portico(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains("not running"), "{args:?}: {stderr}");
    }

    // A socket the caller may not use.
    let path = dir.path.join("admin.sock");
    let _server =
        portico::admin::AdminServer::start(&path, |_| Ok("{}".into())).expect("admin socket");
    let socket = socket_arg(&path);
    // /proc/self belongs to the effective user.
    let as_root =
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("/proc/self"))
            == 0;
    for args in [
        vec!["stats", "--admin-socket", socket],
        vec!["flows", "--admin-socket", socket],
        vec!["simulate", "--live", spec, "--admin-socket", socket],
    ] {
        let out = if as_root {
            // Root passes permission checks: ask as nobody (the socket is
            // the gateway's, mode 0660).
            let mut full = vec!["--reuid=65534", "--regid=65534", "--clear-groups", PORTICO];
            full.extend_from_slice(&args);
            Command::new("setpriv")
                .args(&full)
                .output()
                .expect("setpriv runs")
        } else {
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o000))
                .expect("chmod");
            portico(&args)
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains("permission denied"), "{args:?}: {stderr}");
    }
}

/// A connection that sent half a request and holds its admin slot until
/// the server's request deadline.
fn half_request(socket: &Path) -> std::os::unix::net::UnixStream {
    use std::io::Write;
    let mut s = std::os::unix::net::UnixStream::connect(socket).expect("admin socket connects");
    s.write_all(b"{\"request\":").expect("writes");
    s
}

#[test]
fn the_admin_socket_serves_clients_concurrently_and_says_when_it_is_busy() {
    use std::io::Read;
    let Some(t) = topology(
        "operate::the_admin_socket_serves_clients_concurrently_and_says_when_it_is_busy",
        3,
    ) else {
        return;
    };
    let gw = gateway(&t, &ServiceOptions::all(&t));
    let socket = socket_arg(&gw.socket);

    // Clients that connect and say nothing do not hold up the others, and
    // are answered with the stats themselves.
    const SILENT: usize = 2;
    let mut silent: Vec<_> = (0..SILENT)
        .map(|_| std::os::unix::net::UnixStream::connect(&gw.socket).expect("connects"))
        .collect();
    // Concurrent requests of every kind, as many as the free slots, all
    // get their own, correct answer.
    let no_listener = format!("tcp {CLIENT_ADDR}:45999 -> {VIP}:81");
    let rounds = (portico::admin::DEFAULT_MAX_CONNECTIONS - SILENT) / 3;
    assert!(rounds >= 1);
    let commands: Vec<Vec<&str>> = (0..rounds)
        .flat_map(|_| {
            [
                vec!["stats", "--json", "--admin-socket", socket],
                vec!["flows", "--json", "--admin-socket", socket],
                vec!["simulate", "--live", &no_listener, "--admin-socket", socket],
            ]
        })
        .collect();
    let outputs: Vec<(Vec<&str>, Output)> = std::thread::scope(|scope| {
        let runs: Vec<_> = commands
            .iter()
            .map(|args| scope.spawn(move || (args.clone(), portico(args))))
            .collect();
        runs.into_iter()
            .map(|r| r.join().expect("client thread"))
            .collect()
    });
    for (args, out) in &outputs {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{args:?}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        match args.first().copied() {
            Some("stats") => {
                let v: Value = serde_json::from_str(&stdout).expect("stats json");
                assert!(web(&v)["backends"].as_array().is_some_and(|b| b.len() == 3));
            }
            Some("flows") => {
                let v: Value = serde_json::from_str(&stdout).expect("flows json");
                assert_eq!(v["generation"], 1, "{v}");
            }
            _ => assert!(stdout.contains("drop: no_listener"), "{args:?}: {stdout}"),
        }
    }
    for s in &mut silent {
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut raw = String::new();
        s.read_to_string(&mut raw).expect("answered and closed");
        let v: Value = serde_json::from_str(&raw).expect("a silent client gets the stats");
        assert_eq!(v["pid"], stats(&gw)["pid"]);
    }

    // Every slot held by a half-sent request: the next client is told so in
    // one line, at once. The half requests give their slots up after the
    // server's request deadline (2 s); a machine too slow to run `portico
    // stats` within it gets another round.
    let mut busy_seen = None;
    for _ in 0..3 {
        let held: Vec<_> = (0..portico::admin::DEFAULT_MAX_CONNECTIONS)
            .map(|_| half_request(&gw.socket))
            .collect();
        let out = portico(&["stats", "--admin-socket", socket]);
        drop(held);
        if !out.status.success() {
            busy_seen = Some(out);
            break;
        }
    }
    let out = busy_seen.expect("the admin socket was never busy with every slot held");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("admin socket busy"), "{stderr}");
    // The slots come back: stats are answered again.
    let ok = wait_until(Duration::from_secs(10), || {
        portico(&["stats", "--json", "--admin-socket", socket])
            .status
            .success()
    });
    assert!(ok, "the admin socket never recovered from the held slots");
}
