//! The owner function and its rule (see `rule.rs`): the same answer for
//! random tuples.

use super::*;
use crate::flow::Proto;
use crate::snapshot::Snapshot;
use crate::snapshot::{AddrRole, ListenerKind, ServiceSpec};
use crate::steering::tests::{KeyPool, KeyPool6, Rng, one_port_snapshot, shapes};
use std::collections::HashSet;
use std::net::{Ipv4Addr, Ipv6Addr};

#[test]
fn steering_splits_clients_and_snat_replies_on_a_shared_node_and_snat_address() {
    let node = Ipv4Addr::new(192, 0, 2, 1);
    let mut svc = ServiceSpec::new("web", Proto::Tcp, Ipv4Addr::new(203, 0, 113, 10), 80);
    svc.listeners
        .push((node.into(), 30080, ListenerKind::NodePort));
    let snap = one_port_snapshot(
        vec![
            (node.into(), 0, AddrRole::Node),
            (node.into(), 0, AddrRole::Snat),
        ],
        vec![svc],
    );
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

/// Services without SNAT on port 8080 of the first VIPs (IPv4 and IPv6),
/// for the address-steered tuples: `aff` (ClientIP affinity, endpoints
/// .5 and .6, a NodePort), `shared` (no affinity, endpoints .6, shared
/// with `aff`, and .7), `plain` (no affinity, endpoint .8), `affsnat` (UDP,
/// affinity with SNAT, endpoint .9); `aff6` and `plain6` (port 8081) the
/// same in IPv6.
fn affinity_services(services: &mut Vec<ServiceSpec>) {
    let vip = |d| std::net::IpAddr::from(Ipv4Addr::new(203, 0, 113, d));
    let ep = |d| std::net::SocketAddr::from((Ipv4Addr::new(10, 244, 1, d), 8080));
    let plain = |name: &str, vip, eps: &[std::net::SocketAddr]| {
        let mut svc = ServiceSpec::new(name, Proto::Tcp, vip, 8080);
        svc.snat = false;
        for e in eps {
            svc = svc.endpoint(*e);
        }
        svc
    };
    let mut aff = plain("aff", vip(10), &[ep(5), ep(6)]);
    aff.affinity_timeout_ms = Some(10_800_000);
    aff.listeners.push((
        Ipv4Addr::new(192, 0, 2, 1).into(),
        30100,
        ListenerKind::NodePort,
    ));
    let mut affsnat = ServiceSpec::new("affsnat", Proto::Udp, vip(11), 5000)
        .endpoint((Ipv4Addr::new(10, 244, 1, 9), 5000));
    affsnat.affinity_timeout_ms = Some(10_000);
    let vip6: Ipv6Addr = "2001:db8:c::10".parse().unwrap();
    let ep6 =
        |h: u16| std::net::SocketAddr::from((Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, h), 8080));
    let mut aff6 = plain("aff6", vip6.into(), &[ep6(5)]);
    aff6.affinity_timeout_ms = Some(10_800_000);
    let mut plain6 = plain("plain6", vip6.into(), &[ep6(6)]);
    plain6.listeners[0].1 = 8081;
    services.extend([
        aff,
        plain("shared", vip(11), &[ep(6), ep(7)]),
        plain("plain", vip(12), &[ep(8)]),
        affsnat,
        aff6,
        plain6,
    ]);
}

/// The pools of random keys for `snap`: its owned addresses, listener
/// ports, backend endpoints (addresses and ports).
fn key_pools(snap: &Snapshot) -> (KeyPool, KeyPool6) {
    let backends = || snap.backends.iter().flatten().map(|b| b.addr);
    let mut keys = KeyPool {
        owned: snap.owned.iter().map(|(a, _)| *a).collect(),
        listen: snap.listeners.iter().map(|(k, _)| k.port).collect(),
    };
    let mut keys6 = KeyPool6 {
        owned: snap.owned6.iter().map(|(a, _)| *a).collect(),
        listen: snap.listeners6.iter().map(|(k, _)| k.port).collect(),
    };
    for b in backends() {
        match b.ip() {
            std::net::IpAddr::V4(a) => {
                keys.owned.push(a);
                keys.listen.push(b.port());
            }
            std::net::IpAddr::V6(a) => {
                keys6.owned.push(a);
                keys6.listen.push(b.port());
            }
        }
    }
    (keys, keys6)
}

