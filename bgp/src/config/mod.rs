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
//! router should forward to; so do they over a session between link-local
//! addresses (RFC 2545 §2 wants a global next hop; the session's
//! link-local address goes in the second slot, §3).
//!
//! Sessions over IPv6: `address` of either family; a link-local one
//! (fe80::/10) names the `interface` it is on (its scope: the same
//! fe80:: address can be on every link), required exactly then.
//!
//! IPv4 routes over an IPv6 session (RFC 8950, which obsoletes RFC 5549):
//! we offer the Extended Next Hop Encoding capability (§4, the tuple
//! AFI 1 / SAFI 1 / next hop AFI 2) by default on IPv6 sessions that
//! offer ipv4-unicast (`extended_next_hop`); when both sides sent it, IPv4
//! VIPs go in MP_REACH_NLRI with the session's IPv6 next hop (16 or 32
//! bytes, §3). When it is not negotiated, IPv4 routes go only to sessions
//! whose own address is IPv4 (the NEXT_HOP of RFC 4271 §5.1.3): over an
//! IPv6 session they are skipped and counted, never sent with an IPv4
//! next hop of ours that the router may have no route to (on an
//! IPv6-only or unnumbered link nothing says an IPv4 address is
//! on-link); a dual-stack fabric that wants classic IPv4 next hops peers
//! over IPv4 as well.
//!
//! Sessions are told apart by (`address`, `interface` of a link-local
//! address, `port`): the same fe80:: address on two interfaces is two
//! routers, the normal case of unnumbered BGP on several links. An
//! advertisement's `peers` lists addresses, so it goes to every session
//! with that address (on every interface).
//!
//! GTSM (RFC 5082, `ttl_security_hops`): the session's packets leave with
//! TTL / hop limit 255 and the kernel drops those that arrive from the
//! router with less than 255 − (hops − 1) (§3, the procedure; §3.1, a
//! router hops − 1 routers away, the "trust radius"), applied to the
//! connection by IP_MINTTL / IPV6_MINHOPCOUNT before the SYN, so a SYN-ACK
//! from farther away never opens it. GTSM is configured per peering on
//! both sides (§3), so the router enables it too. It fixes our TTL, so
//! `multihop_ttl` contradicts it and is refused. We only ever connect (no
//! listening socket), so the connecting socket is the only one that needs
//! the check.
//!
//! Invariant: a config that passes `validate` can be handed to
//! [`crate::session::Session::spawn`] as is; the session never re-checks it.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::Deserialize;

use crate::session::RouteAttributes;
use crate::wire::update::is_global_next_hop_v6;
use crate::wire::{AFI_IPV4, AFI_IPV6, Prefix, SAFI_UNICAST};

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
    /// The interface a link-local `address` is on (its IPv6 scope; the
    /// kernel interface the session leaves through: in portico.toml a
    /// port's host interface). Required exactly when `address` is
    /// link-local (fe80::/10).
    #[serde(default)]
    pub interface: Option<String>,
    /// Offer the Extended Next Hop Encoding capability (RFC 8950 §4) for
    /// IPv4 unicast routes with an IPv6 next hop. Default: on when the
    /// session is over IPv6 and offers ipv4-unicast; it needs an IPv6
    /// session (over IPv4 the routes have our IPv4 address as next hop).
    #[serde(default)]
    pub extended_next_hop: Option<bool>,
    /// TCP-MD5 (RFC 2385) key, at most 80 bytes.
    #[serde(default)]
    pub md5_password: Option<String>,
    /// eBGP multihop: the TTL of our packets (1..=255). Default: 1 for
    /// eBGP (directly connected), 255 for iBGP. Not with
    /// `ttl_security_hops` (GTSM sends with 255).
    #[serde(default)]
    pub multihop_ttl: Option<u8>,
    /// GTSM (RFC 5082): the router is this many hops away (1: directly
    /// connected, ..=254); we send with TTL / hop limit 255 and the kernel
    /// drops every segment of the session that arrives with less than
    /// 255 − (hops − 1). The router must do the same (BIRD `ttl security
    /// on`, FRR `neighbor X ttl-security hops N`). Default: off.
    #[serde(default)]
    pub ttl_security_hops: Option<u8>,
    /// First connect-retry delay; doubles after each failure up to
    /// `connect_retry_max_s`.
    #[serde(default = "default_connect_retry_s")]
    pub connect_retry_s: u16,
    #[serde(default = "default_connect_retry_max_s")]
    pub connect_retry_max_s: u16,
}

