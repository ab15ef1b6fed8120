//! The `[bgp]` section: `[[bgp.peer]]` sessions and `[[bgp.advertisement]]`
//! attribute sets, as plain structs (serde-deserializable, so the
//! portico.toml schema in nic-config can embed them unchanged: this crate
//! owns these types) and [`BgpConfig::validate`], which names every problem
//! at once as `path: reason`.
//!
//! Address families (RFC 4760 multiprotocol BGP): a peer is offered the
//! `families` it lists, each as a Multiprotocol capability (RFC 5492,
//! RFC 4760 §8) in our OPEN. Left out, the default is IPv4 unicast, plus
//! IPv6 unicast when the session has an IPv6 next hop to announce
//! ([`PeerConfig::default_families`]): `next_hop_v6` set, or an IPv6
//! `source_address` or peer `address` (the session's own IPv6 address is
//! then the next hop, RFC 2545 §2). IPv6 routes over an IPv4 TCP session
//! need `next_hop_v6`: nothing else says which IPv6 address of ours the
//! router should forward to.
//!
//! Invariant: a config that passes `validate` can be handed to
//! [`crate::session::Session::spawn`] as is; the session never re-checks it.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::Deserialize;

use crate::session::RouteAttributes;
use crate::wire::update::is_global_next_hop_v6;
use crate::wire::{AFI_IPV4, AFI_IPV6, AS_TRANS, Prefix, SAFI_UNICAST};

/// The whole `[bgp]` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BgpConfig {
    #[serde(default, rename = "peer")]
    pub peers: Vec<PeerConfig>,
    #[serde(default, rename = "advertisement")]
    pub advertisements: Vec<Advertisement>,
    /// On a graceful stop (SIGTERM) the gateway withdraws every route
    /// first, then keeps forwarding (established flows, and new ones from
    /// routers that have not converged yet) for this long before it sends
    /// Cease and exits. 0..=3600.
    #[serde(default = "default_shutdown_drain_s")]
    pub shutdown_drain_s: u16,
    /// The worker watchdog: when a dataplane worker has not completed a
    /// poll loop for this long, every route is withdrawn (a box that does
    /// not forward announces nothing) until all workers poll again.
    /// 100..=60000.
    #[serde(default = "default_watchdog_timeout_ms")]
    pub watchdog_timeout_ms: u32,
}

impl Default for BgpConfig {
    fn default() -> Self {
        BgpConfig {
            peers: Vec::new(),
            advertisements: Vec::new(),
            shutdown_drain_s: default_shutdown_drain_s(),
            watchdog_timeout_ms: default_watchdog_timeout_ms(),
        }
    }
}

/// Default `shutdown_drain_s`: a few seconds for the routers to converge
/// after the withdrawal.
pub const DEFAULT_SHUTDOWN_DRAIN_S: u16 = 5;
/// The longest `shutdown_drain_s`.
pub const MAX_SHUTDOWN_DRAIN_S: u16 = 3600;
/// Default `watchdog_timeout_ms`.
pub const DEFAULT_WATCHDOG_TIMEOUT_MS: u32 = 1000;
/// The range of `watchdog_timeout_ms`.
pub const WATCHDOG_TIMEOUT_MS: std::ops::RangeInclusive<u32> = 100..=60_000;

fn default_shutdown_drain_s() -> u16 {
    DEFAULT_SHUTDOWN_DRAIN_S
}
fn default_watchdog_timeout_ms() -> u32 {
    DEFAULT_WATCHDOG_TIMEOUT_MS
}

fn unspecified_router_id() -> Ipv4Addr {
    Ipv4Addr::UNSPECIFIED
}

/// An address family a session can carry (AFI/SAFI of RFC 4760), written
/// `ipv4-unicast` / `ipv6-unicast` in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    Ipv4Unicast,
    Ipv6Unicast,
}

impl Family {
    /// Both, in the order capabilities are sent.
    pub const ALL: [Family; 2] = [Family::Ipv4Unicast, Family::Ipv6Unicast];

