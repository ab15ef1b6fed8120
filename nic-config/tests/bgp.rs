//! `[bgp]` validation: portico-bgp's own problems with their full paths,
//! together with the rest of the file's, and the cross-checks with ports,
//! pools and services. In the style of `validation.rs`: `BASE` is valid,
//! each case breaks one rule and expects exactly its problem.

mod common;

use common::problems;
use nic_config::{ConfigError, parse};
use std::net::{IpAddr, Ipv4Addr};

const BASE: &str = r#"
[[port]]
name = "outside"
driver = "afpacket"
interface = "out0"
role = "outside"
node_addresses = ["192.0.2.9/24"]
host_addresses = ["192.0.2.1/24", "192.0.2.2/24"]

[[port]]
name = "inside"
driver = "mem"
interface = "in0"
role = "inside"
snat_addresses = ["10.1.0.1/24"]

[[service]]
name = "web"
protocol = "tcp"
vip = "203.0.113.10"
external_ips = ["203.0.113.20"]
port = 80
bgp_advertisements = ["public"]
backends = [{ address = "10.1.0.10", port = 8080 }]

[[service]]
name = "dns"
protocol = "udp"
vip = "203.0.113.10"
port = 53
bgp_advertisements = ["public", "ibgp"]
backends = [{ address = "10.1.0.12", port = 53 }]

[kubernetes]

[[address_pool]]
name = "lb"
addresses = ["198.51.100.0/28"]
bgp_advertisements = ["ibgp"]

[[bgp.peer]]
address = "192.0.2.254"
peer_asn = 65000
my_asn = 65001
router_id = "192.0.2.1"
source_address = "192.0.2.1"

[[bgp.peer]]
address = "198.18.0.1"
peer_asn = 65001
my_asn = 65001
router_id = "192.0.2.1"
source_address = "192.0.2.2"

[[bgp.advertisement]]
name = "public"
peers = ["192.0.2.254"]
communities = ["65001:100"]

[[bgp.advertisement]]
name = "ibgp"
peers = ["198.18.0.1"]
local_pref = 200
"#;

type Edits = Vec<(&'static str, &'static str)>;

/// Each `(edits, path, reason)`: `BASE` with the edits has a problem at
/// `path` whose reason contains `reason`.
fn each_has_its_problem(cases: &[(Edits, &str, &str)]) {
    for (edits, path, reason) in cases {
        let got = problems(&edit(edits));
        assert!(
            got.iter()
                .any(|p| p.path == *path && p.reason.contains(reason)),
            "{edits:?}: want {path}: {reason}, got {got:?}"
        );
    }
}

/// `BASE` with each `(from, to)` applied once.
fn edit(edits: &[(&str, &str)]) -> String {
    common::edited(BASE, edits)
}

/// (edits, path, words of the reason)
type Case = (
    &'static [(&'static str, &'static str)],
    &'static str,
    &'static str,
);

