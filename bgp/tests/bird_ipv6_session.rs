//! BGP sessions over IPv6 transport against a real BIRD 2 (issue 17):
//! between global addresses (with TCP-MD5 on the IPv6 socket), between
//! link-local addresses scoped by the interface (as FRR's "unnumbered"
//! peers do), and RFC 8950: IPv4 routes over the IPv6 session with an
//! IPv6 next hop once both sides sent the Extended Next Hop Encoding
//! capability, and none of them when it is not negotiated. Every check
//! goes through `birdc show route all` / `show protocols all`.
//!
//! Needs root, `ip`, `bird` and `birdc` (Debian `bird2`).

mod support;

use std::time::Duration;

use portico_bgp::{BgpConfig, Family, RouteAttributes, Session, State};
use portico_netns::{Netns, NsRuntime, wait_until};
use support::lab::{
    BIRD_ASN, IPV6_CHANNEL, Ipv6Transport, OUR_ASN, VIP4, VIP6,
    assert_global_and_link_local_next_hop, assert_via, bgp_protocol_with_channels, counts,
    lab_over_ipv6, peer, routes,
};
use support::{Bird, ROUTER_LINK_LOCAL, SPEAKER_LINK_LOCAL, SPEAKER_V6};

/// Both channels; IPv4 with RFC 8950 next hops (BIRD's channel option).
const ENH_CHANNELS: &str = "ipv4 { import all; export none; extended next hop on; };\n  \
                            ipv6 { import all; export none; };";

#[test]
fn ipv6_session_between_global_addresses_with_md5_carries_ipv6_unicast() {
    let Some((lab, cfg)) = lab_over_ipv6(
        "ipv6_session_between_global_addresses_with_md5_carries_ipv6_unicast",
        Ipv6Transport::Global,
        "password \"portico-v6\";",
        IPV6_CHANNEL,
    ) else {
        return;
    };
    let mut cfg = cfg;
    cfg.md5_password = Some("portico-v6".into());
    assert_eq!(cfg.offered_families(), Family::ALL, "IPv4 offered too");
    assert!(cfg.offers_extended_next_hop());
    let session = lab.spawn(cfg);
    lab.established(&session);
    let s = session.stats();
    assert_eq!(s.peer, "[2001:db8::1]:179");
    // BIRD has only an IPv6 channel: IPv6 unicast alone, no RFC 8950.
    assert_eq!(s.families, [Family::Ipv6Unicast]);
    assert!(!s.extended_next_hop);
    assert_eq!(s.local_address, Some(SPEAKER_V6.parse().unwrap()));
    assert_eq!(
        s.next_hop_v6,
        Some(SPEAKER_V6.parse().unwrap()),
        "the session's own global address (RFC 2545 §2)"
    );
    let s = lab.sync(&session, routes(&[VIP4, VIP6], &RouteAttributes::default()));
    assert_eq!(counts(&s), (1, 1, 1), "the IPv4 VIP has no next hop here");
    let got = lab.bird_has(&[VIP6], Duration::from_secs(5));
    let r = &got[VIP6];
    assert_via(r, SPEAKER_V6);
    assert_eq!(r.attrs["BGP.as_path"], OUR_ASN.to_string());
    // Withdrawn in MP_UNREACH_NLRI over the IPv6 session.
    lab.sync(&session, routes(&[], &RouteAttributes::default()));
    lab.bird_has(&[], Duration::from_secs(5));
    let info = lab.bird.protocol("s1");
    assert!(info.contains("Neighbor address: 2001:db8::2"), "{info}");
    assert_eq!(session.stats().flaps, 0);
    lab.rt.block_on(session.shutdown("done"));
}

