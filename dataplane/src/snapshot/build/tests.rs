//! The builder end to end: stable ids and reused tables, owned addresses and
//! next hops, the fallback set, and all-or-nothing validation.

use super::*;
use crate::flow::Proto;
use crate::snapshot::{EndpointCondition, ListenerKind, NextHop};
use std::net::SocketAddrV4;

const OUT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const IN_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn ep(last: u8, port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(10, 1, 0, last), port)
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
            (Ipv4Addr::new(192, 0, 2, 1), 0, AddrRole::Node),
            (Ipv4Addr::new(10, 1, 0, 1), 1, AddrRole::Snat),
        ],
        routes: vec![Route {
            dest: Ipv4Addr::new(10, 1, 0, 0),
            prefix_len: 24,
            port: 1,
            via: None,
        }],
        neighbours: (10..20)
            .map(|i| NeighbourSpec {
                addr: Ipv4Addr::new(10, 1, 0, i),
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
            addr: Ipv4Addr::new(10, 1, 0, 10)
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
        Ipv4Addr::new(198, 51, 100, 1),
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
