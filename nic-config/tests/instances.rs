//! `[[instance]]`: per-instance node, SNAT and host addresses from one file, the
//! choice of the instance (`--instance`), and what validation refuses (every
//! problem at once, each at its path).

use nic_config::{ConfigError, InstanceChoice, IpPrefix, Plan, Problem, parse_instance};

const TIER: &str = r#"
[[port]]
name = "outside"
driver = "afpacket"
interface = "out0"
role = "outside"

[[port]]
name = "inside"
driver = "afpacket"
interface = "in0"
role = "inside"

[[service]]
name = "web"
protocol = "tcp"
vip = "192.0.2.10"
port = 80
backends = [{ address = "10.1.0.10", port = 8080 }]

[kubernetes]

[[address_pool]]
name = "public"
addresses = ["192.0.2.64/27"]

[[instance]]
name = "gw-a"
[[instance.port]]
name = "outside"
node_addresses = ["192.0.2.1/24"]
[[instance.port]]
name = "inside"
snat_addresses = ["10.1.0.1/24"]

[[instance]]
name = "gw-b"
[[instance.port]]
name = "outside"
node_addresses = ["192.0.2.2/24"]
[[instance.port]]
name = "inside"
snat_addresses = ["10.1.0.2/24"]
"#;

fn edit(edits: &[(&str, &str)]) -> String {
    let mut text = TIER.to_owned();
    for (from, to) in edits {
        assert!(text.contains(from), "{from:?} not in the config");
        text = text.replacen(from, to, 1);
    }
    text
}

fn plan(text: &str, choice: InstanceChoice<'_>) -> Plan {
    parse_instance(text, choice).unwrap_or_else(|e| panic!("{e}"))
}

fn problems(text: &str, choice: InstanceChoice<'_>) -> Vec<Problem> {
    match parse_instance(text, choice) {
        Err(ConfigError::Invalid(problems)) => problems,
        Err(other) => panic!("expected validation problems, got: {other}"),
        Ok(plan) => panic!("expected validation problems, got a plan:\n{plan}"),
    }
}

fn prefix(s: &str) -> IpPrefix {
    s.parse().expect("prefix")
}

#[test]
fn each_instance_runs_with_its_own_addresses() {
    for (name, node, snat) in [
        ("gw-a", "192.0.2.1/24", "10.1.0.1/24"),
        ("gw-b", "192.0.2.2/24", "10.1.0.2/24"),
    ] {
        let p = plan(TIER, InstanceChoice::Named(name));
        assert_eq!(p.instance.as_deref(), Some(name));
        assert!(
            p.to_string().starts_with(&format!("instance: {name}\n")),
            "`portico check` names the instance"
        );
        assert_eq!(p.ports[0].node_addresses, vec![prefix(node)]);
        assert!(p.ports[0].snat_addresses.is_empty());
        assert_eq!(p.ports[1].snat_addresses, vec![prefix(snat)]);
        assert_eq!(
            p.dataplane.snat.addresses,
            vec![prefix(snat).address],
            "{name}: SNAT from its own address only"
        );
    }
    // `portico check`: every instance checked, the first one's plan.
    let p = plan(TIER, InstanceChoice::Every);
    assert_eq!(p.instance.as_deref(), Some("gw-a"));
}

#[test]
fn a_name_without_instances_is_only_the_name_in_the_tier() {
    let single = edit(&[
        (
            "role = \"outside\"\n",
            "role = \"outside\"\nnode_addresses = [\"192.0.2.1/24\"]\n",
        ),
        (
            "role = \"inside\"\n",
            "role = \"inside\"\nsnat_addresses = [\"10.1.0.1/24\"]\n",
        ),
    ]);
    let single = single.split("[[instance]]").next().unwrap_or_default();
    let p = plan(single, InstanceChoice::Named("node-7"));
    assert_eq!(p.instance.as_deref(), Some("node-7"));
    assert_eq!(p.ports[0].node_addresses, vec![prefix("192.0.2.1/24")]);
    assert_eq!(plan(single, InstanceChoice::Unnamed).instance, None);
}

#[test]
fn instances_need_a_name_that_exists() {
    let p = problems(TIER, InstanceChoice::Unnamed);
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].path, "instance");
    assert!(p[0].reason.contains("--instance"), "{}", p[0].reason);
    let p = problems(TIER, InstanceChoice::Named("gw-z"));
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].path, "instance");
    assert!(p[0].reason.contains("gw-a, gw-b"), "{}", p[0].reason);
}

