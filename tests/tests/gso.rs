//! GSO/GRO pass-through on af_packet (`[dataplane.afpacket] gso = true`):
//! a large object served by nginx on a backend, fetched through the VIP
//! with curl, crosses the gateway as TCP super-packets (the driver counts
//! them on both ports) and arrives byte for byte; with `gso` off (the
//! default, offloads off on the peers) the same transfer takes the MTU-frame
//! path and counts no super-packet.
//!
//! Two sources of super-packets on veth, each tested: the peers' offloads
//! back on ([`Topology::offloads_on`]): TCP leaves the backend as 64 KiB
//! skbs (TSO) and crosses the bridge and the veth whole; or the peers
//! segmenting (offloads off): the gateway port's GRO, which `gso` turns on,
//! merges the MTU frames again (veth's NAPI GRO). Either way the skb
//! reaches the gateway's packet socket whole, with its `virtio_net_hdr`.
//!
//! Over IPv6 (`TcpV6` super-packets): the same object downloaded and
//! uploaded (nginx WebDAV `PUT`) through the IPv6 VIP with full NAT from
//! the IPv6 SNAT address, sha256-equal, and one `iperf3 -6` flow; the
//! ports count the super-packets both ways.

mod common;

use common::bulk::{bulk_server, curl, object, put, www_with};
use common::{gateway_with, number, port_counter, stats, topology};
use portico::demo::topology::{ServiceOptions, Topology, VIP, VIP6, backend_addr, backend_addr6};
use portico_tests::TempDir;
use serde_json::Value;
use std::time::Duration;

/// The object: 24 MiB, a few hundred super-packets.
const OBJECT_BYTES: usize = 24 << 20;
/// The bulk service's port (VIP and backend).
const BULK_PORT: u16 = 9090;

/// The topology's configuration plus a `bulk` service VIP:9090 → backend
/// 0:9090, `workers` workers, `gso` as given.
fn config(t: &Topology, gso: bool, workers: u32) -> String {
    let options = ServiceOptions {
        workers,
        backends: vec![0],
        dataplane_extra: format!("[dataplane.afpacket]\ngso = {gso}\n"),
        ..ServiceOptions::all(t)
    };
    format!(
        "{}\n[[service]]\nname = \"bulk\"\nprotocol = \"tcp\"\nvip = \"{VIP}\"\nport = {BULK_PORT}\n\
         snat = true\nbackends = [{{ address = \"{}\", port = {BULK_PORT} }}]\n",
        t.config_toml(&options),
        backend_addr(0)
    )
}

/// Fetch the object through the VIP; returns its bytes.
fn fetch(t: &Topology, dir: &TempDir) -> Vec<u8> {
    let out_path = dir.path.join("fetched");
    let url = format!("http://{VIP}:{BULK_PORT}/big");
    let out = t
        .client_exec(
            "curl",
            &[
                "-sS",
                "--max-time",
                "60",
                "-o",
                out_path.to_str().expect("utf-8 path"),
                "-w",
                "%{http_code} %{size_download}",
                &url,
            ],
        )
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && text.starts_with("200 "),
        "curl: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(&out_path).expect("read the fetched object")
}

/// How the transfer is set up.
struct Setup {
    gso: bool,
    workers: u32,
    /// GRO/GSO/TSO back on at the peers (else off, as the topology leaves
    /// them).
    peers_offloads: bool,
}

fn transfer(test: &str, s: Setup) -> Option<Value> {
    let t = topology(test, 1)?;
    if s.peers_offloads {
        t.offloads_on().expect("offloads on at the peers");
    }
    let (gso, workers) = (s.gso, s.workers);
    let want = object(OBJECT_BYTES);
    let dir = www_with("gso-bulk", &want);
    let _nginx = bulk_server(&t, &dir, backend_addr(0).into(), BULK_PORT);
    let gw = gateway_with(&t, &config(&t, gso, workers), &[]);
    let got = fetch(&t, &dir);
    assert_eq!(got.len(), want.len(), "the whole object arrived");
    assert!(got == want, "the object arrived intact");
    // The counters are published a few times a second.
    std::thread::sleep(Duration::from_millis(600));
    let report = stats(&gw);
    assert_eq!(number(&report, "/total/drops/gso_malformed"), 0, "{report}");
    Some(report)
}

#[test]
fn gso_on_carries_super_packets_through_the_gateway_intact() {
    let Some(report) = transfer(
        "gso::gso_on_carries_super_packets_through_the_gateway_intact",
        Setup {
            gso: true,
            workers: 1,
            peers_offloads: true,
        },
    ) else {
        return;
    };
    // The backend's data reaches the inside port as super-packets and
    // leaves the outside port as super-packets (the peer veth's stack
    // takes them whole).
    let rx = port_counter(&report, "inside", "rx_gso_frames");
    let tx = port_counter(&report, "outside", "tx_gso_frames");
    println!("gso on: inside rx_gso_frames {rx}, outside tx_gso_frames {tx}");
    assert!(rx > 0, "no super-packet received: {report}");
    assert!(tx > 0, "no super-packet sent: {report}");
    assert_eq!(port_counter(&report, "inside", "rx_offload_bad"), 0);
    assert_eq!(port_counter(&report, "inside", "rx_too_big"), 0);
}

