//! The builder end to end: stable ids and reused tables, owned addresses and
//! next hops, the fallback set, and all-or-nothing validation.

use super::*;
use crate::flow::Proto;
use crate::snapshot::{EndpointCondition, ListenerKind, NextHop};
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV4};

const OUT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const IN_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn ep(last: u8, port: u16) -> SocketAddr {
    SocketAddrV4::new(Ipv4Addr::new(10, 1, 0, last), port).into()
}

fn spec(services: Vec<ServiceSpec>) -> SnapshotSpec {
    SnapshotSpec {
        ports: vec![
            PortSpec {
                mac: OUT_MAC,
                mtu: 1500,
                mss_clamp: None,
            },
            PortSpec {
                mac: IN_MAC,
                mtu: 1500,
                mss_clamp: None,
            },
        ],
        vip_port: 0,
        addresses: vec![
            (Ipv4Addr::new(192, 0, 2, 1).into(), 0, AddrRole::Node),
            (Ipv4Addr::new(10, 1, 0, 1).into(), 1, AddrRole::Snat),
        ],
        routes: vec![Route {
            dest: Ipv4Addr::new(10, 1, 0, 0).into(),
            prefix_len: 24,
            port: 1,
            via: None,
        }],
        neighbours: (10..20)
            .map(|i| NeighbourSpec {
                addr: Ipv4Addr::new(10, 1, 0, i).into(),
                mac: [2, 0, 0, 1, 0, i],
            })
            .collect(),
        services,
        maglev_table_size: 251,
    }
}

fn web(endpoints: &[u8]) -> ServiceSpec {
    let mut s = ServiceSpec::new("web", Proto::Tcp, Ipv4Addr::new(203, 0, 113, 10), 80);
    for &e in endpoints {
        s = s.endpoint(ep(e, 8080));
    }
    s
}

#[test]
fn ids_are_stable_and_unchanged_tables_are_reused() {
    let mut b = SnapshotBuilder::new();
    let s1 = b.build(&spec(vec![web(&[10, 11, 12])])).unwrap();
    let id11 = s1
        .backends
        .iter()
        .flatten()
        .find(|be| be.addr == ep(11, 8080))
        .unwrap()
        .id;
    let dns = ServiceSpec::new("dns", Proto::Udp, Ipv4Addr::new(203, 0, 113, 11), 53)
        .endpoint(ep(13, 53));
    let s2 = b
        .build(&spec(vec![web(&[10, 11, 12]), dns.clone()]))
        .unwrap();
    assert_eq!(s2.generation, s1.generation + 1);
    assert_eq!(
        b.stats.maglev_tables_built, 2,
        "web's table is kept, dns's built"
    );
    assert_eq!(s2.backend(id11).unwrap().addr, ep(11, 8080));
    let s3 = b.build(&spec(vec![web(&[11, 12]), dns])).unwrap();
    assert_eq!(s3.backend(id11).unwrap().addr, ep(11, 8080));
    assert_eq!(b.stats.maglev_tables_built, 3);
    assert_eq!(s3.backends.iter().flatten().count(), 3);
}

#[test]
fn owned_addresses_and_next_hops_are_resolved() {
    let mut b = SnapshotBuilder::new();
    let s = b.build(&spec(vec![web(&[10])])).unwrap();
    let vip = s.owned(Ipv4Addr::new(203, 0, 113, 10)).unwrap();
    assert!(vip.vip && vip.port == 0);
    assert!(s.owned(Ipv4Addr::new(10, 1, 0, 1)).unwrap().snat);
    let be = s.backends.iter().flatten().next().unwrap();
    assert_eq!(
        be.next_hop,
        Some(NextHop {
            port: 1,
            addr: Ipv4Addr::new(10, 1, 0, 10).into()
        })
    );
    assert!(
        s.static_neighbours
            .contains(&(1, Ipv4Addr::new(10, 1, 0, 10), [2, 0, 0, 1, 0, 10]))
    );
    assert_eq!(
        s.arp_source,
        vec![
            Some(Ipv4Addr::new(192, 0, 2, 1)),
            Some(Ipv4Addr::new(10, 1, 0, 1))
        ]
    );
}

