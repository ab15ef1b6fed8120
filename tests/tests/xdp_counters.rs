//! AF_XDP's cross-queue counters end to end (issue 16): `portico run` on
//! AF_XDP with two workers (every worker has a socket on every queue,
//! sharing the queue's UMEM), HTTP from 17 client addresses with a
//! connection per request, so frames of both workers' flows arrive on
//! both queues. Frames a worker takes through its socket on the other
//! worker's queue are counted per port as `rx_other_queues`, refused
//! queue sockets as `queue_socket_failures`; both must reach `portico
//! stats` (its text and `--json`) and `/metrics`, with the same values.

mod common;

use common::{gateway, number, portico, sample, scrape, stats};
use portico::demo::topology::{CLIENT_ADDR, DriverKind, ServiceOptions, VIP};
use serde_json::Value;
use std::net::Ipv4Addr;
use std::time::Duration;

/// Extra client addresses, requests from each.
const EXTRA_CLIENTS: u8 = 16;
const REQUESTS_PER_CLIENT: usize = 10;

/// `counter` summed over the report's ports.
fn over_ports(report: &Value, counter: &str) -> u64 {
    report["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| number(p, &format!("/{counter}")))
        .sum()
}

/// The samples of `family` (a `_total` counter) summed over its ports.
fn scraped(text: &str, report: &Value, family: &str) -> u64 {
    report["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| {
            let series = format!(
                "portico_port_{family}_total{{port=\"{}\",interface=\"{}\"}}",
                p["name"].as_str().expect("name"),
                p["interface"].as_str().expect("interface"),
            );
            sample(text, &series).unwrap_or_else(|| panic!("{series} missing in\n{text}"))
        })
        .sum()
}

#[test]
fn afxdp_cross_queue_counters_reach_stats_and_metrics() {
    let test = "xdp_counters::afxdp_cross_queue_counters_reach_stats_and_metrics";
    let Some(t) = common::topology_on(test, 3, DriverKind::Afxdp) else {
        return;
    };
    let gw = gateway(&t, &ServiceOptions::all(&t));
    for i in 0..=EXTRA_CLIENTS {
        let [a, b, c, d] = CLIENT_ADDR.octets();
        let addr = Ipv4Addr::new(a, b, c, d + i);
        if i > 0 {
            t.client
                .exec(
                    "ip",
                    &["addr", "add", &format!("{addr}/24"), "dev", &t.client_if],
                )
                .expect("add a client address");
        }
        let addr = addr.to_string();
        let url = format!("http://{VIP}/");
        let mut args = vec![
            "-sS",
            "--max-time",
            "5",
            "--interface",
            &addr,
            "-H",
            "Connection: close",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}\n",
        ];
        args.extend(std::iter::repeat_n(url.as_str(), REQUESTS_PER_CLIENT));
        let out = t.client.exec("curl", &args).expect("curl runs");
        let codes = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            codes.lines().filter(|l| *l == "200").count(),
            REQUESTS_PER_CLIENT,
            "{addr}: {codes}"
        );
    }
    // Let the workers publish their counters (a few times a second).
    std::thread::sleep(Duration::from_millis(600));
    let before = stats(&gw);
    let text = scrape(&t).expect("/metrics answers");
    let after = stats(&gw);

    let other = over_ports(&after, "rx_other_queues");
    let failures = over_ports(&after, "queue_socket_failures");
    let rx: u64 = over_ports(&after, "rx_frames");
    eprintln!(
        "{test}: {rx} frames received, {other} through the other worker's queue, \
         {failures} queue sockets refused"
    );
    assert_eq!(failures, 0, "every queue socket joined: {after}");
    assert!(
        other > 0,
        "some frames of both workers' flows came in on the other queue: {after}"
    );
    // /metrics has them too, per port, between the two reports around it.
    for family in ["rx_other_queues", "queue_socket_failures"] {
        let m = scraped(&text, &after, family);
        let (lo, hi) = (over_ports(&before, family), over_ports(&after, family));
        assert!(lo <= m && m <= hi, "{family}: {lo} <= {m} <= {hi}\n{text}");
        assert!(
            text.contains(&format!("# HELP portico_port_{family} AF_XDP")),
            "{family} has its help text\n{text}"
        );
    }
    // And the text `portico stats` prints.
    let out = portico(&[
        "stats",
        "--admin-socket",
        gw.socket.to_str().expect("utf-8"),
    ]);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{printed}");
    assert!(printed.contains("rx_other_queues="), "{printed}");
}
