//! Multiprotocol BGP (RFC 4760) against a real BIRD 2: IPv6 unicast
//! routes over the IPv4 TCP session, in MP_REACH_NLRI with the IPv6 next
//! hop of RFC 2545 (global, and link-local when configured), withdrawn in
//! MP_UNREACH_NLRI; a router without an IPv6 channel gets none and keeps
//! the session. Every check goes through `birdc`.
//!
//! Needs root, `ip`, `bird` and `birdc` (Debian `bird2`).

mod support;

use std::time::Duration;

use portico_bgp::{Family, PeerConfig, RouteAttributes, State};
use portico_netns::wait_until;
use support::lab::{
    BIRD_ASN, DUAL_CHANNELS, OUR_ASN, VIP4, VIP6, assert_global_and_link_local_next_hop,
    assert_via, counts, lab, lab_with_channels, peer, routes,
};
use support::{SPEAKER_LINK_LOCAL, SPEAKER_V6};

/// An iBGP peer (LOCAL_PREF is sent) with an IPv6 next hop configured.
fn dual_peer(link_local: bool) -> PeerConfig {
    let mut cfg = peer(BIRD_ASN, BIRD_ASN);
    cfg.next_hop_v6 = Some(SPEAKER_V6.parse().unwrap());
    if link_local {
        cfg.next_hop_v6_link_local = Some(SPEAKER_LINK_LOCAL.parse().unwrap());
    }
    cfg
}

#[test]
fn ipv6_unicast_over_an_ipv4_session_announced_and_withdrawn() {
    let Some(lab) = lab_with_channels(
        "ipv6_unicast_over_an_ipv4_session_announced_and_withdrawn",
        BIRD_ASN,
        "",
        DUAL_CHANNELS,
    ) else {
        return;
    };
    let session = lab.spawn(dual_peer(false));
    lab.established(&session);
    let s = session.stats();
    assert_eq!(
        s.families,
        [Family::Ipv4Unicast, Family::Ipv6Unicast],
        "both negotiated"
    );
    let attrs = RouteAttributes::new(Some(250), Some(20), [(65000 << 16) | 6]);
    let s = lab.sync(&session, routes(&[VIP4, VIP6], &attrs));
    assert_eq!(counts(&s), (2, 1, 0));
    let got = lab.bird_has(&[VIP4, VIP6], Duration::from_secs(5));
    let r = &got[VIP6];
    assert_via(r, SPEAKER_V6);
    assert_eq!(r.attrs["BGP.local_pref"], "250", "{r:?}");
    assert_eq!(r.attrs["BGP.med"], "20");
    assert_eq!(r.attrs["BGP.community"], "(65000,6)");
    assert_eq!(r.attrs["BGP.as_path"], "", "iBGP: empty AS_PATH");
    assert_eq!(r.attrs["BGP.origin"], "IGP");
    // The IPv4 route is as before.
    assert_eq!(got[VIP4].attrs["BGP.next_hop"], support::lab::SPEAKER);

    // Withdraw the IPv6 route only (MP_UNREACH_NLRI): the IPv4 one stays.
    let generation = session.set_routes(routes(&[VIP4], &attrs));
    lab.rt
        .block_on(session.wait_synced(generation, Duration::from_secs(5)))
        .expect("synced");
    lab.bird_has(&[VIP4], Duration::from_secs(5));
    // And back, then everything goes at once.
    session.set_routes(routes(&[VIP4, VIP6], &attrs));
    lab.bird_has(&[VIP4, VIP6], Duration::from_secs(5));
    let generation = session.set_routes(routes(&[], &attrs));
    lab.rt
        .block_on(session.wait_synced(generation, Duration::from_secs(5)))
        .expect("synced");
    lab.bird_has(&[], Duration::from_secs(5));
    let s = session.stats();
    assert_eq!(
        (s.state, s.flaps, s.notifications_received),
        (State::Established, 0, 0)
    );
    assert_eq!(lab.bird.bgp_state("s1"), "Established");
    lab.rt.block_on(session.shutdown("done"));
}

#[test]
fn ipv6_next_hop_with_link_local_is_32_bytes_in_bird() {
    let Some(lab) = lab_with_channels(
        "ipv6_next_hop_with_link_local_is_32_bytes_in_bird",
        OUR_ASN,
        "",
        DUAL_CHANNELS,
    ) else {
        return;
    };
    let mut cfg = dual_peer(true);
    cfg.my_asn = OUR_ASN;
    let session = lab.spawn(cfg);
    lab.established(&session);
    session.set_routes(routes(&[VIP6], &RouteAttributes::new(None, None, [])));
    let got = lab.bird_has(&[VIP6], Duration::from_secs(5));
    let r = &got[VIP6];
    // BIRD shows both addresses of the RFC 2545 §3 next hop.
    assert_global_and_link_local_next_hop(r);
    assert!(r.via[0].starts_with(SPEAKER_V6), "{r:?}");
    assert_eq!(r.attrs["BGP.as_path"], OUR_ASN.to_string());
    lab.rt.block_on(session.shutdown("done"));
}

#[test]
fn a_router_without_ipv6_gets_no_ipv6_routes_and_keeps_the_session() {
    // BIRD with only its IPv4 channel: its OPEN offers IPv4 unicast only.
    let Some(lab) = lab(
        "a_router_without_ipv6_gets_no_ipv6_routes_and_keeps_the_session",
        BIRD_ASN,
        "",
    ) else {
        return;
    };
    let cfg = dual_peer(false);
    assert_eq!(
        cfg.offered_families(),
        [Family::Ipv4Unicast, Family::Ipv6Unicast],
        "we offer both"
    );
    let session = lab.spawn(cfg);
    lab.established(&session);
    assert_eq!(session.stats().families, [Family::Ipv4Unicast]);
    let s = lab.sync(&session, routes(&[VIP4, VIP6], &RouteAttributes::default()));
    assert_eq!(counts(&s), (1, 0, 1));
    lab.bird_has(&[VIP4], Duration::from_secs(5));
    assert!(
        support::log_text().contains("the router does not offer ipv6-unicast"),
        "logged"
    );
    // Still up a few hold times later, and BIRD never saw an error.
    std::thread::sleep(Duration::from_secs(4));
    let s = session.stats();
    assert_eq!(
        (s.state, s.flaps, s.notifications_received),
        (State::Established, 0, 0)
    );
    let info = lab.bird.protocol("s1");
    assert!(!info.contains("Error"), "{info}");
    let gone = wait_until(Duration::from_secs(1), || lab.bird.routes("s1").len() == 1);
    assert!(gone);
    lab.rt.block_on(session.shutdown("done"));
}
