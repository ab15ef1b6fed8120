//! The `[bgp]` section: TOML parsing, defaults, families, and every
//! problem named at once.
use super::*;
use std::net::{IpAddr, Ipv4Addr};

/// The problems of `c` (which must have some): the error, each as
/// `(path, reason)`, and the paths alone.
fn problems_of(c: &BgpConfig) -> (ConfigError, Vec<(String, String)>, Vec<String>) {
    let e = c.validate().unwrap_err();
    let got: Vec<(String, String)> = e
        .problems
        .iter()
        .map(|p| (p.path.clone(), p.reason.clone()))
        .collect();
    let paths = got.iter().map(|g| g.0.clone()).collect();
    (e, got, paths)
}

/// [`problems_of`] a section of only `peers`.
fn problems_of_peers(peers: Vec<PeerConfig>) -> (ConfigError, Vec<(String, String)>, Vec<String>) {
    problems_of(&BgpConfig {
        peers,
        ..BgpConfig::default()
    })
}

fn parse(s: &str) -> BgpConfig {
    #[derive(Deserialize)]
    struct Root {
        bgp: BgpConfig,
    }
    toml::from_str::<Root>(s).unwrap().bgp
}

#[test]
fn toml_with_defaults() {
    let c = parse(
        r#"
        [[bgp.peer]]
        address = "10.0.0.1"
        peer_asn = 65000
        my_asn = 65001
        router_id = "10.0.0.2"

        [[bgp.advertisement]]
        name = "public"
        communities = ["65001:100", "no-export"]
        aggregation_length = 24
        "#,
    );
    c.validate().unwrap();
    let peer = &c.peers[0];
    assert_eq!((peer.port, peer.hold_time_s, peer.ttl()), (179, 90, 1));
    assert_eq!(
        (c.shutdown_drain_s, c.watchdog_timeout_ms),
        (DEFAULT_SHUTDOWN_DRAIN_S, DEFAULT_WATCHDOG_TIMEOUT_MS)
    );
    let adv = &c.advertisements[0];
    assert_eq!(
        adv.communities,
        [Community(65001 << 16 | 100), Community::NO_EXPORT]
    );
    let routes = adv.routes_for(
        peer,
        ["192.0.2.10".parse().unwrap(), "192.0.2.20".parse().unwrap()],
    );
    assert_eq!(routes.len(), 1, "two VIPs in one /24");
    assert_eq!(routes.keys().next().unwrap().to_string(), "192.0.2.0/24");
    assert_eq!(routes.values().next().unwrap().local_pref, None);
}

#[test]
fn bad_community_is_a_toml_error() {
    let e = toml::from_str::<BgpConfig>(
        r#"
        [[advertisement]]
        name = "x"
        communities = ["65536:1"]
        "#,
    )
    .unwrap_err();
    assert!(e.to_string().contains("is not `asn:value`"), "{e}");
}

