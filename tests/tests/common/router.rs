//! BIRD 2 as the client's router in the demo topology, peering with the
//! gateway over the outside port (the BGP suites: `bgp.rs`, `kube_e2e.rs`).
//!
//! The session runs over the host path (issue 13 §1), as designed: the
//! outside port has the host address [`HOST_ADDR`] (on its TAP in the
//! gateway's namespace, nothing on the data veth), the BGP TCP connection
//! is the kernel's from there, and its frames go through the workers.
//! [`HOST_ADDR`] is the `source_address` and so the NEXT_HOP announced.

use portico::demo::topology::{CLIENT_ADDR, NODE_ADDR, Topology};
use portico_netns::bird::{Bird, BirdRoute};
use portico_tests::wait_until;
use std::time::Duration;

/// The router's AS; the gateway is in the same one (iBGP, so LOCAL_PREF
/// is sent).
pub const ROUTER_ASN: u32 = 65000;
/// BIRD's name for the session with the gateway.
pub const PROTOCOL: &str = "portico";
/// The outside port's host address (the host path suite's too): the BGP
/// source and NEXT_HOP.
pub const HOST_ADDR: &str = "192.0.2.2";

/// The outside port's IPv6 host address (on the same TAP; the host path
/// and the IPv6 BGP suites).
pub const HOST_ADDR6: &str = "2001:db8:2::2";
/// The client's IPv6 address on the outside link (see [`client_ipv6`]).
pub const CLIENT_ADDR6: &str = "2001:db8:2::100";

/// `config` (the topology's) with [`HOST_ADDR`] and [`HOST_ADDR6`] on the
/// outside port.
pub fn with_dual_host_addresses(config: &str) -> String {
    let one = format!("host_addresses = [\"{HOST_ADDR}/24\"]");
    let config = with_host_address(config);
    config.replacen(
        &one,
        &format!("host_addresses = [\"{HOST_ADDR}/24\", \"{HOST_ADDR6}/64\"]"),
        1,
    )
}

/// IPv6 on in the client namespace (the topology turns it off) with
/// [`CLIENT_ADDR6`]/64 on the outside link, usable at once (`nodad`).
pub fn client_ipv6(t: &Topology) {
    for key in [
        "net.ipv6.conf.all.disable_ipv6=0".to_owned(),
        format!("net.ipv6.conf.{}.disable_ipv6=0", t.client_if),
    ] {
        t.client.exec("sysctl", &["-qw", &key]).expect("sysctl");
    }
    client_address6(t, CLIENT_ADDR6);
}

/// `address`/64 on the client's outside link, usable at once (`nodad`).
pub fn client_address6(t: &Topology, address: &str) {
    t.client
        .exec(
            "ip",
            &[
                "-6",
                "addr",
                "add",
                &format!("{address}/64"),
                "dev",
                &t.client_if,
                "nodad",
            ],
        )
        .expect("the client's IPv6 address");
}

/// `config` (the topology's) with [`HOST_ADDR`] on the outside port.
pub fn with_host_address(config: &str) -> String {
    let node = format!("node_addresses = [\"{NODE_ADDR}/24\"]");
    assert!(config.contains(&node), "{config}");
    config.replacen(
        &node,
        &format!("{node}\nhost_addresses = [\"{HOST_ADDR}/24\"]"),
        1,
    )
}

/// BIRD in the client namespace: passive iBGP towards the gateway's host
/// address, importing everything, exporting nothing (no kernel protocol:
/// the client keeps its static default route through the gateway).
pub fn bird_router(t: &Topology) -> Bird {
    Bird::start(
        &t.client,
        &format!(
            "router id {CLIENT_ADDR};\nprotocol device {{ }}\n\
             protocol bgp {PROTOCOL} {{\n  local {CLIENT_ADDR} as {ROUTER_ASN};\n  \
             neighbor {HOST_ADDR} as {ROUTER_ASN};\n  passive on;\n  direct;\n  \
             hold time 9;\n  error wait time 1, 2;\n  \
             ipv4 {{ import all; export none; }};\n}}\n"
        ),
    )
}

/// The gateway's `[bgp]` section (with [`with_host_address`] on the
/// ports): one peer (the router above, from [`HOST_ADDR`]), one
/// advertisement `name` with `extra` lines (attributes), and `bgp_extra`
/// lines of `[bgp]` itself.
pub fn bgp_section(bgp_extra: &str, name: &str, extra: &str) -> String {
    let session = format!("address = \"{CLIENT_ADDR}\"\nsource_address = \"{HOST_ADDR}\"");
    bgp_section_for(&session, bgp_extra, name, extra)
}

/// [`bgp_section`] with `session`, the peer's lines saying where the
/// session runs (`address`, and `source_address` or `interface`).
pub fn bgp_section_for(session: &str, bgp_extra: &str, name: &str, extra: &str) -> String {
    format!(
        "
[bgp]
{bgp_extra}

[[bgp.peer]]
{session}
peer_asn = {ROUTER_ASN}
my_asn = {ROUTER_ASN}
router_id = \"{NODE_ADDR}\"
hold_time_s = 9
connect_retry_s = 1
connect_retry_max_s = 2

[[bgp.advertisement]]
name = \"{name}\"
{extra}
"
    )
}

/// Waits (up to 30 s) until BIRD's routes from the gateway are exactly
/// `want`; `context` is printed on failure (the gateway's log).
pub fn bird_has(bird: &Bird, context: &dyn Fn() -> String, want: &[&str]) -> Vec<BirdRoute> {
    let mut got = Vec::new();
    let ok = wait_until(Duration::from_secs(30), || {
        got = bird.routes(PROTOCOL);
        got.iter().map(|r| r.prefix.as_str()).collect::<Vec<_>>() == want
    });
    assert!(
        ok,
        "BIRD should have {want:?} from the gateway, has {got:?}\n{}\n--- gateway log ---\n{}",
        bird.birdc(&format!("show protocols all {PROTOCOL}")),
        context()
    );
    got
}