const CASES: &[Case] = &[
    // portico-bgp's own checks, with their full path
    (
        &[("peer_asn = 65000", "peer_asn = 23456")],
        "bgp.peer[0].peer_asn",
        "reserved",
    ),
    (
        &[(
            "source_address = \"192.0.2.2\"",
            "source_address = \"192.0.2.2\"\nhold_time_s = 2",
        )],
        "bgp.peer[1].hold_time_s",
        "2 s is not allowed",
    ),
    (
        &[(
            "local_pref = 200",
            "local_pref = 200\naggregation_length = 33",
        )],
        "bgp.advertisement[1].aggregation_length",
        "0..=32",
    ),
    // peers against the rest of the file
    (
        &[
            (
                "address = \"198.18.0.1\"",
                "address = \"192.0.2.254\"\nport = 1179",
            ),
            ("peers = [\"198.18.0.1\"]", "peers = [\"192.0.2.254\"]"),
        ],
        "bgp.peer[1].address",
        "already the address of bgp.peer[0]",
    ),
    (
        &[
            ("address = \"192.0.2.254\"", "address = \"192.0.2.2\""),
            ("peers = [\"192.0.2.254\"]", "peers = [\"192.0.2.2\"]"),
        ],
        "bgp.peer[0].address",
        "the gateway's own address (port[0].host_addresses[1])",
    ),
    (
        &[
            ("address = \"192.0.2.254\"", "address = \"192.0.9.254\""),
            ("peers = [\"192.0.2.254\"]", "peers = [\"192.0.9.254\"]"),
        ],
        "bgp.peer[0].address",
        "no host address's subnet",
    ),
    (
        &[
            (
                "address = \"192.0.2.254\"",
                "address = \"192.0.9.254\"\nttl_security_hops = 1",
            ),
            ("peers = [\"192.0.2.254\"]", "peers = [\"192.0.9.254\"]"),
        ],
        "bgp.peer[0].address",
        "ttl_security_hops = 1) must be",
    ),
    (
        &[(
            "address = \"192.0.2.254\"",
            "address = \"192.0.2.254\"\nttl_security_hops = 2\nmultihop_ttl = 2",
        )],
        "bgp.peer[0].multihop_ttl",
        "contradicts ttl_security_hops = 2",
    ),
    (
        &[
            (
                "address = \"192.0.2.254\"",
                "address = \"2001:db8::1\"\nmultihop_ttl = 2",
            ),
            ("peers = [\"192.0.2.254\"]", "peers = [\"2001:db8::1\"]"),
            ("source_address = \"192.0.2.1\"\n", ""),
        ],
        "bgp.peer[0].address",
        "IPv6",
    ),
    (
        &[(
            "source_address = \"192.0.2.1\"",
            "source_address = \"10.1.0.1\"",
        )],
        "bgp.peer[0].source_address",
        "not a host address",
    ),
    (
        &[(
            "source_address = \"192.0.2.1\"",
            "source_address = \"192.0.2.9\"",
        )],
        "bgp.peer[0].source_address",
        "192.0.2.9 is not a host address",
    ),
    (
        &[
            ("router_id = \"192.0.2.1\"", "router_id = \"192.0.2.77\""),
            ("router_id = \"192.0.2.1\"", "router_id = \"192.0.2.77\""),
        ],
        "bgp.peer[0].router_id",
        "not a node or host address",
    ),
    (
        &[(
            "my_asn = 65001\nrouter_id = \"192.0.2.1\"\nsource_address = \"192.0.2.2\"",
            "my_asn = 65001\nrouter_id = \"192.0.2.2\"\nsource_address = \"192.0.2.2\"",
        )],
        "bgp.peer[1].router_id",
        "differs from bgp.peer[0]'s 192.0.2.1",
    ),
    // advertisements against pools and services
    (
        &[(
            "bgp_advertisements = [\"ibgp\"]",
            "bgp_advertisements = [\"ibgp\", \"private\"]",
        )],
        "address_pool[0].bgp_advertisements[1]",
        "\"private\" is not the name of any [[bgp.advertisement]]",
    ),
    (
        &[(
            "bgp_advertisements = [\"public\", \"ibgp\"]",
            "bgp_advertisements = [\"public\", \"ibgp\", \"public\"]",
        )],
        "service[1].bgp_advertisements[2]",
        "listed twice",
    ),
    (
        &[(
            "vip = \"203.0.113.10\"\nexternal_ips = [\"203.0.113.20\"]\n",
            "node_port = 30080\n",
        )],
        "service[0].bgp_advertisements",
        "no vip or external_ips",
    ),
    (
        &[
            ("bgp_advertisements = [\"ibgp\"]\n", ""),
            ("[\"public\", \"ibgp\"]", "[\"public\"]"),
        ],
        "bgp.advertisement[1].name",
        "announces nothing",
    ),
];

