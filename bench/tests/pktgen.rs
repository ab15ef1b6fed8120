//! End-to-end: `pktgen sink --echo` in one namespace, `pktgen send
//! --expect-echo` in another, over a veth pair without IPv4 addresses (the
//! kernels drop the probes; only the af_packet sockets see them). Needs root
//! and `ip netns`; otherwise it prints a loud SKIPPED line and returns.

use portico_netns::{Netns, require_root, unique_name, veth, wait_until};
use serde_json::Value;
use std::time::Duration;

const PKTGEN: &str = env!("CARGO_BIN_EXE_pktgen");
const COUNT: u64 = 2000;

fn mac_of(ns: &Netns, ifname: &str) -> String {
    let out = ns
        .exec("cat", &[&format!("/sys/class/net/{ifname}/address")])
        .expect("read MAC");
    String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_string()
}

fn u64_at(v: &Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{path} missing in {v}"))
}

#[test]
fn udp_send_with_echo_through_a_sink_over_veth() {
    if require_root("udp_send_with_echo_through_a_sink_over_veth") {
        send_with_echo("udp", 64);
    }
}

#[test]
fn tcp_syn_send_with_echo_through_a_sink_over_veth() {
    if require_root("tcp_syn_send_with_echo_through_a_sink_over_veth") {
        send_with_echo("tcp-syn", 74);
    }
}

/// A sink and a `tcp-stream` sender over veth: every flow completes its
/// handshake and then exchanges data both ways; the per-second progress
/// line and the JSON summary are there.
#[test]
fn tcp_stream_handshakes_then_exchanges_data_through_a_sink() {
    if !require_root("tcp_stream_handshakes_then_exchanges_data_through_a_sink") {
        return;
    }
    let (client, server, c_if, server_mac, sink) = pair_with_sink();
    let out = client
        .exec(
            PKTGEN,
            &[
                "send",
                "--iface",
                &c_if,
                "--dst-mac",
                &server_mac,
                "--src",
                "10.0.0.1",
                "--dst",
                "10.9.0.1:9000",
                "--proto",
                "tcp-stream",
                "--flows",
                "50",
                "--size",
                "200",
                "--count",
                "8000",
                "--rate",
                "5000",
                "--duration-s",
                "8",
                "--json",
            ],
        )
        .expect("pktgen send");
    sink.signal("TERM").expect("stop sink");
    let sink_out = sink
        .wait_output(Duration::from_secs(5))
        .expect("sink exits");
    drop(server);
    let send: Value = serde_json::from_slice(&out.stdout).expect("send JSON");
    let progress = String::from_utf8_lossy(&out.stderr);
    eprintln!("send: {send}\nprogress:\n{progress}");
    assert_eq!(
        send.pointer("/proto").and_then(Value::as_str),
        Some("tcp-stream")
    );
    assert_eq!(u64_at(&send, "/sent"), 8000);
    assert!(
        progress.contains("handshakes"),
        "no progress line: {progress}"
    );
    // Every flow handshook once (SYN retransmits only on loss, which veth
    // between two af_packet sockets does not cause at 5 kpps).
    assert_eq!(u64_at(&send, "/stream/handshakes_completed"), 50);
    assert_eq!(u64_at(&send, "/stream/established_flows"), 50);
    let syns = u64_at(&send, "/stream/syns_sent");
    let data = u64_at(&send, "/stream/data_segments_sent");
    assert_eq!(syns + data, 8000);
    let echoed = u64_at(&send, "/stream/data_segments_echoed");
    let retransmits = u64_at(&send, "/stream/retransmits");
    assert!(
        echoed + retransmits >= data - 50,
        "{echoed} of {data} echoed"
    );
    assert!(echoed * 100 >= data * 95, "{echoed} of {data} echoed");
    // 200-byte frames: 200 - 14 - 20 - 20 payload bytes each way.
    assert_eq!(
        u64_at(&send, "/stream/payload_bytes_each_way"),
        echoed * 146
    );
    let sink: Value = serde_json::from_slice(&sink_out.stdout).expect("sink JSON");
    assert!(u64_at(&sink, "/echoed") >= syns.min(50) + echoed);
}

