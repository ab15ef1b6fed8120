//! BGP over IPv6 against a real FRR `bgpd` (issue 17): a session between
//! global addresses carrying IPv6 unicast, and IPv4 unicast with an IPv6
//! next hop (RFC 8950, FRR's `neighbor X capability extended-nexthop`);
//! and a session between link-local addresses (FRR's `neighbor fe80::…
//! interface IF`). Every check goes through `vtysh -c 'show bgp … json'`.
//!
//! Needs root, `ip`, `/usr/lib/frr/bgpd`, `/usr/lib/frr/zebra` and
//! `vtysh` (Debian `frr`).

mod support;

use std::time::Duration;

use portico_bgp::{Family, PeerConfig, RouteAttributes, Session};
use portico_netns::{NsRuntime, wait_until};
use support::frr::{BGPD, Frr, ZEBRA};
use support::lab::{
    BIRD_ASN as FRR_ASN, OUR_ASN, ROUTER, SPEAKER, VIP4, VIP6, counts, peer_to, routes,
};
use support::{Link, ROUTER_LINK_LOCAL, ROUTER_V6, SPEAKER_LINK_LOCAL, SPEAKER_V6};

/// FRR's configuration: one passive eBGP neighbour (`neighbor_lines`
/// name and scope it) with both unicast families and RFC 8950.
fn frr_config(neighbor: &str, neighbor_lines: &str) -> String {
    format!(
        "frr defaults traditional\nhostname r1\nlog stdout debugging\ndebug bgp neighbor-events\n!\n\
         router bgp {FRR_ASN}\n bgp router-id {ROUTER}\n no bgp ebgp-requires-policy\n\
         neighbor {neighbor} remote-as {OUR_ASN}\n{neighbor_lines}\
         neighbor {neighbor} passive\n neighbor {neighbor} timers 1 3\n\
         neighbor {neighbor} capability extended-nexthop\n\
         address-family ipv4 unicast\n  neighbor {neighbor} activate\n exit-address-family\n\
         address-family ipv6 unicast\n  neighbor {neighbor} activate\n exit-address-family\n!\n"
    )
}

/// The link with IPv6, FRR in the router namespace and our runtime in
/// the speaker's; None (skipped) without root or FRR.
fn frr_lab(
    test: &str,
    neighbor: &str,
    lines: &dyn Fn(&Link) -> String,
) -> Option<(Link, Frr, NsRuntime)> {
    if !(portico_netns::require_root(test)
        && portico_netns::require_programs(test, &[BGPD, ZEBRA, "vtysh"], "apt-get install frr"))
    {
        return None;
    }
    support::logs();
    let link = support::link(true);
    let frr = Frr::start(&link.router, &frr_config(neighbor, &lines(&link)));
    let rt = NsRuntime::new(&link.speaker).expect("speaker runtime");
    Some((link, frr, rt))
}

fn our_peer(address: &str) -> PeerConfig {
    peer_to(address, SPEAKER, OUR_ASN, FRR_ASN)
}

/// The next hops FRR's RIB has for `prefix` (`show bgp <afi> unicast
/// <prefix> json`), waiting until it has the route.
fn frr_next_hops(frr: &Frr, afi: &str, prefix: &str) -> Vec<String> {
    let command = format!("show bgp {afi} unicast {prefix} json");
    let mut last = serde_json::Value::Null;
    let found = wait_until(Duration::from_secs(10), || {
        last = frr.json(&command);
        last["paths"].as_array().is_some_and(|p| !p.is_empty())
    });
    assert!(found, "FRR has no {prefix}: {last}\n{}", frr.diagnostics());
    last["paths"][0]["nexthops"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["ip"].as_str().map(str::to_owned))
        .collect()
}

fn frr_has_none(frr: &Frr, afi: &str, prefix: &str) -> bool {
    let command = format!("show bgp {afi} unicast {prefix} json");
    wait_until(Duration::from_secs(10), || {
        frr.json(&command)["paths"]
            .as_array()
            .is_none_or(|p| p.is_empty())
    })
}

