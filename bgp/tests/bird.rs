//! The speaker against a real BIRD 2 in network namespaces: our speaker in
//! one namespace (a tokio runtime on a thread that entered it), BIRD in
//! another, over a veth; every check goes through `birdc`.
//!
//! Needs root, `ip`, `bird` and `birdc` (Debian `bird2`).

mod support;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use portico_bgp::wire::Notification;
use portico_bgp::{Prefix, RouteAttributes, Routes, Session, State};
use portico_netns::{Netns, NsRuntime, unique_name, veth, wait_until};
use support::Bird;
use support::lab::{
    BIRD_ASN, OUR_ASN, ROUTER, SPEAKER, bgp_protocol, far_lab, lab, peer, peer_to, routes,
};

#[test]
fn ebgp_announce_withdraw_reestablish_and_stop() {
    let Some(lab) = lab("ebgp_announce_withdraw_reestablish_and_stop", OUR_ASN, "") else {
        return;
    };
    let session = lab.spawn(peer(OUR_ASN, BIRD_ASN));
    lab.established(&session);
    let attrs = RouteAttributes::new(None, Some(20), [(65001 << 16) | 100, (65001 << 16) | 200]);
    let all = ["10.128.0.10/32", "10.128.0.11/32", "10.129.0.0/24"];
    session.set_routes(routes(&all, &attrs));
    let got = lab.bird_has(&all, Duration::from_secs(5));
    for r in got.values() {
        assert_eq!(r.attrs["BGP.origin"], "IGP", "{r:?}");
        assert_eq!(r.attrs["BGP.as_path"], "65001");
        assert_eq!(r.attrs["BGP.next_hop"], SPEAKER);
        assert_eq!(r.attrs["BGP.med"], "20");
        assert_eq!(r.attrs["BGP.community"], "(65001,100) (65001,200)");
        assert!(r.via[0].starts_with(SPEAKER), "{r:?}");
    }

    // Withdraw one.
    let kept = ["10.128.0.10/32", "10.129.0.0/24"];
    let generation = session.set_routes(routes(&kept, &attrs));
    lab.rt
        .block_on(session.wait_synced(generation, Duration::from_secs(5)))
        .unwrap();
    lab.bird_has(&kept, Duration::from_secs(5));

    // BIRD drops the session: we reconnect and send the full set again.
    lab.bird.birdc("restart s1");
    let s = lab
        .rt
        .block_on(session.wait_for(Duration::from_secs(20), |s| {
            s.flaps == 1 && s.state == State::Established
        }));
    assert!(s.is_ok(), "{s:?}\n{}", lab.bird.diagnostics());
    lab.bird_has(&kept, Duration::from_secs(5));
    assert!(
        support::log_text().contains("to=Established"),
        "a log line per transition"
    );

    // Graceful stop: BIRD gets a Cease and drops the routes at once.
    let stats = lab.rt.block_on(session.shutdown("portico stopping"));
    assert_eq!(stats.state, State::Idle);
    assert_eq!(
        stats
            .last_notification_sent
            .as_ref()
            .map(|n| (n.code, n.subcode)),
        Some((6, 2))
    );
    let gone = wait_until(Duration::from_secs(2), || lab.bird.routes("s1").is_empty());
    assert!(gone, "{}", lab.bird.birdc("show route all protocol s1"));
    let info = lab.bird.protocol("s1");
    assert!(
        info.contains("Received: Administrative shutdown"),
        "BIRD shows our Cease: {info}\n{}",
        lab.bird.log_text()
    );
    assert!(
        lab.bird.log_text().contains("portico stopping"),
        "the shutdown communication"
    );
}

