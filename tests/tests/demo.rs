//! `portico demo` as a user runs it: on the network as root (and it leaves
//! nothing behind), in memory with `--mem`.

mod common;

use portico_tests::{require_root, run};
use std::process::Command;

#[test]
fn the_in_memory_demo_delivers_every_connection_and_query_of_both_families() {
    let out = Command::new(common::PORTICO)
        .args(["demo", "--mem", "--connections", "600", "--queries", "600"])
        .output()
        .expect("portico demo --mem runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for family in ["IPv4", "IPv6"] {
        assert!(
            text.contains(&format!(
                "{family} TCP connections: 600 opened, 600 responses delivered"
            )),
            "{family}: {text}"
        );
        assert!(
            text.contains(&format!(
                "{family} UDP queries: 600 sent, 600 answers delivered"
            )),
            "{family}: {text}"
        );
    }
    assert!(text.contains("  no drops"), "{text}");
    // The IPv6 services: every one of the 3 IPv6 backends took a share
    // of web6's packets and of dns6's (Maglev over IPv6 identities).
    let section = |from: &str, to: &str| {
        text.split(from)
            .nth(1)
            .and_then(|s| s.split(to).next())
            .unwrap_or_else(|| panic!("no section {from}: {text}"))
            .to_owned()
    };
    for (service, until) in [
        ("web6 (tcp/80 + NodePort):", "IPv6 UDP queries"),
        ("dns6 (udp/53):", "flows (as"),
    ] {
        let hits = section(service, until);
        for b in ["fd00:1::10", "fd00:1::11", "fd00:1::12"] {
            assert!(hits.contains(b), "{service} {b}: {hits}");
        }
        assert!(!hits.contains("10.1.0."), "{service}: {hits}");
    }
    // The flows: 600 closed TCP connections and 600 UDP flows per family;
    // IPv6 rows name the client, the VIP, the backend and the IPv6 SNAT
    // address as `portico flows` does.
    let flows = section("flows (as", "pipeline:");
    for family in ["IPv4", "IPv6"] {
        assert!(
            flows.contains(&format!("{family}: 1200 live (TIME_WAIT 600, UDP 600)")),
            "{family}: {flows}"
        );
    }
    let ipv6 = flows
        .split("IPv6:")
        .nth(1)
        .unwrap_or_else(|| panic!("no IPv6 flows: {flows}"));
    let row = |service: &str| {
        ipv6.lines()
            .find(|l| l.contains(&format!("service={service} ")))
            .unwrap_or_else(|| panic!("no {service} flow: {ipv6}"))
    };
    let web6 = row("web6");
    assert!(
        web6.contains("tcp  TIME_WAIT")
            && web6.contains("src=2001:db8:100::")
            && web6.contains("dst=2001:db8:c::1")
            && web6.contains("dst=fd00:1::1 ")
            && web6.contains("backend=[fd00:1::1"),
        "{web6}"
    );
    let dns6 = row("dns6");
    assert!(
        dns6.contains("dst=2001:db8:c::10 ") && dns6.contains("dst=fd00:1::1 "),
        "{dns6}"
    );
    assert!(
        text.contains("live 2400 (IPv6 1200;"),
        "the gauges count both families: {text}"
    );
}

#[test]
fn the_network_demo_answers_everything_and_removes_its_namespaces() {
    if !require_root("demo::the_network_demo_answers_everything_and_removes_its_namespaces") {
        return;
    }
    let child = Command::new(common::PORTICO)
        .args(["demo", "--connections", "60", "--queries", "30"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("portico demo runs");
    let pid = child.id();
    let out = child.wait_with_output().expect("portico demo finishes");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for section in [
        "HTTP via VIP 192.0.2.10:80: 30 requests",
        "HTTP via NodePort 192.0.2.1:30080: 30 requests",
        "UDP via VIP 192.0.2.10:53: 30 queries",
        // IPv6 to the IPv6 VIP, with curl -6 (tests/run.sh installs curl).
        "HTTP via IPv6 VIP [2001:db8:c::10]:80: 30 requests with curl -6",
    ] {
        assert!(text.contains(section), "{section}: {text}");
    }
    assert!(text.contains("gateway counters"), "{text}");
    assert!(text.contains("stopped on SIGTERM"), "{text}");
    // Then the kernel's NAT serves the same VIP in the same namespaces
    // (tests/run.sh installs nft), and both medians are printed.
    for section in [
        "kernel: HTTP via VIP 192.0.2.10:80: 30 requests",
        "kernel: UDP via VIP 192.0.2.10:53: 30 queries",
    ] {
        assert!(text.contains(section), "{section}: {text}");
    }
    // VIP, NodePort, UDP, IPv6 VIP, then the kernel's HTTP and UDP.
    assert_eq!(text.matches("answered 30, failed 0").count(), 6, "{text}");
    let ipv6 = text
        .split("HTTP via IPv6 VIP")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .unwrap_or_else(|| panic!("no IPv6 section: {text}"));
    assert!(ipv6.contains("answered 30, failed 0"), "{ipv6}");
    assert!(
        ipv6.contains("fd00:1::10"),
        "backends named by IPv6 address: {ipv6}"
    );
    assert!(
        ipv6.contains("backends saw the client as: fd00:1::1 ×30"),
        "full NAT from the IPv6 SNAT address: {ipv6}"
    );
    let medians = |label: &str| -> Vec<f64> {
        let table = text
            .split("p50 latency, ms      Portico   kernel NAT")
            .nth(1)
            .unwrap_or_else(|| panic!("no latency table: {text}"));
        let line = table
            .lines()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("no {label} row: {text}"));
        line[line.find(label).unwrap_or(0) + label.len()..]
            .split_whitespace()
            .map(|v| v.parse().expect("a p50 in ms"))
            .collect()
    };
    for label in ["HTTP via VIP", "UDP via VIP"] {
        let row = medians(label);
        assert_eq!(row.len(), 2, "{label}: {text}");
        assert!(row.iter().all(|ms| *ms > 0.0), "{label}: {text}");
    }
    // The demo's namespaces carry its pid: none is left.
    let list = run("ip", &["netns", "list"]).expect("ip netns list");
    let list = String::from_utf8_lossy(&list.stdout);
    let tag = format!("{}x", pid % 100_000);
    let ours = |name: &str| {
        ["pc", "pg", "pl", "pb"]
            .iter()
            .any(|p| name.starts_with(&format!("{p}{tag}")))
    };
    assert!(
        !list
            .lines()
            .any(|l| ours(l.split_whitespace().next().unwrap_or_default())),
        "namespaces of the demo left behind: {list}"
    );
}