fn established(rt: &NsRuntime, frr: &Frr, session: &Session, neighbor: &str) {
    rt.block_on(session.wait_established(Duration::from_secs(20)))
        .unwrap_or_else(|e| panic!("{e}\n{}", frr.diagnostics()));
    let up = wait_until(Duration::from_secs(5), || {
        frr.neighbor_state(neighbor) == "Established"
    });
    assert!(up, "FRR sees Established\n{}", frr.diagnostics());
}

#[test]
fn frr_ipv6_session_carries_ipv6_and_rfc8950_ipv4() {
    let Some((_link, frr, rt)) = frr_lab(
        "frr_ipv6_session_carries_ipv6_and_rfc8950_ipv4",
        SPEAKER_V6,
        &|_| String::new(),
    ) else {
        return;
    };
    let session = rt.enter(|| Session::spawn(our_peer(ROUTER_V6)));
    established(&rt, &frr, &session, SPEAKER_V6);
    let s = session.stats();
    assert_eq!(s.families, Family::ALL, "{s:?}");
    assert!(s.extended_next_hop, "FRR sent (1, 1, 2) too: {s:?}");
    let generation = session.set_routes(routes(&[VIP4, VIP6], &RouteAttributes::default()));
    let s = rt
        .block_on(session.wait_synced(generation, Duration::from_secs(5)))
        .expect("synced");
    assert_eq!(counts(&s), (2, 1, 0));
    // The IPv4 VIP in FRR's IPv4 table with our IPv6 address as next hop.
    assert_eq!(frr_next_hops(&frr, "ipv4", VIP4), [SPEAKER_V6]);
    assert_eq!(frr_next_hops(&frr, "ipv6", VIP6)[0], SPEAKER_V6);
    // Withdrawn, each family on its own.
    session.set_routes(routes(&[VIP6], &RouteAttributes::default()));
    assert!(frr_has_none(&frr, "ipv4", VIP4), "{}", frr.diagnostics());
    session.set_routes(routes(&[], &RouteAttributes::default()));
    assert!(frr_has_none(&frr, "ipv6", VIP6), "{}", frr.diagnostics());
    assert_eq!(session.stats().flaps, 0);
    rt.block_on(session.shutdown("done"));
}

#[test]
fn frr_link_local_session_scoped_by_the_interface() {
    let Some((link, frr, rt)) = frr_lab(
        "frr_link_local_session_scoped_by_the_interface",
        SPEAKER_LINK_LOCAL,
        &|link: &Link| {
            format!(
                " neighbor {SPEAKER_LINK_LOCAL} interface {}\n",
                link.router_if
            )
        },
    ) else {
        return;
    };
    let mut cfg = our_peer(ROUTER_LINK_LOCAL);
    cfg.interface = Some(link.speaker_if.clone());
    cfg.source_address = Some(SPEAKER_LINK_LOCAL.parse().unwrap());
    cfg.next_hop_v6 = Some(SPEAKER_V6.parse().unwrap());
    let session = rt.enter(|| Session::spawn(cfg));
    established(&rt, &frr, &session, SPEAKER_LINK_LOCAL);
    let s = session.stats();
    assert_eq!(s.families, Family::ALL, "{s:?}");
    assert!(s.extended_next_hop, "{s:?}");
    session.set_routes(routes(&[VIP4, VIP6], &RouteAttributes::default()));
    // FRR keeps the global next hop and the link-local one (RFC 2545 §3).
    let v6 = frr_next_hops(&frr, "ipv6", VIP6);
    assert!(
        v6.contains(&SPEAKER_V6.to_owned()) && v6.contains(&SPEAKER_LINK_LOCAL.to_owned()),
        "{v6:?}"
    );
    let v4 = frr_next_hops(&frr, "ipv4", VIP4);
    assert!(v4.contains(&SPEAKER_V6.to_owned()), "{v4:?}");
    rt.block_on(session.shutdown("done"));
}
