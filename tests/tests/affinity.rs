//! `session_affinity = "client_ip"`: every connection of one client lands
//! on one backend; without affinity the same client spreads.

mod common;

use common::{curl, gateway, tally, topology};
use portico::demo::topology::{NODE_ADDR, NODE_PORT, ServiceOptions, VIP};

const CONNECTIONS: usize = 60;

#[test]
fn client_ip_affinity_keeps_one_client_on_one_backend() {
    let Some(t) = topology(
        "affinity::client_ip_affinity_keeps_one_client_on_one_backend",
        3,
    ) else {
        return;
    };
    let options = ServiceOptions {
        client_ip_affinity: true,
        ..ServiceOptions::all(&t)
    };
    let gw = gateway(&t, &options);
    for url in [
        format!("http://{VIP}/"),
        format!("http://{NODE_ADDR}:{NODE_PORT}/"),
    ] {
        let (per_backend, _, failed) = tally(&curl(&t, &url, CONNECTIONS, true));
        assert_eq!(failed, 0, "{url}");
        assert_eq!(
            per_backend.len(),
            1,
            "{url}: {CONNECTIONS} connections of one client, one backend: {per_backend:?}"
        );
    }
    let s = common::stats_until(&gw, |s| {
        common::number(s, "/total/affinity_hits") >= (2 * CONNECTIONS - 2) as u64
    });
    assert!(common::number(&s, "/total/flows_created") >= 2 * CONNECTIONS as u64);
}

#[test]
fn without_affinity_the_same_client_spreads() {
    let Some(t) = topology("affinity::without_affinity_the_same_client_spreads", 3) else {
        return;
    };
    let gw = gateway(&t, &ServiceOptions::all(&t));
    let (per_backend, _, failed) = tally(&curl(&t, &format!("http://{VIP}/"), CONNECTIONS, true));
    assert_eq!(failed, 0);
    assert_eq!(per_backend.len(), 3, "{per_backend:?}");
    assert_eq!(
        common::number(&common::stats(&gw), "/total/affinity_hits"),
        0
    );
}
