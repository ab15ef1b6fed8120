//! Jumbo frames end to end on AF_XDP (multi-buffer, `XDP_USE_SG`): the http
//! suite's topology with every link at MTU 9000 (client, both gateway
//! ports, the LAN bridge, the backend), `driver = "afxdp"`. A 9014-byte
//! frame does not fit a 4096-byte UMEM chunk, so the gateway binds its
//! sockets with `XDP_USE_SG` (`multi_buffer = "auto"`) and every full-size
//! segment crosses it as a chain of three buffers.
//!
//! Checked: a 16 MiB object downloaded through the VIP (nginx on the
//! backend) and uploaded through it (curl PUT, which nginx's WebDAV
//! stores: the stored file has the object's SHA-256) arrive byte for byte; iperf3
//! (3 s, MSS 8948) through the VIP moves data; ping with an 8000-byte
//! payload to the node address is answered by Portico; no frame is dropped
//! as too big or as a bad chain, and the inside port's average received
//! frame is far above 1500 bytes (jumbo segments, not MTU-1500 ones).
//!
//! Figures ([`single_flow_tcp_at_mtu_1500_and_9000_against_the_kernel`]):
//! one iperf3 flow through the VIP on AF_XDP at MTU 1500 and 9000, and
//! through the kernel path (nftables DNAT + SNAT in the same namespace) at
//! both; printed, never asserted (bench/RESULTS.md). Run it alone,
//! optimised: `cargo test --release -p portico-tests --test jumbo --
//! single_flow --nocapture`.

mod common;

use common::bulk::{bulk_server, listening, object, put, sha256_hex, www_with};
use common::{gateway_with, port_counter, stats, topology_on};
use portico::demo::kernel_path;
use portico::demo::topology::{DriverKind, NODE_ADDR, ServiceOptions, Topology, VIP, backend_addr};
use portico_netns::Netns;
use portico_tests::have;
use serde_json::Value;
use std::time::Duration;

const MTU: &str = "9000";
/// The object: 16 MiB, ~1900 jumbo segments.
const OBJECT_BYTES: usize = 16 << 20;
const BULK_PORT: u16 = 9090;
const IPERF_PORT: u16 = 5201;
/// The MSS of a 9000-byte MTU with IPv4 and TCP timestamps.
const IPERF_MSS: &str = "8948";

/// Every link of `ns` but loopback to MTU 9000.
fn jumbo(ns: &Netns) {
    set_mtu(ns, MTU);
}

/// Every link of `ns` but loopback to `mtu`; bridges after their ports
/// (a bridge takes the smallest MTU of its ports).
fn set_mtu(ns: &Netns, mtu: &str) {
    let out = ns.exec("ip", &["-o", "link", "show"]).expect("ip link");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut links: Vec<(bool, String)> = text
        .lines()
        .filter_map(|l| {
            let name = l.split(": ").nth(1)?.split('@').next()?.to_owned();
            (name != "lo").then(|| (l.contains("br0"), name))
        })
        .collect();
    links.sort();
    for (_, name) in links {
        ns.exec("ip", &["link", "set", "dev", &name, "mtu", mtu])
            .unwrap_or_else(|e| panic!("mtu {mtu} on {name}: {e}"));
    }
}

/// One iperf3 flow through the VIP for 3 s (`mss`: `-M`): bytes and
/// bits per second the receiver counted.
fn iperf(t: &Topology, mss: Option<&str>) -> (u64, f64) {
    let _server = t.backends[0]
        .ns
        .spawn(
            "iperf3",
            &["-s", "-1", "-B", &backend_addr(0).to_string(), "-p", "5201"],
        )
        .expect("start iperf3 -s");
    listening(t, IPERF_PORT);
    let vip = VIP.to_string();
    let mut args = vec!["-c", &vip, "-p", "5201", "-t", "3", "-J"];
    if let Some(m) = mss {
        args.extend(["-M", m]);
    }
    let out = t
        .client
        .spawn("iperf3", &args)
        .expect("start iperf3 -c")
        .wait_output(Duration::from_secs(30))
        .expect("iperf3 finishes");
    let report: Value = serde_json::from_slice(&out.stdout).expect("iperf3 -J output");
    assert!(out.status.success(), "iperf3: {report}");
    let received = report["end"]["sum_received"]["bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no received bytes in {report}"));
    let bps = report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    (received, bps)
}

/// The topology's configuration plus the bulk and iperf3 services
/// (VIP → backend 0, same port).
fn config(t: &Topology) -> String {
    let mut c = t.config_toml(&ServiceOptions::all(t));
    for (name, port) in [("bulk", BULK_PORT), ("iperf", IPERF_PORT)] {
        c.push_str(&format!(
            "\n[[service]]\nname = \"{name}\"\nprotocol = \"tcp\"\nvip = \"{VIP}\"\n\
             port = {port}\nsnat = true\nbackends = [{{ address = \"{}\", port = {port} }}]\n",
            backend_addr(0)
        ));
    }
    c
}