#[test]
fn ibgp_with_local_pref_md5_and_source_address() {
    let Some(lab) = lab(
        "ibgp_with_local_pref_md5_and_source_address",
        BIRD_ASN,
        "password \"portico-md5\";",
    ) else {
        return;
    };
    let mut cfg = peer(BIRD_ASN, BIRD_ASN);
    cfg.md5_password = Some("portico-md5".into());
    cfg.source_address = Some(SPEAKER.parse().unwrap());
    cfg.router_id = Ipv4Addr::new(10, 0, 0, 2);
    let session = lab.spawn(cfg);
    lab.established(&session);
    let attrs = RouteAttributes::new(Some(300), None, [(65000 << 16) | 1]);
    session.set_routes(routes(&["10.128.0.10/32"], &attrs));
    let got = lab.bird_has(&["10.128.0.10/32"], Duration::from_secs(5));
    let r = &got["10.128.0.10/32"];
    assert_eq!(r.attrs["BGP.local_pref"], "300", "{r:?}");
    assert_eq!(r.attrs["BGP.as_path"], "", "iBGP: empty AS_PATH");
    assert_eq!(r.attrs["BGP.next_hop"], SPEAKER);
    assert_eq!(r.attrs["BGP.community"], "(65000,1)");
    // The TCP connection is MD5-signed (BIRD would refuse it otherwise) and
    // comes from the configured source address.
    let ss = lab
        .speaker_ns
        .exec("ss", &["-tniH", "dst", ROUTER])
        .expect("ss");
    let ss = String::from_utf8_lossy(&ss.stdout);
    assert!(ss.contains("md5"), "ss shows TCP-MD5: {ss}");
    assert!(ss.contains(&format!("{SPEAKER}:")), "{ss}");
    lab.rt.block_on(session.shutdown("done"));

    // A wrong key: BIRD's kernel drops our unsigned-for-it SYNs.
    let mut cfg = peer(BIRD_ASN, BIRD_ASN);
    cfg.md5_password = Some("wrong-key".into());
    let session = lab.spawn(cfg);
    let r = lab
        .rt
        .block_on(session.wait_established(Duration::from_secs(3)));
    assert!(r.is_err(), "no session with a wrong TCP-MD5 key");
    assert!(!lab.bird.bgp_state("s1").contains("Established"));
    session.abort();
}

#[test]
fn crash_drops_routes_and_a_silent_speaker_expires_birds_hold_timer() {
    let Some(lab) = lab(
        "crash_drops_routes_and_a_silent_speaker_expires_birds_hold_timer",
        OUR_ASN,
        "",
    ) else {
        return;
    };
    let attrs = RouteAttributes::default();
    let vip = ["10.128.0.10/32"];

    // A crash: the task ends without a NOTIFICATION; the kernel closes the
    // connection, BIRD drops the routes at once.
    let session = lab.spawn(peer(OUR_ASN, BIRD_ASN));
    lab.established(&session);
    session.set_routes(routes(&vip, &attrs));
    lab.bird_has(&vip, Duration::from_secs(5));
    let start = Instant::now();
    session.abort();
    let gone = wait_until(Duration::from_secs(5), || lab.bird.routes("s1").is_empty());
    assert!(gone, "BIRD drops the routes of a crashed speaker");
    eprintln!("crash → routes gone in BIRD after {:?}", start.elapsed());
    assert!(!lab.bird.protocol("s1").contains("Administrative shutdown"));

    // A hung box: the speaker's packets stop reaching BIRD (blackhole
    // route), so only BIRD's 3 s hold timer can notice.
    let session = lab.spawn(peer(OUR_ASN, BIRD_ASN));
    lab.established(&session);
    session.set_routes(routes(&vip, &attrs));
    lab.bird_has(&vip, Duration::from_secs(5));
    lab.speaker_ns
        .exec(
            "ip",
            &["route", "add", "blackhole", &format!("{ROUTER}/32")],
        )
        .expect("blackhole route");
    let start = Instant::now();
    let gone = wait_until(Duration::from_secs(8), || lab.bird.routes("s1").is_empty());
    let waited = start.elapsed();
    assert!(gone, "BIRD drops the routes when its hold timer expires");
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(5),
        "within the 3 s hold time (+1 s keepalive phase), not {waited:?}"
    );
    eprintln!("silent speaker → routes gone in BIRD after {waited:?} (hold time 3 s)");
    let info = lab.bird.protocol("s1");
    assert!(info.contains("Hold timer expired"), "{info}");
    // Our side notices too: its own hold timer (the blackhole also fails
    // the reverse-path check of BIRD's keepalives) or BIRD's NOTIFICATION.
    let s = lab
        .rt
        .block_on(session.wait_for(Duration::from_secs(5), |s| s.flaps == 1));
    let s = s.expect("the session went down");
    let err = s.last_error.clone().unwrap_or_default();
    assert!(
        s.last_notification_sent == Some(Notification::hold_timer_expired())
            || s.last_notification_received == Some(Notification::hold_timer_expired()),
        "{s:?}"
    );
    assert!(
        err.contains("hold timer expired") || err.contains("Hold Timer Expired"),
        "{err}"
    );
    // Heal the path: the session comes back with the routes.
    lab.speaker_ns
        .exec(
            "ip",
            &["route", "del", "blackhole", &format!("{ROUTER}/32")],
        )
        .expect("remove the blackhole route");
    let back = lab
        .rt
        .block_on(session.wait_for(Duration::from_secs(20), |s| {
            s.flaps == 1 && s.state == State::Established
        }));
    assert!(back.is_ok(), "{back:?}\n{}", lab.bird.diagnostics());
    lab.bird_has(&vip, Duration::from_secs(5));
    lab.rt.block_on(session.shutdown("done"));
}

