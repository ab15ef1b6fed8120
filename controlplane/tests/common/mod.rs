//! Shared by the namespace tests of `portico run` (run.rs, metrics.rs): the
//! built binary, a client/gateway/backend topology on two veth pairs, and
//! small probes (stats, curl, MAC).
//!
//! ```text
//!   client ns                 gateway ns (portico run)                         backend ns
//!   192.0.2.100/24 ── veth ── [outside]   [inside]                ── veth ── 10.1.0.10/24
//! ```
#![allow(dead_code)]

use portico_tests::{Netns, unique_name, veth};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_portico");

/// Run the built `portico` with `args` and wait for it.
pub fn portico(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("portico runs")
}

/// Namespaces and the gateway's interface names.
pub struct Topology {
    pub client: Netns,
    pub gateway: Netns,
    pub backend: Netns,
    pub outside: String,
    pub inside: String,
    pub backend_if: String,
}

/// Client, gateway and backend namespaces; the gateway's two veth ends carry
/// no address (Portico owns its addresses).
pub fn topology(prefix: &str) -> Topology {
    let client = Netns::new(&format!("{prefix}c")).expect("client netns");
    let gateway = Netns::new(&format!("{prefix}g")).expect("gateway netns");
    let backend = Netns::new(&format!("{prefix}b")).expect("backend netns");
    let (outside, client_if) = (unique_name("go"), unique_name("co"));
    let (inside, backend_if) = (unique_name("gi"), unique_name("bi"));
    veth(
        &gateway,
        &outside,
        None,
        &client,
        &client_if,
        Some("192.0.2.100/24"),
    )
    .expect("outside veth");
    veth(
        &gateway,
        &inside,
        None,
        &backend,
        &backend_if,
        Some("10.1.0.10/24"),
    )
    .expect("inside veth");
    Topology {
        client,
        gateway,
        backend,
        outside,
        inside,
        backend_if,
    }
}

/// The MAC of `ifname` inside `ns`.
pub fn mac_of(ns: &Netns, ifname: &str) -> String {
    let out = ns
        .exec("ip", &["-o", "link", "show", ifname])
        .expect("ip link show");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .unwrap_or_else(|| panic!("no MAC in {text}"))
        .to_owned()
}

/// `portico stats --json`, parsed, or `None` while the gateway is not up.
pub fn stats(socket: &Path) -> Option<Value> {
    let out = portico(&[
        "stats",
        "--json",
        "--admin-socket",
        socket.to_str().expect("utf-8 path"),
    ]);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("stats --json prints JSON"))
}

pub fn number(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{pointer} missing in {v}"))
}

/// `curl -sS URL` inside `ns`; the trimmed body on success.
pub fn curl(ns: &Netns, url: &str) -> Option<String> {
    let out = ns
        .exec_unchecked("curl", &["-sS", "--max-time", "2", url])
        .expect("curl runs");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Wait up to 15 s for `f`; on timeout fail with the gateway's log.
pub fn wait_until(what: &str, log: &Path, f: impl FnMut() -> bool) {
    let ok = portico_tests::wait_until(Duration::from_secs(15), f);
    assert!(
        ok,
        "timed out waiting until {what}; gateway log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}
