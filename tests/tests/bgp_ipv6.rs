//! `portico run` announcing an IPv6 VIP to a real BIRD 2 by MP-BGP
//! (issue 17, "Announcements"; RFC 4760, RFC 2545): the demo topology
//! with BIRD in the client namespace, peering with the gateway's IPv4 host
//! address, with an IPv6 channel over that IPv4 session. The gateway's
//! outside port also has an IPv6 host address (on the same TAP, the
//! kernel's), from which the IPv6 next hop is derived (no `next_hop_v6` in
//! the file).
//!
//! * The IPv6 VIP with a ready backend is in BIRD as a /128 with the IPv6
//!   host address as its next hop (`birdc show route all`), next to
//!   nothing else (the IPv4 VIP is not advertised here);
//! * `portico bgp`'s data (`BgpReport`) shows the families and the prefix;
//! * BIRD's kernel protocol installs the route in the client namespace,
//!   and `curl -6` from there reaches the nginx backend (listening on its
//!   IPv6 address) through the VIP: the router resolves the next hop by
//!   NDP (answered by the gateway's kernel through the host path), the
//!   dataplane forwards;
//! * the backend goes (reload): withdrawn (MP_UNREACH_NLRI); it comes
//!   back: announced again, the session kept.
//!
//! Needs root, `ip`, `bird` and `birdc` (Debian `bird2`), `curl`, `nginx`.

mod common;

use common::gateway_with;
use common::router::{self, HOST_ADDR, HOST_ADDR6, PROTOCOL, ROUTER_ASN, bird_has};
use portico::admin;
use portico::demo::topology::{
    CLIENT_ADDR, GatewayRun, NODE_ADDR, SNAT_ADDR, ServiceOptions, Topology, VIP,
};
use portico_netns::bird::Bird;
use portico_netns::nginx;
use portico_tests::wait_until;
use std::time::Duration;

const VIP6: &str = "2001:db8:100::10";
const ROUTE6: &str = "2001:db8:100::10/128";
/// The outside port's IPv6 node address (the dataplane's, for the
/// connected subnet of the client).
const NODE_ADDR6: &str = "2001:db8:2::1";
/// The inside port's IPv6 SNAT address (full NAT towards the backend).
const SNAT_ADDR6: &str = "2001:db8:10::1";
const BACKEND_ADDR6: &str = "2001:db8:10::10";
const BACKEND_PORT: u16 = 8080;