#[test]
fn link_local_session_scoped_by_the_interface() {
    let Some((lab, cfg)) = lab_over_ipv6(
        "link_local_session_scoped_by_the_interface",
        Ipv6Transport::LinkLocal,
        "",
        IPV6_CHANNEL,
    ) else {
        return;
    };
    let mut cfg = cfg;
    // BIRD's neighbor is fe80::2: bind it (scoped too), and give the IPv6
    // routes a global next hop (a link-local session has none of its own).
    cfg.source_address = Some(SPEAKER_LINK_LOCAL.parse().unwrap());
    cfg.next_hop_v6 = Some(SPEAKER_V6.parse().unwrap());
    let session = lab.spawn(cfg.clone());
    lab.established(&session);
    let s = session.stats();
    let speaker_if = cfg.interface.clone().expect("scoped");
    assert_eq!(s.peer, format!("[{ROUTER_LINK_LOCAL}%{speaker_if}]:179"));
    assert_eq!(s.families, [Family::Ipv6Unicast]);
    assert_eq!(s.local_address, Some(SPEAKER_LINK_LOCAL.parse().unwrap()));
    assert_eq!(
        s.next_hop_v6_link_local,
        Some(SPEAKER_LINK_LOCAL.parse().unwrap()),
        "the session's link-local address goes in the second slot"
    );
    session.set_routes(routes(&[VIP6], &RouteAttributes::default()));
    let got = lab.bird_has(&[VIP6], Duration::from_secs(5));
    let r = &got[VIP6];
    // The 32-byte next hop of RFC 2545 §3.
    assert_global_and_link_local_next_hop(r);
    let info = lab.bird.protocol("s1");
    assert!(
        info.contains(&format!("Neighbor address: {SPEAKER_LINK_LOCAL}")),
        "{info}"
    );
    // A wrong interface never connects: the scope is what reaches it.
    // The same peer scoped by another interface never connects: the
    // scope is what reaches it.
    let mut elsewhere = cfg;
    elsewhere.interface = Some("lo".into());
    elsewhere.source_address = None;
    let lost = lab.spawn(elsewhere);
    let r = lab
        .rt
        .block_on(lost.wait_established(Duration::from_secs(2)));
    assert!(r.is_err(), "{r:?}");
    let s = lost.stats();
    assert!(s.connect_attempts >= 1 && s.last_error.is_some(), "{s:?}");
    lab.rt.block_on(lost.shutdown("done"));
    assert_eq!(session.stats().state, State::Established);
    lab.rt.block_on(session.shutdown("done"));
}

#[test]
fn rfc8950_ipv4_routes_over_an_ipv6_session_get_the_ipv6_next_hop() {
    let Some((lab, cfg)) = lab_over_ipv6(
        "rfc8950_ipv4_routes_over_an_ipv6_session_get_the_ipv6_next_hop",
        Ipv6Transport::Global,
        "",
        ENH_CHANNELS,
    ) else {
        return;
    };
    let session = lab.spawn(cfg.clone());
    lab.established(&session);
    let s = session.stats();
    assert_eq!(s.families, Family::ALL);
    assert!(s.extended_next_hop, "both OPENs carried (1, 1, 2)");
    let all = routes(&[VIP4, VIP6], &RouteAttributes::new(None, Some(7), []));
    let s = lab.sync(&session, all.clone());
    assert_eq!(counts(&s), (2, 1, 0));
    let got = lab.bird_has(&[VIP4, VIP6], Duration::from_secs(5));
    // The IPv4 route in BIRD's table with the IPv6 next hop (RFC 8950 §3).
    let r = &got[VIP4];
    assert_via(r, SPEAKER_V6);
    assert_eq!(r.attrs["BGP.med"], "7", "{r:?}");
    assert_eq!(got[VIP6].attrs["BGP.next_hop"], SPEAKER_V6);
    // Withdrawn (the IPv4 Withdrawn Routes field), the IPv6 one stays.
    lab.sync(
        &session,
        routes(&[VIP6], &RouteAttributes::new(None, Some(7), [])),
    );
    lab.bird_has(&[VIP6], Duration::from_secs(5));
    lab.rt.block_on(session.shutdown("done"));

    // Not offered by us: not negotiated, the IPv4 route is skipped and
    // counted, the session carries IPv6 as before.
    let mut no_enh = cfg;
    no_enh.extended_next_hop = Some(false);
    let session = lab.spawn(no_enh);
    lab.established(&session);
    let s = session.stats();
    assert_eq!(s.families, Family::ALL);
    assert!(!s.extended_next_hop);
    let s = lab.sync(&session, all);
    assert_eq!((s.prefixes_sent, s.prefixes_skipped), (1, 1));
    lab.bird_has(&[VIP6], Duration::from_secs(5));
    assert!(
        support::log_text().contains("without the extended next hop (RFC 8950)"),
        "logged"
    );
    lab.rt.block_on(session.shutdown("done"));
}