#[test]
fn gso_off_carries_the_same_object_in_mtu_frames() {
    let Some(report) = transfer(
        "gso::gso_off_carries_the_same_object_in_mtu_frames",
        Setup {
            gso: false,
            workers: 1,
            peers_offloads: false,
        },
    ) else {
        return;
    };
    assert_eq!(port_counter(&report, "inside", "rx_gso_frames"), 0);
    assert_eq!(port_counter(&report, "outside", "tx_gso_frames"), 0);
    // 24 MiB in at most MTU-size frames.
    assert!(port_counter(&report, "inside", "rx_frames") > (OBJECT_BYTES / 1500) as u64);
}

/// Two workers (the steering fanout program, handoff as the fallback: a
/// super-packet handed over is cut into segments first): the object still
/// arrives intact as super-packets.
#[test]
fn gso_on_with_two_workers_carries_the_object_intact() {
    let Some(report) = transfer(
        "gso::gso_on_with_two_workers_carries_the_object_intact",
        Setup {
            gso: true,
            workers: 2,
            peers_offloads: true,
        },
    ) else {
        return;
    };
    assert!(
        port_counter(&report, "inside", "rx_gso_frames") > 0,
        "{report}"
    );
    assert_eq!(number(&report, "/total/drops/handoff_full"), 0, "{report}");
}

/// The peers segment everything themselves (TSO/GSO/GRO off, as the
/// topology leaves them): the super-packets then come from the gateway
/// port's own GRO, which `gso` turns on — on a veth that enables its NAPI
/// path, whose GRO merges the MTU frames the bridge forwards.
#[test]
fn gso_on_gets_super_packets_from_veth_gro_when_the_peers_segment() {
    let Some(report) = transfer(
        "gso::gso_on_gets_super_packets_from_veth_gro_when_the_peers_segment",
        Setup {
            gso: true,
            workers: 1,
            peers_offloads: false,
        },
    ) else {
        return;
    };
    assert!(
        port_counter(&report, "inside", "rx_gso_frames") > 0,
        "{report}"
    );
    assert!(
        port_counter(&report, "outside", "tx_gso_frames") > 0,
        "{report}"
    );
}

/// The iperf3 service's port (VIP and backend).
const IPERF_PORT: u16 = 5201;
/// The iperf3 flow's length.
const IPERF_SECONDS: u64 = 3;

/// IPv6 through `gso = true`, peers' offloads on: download and upload of
/// the object through `[VIP6]:9090` (full NAT from the IPv6 SNAT address),
/// byte for byte, and one `iperf3 -6` flow; super-packets counted on both
/// ports in both directions, none refused.
#[test]
fn gso_on_carries_ipv6_super_packets_both_ways_intact() {
    let test = "gso::gso_on_carries_ipv6_super_packets_both_ways_intact";
    let Some(mut t) = topology(test, 1) else {
        return;
    };
    if !portico_tests::require_programs(
        test,
        &["nginx", "iperf3", "sha256sum"],
        "tests/run.sh installs them",
    ) {
        return;
    }
    t.enable_ipv6().expect("IPv6 in the topology");
    t.offloads_on().expect("offloads on at the peers");
    let want = object(OBJECT_BYTES);
    let dir = www_with("gso-bulk6", &want);
    let _nginx = bulk_server(&t, &dir, backend_addr6(0).into(), BULK_PORT);
    let b6 = backend_addr6(0);
    let iperf_server = t.backends[0]
        .ns
        .spawn(
            "iperf3",
            &[
                "-s",
                "-1",
                "-B",
                &b6.to_string(),
                "-p",
                &IPERF_PORT.to_string(),
            ],
        )
        .expect("start iperf3 -s");
    let config = format!(
        "{}\n[[service]]\nname = \"bulk6\"\nprotocol = \"tcp\"\nvip = \"{VIP6}\"\nport = {BULK_PORT}\n\
         snat = true\nbackends = [{{ address = \"{b6}\", port = {BULK_PORT} }}]\n\
         \n[[service]]\nname = \"iperf6\"\nprotocol = \"tcp\"\nvip = \"{VIP6}\"\nport = {IPERF_PORT}\n\
         snat = true\nbackends = [{{ address = \"{b6}\", port = {IPERF_PORT} }}]\n",
        config(&t, true, 1)
    );
    let gw = gateway_with(&t, &config, &[]);
    let base = format!("http://[{VIP6}]:{BULK_PORT}");
    // Download.
    let fetched = dir.path.join("fetched");
    let fetched_s = fetched.to_str().expect("utf-8 path");
    let code = curl(&t, &["-o", fetched_s, &format!("{base}/big")]);
    assert_eq!(code, "200");
    let got = std::fs::read(&fetched).expect("read the fetched object");
    assert_eq!(got.len(), want.len(), "the whole object arrived");
    assert!(got == want, "the object arrived intact");
    // Upload: the client's TSO sends super-packets to the outside port.
    put(&t, &dir, &base);
    // One iperf3 flow, bounded in time.
    let out = t
        .client
        .spawn(
            "iperf3",
            &[
                "-6",
                "-c",
                &VIP6.to_string(),
                "-p",
                &IPERF_PORT.to_string(),
                "-t",
                &IPERF_SECONDS.to_string(),
                "--connect-timeout",
                "5000",
            ],
        )
        .expect("start iperf3 -c")
        .wait_output(Duration::from_secs(IPERF_SECONDS + 30))
        .expect("iperf3 finishes");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "iperf3: {text}");
    println!("iperf3 -6 through the gateway:\n{text}");
    drop(iperf_server);
    std::thread::sleep(Duration::from_millis(600));
    let report = stats(&gw);
    assert_eq!(number(&report, "/total/drops/gso_malformed"), 0, "{report}");
    let counters = [
        ("inside", "rx_gso_frames"),
        ("outside", "tx_gso_frames"),
        ("outside", "rx_gso_frames"),
        ("inside", "tx_gso_frames"),
    ];
    for (port, counter) in counters {
        let n = port_counter(&report, port, counter);
        println!("ipv6 gso on: {port} {counter} {n}");
        assert!(n > 0, "{port} {counter} is 0: {report}");
    }
    assert_eq!(port_counter(&report, "outside", "rx_offload_bad"), 0);
    assert_eq!(port_counter(&report, "inside", "rx_offload_bad"), 0);
}

