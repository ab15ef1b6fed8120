//! Malformed and unwanted frames sent into the outside port with a raw
//! `AF_PACKET` socket from the client namespace (`portico tool
//! send-frames`: random bytes, IPv6, bad IPv4/TCP checksums, bad version and
//! length, fragments, SYN+FIN, unknown ports and protocol, a destination
//! Portico does not own, a segment of no flow) are dropped and counted by
//! reason in `portico stats --json`, and HTTP through the VIP still works.

mod common;

use common::DriverKind;

use common::{curl, gateway, number, stats, stats_until};
use portico::demo::topology::{
    CLIENT_ADDR, HTTP_PORT, ServiceOptions, Topology, UNOWNED_ADDR, VIP,
};
use serde_json::Value;
use std::collections::BTreeMap;

#[test]
fn malformed_and_unknown_traffic_is_dropped_and_counted_by_reason() {
    malformed_and_unknown_traffic_is_dropped_and_counted_by_reason_on(DriverKind::Afpacket);
}

#[test]
fn malformed_and_unknown_traffic_is_dropped_and_counted_by_reason_afxdp() {
    malformed_and_unknown_traffic_is_dropped_and_counted_by_reason_on(DriverKind::Afxdp);
}

fn malformed_and_unknown_traffic_is_dropped_and_counted_by_reason_on(driver: DriverKind) {
    let Some(t) = common::topology_on(
        "malformed::malformed_and_unknown_traffic_is_dropped_and_counted_by_reason",
        1,
        driver,
    ) else {
        return;
    };
    let gw = gateway(&t, &ServiceOptions::all(&t));
    let before = stats(&gw);
    let out = t
        .client_tool(&[
            "send-frames",
            "--interface",
            &t.client_if,
            "--src-mac",
            &Topology::mac_of(&t.client, &t.client_if).expect("client MAC"),
            "--dst-mac",
            &Topology::mac_of(&t.gateway, &t.outside_if).expect("gateway MAC"),
            "--src-ip",
            &CLIENT_ADDR.to_string(),
            "--vip",
            &VIP.to_string(),
            "--port",
            &HTTP_PORT.to_string(),
            "--not-owned",
            &UNOWNED_ADDR.to_string(),
            "--copies",
            "5",
        ])
        .expect("send-frames runs");
    let sent: BTreeMap<String, u64> = serde_json::from_str(out.trim()).expect("sent counts");
    assert!(
        sent.len() >= 10,
        "the frame set covers many reasons: {sent:?}"
    );
    let delta = |s: &Value, reason: &str| {
        number(s, &format!("/total/drops/{reason}"))
            - number(&before, &format!("/total/drops/{reason}"))
    };
    let after = stats_until(&gw, |s| sent.iter().all(|(r, n)| delta(s, r) >= *n));
    for (reason, n) in &sent {
        // The client's kernel sends nothing that lands in these reasons
        // (IPv6 is off in the topology), so the counts are exact.
        assert_eq!(delta(&after, reason), *n, "drops of {reason}: {after}");
    }
    let (per_backend, _, failed) = common::tally(&curl(&t, &format!("http://{VIP}/"), 10, true));
    assert_eq!(failed, 0, "HTTP still works: {per_backend:?}");
}
