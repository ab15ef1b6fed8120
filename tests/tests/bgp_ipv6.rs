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
//! And over an IPv6-only session (BIRD peering with the IPv6 host address,
//! its IPv4 channel with RFC 8950's extended next hop): the IPv6 VIP
//! announced with the session's own address as next hop, `curl -6`
//! served through it, and `portico bgp` showing the families offered and
//! negotiated, the extended next hop and the IPv6 next hop.
//!
//! Needs root, `ip`, `bird` and `birdc` (Debian `bird2`), `curl`, `nginx`.

mod common;

use common::router::{self, CLIENT_ADDR6, HOST_ADDR, HOST_ADDR6, PROTOCOL, ROUTER_ASN, bird_has};
use common::{gateway_with, portico};
use portico::admin;
use portico::demo::topology::{
    CLIENT_ADDR, GatewayRun, NODE_ADDR, SNAT_ADDR, ServiceOptions, Topology, VIP,
};
use portico_netns::bird::Bird;
use portico_netns::{Process, TempDir, nginx};
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
/// IPv6 service (with the backend or without) advertised to BIRD over the
/// IPv4 session.
fn config(t: &Topology, with_backend: bool) -> String {
    config_with(t, with_backend, &router::bgp_section("", "vips", ""))
}

/// [`config`] with the `[bgp]` section `bgp`.
fn config_with(t: &Topology, with_backend: bool, bgp: &str) -> String {
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
{bgp}"
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

/// BIRD in the client namespace peering over IPv6 only: iBGP between
/// [`CLIENT_ADDR6`] and the gateway's [`HOST_ADDR6`] with GTSM (RFC
/// 5082, `ttl security on`: the gateway's segments must arrive with hop
/// limit 255, so the host path must not lower it), IPv4 with RFC 8950 next
/// hops and IPv6 channels, the kernel protocol installing IPv6 routes.
fn bird_router_over_ipv6(t: &Topology) -> Bird {
    bird_router_between(t, CLIENT_ADDR6, HOST_ADDR6, "ttl security on;")
}

/// [`bird_router_over_ipv6`] between BIRD's `local` address and the
/// gateway's `neighbor` (with `%interface` when link-local), with `extra`
/// protocol options.
fn bird_router_between(t: &Topology, local: &str, neighbor: &str, extra: &str) -> Bird {
    Bird::start(
        &t.client,
        &format!(
            "router id {CLIENT_ADDR};\nprotocol device {{ }}\n\
             protocol kernel k6 {{ ipv6 {{ import none; export all; }}; }}\n\
             protocol bgp {PROTOCOL} {{\n  local {local} as {ROUTER_ASN};\n  \
             neighbor {neighbor} as {ROUTER_ASN};\n  passive on;\n  direct;\n  \
             hold time 9;\n  error wait time 1, 2;\n  {extra}\n  \
             ipv4 {{ import all; export none; extended next hop on; }};\n  \
             ipv6 {{ import all; export none; }};\n}}\n"
        ),
    )
}

/// The gateway's `[bgp]` section for [`bird_router_over_ipv6`]: the peer
/// is the router's IPv6 address, the session from the IPv6 host address
/// (no `next_hop_v6`: the session's own address is the next hop), GTSM
/// with the router on the link.
fn bgp_section_over_ipv6() -> String {
    let session = format!(
        "address = \"{CLIENT_ADDR6}\"\nsource_address = \"{HOST_ADDR6}\"\nttl_security_hops = 1"
    );
    router::bgp_section_for(&session, "", "vips", "")
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

/// The demo topology with IPv6 on the client's and the backend's links
/// and nginx listening on the backend's IPv6 address (the guard stops it),
/// or `None` after a loud SKIP.
fn ipv6_topology(test: &str) -> Option<(Topology, (Process, TempDir))> {
    if !portico_tests::require_programs(
        test,
        &["bird", "birdc", "curl", "nginx"],
        "apt-get install bird2 curl nginx",
    ) {
        return None;
    }
    let t = common::topology(test, 1)?;
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
    let nginx = nginx(
        &b.ns,
        "nginx6",
        &format!("[{BACKEND_ADDR6}]:{BACKEND_PORT}"),
    )
    .expect("nginx starts");
    Some((t, nginx))
}

#[test]
fn ipv6_vip_announced_by_mp_bgp_with_the_host_next_hop_and_served() {
    const TEST: &str = "bgp_ipv6::ipv6_vip_announced_by_mp_bgp_with_the_host_next_hop_and_served";
    let Some((t, _nginx)) = ipv6_topology(TEST) else {
        return;
    };
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

#[test]
fn ipv6_only_session_announces_the_ipv6_vip_and_portico_bgp_shows_the_families() {
    const TEST: &str =
        "bgp_ipv6::ipv6_only_session_announces_the_ipv6_vip_and_portico_bgp_shows_the_families";
    let Some((t, _nginx)) = ipv6_topology(TEST) else {
        return;
    };
    let bird = bird_router_over_ipv6(&t);
    let gw = gateway_with(&t, &config_with(&t, true, &bgp_section_over_ipv6()), &[]);
    let log_path = gw.log.clone();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    // The /128 over the IPv6 session, the session's own address as next hop.
    let routes = bird_has(&bird, &log, &[ROUTE6]);
    assert_eq!(
        routes[0].attrs.get("BGP.next_hop").map(String::as_str),
        Some(HOST_ADDR6),
        "{routes:?}"
    );
    let info = bird.birdc(&format!("show protocols all {PROTOCOL}"));
    assert!(
        info.contains(&format!("Neighbor address: {HOST_ADDR6}")),
        "BIRD sees the IPv6 session: {info}"
    );

    // `portico bgp`: the session line and its families lines.
    let mut text = String::new();
    let shown = wait_until(Duration::from_secs(10), || {
        let out = portico(&["bgp", "--admin-socket", gw.socket.to_str().expect("utf-8")]);
        text = String::from_utf8_lossy(&out.stdout).into_owned();
        out.status.success() && text.contains("Established") && text.contains("sent 1,")
    });
    assert!(shown, "{text}\n{}", log());
    let peer = format!("[{CLIENT_ADDR6}]:179");
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(&peer))
        .unwrap_or_else(|| panic!("no session line for {peer}: {text}"));
    let row: Vec<&str> = lines[at].split_whitespace().collect();
    assert_eq!(row[1..4], ["65000", "65000", "Established"], "{text}");
    assert_eq!(
        lines[at + 1],
        "  families offered [ipv4-unicast, ipv6-unicast], negotiated [ipv4-unicast, ipv6-unicast]; \
         extended next hop (RFC 8950): negotiated",
        "{text}"
    );
    assert_eq!(
        lines[at + 2],
        format!(
            "  ipv6 next hop {HOST_ADDR6}; local address {HOST_ADDR6}; ipv6 prefixes sent 1, \
             skipped 0 (family not negotiated)"
        ),
        "{text}"
    );
    assert_eq!(
        lines[at + 3],
        "  ttl security (GTSM, RFC 5082): on, router 1 hop: sends ttl 255, accepts ttl >= 255",
        "{text}"
    );
    // The same in the report (`portico bgp --json`) and the metrics.
    let r = bgp_report(&gw);
    assert!(
        r.peers[0].extended_next_hop && r.peers[0].extended_next_hop_offered,
        "{r:?}"
    );
    let mut m = String::new();
    let scraped = wait_until(Duration::from_secs(10), || {
        m = common::scrape(&t).unwrap_or_default();
        m.contains("portico_bgp_extended_next_hop")
    });
    assert!(scraped, "metrics: {m}");
    for family in ["ipv4-unicast", "ipv6-unicast"] {
        let line =
            format!("portico_bgp_family_negotiated{{peer=\"{peer}\",family=\"{family}\"}} 1");
        assert!(m.contains(&line), "{line} in\n{m}");
    }
    let line = format!("portico_bgp_extended_next_hop{{peer=\"{peer}\"}} 1");
    assert!(m.contains(&line), "{line} in\n{m}");

    // Traffic: BIRD's kernel protocol installed the route, `curl -6` from
    // the router's namespace reaches nginx through the VIP.
    let installed = wait_until(Duration::from_secs(10), || {
        t.client
            .exec("ip", &["-6", "route", "show", ROUTE6])
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(HOST_ADDR6))
    });
    assert!(installed, "{}", bird.diagnostics());
    let mut last = Err(String::new());
    let served = wait_until(Duration::from_secs(15), || {
        last = curl6(&t);
        last.is_ok()
    });
    assert!(served, "curl -6 http://[{VIP6}]/: {last:?}\n{}", log());
    assert_eq!(
        last.as_deref(),
        Ok(format!("backend nginx6 saw {SNAT_ADDR6}").as_str())
    );
}

/// The client's link-local address on the outside link (the router's
/// address in the link-local test).
const CLIENT_LINK_LOCAL: &str = "fe80::100";
/// The outside port's host interface (the TAP; the default name).
const HOST_IF: &str = "outside-host";

#[test]
fn link_local_session_on_the_host_interface_announces_and_serves() {
    const TEST: &str = "bgp_ipv6::link_local_session_on_the_host_interface_announces_and_serves";
    let Some((t, _nginx)) = ipv6_topology(TEST) else {
        return;
    };
    router::client_address6(&t, CLIENT_LINK_LOCAL);
    // The TAP's link-local address: the kernel's EUI-64 one from the
    // port's MAC (the TAP has the port's MAC).
    let port_mac = Topology::mac_of(&t.gateway, &t.outside_if).expect("port MAC");
    let mac: Vec<u8> = port_mac
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).expect("hex"))
        .collect();
    let tap_link_local =
        dataplane::driver::hostpath::kernel_link_local(mac.try_into().expect("6 bytes"))
            .to_string();
    let bird = bird_router_between(
        &t,
        CLIENT_LINK_LOCAL,
        &format!("{tap_link_local}%{}", t.client_if),
        "",
    );
    // No source address, no next_hop_v6: the kernel picks the TAP's
    // link-local, the global next hop is the IPv6 host address.
    let session = format!("address = \"{CLIENT_LINK_LOCAL}\"\ninterface = \"{HOST_IF}\"");
    let config = config_with(&t, true, &router::bgp_section_for(&session, "", "vips", ""));
    let gw = gateway_with(&t, &config, &[]);
    let log_path = gw.log.clone();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    let routes = bird_has(&bird, &log, &[ROUTE6]);
    assert_eq!(
        routes[0].attrs.get("BGP.next_hop").map(String::as_str),
        Some(format!("{HOST_ADDR6} {tap_link_local}").as_str()),
        "the global next hop and the session's link-local one: {routes:?}"
    );
    let mut text = String::new();
    let shown = wait_until(Duration::from_secs(10), || {
        let out = portico(&["bgp", "--admin-socket", gw.socket.to_str().expect("utf-8")]);
        text = String::from_utf8_lossy(&out.stdout).into_owned();
        out.status.success() && text.contains("sent 1,")
    });
    assert!(shown, "{text}\n{}", log());
    let peer = format!("[{CLIENT_LINK_LOCAL}%{HOST_IF}]:179");
    assert!(
        text.lines()
            .any(|l| l.starts_with(&peer) && l.contains("Established")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "  ipv6 next hop {HOST_ADDR6} + {tap_link_local}; local address {tap_link_local};"
        )),
        "{text}"
    );
    let mut last = Err(String::new());
    let served = wait_until(Duration::from_secs(15), || {
        last = curl6(&t);
        last.is_ok()
    });
    assert!(served, "curl -6 http://[{VIP6}]/: {last:?}\n{}", log());
}
