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

mod common;

use common::bulk::{bulk_server, object};
use common::{gateway_with, number, port_counter, stats, topology};
use portico::demo::topology::{ServiceOptions, Topology, VIP, backend_addr};
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
    let dir = TempDir::new("gso-bulk").expect("temp dir");
    std::fs::create_dir_all(dir.path.join("www")).expect("www dir");
    let want = object(OBJECT_BYTES);
    std::fs::write(dir.path.join("www/big"), &want).expect("write the object");
    let _nginx = bulk_server(&t, &dir, BULK_PORT);
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
