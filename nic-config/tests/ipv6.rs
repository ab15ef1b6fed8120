//! IPv6 and dual-stack in the configuration: node, SNAT and host addresses,
//! routes (with a link-local next hop), static neighbours, services
//! (single-family), address pools of both families and `[kubernetes]
//! external_ip_cidrs`. `BASE` is a valid dual-stack file; each case breaks
//! one rule and expects exactly its problem, and a file breaking several
//! gets them all at once.

mod common;

use common::{Case, case, problems};
use nic_config::{AddressRole, ListenerKind, parse};
use std::net::{IpAddr, SocketAddr};

const BASE: &str = r#"
[[port]]
name = "outside"
driver = "afpacket"
interface = "out0"
role = "outside"
node_addresses = ["192.0.2.1/24", "2001:db8::1/64"]
host_addresses = ["2001:db8::2/64"]

[[port]]
name = "inside"
driver = "afpacket"
interface = "in0"
role = "inside"
snat_addresses = ["10.1.0.1/24", "fd00:1::1/64"]

[[route]]
destination = "2001:db8:99::/48"
via = "2001:db8::fe"

[[route]]
destination = "::/0"
via = "fe80::1"
port = "outside"

[[route]]
destination = "0.0.0.0/0"
via = "192.0.2.254"

[[neighbour]]
address = "fd00:1::10"
mac = "02:00:00:00:00:10"

[[service]]
name = "web6"
protocol = "tcp"
vip = "2001:db8:5::10"
external_ips = ["2001:db8:5::20"]
port = 80
node_port = 30080
backends = [{ address = "fd00:1::10", port = 8080 }, { address = "fd00:1::11", port = 8080 }]

[[service]]
name = "web4"
protocol = "tcp"
vip = "203.0.113.10"
port = 80
node_port = 30081
backends = [{ address = "10.1.0.10", port = 8080 }]

[kubernetes]
external_ip_cidrs = ["198.51.100.0/24", "2001:db8:e::/64"]

[[address_pool]]
name = "dual"
addresses = ["203.0.113.64/28", "2001:db8::10-2001:db8::20", "2001:db8:1::/120"]
"#;

fn edit(edits: &[(&str, &str)]) -> String {
    common::edited(BASE, edits)
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn strings<T: ToString>(items: impl IntoIterator<Item = T>) -> Vec<String> {
    items.into_iter().map(|i| i.to_string()).collect()
}

#[test]
fn a_dual_stack_file_is_planned_with_both_families() {
    let plan = parse(BASE).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        strings(&plan.ports[0].node_addresses),
        ["192.0.2.1/24", "2001:db8::1/64"]
    );
    assert_eq!(strings(&plan.ports[0].host_addresses), ["2001:db8::2/64"]);
    let owned: Vec<(String, usize, AddressRole)> = plan
        .addresses
        .iter()
        .map(|a| (a.address.to_string(), a.port, a.role))
        .collect();
    assert_eq!(
        owned,
        [
            ("192.0.2.1".to_owned(), 0, AddressRole::Node),
            ("2001:db8::1".to_owned(), 0, AddressRole::Node),
            ("10.1.0.1".to_owned(), 1, AddressRole::Snat),
            ("fd00:1::1".to_owned(), 1, AddressRole::Snat),
        ]
    );
    assert_eq!(
        plan.dataplane.snat.addresses,
        [ip("10.1.0.1"), ip("fd00:1::1")]
    );
    let routes: Vec<String> = plan
        .routes
        .iter()
        .map(|r| format!("{} {} {:?}", r.destination, r.port, r.via))
        .collect();
    assert_eq!(
        routes,
        [
            "192.0.2.0/24 0 None",
            "2001:db8::/64 0 None",
            "10.1.0.0/24 1 None",
            "fd00:1::/64 1 None",
            "2001:db8:99::/48 0 Some(2001:db8::fe)",
            "::/0 0 Some(fe80::1)",
            "0.0.0.0/0 0 Some(192.0.2.254)",
        ]
    );
    assert_eq!(plan.neighbours[0].address, ip("fd00:1::10"));

    let web6 = plan.service("web6").unwrap();
    let listeners: Vec<(SocketAddr, ListenerKind)> = web6
        .listeners
        .iter()
        .map(|l| (SocketAddr::new(l.address, l.port), l.kind))
        .collect();
    assert_eq!(
        listeners,
        [
            ("[2001:db8:5::10]:80".parse().unwrap(), ListenerKind::Vip),
            (
                "[2001:db8:5::20]:80".parse().unwrap(),
                ListenerKind::ExternalIp
            ),
            // The NodePort on the IPv6 node address only.
            (
                "[2001:db8::1]:30080".parse().unwrap(),
                ListenerKind::NodePort
            ),
        ]
    );
    assert_eq!(
        strings(web6.backends.iter().map(|b| b.address)),
        ["[fd00:1::10]:8080", "[fd00:1::11]:8080"]
    );
    let web4 = plan.service("web4").unwrap();
    assert_eq!(
        strings(web4.listeners.iter().map(|l| l.address)),
        ["203.0.113.10", "192.0.2.1"]
    );

    let k = plan.kubernetes.as_ref().unwrap();
    assert_eq!(
        strings(&k.external_ip_cidrs),
        ["198.51.100.0/24", "2001:db8:e::/64"]
    );
    let pool = &plan.address_pools[0];
    assert_eq!(
        strings(&pool.ranges),
        [
            "203.0.113.64-203.0.113.79",
            "2001:db8::10-2001:db8::20",
            "2001:db8:1::-2001:db8:1::ff"
        ]
    );
    assert_eq!(
        (pool.size_of_family(true), pool.size_of_family(false)),
        (16, 17 + 256)
    );
    assert!(pool.has_family(true) && pool.has_family(false));
    assert!(pool.offers(ip("2001:db8:1::ff")) && !pool.offers(ip("2001:db8:1::100")));

    // `portico check` prints the IPv6 parts, socket addresses bracketed.
    let text = plan.to_string();
    for line in [
        "      node 2001:db8::1/64",
        "      snat fd00:1::1/64",
        "  ::/0 via fe80::1 on outside",
        "  fd00:1::10 is 02:00:00:00:00:10",
        "      listen [2001:db8:5::10]:80 (vip)",
        "      listen [2001:db8::1]:30080 (node_port)",
        "      listen 203.0.113.10:80 (vip)",
        "  externalIPs: served only inside 198.51.100.0/24, 2001:db8:e::/64",
        "  dual: 203.0.113.64-203.0.113.79, 2001:db8::10-2001:db8::20, 2001:db8:1::-2001:db8:1::ff (16 IPv4 and 273 IPv6 addresses, auto-assign)",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} not in:\n{text}");
    }
}

