//! The desired routes, from the snapshot in force and `[bgp]`.
//!
//! A VIP *qualifies* when a listener of the snapshot on it (a LoadBalancer
//! VIP or an external IP) belongs to a service that takes new flows: one
//! with a ready backend, or — when none is ready — a serving-terminating
//! one (KEP-1669: the dataplane sends new flows there then, so the address
//! is served and stays announced until the last serving endpoint goes).
//! A service with only draining backends (or none) does not qualify.
//!
//! Which advertisements announce a qualifying VIP:
//! * a standalone service's `vip`/`external_ips` — the advertisements its
//!   `bgp_advertisements` lists ([`AdvertisementPlan::vips`]);
//! * an address inside a range of an address pool — the advertisements the
//!   pool lists (LoadBalancer IPs the Kubernetes source assigned from it);
//! * nothing else. A Kubernetes Service's `spec.externalIPs` are chosen by
//!   whoever edits the Service, not allocated by us: announcing them would
//!   let any namespace pull arbitrary addresses to this tier
//!   (CVE-2020-8554), so they are announced only when an operator listed
//!   them in the file (a standalone service), as MetalLB does.
//!
//! Each advertisement turns its VIPs into routes per peer with
//! [`Advertisement::routes_for`](portico_bgp::Advertisement::routes_for)
//! (aggregation by `aggregation_length` / `aggregation_length_v6`,
//! communities, LOCAL_PREF for iBGP). When two advertisements produce the
//! same prefix for one peer, the first in file order wins (its attributes
//! are sent). VIPs are `IpAddr`s: an IPv6 VIP becomes an IPv6 unicast
//! route (MP_REACH_NLRI on the wire) for the peers offered IPv6 unicast
//! ([`peer_routes`], `families`), and nothing for the others. The plan is
//! IPv4 only on main: no advertisement or pool lists an IPv6 address yet
//! ([`listed`]), so IPv6 VIPs qualify but are announced once the plan
//! carries them.

use super::families;
use dataplane::snapshot::{Listener, ListenerKind, Snapshot};
use nic_config::{AddressPoolPlan, AdvertisementPlan, BgpPlan};
use portico_bgp::{Advertisement, PeerConfig, Routes};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// The VIPs of `snapshot` that qualify for an announcement (see the module
/// docs), sorted.
pub fn qualifying_vips(snapshot: &Snapshot) -> BTreeSet<IpAddr> {
    let qualifies = |l: &Listener| {
        matches!(l.kind, ListenerKind::Vip | ListenerKind::ExternalIp)
            && snapshot
                .service(l.service)
                .is_some_and(|s| s.active_set().is_some())
    };
    let v4 = snapshot
        .listeners
        .iter()
        .filter(|(_, l)| qualifies(l))
        .map(|(k, _)| IpAddr::V4(k.addr));
    let v6 = snapshot
        .listeners6
        .iter()
        .filter(|(_, l)| qualifies(l))
        .map(|(k, _)| IpAddr::V6(k.addr));
    v4.chain(v6).collect()
}

/// Whether advertisement `a` announces `vip`: a standalone service lists
/// it, or it lies in one of `a_pools` (the pools that list `a`); either
/// family.
fn listed(a: &AdvertisementPlan, a_pools: &[&AddressPoolPlan], vip: IpAddr) -> bool {
    a.vips.contains(&vip)
        || a_pools
            .iter()
            .any(|p| p.ranges.iter().any(|r| r.contains(vip)))
}

/// The routes for each of `peers` (the plan's `[[bgp.peer]]`s as the
/// sessions run them, in order) announcing `vips`.
pub fn routes_per_peer(
    bgp: &BgpPlan,
    peers: &[PeerConfig],
    pools: &[AddressPoolPlan],
    vips: &BTreeSet<IpAddr>,
) -> Vec<Routes> {
    let per_advertisement: Vec<(&Advertisement, Vec<IpAddr>)> = bgp
        .advertisements
        .iter()
        .map(|a| {
            let a_pools: Vec<&AddressPoolPlan> = pools
                .iter()
                .filter(|p| a.address_pools.contains(&p.name))
                .collect();
            let listed: Vec<IpAddr> = vips
                .iter()
                .copied()
                .filter(|v| listed(a, &a_pools, *v))
                .collect();
            (&a.advertisement, listed)
        })
        .collect();
    peers
        .iter()
        .map(|peer| peer_routes(peer, &per_advertisement))
        .collect()
}

