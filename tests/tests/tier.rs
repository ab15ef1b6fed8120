//! A tier of three `portico run` instances (one of them on AF_XDP) behind a
//! real BIRD 2 router with ECMP (issue 13 §4, [`portico_tests::tier`]),
//! each peering from its own host address over its host path: every
//! instance announces the VIP, the router's FIB has one next hop per
//! instance, client flows spread over the instances and are all answered,
//! every instance picks the same backend for a flow (`portico simulate
//! --live` on each), and a SIGTERM of one
//! instance under a steady load fails no new connection (withdraw first,
//! forward during the drain, then exit); established connections broken
//! by the router's ECMP rehash are counted and bounded (see the test). A
//! SIGKILL of one instance of two: the router drops its path and the
//! survivor answers every new flow (the losses meanwhile are printed). The
//! same tier against GoBGP: one path per instance in its RIB with the
//! configured attributes, and a SIGTERM withdraws one (GoBGP programs no
//! FIB, so forwarding is checked with BIRD only).
//!
//! Needs root, `ip`, `bird`, `birdc` (Debian `bird2`), `gobgpd` and
//! `gobgp` (Debian `gobgpd`), and `nginx`.

use portico::demo::topology::DriverKind;
use portico_tests::tier::{
    TIER_ASN, TIER_CLIENT, TIER_VIP, Tier, TierConfig, TierRouter, next_hop,
};
use portico_tests::{require_programs, require_root, wait_until};
use std::time::{Duration, Instant};

const PORTICO: &str = env!("CARGO_BIN_EXE_portico-e2e");
const INSTANCES: usize = 3;
const DRAIN_S: u16 = 3;
/// New connections of the load around the SIGTERM (a few at a time; several
/// seconds' worth, so it runs before, during and after the drain).
const LOAD_REQUESTS: u32 = 8000;
const LOAD_CONCURRENCY: u32 = 4;

/// Flows created per instance (conntrack inserts).
fn flows_per_instance(tier: &Tier) -> Vec<u64> {
    tier.instances
        .iter()
        .map(|i| i.stats().map_or(0, |s| s.total.flows_created))
        .collect()
}

