//! Operating a dual-stack gateway (issue 17, "Operations"): `portico flows`
//! lists live IPv6 connections (from the workers' IPv6 conntrack tables)
//! and filters them by an `[address]:port` backend, `portico simulate
//! --live` of an IPv6 flow names the backend that serves it, and
//! `portico stats` counts the IPv6 flows on their own — against `portico
//! run` in the namespace topology with IPv6 on (`Topology::enable_ipv6`).

mod common;

use common::{PORTICO, established_from, gateway, portico, sample, scrape, stats_until, topology};
use portico::demo::topology::{
    BACKEND_HTTP_PORT, CLIENT_ADDR6, HTTP_PORT, SNAT_ADDR6, ServiceOptions, VIP6, backend_addr6,
};
use portico_tests::wait_until;
use serde_json::Value;
use std::net::SocketAddrV6;
use std::process::Output;
use std::time::Duration;

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("--json output")
}

#[test]
fn flows_and_simulate_live_show_ipv6_connections_and_their_backends() {
    let Some(mut t) = topology(
        "operate_ipv6::flows_and_simulate_live_show_ipv6_connections_and_their_backends",
        2,
    ) else {
        return;
    };
    t.enable_ipv6().expect("IPv6 in the topology");
    let gw = gateway(&t, &ServiceOptions::all(&t));
    let socket = gw.socket.to_str().expect("utf-8 path").to_owned();
    let vip6 = SocketAddrV6::new(VIP6, HTTP_PORT, 0, 0).to_string();

    // Connections held open to the IPv6 VIP (the first ones also resolve
    // NDP both ways: the tool retries within its duration).
    const CONNECTIONS: usize = 4;
    let _holder = t
        .client
        .spawn(
            PORTICO,
            &[
                "tool",
                "http-keepalive",
                "--target",
                &vip6,
                "--connections",
                &CONNECTIONS.to_string(),
                "--duration-ms",
                "10000",
                "--interval-ms",
                "200",
            ],
        )
        .expect("keep-alive client");

    let ours = |v: &Value| established_from(v, CLIENT_ADDR6.into());
    let mut listing = Value::Null;
    let seen = wait_until(Duration::from_secs(12), || {
        let out = portico(&[
            "flows",
            "--json",
            "--service",
            "web6",
            "--admin-socket",
            &socket,
        ]);
        listing = json(&out);
        ours(&listing).len() >= CONNECTIONS
    });
    assert!(
        seen,
        "never saw {CONNECTIONS} established IPv6 flows: {listing}"
    );
    let flows = ours(&listing);
    assert_eq!(flows.len(), CONNECTIONS, "{listing}");
    let backends: Vec<String> = (0..t.backends.len())
        .map(|i| SocketAddrV6::new(backend_addr6(i), BACKEND_HTTP_PORT, 0, 0).to_string())
        .collect();
    for f in &flows {
        assert_eq!(f["service"], "web6", "{f}");
        assert_eq!(f["orig_dst"], vip6.as_str(), "{f}");
        assert!(
            f["reply_dst"]
                .as_str()
                .is_some_and(|s| s.starts_with(&format!("[{SNAT_ADDR6}]:"))),
            "full NAT from the IPv6 SNAT address: {f}"
        );
        assert!(
            backends.iter().any(|b| f["backend"] == b.as_str()),
            "{f} not to one of {backends:?}"
        );
        assert_eq!(
            (f["replied"].as_bool(), f["snat"].as_bool()),
            (Some(true), Some(true))
        );
    }

    // The text listing, conntrack -L style, without brackets.
    let out = portico(&["flows", "--service", "web6", "--admin-socket", &socket]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("ESTABLISHED")
                && l.contains(&format!("src={CLIENT_ADDR6} dst={VIP6}"))),
        "{text}"
    );

    // The backend filter takes `[address]:port` and lists exactly that
    // backend's flows.
    let first = &flows[0];
    let backend = first["backend"].as_str().expect("backend").to_owned();
    let out = portico(&[
        "flows",
        "--json",
        "--backend",
        &backend,
        "--admin-socket",
        &socket,
    ]);
    let by_backend = json(&out);
    let rows = by_backend["flows"].as_array().expect("flows");
    assert!(
        rows.iter().any(|f| f["orig_src"] == first["orig_src"]),
        "{by_backend}"
    );
    assert!(
        rows.iter().all(|f| f["backend"] == backend.as_str()),
        "{by_backend}"
    );
    let out = portico(&[
        "flows",
        "--backend",
        "fd00:1::10:8080",
        "--admin-socket",
        &socket,
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "refused by the gateway: {out:?}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("[2001:db8:1::10]:8080"),
        "the error shows the IPv6 form: {out:?}"
    );

    // simulate --live of that connection's tuple: the live flow and a new
    // connection's choice (the same backend: the same 5-tuple hashes to
    // the same Maglev slot) both name the backend.
    let spec = format!("tcp {} -> {vip6}", first["orig_src"].as_str().expect("src"));
    let out = portico(&[
        "simulate",
        "--live",
        &spec,
        "--json",
        "--admin-socket",
        &socket,
    ]);
    let sim = json(&out);
    assert_eq!(sim["service"], "web6", "{sim}");
    assert_eq!(sim["backend"]["address"], backend.as_str(), "{sim}");
    assert_eq!(sim["existing"]["backend"], backend.as_str(), "{sim}");
    assert_eq!(sim["verdict"], "forward", "{sim}");
    let out = portico(&["simulate", "--live", &spec, "--admin-socket", &socket]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("backend    {backend}")), "{text}");
    assert!(text.contains("existing   tcp"), "{text}");

    // Stats count the IPv6 flows on their own.
    let report = stats_until(&gw, |s| {
        s["total"]["live_flows_v6"].as_u64().unwrap_or(0) >= CONNECTIONS as u64
    });
    assert!(
        report["total"]["live_flows_v6"].as_u64().unwrap_or(0) >= CONNECTIONS as u64,
        "{report}"
    );
    assert!(
        report["snat"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a["family"] == "ipv6" && a["address"] == SNAT_ADDR6.to_string().as_str()),
        "{report}"
    );
    // /metrics has the IPv6 part of the flows and the IPv6 SNAT address.
    let mut text = String::new();
    let counted = wait_until(Duration::from_secs(5), || {
        text = scrape(&t).unwrap_or_default();
        sample(&text, r#"portico_flows_live_by_family{family="ipv6"}"#)
            .is_some_and(|n| n >= CONNECTIONS as u64)
    });
    assert!(counted, "{text}");
    let series = format!(r#"portico_snat_ports_in_use{{snat_ip="{SNAT_ADDR6}",family="ipv6"}}"#);
    assert!(sample(&text, &series).is_some(), "{series}: {text}");
    drop(gw);
    drop(t);
}