/// The topology's configuration with IPv6 node/host/SNAT addresses, the
/// IPv6 service (with the backend or without) advertised to BIRD.
fn config(t: &Topology, with_backend: bool) -> String {
    let base = router::with_dual_host_addresses(&t.config_toml(&ServiceOptions::all(t)));
    let node = format!("node_addresses = [\"{NODE_ADDR}/24\"]");
    let snat = format!("snat_addresses = [\"{SNAT_ADDR}/24\"]");
    assert!(base.contains(&node) && base.contains(&snat), "{base}");
    let base = base
        .replacen(
            &node,
            &format!("node_addresses = [\"{NODE_ADDR}/24\", \"{NODE_ADDR6}/64\"]"),
            1,
        )
        .replacen(
            &snat,
            &format!("snat_addresses = [\"{SNAT_ADDR}/24\", \"{SNAT_ADDR6}/64\"]"),
            1,
        );
    let backends = if with_backend {
        format!("{{ address = \"{BACKEND_ADDR6}\", port = {BACKEND_PORT} }}")
    } else {
        String::new()
    };
    format!(
        "{base}
[[service]]
name = \"web6\"
protocol = \"tcp\"
vip = \"{VIP6}\"
port = 80
snat = true
bgp_advertisements = [\"vips\"]
backends = [{backends}]
{}",
        router::bgp_section("", "vips", "")
    )
}

/// BIRD in the client namespace: the gateway's iBGP peer over IPv4 with
/// an IPv4 and an IPv6 channel, and a kernel protocol installing the IPv6
/// routes in the client namespace.
fn bird_router6(t: &Topology) -> Bird {
    Bird::start(
        &t.client,
        &format!(
            "router id {CLIENT_ADDR};\nprotocol device {{ }}\n\
             protocol kernel k6 {{ ipv6 {{ import none; export all; }}; }}\n\
             protocol bgp {PROTOCOL} {{\n  local as {ROUTER_ASN};\n  \
             neighbor {HOST_ADDR} as {ROUTER_ASN};\n  passive on;\n  direct;\n  \
             hold time 9;\n  error wait time 1, 2;\n  \
             ipv4 {{ import all; export none; }};\n  \
             ipv6 {{ import all; export none; }};\n}}\n"
        ),
    )
}

/// IPv6 on the backend's link: its address (usable at once) and a default
/// route through the gateway's IPv6 SNAT address.
fn backend_ipv6(t: &Topology) {
    let b = &t.backends[0];
    for key in [
        "net.ipv6.conf.all.disable_ipv6=0".to_owned(),
        format!("net.ipv6.conf.{}.disable_ipv6=0", b.ifname),
    ] {
        b.ns.exec("sysctl", &["-qw", &key]).expect("sysctl");
    }
    let cidr = format!("{BACKEND_ADDR6}/64");
    b.ns.exec(
        "ip",
        &["-6", "addr", "add", &cidr, "dev", &b.ifname, "nodad"],
    )
    .expect("the backend's IPv6 address");
    b.ns.exec("ip", &["-6", "route", "add", "default", "via", SNAT_ADDR6])
        .expect("the backend's IPv6 default route");
}

fn bgp_report(gw: &GatewayRun) -> admin::BgpReport {
    gw.stats().expect("the admin socket answers").bgp
}

/// One `curl -6` of the VIP from the client: the body (`backend <name>
/// saw <address>`), or curl's error.
fn curl6(t: &Topology) -> Result<String, String> {
    let url = format!("http://[{VIP6}]/");
    let out = t
        .client_exec("curl", &["-6", "-sS", "--max-time", "3", &url])
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

#[test]
fn ipv6_vip_announced_by_mp_bgp_with_the_host_next_hop_and_served() {
    const TEST: &str = "bgp_ipv6::ipv6_vip_announced_by_mp_bgp_with_the_host_next_hop_and_served";
    if !portico_tests::require_programs(
        TEST,
        &["bird", "birdc", "curl", "nginx"],
        "apt-get install bird2 curl nginx",
    ) {
        return;
    }
    let Some(t) = common::topology(TEST, 1) else {
        return;
    };
    router::client_ipv6(&t);
    backend_ipv6(&t);
    // Complete TCP checksums from the client and the backend: af_packet
    // gets IPv6 TCP from a veth with the checksum left to offload, which
    // its driver fixes up for IPv4 only so far.
    for (ns, ifname) in [
        (&t.client, t.client_if.as_str()),
        (&t.backends[0].ns, t.backends[0].ifname.as_str()),
    ] {
        ns.exec("ethtool", &["-K", ifname, "tx", "off"])
            .unwrap_or_else(|e| panic!("ethtool -K {ifname} tx off: {e}"));
    }
    let b = &t.backends[0];
    let (_nginx, _nginx_dir) = nginx(
        &b.ns,
        "nginx6",
        &format!("[{BACKEND_ADDR6}]:{BACKEND_PORT}"),
    )
    .expect("nginx starts");
    let bird = bird_router6(&t);
    let gw = gateway_with(&t, &config(&t, true), &[]);
    let log_path = gw.log.clone();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    // The /128 with the IPv6 host address as next hop.
    let routes = bird_has(&bird, &log, &[ROUTE6]);
    let a = &routes[0].attrs;
    assert_eq!(
        a.get("BGP.next_hop").map(String::as_str),
        Some(HOST_ADDR6),
        "the IPv6 next hop is the IPv6 host address: {routes:?}"
    );
    assert_eq!(
        a.get("BGP.origin").map(String::as_str),
        Some("IGP"),
        "{routes:?}"
    );

    // What `portico bgp` renders (the report follows the session within a
    // control tick or so).
    let mut r = bgp_report(&gw);
    wait_until(Duration::from_secs(10), || {
        r = bgp_report(&gw);
        r.peers[0].state == "Established" && r.peers[0].prefixes_sent == 1
    });
    let peer = &r.peers[0];
    assert_eq!(peer.state, "Established", "{r:?}");
    assert_eq!(peer.families, ["ipv4-unicast", "ipv6-unicast"], "{r:?}");
    assert_eq!(peer.families_offered, peer.families, "{r:?}");
    assert_eq!(peer.next_hop_v6.as_deref(), Some(HOST_ADDR6), "{r:?}");
    assert_eq!(peer.prefixes, [ROUTE6], "{r:?}");
    assert_eq!((peer.prefixes_sent, peer.prefixes_sent_v6), (1, 1), "{r:?}");
    // The IPv4 VIP qualifies too, but no advertisement lists it.
    assert_eq!(r.vips, [VIP.to_string(), VIP6.to_owned()], "{r:?}");

    // Traffic from the router's namespace: BIRD installed the route, the
    // client reaches nginx through the VIP (full NAT: nginx sees the SNAT
    // address).
    let installed = wait_until(Duration::from_secs(10), || {
        t.client
            .exec("ip", &["-6", "route", "show", ROUTE6])
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(HOST_ADDR6))
    });
    assert!(
        installed,
        "BIRD's kernel protocol installs {ROUTE6} via {HOST_ADDR6}: {}",
        bird.diagnostics()
    );
    let mut last = Err(String::new());
    let served = wait_until(Duration::from_secs(15), || {
        last = curl6(&t);
        last.is_ok()
    });
    assert!(
        served,
        "curl -6 http://[{VIP6}]/ from the router's namespace: {last:?}\n{}",
        log()
    );
    assert_eq!(
        last.as_deref(),
        Ok(format!("backend nginx6 saw {SNAT_ADDR6}").as_str())
    );
    for _ in 0..5 {
        assert_eq!(
            curl6(&t).as_deref(),
            Ok(format!("backend nginx6 saw {SNAT_ADDR6}").as_str())
        );
    }
    let neigh = t
        .client
        .exec("ip", &["-6", "neigh", "show", HOST_ADDR6])
        .expect("ip neigh");
    let port_mac = Topology::mac_of(&t.gateway, &t.outside_if).expect("port MAC");
    assert!(
        String::from_utf8_lossy(&neigh.stdout).contains(&port_mac),
        "the router resolved the next hop {HOST_ADDR6} by NDP to the port's MAC {port_mac}: {}",
        String::from_utf8_lossy(&neigh.stdout)
    );

    // The backend goes (reload): withdrawn; it comes back: announced.
    gw.reload(&config(&t, false)).expect("reload");
    bird_has(&bird, &log, &[]);
    let r = bgp_report(&gw);
    assert!(!r.vips.contains(&VIP6.to_owned()), "{r:?}");
    assert!(
        wait_until(Duration::from_secs(10), || {
            t.client
                .exec("ip", &["-6", "route", "show", ROUTE6])
                .is_ok_and(|o| o.stdout.is_empty())
        }),
        "the withdrawn route leaves the client's kernel"
    );
    gw.reload(&config(&t, true)).expect("reload");
    let routes = bird_has(&bird, &log, &[ROUTE6]);
    assert_eq!(
        routes[0].attrs.get("BGP.next_hop").map(String::as_str),
        Some(HOST_ADDR6),
        "{routes:?}"
    );
    assert_eq!(
        bgp_report(&gw).peers[0].flaps,
        0,
        "reloads keep the session"
    );
    assert!(
        wait_until(Duration::from_secs(15), || curl6(&t).is_ok()),
        "served again after the re-announcement"
    );
}
