//! [`BgpConfig::validate`]: every problem of a `[bgp]` section at once,
//! as `path: reason`.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};

use super::{
    BgpConfig, Family, GTSM_TTL, MAX_SHUTDOWN_DRAIN_S, MAX_TTL_SECURITY_HOPS, PeerConfig,
    WATCHDOG_TIMEOUT_MS,
};
use crate::wire::AS_TRANS;
use crate::wire::update::is_global_next_hop_v6;

/// One problem in the `[bgp]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `bgp.peer[0].hold_time_s` and the like.
    pub path: String,
    pub reason: String,
}

/// Every problem of a `[bgp]` section.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.problems.iter().map(|p| format!("{}: {}", p.path, p.reason)).collect::<Vec<_>>().join("\n"))]
pub struct ConfigError {
    pub problems: Vec<Problem>,
}

/// The `families`, `next_hop_v6` and `next_hop_v6_link_local` checks of
/// one peer.
fn check_families(
    peer: &PeerConfig,
    p: &mut impl FnMut(String, String),
    at: &dyn Fn(&str) -> String,
) {
    if let Some(list) = &peer.families {
        if list.is_empty() {
            p(
                at("families"),
                "empty: offer at least one of ipv4-unicast, ipv6-unicast (leave it out for the default)".into(),
            );
        }
        let mut seen = HashSet::new();
        for f in list {
            if !seen.insert(*f) {
                p(at("families"), format!("{f} is listed twice"));
            }
        }
    }
    let session = if peer.address.is_ipv4() {
        "IPv4 session"
    } else {
        "link-local session"
    };
    if peer.offered_families().contains(&Family::Ipv6Unicast) && !peer.has_ipv6_next_hop() {
        p(
            at("families"),
            format!(
                "ipv6-unicast over the {session} to {} needs a global IPv6 next hop: set \
                 next_hop_v6 (one of this instance's IPv6 addresses; portico derives it from a \
                 global IPv6 host address when a port has one)",
                peer.address
            ),
        );
    }
    if let Some(true) = peer.extended_next_hop {
        if peer.address.is_ipv4() {
            p(
                at("extended_next_hop"),
                format!(
                    "{} is IPv4: IPv4 routes over it carry our IPv4 address as NEXT_HOP; \
                     RFC 8950 next hops are for IPv6 sessions",
                    peer.address
                ),
            );
        } else if !peer.offered_families().contains(&Family::Ipv4Unicast) {
            p(
                at("extended_next_hop"),
                "ipv4-unicast is not in families: there are no IPv4 routes to give an IPv6 next hop"
                    .into(),
            );
        } else if !peer.has_ipv6_next_hop() {
            p(
                at("extended_next_hop"),
                format!(
                    "IPv4 routes over the {session} to {} need a global IPv6 next hop: set \
                     next_hop_v6",
                    peer.address
                ),
            );
        }
    }
    if let Some(nh) = peer.next_hop_v6
        && !is_global_next_hop_v6(nh)
    {
        p(
            at("next_hop_v6"),
            format!(
                "{nh} is not a global unicast IPv6 address (link-local goes in next_hop_v6_link_local)"
            ),
        );
    }
    if let Some(ll) = peer.next_hop_v6_link_local {
        if !ll.is_unicast_link_local() {
            p(
                at("next_hop_v6_link_local"),
                format!("{ll} is not a link-local address (fe80::/10)"),
            );
        }
        if !peer.has_ipv6_next_hop() {
            p(
                at("next_hop_v6_link_local"),
                "a link-local next hop is sent after a global one (RFC 2545 §3): set next_hop_v6 too"
                    .into(),
            );
        }
    }
}

