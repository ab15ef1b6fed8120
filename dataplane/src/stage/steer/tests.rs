//! The owner function and its rule (see `rule.rs`): the same answer for
//! random tuples.

use super::*;
use crate::flow::Proto;
use crate::snapshot::{
    AddrRole, ListenerKind, PortSpec, ServiceSpec, SnapshotBuilder, SnapshotSpec,
};
use crate::steering::tests::{KeyPool, KeyPool6, Rng, shapes};
use std::collections::HashSet;
use std::net::{Ipv4Addr, Ipv6Addr};

#[test]
fn steering_splits_clients_and_snat_replies_on_a_shared_node_and_snat_address() {
    let node = Ipv4Addr::new(192, 0, 2, 1);
    let mut svc = ServiceSpec::new("web", Proto::Tcp, Ipv4Addr::new(203, 0, 113, 10), 80);
    svc.listeners
        .push((node.into(), 30080, ListenerKind::NodePort));
    let snap = SnapshotBuilder::new()
        .build(&SnapshotSpec {
            ports: vec![PortSpec {
                mac: [2, 0, 0, 0, 0, 1],
                mtu: 1500,
                mss_clamp: None,
            }],
            vip_port: 0,
            addresses: vec![
                (node.into(), 0, AddrRole::Node),
                (node.into(), 0, AddrRole::Snat),
            ],
            routes: Vec::new(),
            neighbours: Vec::new(),
            services: vec![svc],
            maglev_table_size: 251,
        })
        .unwrap();
    let steer = |worker| Steering {
        worker,
        workers: 4,
        snat_ports: 1024..=65535,
    };
    // Clients of the NodePort spread over workers by client address.
    let owners: std::collections::HashSet<_> = (1..=64u8)
        .map(|c| {
            let k = FlowKey::new(
                Proto::Tcp,
                Ipv4Addr::new(198, 51, 100, c),
                40000,
                node,
                30080,
            );
            steer(0).owner(&k, &snap)
        })
        .collect();
    assert_eq!(owners.len(), 4);
    // A backend's reply to an SNAT port goes to the port's slice owner.
    for port in [1024u16, 20000, 40000, 65535] {
        let k = FlowKey::new(Proto::Tcp, Ipv4Addr::new(10, 1, 0, 10), 8080, node, port);
        let expected = crate::snat::owner_of_port(1024..=65535, port, 4).unwrap() as WorkerId;
        assert_eq!(steer(1).owner(&k, &snap), expected);
    }
}

/// A TCP (port 80) and a UDP (port 53) service on `vip`, with NodePorts
/// `tcp_np` and `udp_np` on `node`.
fn tcp_and_udp(
    services: &mut Vec<ServiceSpec>,
    tag: &str,
    vip: std::net::IpAddr,
    node: std::net::IpAddr,
    (tcp_np, udp_np): (u16, u16),
) {
    for (proto, name, port, np) in [(Proto::Tcp, "t", 80, tcp_np), (Proto::Udp, "u", 53, udp_np)] {
        let mut svc = ServiceSpec::new(&format!("{name}{tag}"), proto, vip, port);
        svc.listeners.push((node, np, ListenerKind::NodePort));
        services.push(svc);
    }
}