#[test]
fn affinity_steers_its_listeners_and_the_endpoints_it_shares_without_snat() {
    let snap = fixture_snapshot();
    let sorted = |mut v: Vec<(Proto, std::net::IpAddr, u16)>| {
        v.sort_unstable();
        v
    };
    let a = &snap.affinity;
    let v4 = |(p, a, port): (Proto, Ipv4Addr, u16)| (p, a.into(), port);
    let v6 = |(p, a, port): (Proto, Ipv6Addr, u16)| (p, a.into(), port);
    let ip = |d| std::net::IpAddr::from(Ipv4Addr::new(203, 0, 113, d));
    let node = std::net::IpAddr::from(Ipv4Addr::new(192, 0, 2, 1));
    // `shared` through its endpoint .6, and with it .7; `affsnat`'s
    // listener, not its endpoint (its replies go to the SNAT slice).
    assert_eq!(
        sorted(
            a.listeners()
                .map(v4)
                .chain(a.listeners6().map(v6))
                .collect()
        ),
        sorted(vec![
            (Proto::Tcp, ip(10), 8080),
            (Proto::Tcp, node, 30100),
            (Proto::Tcp, ip(11), 8080),
            (Proto::Udp, ip(11), 5000),
            (Proto::Tcp, "2001:db8:c::10".parse().unwrap(), 8080),
        ])
    );
    let ep = |d| std::net::IpAddr::from(Ipv4Addr::new(10, 244, 1, d));
    assert_eq!(
        sorted(
            a.endpoints()
                .map(v4)
                .chain(a.endpoints6().map(v6))
                .collect()
        ),
        sorted(vec![
            (Proto::Tcp, ep(5), 8080),
            (Proto::Tcp, ep(6), 8080),
            (Proto::Tcp, ep(7), 8080),
            (Proto::Tcp, "fd00:2::5".parse().unwrap(), 8080),
        ])
    );
}

/// One client on many ports: the connections of an affinity service stay
/// on one worker in both directions (the address alone), those of a plain
/// service spread over all workers, each reply on its request's worker.
#[test]
fn one_client_on_many_ports_is_one_worker_with_affinity_and_spread_without() {
    let snap = fixture_snapshot();
    let client = Ipv4Addr::new(198, 51, 100, 7);
    let vip = |d| Ipv4Addr::new(203, 0, 113, d);
    let steering = Steering {
        worker: 0,
        workers: 2,
        snat_ports: 1024..=65535,
    };
    let rule = steering.rule(&snap);
    let owners = |svc_vip, backend: Ipv4Addr| {
        let mut seen = HashSet::new();
        for port in 32768..33768u16 {
            let k = FlowKey::new(Proto::Tcp, client, port, svc_vip, 8080);
            let w = steering.owner(&k, &snap);
            let reply = FlowKey::new(Proto::Tcp, backend, 8080, client, port);
            assert_eq!(steering.owner(&reply, &snap), w, "{reply}");
            assert_eq!((rule.owner(&k), rule.owner(&reply)), (w, w), "{k}");
            seen.insert(w);
        }
        seen
    };
    assert_eq!(
        owners(vip(10), Ipv4Addr::new(10, 244, 1, 5)).len(),
        1,
        "affinity"
    );
    assert_eq!(
        owners(vip(11), Ipv4Addr::new(10, 244, 1, 7)).len(),
        1,
        "shared"
    );
    assert_eq!(
        owners(vip(12), Ipv4Addr::new(10, 244, 1, 8)).len(),
        2,
        "plain"
    );
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
    affinity_services(&mut services);
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
    one_port_snapshot(
        vec![
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
        services,
    )
}

/// The rule's owner functions against the worker's, both families: the
/// same worker for 20,000 random tuples of each per shape, every worker
/// owning some of each family.
#[test]
fn the_rule_names_the_same_owner_as_the_worker_for_random_tuples() {
    let snap = fixture_snapshot();
    let (keys, keys6) = key_pools(&snap);
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
        assert_eq!(
            (rule.affinity_listeners.len(), rule.affinity_endpoints.len()),
            (4, 3)
        );
        assert_eq!(
            (
                rule.affinity_listeners6.len(),
                rule.affinity_endpoints6.len()
            ),
            (1, 1)
        );
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