#[test]
fn several_instances_need_kubernetes_for_the_election() {
    let text = edit(&[
        ("[kubernetes]\n", ""),
        (
            "[[address_pool]]\nname = \"public\"\naddresses = [\"192.0.2.64/27\"]\n",
            "",
        ),
    ]);
    let p = problems(&text, InstanceChoice::Named("gw-a"));
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].path, "instance");
    assert!(p[0].reason.contains("[kubernetes]"), "{}", p[0].reason);
    // One instance alone announces everything: no election needed.
    let one = text
        .split("[[instance]]\nname = \"gw-b\"")
        .next()
        .unwrap_or_default();
    assert_eq!(
        plan(one, InstanceChoice::Named("gw-a")).instance.as_deref(),
        Some("gw-a")
    );
}

#[test]
fn every_instance_problem_is_reported_at_once_with_its_path() {
    let text = edit(&[
        // Shared addresses on [[port]] would be claimed by every instance.
        (
            "role = \"inside\"\n",
            "role = \"inside\"\nsnat_addresses = [\"10.1.0.9/24\"]\n",
        ),
        // gw-b: the node address of gw-a, and the static VIP.
        (
            "node_addresses = [\"192.0.2.2/24\"]",
            "node_addresses = [\"192.0.2.1/24\", \"192.0.2.10/24\"]",
        ),
        // gw-b: an address in the pool.
        (
            "snat_addresses = [\"10.1.0.2/24\"]",
            "snat_addresses = [\"10.1.0.2/24\"]\n[[instance.port]]\nname = \"inside\"\n[[instance.port]]\nname = \"nowhere\"\n",
        ),
    ]);
    let text = format!(
        "{text}\n[[instance]]\nname = \"gw-a\"\n\n[[instance]]\nname = \"GW_C\"\n[[instance.port]]\nname = \"outside\"\nnode_addresses = [\"192.0.2.70/24\", \"not-an-address\"]\n"
    );
    let got = problems(&text, InstanceChoice::Named("gw-a"));
    let paths: Vec<&str> = got.iter().map(|p| p.path.as_str()).collect();
    let expect = [
        ("port[1].snat_addresses", "each instance has its own"),
        (
            "instance[1].port[0].node_addresses[0]",
            "another instance (instance[0].port[0].node_addresses[0])",
        ),
        (
            "instance[1].port[2].name",
            "already set at instance[1].port[1]",
        ),
        (
            "instance[1].port[3].name",
            "no [[port]] is named \"nowhere\"",
        ),
        ("instance[2].name", "already the name of instance[0]"),
        ("instance[3].name", "not a DNS subdomain"),
        (
            "service[0].vip",
            "own address (instance[1].port[0].node_addresses[1])",
        ),
        (
            "instance[3].port[0].node_addresses[1]",
            "expected an IP address",
        ),
    ];
    for (path, words) in expect {
        assert!(
            got.iter()
                .any(|p| p.path == path && p.reason.contains(words)),
            "no problem at {path} with {words:?} in {got:#?}"
        );
    }
    // The pool overlap of GW_C's address is named with the instance's path.
    assert!(
        got.iter().any(
            |p| p.reason.contains("instance[3].port[0].node_addresses[0]")
                || p.path == "instance[3].port[0].node_addresses[0]"
        ),
        "{got:#?}"
    );
    let mut unique = paths.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), paths.len(), "each problem once: {got:#?}");
}