/// Two namespaces joined by a veth pair, a `sink --echo` bound on the
/// server side: (client, server, client interface, server MAC, sink).
fn pair_with_sink() -> (Netns, Netns, String, String, portico_netns::Process) {
    let client = Netns::new("pgc").expect("netns");
    let server = Netns::new("pgs").expect("netns");
    let (c_if, s_if) = (unique_name("pgc"), unique_name("pgs"));
    veth(&client, &c_if, None, &server, &s_if, None).expect("veth");
    let server_mac = mac_of(&server, &s_if);
    let sink = server
        .spawn(
            PKTGEN,
            &[
                "sink",
                "--iface",
                &s_if,
                "--echo",
                "--duration-s",
                "10",
                "--json",
            ],
        )
        .expect("spawn sink");
    wait_for_packet_socket(&server);
    (client, server, c_if, server_mac, sink)
}

/// Wait until the sink's packet socket is bound (the driver creates it
/// with protocol 0 and binds it to an interface only once its rings are
/// mapped): a line of /proc/net/packet with a protocol and an ifindex.
fn wait_for_packet_socket(server: &Netns) {
    assert!(
        wait_until(Duration::from_secs(3), || {
            server
                .exec("cat", &["/proc/net/packet"])
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout).lines().skip(1).any(|l| {
                        let f: Vec<&str> = l.split_whitespace().collect();
                        f.len() > 4 && f[3] != "0000" && f[4] != "0"
                    })
                })
                .unwrap_or(false)
        }),
        "sink never bound its packet socket"
    );
}

/// Sink echoes, sender sends `COUNT` probes of `proto` at 5 kpps over 100
/// flows (a rate a loaded 2-core machine echoes without ring overruns); `frame_bytes` is the default frame size for `proto`.
fn send_with_echo(proto: &str, frame_bytes: u64) {
    let (client, _server, c_if, server_mac, sink) = pair_with_sink();

    let sent = client
        .exec(
            PKTGEN,
            &[
                "send",
                "--iface",
                &c_if,
                "--dst-mac",
                &server_mac,
                "--src",
                "10.0.0.1",
                "--dst",
                "10.9.0.1:9000",
                "--proto",
                proto,
                "--flows",
                "100",
                "--count",
                &COUNT.to_string(),
                "--rate",
                "5000",
                "--duration-s",
                "8",
                "--expect-echo",
                "--json",
            ],
        )
        .expect("pktgen send");
    sink.signal("TERM").expect("stop sink");
    let sink_out = sink
        .wait_output(Duration::from_secs(5))
        .expect("sink exits");
    assert!(sink_out.status.success(), "sink failed: {sink_out:?}");

    let send: Value = serde_json::from_slice(&sent.stdout).expect("send JSON");
    let sink: Value = serde_json::from_slice(&sink_out.stdout).expect("sink JSON");
    eprintln!("send: {send}\nsink: {sink}");

    // Sender: exactly COUNT sent, echoes back ≥ 95 %, loss = sent - echoes.
    assert_eq!(send.pointer("/proto").and_then(Value::as_str), Some(proto));
    assert_eq!(u64_at(&send, "/sent"), COUNT);
    assert_eq!(u64_at(&send, "/sent_bytes"), COUNT * frame_bytes);
    let echoes = u64_at(&send, "/echo/received");
    assert!(echoes * 100 >= COUNT * 95, "{echoes} echoes of {COUNT}");
    assert!(echoes <= COUNT);
    let lost = u64_at(&send, "/echo/lost");
    assert_eq!(lost, COUNT - echoes);
    let ratio = send
        .pointer("/echo/loss_ratio")
        .and_then(Value::as_f64)
        .expect("loss_ratio");
    assert!((ratio - lost as f64 / COUNT as f64).abs() < 1e-9);

    // RTT percentiles present and ordered.
    let p = |k: &str| u64_at(&send, &format!("/echo/rtt/{k}"));
    assert_eq!(p("samples"), echoes);
    assert!(p("min_ns") > 0);
    assert!(p("min_ns") <= p("p50_ns"));
    assert!(p("p50_ns") <= p("p90_ns"));
    assert!(p("p90_ns") <= p("p99_ns"));
    assert!(p("p99_ns") <= p("max_ns"));

    // Sink: saw what the sender sent, loss consistent with its sequence
    // numbers, and echoed what it received.
    let received = u64_at(&sink, "/received");
    assert!(received >= echoes && received <= COUNT);
    assert_eq!(u64_at(&sink, "/received_bytes"), received * frame_bytes);
    assert_eq!(
        u64_at(&sink, "/lost"),
        u64_at(&sink, "/expected") - received
    );
    assert!(u64_at(&sink, "/expected") <= COUNT);
    assert_eq!(
        u64_at(&sink, "/echoed") + u64_at(&sink, "/echo_tx_failed"),
        received
    );
    assert_eq!(sink.pointer("/interrupted"), Some(&Value::Bool(true)));
}

