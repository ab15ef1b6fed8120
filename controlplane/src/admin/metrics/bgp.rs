//! The BGP families of the metrics (none without peers; see the list in
//! the parent module).

use super::{Labels, counter, gauges};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// The BGP families (none without peers).
pub(super) fn encode_bgp(r: &mut Registry, bgp: &crate::admin::BgpReport) {
    if bgp.peers.is_empty() {
        return;
    }
    let state = gauges(
        r,
        "bgp_session_state",
        "RFC 4271 state of a BGP session: 1 Idle, 2 Connect, 3 Active, 4 OpenSent, 5 OpenConfirm, 6 Established",
    );
    let uptime = Family::<Labels, Gauge>::default();
    r.register_with_unit(
        "bgp_session_uptime",
        "Time since the BGP session became Established (0 while not)",
        Unit::Seconds,
        uptime.clone(),
    );
    let prefixes = gauges(
        r,
        "bgp_prefixes_announced",
        "Prefixes the router has from us now (both families)",
    );
    let prefixes_by_family = gauges(
        r,
        "bgp_prefixes_announced_by_family",
        "Prefixes the router has from us now, per address family",
    );
    let skipped = gauges(
        r,
        "bgp_prefixes_skipped",
        "Desired prefixes not sent at the last sync: their family is not negotiated on the session (or IPv4 over an IPv6 session without RFC 8950)",
    );
    let negotiated = gauges(
        r,
        "bgp_family_negotiated",
        "1 for an address family we offer that the BGP session carries (both OPENs list it, RFC 4760), 0 for one it does not carry (yet)",
    );
    let extended_next_hop = gauges(
        r,
        "bgp_extended_next_hop",
        "1 when the BGP session negotiated the extended next hop encoding (RFC 8950: IPv4 routes with an IPv6 next hop), 0 while not; only for peers it is offered to",
    );
    let gtsm_hops = gauges(
        r,
        "bgp_ttl_security_hops",
        "GTSM (RFC 5082) of a BGP session: the router's configured distance in hops \
         (ttl_security_hops; 0: GTSM off). With GTSM we send with TTL 255 and drop \
         segments below bgp_ttl_security_min_ttl",
    );
    let gtsm_min_ttl = gauges(
        r,
        "bgp_ttl_security_min_ttl",
        "With GTSM (RFC 5082 §3), the least TTL / hop limit accepted from the router: \
         255 - (hops - 1); only for peers with ttl_security_hops. A session that stays \
         down with it: the router is farther than configured, or does not send 255",
    );
    let sent = counter(r, "bgp_updates_sent", "BGP UPDATE messages sent", None);
    let received = counter(
        r,
        "bgp_updates_received",
        "BGP UPDATE messages received",
        None,
    );
    let flaps = counter(
        r,
        "bgp_session_flaps",
        "Times a BGP session went down from Established",
        None,
    );
    for p in &bgp.peers {
        let l: Labels = vec![("peer", p.peer.clone())];
        state.get_or_create(&l).set(i64::from(p.state_number));
        uptime.get_or_create(&l).set(p.uptime_s.unwrap_or(0) as i64);
        for (family, n) in [
            ("ipv4", p.prefixes_sent.saturating_sub(p.prefixes_sent_v6)),
            ("ipv6", p.prefixes_sent_v6),
        ] {
            let mut fl = l.clone();
            fl.push(("family", family.to_owned()));
            prefixes_by_family.get_or_create(&fl).set(n as i64);
        }
        for family in &p.families_offered {
            let mut fl = l.clone();
            fl.push(("family", family.clone()));
            negotiated
                .get_or_create(&fl)
                .set(i64::from(p.families.contains(family)));
        }
        if p.extended_next_hop_offered {
            extended_next_hop
                .get_or_create(&l)
                .set(i64::from(p.extended_next_hop));
        }
        gtsm_hops
            .get_or_create(&l)
            .set(i64::from(p.ttl_security_hops.unwrap_or(0)));
        if let (Some(_), Some(min_ttl)) = (p.ttl_security_hops, p.min_ttl) {
            gtsm_min_ttl.get_or_create(&l).set(i64::from(min_ttl));
        }
        prefixes.get_or_create(&l).set(p.prefixes_sent as i64);
        skipped.get_or_create(&l).set(p.prefixes_skipped as i64);
        sent.get_or_create(&l).inc_by(p.updates_sent);
        received.get_or_create(&l).inc_by(p.updates_received);
        flaps.get_or_create(&l).inc_by(p.flaps);
    }
    let withdrawn = gauges(
        r,
        "bgp_withdrawn",
        "1 while every BGP route is withdrawn, by reason (watchdog: a worker stopped polling; stopping: graceful stop)",
    );
    for reason in ["watchdog", "stopping"] {
        withdrawn
            .get_or_create(&vec![("reason", reason.to_owned())])
            .set(i64::from(bgp.withdrawn.as_deref() == Some(reason)));
    }
    let trips = Counter::<u64>::default();
    trips.inc_by(bgp.watchdog_trips);
    r.register(
        "bgp_watchdog_trips",
        "Times the worker watchdog withdrew every BGP route",
        trips,
    );
}