/// A gateway's addresses for the steering tests: a node address that is
/// also an SNAT address (with a NodePort listener inside the SNAT range), a
/// separate SNAT address, a run of VIPs (merged into one owned range) and
/// a lone VIP, each VIP with a TCP and a UDP service; the same for IPv6
/// (a node and SNAT address with NodePorts, a separate SNAT address, VIPs
/// in two /96s, one run across a /96 boundary).
fn fixture_snapshot() -> Snapshot {
    let node = Ipv4Addr::new(192, 0, 2, 1);
    let mut services = Vec::new();
    for (i, vip) in (10..=14u8)
        .map(|d| Ipv4Addr::new(203, 0, 113, d))
        .chain([Ipv4Addr::new(198, 18, 0, 77)])
        .enumerate()
    {
        let np = (30080 + i as u16, 31000 + i as u16);
        tcp_and_udp(&mut services, &i.to_string(), vip.into(), node.into(), np);
    }
    let node6: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let edge: u128 = 0x2001_0db8_0000_0000_0000_0001_ffff_fffe;
    for (i, vip) in (0..4u128)
        .map(|d| Ipv6Addr::from_bits(edge + d))
        .chain(["2001:db8:c::10".parse().unwrap()])
        .enumerate()
    {
        let np = (30090 + i as u16, 31010 + i as u16);
        tcp_and_udp(
            &mut services,
            &format!("6{i}"),
            vip.into(),
            node6.into(),
            np,
        );
    }
    SnapshotBuilder::new()
        .build(&SnapshotSpec {
            ports: vec![PortSpec {
                mac: [2, 0, 0, 0, 0, 1],
                mtu: 1500,
                mss_clamp: None,
            }],
            vip_port: 0,
            addresses: vec![
                (node.into(), 0, AddrRole::Node),
                (node.into(), 0, AddrRole::Snat),
                (Ipv4Addr::new(10, 1, 0, 1).into(), 0, AddrRole::Snat),
                (node6.into(), 0, AddrRole::Node),
                (node6.into(), 0, AddrRole::Snat),
                (
                    "fd00:1::1".parse::<Ipv6Addr>().unwrap().into(),
                    0,
                    AddrRole::Snat,
                ),
            ],
            routes: Vec::new(),
            neighbours: Vec::new(),
            services,
            maglev_table_size: 251,
        })
        .expect("fixture snapshot")
}

/// The rule's owner functions against the worker's, both families: the
/// same worker for 20,000 random tuples of each per shape, every worker
/// owning some of each family.
#[test]
fn the_rule_names_the_same_owner_as_the_worker_for_random_tuples() {
    let snap = fixture_snapshot();
    let keys = KeyPool {
        owned: snap.owned.iter().map(|(a, _)| *a).collect(),
        listen: snap.listeners.iter().map(|(k, _)| k.port).collect(),
    };
    let keys6 = KeyPool6 {
        owned: snap.owned6.iter().map(|(a, _)| *a).collect(),
        listen: snap.listeners6.iter().map(|(k, _)| k.port).collect(),
    };
    let mut rng = Rng(16);
    let mut by_slice6 = 0;
    for (workers, snat_ports) in shapes() {
        let steering = Steering {
            worker: 0,
            workers,
            snat_ports: snat_ports.clone(),
        };
        let rule = steering.rule(&snap);
        assert!(!rule.truncated);
        assert_eq!(rule.owned.len(), 4, "{:?}", rule.owned);
        // node6, fd00:1::1, 2001:db8:c::10 and the run split at its /96.
        assert_eq!(rule.owned6.len(), 5, "{:x?}", rule.owned6);
        assert_eq!(rule.snat_addrs6.len(), 2);
        let (mut seen, mut seen6) = (HashSet::new(), HashSet::new());
        for _ in 0..20_000 {
            let k = keys.key(&mut rng);
            let want = steering.owner(&k, &snap);
            let what = format!("with {workers} workers, {snat_ports:?}");
            assert_eq!(rule.owner(&k), want, "{k} {what}");
            seen.insert(want);
            let k6 = keys6.key(&mut rng);
            let (want6, slice) = steering.owner6_by(&k6, &snap);
            by_slice6 += usize::from(slice);
            assert_eq!(rule.owner6(&k6), want6, "{k6} {what}");
            seen6.insert(want6);
        }
        for s in [seen, seen6] {
            assert_eq!(s.len(), usize::from(workers), "every worker owns some");
        }
    }
    assert!(
        by_slice6 > 1000,
        "IPv6 SNAT replies were drawn: {by_slice6}"
    );
}
