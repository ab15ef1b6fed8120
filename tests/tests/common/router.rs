//! BIRD 2 as the client's router in the demo topology, peering with the
//! gateway over the outside port (the BGP suites: `bgp.rs`, `kube_e2e.rs`).
//!
//! Until the host path (issue 13 §1) gives ports host addresses, the BGP
//! TCP connection runs on the gateway namespace's kernel: the gateway's
//! node address is also put on the outside veth there (with af_packet the
//! kernel sees the port's frames too; both answer ARP with the veth's MAC),
//! so `source_address` is a node address, as today's validation wants.

use portico::demo::topology::{CLIENT_ADDR, NODE_ADDR, Topology};
use portico_netns::bird::{Bird, BirdRoute};
use portico_tests::wait_until;
use std::time::Duration;

/// The router's AS; the gateway is in the same one (iBGP, so LOCAL_PREF
/// is sent).
pub const ROUTER_ASN: u32 = 65000;
/// BIRD's name for the session with the gateway.
pub const PROTOCOL: &str = "portico";

/// The gateway's node address on the kernel's outside veth, and BIRD in the
/// client namespace: passive iBGP towards it, importing everything,
/// exporting nothing (no kernel protocol: the client keeps its static
/// default route through the gateway).
pub fn bird_router(t: &Topology) -> Bird {
    t.gateway
        .exec(
            "ip",
            &[
                "addr",
                "add",
                &format!("{NODE_ADDR}/24"),
                "dev",
                &t.outside_if,
            ],
        )
        .expect("the node address on the kernel's outside veth");
    Bird::start(
        &t.client,
        &format!(
            "router id {CLIENT_ADDR};\nprotocol device {{ }}\n\
             protocol bgp {PROTOCOL} {{\n  local {CLIENT_ADDR} as {ROUTER_ASN};\n  \
             neighbor {NODE_ADDR} as {ROUTER_ASN};\n  passive on;\n  direct;\n  \
             hold time 9;\n  error wait time 1, 2;\n  \
             ipv4 {{ import all; export none; }};\n}}\n"
        ),
    )
}

/// The gateway's `[bgp]` section: one peer (the router above), one
/// advertisement `name` with `extra` lines (attributes), and `bgp_extra`
/// lines of `[bgp]` itself.
pub fn bgp_section(bgp_extra: &str, name: &str, extra: &str) -> String {
    format!(
        "
[bgp]
{bgp_extra}

[[bgp.peer]]
address = \"{CLIENT_ADDR}\"
peer_asn = {ROUTER_ASN}
my_asn = {ROUTER_ASN}
router_id = \"{NODE_ADDR}\"
source_address = \"{NODE_ADDR}\"
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
