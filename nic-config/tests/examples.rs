//! Every `examples/*.toml` parses into a plan, and the plans say what the
//! examples' comments promise.

use nic_config::{
    AddressRole, BackendGone, DriverKind, EndpointCondition, IdlePolicy, ListenerKind, Plan,
    PortRole, Protocol,
};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn load(name: &str) -> Plan {
    let path = examples_dir().join(name);
    nic_config::load(&path).unwrap_or_else(|e| panic!("{}:\n{e}", path.display()))
}

#[test]
fn every_example_is_valid() {
    let mut seen = 0;
    for entry in std::fs::read_dir(examples_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let plan =
                nic_config::load(&path).unwrap_or_else(|e| panic!("{}:\n{e}", path.display()));
            // The printed plan names every service.
            let printed = plan.to_string();
            for s in &plan.services {
                assert!(printed.contains(&s.name), "{printed}");
            }
            seen += 1;
        }
    }
    assert!(seen >= 2, "expected at least the two documented examples");
}

#[test]
fn standalone_two_port() {
    let plan = load("standalone-two-port.toml");
    assert_eq!(plan.ports.len(), 2);
    let outside = plan.port_index("outside").unwrap();
    let inside = plan.port_index("inside").unwrap();
    assert_eq!(plan.vip_port, outside);
    assert_eq!(plan.ports[outside].role, PortRole::Outside);
    assert_eq!(plan.ports[inside].role, PortRole::Inside);
    assert_eq!(plan.ports[outside].driver, DriverKind::Afpacket);
    assert_eq!(plan.ports[outside].interface, "veth-gw-out");
    assert_eq!(plan.ports[outside].mac, None);
    assert_eq!(plan.dataplane.idle, IdlePolicy::Adaptive);
    assert_eq!(plan.dataplane.idle_spin_polls, 64);
    assert_eq!(plan.dataplane.workers, 1);

    let node = Ipv4Addr::new(192, 0, 2, 1);
    let snat = Ipv4Addr::new(10, 1, 0, 1);
    assert!(
        plan.addresses
            .iter()
            .any(|a| a.address == node && a.port == outside && a.role == AddressRole::Node)
    );
    assert!(
        plan.addresses
            .iter()
            .any(|a| a.address == snat && a.port == inside && a.role == AddressRole::Snat)
    );
    assert_eq!(plan.dataplane.snat.addresses, vec![snat]);
    assert_eq!(plan.dataplane.snat.port_range, 1024..=65535);

    // Two connected subnets and the default route via the outside router.
    let routes: Vec<String> = plan
        .routes
        .iter()
        .map(|r| format!("{} {:?} {}", r.destination, r.via, plan.ports[r.port].name))
        .collect();
    assert_eq!(
        routes,
        [
            "192.0.2.0/24 None outside",
            "10.1.0.0/24 None inside",
            "0.0.0.0/0 Some(192.0.2.254) outside",
        ]
    );

    let web = plan.service("web").unwrap();
    assert_eq!(web.protocol, Protocol::Tcp);
    assert!(web.snat);
    assert_eq!(web.tcp_backend_gone, BackendGone::Reset);
    assert_eq!(
        web.syn_proxy,
        nic_config::SynProxyPlan::Auto {
            half_open_threshold: 1000
        }
    );
    let vip = Ipv4Addr::new(192, 0, 2, 10);
    assert!(
        web.listeners
            .iter()
            .any(|l| l.address == vip && l.port == 80 && l.kind == ListenerKind::Vip)
    );
    assert!(
        web.listeners
            .iter()
            .any(|l| l.address == node && l.port == 30080 && l.kind == ListenerKind::NodePort)
    );
    assert_eq!(web.backends.len(), 3);
    assert_eq!(web.backends[2].weight, 2);
    assert_eq!(
        web.backends[0].address,
        SocketAddrV4::new(Ipv4Addr::new(10, 1, 0, 10), 8080).into()
    );

    let dns = plan.service("dns").unwrap();
    assert_eq!(dns.protocol, Protocol::Udp);
    assert_eq!(dns.listeners.len(), 1);
    assert_eq!(
        (dns.listeners[0].address, dns.listeners[0].port),
        (vip.into(), 53)
    );
    assert_eq!(
        dns.backends[2].condition,
        EndpointCondition::ServingTerminating
    );
    assert_eq!(dns.affinity_timeout_ms, None);
}