/// Host addresses are per instance too: each instance peers (and is
/// reached) from its own, and two instances cannot share one.
#[test]
fn each_instance_has_its_own_host_addresses() {
    let with_host = |a: &str, b: &str| {
        edit(&[
            (
                "node_addresses = [\"192.0.2.1/24\"]",
                &format!("node_addresses = [\"192.0.2.1/24\"]\nhost_addresses = [\"{a}\"]"),
            ),
            (
                "node_addresses = [\"192.0.2.2/24\"]",
                &format!("node_addresses = [\"192.0.2.2/24\"]\nhost_addresses = [\"{b}\"]"),
            ),
        ])
    };
    let text = with_host("192.0.2.11/24", "192.0.2.12/24");
    for (name, host) in [("gw-a", "192.0.2.11/24"), ("gw-b", "192.0.2.12/24")] {
        let p = plan(&text, InstanceChoice::Named(name));
        assert_eq!(p.ports[0].host_addresses, vec![prefix(host)], "{name}");
        assert!(p.ports[0].host_interface.is_some(), "{name}: a TAP");
        assert!(p.ports[1].host_addresses.is_empty(), "{name}");
    }
    // The same host address in two instances.
    let got = problems(
        &with_host("192.0.2.11/24", "192.0.2.11/24"),
        InstanceChoice::Named("gw-a"),
    );
    assert!(
        got.iter()
            .any(|p| p.path == "instance[1].port[0].host_addresses[0]"
                && p.reason
                    .contains("another instance (instance[0].port[0].host_addresses[0])")),
        "{got:#?}"
    );
    // A host address that is another instance's node address, and one on
    // the shared [[port]].
    let text = with_host("192.0.2.11/24", "192.0.2.1/24").replacen(
        "role = \"inside\"\n",
        "role = \"inside\"\nhost_addresses = [\"10.1.0.50/24\"]\n",
        1,
    );
    let got = problems(&text, InstanceChoice::Named("gw-a"));
    for (path, words) in [
        (
            "instance[1].port[0].host_addresses[0]",
            "another instance (instance[0].port[0].node_addresses[0])",
        ),
        ("port[1].host_addresses", "each instance has its own"),
    ] {
        assert!(
            got.iter()
                .any(|p| p.path == path && p.reason.contains(words)),
            "no problem at {path} with {words:?} in {got:#?}"
        );
    }
    // Within one instance, a host address that is its own node address:
    // the [[port]] check, reported at the instance's path.
    let got = problems(
        &with_host("192.0.2.1/24", "192.0.2.12/24"),
        InstanceChoice::Named("gw-a"),
    );
    assert!(
        got.iter().any(
            |p| p.path.starts_with("instance[0].port[0].host_addresses[0]")
                || p.reason.contains("instance[0].port[0].host_addresses[0]")
        ),
        "{got:#?}"
    );
}

/// The tier of [`TIER`] without `[kubernetes]`, announcing its VIPs by BGP:
/// host addresses per instance, one peer, the service advertised.
fn bgp_tier(router_ids: (&str, &str)) -> String {
    let text = edit(&[
        ("[kubernetes]\n", ""),
        (
            "[[address_pool]]\nname = \"public\"\naddresses = [\"192.0.2.64/27\"]\n",
            "",
        ),
        (
            "backends = [",
            "bgp_advertisements = [\"tier\"]\nbackends = [",
        ),
        (
            "name = \"gw-a\"\n",
            &format!("name = \"gw-a\"\nbgp_router_id = \"{}\"\n", router_ids.0),
        ),
        (
            "name = \"gw-b\"\n",
            &format!("name = \"gw-b\"\nbgp_router_id = \"{}\"\n", router_ids.1),
        ),
        (
            "node_addresses = [\"192.0.2.1/24\"]",
            "node_addresses = [\"192.0.2.1/24\"]\nhost_addresses = [\"192.0.2.11/24\"]",
        ),
        (
            "node_addresses = [\"192.0.2.2/24\"]",
            "node_addresses = [\"192.0.2.2/24\"]\nhost_addresses = [\"192.0.2.12/24\"]",
        ),
    ]);
    format!(
        "{text}\n[[bgp.peer]]\naddress = \"192.0.2.254\"\npeer_asn = 64512\nmy_asn = 64513\n\
         \n[[bgp.advertisement]]\nname = \"tier\"\n"
    )
}

#[test]
fn a_tier_without_kubernetes_announces_by_bgp_with_a_router_id_per_instance() {
    let text = bgp_tier(("192.0.2.11", "192.0.2.12"));
    for (name, id) in [("gw-a", "192.0.2.11"), ("gw-b", "192.0.2.12")] {
        let p = plan(&text, InstanceChoice::Named(name));
        assert!(!p.vips_by_arp, "{name}: VIPs by BGP only");
        assert_eq!(p.bgp.peers.len(), 1);
        assert_eq!(p.bgp.peers[0].router_id.to_string(), id, "{name}");
    }
    // With [kubernetes] the election announces by ARP; one instance alone
    // always does.
    let with_kube = text.replacen("[[service]]", "[kubernetes]\n\n[[service]]", 1);
    assert!(plan(&with_kube, InstanceChoice::Named("gw-a")).vips_by_arp);
    assert!(plan(TIER, InstanceChoice::Named("gw-a")).vips_by_arp);
}