/// An MTU step with `gso = true`: 1500 on the client's side and at the
/// backend, 1280 on the gateway's inside port and the LAN. The client's TSO sends `TcpV6` super-packets cut for 1500;
/// their segments do not fit the inside port, so the gateway answers
/// Packet Too Big (RFC 8200 §5, by segment size, not by the super-packet's
/// length), the client lowers its path MTU to 1280 and the upload
/// completes, still as super-packets.
#[test]
fn gso_on_ipv6_segments_over_the_egress_mtu_get_packet_too_big() {
    let test = "gso::gso_on_ipv6_segments_over_the_egress_mtu_get_packet_too_big";
    let Some(mut t) = topology(test, 1) else {
        return;
    };
    if !portico_tests::require_programs(test, &["nginx", "sha256sum"], "tests/run.sh installs them")
    {
        return;
    }
    t.enable_ipv6().expect("IPv6 in the topology");
    t.offloads_on().expect("offloads on at the peers");
    // 1280 on the gateway's inside port and the LAN; the backend keeps
    // 1500, so its MSS does not keep the client's segments small (the
    // gateway must).
    let mtu = |ns: &portico_tests::Netns, ifname: &str| {
        ns.exec("ip", &["link", "set", "dev", ifname, "mtu", "1280"])
            .expect("ip link set mtu");
    };
    mtu(&t.gateway, &t.inside_if);
    let out = t
        .lan
        .exec("ip", &["-o", "link", "show"])
        .expect("ip link show");
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(name) = line.split(": ").nth(1).and_then(|n| n.split('@').next())
            && name != "lo"
        {
            mtu(&t.lan, name);
        }
    }
    let dir = www_with("gso-mtu6", &object(OBJECT_BYTES));
    let b6 = backend_addr6(0);
    let _nginx = bulk_server(&t, &dir, b6.into(), BULK_PORT);
    let config = format!(
        "{}\n[[service]]\nname = \"bulk6\"\nprotocol = \"tcp\"\nvip = \"{VIP6}\"\nport = {BULK_PORT}\n\
         snat = true\nbackends = [{{ address = \"{b6}\", port = {BULK_PORT} }}]\n",
        config(&t, true, 1)
    );
    let gw = gateway_with(&t, &config, &[]);
    put(&t, &dir, &format!("http://[{VIP6}]:{BULK_PORT}"));
    std::thread::sleep(Duration::from_millis(600));
    let report = stats(&gw);
    let route = t
        .client
        .exec("ip", &["-6", "route", "get", &VIP6.to_string()])
        .expect("ip route get");
    let route = String::from_utf8_lossy(&route.stdout);
    assert!(
        route.contains("mtu 1280"),
        "the client's path MTU towards the VIP: {route:?}; stats {report}"
    );
    assert!(number(&report, "/total/icmp_errors_sent") > 0, "{report}");
    assert!(number(&report, "/total/drops/too_big") > 0, "{report}");
    assert_eq!(number(&report, "/total/drops/gso_malformed"), 0, "{report}");
    let rx = port_counter(&report, "outside", "rx_gso_frames");
    let tx = port_counter(&report, "inside", "tx_gso_frames");
    println!("ipv6 mtu step: outside rx_gso_frames {rx}, inside tx_gso_frames {tx}");
    assert!(
        tx > 0,
        "super-packets with 1208-byte segments went on: {report}"
    );
}