/// Unnumbered BGP on two links: two routers with the same link-local
/// address fe80::1 (and we fe80::2 on both links), one BIRD on each, are
/// two sessions told apart by the interface; each BIRD gets the VIP with
/// the next hop of its own link.
#[test]
fn the_same_link_local_router_address_on_two_links_is_two_sessions() {
    let test = "the_same_link_local_router_address_on_two_links_is_two_sessions";
    if !support::require(test, &["bird", "birdc"]) {
        return;
    }
    support::logs();
    let speaker = Netns::new("bgs").expect("speaker namespace");
    let rt = NsRuntime::new(&speaker).expect("speaker runtime");
    let mut routers = Vec::new();
    let mut peers = Vec::new();
    for n in 1..=2 {
        let router = Netns::new("bgr").expect("router namespace");
        let (router_global, speaker_global) =
            (format!("2001:db8:{n}::1"), format!("2001:db8:{n}::2"));
        let (r_if, s_if) = support::connect(
            &router,
            &speaker,
            None,
            &[
                (&router_global, &speaker_global),
                (ROUTER_LINK_LOCAL, SPEAKER_LINK_LOCAL),
            ],
        );
        let bird = Bird::start(
            &router,
            &format!(
                "router id 10.0.{n}.1;\nprotocol device {{ }}\n{}",
                bgp_protocol_with_channels(
                    "s1",
                    ROUTER_LINK_LOCAL,
                    SPEAKER_LINK_LOCAL,
                    OUR_ASN,
                    &format!("interface \"{r_if}\";"),
                    IPV6_CHANNEL,
                )
            ),
        );
        let mut cfg = peer(OUR_ASN, BIRD_ASN);
        cfg.address = ROUTER_LINK_LOCAL.parse().unwrap();
        cfg.interface = Some(s_if);
        cfg.source_address = Some(SPEAKER_LINK_LOCAL.parse().unwrap());
        cfg.next_hop_v6 = Some(speaker_global.parse().unwrap());
        peers.push(cfg);
        routers.push((router, bird, speaker_global));
    }
    let config = BgpConfig {
        peers: peers.clone(),
        ..BgpConfig::default()
    };
    config.validate().expect("two sessions, not one twice");
    let sessions: Vec<Session> = peers
        .into_iter()
        .map(|cfg| rt.enter(|| Session::spawn(cfg)))
        .collect();
    for (session, (_, bird, speaker_global)) in sessions.iter().zip(&routers) {
        rt.block_on(session.wait_established(Duration::from_secs(20)))
            .unwrap_or_else(|e| panic!("{e}\n{}", bird.diagnostics()));
        session.set_routes(routes(&[VIP6], &RouteAttributes::default()));
        let ok = wait_until(Duration::from_secs(5), || {
            bird.routes("s1").iter().any(|r| {
                r.prefix == VIP6
                    && r.attrs["BGP.next_hop"] == format!("{speaker_global} {SPEAKER_LINK_LOCAL}")
            })
        });
        assert!(ok, "{}", bird.birdc("show route all protocol s1"));
    }
    let names: Vec<String> = sessions.iter().map(|s| s.stats().peer).collect();
    assert_ne!(names[0], names[1], "the scope is in the name: {names:?}");
    for session in sessions {
        let s = rt.block_on(session.shutdown("done"));
        assert_eq!(s.flaps, 0, "{s:?}");
    }
}