/// The backend `portico simulate --live` on instance `i` picks for a new
/// client flow from `port` to the VIP.
fn simulated_backend(tier: &Tier, i: usize, port: u16) -> String {
    let spec = format!("tcp {TIER_CLIENT}:{port} -> {TIER_VIP}:80");
    let out = std::process::Command::new(PORTICO)
        .args(["simulate", "--live", "--json", &spec, "--admin-socket"])
        .arg(&tier.instances[i].socket)
        .output()
        .expect("portico simulate runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sim: serde_json::Value = serde_json::from_slice(&out.stdout).expect("simulate --json");
    assert_eq!(sim["verdict"], "forward", "instance {i}: {sim}");
    sim["backend"]["address"]
        .as_str()
        .unwrap_or_else(|| panic!("instance {i}: no backend in {sim}"))
        .to_owned()
}

/// Every instance picks the same backend for each of a set of flows
/// (Maglev over the same backends), and the flows use more than one.
fn same_backend_on_every_instance(tier: &Tier) {
    let mut chosen = std::collections::BTreeSet::new();
    for port in (40_000..40_000 + 24).step_by(3) {
        let first = simulated_backend(tier, 0, port);
        for i in 1..tier.instances.len() {
            assert_eq!(
                simulated_backend(tier, i, port),
                first,
                "instance {i} and instance 0 for the flow from port {port}"
            );
        }
        chosen.insert(first);
    }
    assert!(
        chosen.len() > 1,
        "the flows spread over backends: {chosen:?}"
    );
}

/// `(ok, errors)` of `portico tool http-get` output; the errors' lines.
fn tally(stdout: &str) -> (usize, Vec<String>) {
    let mut ok = 0;
    let mut errors = Vec::new();
    for line in stdout.lines() {
        if line.starts_with("ok 200 ") {
            ok += 1;
        } else if !line.trim().is_empty() {
            errors.push(line.to_owned());
        }
    }
    (ok, errors)
}

#[test]
fn ecmp_over_three_instances_and_a_graceful_stop_fails_no_connection() {
    const TEST: &str = "tier::ecmp_over_three_instances_and_a_graceful_stop_fails_no_connection";
    // Instance 1 on AF_XDP: its host path (the BGP session) and its
    // forwarding through XDP sockets.
    if !require_root(TEST)
        || !require_programs(
            TEST,
            &["bird", "birdc", "nginx"],
            "apt-get install bird2 nginx",
        )
    {
        return;
    }
    let mut tier = Tier::build(&TierConfig {
        drivers: vec![
            DriverKind::Afpacket,
            DriverKind::Afxdp,
            DriverKind::Afpacket,
        ],
        router: TierRouter::Bird,
        backends: 3,
        portico: PORTICO.into(),
        shutdown_drain_s: DRAIN_S,
    })
    .expect("build the tier");

    // One file for the tier and no [kubernetes]: the VIP is announced by
    // BGP only, no instance answers ARP for it.
    for (i, inst) in tier.instances.iter().enumerate() {
        let stats = inst.stats().expect("stats");
        assert!(
            stats.announcements.announced.is_empty()
                && stats.announcements.silent.contains(&TIER_VIP),
            "instance {i}: {:?}",
            stats.announcements
        );
    }

    // One next hop per instance, in BIRD and in the router's FIB.
    let mut fib = String::new();
    let all = wait_until(Duration::from_secs(30), || {
        fib = tier.router_route();
        (0..INSTANCES).all(|i| fib.contains(&format!("nexthop via {} ", next_hop(i))))
    });
    let router = tier.bird.as_ref().expect("BIRD");
    assert!(
        all,
        "one next hop per instance: {fib:?}\n{}\n--- instance 1 ---\n{}",
        router.birdc(&format!("show route all {TIER_VIP}/32")),
        tier.instances[1].log_text()
    );
    let bird = router.birdc(&format!("show route all {TIER_VIP}/32"));
    assert_eq!(bird.matches("unicast [i").count(), INSTANCES, "{bird}");
    for i in 0..INSTANCES {
        assert!(
            bird.contains(&format!("BGP.next_hop: {}", next_hop(i))),
            "{bird}"
        );
    }
    assert!(
        bird.contains(&format!("BGP.as_path: {TIER_ASN}\n")),
        "{bird}"
    );
    assert!(bird.contains("BGP.origin: IGP"), "{bird}");
    assert!(bird.contains("BGP.community: (65001,100)"), "{bird}");
    eprintln!("router FIB: {fib}");

    // Many client flows: all answered, spread over every instance.
    let before = flows_per_instance(&tier);
    let out = tier
        .http_get(600, 8)
        .expect("start the client")
        .wait_output(Duration::from_secs(120))
        .expect("the client finishes");
    let (ok, errors) = tally(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        (ok, errors.len()),
        (600, 0),
        "every flow answered: {errors:?}"
    );
    let after = flows_per_instance(&tier);
    let spread: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    eprintln!("flows per instance: {spread:?}");
    assert!(
        spread.iter().all(|&n| n >= 600 / (INSTANCES as u64 * 4)),
        "the router spreads flows over every instance: {spread:?}"
    );
    same_backend_on_every_instance(&tier);

    // SIGTERM of instance 0 under a steady load: no connection fails.
    let load_started = Instant::now();
    let mut load = tier
        .http_get(LOAD_REQUESTS, LOAD_CONCURRENCY)
        .expect("start the load");
    std::thread::sleep(Duration::from_millis(1500));
    let term_at = Instant::now();
    tier.instances[0].signal("TERM").expect("SIGTERM");
    let gone = wait_until(Duration::from_secs(10), || {
        !tier
            .router_route()
            .contains(&format!("via {} ", next_hop(0)))
    });
    let withdrawn_after = term_at.elapsed();
    assert!(gone, "instance 0 leaves the FIB: {}", tier.router_route());
    assert!(
        tier.instances[0].is_running(),
        "instance 0 still forwards when the router has withdrawn it"
    );
    let exit = tier.instances[0]
        .wait_exit(Duration::from_secs(u64::from(DRAIN_S) + 20))
        .expect("wait for instance 0");
    let stopped_after = term_at.elapsed();
    assert!(exit.is_some_and(|s| s.success()), "clean exit: {exit:?}");
    assert!(
        !load.has_exited(),
        "the load outlasts the withdrawal, the drain and the exit ({:?} so far); raise LOAD_REQUESTS",
        load_started.elapsed()
    );
    let out = load
        .wait_output(Duration::from_secs(180))
        .expect("the load finishes");
    let (ok, errors) = tally(&String::from_utf8_lossy(&out.stdout));
    eprintln!(
        "graceful stop under load: {ok} answered, {} failed in {:?}; withdrawn from the FIB \
         after {withdrawn_after:?}, exited after {stopped_after:?}",
        errors.len(),
        load_started.elapsed()
    );
    assert!(
        stopped_after >= Duration::from_secs(u64::from(DRAIN_S)),
        "exited after the drain: {stopped_after:?}"
    );
    // No new connection fails: instance 0 left the router's FIB before it
    // stopped taking flows. A connection *in flight* at the FIB change may
    // break: Linux's IPv4 multipath is hash-threshold, so removing a next
    // hop moves instance 0's flows and a share of the others' (a sixth of
    // all with 3 → 2) to an instance without their conntrack entry or SNAT
    // address. At most the load's concurrency is in flight at that
    // instant. (Resilient next-hop groups on the router, or conntrack sync
    // between instances, would keep them; issue 13's notes.)
    let (connect, exchange): (Vec<&String>, Vec<&String>) =
        errors.iter().partition(|e| e.contains(" connect: "));
    eprintln!("established connections broken by the rehash: {exchange:?}");
    assert_eq!(connect, Vec::<&String>::new(), "no new connection failed");
    assert!(
        exchange.len() <= LOAD_CONCURRENCY as usize,
        "only connections in flight at the FIB change may break: {exchange:?}"
    );
    assert_eq!(ok + errors.len(), LOAD_REQUESTS as usize);
    // The survivors keep serving, as the only next hops.
    let fib = tier.router_route();
    assert!(
        (1..INSTANCES).all(|i| fib.contains(&format!("via {} ", next_hop(i)))),
        "{fib}"
    );
}

/// SIGKILL of one instance under a steady load: the router drops its path
/// (the instance's kernel closes the BGP connection, else the hold timer
/// expires), and afterwards every new connection is answered by the
/// survivors. The connections lost in between (those the router still sent
/// to the dead instance, and those in flight at the rehash) are counted
/// and printed, not asserted: without the drain they are expected.
#[test]
fn sigkill_of_one_instance_drops_its_path_and_the_survivors_serve_every_new_flow() {
    const TEST: &str =
        "tier::sigkill_of_one_instance_drops_its_path_and_the_survivors_serve_every_new_flow";
    if !require_root(TEST)
        || !require_programs(
            TEST,
            &["bird", "birdc", "nginx"],
            "apt-get install bird2 nginx",
        )
    {
        return;
    }
    let tier = Tier::build(&TierConfig {
        drivers: vec![DriverKind::Afpacket; 2],
        router: TierRouter::Bird,
        backends: 2,
        portico: PORTICO.into(),
        shutdown_drain_s: DRAIN_S,
    })
    .expect("build the tier");
    let both = wait_until(Duration::from_secs(30), || {
        let fib = tier.router_route();
        (0..2).all(|i| fib.contains(&format!("nexthop via {} ", next_hop(i))))
    });
    assert!(both, "two next hops: {}", tier.router_route());

    let load = tier
        .http_get(LOAD_REQUESTS, LOAD_CONCURRENCY)
        .expect("start the load");
    std::thread::sleep(Duration::from_millis(1500));
    let kill_at = Instant::now();
    tier.instances[0].signal("KILL").expect("SIGKILL");
    let gone = wait_until(Duration::from_secs(30), || {
        !tier
            .router_route()
            .contains(&format!("via {} ", next_hop(0)))
    });
    let dropped_after = kill_at.elapsed();
    assert!(gone, "instance 0 leaves the FIB: {}", tier.router_route());
    let out = load
        .wait_output(Duration::from_secs(180))
        .expect("the load finishes");
    let (ok, errors) = tally(&String::from_utf8_lossy(&out.stdout));
    eprintln!(
        "SIGKILL under load: {ok} answered, {} failed; path dropped by the router after \
         {dropped_after:?}; failures: {errors:?}",
        errors.len()
    );
    assert_eq!(ok + errors.len(), LOAD_REQUESTS as usize);
    // After the router converged, the survivor answers every new flow.
    let out = tier
        .http_get(200, 4)
        .expect("start the client")
        .wait_output(Duration::from_secs(120))
        .expect("the client finishes");
    let (ok, errors) = tally(&String::from_utf8_lossy(&out.stdout));
    assert_eq!((ok, errors.len()), (200, 0), "{errors:?}");
}

/// GoBGP's RIB path attribute `type_code` (RFC 4271 §5: 1 ORIGIN, 2
/// AS_PATH, 3 NEXT_HOP; RFC 1997: 8 COMMUNITIES).
fn attr(path: &serde_json::Value, type_code: u64) -> &serde_json::Value {
    path["attrs"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["type"].as_u64() == Some(type_code)))
        .unwrap_or_else(|| panic!("attribute {type_code} in {path}"))
}