#[test]
fn every_problem_named_at_once() {
    let mut peer = PeerConfig::new("0.0.0.0".parse().unwrap(), 23456, 0, Ipv4Addr::UNSPECIFIED);
    peer.port = 0;
    peer.hold_time_s = 2;
    peer.keepalive_s = Some(5);
    peer.source_address = Some("2001:db8::1".parse().unwrap());
    peer.md5_password = Some("x".repeat(81));
    peer.multihop_ttl = Some(0);
    peer.connect_retry_s = 0;
    let mut dup = PeerConfig::new(
        "10.0.0.1".parse().unwrap(),
        65000,
        65001,
        Ipv4Addr::new(10, 0, 0, 2),
    );
    dup.keepalive_s = Some(90);
    let mut adv = Advertisement::new("a");
    adv.peers = vec!["10.9.9.9".parse().unwrap()];
    adv.local_pref = Some(200);
    adv.aggregation_length = 33;
    adv.aggregation_length_v6 = 129;
    let c = BgpConfig {
        peers: vec![peer, dup.clone(), dup],
        advertisements: vec![adv, Advertisement::new("a")],
        shutdown_drain_s: 3601,
        watchdog_timeout_ms: 99,
    };
    let e = c.validate().unwrap_err();
    let paths: Vec<&str> = e.problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "bgp.peer[0].address",
            "bgp.peer[0].peer_asn",
            "bgp.peer[0].my_asn",
            "bgp.peer[0].router_id",
            "bgp.peer[0].port",
            "bgp.peer[0].hold_time_s",
            "bgp.peer[0].keepalive_s",
            "bgp.peer[0].source_address",
            "bgp.peer[0].md5_password",
            "bgp.peer[0].multihop_ttl",
            "bgp.peer[0].connect_retry_s",
            "bgp.peer[1].keepalive_s",
            "bgp.peer[2].address",
            "bgp.peer[2].keepalive_s",
            "bgp.advertisement[0].peers[0]",
            "bgp.advertisement[0].local_pref",
            "bgp.advertisement[0].aggregation_length",
            "bgp.advertisement[0].aggregation_length_v6",
            "bgp.advertisement[1].name",
            "bgp.shutdown_drain_s",
            "bgp.watchdog_timeout_ms",
        ]
    );
    let text = e.to_string();
    assert!(
        text.contains("bgp.peer[0].hold_time_s: 2 s is not allowed"),
        "{text}"
    );
    assert_eq!(text.lines().count(), paths.len());
}

#[test]
fn families_default_to_what_has_a_next_hop() {
    let c = parse(
        r#"
        [[bgp.peer]]
        address = "10.0.0.1"
        peer_asn = 65000
        my_asn = 65001
        router_id = "10.0.0.2"

        [[bgp.peer]]
        address = "10.0.0.3"
        peer_asn = 65000
        my_asn = 65001
        router_id = "10.0.0.2"
        next_hop_v6 = "2001:db8::2"
        next_hop_v6_link_local = "fe80::2"

        [[bgp.peer]]
        address = "2001:db8::1"
        peer_asn = 65000
        my_asn = 65001
        router_id = "10.0.0.2"
        families = ["ipv6-unicast"]
        "#,
    );
    c.validate().unwrap();
    let v4 = Family::Ipv4Unicast;
    let v6 = Family::Ipv6Unicast;
    assert_eq!(c.peers[0].offered_families(), [v4], "no IPv6 next hop");
    assert_eq!(c.peers[1].offered_families(), [v4, v6]);
    assert_eq!(c.peers[2].offered_families(), [v6]);
    let local_v4: IpAddr = "10.0.0.2".parse().unwrap();
    let local_v6: IpAddr = "2001:db8::2".parse().unwrap();
    assert_eq!(c.peers[0].next_hop_v6_for(local_v4), None);
    assert_eq!(
        c.peers[1].next_hop_v6_for(local_v4),
        Some("2001:db8::2".parse().unwrap())
    );
    assert_eq!(
        c.peers[2].next_hop_v6_for(local_v6),
        Some("2001:db8::2".parse().unwrap()),
        "the session's own IPv6 address"
    );
    assert_eq!(Family::from_afi_safi(2, 1), Some(v6));
    assert_eq!(Family::from_afi_safi(2, 2), None);
    assert_eq!(v6.to_string(), "ipv6-unicast");
}

