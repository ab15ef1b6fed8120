//! End-to-end: `pktgen sink --echo` in one namespace, `pktgen send
//! --expect-echo` in another, over a veth pair without IPv4 addresses (the
//! kernels drop the probes; only the af_packet sockets see them). Needs root
//! and `ip netns`; otherwise it prints a loud SKIPPED line and returns.

use portico::netns::{Netns, require_root, unique_name, veth, wait_until};
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

/// Sink echoes, sender sends `COUNT` probes of `proto` at 20 kpps over 100
/// flows; `frame_bytes` is the default frame size for `proto`.
fn send_with_echo(proto: &str, frame_bytes: u64) {
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
    // Wait until the sink's packet socket is bound (the driver creates it
    // with protocol 0 and binds it to an interface only once its rings are
    // mapped): a line of /proc/net/packet with a protocol and an ifindex.
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
                "20000",
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
