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
    // AF_XDP with these two workers keeps CAP_NET_ADMIN and CAP_BPF (worker
    // 0 loads the steering XDP program when a snapshot changes the rule);
    // afpacket nothing.
    let kept = match driver {
        DriverKind::Afxdp => "0000008000001000",
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

    // Still forwarding without any capability (but AF_XDP's two).
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