/// The TTL / hop limit GTSM sends with (RFC 5082 §3).
pub const GTSM_TTL: u8 = 255;
/// The most hops `ttl_security_hops` takes (a minimum TTL of 2; as FRR).
pub const MAX_TTL_SECURITY_HOPS: u8 = 254;

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
            interface: None,
            extended_next_hop: None,
            md5_password: None,
            multihop_ttl: None,
            ttl_security_hops: None,
            connect_retry_s: default_connect_retry_s(),
            connect_retry_max_s: default_connect_retry_max_s(),
        }
    }

    /// Same AS on both sides.
    pub fn is_ibgp(&self) -> bool {
        self.peer_asn == self.my_asn
    }

    /// The TTL of our packets: 255 with GTSM (RFC 5082 §3), else
    /// `multihop_ttl` or its default.
    pub fn ttl(&self) -> u8 {
        if self.ttl_security_hops.is_some() {
            return GTSM_TTL;
        }
        self.multihop_ttl
            .unwrap_or(if self.is_ibgp() { 255 } else { 1 })
    }

    /// With GTSM, the least TTL / hop limit a segment from the router may
    /// arrive with: 255 − (hops − 1) (RFC 5082 §3, the `TrustRadius` of
    /// hops − 1 routers in between); None without.
    pub fn min_ttl(&self) -> Option<u8> {
        self.ttl_security_hops
            .map(|hops| GTSM_TTL - hops.clamp(1, MAX_TTL_SECURITY_HOPS) + 1)
    }

    /// Whether the router must be on a connected subnet of ours: TTL 1
    /// (eBGP without multihop), or GTSM with one hop.
    pub fn is_directly_connected(&self) -> bool {
        match self.ttl_security_hops {
            Some(hops) => hops == 1,
            None => self.ttl() == 1,
        }
    }

    /// Whether the session has a global IPv6 next hop before it
    /// connects: `next_hop_v6`, or a global IPv6 source address, or (no
    /// source address) a global IPv6 peer address, whence the kernel picks
    /// a global local address. A session from a link-local address has
    /// none of its own.
    pub fn has_ipv6_next_hop(&self) -> bool {
        self.next_hop_v6.is_some()
            || match self.source_address {
                Some(IpAddr::V6(a)) => is_global_next_hop_v6(a),
                Some(IpAddr::V4(_)) => false,
                None => matches!(self.address, IpAddr::V6(a) if is_global_next_hop_v6(a)),
            }
    }

    /// Whether `address` is IPv6 link-local (then `interface` scopes it).
    pub fn is_link_local(&self) -> bool {
        matches!(self.address, IpAddr::V6(a) if a.is_unicast_link_local())
    }

    /// The interface that scopes a link-local `address` (None for any
    /// other address): with the address, what tells two sessions apart.
    pub fn link_local_scope(&self) -> Option<&str> {
        self.interface.as_deref().filter(|_| self.is_link_local())
    }

    /// Whether our OPEN carries the Extended Next Hop Encoding capability
    /// for IPv4 unicast over IPv6 (RFC 8950 §4): `extended_next_hop`,
    /// default on for an IPv6 session, and ipv4-unicast offered.
    pub fn offers_extended_next_hop(&self) -> bool {
        self.extended_next_hop.unwrap_or(self.address.is_ipv6())
            && self.offered_families().contains(&Family::Ipv4Unicast)
    }

    /// The families offered when `families` is left out: IPv4 unicast,
    /// plus IPv6 unicast when [`Self::has_ipv6_next_hop`]. (IPv4 is always
    /// offered, as before IPv6 existed; over an IPv6 session IPv4 routes
    /// get the IPv6 next hop when RFC 8950 is negotiated, else they are
    /// skipped, counted in the stats.)
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
    /// `local`: `next_hop_v6`, else `local` if it is a global IPv6
    /// address (RFC 2545 §2).
    pub fn next_hop_v6_for(&self, local: IpAddr) -> Option<Ipv6Addr> {
        self.next_hop_v6.or(match local {
            IpAddr::V6(a) if is_global_next_hop_v6(a) => Some(a),
            _ => None,
        })
    }

    /// The link-local IPv6 next hop (RFC 2545 §3, sent after the global
    /// one) of a connection whose local address is `local`:
    /// `next_hop_v6_link_local`, else `local` if it is link-local (a
    /// session between link-local addresses: the router is on that link).
    pub fn next_hop_v6_link_local_for(&self, local: IpAddr) -> Option<Ipv6Addr> {
        self.next_hop_v6_link_local.or(match local {
            IpAddr::V6(a) if a.is_unicast_link_local() => Some(a),
            _ => None,
        })
    }

    /// This peer with `next_hop_v6` set to the first global IPv6 address
    /// of `own_addresses` (the instance's host addresses, whose owner runs
    /// the session) when it has no IPv6 next hop of its own
    /// ([`Self::has_ipv6_next_hop`]). An IPv4 session then offers IPv6
    /// unicast by default and may list `families = ["ipv6-unicast"]`.
    pub fn with_next_hop_from(&self, own_addresses: &[IpAddr]) -> PeerConfig {
        let mut peer = self.clone();
        if !peer.has_ipv6_next_hop() {
            peer.next_hop_v6 = own_addresses.iter().find_map(|a| match a {
                IpAddr::V6(a) if is_global_next_hop_v6(*a) => Some(*a),
                _ => None,
            });
        }
        peer
    }

    /// `address:port` for log lines; `[fe80::1%eth1]:179` for a
    /// link-local address (RFC 4007 §11 zone syntax).
    pub fn name(&self) -> String {
        match (self.address, &self.interface) {
            (IpAddr::V4(a), _) => format!("{a}:{}", self.port),
            (IpAddr::V6(a), Some(i)) if a.is_unicast_link_local() => {
                format!("[{a}%{i}]:{}", self.port)
            }
            (IpAddr::V6(a), _) => format!("[{a}]:{}", self.port),
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

mod validate;
pub use validate::{ConfigError, MAX_INTERFACE_NAME_LEN, MD5_MAX_KEY_LEN, Problem};

#[cfg(test)]
mod tests;