    /// The AFI/SAFI pair of the Multiprotocol capability and MP attributes.
    pub fn afi_safi(self) -> (u16, u8) {
        match self {
            Family::Ipv4Unicast => (AFI_IPV4, SAFI_UNICAST),
            Family::Ipv6Unicast => (AFI_IPV6, SAFI_UNICAST),
        }
    }

    /// The family of an AFI/SAFI pair, if we speak it.
    pub fn from_afi_safi(afi: u16, safi: u8) -> Option<Family> {
        Family::ALL
            .into_iter()
            .find(|f| f.afi_safi() == (afi, safi))
    }

    /// The family of a prefix (unicast).
    pub fn of(prefix: &Prefix) -> Family {
        if prefix.is_ipv4() {
            Family::Ipv4Unicast
        } else {
            Family::Ipv6Unicast
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::Ipv4Unicast => "ipv4-unicast",
            Family::Ipv6Unicast => "ipv6-unicast",
        })
    }
}

/// One BGP session (`[[bgp.peer]]`). We always open the connection
/// (configure the router side passive or not, either works).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// The router's address.
    pub address: IpAddr,
    pub peer_asn: u32,
    pub my_asn: u32,
    /// Our BGP identifier. Default 0.0.0.0, which validation refuses
    /// unless every `[[instance]]` of a tier sets its own
    /// (`bgp_router_id`, put here for the instance that runs).
    #[serde(default = "unspecified_router_id")]
    pub router_id: Ipv4Addr,
    /// The router's TCP port.
    #[serde(default = "default_port")]
    pub port: u16,
    /// Proposed hold time: 0 (no keepalives) or 3..=65535; the session uses
    /// the smaller of ours and the router's.
    #[serde(default = "default_hold_time_s")]
    pub hold_time_s: u16,
    /// Keepalive interval; default a third of the negotiated hold time,
    /// and never more than that.
    #[serde(default)]
    pub keepalive_s: Option<u16>,
    /// Local address to connect from (one of the instance's host
    /// addresses); also the NEXT_HOP we announce. Default: the kernel's
    /// choice.
    #[serde(default)]
    pub source_address: Option<IpAddr>,
    /// The address families to offer (`ipv4-unicast`, `ipv6-unicast`);
    /// the session carries those the router offers too. Default: see
    /// [`PeerConfig::default_families`].
    #[serde(default)]
    pub families: Option<Vec<Family>>,
    /// The global IPv6 next hop of our IPv6 routes (RFC 2545 §2). Default:
    /// the session's local address when it is IPv6; required for IPv6
    /// routes over an IPv4 session.
    #[serde(default)]
    pub next_hop_v6: Option<Ipv6Addr>,
    /// A link-local (fe80::/10) next hop sent after the global one (the
    /// 32-byte next hop of RFC 2545 §3), for routers on the same link.
    #[serde(default)]
    pub next_hop_v6_link_local: Option<Ipv6Addr>,
    /// TCP-MD5 (RFC 2385) key, at most 80 bytes.
    #[serde(default)]
    pub md5_password: Option<String>,
    /// eBGP multihop: the TTL of our packets (1..=255). Default: 1 for
    /// eBGP (directly connected), 255 for iBGP.
    #[serde(default)]
    pub multihop_ttl: Option<u8>,
    /// First connect-retry delay; doubles after each failure up to
    /// `connect_retry_max_s`.
    #[serde(default = "default_connect_retry_s")]
    pub connect_retry_s: u16,
    #[serde(default = "default_connect_retry_max_s")]
    pub connect_retry_max_s: u16,
}

fn default_port() -> u16 {
    179
}
fn default_hold_time_s() -> u16 {
    90
}
fn default_connect_retry_s() -> u16 {
    1
}
fn default_connect_retry_max_s() -> u16 {
    60
}

