//! The speaker against a real GoBGP (`gobgpd`, Debian `gobgpd`) in a
//! namespace: session, attributes seen in GoBGP's RIB (`gobgp global rib
//! -j`), withdraw, and a Cease on stop.

mod support;

use std::time::Duration;

use portico_bgp::{PeerConfig, Prefix, RouteAttributes, Routes, Session, SessionStats};
use portico_netns::gobgp::GoBgp;
use portico_netns::{Netns, NsRuntime, wait_until};
use support::lab::{BIRD_ASN as GOBGP_ASN, OUR_ASN, ROUTER, SPEAKER, VIP4, VIP6, peer_to};

/// Our session to GoBGP at `address` spawned on `rt`, once Established.
fn established(
    rt: &NsRuntime,
    gobgp: &GoBgp,
    address: &str,
    setup: impl FnOnce(&mut PeerConfig),
) -> (Session, SessionStats) {
    let mut cfg = peer_to(address, SPEAKER, OUR_ASN, GOBGP_ASN);
    setup(&mut cfg);
    let session = rt.enter(|| Session::spawn(cfg));
    let s = rt
        .block_on(session.wait_established(Duration::from_secs(20)))
        .unwrap_or_else(|e| panic!("{e}\n{}", gobgp.log_text()));
    (session, s)
}

/// GoBGP in the router namespace, passive towards the speaker (its
/// default families: IPv4 unicast only).
fn gobgp(ns: &Netns) -> GoBgp {
    gobgp_with(ns, "")
}

/// [`gobgp`] with `neighbor_extra` appended to the neighbor's section.
fn gobgp_with(ns: &Netns, neighbor_extra: &str) -> GoBgp {
    gobgp_for("10.0.0.2", ns, neighbor_extra)
}

/// [`gobgp_with`] for the speaker's address `neighbor` (either family).
fn gobgp_for(neighbor: &str, ns: &Netns, neighbor_extra: &str) -> GoBgp {
    GoBgp::start(
        ns,
        &format!(
            "[global.config]\n  as = 65000\n  router-id = \"10.0.0.1\"\n  port = 179\n\
             \n[[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"{neighbor}\"\n    peer-as = 65001\n\
             \x20 [neighbors.transport.config]\n    passive-mode = true\n\
             \x20 [neighbors.timers.config]\n    hold-time = 3\n    keepalive-interval = 1\n{neighbor_extra}"
        ),
    )
}

/// GoBGP's neighbor section lines for IPv4 and IPv6 unicast.
const BOTH_FAMILIES: &str = "\x20 [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = \"ipv4-unicast\"\n\
     \x20 [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = \"ipv6-unicast\"\n";

/// GoBGP's IPv4 RIB (prefix → paths), empty when it does not answer.
fn rib_of(g: &GoBgp) -> serde_json::Map<String, serde_json::Value> {
    json_object(&g.rib_json())
}

/// A JSON object, empty when `text` is not one (GoBGP not answering).
fn json_object(text: &str) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::from_str::<serde_json::Value>(text.trim()) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    }
}

fn attr(path: &serde_json::Value, type_code: u64) -> &serde_json::Value {
    path["attrs"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["type"].as_u64() == Some(type_code)))
        .unwrap_or_else(|| panic!("attribute {type_code} in {path}"))
}

#[test]
fn gobgp_receives_attributes_and_withdrawals() {
    if !support::require(
        "gobgp_receives_attributes_and_withdrawals",
        &["gobgpd", "gobgp"],
    ) {
        return;
    }
    support::logs();
    let (router_ns, speaker_ns) = support::router_and_speaker();
    let gobgp = gobgp(&router_ns);
    let rt = NsRuntime::new(&speaker_ns).expect("speaker runtime");
    let (session, _) = established(&rt, &gobgp, ROUTER, |_| {});
    let established = wait_until(Duration::from_secs(5), || {
        gobgp.cli(&["neighbor"]).contains("Establ")
    });
    assert!(established, "{}", gobgp.cli(&["neighbor"]));

    let attrs = RouteAttributes::new(None, None, [(65001 << 16) | 100]);
    let all: Routes = ["10.128.0.10/32", "10.128.0.11/32"]
        .iter()
        .map(|p| (p.parse::<Prefix>().unwrap(), attrs.clone()))
        .collect();
    session.set_routes(all.clone());
    let mut rib = serde_json::Map::new();
    let ok = wait_until(Duration::from_secs(5), || {
        rib = rib_of(&gobgp);
        rib.len() == 2
    });
    assert!(ok, "GoBGP has both prefixes: {rib:?}");
    for (prefix, paths) in &rib {
        let path = &paths[0];
        assert_eq!(attr(path, 1)["value"], 0, "ORIGIN IGP for {prefix}");
        assert_eq!(
            attr(path, 2)["as_paths"][0]["asns"],
            serde_json::json!([65001])
        );
        assert_eq!(attr(path, 3)["nexthop"], "10.0.0.2");
        assert_eq!(
            attr(path, 8)["communities"],
            serde_json::json!([(65001u32 << 16) | 100])
        );
    }

    // Withdraw one.
    let mut one = all;
    one.remove(&"10.128.0.11/32".parse().unwrap());
    session.set_routes(one);
    let ok = wait_until(Duration::from_secs(5), || {
        rib = rib_of(&gobgp);
        rib.len() == 1 && rib.contains_key("10.128.0.10/32")
    });
    assert!(ok, "{rib:?}");

    // Stop: GoBGP gets the Cease and drops the path.
    rt.block_on(session.shutdown("portico stopping"));
    let ok = wait_until(Duration::from_secs(5), || rib_of(&gobgp).is_empty());
    assert!(ok, "{:?}", rib_of(&gobgp));
    let log = gobgp.log_text();
    assert!(
        log.contains("code 6(cease) subcode 2(administrative shutdown)")
            && log.contains("Communicated-Reason=\"portico stopping\""),
        "GoBGP logs our Cease with its shutdown communication: {log}"
    );
}

