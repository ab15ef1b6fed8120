//! The BIRD 2 rig of the router suites: BIRD in a router namespace, our
//! speaker's runtime in another, linked by a veth; `birdc` to check.

use std::collections::BTreeMap;
use std::time::Duration;

use portico_bgp::{PeerConfig, Prefix, RouteAttributes, Routes, Session, SessionStats};
use portico_netns::{Netns, NsRuntime, wait_until};

use super::{Bird, BirdRoute, ROUTER_LINK_LOCAL, ROUTER_V6, SPEAKER_LINK_LOCAL, SPEAKER_V6};

pub const BIRD_ASN: u32 = 65000;
pub const OUR_ASN: u32 = 65001;
pub const ROUTER: &str = "10.0.0.1";
/// The VIPs the suites announce, one of each family.
pub const VIP4: &str = "10.128.0.10/32";
pub const VIP6: &str = "2001:db8:100::10/128";
pub const SPEAKER: &str = "10.0.0.2";

/// A router namespace with BIRD and a speaker namespace, linked by a veth
/// (10.0.0.1/24 ↔ 10.0.0.2/24).
pub struct Lab {
    pub bird: Bird,
    pub rt: NsRuntime,
    pub speaker_ns: Netns,
    pub router_ns: Netns,
}

/// BIRD's protocol `s1` towards the speaker: passive (we connect), 3 s
/// hold time, a short error wait so reconnects are quick.
pub fn bgp_protocol(
    name: &str,
    local: &str,
    neighbor: &str,
    neighbor_as: u32,
    extra: &str,
) -> String {
    bgp_protocol_with_channels(name, local, neighbor, neighbor_as, extra, IPV4_CHANNEL)
}

/// BIRD's IPv4 unicast channel: takes our routes, sends none.
pub const IPV4_CHANNEL: &str = "ipv4 { import all; export none; };";
/// BIRD's IPv6 unicast channel: takes our routes, sends none.
pub const IPV6_CHANNEL: &str = "ipv6 { import all; export none; };";
/// Both unicast channels over the one session (RFC 4760).
pub const DUAL_CHANNELS: &str =
    "ipv4 { import all; export none; };\n  ipv6 { import all; export none; };";

/// [`bgp_protocol`] with other `channels` (BIRD 2 channel blocks).
pub fn bgp_protocol_with_channels(
    name: &str,
    local: &str,
    neighbor: &str,
    neighbor_as: u32,
    extra: &str,
    channels: &str,
) -> String {
    let ibgp = neighbor_as == BIRD_ASN;
    // `extra` may set its own timers.
    let timers = if extra.contains("hold time") {
        ""
    } else {
        "hold time 3;\n  keepalive time 1;"
    };
    format!(
        "protocol bgp {name} {{\n  local {local} as {BIRD_ASN};\n  neighbor {neighbor} as {neighbor_as};\n  \
         passive on;\n  {timers}\n  error wait time 1, 2;\n  {extra}\n  {}\n  \
         {channels}\n}}\n",
        // iBGP is multihop in BIRD unless told the neighbor is adjacent.
        if ibgp { "direct;" } else { "" }
    )
}

pub fn lab(test: &str, neighbor_as: u32, extra: &str) -> Option<Lab> {
    lab_with_channels(test, neighbor_as, extra, IPV4_CHANNEL)
}

/// [`lab`] with BIRD's `channels`; with an `ipv6` channel the veth also
/// has IPv6 addresses ([`super::router_and_speaker_with_ipv6`]).
pub fn lab_with_channels(test: &str, neighbor_as: u32, extra: &str, channels: &str) -> Option<Lab> {
    if !super::require(test, &["bird", "birdc"]) {
        return None;
    }
    super::logs();
    let (router_ns, speaker_ns) = super::router_and_speaker_with_ipv6(channels.contains("ipv6"));
    let config = format!(
        "router id {ROUTER};\nprotocol device {{ }}\n{}",
        bgp_protocol_with_channels("s1", ROUTER, SPEAKER, neighbor_as, extra, channels)
    );
    let bird = Bird::start(&router_ns, &config);
    let rt = NsRuntime::new(&speaker_ns).expect("speaker runtime");
    Some(Lab {
        bird,
        rt,
        speaker_ns,
        router_ns,
    })
}

