//! Reload (SIGHUP with a rewritten file) that removes a backend: keep-alive
//! connections to the other backends keep working without a single error,
//! new connections avoid the removed backend.

mod common;

use common::DriverKind;

use common::{curl, gateway, number, stats_until, tally};
use portico::demo::topology::{HTTP_PORT, ServiceOptions, VIP, backend_name};
use portico::tool::KeepaliveReport;
use portico_tests::wait_until;
use std::time::Duration;

#[test]
fn removing_a_backend_keeps_the_other_connections_and_steers_new_ones_away() {
    removing_a_backend_keeps_the_other_connections_and_steers_new_ones_away_on(
        DriverKind::Afpacket,
    );
}

#[test]
fn removing_a_backend_keeps_the_other_connections_and_steers_new_ones_away_afxdp() {
    removing_a_backend_keeps_the_other_connections_and_steers_new_ones_away_on(DriverKind::Afxdp);
}

fn removing_a_backend_keeps_the_other_connections_and_steers_new_ones_away_on(driver: DriverKind) {
    let Some(t) = common::topology_on(
        "reload::removing_a_backend_keeps_the_other_connections_and_steers_new_ones_away",
        3,
        driver,
    ) else {
        return;
    };
    let options = ServiceOptions::all(&t);
    let gw = gateway(&t, &options);
    let generation = number(&common::stats(&gw), "/snapshot/generation");

    // 24 keep-alive connections, a request every 50 ms each, for 8 s.
    let keepalive = t
        .client
        .spawn(
            common::PORTICO,
            &[
                "tool",
                "http-keepalive",
                "--target",
                &format!("{VIP}:{HTTP_PORT}"),
                "--connections",
                "24",
                "--duration-ms",
                "8000",
                "--interval-ms",
                "50",
                "--timeout-ms",
                "2000",
            ],
        )
        .expect("start the keep-alive client");
    // Let every connection be established and answered a few times.
    std::thread::sleep(Duration::from_secs(2));

    let removed = backend_name(1);
    let kept = ServiceOptions {
        backends: vec![0, 2],
        ..options
    };
    gw.reload(&t.config_toml(&kept)).expect("reload");
    stats_until(&gw, |s| number(s, "/snapshot/generation") == generation + 1);

    // New connections avoid the removed backend.
    let (per_backend, _, failed) = tally(&curl(&t, &format!("http://{VIP}/"), 60, true));
    assert_eq!(
        failed, 0,
        "new connections after the reload: {per_backend:?}"
    );
    assert!(!per_backend.contains_key(&removed), "{per_backend:?}");
    assert_eq!(per_backend.len(), 2, "{per_backend:?}");

    let out = keepalive
        .wait_output(Duration::from_secs(30))
        .expect("the keep-alive client finishes");
    let reports: Vec<KeepaliveReport> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a connection report"))
        .collect();
    assert_eq!(
        reports.len(),
        24,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut on_kept = 0;
    for r in &reports {
        let backends: Vec<&String> = r.answers.keys().collect();
        assert!(
            backends.len() <= 1,
            "a keep-alive connection stays on its backend: {r:?}"
        );
        let on_removed = backends
            .first()
            .is_some_and(|b| b.starts_with(&format!("backend {removed} ")));
        if on_removed {
            // `tcp_backend_gone` defaults to "drop": the client times out.
            eprintln!("connection on the removed backend: {r:?}");
        } else {
            on_kept += 1;
            assert_eq!(r.errors, 0, "a connection to a kept backend failed: {r:?}");
            // 8 s at one request per 50 ms (plus the round trip): far more
            // than the 2 s before the reload.
            assert!(
                r.answers.values().sum::<u32>() >= 60,
                "the connection kept being answered after the reload: {r:?}"
            );
        }
    }
    assert!(
        on_kept > 0,
        "some connections were on kept backends: {reports:?}"
    );
    // The gateway still works and counted nothing unexpected.
    assert!(wait_until(Duration::from_secs(5), || {
        curl(&t, &format!("http://{VIP}/"), 1, true)[0].is_some()
    }));
}