/// The same tier against GoBGP: one path per instance for the VIP in its
/// RIB (`gobgp global rib -j`), NEXT_HOP each instance's host address,
/// ORIGIN, AS_PATH and COMMUNITIES as configured; every instance picks the
/// same backend for a flow; a SIGTERM withdraws that instance's path
/// first. GoBGP programs no FIB: the forwarding over ECMP is the BIRD
/// variant's.
#[test]
fn gobgp_has_one_path_per_instance_with_the_configured_attributes() {
    const TEST: &str = "tier::gobgp_has_one_path_per_instance_with_the_configured_attributes";
    if !require_root(TEST)
        || !require_programs(
            TEST,
            &["gobgpd", "gobgp", "nginx"],
            "apt-get install gobgpd nginx",
        )
    {
        return;
    }
    let mut tier = Tier::build(&TierConfig {
        drivers: vec![DriverKind::Afpacket, DriverKind::Afxdp],
        router: TierRouter::Gobgp,
        backends: 3,
        portico: PORTICO.into(),
        shutdown_drain_s: DRAIN_S,
    })
    .expect("build the tier");
    let gobgp = tier.gobgp.as_ref().expect("GoBGP");
    let route = format!("{TIER_VIP}/32");
    let paths = |want: usize| {
        let mut paths = Vec::new();
        let ok = wait_until(Duration::from_secs(30), || {
            let rib: serde_json::Value =
                serde_json::from_str(gobgp.rib_json().trim()).unwrap_or_default();
            paths = rib[&route].as_array().cloned().unwrap_or_default();
            paths.len() == want
        });
        assert!(
            ok,
            "{want} paths for {route}: {paths:?}\n{}\n--- instance 0 ---\n{}",
            gobgp.cli(&["neighbor"]),
            tier.instances[0].log_text()
        );
        paths
    };
    let got = paths(2);
    let mut next_hops: Vec<&str> = got
        .iter()
        .map(|p| attr(p, 3)["nexthop"].as_str().unwrap_or_default())
        .collect();
    next_hops.sort_unstable();
    assert_eq!(
        next_hops,
        [next_hop(0).to_string(), next_hop(1).to_string()],
        "one path per instance, NEXT_HOP its host address: {got:?}"
    );
    for p in &got {
        assert_eq!(attr(p, 1)["value"], 0, "ORIGIN IGP: {p}");
        assert_eq!(
            attr(p, 2)["as_paths"][0]["asns"],
            serde_json::json!([TIER_ASN]),
            "{p}"
        );
        assert_eq!(
            attr(p, 8)["communities"],
            serde_json::json!([(TIER_ASN << 16) | 100]),
            "{p}"
        );
    }
    same_backend_on_every_instance(&tier);

    // SIGTERM of instance 0: its path leaves GoBGP's RIB while it drains.
    tier.instances[0].signal("TERM").expect("SIGTERM");
    let left = paths(1);
    assert_eq!(
        attr(&left[0], 3)["nexthop"],
        next_hop(1).to_string(),
        "{left:?}"
    );
    assert!(tier.instances[0].is_running(), "withdrawn before the exit");
    let exit = tier.instances[0]
        .wait_exit(Duration::from_secs(u64::from(DRAIN_S) + 20))
        .expect("wait for instance 0");
    assert!(exit.is_some_and(|s| s.success()), "clean exit: {exit:?}");
}
