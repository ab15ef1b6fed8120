//! Flow-affine steering end to end (issue 16): `portico run` with two
//! workers on af_packet, real HTTP from 17 client addresses (wrk with
//! keep-alive from the main one, curl with a connection per request from
//! 16 more, so both workers own clients and SNAT port slices) through the
//! VIP and the NodePort to nginx. The fanout program must deliver almost
//! every frame to the worker that owns its flow: handoffs at most 1 % of
//! the frames received, and both workers did work. On AF_XDP the redirect
//! program computes the same owner and every worker has a socket on every
//! queue (see DESIGN.md): the same bound.
//!
//! The same over IPv6 (`curl -6` from 17 IPv6 client addresses to
//! `web6`, the IPv6 VIP with full NAT from the IPv6 SNAT address): the
//! program's IPv6 part steers clients by `client_port_hash6` and the
//! backends' replies by the SNAT port's slice.
//!
//! One client address (the compare rig's loads): its connections are
//! owned by address and port, so both workers receive a share, with the
//! same bound on handoffs. With ClientIP affinity (and the client address
//! preserved, so the backends' replies are steered by their endpoint) the
//! same client's connections stay on one worker and one backend, and none
//! is handed off.

mod common;

use common::{curl, gateway, number, parse_curl, stats, tally};
use dataplane::steering::{client_hash, client_hash6};
use portico::demo::topology::{
    CLIENT_ADDR, CLIENT_ADDR6, DriverKind, NODE_ADDR, NODE_PORT, ServiceOptions, Topology, VIP,
    VIP6,
};
use portico_tests::have;
use serde_json::Value;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

/// Extra client addresses added to the client's interface.
const EXTRA_CLIENTS: u8 = 16;
/// Requests per extra client (half to the VIP, half to the NodePort).
const REQUESTS_PER_CLIENT: usize = 40;
const WRK_SECONDS: u64 = 3;

/// Load from many clients; returns the extra client addresses.
fn load(t: &Topology) -> Vec<Ipv4Addr> {
    let mut clients = Vec::new();
    for i in 1..=EXTRA_CLIENTS {
        let [a, b, c, d] = CLIENT_ADDR.octets();
        let addr = Ipv4Addr::new(a, b, c, d + i);
        t.client
            .exec(
                "ip",
                &["addr", "add", &format!("{addr}/24"), "dev", &t.client_if],
            )
            .expect("add a client address");
        clients.push(addr);
    }
    if have("wrk") {
        wrk(t, 8);
    } else {
        // Keep-alive without wrk: one curl, many requests on one connection.
        let bodies = curl(t, &format!("http://{VIP}/"), 200, false);
        assert!(bodies.iter().all(Option::is_some), "{bodies:?}");
    }
    for addr in &clients {
        for url in [
            format!("http://{VIP}/"),
            format!("http://{NODE_ADDR}:{NODE_PORT}/"),
        ] {
            requests_from(t, &addr.to_string(), &url, REQUESTS_PER_CLIENT / 2, &[]);
        }
    }
    clients
}

/// wrk from the client's main address to the VIP: keep-alive on
/// `connections` connections for [`WRK_SECONDS`], without socket errors.
fn wrk(t: &Topology, connections: u32) {
    let out = t
        .client
        .spawn(
            "wrk",
            &[
                "-t1",
                &format!("-c{connections}"),
                &format!("-d{WRK_SECONDS}s"),
                "--timeout",
                "2s",
                &format!("http://{VIP}/"),
            ],
        )
        .expect("start wrk")
        .wait_output(Duration::from_secs(WRK_SECONDS + 60))
        .expect("wrk finishes");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && !text.contains("Socket errors"),
        "wrk: {text}"
    );
}

/// `n` requests from the client address `addr` to `url` with curl, a
/// connection each (`extra`: more curl options); every one answered.
fn requests_from(t: &Topology, addr: &str, url: &str, n: usize, extra: &[&str]) {
    let mut args: Vec<&str> = extra.to_vec();
    args.extend([
        "-sS",
        "--max-time",
        "5",
        "--interface",
        addr,
        "-H",
        "Connection: close",
        "-w",
        "\n== %{http_code}\n",
    ]);
    args.extend(std::iter::repeat_n(url, n));
    let out = t.client.exec("curl", &args).expect("curl runs");
    let bodies = parse_curl(&String::from_utf8_lossy(&out.stdout), n);
    assert!(
        bodies.iter().all(Option::is_some),
        "{addr} -> {url}: {bodies:?}"
    );
}

/// Run the load on `driver`; with `max_percent`, assert that at most that
/// share of the received frames was handed off.
fn steering_under(test: &str, driver: DriverKind, max_percent: Option<u64>) {
    let Some(t) = common::topology_on(test, 3, driver) else {
        return;
    };
    let gw = gateway(&t, &ServiceOptions::all(&t));
    let clients = load(&t);
    // The clients spread over both workers even by their address alone
    // (`client_port_hash` with the port is the owner).
    let owners: std::collections::HashSet<u8> =
        clients.iter().map(|a| client_hash(*a, 2)).collect();
    assert_eq!(owners.len(), 2, "the clients spread over both workers");
    // Let the workers publish their counters.
    std::thread::sleep(Duration::from_millis(500));
    check_handoffs(test, &stats(&gw), max_percent);
}

