//! The AF_XDP driver's XDP program over a crash (issue 6: "detached on
//! exit, also after a crash on the next start"): `portico run` with
//! `driver = "afxdp"` on the http suite's topology is killed with SIGKILL,
//! whatever it left attached to the gateway's veths is read back
//! (`ip -d -j link show`, the kernel's IFLA_XDP report, which also lists
//! programs held by BPF links), a second `portico run` on the same
//! interfaces must forward HTTP to nginx with exactly one Portico program
//! per interface, and its SIGTERM stop must leave none.
//!
//! The driver attaches through a BPF link, so the kernel detaches the
//! program when the process's fds close, however it dies; a program
//! attached through netlink (an older build) would outlive the process and
//! is removed by the next start (dataplane's
//! `a_stale_portico_program_is_replaced_and_a_foreign_one_refused`).
//!
//! The first run's requests share one keep-alive connection, closed by the
//! client: a restarted gateway has lost its SNAT allocations and hands the
//! same SNAT ports out again, and a backend still holding one of them in
//! TIME_WAIT (it closed first, as with `Connection: close`) answers the new
//! SYN with an ACK the fresh flow drops as `tcp_invalid`, until TIME_WAIT
//! ends. That is a property of restarting a stateful NAT, not of XDP, so
//! it is kept out of this test.

mod common;

use common::{DriverKind, curl, gateway, tally};
use portico::demo::topology::{GatewayRun, SNAT_ADDR, ServiceOptions, Topology, VIP};
use portico_tests::{Netns, wait_until};
use serde_json::Value;
use std::os::unix::process::ExitStatusExt as _;
use std::time::Duration;

/// `bpf_prog_info.name` of the driver's redirect program.
const PROGRAM_NAME: &str = dataplane::driver::afxdp::bpf::PROGRAM_NAME;
const REQUESTS: usize = 40;
/// SIGKILL's number (9 on every Linux architecture).
const SIGKILL: i32 = 9;

/// One XDP program attached to an interface (in one mode).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Attached {
    id: u64,
    name: String,
}

/// The programs of an `"xdp"` object of `ip -d -j link show`: one per
/// mode in `"attached"` (iproute2 6.x also repeats a lone attachment's
/// program at the top level as `"prog"`, read when there is no list).
fn programs_of(xdp: &Value) -> Vec<Attached> {
    let one = |prog: &Value| Attached {
        id: prog["id"].as_u64().unwrap_or(0),
        name: prog["name"].as_str().unwrap_or_default().to_owned(),
    };
    match xdp.get("attached").and_then(Value::as_array) {
        Some(list) => list.iter().filter_map(|a| a.get("prog")).map(one).collect(),
        None => xdp.get("prog").map(one).into_iter().collect(),
    }
}

/// The XDP programs attached to `ifname` in `ns`, as `ip -d -j link show`
/// reports them.
fn attached(ns: &Netns, ifname: &str) -> Vec<Attached> {
    let out = ns
        .exec("ip", &["-d", "-j", "link", "show", "dev", ifname])
        .unwrap_or_else(|e| panic!("ip -d -j link show dev {ifname}: {e}"));
    let links: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "ip -j output is JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    links
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|link| link.get("xdp"))
        .flat_map(programs_of)
        .collect()
}

fn gateway_ifs(t: &Topology) -> [&str; 2] {
    [t.outside_if.as_str(), t.inside_if.as_str()]
}

/// Exactly one program, Portico's, on each gateway interface: their ids.
fn assert_one_portico_program_each(t: &Topology, when: &str, gw: &GatewayRun) -> Vec<u64> {
    gateway_ifs(t)
        .iter()
        .map(|ifname| {
            let progs = attached(&t.gateway, ifname);
            assert!(
                progs.len() == 1 && progs[0].name == PROGRAM_NAME && progs[0].id != 0,
                "{when}: {ifname} has {progs:?}, want exactly one {PROGRAM_NAME}; gateway log:\n{}",
                gw.log_text()
            );
            progs[0].id
        })
        .collect()
}