/// IPv6 unicast over the IPv4 session (RFC 4760): GoBGP's neighbor lists
/// both families; the /128 arrives in MP_REACH_NLRI with our IPv6 next
/// hop (GoBGP attribute 14), and goes with MP_UNREACH_NLRI.
#[test]
fn gobgp_receives_ipv6_unicast_over_the_ipv4_session() {
    if !support::require(
        "gobgp_receives_ipv6_unicast_over_the_ipv4_session",
        &["gobgpd", "gobgp"],
    ) {
        return;
    }
    support::logs();
    let (router_ns, speaker_ns) = support::router_and_speaker_with_ipv6(true);
    let gobgp = gobgp_with(&router_ns, BOTH_FAMILIES);
    let rt = NsRuntime::new(&speaker_ns).expect("speaker runtime");
    let (session, s) = established(&rt, &gobgp, ROUTER, |cfg| {
        cfg.next_hop_v6 = Some(support::SPEAKER_V6.parse().unwrap());
    });
    assert_eq!(
        s.families,
        [
            portico_bgp::Family::Ipv4Unicast,
            portico_bgp::Family::Ipv6Unicast
        ]
    );
    let vip = VIP6;
    let attrs = RouteAttributes::new(None, None, [(65001 << 16) | 100]);
    let routes: Routes = [(vip.parse::<Prefix>().unwrap(), attrs)].into();
    session.set_routes(routes);
    let rib6 = || json_object(&gobgp.cli(&["global", "rib", "-a", "ipv6", "-j"]));
    let mut rib = serde_json::Map::new();
    let ok = wait_until(Duration::from_secs(5), || {
        rib = rib6();
        rib.contains_key(vip)
    });
    assert!(ok, "GoBGP has the /128: {rib:?}");
    let path = &rib[vip][0];
    assert_eq!(attr(path, 14)["nexthop"], support::SPEAKER_V6, "{path}");
    assert_eq!(
        attr(path, 8)["communities"],
        serde_json::json!([(65001u32 << 16) | 100])
    );
    assert!(rib_of(&gobgp).is_empty(), "nothing in IPv4");
    session.set_routes(Routes::new());
    let ok = wait_until(Duration::from_secs(5), || rib6().is_empty());
    assert!(ok, "withdrawn: {:?}", rib6());
    rt.block_on(session.shutdown("done"));
}

/// A session over IPv6 with GoBGP as the second implementation: GoBGP's
/// neighbor is our global IPv6 address, both families; GoBGP sends the
/// Extended Next Hop Encoding capability for IPv4 unicast over an IPv6
/// session as we do (RFC 8950 §4), so the IPv4 VIP arrives in an IPv4
/// MP_REACH_NLRI with our IPv6 address as next hop (§3), next to the IPv6
/// one.
#[test]
fn gobgp_over_ipv6_takes_ipv4_routes_with_an_ipv6_next_hop() {
    if !support::require(
        "gobgp_over_ipv6_takes_ipv4_routes_with_an_ipv6_next_hop",
        &["gobgpd", "gobgp"],
    ) {
        return;
    }
    support::logs();
    let (router_ns, speaker_ns) = support::router_and_speaker_with_ipv6(true);
    let gobgp = gobgp_for(support::SPEAKER_V6, &router_ns, BOTH_FAMILIES);
    let rt = NsRuntime::new(&speaker_ns).expect("speaker runtime");
    let (session, s) = established(&rt, &gobgp, support::ROUTER_V6, |_| {});
    assert_eq!(s.families, portico_bgp::Family::ALL);
    assert!(s.extended_next_hop, "GoBGP offers (1, 1, 2) too");
    let (vip4, vip6) = (VIP4, VIP6);
    let attrs = RouteAttributes::default();
    let routes: Routes = [vip4, vip6]
        .iter()
        .map(|p| (p.parse::<Prefix>().unwrap(), attrs.clone()))
        .collect();
    session.set_routes(routes);
    let rib6 = || json_object(&gobgp.cli(&["global", "rib", "-a", "ipv6", "-j"]));
    let (mut rib4, mut rib) = (serde_json::Map::new(), serde_json::Map::new());
    let ok = wait_until(Duration::from_secs(5), || {
        rib4 = rib_of(&gobgp);
        rib = rib6();
        rib4.contains_key(vip4) && rib.contains_key(vip6)
    });
    assert!(ok, "GoBGP has both: {rib4:?} {rib:?}");
    let path = &rib4[vip4][0];
    assert_eq!(attr(path, 14)["nexthop"], support::SPEAKER_V6, "{path}");
    assert_eq!(attr(&rib[vip6][0], 14)["nexthop"], support::SPEAKER_V6);
    session.set_routes(Routes::new());
    let ok = wait_until(Duration::from_secs(5), || {
        rib_of(&gobgp).is_empty() && rib6().is_empty()
    });
    assert!(ok, "withdrawn: {:?} {:?}", rib_of(&gobgp), rib6());
    rt.block_on(session.shutdown("done"));
}