/// Print the handoff counters of `s` and check them: real traffic, both
/// workers own flows, every handoff counted by cause, no failed install;
/// with `max_percent`, at most that share of the received frames handed
/// off.
fn check_handoffs(test: &str, s: &Value, max_percent: Option<u64>) {
    let rx = number(s, "/total/rx_packets");
    let handoff = number(s, "/total/handoff_out");
    let by_cause = number(s, "/total/handoff_snat_reply")
        + number(s, "/total/handoff_client")
        + number(s, "/total/handoff_icmp_error");
    let w0 = number(s, "/workers/0/flows_created");
    let w1 = number(s, "/workers/1/flows_created");
    eprintln!(
        "{test}: rx {rx} packets, handed off {handoff} ({:.2} %; by cause: snat reply {}, \
         client {}, icmp error {}), flows created per worker {w0} / {w1}, steering programs \
         installed {}",
        handoff as f64 * 100.0 / rx.max(1) as f64,
        number(s, "/total/handoff_snat_reply"),
        number(s, "/total/handoff_client"),
        number(s, "/total/handoff_icmp_error"),
        number(s, "/total/steering_installs"),
    );
    for w in 0..2 {
        eprintln!(
            "  worker {w}: rx {}, handoff out {} (snat reply {}, client {}), in {}",
            number(s, &format!("/workers/{w}/rx_packets")),
            number(s, &format!("/workers/{w}/handoff_out")),
            number(s, &format!("/workers/{w}/handoff_snat_reply")),
            number(s, &format!("/workers/{w}/handoff_client")),
            number(s, &format!("/workers/{w}/handoff_in")),
        );
    }
    assert!(rx > 2_000, "real traffic went through: {rx} packets");
    assert!(w0 > 0 && w1 > 0, "both workers own flows: {w0} / {w1}");
    assert!(handoff <= by_cause, "every handoff has a cause: {s}");
    assert!(number(s, "/total/steering_install_failures") == 0, "{s}");
    if let Some(max_percent) = max_percent {
        assert!(
            handoff * 100 <= rx * max_percent,
            "at most {max_percent} % handed off: {handoff} of {rx} packets"
        );
        assert!(number(s, "/total/steering_installs") >= 1, "{s}");
    }
}

/// IPv6 load: `curl -6` from [`EXTRA_CLIENTS`] + 1 client addresses, each
/// [`REQUESTS_PER_CLIENT`] requests with a connection each, to `web6`;
/// returns the client addresses.
fn load6(t: &Topology) -> Vec<Ipv6Addr> {
    let mut clients = vec![CLIENT_ADDR6];
    for i in 1..=u16::from(EXTRA_CLIENTS) {
        let addr = Ipv6Addr::from_bits(CLIENT_ADDR6.to_bits() + u128::from(i));
        t.client
            .exec(
                "ip",
                &[
                    "-6",
                    "addr",
                    "add",
                    &format!("{addr}/64"),
                    "dev",
                    &t.client_if,
                    "nodad",
                ],
            )
            .expect("add a client address");
        clients.push(addr);
    }
    let url = format!("http://[{VIP6}]/");
    for addr in &clients {
        requests_from(
            t,
            &addr.to_string(),
            &url,
            REQUESTS_PER_CLIENT,
            &["-6", "-g"],
        );
    }
    clients
}

/// [`steering_under`] with IPv6 traffic only.
fn steering6_under(test: &str, driver: DriverKind, max_percent: Option<u64>) {
    let Some(mut t) = common::topology_on(test, 3, driver) else {
        return;
    };
    t.enable_ipv6().expect("IPv6 in the topology");
    let gw = gateway(&t, &ServiceOptions::all(&t));
    let clients = load6(&t);
    let owners: std::collections::HashSet<u8> =
        clients.iter().map(|a| client_hash6(*a, 2)).collect();
    assert_eq!(owners.len(), 2, "the clients spread over both workers");
    std::thread::sleep(Duration::from_millis(500));
    check_handoffs(test, &stats(&gw), max_percent);
}

#[test]
fn af_packet_steering_delivers_frames_to_their_owner() {
    steering_under(
        "steering::af_packet_steering_delivers_frames_to_their_owner",
        DriverKind::Afpacket,
        Some(1),
    );
}

/// AF_XDP steers in the XDP program: it computes the owner as af_packet's
/// fanout program does and redirects to the owner's socket on the frame's
/// queue (every worker has one on every queue; see DESIGN.md, "Workers,
/// handoff and steering"), so frames arriving on the other worker's queue
/// are no longer handed off.
#[test]
fn afxdp_steering_delivers_frames_to_their_owner_on_either_queue() {
    steering_under(
        "steering::afxdp_steering_delivers_frames_to_their_owner_on_either_queue",
        DriverKind::Afxdp,
        Some(1),
    );
}

