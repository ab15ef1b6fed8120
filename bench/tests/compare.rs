//! Smoke test of `compare --quick` (1 run, 1 s loads, 1 and 100 services):
//! every datapath produced a non-zero figure for every load and an update
//! timing, nothing failed, and afterwards no namespace or process of the
//! comparison is left. Not a timed assertion: the figures only have to
//! exist. Needs root, `ip netns`, nginx, wrk, iperf3, iptables and nft
//! (tests/run.sh installs them); otherwise it prints a loud SKIPPED line.

use portico_netns::{TempDir, have, require_root, skip};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const COMPARE: &str = env!("CARGO_BIN_EXE_compare");
const PKTGEN: &str = env!("CARGO_BIN_EXE_pktgen");
const PORTICO: &str = env!("CARGO_BIN_EXE_bench-portico");

/// Whether `text` mentions a name made by `unique_name` in process `pid`
/// (`<letters><pid % 100000>x<n>`).
fn mentions_names_of(text: &str, pid: u32) -> bool {
    let marker = format!("{}x", pid % 100_000);
    text.match_indices(&marker).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + marker.len()..].chars().next();
        before.is_some_and(|c| c.is_ascii_alphabetic()) && after.is_some_and(|c| c.is_ascii_digit())
    })
}

/// Processes whose command line names something of process `pid`, or that
/// run this package's `bench-portico` (only this test starts it: the
/// gateway and the topology's helper servers).
fn leftover_processes(pid: u32) -> Vec<String> {
    let ours = std::fs::canonicalize(PORTICO).ok();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let exe = std::fs::read_link(entry.path().join("exe")).ok();
        if mentions_names_of(&text, pid) || (exe.is_some() && exe == ours) {
            found.push(text);
        }
    }
    found
}

/// Held while a test runs `compare`: the comparisons of this file take
/// turns (the leftover check counts every `bench-portico` process, so two
/// at once would see each other's), also across the processes nextest runs
/// them in. A lock file holding the owner's PID, removed on drop; a lock
/// whose owner is gone is taken over.
struct Turn(std::path::PathBuf);