#[test]
fn family_and_next_hop_problems_name_the_field() {
    let base = || {
        PeerConfig::new(
            "10.0.0.1".parse().unwrap(),
            65000,
            65001,
            Ipv4Addr::new(10, 0, 0, 2),
        )
    };
    let mut empty = base();
    empty.families = Some(vec![]);
    let mut v6_without_next_hop = base();
    v6_without_next_hop.port = 1;
    v6_without_next_hop.families = Some(vec![Family::Ipv6Unicast, Family::Ipv6Unicast]);
    let mut bad_next_hops = base();
    bad_next_hops.port = 2;
    bad_next_hops.next_hop_v6 = Some("fe80::1".parse().unwrap());
    bad_next_hops.next_hop_v6_link_local = Some("2001:db8::1".parse().unwrap());
    let mut link_local_alone = base();
    link_local_alone.port = 3;
    link_local_alone.next_hop_v6_link_local = Some("fe80::1".parse().unwrap());
    let (e, got, paths) = problems_of_peers(vec![
        empty,
        v6_without_next_hop,
        bad_next_hops,
        link_local_alone,
    ]);
    assert_eq!(
        paths,
        [
            "bgp.peer[0].families",
            "bgp.peer[1].families",
            "bgp.peer[1].families",
            "bgp.peer[2].next_hop_v6",
            "bgp.peer[2].next_hop_v6_link_local",
            "bgp.peer[3].next_hop_v6_link_local",
        ],
        "{e}"
    );
    assert!(got[1].1.contains("listed twice"), "{e}");
    assert!(got[2].1.contains("set next_hop_v6"), "{e}");
    assert!(got[3].1.contains("not a global unicast"), "{e}");
    assert!(got[4].1.contains("fe80::/10"), "{e}");
    assert!(got[5].1.contains("RFC 2545"), "{e}");
}

#[test]
fn local_pref_only_for_ibgp() {
    let ibgp = PeerConfig::new(
        "10.0.0.1".parse().unwrap(),
        65000,
        65000,
        Ipv4Addr::new(10, 0, 0, 2),
    );
    let ebgp = PeerConfig::new(
        "10.0.0.3".parse().unwrap(),
        65003,
        65000,
        Ipv4Addr::new(10, 0, 0, 2),
    );
    let mut adv = Advertisement::new("a");
    adv.local_pref = Some(300);
    assert_eq!(adv.attributes_for(&ibgp).local_pref, Some(300));
    assert_eq!(adv.attributes_for(&ebgp).local_pref, None);
    assert_eq!((ibgp.ttl(), ebgp.ttl()), (255, 1));
    let c = BgpConfig {
        peers: vec![ibgp, ebgp],
        advertisements: vec![adv],
        ..BgpConfig::default()
    };
    c.validate().unwrap();
}

#[test]
fn ipv6_sessions_link_local_scope_and_extended_next_hop() {
    let c = parse(
        r#"
        [[bgp.peer]]
        address = "2001:db8::1"
        peer_asn = 65000
        my_asn = 65001
        router_id = "10.0.0.2"

        [[bgp.peer]]
        address = "fe80::1"
        interface = "eth1-host"
        peer_asn = 65000
        my_asn = 65001
        router_id = "10.0.0.2"
        next_hop_v6 = "2001:db8::2"

        [[bgp.peer]]
        address = "2001:db8::3"
        peer_asn = 65000
        my_asn = 65001
        router_id = "10.0.0.2"
        extended_next_hop = false
        "#,
    );
    c.validate().unwrap();
    let [global, link_local, no_enh] = &c.peers[..] else {
        panic!("three peers")
    };
    let (v4, v6) = (Family::Ipv4Unicast, Family::Ipv6Unicast);
    // IPv4 is offered on IPv6 sessions too, with RFC 8950 by default.
    assert_eq!(global.offered_families(), [v4, v6]);
    assert!(global.offers_extended_next_hop());
    assert!(!no_enh.offers_extended_next_hop());
    assert!(link_local.is_link_local() && !global.is_link_local());
    assert_eq!(link_local.name(), "[fe80::1%eth1-host]:179");
    assert_eq!(global.name(), "[2001:db8::1]:179");
    // A link-local session: the global next hop is configured (or
    // derived), the link-local one is the session's own address.
    let local: IpAddr = "fe80::2".parse().unwrap();
    assert_eq!(
        link_local.next_hop_v6_for(local),
        Some("2001:db8::2".parse().unwrap())
    );
    assert_eq!(
        link_local.next_hop_v6_link_local_for(local),
        Some("fe80::2".parse().unwrap())
    );
    assert_eq!(
        global.next_hop_v6_link_local_for("2001:db8::9".parse().unwrap()),
        None
    );
    // Without next_hop_v6 a link-local session has no global next hop of
    // its own; the gateway derives one from a global IPv6 host address.
    let mut bare = link_local.clone();
    bare.next_hop_v6 = None;
    assert!(!bare.has_ipv6_next_hop());
    let derived = bare.with_next_hop_from(&["2001:db8::7".parse().unwrap()]);
    assert_eq!(derived.next_hop_v6, Some("2001:db8::7".parse().unwrap()));
    // IPv4 peers do not offer it.
    let v4_peer = PeerConfig::new(
        "10.0.0.1".parse().unwrap(),
        65000,
        65001,
        Ipv4Addr::new(10, 0, 0, 2),
    );
    assert!(!v4_peer.offers_extended_next_hop());
}