fn curl_ok(t: &Topology, args: &[&str]) -> String {
    let out = t.client_exec("curl", args).expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "curl {args:?}: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn jumbo_frames_cross_the_gateway_on_afxdp() {
    let test = "jumbo::jumbo_frames_cross_the_gateway_on_afxdp";
    let Some(t) = topology_on(test, 1, DriverKind::Afxdp) else {
        return;
    };
    assert!(
        have("nginx") && have("iperf3") && have("sha256sum"),
        "nginx, iperf3 and coreutils are installed by tests/run.sh"
    );
    for ns in [&t.client, &t.gateway, &t.lan, &t.backends[0].ns] {
        jumbo(ns);
    }
    let dir = www_with("jumbo", &object(OBJECT_BYTES));
    let object_path = dir.path.join("www/big");
    let want = sha256_hex(&object_path);
    let _nginx = bulk_server(&t, &dir, backend_addr(0).into(), BULK_PORT);
    let gw = gateway_with(&t, &config(&t), &[]);

    // Download through the VIP.
    let fetched = dir.path.join("fetched");
    let text = curl_ok(
        &t,
        &[
            "-sS",
            "--max-time",
            "60",
            "-o",
            fetched.to_str().expect("utf-8 path"),
            "-w",
            "%{http_code} %{size_download}",
            &format!("http://{VIP}:{BULK_PORT}/big"),
        ],
    );
    assert_eq!(text, format!("200 {OBJECT_BYTES}"));
    assert_eq!(sha256_hex(&fetched), want, "the download arrived intact");
    std::thread::sleep(Duration::from_millis(600));
    let after_download = stats(&gw);

    // Upload through the VIP (nginx stores it).
    put(&t, &dir, &format!("http://{VIP}:{BULK_PORT}"));

    // iperf3, bounded: 3 s, one stream, the jumbo MSS.
    let (received, bps) = iperf(&t, Some(IPERF_MSS));
    println!("iperf3 through the VIP, MTU 9000, AF_XDP: {received} bytes, {bps:.0} bit/s");
    assert!(received > 0);

    // Ping the node with an 8000-byte payload (8028-byte IP packets).
    let out = t
        .client_exec(
            "ping",
            &[
                "-c",
                "3",
                "-W",
                "2",
                "-s",
                "8000",
                "-M",
                "do",
                &NODE_ADDR.to_string(),
            ],
        )
        .expect("ping runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "ping -s 8000: {text}");
    assert!(text.contains("8008 bytes from"), "{text}");

    std::thread::sleep(Duration::from_millis(600));
    let report = stats(&gw);
    for port in ["outside", "inside"] {
        for counter in ["rx_too_big", "rx_bad_chain", "tx_too_big"] {
            assert_eq!(
                port_counter(&report, port, counter),
                0,
                "{port} {counter}: {report}"
            );
        }
    }
    // The download came in on the inside port as jumbo segments.
    let frames = port_counter(&after_download, "inside", "rx_frames");
    let bytes = port_counter(&after_download, "inside", "rx_bytes");
    println!("inside port during the download: {frames} frames, {bytes} bytes");
    assert!(
        frames > 0 && bytes / frames > 4000,
        "average inside frame {} bytes: {after_download}",
        bytes / frames.max(1)
    );
}

/// Figures: one TCP flow (iperf3, 3 s) through the VIP on AF_XDP at MTU
/// 1500 and 9000, then through the kernel path at both, in one topology
/// and one run (ratios are what a busy machine can give). Asserts only
/// that every run moved data.
#[test]
fn single_flow_tcp_at_mtu_1500_and_9000_against_the_kernel() {
    let test = "jumbo::single_flow_tcp_at_mtu_1500_and_9000_against_the_kernel";
    let Some(t) = topology_on(test, 1, DriverKind::Afxdp) else {
        return;
    };
    let namespaces = [&t.client, &t.gateway, &t.lan, &t.backends[0].ns];
    let mut rows = Vec::new();
    for mtu in ["1500", "9000"] {
        for ns in namespaces {
            set_mtu(ns, mtu);
        }
        let gw = gateway_with(&t, &config(&t), &[]);
        let (bytes, bps) = iperf(&t, None);
        assert!(bytes > 0);
        let report = stats(&gw);
        let chains_dropped = port_counter(&report, "inside", "rx_bad_chain");
        gw.stop(Duration::from_secs(10)).expect("stop the gateway");
        assert_eq!(chains_dropped, 0);
        rows.push((format!("AF_XDP, MTU {mtu}"), bps));
    }
    if let Some(why) = kernel_path::unavailable() {
        portico_tests::skip(test, why);
    } else {
        kernel_path::install(&t).expect("kernel path");
        t.gateway
            .exec(
                "nft",
                &[
                    "add",
                    "rule",
                    "ip",
                    "portico_demo_kernel_path",
                    "prerouting-tcp",
                    "ip",
                    "daddr",
                    &VIP.to_string(),
                    "tcp",
                    "dport",
                    "5201",
                    "dnat",
                    "to",
                    &format!("{}:5201", backend_addr(0)),
                ],
            )
            .expect("iperf3's DNAT");
        for mtu in ["1500", "9000"] {
            for ns in namespaces {
                set_mtu(ns, mtu);
            }
            let (bytes, bps) = iperf(&t, None);
            assert!(bytes > 0);
            rows.push((format!("kernel nftables, MTU {mtu}"), bps));
        }
    }
    let base = rows.first().map_or(1.0, |r| r.1);
    for (what, bps) in &rows {
        println!(
            "single-flow TCP ({}): {what}: {:.2} Gbit/s = {:.2}x AF_XDP at MTU 1500",
            if cfg!(debug_assertions) {
                "debug build"
            } else {
                "release build"
            },
            bps / 1e9,
            bps / base
        );
    }
}