impl Drop for Turn {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn one_comparison_at_a_time() -> Turn {
    let path = std::env::temp_dir().join("portico-bench-compare-tests.lock");
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path);
        match created {
            Ok(mut f) => {
                std::io::Write::write_all(&mut f, std::process::id().to_string().as_bytes())
                    .expect("write lock file");
                return Turn(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let owner = std::fs::read_to_string(&path).unwrap_or_default();
                let alive = !owner.trim().is_empty()
                    && std::path::Path::new(&format!("/proc/{}", owner.trim())).exists();
                if !alive {
                    let _ = std::fs::remove_file(&path);
                    continue;
                }
                assert!(
                    Instant::now() < deadline,
                    "another comparison (PID {owner}) held the turn for 30 min"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
}

/// Run `compare` with `args` (stdout captured, stderr shown), killed after
/// `limit`: (its PID, exit status, stdout).
fn run_compare(
    args: &[&std::ffi::OsStr],
    limit: Duration,
) -> (u32, std::process::ExitStatus, String) {
    let mut child = Command::new(COMPARE)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start compare");
    let pid = child.id();
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait compare") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("compare {args:?} still running after {limit:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut table = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut out, &mut table);
    }
    eprintln!("{table}");
    (pid, status, table)
}

/// Nothing of compare run `pid` is left: no namespace, no process.
fn assert_nothing_left(pid: u32) {
    let netns = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let netns = String::from_utf8_lossy(&netns.stdout);
    assert!(!mentions_names_of(&netns, pid), "namespaces left:\n{netns}");
    let left = leftover_processes(pid);
    assert!(left.is_empty(), "processes left: {left:#?}");
}

#[test]
fn marker_matches_only_unique_names_of_that_process() {
    assert!(mentions_names_of("ip netns exec pc4242x3 wrk", 4242));
    assert!(mentions_names_of(
        "/tmp/portico-demo4242x17/portico.toml",
        4242
    ));
    assert!(!mentions_names_of("ip netns exec pc14242x3 wrk", 4242));
    assert!(!mentions_names_of("4242x3", 4242));
    assert!(!mentions_names_of("pc4242xy", 4242));
}

#[test]
fn quick_comparison_measures_every_datapath_and_cleans_up() {
    if !require_root("quick_comparison_measures_every_datapath_and_cleans_up") {
        return;
    }
    let missing: Vec<&str> = ["nginx", "wrk", "iperf3", "nft", "iptables-restore"]
        .into_iter()
        .filter(|p| !have(p))
        .collect();
    if !missing.is_empty() {
        skip(
            "quick_comparison_measures_every_datapath_and_cleans_up",
            &format!(
                "{} missing (tests/run.sh installs them)",
                missing.join(", ")
            ),
        );
        return;
    }
    let _turn = one_comparison_at_a_time();
    let dir = TempDir::new("cmpq").expect("temp dir");
    let json_path = dir.path.join("samples.json");
    let plots = dir.path.join("plots");
    let (pid, status, table) = run_compare(
        &[
            "--quick".as_ref(),
            "--portico".as_ref(),
            PORTICO.as_ref(),
            "--pktgen".as_ref(),
            PKTGEN.as_ref(),
            "--json".as_ref(),
            json_path.as_os_str(),
            "--plots".as_ref(),
            plots.as_os_str(),
        ],
        // Bounded: the quick run takes about a minute on an idle 2-core machine.
        Duration::from_secs(900),
    );
    assert!(status.success(), "compare --quick failed: {status}");

    let report: Value =
        serde_json::from_slice(&std::fs::read(&json_path).expect("samples JSON")).expect("JSON");
    assert_eq!(
        report["failures"],
        json!([]),
        "failures: {}",
        report["failures"]
    );
    assert_eq!(report["skipped_loads"], json!([]));
    let samples = report["samples"].as_array().expect("samples");
    let updates = report["updates"].as_array().expect("updates");
    let datapaths = [
        json!({"Portico": "AfPacket"}),
        json!("Iptables"),
        json!("Nftables"),
    ];
    let loads = [
        "Udp",
        "NewConnections",
        "KeepAlive",
        "Rtt",
        "Churn",
        "Iperf",
    ];
    for datapath in &datapaths {
        for services in [1, 100] {
            for load in loads {
                let s = samples
                    .iter()
                    .find(|s| {
                        s["datapath"] == *datapath && s["services"] == services && s["load"] == load
                    })
                    .unwrap_or_else(|| panic!("no {load} sample for {datapath} at {services}"));
                let value = s["value"].as_f64().unwrap_or(0.0);
                let units = s["units"].as_f64().unwrap_or(0.0);
                assert!(
                    value > 0.0 && units > 0.0,
                    "{load} {datapath} {services}: {s}"
                );
                // wrk loads carry their latency distribution, ordered.
                if ["NewConnections", "KeepAlive", "Rtt", "Churn"].contains(&load) {
                    let ms = |k: &str| s["latency"][k].as_f64().unwrap_or(-1.0);
                    assert!(
                        0.0 < ms("p50_ms")
                            && ms("p50_ms") <= ms("p90_ms")
                            && ms("p90_ms") <= ms("p99_ms"),
                        "{load} {datapath} {services}: {s}"
                    );
                }
                // The gateway's own CPU is known exactly for Portico.
                if datapath.get("Portico").is_some() {
                    assert!(s["cpu"]["gateway_s"].as_f64().is_some(), "{s}");
                }
            }
            let u = updates
                .iter()
                .find(|u| u["datapath"] == *datapath && u["services"] == services)
                .unwrap_or_else(|| panic!("no update timing for {datapath} at {services}"));
            assert!(u["millis"].as_f64().unwrap_or(0.0) > 0.0, "{u}");
        }
    }
    assert!(table.contains("× iptables"), "{table}");
    assert!(
        table.contains("| p50 ms | p50 − nftables ms | p99 ms | mean ms |"),
        "{table}"
    );
    for plot in ["throughput-udp.svg", "cpu-conn.svg", "update.svg"] {
        let svg = std::fs::read_to_string(plots.join(plot)).expect(plot);
        assert!(
            svg.starts_with("<svg") && svg.contains("portico (af_packet)"),
            "{plot}"
        );
    }

    // Nothing of the comparison is left: no namespace, no process.
    assert_nothing_left(pid);
}

/// Smoke run of `compare --syn-flood` (one run, 1 s loads, the syn-proxy
/// defence only, a bounded 2,000 SYN/s flood): the real connections went
/// through with and without the flood, the gateway answered the spoofed
/// SYNs with cookies and kept no flow for them, its RSS was read, and
/// nothing of the run is left. Behaviour only, no speed.
#[test]
fn syn_flood_smoke_run_proxies_and_cleans_up() {
    let name = "syn_flood_smoke_run_proxies_and_cleans_up";
    if !require_root(name) {
        return;
    }
    let missing: Vec<&str> = ["nginx", "wrk", "nft", "conntrack"]
        .into_iter()
        .filter(|p| !have(p))
        .collect();
    if !missing.is_empty() {
        skip(
            name,
            &format!(
                "{} missing (tests/run.sh installs them)",
                missing.join(", ")
            ),
        );
        return;
    }
    let _turn = one_comparison_at_a_time();
    let dir = TempDir::new("cmpf").expect("temp dir");
    let json_path = dir.path.join("flood.json");
    let mut args: Vec<&std::ffi::OsStr> = [
        "--syn-flood",
        "--runs",
        "1",
        "--duration-s",
        "1",
        "--settle-s",
        "0",
        "--flood-rate",
        "2000",
        "--defences",
        "portico-on",
        "--portico",
        PORTICO,
        "--pktgen",
        PKTGEN,
        "--json",
    ]
    .iter()
    .map(|a| a.as_ref())
    .collect();
    args.push(json_path.as_os_str());
    let (pid, status, table) = run_compare(&args, Duration::from_secs(300));
    assert!(status.success(), "compare --syn-flood failed: {status}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(&json_path).expect("flood JSON")).expect("JSON");
    assert_eq!(report["failures"], json!([]), "{}", report["failures"]);
    let samples = report["samples"].as_array().expect("samples");
    assert_eq!(samples.len(), 1, "{report}");
    let s = &samples[0];
    let n = |p: &str| s.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    assert_eq!(s["defence"], json!("PorticoOn"));
    assert!(n("/quiet/requests") > 0, "{s}");
    assert!(n("/flooded/requests") > 0, "{s}");
    let sent = n("/flood_sent");
    assert!(sent > 1000, "{s}");
    // Most spoofed SYNs were answered with a cookie (some frames may be
    // lost in the rings of a loaded machine), and none left a flow: the
    // flows held are the real connections' (in TIME_WAIT: one per real
    // connection, plus the readiness probe).
    assert!(n("/syn_cookies_sent") * 2 >= sent, "{s}");
    let real = n("/quiet/requests") + n("/flooded/requests");
    assert!(n("/during/flows") <= real + 100, "{s}");
    assert!(n("/before/rss_kb") > 0 && n("/after/rss_kb") > 0, "{s}");
    assert!(table.contains("syn_proxy on"), "{table}");
    assert_nothing_left(pid);
}