/// `portico run` with `options`, up once HTTP through the VIP answers over
/// one keep-alive connection.
fn gateway_keep_alive(t: &Topology, options: &ServiceOptions) -> GatewayRun {
    let gw = t
        .start_gateway(&t.config_toml(options))
        .expect("portico run starts");
    let up = wait_until(Duration::from_secs(30), || {
        curl(t, &format!("http://{VIP}/"), 1, false)
            .first()
            .is_some_and(Option::is_some)
    });
    assert!(
        up,
        "HTTP through the VIP never answered; gateway log:\n{}",
        gw.log_text()
    );
    gw
}

/// HTTP through the VIP, every request answered from the SNAT address;
/// with `close` (a connection per request) both backends answer.
fn assert_forwards(t: &Topology, when: &str, gw: &GatewayRun, close: bool) {
    let bodies = curl(t, &format!("http://{VIP}/"), REQUESTS, close);
    let (per_backend, per_source, failed) = tally(&bodies);
    assert_eq!(
        failed,
        0,
        "{when}: failed requests; answers {per_backend:?}; stats {:?}; gateway log:\n{}",
        gw.stats_raw().map(|s| s.0),
        gw.log_text()
    );
    assert_eq!(
        per_backend.len(),
        if close { 2 } else { 1 },
        "{when}: answers per backend: {per_backend:?}"
    );
    assert_eq!(
        per_source.keys().collect::<Vec<_>>(),
        vec![&SNAT_ADDR.to_string()],
        "{when}: the backends see the SNAT address"
    );
}

#[test]
fn the_xdp_program_is_gone_after_sigkill_and_the_next_start_forwards_with_one() {
    let Some(t) = common::topology_on(
        "xdp_lifecycle::the_xdp_program_is_gone_after_sigkill_and_the_next_start_forwards_with_one",
        2,
        DriverKind::Afxdp,
    ) else {
        return;
    };
    for ifname in gateway_ifs(&t) {
        assert_eq!(attached(&t.gateway, ifname), vec![], "{ifname} starts bare");
    }
    let options = ServiceOptions::all(&t);

    // First run: forwarding, one program per interface; then SIGKILL.
    let gw = gateway_keep_alive(&t, &options);
    assert_forwards(&t, "first run", &gw, false);
    let first_ids = assert_one_portico_program_each(&t, "first run", &gw);
    let pid = gw.pid().expect("the gateway runs").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success(), "kill -KILL {pid}");
    // Reaps the killed process (the SIGTERM it also sends finds it dead).
    let status = gw
        .stop(Duration::from_secs(10))
        .expect("wait for the killed gateway")
        .expect("the killed gateway exits");
    assert_eq!(status.signal(), Some(SIGKILL), "{status:?}");

    // What the crash left: the kernel closed the BPF links with the
    // process's fds, so nothing stays attached.
    let bare = wait_until(Duration::from_secs(5), || {
        gateway_ifs(&t)
            .iter()
            .all(|ifname| attached(&t.gateway, ifname).is_empty())
    });
    assert!(
        bare,
        "after SIGKILL: outside {:?}, inside {:?}",
        attached(&t.gateway, &t.outside_if),
        attached(&t.gateway, &t.inside_if)
    );

    // Second run on the same interfaces: forwards, one fresh program each.
    let gw = gateway(&t, &options);
    assert_forwards(&t, "after the crash", &gw, true);
    let second_ids = assert_one_portico_program_each(&t, "after the crash", &gw);
    for (a, b) in first_ids.iter().zip(&second_ids) {
        assert_ne!(a, b, "a freshly loaded program, not the killed run's");
    }
    assert!(
        !gw.log_text().contains("stale Portico XDP program"),
        "nothing stale was left to remove:\n{}",
        gw.log_text()
    );

    // A clean stop detaches too.
    let status = gw
        .stop(Duration::from_secs(10))
        .expect("stop the gateway")
        .expect("the gateway exits on SIGTERM");
    assert!(status.success(), "clean exit: {status:?}");
    for ifname in gateway_ifs(&t) {
        assert_eq!(
            attached(&t.gateway, ifname),
            vec![],
            "{ifname} after SIGTERM"
        );
    }
}