#[test]
fn an_ipv6_only_service_without_a_vip_takes_its_backends_family() {
    let plan = parse(&edit(&[(
        "vip = \"2001:db8:5::10\"\nexternal_ips = [\"2001:db8:5::20\"]\n",
        "",
    )]))
    .unwrap_or_else(|e| panic!("{e}"));
    let web6 = plan.service("web6").unwrap();
    assert_eq!(
        strings(web6.listeners.iter().map(|l| l.address)),
        ["2001:db8::1"]
    );
}

#[test]
fn an_ipv6_service_takes_the_syn_proxy() {
    let plan = parse(&edit(&[(
        "node_port = 30080\n",
        "node_port = 30080\nsyn_proxy = \"on\"\n",
    )]))
    .unwrap_or_else(|e| panic!("{e}"));
    let web6 = plan.service("web6").unwrap();
    assert_eq!(web6.syn_proxy, nic_config::SynProxyPlan::On);
}

const CASES: &[Case] = &[
    // --- ports
    case(
        &[("\"2001:db8::1/64\"]", "\"2001:db8::1/129\"]")],
        "port[0].node_addresses[1]",
        "prefix length \"129\" is not a number in 0..=128",
    ),
    case(
        &[("\"2001:db8::1/64\"]", "\"fe80::1/64\"]")],
        "port[0].node_addresses[1]",
        "link-local",
    ),
    case(
        &[("\"2001:db8::1/64\"]", "\"::ffff:192.0.2.9/64\"]")],
        "port[0].node_addresses[1]",
        "not a unicast host address",
    ),
    case(
        &[("\"fd00:1::1/64\"]", "\"fd00:1::1/64\", \"2001:db8::7/64\"]")],
        "port[1].snat_addresses[2]",
        "subnet 2001:db8::/64 is already connected on port[0]",
    ),
    // --- routes and neighbours
    case(
        &[("\"2001:db8:99::/48\"", "\"2001:db8:99::1/48\"")],
        "route[0].destination",
        "host bits set; did you mean 2001:db8:99::/48",
    ),
    case(
        &[("via = \"2001:db8::fe\"", "via = \"192.0.2.253\"")],
        "route[0].via",
        "192.0.2.253 is an IPv4 next hop for the IPv6 destination 2001:db8:99::/48",
    ),
    case(
        &[("via = \"fe80::1\"\nport = \"outside\"", "via = \"fe80::1\"")],
        "route[1].via",
        "link-local (fe80::/10), on the link of every port: give the route's port",
    ),
    case(
        &[("via = \"2001:db8::fe\"", "via = \"2001:db8:7::fe\"")],
        "route[0].via",
        "not inside any connected subnet",
    ),
    case(
        &[("via = \"2001:db8::fe\"", "via = \"2001:db8::1\"")],
        "route[0].via",
        "own address (port[0].node_addresses[1])",
    ),
    case(
        &[("address = \"fd00:1::10\"", "address = \"2001:db8:77::5\"")],
        "neighbour[0].address",
        "not inside any connected subnet",
    ),
    case(
        &[("address = \"fd00:1::10\"", "address = \"fe80::10\"")],
        "neighbour[0].address",
        "link-local",
    ),
    // --- services: single-family
    case(
        &[(
            "{ address = \"fd00:1::11\", port = 8080 }",
            "{ address = \"10.1.0.11\", port = 8080 }",
        )],
        "service[0].backends[1].address",
        "10.1.0.11 is IPv4, but the service is IPv6 (by service[0].vip)",
    ),
    case(
        &[("[\"2001:db8:5::20\"]", "[\"203.0.113.20\"]")],
        "service[0].external_ips[0]",
        "single-family",
    ),
    case(
        &[("vip = \"203.0.113.10\"", "vip = \"2001:db8:5::30\"")],
        "service[1].backends[0].address",
        "is IPv4, but the service is IPv6 (by service[1].vip)",
    ),
    case(
        &[("vip = \"2001:db8:5::10\"", "vip = \"fe80::10\"")],
        "service[0].vip",
        "link-local",
    ),
    case(
        &[("vip = \"2001:db8:5::10\"", "vip = \"fd00:1::1\"")],
        "service[0].vip",
        "the gateway's own address (port[1].snat_addresses[1])",
    ),
    case(
        &[(
            "[\"192.0.2.1/24\", \"2001:db8::1/64\"]",
            "[\"192.0.2.1/24\"]",
        )],
        "service[0].node_port",
        "needs an IPv6 node address (the service is IPv6), but no port has one",
    ),
    case(
        &[
            ("[\"10.1.0.1/24\", \"fd00:1::1/64\"]", "[\"10.1.0.1/24\"]"),
            ("address = \"fd00:1::10\"", "address = \"2001:db8::30\""),
        ],
        "service[0].snat",
        "full NAT of an IPv6 service needs an IPv6 SNAT address",
    ),
    // --- kubernetes and pools
    case(
        &[("\"2001:db8:e::/64\"", "\"2001:db8:e::1/64\"")],
        "kubernetes.external_ip_cidrs[1]",
        "host bits set; the network is 2001:db8:e::/64",
    ),
    case(
        &[("2001:db8::10-2001:db8::20", "2001:db8::20-2001:db8::10")],
        "address_pool[0].addresses[1]",
        "is empty (first > last)",
    ),
    case(
        &[("2001:db8::10-2001:db8::20", "192.0.2.10-2001:db8::20")],
        "address_pool[0].addresses[1]",
        "mixes an IPv4 and an IPv6 address",
    ),
    case(
        &[("\"2001:db8:1::/120\"", "\"2001:db8:1::1/120\"")],
        "address_pool[0].addresses[2]",
        "host bits set; did you mean 2001:db8:1::/120",
    ),
    case(
        &[("\"2001:db8:1::/120\"", "\"fe80::/120\"")],
        "address_pool[0].addresses[2]",
        "overlaps fe80::/10 (link-local)",
    ),
    case(
        &[("\"2001:db8:1::/120\"", "\"2001:db8::18-2001:db8::30\"")],
        "address_pool[0].addresses[2]",
        "overlaps 2001:db8::10-2001:db8::20 at address_pool[0].addresses[1]",
    ),
    case(
        &[("2001:db8::10-2001:db8::20", "2001:db8::-2001:db8::20")],
        "address_pool[0].addresses[1]",
        "contains 2001:db8::1, the gateway's own address (port[0].node_addresses[1])",
    ),
    case(
        &[("\"2001:db8:1::/120\"", "\"2001:db8:5::/120\"")],
        "address_pool[0].addresses[2]",
        "contains 2001:db8:5::10, the vip of service[0] (\"web6\")",
    ),
];

#[test]
fn each_ipv6_rule_alone_yields_exactly_its_problem() {
    let failures = common::failing_cases(BASE, CASES);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn several_ipv6_problems_are_all_reported_at_once() {
    let got = problems(&edit(&[
        ("\"2001:db8::1/64\"]", "\"2001:db8::1/129\"]"),
        ("via = \"2001:db8::fe\"", "via = \"192.0.2.253\""),
        (
            "{ address = \"fd00:1::11\", port = 8080 }",
            "{ address = \"10.1.0.11\", port = 8080 }",
        ),
        ("2001:db8::10-2001:db8::20", "192.0.2.10-2001:db8::20"),
    ]));
    let paths: Vec<&str> = got.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "port[0].node_addresses[1]",
            "route[0].via",
            "service[0].backends[1].address",
            "address_pool[0].addresses[1]",
        ],
        "{got:#?}"
    );
}