#[test]
fn base_is_valid_and_resolved() {
    let plan = parse(BASE).unwrap_or_else(|e| panic!("{e}"));
    let bgp = &plan.bgp;
    assert_eq!(bgp.peers.len(), 2);
    assert_eq!(bgp.peers[0].address, IpAddr::from([192, 0, 2, 254]));
    assert_eq!((bgp.peers[0].port, bgp.peers[0].hold_time_s), (179, 90));
    assert!(bgp.peers[1].is_ibgp());
    let [public, ibgp] = &bgp.advertisements[..] else {
        panic!("{bgp:?}")
    };
    assert_eq!(public.advertisement.name, "public");
    assert_eq!(
        public.vips,
        [
            Ipv4Addr::new(203, 0, 113, 10),
            Ipv4Addr::new(203, 0, 113, 20)
        ],
        "the VIP both services share, once, then the external IP"
    );
    assert!(public.address_pools.is_empty());
    assert_eq!(ibgp.vips, [Ipv4Addr::new(203, 0, 113, 10)]);
    assert_eq!(ibgp.address_pools, ["lb"]);
    assert_eq!(ibgp.advertisement.local_pref, Some(200));
    let printed = plan.to_string();
    for words in [
        "bgp peers:",
        "192.0.2.254:179 AS 65000 (eBGP), local AS 65001, router id 192.0.2.1, from 192.0.2.1",
        "198.18.0.1:179 AS 65001 (iBGP)",
        "bgp advertisements:",
        "public: to 192.0.2.254, as /32, communities 65001:100",
        "ibgp: to 198.18.0.1, as /32, local_pref 200 (iBGP)",
        "      address pool lb",
        "      vip 203.0.113.20",
    ] {
        assert!(printed.contains(words), "{words:?} not in:\n{printed}");
    }
}

#[test]
fn without_bgp_the_plan_has_none() {
    let text = "[[port]]\nname = \"p\"\ndriver = \"mem\"\ninterface = \"p\"\nrole = \"both\"\n";
    let plan = parse(text).unwrap();
    assert_eq!(plan.bgp, nic_config::BgpPlan::default());
    assert!(!plan.to_string().contains("bgp"));
}

#[test]
fn each_rule_alone_yields_exactly_its_problem() {
    let mut failures = Vec::new();
    for (i, (edits, path, reason)) in CASES.iter().enumerate() {
        let got = problems(&edit(edits));
        if !(got.len() == 1 && got[0].path == *path && got[0].reason.contains(reason)) {
            failures.push(format!("case {i} ({path} / {reason:?}): got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn bgp_problems_come_with_every_other_problem_of_the_file() {
    let text = edit(&[
        ("port = 80\n", "port = 0\n"),
        ("peer_asn = 65000", "peer_asn = 0"),
        (
            "source_address = \"192.0.2.1\"",
            "source_address = \"10.1.0.1\"\nkeepalive_s = 90",
        ),
        (
            "router_id = \"192.0.2.1\"\nsource_address = \"192.0.2.2\"",
            "router_id = \"192.0.2.2\"\nsource_address = \"192.0.2.2\"\nmd5_password = \"\"",
        ),
        (
            "local_pref = 200",
            "local_pref = 200\naggregation_length = 40",
        ),
        (
            "bgp_advertisements = [\"ibgp\"]",
            "bgp_advertisements = [\"nope\"]",
        ),
    ]);
    let got = problems(&text);
    let paths: Vec<&str> = got.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "service[0].port",
            "bgp.peer[0].peer_asn",
            "bgp.peer[0].keepalive_s",
            "bgp.peer[1].md5_password",
            "bgp.advertisement[1].aggregation_length",
            "bgp.peer[0].source_address",
            "bgp.peer[1].router_id",
            "address_pool[0].bgp_advertisements[0]",
        ],
        "{got:#?}"
    );
    let printed = parse(&text).unwrap_err().to_string();
    assert_eq!(printed.lines().count(), paths.len());
    assert!(printed.contains("bgp.peer[0].keepalive_s: 90 s is not less than hold_time_s"));
}

#[test]
fn advertisements_need_a_peer() {
    let text = "[[port]]\nname = \"p\"\ndriver = \"mem\"\ninterface = \"p\"\nrole = \"both\"\n\
                node_addresses = [\"192.0.2.1/24\"]\n\n\
                [[service]]\nname = \"s\"\nprotocol = \"tcp\"\nvip = \"192.0.2.10\"\nport = 80\n\
                snat = false\nbgp_advertisements = [\"a\"]\n\n\
                [[bgp.advertisement]]\nname = \"a\"\n";
    let got = problems(text);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].path, "bgp.peer");
}

