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
//! (aggregation, communities, LOCAL_PREF for iBGP). When two
//! advertisements produce the same prefix for one peer, the first in file
//! order wins (its attributes are sent).

use dataplane::snapshot::{ListenerKind, Snapshot};
use nic_config::{AddressPoolPlan, BgpPlan};
use portico_bgp::Routes;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

/// The VIPs of `snapshot` that qualify for an announcement (see the module
/// docs), sorted.
pub fn qualifying_vips(snapshot: &Snapshot) -> BTreeSet<Ipv4Addr> {
    snapshot
        .listeners
        .iter()
        .filter(|(_, l)| matches!(l.kind, ListenerKind::Vip | ListenerKind::ExternalIp))
        .filter(|(_, l)| {
            snapshot
                .service(l.service)
                .is_some_and(|s| s.active_set().is_some())
        })
        .map(|(k, _)| k.addr)
        .collect()
}

/// The routes for each peer of `bgp` (in peer order) announcing `vips`.
pub fn routes_per_peer(
    bgp: &BgpPlan,
    pools: &[AddressPoolPlan],
    vips: &BTreeSet<Ipv4Addr>,
) -> Vec<Routes> {
    let per_advertisement: Vec<Vec<IpAddr>> = bgp
        .advertisements
        .iter()
        .map(|a| {
            let a_pools: Vec<&AddressPoolPlan> = pools
                .iter()
                .filter(|p| a.address_pools.contains(&p.name))
                .collect();
            vips.iter()
                .filter(|v| {
                    a.vips.contains(&IpAddr::V4(**v))
                        || a_pools
                            .iter()
                            .any(|p| p.ranges.iter().any(|r| r.contains(**v)))
                })
                .map(|v| IpAddr::V4(*v))
                .collect()
        })
        .collect();
    bgp.peers
        .iter()
        .map(|peer| {
            let mut routes = Routes::new();
            for (a, vips) in bgp.advertisements.iter().zip(&per_advertisement) {
                for (prefix, attrs) in a.advertisement.routes_for(peer, vips.iter().copied()) {
                    routes.entry(prefix).or_insert(attrs);
                }
            }
            routes
        })
        .collect()
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

    #[test]
    fn only_served_vips_with_a_backend_qualify() {
        let plan = plan();
        let vips = qualifying_vips(&snapshot(&plan));
        let want: BTreeSet<Ipv4Addr> = ["192.0.2.10", "192.0.2.11", "192.0.2.30"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(vips, want, "192.0.2.20 has no backend");
    }

    #[test]
    fn routes_follow_the_advertisements_of_each_peer() {
        let plan = plan();
        let mut vips = qualifying_vips(&snapshot(&plan));
        // A LoadBalancer IP from the pool (as the Kubernetes source would
        // publish it).
        vips.insert("198.51.100.3".parse().unwrap());
        let routes = routes_per_peer(&plan.bgp, &plan.address_pools, &vips);
        let show = |r: &Routes| -> Vec<String> {
            r.iter()
                .map(|(p, a)| format!("{p} lp={:?} c={:?}", a.local_pref, a.communities))
                .collect()
        };
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
}
