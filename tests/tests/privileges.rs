//! `portico run` drops its privileges once its ports are open
//! (controlplane/src/gateway/privileges): every thread of a running gateway
//! shows an empty effective, permitted and bounding capability set and
//! `NoNewPrivs: 1` in /proc, and the gateway still forwards, reloads and
//! stops cleanly (the XDP program detached) afterwards.

mod common;

use common::{DriverKind, curl, gateway, tally};
use portico::demo::topology::{GatewayRun, SNAT_ADDR, ServiceOptions, VIP};
use std::collections::BTreeMap;
use std::time::Duration;

/// The `Key:\tvalue` lines of /proc/PID/task/TID/status of every thread.
fn thread_status(gw: &GatewayRun) -> BTreeMap<String, BTreeMap<String, String>> {
    let pid = gw.pid().expect("gateway running");
    let mut threads = BTreeMap::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).expect("task list") {
        let entry = entry.expect("task entry");
        let Ok(text) = std::fs::read_to_string(entry.path().join("status")) else {
            continue; // the thread exited meanwhile
        };
        let fields = text
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
            .collect::<BTreeMap<_, _>>();
        let name = format!(
            "{} ({})",
            entry.file_name().to_string_lossy(),
            fields.get("Name").cloned().unwrap_or_default()
        );
        threads.insert(name, fields);
    }
    threads
}

fn privileges_are_dropped_in_every_thread_on(test: &str, driver: DriverKind) {
    let Some(t) = common::topology_on(test, 2, driver) else {
        return;
    };
    let gw = gateway(&t, &ServiceOptions::all(&t));
    let threads = thread_status(&gw);
    // The workers, the control thread and the admin/metrics threads.
    assert!(threads.len() >= 3, "threads: {:?}", threads.keys());
    // Nothing: AF_XDP with these two workers installs steering rules as
    // map updates through the maps' fds (CAP_BPF only on a kernel whose
    // bpf(2) checks it for map updates); afpacket needs nothing.
    let old_kernel = portico::gateway::privileges::map_updates_need_cap_bpf();
    let kept = match driver {
        DriverKind::Afxdp if old_kernel => "0000008000000000",
        _ => "0000000000000000",
    };
    for (thread, status) in &threads {
        for (key, want) in [
            ("CapEff", kept),
            ("CapPrm", kept),
            ("CapInh", "0000000000000000"),
            ("CapBnd", kept),
            ("CapAmb", "0000000000000000"),
            ("NoNewPrivs", "1"),
        ] {
            assert_eq!(
                status.get(key).map(String::as_str),
                Some(want),
                "{key} of thread {thread}; gateway log:\n{}",
                gw.log_text()
            );
        }
    }
    // The drop is logged, and only after it are the workers let poll:
    // nothing was forwarded with the start-up privileges.
    let log = gw.log_text();
    let dropped_at = log.find("privileges dropped");
    let released_at = log.find("workers released: forwarding");
    assert!(
        dropped_at.is_some() && released_at.is_some() && dropped_at < released_at,
        "drop logged before the workers are released:\n{log}"
    );

    // Still forwarding without any capability.
    let bodies = curl(&t, &format!("http://{VIP}/"), 20, true);
    let (per_backend, per_source, failed) = tally(&bodies);
    assert_eq!(failed, 0, "answers {per_backend:?}");
    assert_eq!(
        per_backend.len(),
        2,
        "every backend answers: {per_backend:?}"
    );
    assert_eq!(
        per_source.keys().collect::<Vec<_>>(),
        vec![&SNAT_ADDR.to_string()]
    );
    // AF_XDP: worker 0 installed the steering rule after the drop (the
    // workers install only once released), through the map fds, and it
    // steers: no install failed.
    if matches!(driver, DriverKind::Afxdp) {
        let s = common::stats_until(&gw, |s| {
            s.pointer("/total/steering_installs")
                .and_then(serde_json::Value::as_u64)
                .is_some_and(|n| n >= 1)
        });
        assert_eq!(
            common::number(&s, "/total/steering_install_failures"),
            0,
            "{s}"
        );
    }
    // A live reload (re-read as the same user, no capability needed).
    gw.reload(&std::fs::read_to_string(&gw.config_path).expect("config"))
        .expect("SIGHUP");
    let reloaded = portico_tests::wait_until(Duration::from_secs(10), || {
        gw.log_text().contains("configuration unchanged")
    });
    assert!(reloaded, "reload answered:\n{}", gw.log_text());
    let log = gw.log.clone();
    let status = gw.stop(Duration::from_secs(10)).expect("stop");
    let log = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        status.is_some_and(|s| s.success()),
        "clean stop without privileges: {status:?}\n{log}"
    );
}

#[test]
fn privileges_are_dropped_in_every_thread_afpacket() {
    privileges_are_dropped_in_every_thread_on(
        "privileges::privileges_are_dropped_in_every_thread_afpacket",
        DriverKind::Afpacket,
    );
}

#[test]
fn privileges_are_dropped_in_every_thread_afxdp() {
    privileges_are_dropped_in_every_thread_on(
        "privileges::privileges_are_dropped_in_every_thread_afxdp",
        DriverKind::Afxdp,
    );
}