#[test]
fn a_bad_community_is_a_syntax_error_with_its_line() {
    let text = edit(&[(
        "communities = [\"65001:100\"]",
        "communities = [\"65001:70000\"]",
    )]);
    let e = parse(&text).unwrap_err();
    let ConfigError::Syntax {
        line,
        key_path,
        message,
        ..
    } = &e
    else {
        panic!("{e}")
    };
    assert!(*line > 0, "{e}");
    assert!(key_path.starts_with("bgp.advertisement"), "{e}");
    assert!(message.contains("is not `asn:value`"), "{e}");
}

/// IPv6 (issue 17): with an IPv6 host address, an IPv6 peer (from that
/// address) and `families = ["ipv6-unicast"]` over an IPv4 session are
/// valid (the next hop is derived from the host address); without one, or
/// with a `next_hop_v6` that is not the instance's, each is one problem
/// with its path.
#[test]
fn ipv6_peers_and_families() {
    let dual = [(
        "host_addresses = [\"192.0.2.1/24\", \"192.0.2.2/24\"]",
        "host_addresses = [\"192.0.2.1/24\", \"192.0.2.2/24\", \"2001:db8:2::2/64\"]",
    )];
    let v6_families = (
        "source_address = \"192.0.2.1\"",
        "source_address = \"192.0.2.1\"\nfamilies = [\"ipv6-unicast\"]",
    );
    let v6_peer = [
        ("address = \"198.18.0.1\"", "address = \"2001:db8:2::fe\""),
        ("peers = [\"198.18.0.1\"]", "peers = [\"2001:db8:2::fe\"]"),
        (
            "source_address = \"192.0.2.2\"",
            "source_address = \"2001:db8:2::2\"",
        ),
    ];
    let valid = [
        [&dual[..], &[v6_families]].concat(),
        [&dual[..], &v6_peer[..]].concat(),
        [
            &dual[..],
            &[(
                "source_address = \"192.0.2.1\"",
                "source_address = \"192.0.2.1\"\nnext_hop_v6 = \"2001:db8:2::2\"",
            )],
        ]
        .concat(),
    ];
    for edits in &valid {
        if let Err(e) = parse(&edit(edits)) {
            panic!("{edits:?}: {e}");
        }
    }
    let plan = parse(&edit(&valid[1])).unwrap();
    assert_eq!(
        plan.bgp.peers[1].address,
        "2001:db8:2::fe".parse::<IpAddr>().unwrap()
    );

    let invalid: [(Edits, &str, &str); 3] = [
        (
            vec![v6_families],
            "bgp.peer[0].families",
            "needs a global IPv6 next hop",
        ),
        (
            v6_peer.to_vec(),
            "bgp.peer[1].address",
            "no port has an IPv6 host address",
        ),
        (
            [
                &dual[..],
                &[(
                    "source_address = \"192.0.2.1\"",
                    "source_address = \"192.0.2.1\"\nnext_hop_v6 = \"2001:db8:2::99\"",
                )],
            ]
            .concat(),
            "bgp.peer[0].next_hop_v6",
            "2001:db8:2::99 is not an IPv6 host or node address",
        ),
    ];
    each_has_its_problem(&invalid);
}