#[test]
fn terminating_endpoints_form_the_fallback_set() {
    let mut svc = web(&[10]);
    svc.endpoints[0].condition = EndpointCondition::ServingTerminating;
    svc.endpoints.push(EndpointSpec {
        addr: ep(11, 8080),
        weight: 1,
        condition: EndpointCondition::Ready,
    });
    let s = SnapshotBuilder::new().build(&spec(vec![svc])).unwrap();
    let svc = s.service_by_name("web").unwrap();
    assert_eq!(svc.ready.as_ref().unwrap().backends.len(), 1);
    assert_eq!(svc.serving.as_ref().unwrap().backends.len(), 1);
    let active = svc.active_set().unwrap();
    let ready_id = active.backends[0];
    assert_eq!(s.backend(ready_id).unwrap().addr, ep(11, 8080));
}

#[test]
fn every_problem_is_reported_at_once_and_nothing_changes() {
    let mut b = SnapshotBuilder::new();
    let good = b.build(&spec(vec![web(&[10])])).unwrap();
    let mut dup = web(&[10, 10]);
    dup.listeners.push((
        Ipv4Addr::new(198, 51, 100, 1).into(),
        30080,
        ListenerKind::NodePort,
    ));
    let mut bad = spec(vec![dup, web(&[11])]);
    bad.maglev_table_size = 250;
    let err = b.build(&bad).unwrap_err();
    let kinds: Vec<_> = err.problems.iter().map(std::mem::discriminant).collect();
    assert!(
        err.problems
            .contains(&Problem::DuplicateService("web".into()))
    );
    assert!(
        err.problems
            .iter()
            .any(|p| matches!(p, Problem::DuplicateEndpoint { .. }))
    );
    assert!(
        err.problems
            .iter()
            .any(|p| matches!(p, Problem::NodePortOffNode { .. }))
    );
    assert!(
        err.problems
            .iter()
            .any(|p| matches!(p, Problem::Maglev { .. }))
    );
    assert!(kinds.len() >= 4);
    assert_eq!(b.generation(), good.generation);
}

/// The IPv6 part of a spec: a node and SNAT address, a connected /64 and
/// a default route by a link-local gateway, static neighbours.
fn dual_stack(services: Vec<ServiceSpec>) -> SnapshotSpec {
    let mut s = spec(services);
    s.addresses.push((V6_NODE.into(), 0, AddrRole::Node));
    s.addresses.push((V6_SNAT.into(), 1, AddrRole::Snat));
    s.routes.push(Route {
        dest: "fd00:1::".parse().unwrap(),
        prefix_len: 64,
        port: 1,
        via: None,
    });
    s.routes.push(Route {
        dest: "::".parse().unwrap(),
        prefix_len: 0,
        port: 0,
        via: Some("fe80::1".parse().unwrap()),
    });
    s.neighbours.push(NeighbourSpec {
        addr: "fd00:1::10".parse().unwrap(),
        mac: [2, 0, 0, 6, 0, 0x10],
    });
    s
}

const V6_NODE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const V6_SNAT: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 1);
const V6_VIP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 0x10);

fn web6() -> ServiceSpec {
    let mut s = ServiceSpec::new("web6", Proto::Tcp, V6_VIP, 80)
        .endpoint(SocketAddr::new("fd00:1::10".parse().unwrap(), 8080))
        .endpoint(SocketAddr::new("fd00:1::11".parse().unwrap(), 8080));
    s.listeners
        .push((V6_NODE.into(), 30080, ListenerKind::NodePort));
    s
}