#[test]
fn wrong_asn_either_way_is_a_bad_peer_as_notification() {
    let Some(lab) = lab(
        "wrong_asn_either_way_is_a_bad_peer_as_notification",
        OUR_ASN,
        "",
    ) else {
        return;
    };
    // We claim AS 65002; BIRD expects 65001 and refuses our OPEN.
    let session = lab.spawn(peer(65002, BIRD_ASN));
    let s = lab
        .rt
        .block_on(session.wait_for(Duration::from_secs(15), |s| s.notifications_received >= 1))
        .expect("BIRD's NOTIFICATION arrives");
    let n = s.last_notification_received.clone().unwrap();
    assert_eq!(
        (n.code, n.subcode),
        (2, 2),
        "OPEN Message Error / Bad Peer AS: {n}"
    );
    assert_ne!(s.state, State::Established);
    assert!(
        s.last_error.unwrap().contains("Bad Peer AS"),
        "last_error names it"
    );
    assert!(
        support::log_text().contains("NOTIFICATION received: OPEN Message Error / Bad Peer AS"),
        "logged"
    );
    lab.rt.block_on(session.shutdown("done"));

    // We expect AS 65099 from BIRD (which is 65000): we refuse its OPEN.
    let session = lab.spawn(peer(OUR_ASN, 65099));
    let s = lab
        .rt
        .block_on(session.wait_for(Duration::from_secs(15), |s| s.notifications_sent >= 1))
        .expect("we send a NOTIFICATION");
    let n = s.last_notification_sent.clone().unwrap();
    assert_eq!((n.code, n.subcode), (2, 2));
    let seen = wait_until(Duration::from_secs(5), || {
        lab.bird.protocol("s1").contains("Received: Bad peer AS")
    });
    assert!(seen, "{}", lab.bird.protocol("s1"));
    lab.rt.block_on(session.shutdown("done"));
}

