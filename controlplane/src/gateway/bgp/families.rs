//! Address families per peer, seen from the gateway (RFC 4760 through
//! portico-bgp): the IPv6 next hop a peer gets from this instance's host
//! addresses, and which routes go to which peer.
//!
//! A `[[bgp.peer]]` without `families` is offered IPv6 unicast exactly
//! when it has an IPv6 next hop (`PeerConfig::default_families`). Over an
//! IPv4 session without `next_hop_v6`, the gateway supplies one: the first
//! global IPv6 host address of the instance (the host path carries the
//! sessions, so those addresses are this instance's own). A peer is handed
//! only routes of the families it is offered, so `portico bgp`'s desired
//! count is what the session can send; the session itself further drops
//! (and counts) the families the router did not offer back.
//!
//! The plan's host addresses are of either family; [`host_addresses`]
//! hands them all over and only a global IPv6 one becomes a next hop.

use nic_config::Plan;
use portico_bgp::{Family, PeerConfig, Prefix};
use std::net::IpAddr;

/// Every host address of `plan`, in port order.
pub fn host_addresses(plan: &Plan) -> Vec<IpAddr> {
    plan.ports
        .iter()
        .flat_map(|p| &p.host_addresses)
        .map(|a| a.address)
        .collect()
}

/// The peers of `plan` as the sessions run them (next hops derived).
pub fn effective_peers(plan: &Plan) -> Vec<PeerConfig> {
    let hosts = host_addresses(plan);
    plan.bgp
        .peers
        .iter()
        .map(|p| p.with_next_hop_from(&hosts))
        .collect()
}

/// Whether `peer` is offered the family of `prefix`.
pub fn carries(peer: &PeerConfig, prefix: &Prefix) -> bool {
    peer.offered_families().contains(&Family::of(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn peer() -> PeerConfig {
        PeerConfig::new(
            "192.0.2.254".parse().unwrap(),
            65000,
            65001,
            Ipv4Addr::new(192, 0, 2, 1),
        )
    }

    #[test]
    fn an_ipv6_host_address_gives_an_ipv4_peer_ipv6_unicast() {
        let v4_only: Vec<IpAddr> = vec!["192.0.2.2".parse().unwrap()];
        let p = peer().with_next_hop_from(&v4_only);
        assert_eq!(p.next_hop_v6, None);
        assert_eq!(p.offered_families(), [Family::Ipv4Unicast]);
        let dual: Vec<IpAddr> = ["192.0.2.2", "fe80::2", "2001:db8::2"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let p = peer().with_next_hop_from(&dual);
        assert_eq!(
            p.next_hop_v6,
            Some("2001:db8::2".parse().unwrap()),
            "the first global one, not the link-local"
        );
        assert_eq!(p.offered_families(), Family::ALL);
        // A configured next hop, or families without IPv6, win.
        let mut own = peer();
        own.next_hop_v6 = Some("2001:db8::9".parse().unwrap());
        assert_eq!(own.with_next_hop_from(&dual), own);
        let mut v4 = peer();
        v4.families = Some(vec![Family::Ipv4Unicast]);
        let p = v4.with_next_hop_from(&dual);
        assert_eq!(p.offered_families(), [Family::Ipv4Unicast]);
        assert!(!carries(&p, &"2001:db8:100::10/128".parse().unwrap()));
        assert!(carries(&p, &"192.0.2.10/32".parse().unwrap()));
    }
}
