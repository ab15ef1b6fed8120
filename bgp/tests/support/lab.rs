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

pub fn peer(my_asn: u32, peer_asn: u32) -> PeerConfig {
    let mut cfg = PeerConfig::new(
        ROUTER.parse().unwrap(),
        peer_asn,
        my_asn,
        SPEAKER.parse().unwrap(),
    );
    cfg.hold_time_s = 3;
    cfg
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