/// Two speakers (two namespaces, as two Portico instances) announce the
/// same VIP; BIRD merges the equal paths into one multipath route in its
/// namespace's FIB.
#[test]
fn two_speakers_give_an_ecmp_route_in_the_router_fib() {
    let test = "two_speakers_give_an_ecmp_route_in_the_router_fib";
    if !support::require(test, &["bird", "birdc"]) {
        return;
    }
    support::logs();
    let router_ns = Netns::new("bgr").expect("router namespace");
    router_ns
        .exec("sysctl", &["-qw", "net.ipv4.fib_multipath_hash_policy=1"])
        .expect("sysctl");
    let mut protocols = String::new();
    let mut speakers = Vec::new();
    for i in 1..=2 {
        let ns = Netns::new("bgs").expect("speaker namespace");
        let (router_addr, speaker_addr) = (format!("10.0.{i}.1"), format!("10.0.{i}.2"));
        veth(
            &router_ns,
            &unique_name("r"),
            Some(&format!("{router_addr}/24")),
            &ns,
            &unique_name("s"),
            Some(&format!("{speaker_addr}/24")),
        )
        .expect("veth router ↔ speaker");
        protocols.push_str(&bgp_protocol(
            &format!("s{i}"),
            &router_addr,
            &speaker_addr,
            OUR_ASN,
            "",
        ));
        speakers.push((ns, router_addr, speaker_addr));
    }
    let bird = Bird::start(
        &router_ns,
        &format!(
            "router id 10.0.0.1;\nprotocol device {{ }}\n\
             protocol kernel {{ ipv4 {{ export all; }}; merge paths on; }}\n{protocols}"
        ),
    );
    let vip = "10.128.0.10/32";
    let mut running = Vec::new();
    for (ns, router_addr, speaker_addr) in &speakers {
        let rt = NsRuntime::new(ns).expect("speaker runtime");
        let cfg = peer_to(router_addr, speaker_addr, OUR_ASN, BIRD_ASN);
        let session = rt.enter(|| Session::spawn(cfg));
        rt.block_on(session.wait_established(Duration::from_secs(20)))
            .unwrap_or_else(|e| panic!("{e}\n{}", bird.diagnostics()));
        session.set_routes(routes(&[vip], &RouteAttributes::default()));
        running.push((rt, session));
    }
    let fib = || {
        let out = router_ns
            .exec("ip", &["route", "show", vip])
            .expect("ip route show");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut last = String::new();
    let multipath = wait_until(Duration::from_secs(10), || {
        last = fib();
        last.contains("nexthop via 10.0.1.2") && last.contains("nexthop via 10.0.2.2")
    });
    assert!(
        multipath,
        "a multipath route with both speakers as next hops: {last:?}\n{}",
        bird.birdc(&format!("show route all {vip}"))
    );
    eprintln!("router FIB: {last}");
    let bird_routes = bird.birdc(&format!("show route {vip}"));
    assert_eq!(
        bird_routes.matches("unicast [s").count(),
        2,
        "{bird_routes}"
    );

    // The first speaker stops: one next hop left.
    let (rt, session) = running.remove(0);
    rt.block_on(session.shutdown("instance stopping"));
    let single = wait_until(Duration::from_secs(5), || {
        last = fib();
        !last.contains("nexthop") && last.contains("via 10.0.2.2")
    });
    assert!(single, "only the second speaker remains: {last:?}");
    for (rt, session) in running {
        rt.block_on(session.shutdown("done"));
    }
}

/// Probe, not a test: how long BIRD takes to have 1,000 and 10,000 VIPs
/// from us (announce all), and to lose one (withdraw one), as seen by
/// `birdc show route count`. Run with
/// `cargo nextest run -p portico-bgp --test bird --run-ignored only convergence_probe --no-capture`.
#[test]
#[ignore = "a probe: prints convergence figures"]
fn convergence_probe() {
    let Some(lab) = lab("convergence_probe", OUR_ASN, "") else {
        return;
    };
    for n in [1_000u32, 10_000] {
        let session = lab.spawn(peer(OUR_ASN, BIRD_ASN));
        lab.established(&session);
        let attrs = RouteAttributes::new(None, None, [(65001 << 16) | 100]);
        let all: Routes = (0..n)
            .map(|i| {
                let a = Ipv4Addr::from(0x0a80_0000 + i);
                (Prefix::host(a.into()), attrs.clone())
            })
            .collect();
        let count = |want: usize| {
            wait_until(Duration::from_secs(60), || {
                lab.bird.route_count("s1") == Some(want)
            })
        };
        let start = Instant::now();
        let generation = session.set_routes(all.clone());
        let sent = lab
            .rt
            .block_on(session.wait_synced(generation, Duration::from_secs(60)))
            .expect("sent");
        let t_sent = start.elapsed();
        assert!(count(n as usize), "BIRD has all {n}");
        let t_all = start.elapsed();
        let mut fewer = all;
        fewer.pop_first();
        let start = Instant::now();
        session.set_routes(fewer);
        assert!(count(n as usize - 1));
        let t_one = start.elapsed();
        eprintln!(
            "PROBE n={n}: {} UPDATEs; sent in {t_sent:.1?}; all in BIRD after {t_all:.1?}; \
             withdraw one seen after {t_one:.1?}",
            sent.updates_sent
        );
        lab.rt.block_on(session.shutdown("probe done"));
        assert!(wait_until(Duration::from_secs(10), || lab
            .bird
            .route_count("s1")
            == Some(0)));
    }
}

/// Hold time 0 on the router's side: the negotiated hold time is 0, so
/// neither side sends keepalives nor expires a hold timer, and the session
/// stays up well past 3 s.
#[test]
fn hold_time_zero_means_no_keepalives() {
    let Some(lab) = lab(
        "hold_time_zero_means_no_keepalives",
        OUR_ASN,
        "hold time 0;",
    ) else {
        return;
    };
    let session = lab.spawn(peer(OUR_ASN, BIRD_ASN));
    lab.established(&session);
    assert_eq!(session.stats().hold_time_s, 0, "min(3, 0)");
    std::thread::sleep(Duration::from_secs(4));
    let s = session.stats();
    assert_eq!((s.state, s.flaps), (State::Established, 0));
    assert_eq!(lab.bird.bgp_state("s1"), "Established");
    lab.rt.block_on(session.shutdown("done"));
}

/// eBGP multihop: BIRD two hops away (through a forwarding namespace).
/// With the default TTL of 1 our SYN dies at the middle hop; with
/// `multihop_ttl = 2` the session comes up.
#[test]
fn ebgp_multihop_needs_the_ttl() {
    let Some(far) = far_lab("ebgp_multihop_needs_the_ttl", false, "multihop 2;") else {
        return;
    };
    let mut cfg = far.peer.clone();
    assert_eq!(cfg.ttl(), 1);
    let session = far.rt.enter(|| Session::spawn(cfg.clone()));
    let r = far
        .rt
        .block_on(session.wait_established(Duration::from_secs(3)));
    assert!(r.is_err(), "TTL 1 cannot cross the middle hop");
    session.abort();

    cfg.multihop_ttl = Some(2);
    let session = far.rt.enter(|| Session::spawn(cfg));
    far.established_with(&session, "10.128.0.10/32");
    far.rt.block_on(session.shutdown("done"));
}