#[test]
fn ipv6_services_addresses_routes_and_neighbours_build_beside_ipv4() {
    let mut b = SnapshotBuilder::new();
    let s = b.build(&dual_stack(vec![web(&[10]), web6()])).unwrap();
    // Each family in its own tables.
    assert!(
        s.listener(Proto::Tcp, Ipv4Addr::new(203, 0, 113, 10), 80)
            .is_some()
    );
    let l = s.listener6(Proto::Tcp, V6_VIP, 80).unwrap();
    assert_eq!(l.kind, ListenerKind::Vip);
    assert_eq!(
        s.listener6(Proto::Tcp, V6_NODE, 30080).unwrap().service,
        l.service
    );
    assert!(s.owned6(V6_VIP).unwrap().vip);
    assert!(s.owned6(V6_NODE).unwrap().node);
    assert!(s.owned6(V6_SNAT).unwrap().snat);
    assert!(s.owned6(Ipv6Addr::LOCALHOST).is_none());
    // Longest prefix: the /64 for the backends, the default route for others.
    let svc = s.service_by_name("web6").unwrap();
    let set = svc.active_set().unwrap();
    assert_eq!(set.backends.len(), 2);
    for &id in set.backends.iter() {
        let be = s.backend(id).unwrap();
        assert!(be.addr.is_ipv6());
        assert_eq!(be.next_hop.unwrap().port, 1);
        assert_eq!(
            be.next_hop.unwrap().addr,
            be.addr.ip(),
            "directly connected"
        );
    }
    assert_eq!(
        s.static_neighbours6,
        vec![(1, "fd00:1::10".parse().unwrap(), [2, 0, 0, 6, 0, 0x10])]
    );
    assert_eq!(s.ndp_source, vec![Some(V6_NODE), Some(V6_SNAT)]);
    // The IPv4 part is what it was.
    assert_eq!(s.static_neighbours.len(), 10);
    assert_eq!(s.arp_source[0], Some(Ipv4Addr::new(192, 0, 2, 1)));
    // Removing the IPv6 service drops its VIP (not the node address).
    let s = b.build(&dual_stack(vec![web(&[10])])).unwrap();
    assert!(s.owned6(V6_VIP).is_none());
    assert!(s.listeners6.iter().next().is_none());
    assert!(s.owned6(V6_NODE).is_some());
}

#[test]
fn a_service_mixing_families_and_bad_ipv6_routes_are_refused() {
    let mut mixed = web6();
    mixed.name = "mixed".into();
    mixed.endpoints.push(EndpointSpec {
        addr: ep(10, 8080),
        weight: 1,
        condition: EndpointCondition::Ready,
    });
    let mut bad = dual_stack(vec![mixed]);
    bad.routes.push(Route {
        dest: "fd00:2::".parse().unwrap(),
        prefix_len: 129,
        port: 1,
        via: None,
    });
    bad.routes.push(Route {
        dest: "fd00:3::".parse().unwrap(),
        prefix_len: 64,
        port: 1,
        via: Some(Ipv4Addr::new(10, 1, 0, 1).into()),
    });
    let err = SnapshotBuilder::new().build(&bad).unwrap_err();
    assert!(err.problems.iter().any(|p| matches!(
        p,
        Problem::BadPrefix {
            prefix_len: 129,
            max: 128,
            ..
        }
    )));
    assert!(
        err.problems
            .iter()
            .any(|p| matches!(p, Problem::RouteMixesFamilies { .. }))
    );
    // The static part is checked first; a good one shows the service's.
    let err = SnapshotBuilder::new()
        .build(&dual_stack(vec![{
            let mut m = web6();
            m.name = "mixed".into();
            m.listeners
                .push((Ipv4Addr::new(203, 0, 113, 9).into(), 80, ListenerKind::Vip));
            m
        }]))
        .unwrap_err();
    assert_eq!(
        err.problems,
        vec![Problem::MixedFamilies {
            service: "mixed".into()
        }]
    );
    assert!(err.to_string().contains("mix IPv4 and IPv6"));
}

#[test]
fn announce_filters_cover_ipv6_vips_only_when_asked() {
    let mut b = SnapshotBuilder::new();
    b.build(&dual_stack(vec![web6()])).unwrap();
    let s = b
        .set_announce(AnnounceFilter::only(|_| true))
        .expect("the IPv6 VIP's flag flips");
    assert!(!s.owned6(V6_VIP).unwrap().announce);
    assert!(s.owned6(V6_NODE).unwrap().announce, "own addresses always");
    let s = b
        .set_announce(AnnounceFilter::only_ip(|a| a.is_ipv6()))
        .expect("flips back");
    assert!(s.owned6(V6_VIP).unwrap().announce);
}