/// The `interface` and `source_address` checks of a peer (the address's
/// scope, RFC 4007).
fn check_scope(peer: &PeerConfig, p: &mut impl FnMut(String, String), at: &dyn Fn(&str) -> String) {
    let a = peer.address;
    match (&peer.interface, peer.is_link_local()) {
        (None, true) => p(
            at("interface"),
            format!(
                "missing: {a} is link-local, so the interface it is on must be named (its scope)"
            ),
        ),
        (Some(i), false) => p(
            at("interface"),
            format!(
                "`{i}` is only for a link-local address (fe80::/10): {a} is reached by the \
                 kernel's routing table (leave interface out)"
            ),
        ),
        (Some(i), true)
            if i.is_empty()
                || i.len() > MAX_INTERFACE_NAME_LEN
                || i == "."
                || i == ".."
                || i.contains(|c: char| c == '/' || c == '%' || c.is_whitespace()) =>
        {
            p(
                at("interface"),
                format!(
                    "`{i}` is not an interface name (1..={MAX_INTERFACE_NAME_LEN} bytes, no \
                     `/`, `%` or whitespace)"
                ),
            )
        }
        _ => {}
    }
    if let Some(IpAddr::V6(src)) = peer.source_address
        && src.is_unicast_link_local()
        && !peer.is_link_local()
    {
        p(
            at("source_address"),
            format!("{src} is link-local: it reaches only a link-local peer address, not {a}"),
        );
    }
}

/// The `multihop_ttl` and `ttl_security_hops` (GTSM, RFC 5082) checks of
/// a peer.
fn check_ttl(peer: &PeerConfig, p: &mut impl FnMut(String, String), at: &dyn Fn(&str) -> String) {
    match (peer.multihop_ttl, peer.ttl_security_hops) {
        (Some(ttl), Some(hops)) => p(
            at("multihop_ttl"),
            format!(
                "{ttl} contradicts ttl_security_hops = {hops}: GTSM sends with TTL {GTSM_TTL}                  (RFC 5082 §3) and the router's distance is ttl_security_hops; leave                  multihop_ttl out"
            ),
        ),
        (Some(0), None) => p(
            at("multihop_ttl"),
            "0 would never leave the host: 1 (directly connected) ..= 255".into(),
        ),
        _ => {}
    }
    if let Some(hops) = peer.ttl_security_hops
        && !(1..=MAX_TTL_SECURITY_HOPS).contains(&hops)
    {
        p(
            at("ttl_security_hops"),
            format!(
                "{hops} is out of range: 1 (directly connected) ..= {MAX_TTL_SECURITY_HOPS}                  (the router's packets must arrive with TTL ≥ {GTSM_TTL} − (hops − 1), RFC                  5082 §3); leave it out for no GTSM"
            ),
        );
    }
}

/// The longest interface name Linux takes (IFNAMSIZ − 1).
pub const MAX_INTERFACE_NAME_LEN: usize = 15;

/// The longest TCP-MD5 key Linux takes (TCP_MD5SIG_MAXKEYLEN).
pub const MD5_MAX_KEY_LEN: usize = 80;

