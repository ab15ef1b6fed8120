//! `portico run` announcing its VIP to a real BIRD 2 (issue 13 §2): the
//! demo topology with BIRD in the client namespace (the client's router),
//! peering with the gateway over the outside port.
//!
//! The BGP connection is the gateway namespace's kernel's, over the
//! outside port's host path (see `common/router.rs`).
//!
//! Every check of what is announced goes through `birdc show route all`;
//! `portico bgp` and `/metrics` are checked along the way.
//!
//! Needs root, `ip`, `bird` and `birdc` (Debian `bird2`), `curl`.

mod common;

use common::router::{self, bird_has};
use common::{PORTICO, curl, gateway_with, tally};
use portico::admin::{self, Request};
use portico::demo::topology::{CLIENT_ADDR, GatewayRun, ServiceOptions, Topology, VIP};
use portico_tests::wait_until;
use std::time::{Duration, Instant};

const LOCAL_PREF: u32 = 250;
const DRAIN_S: u64 = 8;
const WATCHDOG_MS: u64 = 500;
const ROUTE: &str = "192.0.2.10/32";

/// The topology's configuration with the web service announced to BIRD.
fn config(t: &Topology, options: &ServiceOptions) -> String {
    let base = t.config_toml(options);
    let base = base.replacen(
        "name = \"web\"\n",
        "name = \"web\"\nbgp_advertisements = [\"vips\"]\n",
        1,
    );
    assert!(base.contains("bgp_advertisements"), "{base}");
    format!(
        "{}{}",
        router::with_host_address(&base),
        router::bgp_section(
            &format!("shutdown_drain_s = {DRAIN_S}\nwatchdog_timeout_ms = {WATCHDOG_MS}"),
            "vips",
            &format!("local_pref = {LOCAL_PREF}\ncommunities = [\"65000:100\"]"),
        )
    )
}

fn bgp_report(gw: &GatewayRun) -> admin::BgpReport {
    gw.stats().expect("the admin socket answers").bgp
}