/// A link-local peer (FRR's "unnumbered" style) names the host interface
/// of a port with an IPv6 host address; the port itself, an unknown
/// interface, a host interface without IPv6, a link-local source and an
/// interface on a global peer are each a problem with its path, all
/// reported at once.
#[test]
fn link_local_peers_name_a_host_interface() {
    let dual = (
        "host_addresses = [\"192.0.2.1/24\", \"192.0.2.2/24\"]",
        "host_addresses = [\"192.0.2.1/24\", \"192.0.2.2/24\", \"2001:db8:2::2/64\"]",
    );
    let link_local = |interface: &'static str| {
        [
            ("address = \"198.18.0.1\"", "address = \"fe80::1\""),
            ("peers = [\"198.18.0.1\"]", "peers = [\"fe80::1\"]"),
            ("source_address = \"192.0.2.2\"", interface),
        ]
    };
    let valid = [&[dual][..], &link_local("interface = \"outside-host\"")].concat();
    let plan = parse(&edit(&valid)).unwrap_or_else(|e| panic!("{e}"));
    let peer = &plan.bgp.peers[1];
    assert_eq!(peer.interface.as_deref(), Some("outside-host"));
    assert_eq!(peer.name(), "[fe80::1%outside-host]:179");

    let invalid: [(Edits, &str, &str); 5] = [
        (
            [&[dual][..], &link_local("interface = \"out0\"")].concat(),
            "bgp.peer[1].interface",
            "`out0` is port \"outside\" itself, whose kernel interface the dataplane owns: \
             the kernel's BGP session goes through the port's host interface: interface = \
             \"outside-host\"",
        ),
        (
            [&[dual][..], &link_local("interface = \"eth9\"")].concat(),
            "bgp.peer[1].interface",
            "`eth9` is not the host interface of any port",
        ),
        (
            link_local("interface = \"outside-host\"").to_vec(),
            "bgp.peer[1].interface",
            "has IPv6 only with an IPv6 host address",
        ),
        (
            [
                &[dual][..],
                &link_local("interface = \"outside-host\"\nsource_address = \"fe80::2\""),
            ]
            .concat(),
            "bgp.peer[1].source_address",
            "fe80::2 is link-local",
        ),
        (
            [&[dual][..], &link_local("")].concat(),
            "bgp.peer[1].interface",
            "missing: fe80::1 is link-local",
        ),
    ];
    each_has_its_problem(&invalid);
    // Several at once: an interface on a global peer, and the port itself.
    let mut edits = [&[dual][..], &link_local("interface = \"out0\"")].concat();
    edits.push((
        "source_address = \"192.0.2.1\"",
        "source_address = \"192.0.2.1\"\ninterface = \"outside-host\"",
    ));
    let got = problems(&edit(&edits));
    let paths: Vec<&str> = got.iter().map(|p| p.path.as_str()).collect();
    assert!(
        paths.contains(&"bgp.peer[0].interface") && paths.contains(&"bgp.peer[1].interface"),
        "{got:?}"
    );
}

/// GTSM with the router two hops away: off the connected subnets is
/// fine, and the plan keeps the setting for the session.
#[test]
fn gtsm_peer_two_hops_away() {
    let plan = parse(&edit(&[
        (
            "address = \"192.0.2.254\"",
            "address = \"192.0.9.254\"\nttl_security_hops = 2",
        ),
        ("peers = [\"192.0.2.254\"]", "peers = [\"192.0.9.254\"]"),
    ]))
    .unwrap_or_else(|e| panic!("{e}"));
    let peer = &plan.bgp.peers[0];
    assert_eq!(
        (peer.ttl_security_hops, peer.ttl(), peer.min_ttl()),
        (Some(2), 255, Some(254))
    );
}

/// Unnumbered BGP on two links: the same fe80:: router address on two
/// host interfaces is two sessions; on one interface twice it is one
/// router configured twice.
#[test]
fn the_same_link_local_peer_on_two_interfaces_is_two_sessions() {
    let peers = |second_interface: &'static str| {
        vec![
            (
                "host_addresses = [\"192.0.2.1/24\", \"192.0.2.2/24\"]",
                "host_addresses = [\"192.0.2.1/24\", \"192.0.2.2/24\", \"2001:db8:2::2/64\"]",
            ),
            (
                "snat_addresses = [\"10.1.0.1/24\"]",
                "snat_addresses = [\"10.1.0.1/24\"]\nhost_addresses = [\"2001:db8:3::2/64\"]",
            ),
            (
                "address = \"192.0.2.254\"",
                "address = \"fe80::1\"\ninterface = \"outside-host\"",
            ),
            ("peers = [\"192.0.2.254\"]", "peers = [\"fe80::1\"]"),
            ("source_address = \"192.0.2.1\"\n", ""),
            ("address = \"198.18.0.1\"", "address = \"fe80::1\""),
            ("peers = [\"198.18.0.1\"]", "peers = [\"fe80::1\"]"),
            ("source_address = \"192.0.2.2\"", second_interface),
        ]
    };
    let plan =
        parse(&edit(&peers("interface = \"inside-host\""))).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<String> = plan.bgp.peers.iter().map(|p| p.name()).collect();
    assert_eq!(
        names,
        ["[fe80::1%outside-host]:179", "[fe80::1%inside-host]:179"]
    );
    each_has_its_problem(&[(
        peers("interface = \"outside-host\""),
        "bgp.peer[1].address",
        "[fe80::1%outside-host]:179 is configured twice",
    )]);
}
