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
use portico_netns::{NsRuntime, wait_until};
use support::lab::{
    BIRD_ASN, IPV4_CHANNEL, Ipv6Transport, Lab, OUR_ASN, bgp_protocol_with_channels, lab,
    lab_over_ipv6, peer, routes,
};
use support::{Bird, FAR_ROUTER, FAR_ROUTER_V6, FAR_SPEAKER, FAR_SPEAKER_V6};

const VIP4: &str = "10.128.0.10/32";
const VIP6: &str = "2001:db8:100::10/128";
const GTSM: &str = "ttl security on;";

/// `cfg` with GTSM comes up with BIRD, which gets `prefix`; without it
/// (TTL 1 out), BIRD's kernel drops our segments after the handshake and
/// the session never gets Established. (In that order: BIRD keeps the
/// half-open connection it accepted, whose FIN it drops too, and refuses
/// the next until its hold timer.)
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
    let r = lab
        .rt
        .block_on(session.wait_established(Duration::from_secs(4)));
    assert!(r.is_err(), "BIRD took TTL 1 under GTSM: {r:?}");
    assert_ne!(lab.bird.bgp_state("s1"), "Established");
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
        "ipv6 { import all; export none; };",
    ) else {
        return;
    };
    up_with_gtsm_only(&lab, cfg, VIP6);
}

/// BIRD two hops away (`multihop 2; ttl security on`: it sends 255 and
/// accepts ≥ 254); our `ttl_security_hops = 1` requires 255, which its
/// packets no longer have after the middle router.
fn one_hop_further_never_establishes(test: &str, ipv6: bool) {
    if !support::require(test, &["bird", "birdc"]) {
        return;
    }
    support::logs();
    let net = support::two_hops(ipv6);
    let (router, speaker, channels, prefix) = if ipv6 {
        (
            FAR_ROUTER_V6,
            FAR_SPEAKER_V6,
            "ipv6 { import all; export none; };",
            VIP6,
        )
    } else {
        (FAR_ROUTER, FAR_SPEAKER, IPV4_CHANNEL, VIP4)
    };
    let bird = Bird::start(
        &net.router,
        &format!(
            "router id {FAR_ROUTER};\nprotocol device {{ }}\n{}",
            bgp_protocol_with_channels(
                "s1",
                router,
                speaker,
                OUR_ASN,
                &format!("multihop 2;\n  {GTSM}"),
                channels,
            )
        ),
    );
    let rt = NsRuntime::new(&net.speaker).expect("speaker runtime");
    let mut cfg = PeerConfig::new(
        router.parse().unwrap(),
        BIRD_ASN,
        OUR_ASN,
        FAR_SPEAKER.parse().unwrap(),
    );
    cfg.hold_time_s = 3;
    cfg.ttl_security_hops = Some(1);
    let session = rt.enter(|| Session::spawn(cfg.clone()));
    let r = rt.block_on(session.wait_established(Duration::from_secs(5)));
    assert!(r.is_err(), "a SYN-ACK with TTL 254 passed: {r:?}");
    let s = session.stats();
    assert!(
        s.connect_attempts >= 1
            && matches!(s.state, State::Idle | State::Connect | State::Active)
            && s.updates_received == 0
            && s.notifications_received == 0,
        "never past Connect: {s:?}"
    );
    assert_ne!(bird.bgp_state("s1"), "Established");
    rt.block_on(session.shutdown("done"));

    // Configured as two hops, it comes up and carries the route.
    cfg.ttl_security_hops = Some(2);
    assert_eq!(cfg.min_ttl(), Some(254));
    let session = rt.enter(|| Session::spawn(cfg));
    rt.block_on(session.wait_established(Duration::from_secs(20)))
        .unwrap_or_else(|e| panic!("{e}\n{}", bird.diagnostics()));
    session.set_routes(routes(&[prefix], &RouteAttributes::default()));
    let ok = wait_until(Duration::from_secs(5), || {
        bird.routes("s1").iter().any(|r| r.prefix == prefix)
    });
    assert!(ok, "{}", bird.birdc("show route all protocol s1"));
    rt.block_on(session.shutdown("done"));
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