/// The routes of one peer: each advertisement's VIPs (either family) as
/// its prefixes, keeping only the families the peer is offered; the first
/// advertisement producing a prefix wins.
pub fn peer_routes(peer: &PeerConfig, advertisements: &[(&Advertisement, Vec<IpAddr>)]) -> Routes {
    let mut routes = Routes::new();
    for (a, vips) in advertisements {
        for (prefix, attrs) in a.routes_for(peer, vips.iter().copied()) {
            if families::carries(peer, &prefix) {
                routes.entry(prefix).or_insert(attrs);
            }
        }
    }
    routes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::static_file::{PortFacts, snapshot_spec};
    use dataplane::snapshot::SnapshotBuilder;

    const CONFIG: &str = r#"
[[port]]
name = "outside"
driver = "afpacket"
interface = "o"
role = "outside"
node_addresses = ["192.0.2.1/24"]
host_addresses = ["192.0.2.2/24"]

[[port]]
name = "inside"
driver = "afpacket"
interface = "i"
role = "inside"
snat_addresses = ["10.1.0.1/24"]

[[address_pool]]
name = "public"
addresses = ["198.51.100.0/28"]
bgp_advertisements = ["pool"]

[[service]]
name = "web"
protocol = "tcp"
vip = "192.0.2.10"
port = 80
external_ips = ["192.0.2.11"]
bgp_advertisements = ["static"]
backends = [{ address = "10.1.0.10", port = 8080 }]

[[service]]
name = "empty"
protocol = "tcp"
vip = "192.0.2.20"
port = 80
bgp_advertisements = ["static"]
backends = []

[[service]]
name = "unlisted"
protocol = "tcp"
vip = "192.0.2.30"
port = 80
backends = [{ address = "10.1.0.10", port = 8080 }]

[[bgp.peer]]
address = "192.0.2.254"
peer_asn = 65000
my_asn = 65001
router_id = "192.0.2.1"

[[bgp.peer]]
address = "192.0.2.253"
peer_asn = 65001
my_asn = 65001
router_id = "192.0.2.1"

[[bgp.advertisement]]
name = "static"
communities = ["65001:100"]
local_pref = 200

[[bgp.advertisement]]
name = "pool"
peers = ["192.0.2.254"]
aggregation_length = 28
"#;

    fn plan() -> nic_config::Plan {
        nic_config::parse(CONFIG).unwrap_or_else(|e| panic!("{e}"))
    }

    fn snapshot(plan: &nic_config::Plan) -> Snapshot {
        let facts: Vec<PortFacts> = plan
            .ports
            .iter()
            .map(|_| PortFacts {
                mac: [2, 0, 0, 0, 0, 1],
                mtu: 1500,
            })
            .collect();
        SnapshotBuilder::new()
            .build(&snapshot_spec(plan, &facts))
            .expect("the snapshot builds")
    }

    /// A peer's routes as `prefix lp=.. c=..` lines.
    fn show(r: &Routes) -> Vec<String> {
        r.iter()
            .map(|(p, a)| format!("{p} lp={:?} c={:?}", a.local_pref, a.communities))
            .collect()
    }

    #[test]
    fn only_served_vips_with_a_backend_qualify() {
        let plan = plan();
        let vips = qualifying_vips(&snapshot(&plan));
        let want: BTreeSet<IpAddr> = ["192.0.2.10", "192.0.2.11", "192.0.2.30"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(vips, want, "192.0.2.20 has no backend");
    }

    #[test]
    fn ipv6_vips_with_a_backend_qualify_too() {
        let text = CONFIG
            .replacen(
                "host_addresses = [\"192.0.2.2/24\"]",
                "host_addresses = [\"192.0.2.2/24\", \"2001:db8:2::2/64\"]",
                1,
            )
            .replacen(
                "snat_addresses = [\"10.1.0.1/24\"]",
                "snat_addresses = [\"10.1.0.1/24\", \"2001:db8:10::1/64\"]",
                1,
            )
            + r#"
[[service]]
name = "web6"
protocol = "tcp"
vip = "2001:db8:100::10"
port = 80
bgp_advertisements = ["static"]
backends = [{ address = "2001:db8:10::10", port = 8080 }]

[[service]]
name = "empty6"
protocol = "tcp"
vip = "2001:db8:100::20"
port = 80
bgp_advertisements = ["static"]
backends = []
"#;
        let plan = nic_config::parse(&text).unwrap_or_else(|e| panic!("{e}"));
        let vips = qualifying_vips(&snapshot(&plan));
        let v6: Vec<&IpAddr> = vips.iter().filter(|a| a.is_ipv6()).collect();
        assert_eq!(
            v6,
            [&"2001:db8:100::10".parse::<IpAddr>().unwrap()],
            "2001:db8:100::20 has no backend"
        );
        // Announced to both peers (offered IPv6 by the derived next hop)
        // as a /128.
        let peers = families::effective_peers(&plan);
        let routes = routes_per_peer(&plan.bgp, &peers, &plan.address_pools, &vips);
        for r in &routes {
            assert!(
                r.keys().any(|p| p.to_string() == "2001:db8:100::10/128"),
                "{}",
                show(r).join("\n")
            );
        }
    }

    #[test]
    fn routes_follow_the_advertisements_of_each_peer() {
        let plan = plan();
        let mut vips = qualifying_vips(&snapshot(&plan));
        // A LoadBalancer IP from the pool (as the Kubernetes source would
        // publish it).
        vips.insert("198.51.100.3".parse().unwrap());
        // An IPv6 VIP qualifying: no advertisement of this IPv4 plan lists
        // it, so no peer gets it.
        vips.insert("2001:db8:100::10".parse().unwrap());
        let routes = routes_per_peer(&plan.bgp, &plan.bgp.peers, &plan.address_pools, &vips);
        let c = vec![(65001u32 << 16) | 100];
        // eBGP peer: static VIPs without LOCAL_PREF, the pool's /28.
        assert_eq!(
            show(&routes[0]),
            [
                format!("192.0.2.10/32 lp=None c={c:?}"),
                format!("192.0.2.11/32 lp=None c={c:?}"),
                "198.51.100.0/28 lp=None c=[]".to_owned(),
            ]
        );
        // iBGP peer: LOCAL_PREF; the pool's advertisement is not for it;
        // the unlisted service's VIP is announced to nobody.
        assert_eq!(
            show(&routes[1]),
            [
                format!("192.0.2.10/32 lp=Some(200) c={c:?}"),
                format!("192.0.2.11/32 lp=Some(200) c={c:?}"),
            ]
        );
    }

    /// The seam for IPv6 VIPs: each VIP goes to its family (an IPv6 one as
    /// its /128, or its `aggregation_length_v6` prefix), only to the peers
    /// offered IPv6 unicast, with the same attributes as the IPv4 ones.
    #[test]
    fn ipv6_vips_become_ipv6_routes_for_peers_offered_ipv6() {
        let plan = plan();
        let mut dual = plan.bgp.peers[1].clone();
        dual.next_hop_v6 = Some("2001:db8::2".parse().unwrap());
        let v4_only = plan.bgp.peers[1].clone();
        let mut aggregated = Advertisement::new("v6-aggregated");
        aggregated.aggregation_length_v6 = 64;
        aggregated.local_pref = Some(300);
        let vips: Vec<IpAddr> = ["192.0.2.10", "2001:db8:100::10"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let v6_only: Vec<IpAddr> = vec!["2001:db8:200::1".parse().unwrap()];
        let static_adv = &plan.bgp.advertisements[0].advertisement;
        let ads = [(static_adv, vips), (&aggregated, v6_only)];
        let c = vec![(65001u32 << 16) | 100];
        assert_eq!(
            show(&peer_routes(&dual, &ads)),
            [
                format!("192.0.2.10/32 lp=Some(200) c={c:?}"),
                format!("2001:db8:100::10/128 lp=Some(200) c={c:?}"),
                "2001:db8:200::/64 lp=Some(300) c=[]".to_owned(),
            ]
        );
        assert_eq!(
            show(&peer_routes(&v4_only, &ads)),
            [format!("192.0.2.10/32 lp=Some(200) c={c:?}")],
            "no IPv6 next hop: no IPv6 routes"
        );
    }
}