/// How the session of [`lab_over_ipv6`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ipv6Transport {
    /// Between the global addresses ROUTER_V6 ↔ SPEAKER_V6.
    Global,
    /// Between the link-local addresses ROUTER_LINK_LOCAL ↔
    /// SPEAKER_LINK_LOCAL, each scoped by its end of the veth.
    LinkLocal,
}

/// A [`Lab`] whose eBGP session runs over IPv6 (`transport`), BIRD with
/// `channels` and `extra`, and our peer configuration for it (a
/// link-local router address scoped by the speaker's end of the veth).
pub fn lab_over_ipv6(
    test: &str,
    transport: Ipv6Transport,
    extra: &str,
    channels: &str,
) -> Option<(Lab, PeerConfig)> {
    if !super::require(test, &["bird", "birdc"]) {
        return None;
    }
    super::logs();
    let link = super::link(true);
    let mut cfg = peer(OUR_ASN, BIRD_ASN);
    let (local, neighbor, extra) = match transport {
        Ipv6Transport::Global => {
            cfg.address = ROUTER_V6.parse().unwrap();
            (ROUTER_V6, SPEAKER_V6, extra.to_string())
        }
        Ipv6Transport::LinkLocal => {
            cfg.address = ROUTER_LINK_LOCAL.parse().unwrap();
            cfg.interface = Some(link.speaker_if.clone());
            (
                ROUTER_LINK_LOCAL,
                SPEAKER_LINK_LOCAL,
                format!("interface \"{}\";\n  {extra}", link.router_if),
            )
        }
    };
    let config = format!(
        "router id {ROUTER};\nprotocol device {{ }}\n{}",
        bgp_protocol_with_channels("s1", local, neighbor, OUR_ASN, &extra, channels)
    );
    let bird = Bird::start(&link.router, &config);
    let rt = NsRuntime::new(&link.speaker).expect("speaker runtime");
    Some((
        Lab {
            bird,
            rt,
            speaker_ns: link.speaker,
            router_ns: link.router,
        },
        cfg,
    ))
}

/// BIRD two hops away ([`super::two_hops`]), its protocol `s1` with
/// `extra` (`multihop 2;` at least) towards the speaker's address, and
/// our peer configuration for it (address, router id, 3 s hold time).
pub struct FarLab {
    pub net: super::TwoHops,
    pub bird: Bird,
    pub rt: NsRuntime,
    pub peer: PeerConfig,
}

/// A [`FarLab`] over IPv6 (BIRD's IPv6 channel) or IPv4; None (skipped)
/// without root or BIRD.
pub fn far_lab(test: &str, ipv6: bool, extra: &str) -> Option<FarLab> {
    use super::{FAR_ROUTER, FAR_ROUTER_V6, FAR_SPEAKER, FAR_SPEAKER_V6};
    if !super::require(test, &["bird", "birdc"]) {
        return None;
    }
    super::logs();
    let net = super::two_hops(ipv6);
    let (router, speaker, channels) = if ipv6 {
        (FAR_ROUTER_V6, FAR_SPEAKER_V6, IPV6_CHANNEL)
    } else {
        (FAR_ROUTER, FAR_SPEAKER, IPV4_CHANNEL)
    };
    let bird = Bird::start(
        &net.router,
        &format!(
            "router id {FAR_ROUTER};\nprotocol device {{ }}\n{}",
            bgp_protocol_with_channels("s1", router, speaker, OUR_ASN, extra, channels)
        ),
    );
    let rt = NsRuntime::new(&net.speaker).expect("speaker runtime");
    Some(FarLab {
        net,
        bird,
        rt,
        peer: peer_to(router, FAR_SPEAKER, OUR_ASN, BIRD_ASN),
    })
}