impl PeerConfig {
    /// A peer with the defaults of the TOML schema.
    pub fn new(address: IpAddr, peer_asn: u32, my_asn: u32, router_id: Ipv4Addr) -> Self {
        PeerConfig {
            address,
            peer_asn,
            my_asn,
            router_id,
            port: default_port(),
            hold_time_s: default_hold_time_s(),
            keepalive_s: None,
            source_address: None,
            families: None,
            next_hop_v6: None,
            next_hop_v6_link_local: None,
            md5_password: None,
            multihop_ttl: None,
            connect_retry_s: default_connect_retry_s(),
            connect_retry_max_s: default_connect_retry_max_s(),
        }
    }

    /// Same AS on both sides.
    pub fn is_ibgp(&self) -> bool {
        self.peer_asn == self.my_asn
    }

    /// The TTL of our packets.
    pub fn ttl(&self) -> u8 {
        self.multihop_ttl
            .unwrap_or(if self.is_ibgp() { 255 } else { 1 })
    }

    /// Whether the session has an IPv6 next hop before it connects:
    /// `next_hop_v6`, or an IPv6 source or peer address (the local address
    /// of the connection is then IPv6).
    pub fn has_ipv6_next_hop(&self) -> bool {
        self.next_hop_v6.is_some()
            || self.source_address.is_some_and(|a| a.is_ipv6())
            || self.address.is_ipv6()
    }

    /// The families offered when `families` is left out: IPv4 unicast,
    /// plus IPv6 unicast when [`Self::has_ipv6_next_hop`]. (IPv4 is always
    /// offered, as before IPv6 existed; over an IPv6 session IPv4 routes
    /// have no next hop and are skipped, counted in the stats.)
    pub fn default_families(&self) -> Vec<Family> {
        let mut f = vec![Family::Ipv4Unicast];
        if self.has_ipv6_next_hop() {
            f.push(Family::Ipv6Unicast);
        }
        f
    }

    /// The families offered in our OPEN, in [`Family::ALL`] order, once.
    pub fn offered_families(&self) -> Vec<Family> {
        match &self.families {
            Some(list) => Family::ALL
                .into_iter()
                .filter(|f| list.contains(f))
                .collect(),
            None => self.default_families(),
        }
    }

    /// The global IPv6 next hop of a connection whose local address is
    /// `local`: `next_hop_v6`, else `local` if it is IPv6.
    pub fn next_hop_v6_for(&self, local: IpAddr) -> Option<Ipv6Addr> {
        self.next_hop_v6.or(match local {
            IpAddr::V6(a) => Some(a),
            IpAddr::V4(_) => None,
        })
    }

    /// `address:port` for log lines.
    pub fn name(&self) -> String {
        match self.address {
            IpAddr::V4(a) => format!("{a}:{}", self.port),
            IpAddr::V6(a) => format!("[{a}]:{}", self.port),
        }
    }
}

/// An RFC 1997 community, written `asn:value` (both 0..=65535) or by its
/// well-known name (`no-export`, `no-advertise`, `no-export-subconfed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
pub struct Community(pub u32);

impl Community {
    pub const NO_EXPORT: Community = Community(0xffff_ff01);
    pub const NO_ADVERTISE: Community = Community(0xffff_ff02);
    pub const NO_EXPORT_SUBCONFED: Community = Community(0xffff_ff03);
}

impl FromStr for Community {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "no-export" => return Ok(Community::NO_EXPORT),
            "no-advertise" => return Ok(Community::NO_ADVERTISE),
            "no-export-subconfed" => return Ok(Community::NO_EXPORT_SUBCONFED),
            _ => {}
        }
        let bad = || {
            format!(
                "community `{s}` is not `asn:value` (each 0..=65535) or no-export/no-advertise/no-export-subconfed"
            )
        };
        let (a, v) = s.split_once(':').ok_or_else(bad)?;
        let a: u16 = a.trim().parse().map_err(|_| bad())?;
        let v: u16 = v.trim().parse().map_err(|_| bad())?;
        Ok(Community((u32::from(a) << 16) | u32::from(v)))
    }
}

impl TryFrom<String> for Community {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl fmt::Display for Community {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.0 >> 16, self.0 & 0xffff)
    }
}

