//! What the gateway answers itself or carries without TCP: UDP through the
//! VIP, ICMP echo to the VIP and the node address, ARP for the VIP.

mod common;

use common::DriverKind;

use common::gateway;
use portico::demo::live::parse_body;
use portico::demo::topology::{
    DNS_PORT, NODE_ADDR, SNAT_ADDR, ServiceOptions, Topology, UNOWNED_ADDR, VIP,
};
use std::collections::BTreeMap;

#[test]
fn udp_queries_through_the_vip_are_answered_by_every_backend() {
    udp_queries_through_the_vip_are_answered_by_every_backend_on(DriverKind::Afpacket);
}

#[test]
fn udp_queries_through_the_vip_are_answered_by_every_backend_afxdp() {
    udp_queries_through_the_vip_are_answered_by_every_backend_on(DriverKind::Afxdp);
}

fn udp_queries_through_the_vip_are_answered_by_every_backend_on(driver: DriverKind) {
    let Some(t) = common::topology_on(
        "local::udp_queries_through_the_vip_are_answered_by_every_backend",
        3,
        driver,
    ) else {
        return;
    };
    let gw = gateway(&t, &ServiceOptions::all(&t));
    const QUERIES: usize = 120;
    let out = t
        .client_tool(&[
            "udp-query",
            "--target",
            &format!("{VIP}:{DNS_PORT}"),
            "--count",
            &QUERIES.to_string(),
            "--timeout-ms",
            "2000",
        ])
        .expect("udp-query runs");
    let mut per_backend: BTreeMap<String, usize> = BTreeMap::new();
    let mut answered = 0;
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.first(), Some(&"ok"), "query failed: {line}");
        let (name, saw) = parse_body(&words[2..].join(" ")).expect("a backend's reply");
        assert_eq!(saw, SNAT_ADDR.to_string(), "full NAT: {line}");
        *per_backend.entry(name).or_default() += 1;
        answered += 1;
    }
    assert_eq!(answered, QUERIES, "every query answered");
    assert_eq!(
        per_backend.len(),
        3,
        "a new socket is a new flow: {per_backend:?}"
    );
    let s = common::stats(&gw);
    assert_eq!(common::number(&s, "/total/drops/no_backend"), 0, "{s}");
}

fn neighbour(t: &Topology, addr: &str) -> String {
    let out = t
        .client
        .exec("ip", &["neigh", "show", addr])
        .expect("ip neigh");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn ping_and_arp_for_the_vip_are_answered_by_portico() {
    ping_and_arp_for_the_vip_are_answered_by_portico_on(DriverKind::Afpacket);
}

#[test]
fn ping_and_arp_for_the_vip_are_answered_by_portico_afxdp() {
    ping_and_arp_for_the_vip_are_answered_by_portico_on(DriverKind::Afxdp);
}

fn ping_and_arp_for_the_vip_are_answered_by_portico_on(driver: DriverKind) {
    let Some(t) = common::topology_on(
        "local::ping_and_arp_for_the_vip_are_answered_by_portico",
        1,
        driver,
    ) else {
        return;
    };
    assert!(
        portico_tests::have("ping"),
        "ping is installed by tests/run.sh"
    );
    let gw = gateway(&t, &ServiceOptions::all(&t));
    let outside_mac = Topology::mac_of(&t.gateway, &t.outside_if).expect("the outside port's MAC");
    // The gateway's kernel has no address: only Portico can have answered
    // the client's ARP for the VIP (curl already went through).
    let entry = neighbour(&t, &VIP.to_string());
    assert!(
        entry.contains(&format!("lladdr {outside_mac}")),
        "the client learned the VIP at the outside port's MAC {outside_mac}: {entry:?}"
    );
    let before = common::stats(&gw);
    for addr in [VIP, NODE_ADDR] {
        let out = t
            .client_exec(
                "ping",
                &["-c", "3", "-i", "0.2", "-W", "2", &addr.to_string()],
            )
            .expect("ping runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "ping {addr}: {text}");
        assert!(text.contains("3 received"), "ping {addr}: {text}");
    }
    // An address nobody owns is not answered, neither ARP nor echo.
    let out = t
        .client_exec("ping", &["-c", "1", "-W", "1", &UNOWNED_ADDR.to_string()])
        .expect("ping runs");
    assert!(!out.status.success(), "nobody answers for {UNOWNED_ADDR}");
    assert!(
        !neighbour(&t, &UNOWNED_ADDR.to_string()).contains("lladdr"),
        "no ARP answer for an address Portico does not own"
    );
    common::stats_until(&gw, |s| {
        common::number(s, "/total/local_replies")
            >= common::number(&before, "/total/local_replies") + 6
    });
}