#[test]
fn scope_and_extended_next_hop_problems_name_the_field() {
    let peer = |address: &str, port: u16| {
        let mut p = PeerConfig::new(
            address.parse().unwrap(),
            65000,
            65001,
            Ipv4Addr::new(10, 0, 0, 2),
        );
        p.port = port;
        p
    };
    // 0: link-local without its interface; IPv6 routes without a global
    // next hop; so for IPv4 routes with RFC 8950 (asked for explicitly).
    let mut no_interface = peer("fe80::1", 1);
    no_interface.extended_next_hop = Some(true);
    no_interface.families = Some(Family::ALL.to_vec());
    // 1: an interface for a global address, a link-local source to it.
    let mut needless = peer("2001:db8::1", 2);
    needless.interface = Some("eth1".into());
    needless.source_address = Some("fe80::2".parse().unwrap());
    // 2: a bad interface name.
    let mut bad_name = peer("fe80::1", 3);
    bad_name.interface = Some("a/very/long/interface".into());
    bad_name.next_hop_v6 = Some("2001:db8::2".parse().unwrap());
    // 3: RFC 8950 over IPv4; 4: without IPv4 unicast.
    let mut over_v4 = peer("10.0.0.1", 4);
    over_v4.extended_next_hop = Some(true);
    let mut no_v4 = peer("2001:db8::1", 5);
    no_v4.extended_next_hop = Some(true);
    no_v4.families = Some(vec![Family::Ipv6Unicast]);
    let (e, got, paths) = problems_of_peers(vec![no_interface, needless, bad_name, over_v4, no_v4]);
    assert_eq!(
        paths,
        [
            "bgp.peer[0].interface",
            "bgp.peer[0].families",
            "bgp.peer[0].extended_next_hop",
            "bgp.peer[1].interface",
            "bgp.peer[1].source_address",
            "bgp.peer[2].interface",
            "bgp.peer[3].extended_next_hop",
            "bgp.peer[4].extended_next_hop",
        ],
        "{e}"
    );
    assert!(got[0].1.contains("missing: fe80::1 is link-local"), "{e}");
    assert!(got[1].1.contains("link-local session"), "{e}");
    assert!(got[2].1.contains("global IPv6 next hop"), "{e}");
    assert!(got[3].1.contains("only for a link-local address"), "{e}");
    assert!(got[4].1.contains("reaches only a link-local peer"), "{e}");
    assert!(got[5].1.contains("not an interface name"), "{e}");
    assert!(got[6].1.contains("is IPv4"), "{e}");
    assert!(got[7].1.contains("ipv4-unicast is not in families"), "{e}");
}

