//! HTTP through `portico run` with `driver = "dpdk"` on vdevs (cargo
//! feature `dpdk`; run by tests/run.sh after installing libdpdk-dev): the
//! topology of http.rs, the gateway's two veth ends driven by
//! `net_af_packet` vdevs (`--no-huge --no-pci`), real curl and nginx.
//!
//! The vdevs hand frames over as the kernel has them: a frame a veth peer
//! sent with TX checksum offload still carries a partial checksum, which
//! the af_packet driver completes from ring metadata but the PMD cannot
//! know about. The client's and the backends' interfaces therefore send
//! with full checksums (`ethtool -K IF tx off`), as a NIC on a wire would.
#![cfg(feature = "dpdk")]

mod common;

use common::{curl, tally, topology};
use portico::demo::topology::{NODE_ADDR, NODE_PORT, SNAT_ADDR, ServiceOptions, Topology, VIP};
use portico_tests::wait_until;
use std::time::Duration;

const REQUESTS: usize = 90;
const MIN_SHARE: f64 = 0.15;

fn tx_checksums_in_software(t: &Topology) {
    let mut ends = vec![(&t.client, t.client_if.as_str())];
    ends.extend(t.backends.iter().map(|b| (&b.ns, b.ifname.as_str())));
    for (ns, ifname) in ends {
        ns.exec("ethtool", &["-K", ifname, "tx", "off"])
            .unwrap_or_else(|e| panic!("ethtool -K {ifname} tx off: {e}"));
    }
}

fn dpdk_config(t: &Topology, options: &ServiceOptions) -> String {
    let text = t.config_toml(options);
    assert!(text.contains("driver = \"afpacket\""), "{text}");
    text.replace("driver = \"afpacket\"", "driver = \"dpdk\"") + "\n[dpdk]\nmemory_mb = 256\n"
}

#[test]
fn vip_and_node_port_reach_every_backend_over_af_packet_vdevs() {
    let Some(t) = topology(
        "dpdk::vip_and_node_port_reach_every_backend_over_af_packet_vdevs",
        2,
    ) else {
        return;
    };
    tx_checksums_in_software(&t);
    let gw = t
        .start_gateway(&dpdk_config(&t, &ServiceOptions::all(&t)))
        .expect("portico run starts");
    let vip_url = format!("http://{VIP}/");
    let up = wait_until(Duration::from_secs(30), || {
        curl(&t, &vip_url, 1, true)
            .first()
            .is_some_and(Option::is_some)
    });
    assert!(
        up,
        "HTTP through the VIP never answered; gateway log:\n{}",
        gw.log_text()
    );
    let log = gw.log_text();
    assert!(
        log.contains("DPDK port started") && log.contains("net_af_packet"),
        "the gateway runs on the af_packet vdevs:\n{log}"
    );

    for (label, url) in [
        ("VIP", vip_url.clone()),
        ("NodePort", format!("http://{NODE_ADDR}:{NODE_PORT}/")),
    ] {
        let bodies = curl(&t, &url, REQUESTS, true);
        let (per_backend, per_source, failed) = tally(&bodies);
        assert_eq!(
            failed,
            0,
            "{label}: failed requests; answers {per_backend:?}\n{}",
            gw.log_text()
        );
        assert_eq!(
            per_backend.len(),
            2,
            "{label}: every backend answers: {per_backend:?}"
        );
        for (name, n) in &per_backend {
            assert!(
                *n as f64 >= MIN_SHARE * REQUESTS as f64,
                "{label}: backend {name} got {n} of {REQUESTS}: {per_backend:?}"
            );
        }
        assert_eq!(
            per_source.keys().collect::<Vec<_>>(),
            vec![&SNAT_ADDR.to_string()],
            "{label}: the backends see the SNAT address"
        );
    }

    // The admin socket reports the DPDK ports' counters.
    let stats = common::stats(&gw);
    let rx: u64 = stats["ports"]
        .as_array()
        .map(|ports| ports.iter().filter_map(|p| p["rx_frames"].as_u64()).sum())
        .unwrap_or(0);
    assert!(
        rx >= 2 * REQUESTS as u64,
        "rx_frames over the ports: {rx}; {stats}"
    );
}