/// How a set of VIPs is announced (`[[bgp.advertisement]]`): to which
/// peers, with which attributes, aggregated to which prefix length. The
/// control plane attaches one to an address pool or static VIP.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Advertisement {
    /// Name the pools refer to.
    pub name: String,
    /// Peer addresses this goes to; empty: every peer.
    #[serde(default)]
    pub peers: Vec<IpAddr>,
    /// LOCAL_PREF, sent to iBGP peers only (RFC 4271 §5.1.5).
    #[serde(default)]
    pub local_pref: Option<u32>,
    #[serde(default)]
    pub communities: Vec<Community>,
    /// Announce each IPv4 VIP as its covering `/len` (32: the VIP itself).
    #[serde(default = "default_aggregation_length")]
    pub aggregation_length: u8,
    /// The same for IPv6 VIPs (128: the VIP itself).
    #[serde(default = "default_aggregation_length_v6")]
    pub aggregation_length_v6: u8,
}

fn default_aggregation_length() -> u8 {
    32
}
fn default_aggregation_length_v6() -> u8 {
    128
}

impl Advertisement {
    /// An advertisement to every peer of host routes, no attributes.
    pub fn new(name: &str) -> Self {
        Advertisement {
            name: name.to_string(),
            peers: Vec::new(),
            local_pref: None,
            communities: Vec::new(),
            aggregation_length: default_aggregation_length(),
            aggregation_length_v6: default_aggregation_length_v6(),
        }
    }

    pub fn applies_to(&self, peer: &PeerConfig) -> bool {
        self.peers.is_empty() || self.peers.contains(&peer.address)
    }

    /// The prefix announcing `vip` (aggregated).
    pub fn prefix_of(&self, vip: IpAddr) -> Prefix {
        let len = if vip.is_ipv4() {
            self.aggregation_length.min(32)
        } else {
            self.aggregation_length_v6.min(128)
        };
        Prefix::new(vip, len).unwrap_or_else(|_| Prefix::host(vip))
    }

    /// The attributes of this advertisement's routes towards `peer`
    /// (LOCAL_PREF only for iBGP).
    pub fn attributes_for(&self, peer: &PeerConfig) -> RouteAttributes {
        RouteAttributes::new(
            if peer.is_ibgp() {
                self.local_pref
            } else {
                None
            },
            None,
            self.communities.iter().map(|c| c.0),
        )
    }

    /// The routes announcing `vips` to `peer` (none if this advertisement
    /// does not go there). Several VIPs aggregated into one prefix give one
    /// route.
    pub fn routes_for(
        &self,
        peer: &PeerConfig,
        vips: impl IntoIterator<Item = IpAddr>,
    ) -> BTreeMap<Prefix, RouteAttributes> {
        if !self.applies_to(peer) {
            return BTreeMap::new();
        }
        let attrs = self.attributes_for(peer);
        vips.into_iter()
            .map(|v| (self.prefix_of(v), attrs.clone()))
            .collect()
    }
}

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
    if peer.offered_families().contains(&Family::Ipv6Unicast) && !peer.has_ipv6_next_hop() {
        p(
            at("families"),
            format!(
                "ipv6-unicast over the IPv4 session to {} needs an IPv6 next hop: set next_hop_v6 \
                 (one of this instance's IPv6 addresses)",
                peer.address
            ),
        );
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
            if !seen.insert((a, peer.port)) {
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
            if peer.multihop_ttl == Some(0) {
                p(
                    at("multihop_ttl"),
                    "0 would never leave the host: 1 (directly connected) ..= 255".into(),
                );
            }
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let c = BgpConfig {
            peers: vec![empty, v6_without_next_hop, bad_next_hops, link_local_alone],
            ..BgpConfig::default()
        };
        let e = c.validate().unwrap_err();
        let got: Vec<(&str, &str)> = e
            .problems
            .iter()
            .map(|p| (p.path.as_str(), p.reason.as_str()))
            .collect();
        let paths: Vec<&str> = got.iter().map(|g| g.0).collect();
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
}