fn metrics(t: &Topology) -> String {
    let out = t
        .gateway
        .exec_unchecked(
            "curl",
            &["-sS", "--max-time", "5", "http://127.0.0.1:9464/metrics"],
        )
        .expect("curl /metrics");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn announces_served_vips_withdraws_on_no_backend_watchdog_and_sigterm() {
    const TEST: &str = "bgp::announces_served_vips_withdraws_on_no_backend_watchdog_and_sigterm";
    if !portico_tests::require_programs(
        TEST,
        &["bird", "birdc", "curl"],
        "apt-get install bird2 curl",
    ) {
        return;
    }
    let Some(t) = common::topology(TEST, 2) else {
        return;
    };
    let bird = router::bird_router(&t);
    let all = ServiceOptions::all(&t);
    let mut gw = gateway_with(&t, &config(&t, &all), &["PORTICO_TEST_HOOKS=1"]);
    let log_path = gw.log.clone();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    // Announced with the configured attributes.
    let routes = bird_has(&bird, &log, &[ROUTE]);
    let a = &routes[0].attrs;
    assert_eq!(
        a.get("BGP.next_hop").map(String::as_str),
        Some(router::HOST_ADDR),
        "NEXT_HOP is the host address: {routes:?}"
    );
    assert_eq!(
        a.get("BGP.local_pref").map(String::as_str),
        Some(LOCAL_PREF.to_string().as_str()),
        "{routes:?}"
    );
    assert_eq!(
        a.get("BGP.community").map(String::as_str),
        Some("(65000,100)"),
        "{routes:?}"
    );
    assert_eq!(
        a.get("BGP.origin").map(String::as_str),
        Some("IGP"),
        "{routes:?}"
    );

    // `portico bgp` and the metrics.
    let out = std::process::Command::new(PORTICO)
        .args(["bgp", "--admin-socket", gw.socket.to_str().expect("utf-8")])
        .output()
        .expect("portico bgp");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with(&format!("{CLIENT_ADDR}:179")))
        .unwrap_or_else(|| panic!("no session line in {text}"))
        .split_whitespace()
        .collect();
    assert_eq!(row[1..4], ["65000", "65000", "Established"], "{text}");
    assert_eq!(row[5], "1/1", "one prefix sent of one desired: {text}");
    assert!(
        text.contains("VIPs with a serving backend: 192.0.2.10"),
        "{text}"
    );
    assert!(text.contains("announcing"), "{text}");
    let m = metrics(&t);
    let peer = format!("peer=\"{CLIENT_ADDR}:179\"");
    for line in [
        format!("portico_bgp_session_state{{{peer}}} 6"),
        format!("portico_bgp_prefixes_announced{{{peer}}} 1"),
        format!("portico_bgp_session_flaps_total{{{peer}}} 0"),
    ] {
        assert!(m.lines().any(|l| l == line), "{line} in\n{m}");
    }
    assert!(
        m.lines().any(
            |l| l.starts_with(&format!("portico_bgp_updates_sent_total{{{peer}}} "))
                && !l.ends_with(" 0")
        ),
        "{m}"
    );

    // The last backend goes (reload): withdrawn; it comes back: announced.
    let none = ServiceOptions {
        backends: Vec::new(),
        ..all.clone()
    };
    gw.reload(&config(&t, &none)).expect("reload");
    bird_has(&bird, &log, &[]);
    assert!(bgp_report(&gw).vips.is_empty());
    gw.reload(&config(&t, &all)).expect("reload");
    bird_has(&bird, &log, &[ROUTE]);
    assert_eq!(
        bgp_report(&gw).peers[0].flaps,
        0,
        "reloads keep the session"
    );

    // The watchdog: a worker stops polling for 3 s (test hook) → withdrawn
    // while it does not poll, announced again after. The worker stalled is
    // one that does not carry the session's frames from the kernel (the
    // TAP queue the kernel picked for it): a stalled worker holds what is
    // queued to it, the withdrawal too (the router's hold timer is the
    // backstop for a session stuck there).
    let quiet = gw
        .stats()
        .expect("stats")
        .workers
        .iter()
        .min_by_key(|w| w.counters.from_host)
        .map(|w| w.worker)
        .expect("a worker");
    let stall: serde_json::Value = admin::ask(
        &gw.socket,
        &Request::StallWorker {
            worker: quiet,
            ms: 3_000,
        },
    )
    .expect("the stall hook answers")
    .1;
    assert_eq!(stall["stalling_ms"], 3_000, "{stall}");
    let stalled_at = Instant::now();
    bird_has(&bird, &log, &[]);
    eprintln!(
        "worker stall to withdrawn at BIRD: {:?} (watchdog {WATCHDOG_MS} ms)",
        stalled_at.elapsed()
    );
    // Withdrawn while the worker stalls (not for another reason).
    let r = bgp_report(&gw);
    assert_eq!(r.withdrawn.as_deref(), Some("watchdog"), "{r:?}");
    assert!(r.watchdog_trips >= 1, "{r:?}");
    assert!(
        metrics(&t)
            .lines()
            .any(|l| l == "portico_bgp_withdrawn{reason=\"watchdog\"} 1"),
        "watchdog gauge"
    );
    bird_has(&bird, &log, &[ROUTE]);
    assert!(
        stalled_at.elapsed() >= Duration::from_secs(3),
        "re-announced only after the stall"
    );
    assert_eq!(bgp_report(&gw).withdrawn, None);
    assert!(
        log().contains("worker watchdog: a worker stopped polling"),
        "{}",
        log()
    );

    // SIGTERM: withdrawn at the router first, forwarding during the drain,
    // exit after it.
    let pid = gw.pid().expect("running");
    let term_at = Instant::now();
    gw.signal("TERM").expect("SIGTERM");
    bird_has(&bird, &log, &[]);
    eprintln!("SIGTERM to withdrawn at BIRD: {:?}", term_at.elapsed());
    let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
    assert!(alive, "the gateway still runs after the withdrawal");
    // New connections through the VIP are still served during the drain.
    let (per_backend, _, failed) = tally(&curl(&t, &format!("http://{VIP}/"), 5, true));
    assert_eq!(failed, 0, "served while draining: {per_backend:?}");
    // Still draining after the requests (the admin socket answers until
    // the drain ends).
    assert_eq!(bgp_report(&gw).withdrawn.as_deref(), Some("stopping"));
    // No second signal: that one would exit at once.
    let exit = gw
        .wait_exit(Duration::from_secs(DRAIN_S + 20))
        .expect("wait for the exit");
    let stopped_after = term_at.elapsed();
    assert!(exit.is_some_and(|s| s.success()), "clean exit: {exit:?}");
    assert!(
        stopped_after >= Duration::from_secs(DRAIN_S),
        "exited only after the drain: {stopped_after:?}"
    );
    let text = log();
    let withdrawn_line = text.find("BGP routes withdrawn from every established peer");
    let stopped_line = text.find("\"stopped\"");
    assert!(
        withdrawn_line.is_some() && withdrawn_line < stopped_line,
        "withdrawal logged before the stop:\n{text}"
    );
    // The Cease closed the session at the router.
    assert!(
        wait_until(Duration::from_secs(10), || bird.bgp_state(router::PROTOCOL)
            != "Established"),
        "{}",
        bird.birdc(&format!("show protocols all {}", router::PROTOCOL))
    );
}
