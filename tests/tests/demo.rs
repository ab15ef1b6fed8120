//! `portico demo` as a user runs it: on the network as root (and it leaves
//! nothing behind), in memory with `--mem`.

mod common;

use portico_tests::{require_root, run};
use std::process::Command;

#[test]
fn the_in_memory_demo_delivers_every_connection_and_query() {
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
    assert!(
        text.contains("600 opened, 600 responses delivered"),
        "{text}"
    );
    assert!(text.contains("600 sent, 600 answers delivered"), "{text}");
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
    assert_eq!(text.matches("answered 30, failed 0").count(), 5, "{text}");
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