#[test]
fn one_arm() {
    let plan = load("one-arm.toml");
    assert_eq!(plan.ports.len(), 1);
    assert_eq!(plan.ports[0].role, PortRole::Both);
    assert_eq!(plan.vip_port, 0);
    assert_eq!(plan.dataplane.workers, 2);
    assert_eq!(plan.dataplane.snat.port_range, 32768..=60999);
    assert_eq!(
        plan.dataplane.snat.addresses,
        vec![Ipv4Addr::new(198, 51, 100, 3)]
    );
    // Node and SNAT addresses share one connected subnet: one route.
    assert_eq!(plan.routes.iter().filter(|r| r.via.is_none()).count(), 1);
    assert!(plan.routes.iter().all(|r| r.port == 0));
    let https = plan.service("https").unwrap();
    assert_eq!(https.affinity_timeout_ms, Some(3_600_000));
    assert_eq!(https.backends[2].condition, EndpointCondition::Draining);
    assert!(
        https
            .listeners
            .iter()
            .any(|l| l.kind == ListenerKind::NodePort
                && l.address == Ipv4Addr::new(198, 51, 100, 2)
                && l.port == 30443)
    );
}

#[test]
fn kubernetes() {
    let plan = load("kubernetes.toml");
    let k = plan.kubernetes.as_ref().expect("[kubernetes]");
    assert!(k.serve_unclassed);
    assert_eq!((k.debounce_ms, k.debounce_max_ms), (20, 200));
    assert_eq!(
        (
            k.status_writes.per_s,
            k.status_writes.burst,
            k.status_writes.in_flight
        ),
        (100, 20, 4)
    );
    let pools: Vec<(&str, u128, bool)> = plan
        .address_pools
        .iter()
        .map(|p| (p.name.as_str(), p.size(), p.auto_assign))
        .collect();
    assert_eq!(pools, [("public", 43, true), ("reserved", 254, false)]);
    assert!(plan.services.is_empty());
}

#[test]
fn bgp() {
    let plan = load("bgp.toml");
    let [peer] = &plan.bgp.peers[..] else {
        panic!("{:?}", plan.bgp)
    };
    assert_eq!(peer.address.to_string(), "192.0.2.254");
    // GTSM with the router on the link: TTL 255 out, only 255 accepted.
    assert_eq!(
        (peer.peer_asn, peer.my_asn, peer.ttl(), peer.min_ttl()),
        (65000, 65001, 255, Some(255))
    );
    assert!(
        plan.to_string().contains(
            "ttl 255, connect retry 1-60 s, GTSM (RFC 5082): 1 hop(s), accepts ttl >= 255, TCP-MD5"
        ),
        "{plan}"
    );
    assert_eq!(
        peer.source_address,
        Some(Ipv4Addr::new(192, 0, 2, 2).into())
    );
    let outside = &plan.ports[plan.vip_port];
    assert_eq!(
        outside
            .host_addresses
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["192.0.2.2/24"]
    );
    assert_eq!(outside.host_interface.as_deref(), Some("outside-host"));
    assert_eq!((peer.hold_time_s, peer.keepalive_s), (9, Some(3)));
    let [adv] = &plan.bgp.advertisements[..] else {
        panic!("{:?}", plan.bgp)
    };
    assert_eq!(adv.advertisement.name, "public");
    assert_eq!(adv.vips, [Ipv4Addr::new(192, 0, 2, 10)]);
}

#[test]
fn dual_stack_example() {
    let plan = load("dual-stack.toml");
    let web6 = plan.service("web6").unwrap();
    let listeners: Vec<String> = web6
        .listeners
        .iter()
        .map(|l| std::net::SocketAddr::new(l.address, l.port).to_string())
        .collect();
    assert_eq!(listeners, ["[2001:db8:5::10]:80", "[2001:db8::1]:30080"]);
    assert_eq!(
        web6.syn_proxy,
        nic_config::SynProxyPlan::Auto {
            half_open_threshold: 1000
        }
    );
    assert_eq!(
        (
            plan.dataplane.new_flows_per_source_per_s,
            plan.dataplane.source_prefix_len_v6
        ),
        (100, 64)
    );
    let web4 = plan.service("web4").unwrap();
    assert!(web4.listeners.iter().all(|l| l.address.is_ipv4()));
    let pool = &plan.address_pools[0];
    assert_eq!(
        (pool.size_of_family(true), pool.size_of_family(false)),
        (16, 256 + 17)
    );
    assert_eq!(
        plan.routes
            .iter()
            .find(|r| r.destination.to_string() == "::/0")
            .and_then(|r| r.via)
            .map(|v| v.to_string()),
        Some("fe80::1".to_owned())
    );
}
