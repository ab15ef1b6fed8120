//! GTSM (RFC 5082, `ttl_security_hops`) against a real BIRD 2 with `ttl
//! security on`: the session comes up over IPv4 and IPv6 when both sides
//! use it (BIRD drops our segments unless they arrive with 255, so our TTL
//! is checked too); a router one hop further away than configured never
//! gets past Connect (our kernel drops its SYN-ACK, which arrives with
//! 254), until `ttl_security_hops` says 2. Every check goes through
//! `birdc`.
//!
//! Needs root, `ip`, `bird` and `birdc` (Debian `bird2`).

mod support;

use std::time::Duration;

use portico_bgp::{PeerConfig, RouteAttributes, Session, State};
use support::lab::{
    BIRD_ASN, IPV6_CHANNEL, Ipv6Transport, Lab, OUR_ASN, VIP4, VIP6, far_lab, lab, lab_over_ipv6,
    peer, routes,
};

const GTSM: &str = "ttl security on;";

/// `cfg` with GTSM comes up with BIRD, which gets `prefix`; without it
/// (TTL 1 out), BIRD's kernel drops our segments and BIRD never gets
/// Established nor the route. (In that order: BIRD keeps the half-open
/// connection it accepted, whose FIN it drops too, and refuses the next
/// until its hold timer.) Only BIRD's side is asserted: BIRD sets the
/// minimum TTL on the socket it accepted, after `accept`, so our OPEN,
/// sent at once, can arrive before it and draw BIRD's OPEN and KEEPALIVE
/// (our side may then call itself Established); our KEEPALIVE, later,
/// is dropped, so BIRD stays short of Established.
fn up_with_gtsm_only(lab: &Lab, cfg: PeerConfig, prefix: &str) {
    let mut gtsm = cfg.clone();
    gtsm.ttl_security_hops = Some(1);
    assert_eq!((gtsm.ttl(), gtsm.min_ttl()), (255, Some(255)));
    let session = lab.spawn(gtsm);
    lab.established(&session);
    session.set_routes(routes(&[prefix], &RouteAttributes::default()));
    lab.bird_has(&[prefix], Duration::from_secs(5));
    assert_eq!(session.stats().flaps, 0);
    lab.rt.block_on(session.shutdown("done"));
    lab.bird_has(&[], Duration::from_secs(5));

    let mut plain = cfg;
    plain.ttl_security_hops = None;
    assert_eq!(plain.ttl(), 1);
    let session = lab.spawn(plain);
    session.set_routes(routes(&[prefix], &RouteAttributes::default()));
    let until = std::time::Instant::now() + Duration::from_secs(4);
    while std::time::Instant::now() < until {
        let state = lab.bird.bgp_state("s1");
        assert_ne!(state, "Established", "BIRD took TTL 1 under GTSM");
        std::thread::sleep(Duration::from_millis(100));
    }
    lab.bird_has(&[], Duration::from_secs(1));
    session.abort();
}

#[test]
fn gtsm_session_with_bird_over_ipv4() {
    let Some(lab) = lab("gtsm_session_with_bird_over_ipv4", OUR_ASN, GTSM) else {
        return;
    };
    up_with_gtsm_only(&lab, peer(OUR_ASN, BIRD_ASN), VIP4);
}

#[test]
fn gtsm_session_with_bird_over_ipv6() {
    let Some((lab, cfg)) = lab_over_ipv6(
        "gtsm_session_with_bird_over_ipv6",
        Ipv6Transport::Global,
        GTSM,
        IPV6_CHANNEL,
    ) else {
        return;
    };
    up_with_gtsm_only(&lab, cfg, VIP6);
}

/// BIRD two hops away (`multihop 2; ttl security on`: it sends 255 and
/// accepts ≥ 254); our `ttl_security_hops = 1` requires 255, which its
/// packets no longer have after the middle router.
fn one_hop_further_never_establishes(test: &str, ipv6: bool) {
    let Some(far) = far_lab(test, ipv6, &format!("multihop 2;\n  {GTSM}")) else {
        return;
    };
    let mut cfg = far.peer.clone();
    cfg.ttl_security_hops = Some(1);
    let session = far.rt.enter(|| Session::spawn(cfg.clone()));
    let r = far
        .rt
        .block_on(session.wait_established(Duration::from_secs(5)));
    assert!(r.is_err(), "a SYN-ACK with TTL 254 passed: {r:?}");
    let s = session.stats();
    assert!(
        s.connect_attempts >= 1
            && matches!(s.state, State::Idle | State::Connect | State::Active)
            && s.updates_received == 0
            && s.notifications_received == 0,
        "never past Connect: {s:?}"
    );
    assert_ne!(far.bird.bgp_state("s1"), "Established");
    far.rt.block_on(session.shutdown("done"));

    // Configured as two hops, it comes up and carries the route.
    cfg.ttl_security_hops = Some(2);
    assert_eq!(cfg.min_ttl(), Some(254));
    let session = far.rt.enter(|| Session::spawn(cfg));
    far.established_with(&session, if ipv6 { VIP6 } else { VIP4 });
    far.rt.block_on(session.shutdown("done"));
}

#[test]
fn gtsm_router_one_hop_further_never_establishes_over_ipv4() {
    one_hop_further_never_establishes(
        "gtsm_router_one_hop_further_never_establishes_over_ipv4",
        false,
    );
}

#[test]
fn gtsm_router_one_hop_further_never_establishes_over_ipv6() {
    one_hop_further_never_establishes(
        "gtsm_router_one_hop_further_never_establishes_over_ipv6",
        true,
    );
}