/// `--proto syn-flood`: bare spoofed SYNs reach the other side (the sink
/// sees them as frames that are not probes), exactly `COUNT` of them, and
/// the argument checks refuse a flood without a subnet and a subnet
/// without the flood.
#[test]
fn syn_flood_sends_bare_spoofed_syns() {
    if !require_root("syn_flood_sends_bare_spoofed_syns") {
        return;
    }
    let (client, _server, c_if, server_mac, sink) = pair_with_sink();
    let base = [
        "send",
        "--iface",
        &c_if,
        "--dst-mac",
        &server_mac,
        "--dst",
        "10.9.0.1:80",
    ];
    let run = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        client.exec_unchecked(PKTGEN, &args).expect("run pktgen")
    };
    let no_cidr = run(&["--proto", "syn-flood", "--count", "1"]);
    assert!(!no_cidr.status.success(), "{no_cidr:?}");
    let no_flood = run(&["--src-cidr", "198.18.0.0/15", "--count", "1"]);
    assert!(!no_flood.status.success(), "{no_flood:?}");
    assert!(
        String::from_utf8_lossy(&no_flood.stderr).contains("syn-flood"),
        "{no_flood:?}"
    );
    let host_bits = run(&["--proto", "syn-flood", "--src-cidr", "198.18.0.1/15"]);
    assert!(!host_bits.status.success(), "{host_bits:?}");

    let sent = run(&[
        "--proto",
        "syn-flood",
        "--src-cidr",
        "198.18.0.0/15",
        "--seed",
        "7",
        "--count",
        &COUNT.to_string(),
        "--rate",
        "5000",
        "--duration-s",
        "8",
        "--json",
    ]);
    assert!(sent.status.success(), "{sent:?}");
    sink.signal("TERM").expect("stop sink");
    let sink_out = sink
        .wait_output(Duration::from_secs(5))
        .expect("sink exits");
    let send: Value = serde_json::from_slice(&sent.stdout).expect("send JSON");
    let sink: Value = serde_json::from_slice(&sink_out.stdout).expect("sink JSON");
    eprintln!("send: {send}\nsink: {sink}");
    assert_eq!(
        send.pointer("/proto").and_then(Value::as_str),
        Some("syn-flood")
    );
    assert_eq!(u64_at(&send, "/sent"), COUNT);
    assert_eq!(u64_at(&send, "/frame_bytes"), 54);
    // No probes: every SYN is an "other" frame to the sink (IPv6 and the
    // like may add a few).
    assert_eq!(u64_at(&sink, "/received"), 0);
    let other = u64_at(&sink, "/other_frames");
    assert!((COUNT * 95 / 100..=COUNT + 20).contains(&other), "{other}");
}