impl BgpConfig {
    /// Checks everything that does not need the network; returns every
    /// problem at once.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        let mut p = |path: String, reason: String| problems.push(Problem { path, reason });
        let mut seen = HashSet::new();
        for (i, peer) in self.peers.iter().enumerate() {
            let at = |field: &str| format!("bgp.peer[{i}].{field}");
            let a = peer.address;
            if a.is_unspecified() || a.is_multicast() || a == IpAddr::V4(Ipv4Addr::BROADCAST) {
                p(
                    at("address"),
                    format!("{a} is not a unicast address a router can have"),
                );
            }
            // A session is (address, scope, port): the same link-local
            // address on two interfaces is two routers (unnumbered BGP on
            // several links).
            if !seen.insert((a, peer.link_local_scope(), peer.port)) {
                p(
                    at("address"),
                    format!("{} is configured twice", peer.name()),
                );
            }
            for (field, asn) in [("peer_asn", peer.peer_asn), ("my_asn", peer.my_asn)] {
                if asn == 0 || asn == AS_TRANS {
                    p(
                        at(field),
                        format!("{asn} is reserved (0, and 23456 = AS_TRANS) and cannot be an AS"),
                    );
                }
            }
            if peer.router_id.is_unspecified() {
                p(
                    at("router_id"),
                    "0.0.0.0 is not a BGP identifier (use one of this instance's IPv4 addresses)"
                        .into(),
                );
            }
            if peer.port == 0 {
                p(
                    at("port"),
                    "port 0 cannot be connected to (BGP: 179)".into(),
                );
            }
            if matches!(peer.hold_time_s, 1 | 2) {
                p(
                    at("hold_time_s"),
                    format!(
                        "{} s is not allowed: 0 (no keepalives) or at least 3 (RFC 4271 §4.2)",
                        peer.hold_time_s
                    ),
                );
            }
            match peer.keepalive_s {
                Some(0) if peer.hold_time_s != 0 => p(
                    at("keepalive_s"),
                    "0 sends no keepalives, so the router's hold timer expires; leave it out for a third of hold_time_s".into(),
                ),
                Some(k) if peer.hold_time_s != 0 && k >= peer.hold_time_s => p(
                    at("keepalive_s"),
                    format!("{k} s is not less than hold_time_s ({} s): the router's hold timer would expire", peer.hold_time_s),
                ),
                _ => {}
            }
            if let Some(src) = peer.source_address {
                if src.is_ipv4() != a.is_ipv4() {
                    p(
                        at("source_address"),
                        format!("{src} and the peer address {a} are of different families"),
                    );
                } else if src.is_unspecified() || src.is_multicast() {
                    p(
                        at("source_address"),
                        format!("{src} is not a unicast host address"),
                    );
                }
            }
            check_scope(peer, &mut p, &at);
            check_families(peer, &mut p, &at);
            if let Some(pw) = &peer.md5_password
                && (pw.is_empty() || pw.len() > MD5_MAX_KEY_LEN)
            {
                p(
                    at("md5_password"),
                    format!(
                        "{} bytes: a TCP-MD5 key has 1..={MD5_MAX_KEY_LEN} bytes (leave it out for none)",
                        pw.len()
                    ),
                );
            }
            check_ttl(peer, &mut p, &at);
            if peer.connect_retry_s == 0 {
                p(at("connect_retry_s"), "must be at least 1 s".into());
            }
            if peer.connect_retry_max_s < peer.connect_retry_s {
                p(
                    at("connect_retry_max_s"),
                    format!(
                        "{} s is less than connect_retry_s ({} s)",
                        peer.connect_retry_max_s, peer.connect_retry_s
                    ),
                );
            }
        }
        let mut names = HashSet::new();
        for (i, adv) in self.advertisements.iter().enumerate() {
            let at = |field: &str| format!("bgp.advertisement[{i}].{field}");
            if adv.name.is_empty() {
                p(at("name"), "must not be empty (pools refer to it)".into());
            } else if !names.insert(adv.name.as_str()) {
                p(at("name"), format!("`{}` is used twice", adv.name));
            }
            for (j, a) in adv.peers.iter().enumerate() {
                if !self.peers.iter().any(|peer| peer.address == *a) {
                    p(
                        format!("bgp.advertisement[{i}].peers[{j}]"),
                        format!("{a} is not the address of any [[bgp.peer]]"),
                    );
                }
            }
            if adv.local_pref.is_some()
                && !self
                    .peers
                    .iter()
                    .any(|peer| adv.applies_to(peer) && peer.is_ibgp())
            {
                p(
                    at("local_pref"),
                    "LOCAL_PREF is sent to iBGP peers only (peer_asn = my_asn) and this advertisement reaches none".into(),
                );
            }
            if adv.aggregation_length > 32 {
                p(
                    at("aggregation_length"),
                    format!(
                        "{} is longer than an IPv4 address (0..=32)",
                        adv.aggregation_length
                    ),
                );
            }
            if adv.aggregation_length_v6 > 128 {
                p(
                    at("aggregation_length_v6"),
                    format!(
                        "{} is longer than an IPv6 address (0..=128)",
                        adv.aggregation_length_v6
                    ),
                );
            }
        }
        if self.shutdown_drain_s > MAX_SHUTDOWN_DRAIN_S {
            p(
                "bgp.shutdown_drain_s".into(),
                format!(
                    "{} s is more than an hour ({MAX_SHUTDOWN_DRAIN_S} s): 0..={MAX_SHUTDOWN_DRAIN_S}",
                    self.shutdown_drain_s
                ),
            );
        }
        if !WATCHDOG_TIMEOUT_MS.contains(&self.watchdog_timeout_ms) {
            p(
                "bgp.watchdog_timeout_ms".into(),
                format!(
                    "{} ms is out of range {}..={} (a worker pauses up to a few ms between polls; \
                     too short a timeout withdraws on a scheduling hiccup)",
                    self.watchdog_timeout_ms,
                    WATCHDOG_TIMEOUT_MS.start(),
                    WATCHDOG_TIMEOUT_MS.end()
                ),
            );
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems })
        }
    }
}