#[test]
fn a_bgp_tier_refuses_what_cannot_work_all_at_once() {
    // A shared identifier, a service not advertised, a shared source
    // address.
    let text = bgp_tier(("192.0.2.11", "192.0.2.11"))
        .replacen("bgp_advertisements = [\"tier\"]\n", "", 1)
        .replacen(
            "my_asn = 64513",
            "my_asn = 64513\nsource_address = \"192.0.2.11\"",
            1,
        );
    let got = problems(&text, InstanceChoice::Named("gw-a"));
    for (path, words) in [
        ("instance[1].bgp_router_id", "already instance[0]'s"),
        ("service[0].bgp_advertisements", "announced by BGP only"),
        ("bgp.peer[0].source_address", "leave it out"),
    ] {
        assert!(
            got.iter()
                .any(|p| p.path == path && p.reason.contains(words)),
            "no problem at {path} with {words:?} in {got:#?}"
        );
    }
    // An identifier that is not one of the instance's own addresses.
    let got = problems(
        &bgp_tier(("192.0.2.11", "192.0.2.77")),
        InstanceChoice::Named("gw-a"),
    );
    assert!(
        got.iter().any(|p| p.path == "instance[1].bgp_router_id"
            && p.reason.contains("not a node or host address")),
        "{got:#?}"
    );
    // Missing and malformed identifiers.
    let text = bgp_tier(("192.0.2.11", "not-an-address")).replacen(
        "bgp_router_id = \"192.0.2.11\"\n",
        "",
        1,
    );
    let got = problems(&text, InstanceChoice::Named("gw-b"));
    for (path, words) in [
        ("instance[0].bgp_router_id", "missing"),
        ("instance[1].bgp_router_id", "not an IPv4 address"),
    ] {
        assert!(
            got.iter()
                .any(|p| p.path == path && p.reason.contains(words)),
            "no problem at {path} with {words:?} in {got:#?}"
        );
    }
}

#[test]
fn an_instance_may_name_its_own_interface_and_driver() {
    // gw-b's box has other NICs: another name on the outside, AF_XDP on
    // both ports.
    let text = edit(&[
        (
            "name = \"gw-b\"\n[[instance.port]]\nname = \"outside\"\n",
            "name = \"gw-b\"\n[[instance.port]]\nname = \"outside\"\ninterface = \"eno2\"\ndriver = \"afxdp\"\n",
        ),
        (
            "name = \"inside\"\nsnat_addresses = [\"10.1.0.2/24\"]",
            "name = \"inside\"\ndriver = \"afxdp\"\nsnat_addresses = [\"10.1.0.2/24\"]",
        ),
    ]);
    let a = plan(&text, InstanceChoice::Named("gw-a"));
    let b = plan(&text, InstanceChoice::Named("gw-b"));
    assert_eq!(a.ports[0].interface, "out0");
    assert_eq!(b.ports[0].interface, "eno2");
    assert_ne!(
        format!("{:?}", a.ports[0].driver),
        format!("{:?}", b.ports[0].driver)
    );
}

#[test]
fn instances_have_ipv6_addresses_of_their_own_too() {
    let text = edit(&[
        (
            "node_addresses = [\"192.0.2.1/24\"]",
            "node_addresses = [\"192.0.2.1/24\", \"2001:db8::1/64\"]",
        ),
        (
            "node_addresses = [\"192.0.2.2/24\"]",
            "node_addresses = [\"192.0.2.2/24\", \"2001:db8::2/64\"]",
        ),
    ]);
    for (name, want) in [("gw-a", "2001:db8::1/64"), ("gw-b", "2001:db8::2/64")] {
        let p = plan(&text, InstanceChoice::Named(name));
        let node: Vec<String> = p.ports[0]
            .node_addresses
            .iter()
            .map(IpPrefix::to_string)
            .collect();
        assert_eq!(node[1], want, "{name}");
    }
    // The same IPv6 address in two instances is refused where it repeats.
    let shared = text.replace("2001:db8::2/64", "2001:db8::1/64");
    let got = problems(&shared, InstanceChoice::Named("gw-a"));
    assert!(
        got.iter()
            .any(|p| p.path == "instance[1].port[0].node_addresses[1]"
                && p.reason
                    .contains("2001:db8::1 is already the address of another instance")),
        "{got:?}"
    );
}