#[test]
fn gtsm_sends_255_and_requires_the_hops() {
    let c = parse(
        r#"
        [[bgp.peer]]
        ttl_security_hops = 1
        address = "10.0.0.1"
        peer_asn = 65000
        my_asn = 65001
        router_id = "10.0.0.2"

        [[bgp.peer]]
        ttl_security_hops = 3
        address = "2001:db8::1"
        peer_asn = 65000
        my_asn = 65001
        router_id = "10.0.0.2"
        "#,
    );
    c.validate().unwrap();
    let (direct, far) = (&c.peers[0], &c.peers[1]);
    assert_eq!((direct.ttl(), direct.min_ttl()), (255, Some(255)));
    assert_eq!((far.ttl(), far.min_ttl()), (255, Some(253)));
    assert!(direct.is_directly_connected() && !far.is_directly_connected());
    // Without GTSM: no minimum, eBGP TTL 1 is directly connected.
    let mut plain = direct.clone();
    plain.ttl_security_hops = None;
    assert_eq!((plain.ttl(), plain.min_ttl()), (1, None));
    assert!(plain.is_directly_connected());
    plain.multihop_ttl = Some(2);
    assert!(!plain.is_directly_connected());
}

#[test]
fn gtsm_problems_name_the_field() {
    let peer = |port: u16| {
        let mut p = PeerConfig::new(
            "10.0.0.1".parse().unwrap(),
            65000,
            65001,
            Ipv4Addr::new(10, 0, 0, 2),
        );
        p.port = port;
        p
    };
    // 0: multihop_ttl and GTSM; 1: 0 hops; 2: 255 hops (a minimum TTL of
    // 1 checks nothing); 3: both wrong at once.
    let mut both = peer(1);
    both.multihop_ttl = Some(2);
    both.ttl_security_hops = Some(2);
    let mut zero = peer(2);
    zero.ttl_security_hops = Some(0);
    let mut too_far = peer(3);
    too_far.ttl_security_hops = Some(255);
    let mut all = peer(4);
    all.multihop_ttl = Some(0);
    all.ttl_security_hops = Some(0);
    let (e, got, paths) = problems_of_peers(vec![both, zero, too_far, all]);
    assert_eq!(
        paths,
        [
            "bgp.peer[0].multihop_ttl",
            "bgp.peer[1].ttl_security_hops",
            "bgp.peer[2].ttl_security_hops",
            "bgp.peer[3].multihop_ttl",
            "bgp.peer[3].ttl_security_hops",
        ],
        "{e}"
    );
    assert!(
        got[0].1.contains("contradicts ttl_security_hops = 2"),
        "{e}"
    );
    assert!(got[1].1.contains("0 is out of range"), "{e}");
    assert!(got[2].1.contains("255 is out of range"), "{e}");
}

#[test]
fn the_same_link_local_address_on_two_interfaces_is_two_sessions() {
    let peer = |address: &str, interface: Option<&str>| {
        let mut p = PeerConfig::new(
            address.parse().unwrap(),
            65000,
            65001,
            Ipv4Addr::new(10, 0, 0, 2),
        );
        p.interface = interface.map(Into::into);
        p.families = Some(vec![Family::Ipv4Unicast]);
        p.extended_next_hop = Some(false);
        p
    };
    let ok = BgpConfig {
        peers: vec![peer("fe80::1", Some("eth1")), peer("fe80::1", Some("eth2"))],
        ..BgpConfig::default()
    };
    ok.validate().unwrap();
    assert_eq!(ok.peers[0].link_local_scope(), Some("eth1"));
    assert_eq!(peer("10.0.0.1", None).link_local_scope(), None);
    // The same address on the same interface is one router twice.
    let (e, got, paths) = problems_of_peers(vec![
        peer("fe80::1", Some("eth1")),
        peer("fe80::1", Some("eth2")),
        peer("fe80::1", Some("eth1")),
    ]);
    assert_eq!(paths, ["bgp.peer[2].address"], "{e}");
    assert!(
        got[0].1.contains("[fe80::1%eth1]:179 is configured twice"),
        "{e}"
    );
}