#[test]
fn af_packet_steers_ipv6_frames_to_their_owner() {
    steering6_under(
        "steering::af_packet_steers_ipv6_frames_to_their_owner",
        DriverKind::Afpacket,
        Some(1),
    );
}

/// AF_XDP over IPv6: the program steers IPv6 frames by `owner6`.
#[test]
fn afxdp_steers_ipv6_frames_to_their_owner_on_either_queue() {
    steering6_under(
        "steering::afxdp_steers_ipv6_frames_to_their_owner_on_either_queue",
        DriverKind::Afxdp,
        Some(1),
    );
}

/// Load from the one client address: wrk with keep-alive on 16
/// connections to the VIP, then curl with a connection per request to the
/// VIP and the NodePort.
fn load_one_client(t: &Topology) {
    if have("wrk") {
        wrk(t, 16);
    }
    let client = CLIENT_ADDR.to_string();
    for url in [
        format!("http://{VIP}/"),
        format!("http://{NODE_ADDR}:{NODE_PORT}/"),
    ] {
        requests_from(t, &client, &url, 4 * REQUESTS_PER_CLIENT, &[]);
    }
}

/// One client address, many connections, two workers on `driver`: each
/// worker receives at least a tenth of the frames, at most 1 % are
/// handed off.
fn one_client_under(test: &str, driver: DriverKind) {
    let Some(t) = common::topology_on(test, 3, driver) else {
        return;
    };
    let gw = gateway(&t, &ServiceOptions::all(&t));
    load_one_client(&t);
    std::thread::sleep(Duration::from_millis(500));
    let s = stats(&gw);
    check_handoffs(test, &s, Some(1));
    let rx = number(&s, "/total/rx_packets");
    for w in 0..2 {
        let mine = number(&s, &format!("/workers/{w}/rx_packets"));
        assert!(
            mine * 10 >= rx,
            "worker {w} receives a share of one client's frames: {mine} of {rx}"
        );
    }
}

#[test]
fn af_packet_spreads_one_clients_connections_over_both_workers() {
    one_client_under(
        "steering::af_packet_spreads_one_clients_connections_over_both_workers",
        DriverKind::Afpacket,
    );
}

#[test]
fn afxdp_spreads_one_clients_connections_over_both_workers() {
    one_client_under(
        "steering::afxdp_spreads_one_clients_connections_over_both_workers",
        DriverKind::Afxdp,
    );
}

/// ClientIP affinity without SNAT, two workers on `driver`: one client's
/// connections (many ports) to the VIP and the NodePort all reach one
/// backend, and no frame of them is handed off (the client's frames and
/// the backends' replies are both steered by the client address alone).
fn affinity_under(test: &str, driver: DriverKind) {
    let Some(t) = common::topology_on(test, 3, driver) else {
        return;
    };
    let options = ServiceOptions {
        client_ip_affinity: true,
        snat: false,
        ..ServiceOptions::all(&t)
    };
    let gw = gateway(&t, &options);
    // The warm-up request of `gateway` may precede the first program.
    std::thread::sleep(Duration::from_millis(500));
    let before = stats(&gw);
    for url in [
        format!("http://{VIP}/"),
        format!("http://{NODE_ADDR}:{NODE_PORT}/"),
    ] {
        let (per_backend, _, failed) = tally(&curl(&t, &url, 60, true));
        assert_eq!(failed, 0, "{url}");
        assert_eq!(per_backend.len(), 1, "{url}: one backend: {per_backend:?}");
    }
    std::thread::sleep(Duration::from_millis(500));
    let after = stats(&gw);
    let delta = |p: &str| number(&after, p) - number(&before, p);
    eprintln!(
        "{test}: rx {} packets (worker 0 {}, worker 1 {}), handed off {}",
        delta("/total/rx_packets"),
        delta("/workers/0/rx_packets"),
        delta("/workers/1/rx_packets"),
        delta("/total/handoff_out"),
    );
    assert!(
        delta("/total/rx_packets") > 500,
        "real traffic went through"
    );
    assert_eq!(delta("/total/handoff_out"), 0, "no handoffs");
    let flows = [0, 1].map(|w| delta(&format!("/workers/{w}/flows_created")));
    assert!(
        flows.iter().sum::<u64>() >= 120 && flows.contains(&0),
        "every flow of the client on one worker: {flows:?}"
    );
    assert_eq!(number(&after, "/total/steering_install_failures"), 0);
}

#[test]
fn af_packet_keeps_an_affinity_client_on_one_worker_without_handoffs() {
    affinity_under(
        "steering::af_packet_keeps_an_affinity_client_on_one_worker_without_handoffs",
        DriverKind::Afpacket,
    );
}

#[test]
fn afxdp_keeps_an_affinity_client_on_one_worker_without_handoffs() {
    affinity_under(
        "steering::afxdp_keeps_an_affinity_client_on_one_worker_without_handoffs",
        DriverKind::Afxdp,
    );
}