impl FarLab {
    /// `session` (a fresh one) comes up and BIRD gets `prefix` from it.
    pub fn established_with(&self, session: &Session, prefix: &str) {
        self.rt
            .block_on(session.wait_established(Duration::from_secs(20)))
            .unwrap_or_else(|e| panic!("{e}\n{}", self.bird.diagnostics()));
        session.set_routes(routes(&[prefix], &RouteAttributes::default()));
        let ok = wait_until(Duration::from_secs(5), || {
            self.bird.routes("s1").iter().any(|r| r.prefix == prefix)
        });
        assert!(ok, "{}", self.bird.birdc("show route all protocol s1"));
    }
}

/// Our session to BIRD at [`ROUTER`] (router id [`SPEAKER`]), 3 s hold
/// time.
pub fn peer(my_asn: u32, peer_asn: u32) -> PeerConfig {
    peer_to(ROUTER, SPEAKER, my_asn, peer_asn)
}

/// Our session to the router at `address` with router id `router_id`,
/// 3 s hold time (every router suite's).
pub fn peer_to(address: &str, router_id: &str, my_asn: u32, peer_asn: u32) -> PeerConfig {
    let mut cfg = PeerConfig::new(
        address.parse().expect("router address"),
        peer_asn,
        my_asn,
        router_id.parse().expect("router id"),
    );
    cfg.hold_time_s = 3;
    cfg
}

/// `(prefixes_sent, prefixes_sent_v6, prefixes_skipped)` of `s`.
pub fn counts(s: &SessionStats) -> (u64, u64, u64) {
    (s.prefixes_sent, s.prefixes_sent_v6, s.prefixes_skipped)
}

/// BIRD has `r` with BGP next hop `next_hop`, and forwards to it.
pub fn assert_via(r: &BirdRoute, next_hop: &str) {
    assert_eq!(r.attrs["BGP.next_hop"], next_hop, "{r:?}");
    assert!(r.via[0].starts_with(next_hop), "{r:?}");
}

/// BIRD has `r` with the 32-byte next hop of RFC 2545 §3: the speaker's
/// global address, then its link-local one.
pub fn assert_global_and_link_local_next_hop(r: &BirdRoute) {
    let both = format!("{SPEAKER_V6} {SPEAKER_LINK_LOCAL}");
    assert_eq!(r.attrs["BGP.next_hop"], both, "{r:?}");
}

pub fn routes(prefixes: &[&str], attrs: &RouteAttributes) -> Routes {
    prefixes
        .iter()
        .map(|p| (p.parse::<Prefix>().unwrap(), attrs.clone()))
        .collect()
}

impl Lab {
    pub fn spawn(&self, cfg: PeerConfig) -> Session {
        self.rt.enter(|| Session::spawn(cfg))
    }

    pub fn established(&self, session: &Session) {
        let r = self
            .rt
            .block_on(session.wait_established(Duration::from_secs(20)));
        assert!(r.is_ok(), "{r:?}\n{}", self.bird.diagnostics());
        let up = wait_until(Duration::from_secs(5), || {
            self.bird.bgp_state("s1") == "Established"
        });
        assert!(up, "BIRD sees Established: {}", self.bird.protocol("s1"));
    }

    /// Hands `routes` to `session` and waits (5 s) until they are sent.
    pub fn sync(&self, session: &Session, routes: Routes) -> SessionStats {
        let generation = session.set_routes(routes);
        self.rt
            .block_on(session.wait_synced(generation, Duration::from_secs(5)))
            .expect("synced")
    }

    /// Waits until BIRD has exactly `prefixes` from s1.
    pub fn bird_has(&self, prefixes: &[&str], timeout: Duration) -> BTreeMap<String, BirdRoute> {
        let want: Vec<String> = prefixes.iter().map(|p| p.to_string()).collect();
        let mut got = BTreeMap::new();
        let ok = wait_until(timeout, || {
            got = self
                .bird
                .routes("s1")
                .into_iter()
                .map(|r| (r.prefix.clone(), r))
                .collect();
            got.keys().cloned().collect::<Vec<_>>() == want
        });
        assert!(
            ok,
            "BIRD should have {want:?}, has {:?}\n{}",
            got.keys(),
            self.bird.birdc("show route all protocol s1")
        );
        got
    }
}
