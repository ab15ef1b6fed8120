//! `host_addresses` and `host_interface` on `[[port]]`: the host path's
//! addresses (the kernel's, through a TAP) are validated like node and
//! SNAT addresses, overlap no other address of the gateway, and give the
//! port a host interface. `BASE` is valid; each case breaks one rule and
//! expects exactly its problem.

mod common;

use common::problems;
use nic_config::parse;

const BASE: &str = r#"
[[port]]
name = "outside"
driver = "afpacket"
interface = "out0"
role = "outside"
node_addresses = ["192.0.2.1/24"]
host_addresses = ["192.0.2.2/24", "198.18.0.2/30"]

[[port]]
name = "inside-long-name"
driver = "afpacket"
interface = "in0"
role = "inside"
snat_addresses = ["10.1.0.1/24"]
host_addresses = ["10.1.0.2/24"]

[[service]]
name = "web"
protocol = "tcp"
vip = "203.0.113.10"
external_ips = ["203.0.113.20"]
port = 80
node_port = 30080
backends = [{ address = "10.1.0.10", port = 8080 }]

[kubernetes]

[[address_pool]]
name = "lb"
addresses = ["198.51.100.0/28"]
"#;

/// `BASE` with each `(from, to)` applied once.
fn edit(edits: &[(&str, &str)]) -> String {
    common::edited(BASE, edits)
}

#[test]
fn host_addresses_are_a_per_port_list_with_a_host_interface() {
    let plan = parse(BASE).unwrap_or_else(|e| panic!("{e}"));
    let hosts: Vec<(Vec<String>, Option<&str>)> = plan
        .ports
        .iter()
        .map(|p| {
            (
                p.host_addresses.iter().map(ToString::to_string).collect(),
                p.host_interface.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        hosts,
        [
            (
                vec!["192.0.2.2/24".to_owned(), "198.18.0.2/30".to_owned()],
                Some("outside-host")
            ),
            (vec!["10.1.0.2/24".to_owned()], Some("inside-lon-host")),
        ]
    );
    // Not owned addresses of the dataplane's roles (node, SNAT).
    assert!(
        plan.addresses
            .iter()
            .all(|a| a.address.to_string() != "192.0.2.2")
    );
    // A host address's subnet is a connected subnet of its port.
    assert!(
        plan.routes
            .iter()
            .any(|r| r.destination.to_string() == "198.18.0.0/30"
                && r.port == 0
                && r.via.is_none())
    );
    let shown = plan.to_string();
    assert!(
        shown.contains("host 192.0.2.2/24 (kernel, via outside-host)"),
        "{shown}"
    );
    // Without host addresses there is no host interface, even if named.
    let none = parse(&edit(&[(
        "host_addresses = [\"10.1.0.2/24\"]",
        "host_interface = \"tap9\"",
    )]))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(none.ports[1].host_interface, None);
    let named = parse(&edit(&[(
        "host_addresses = [\"10.1.0.2/24\"]",
        "host_addresses = [\"10.1.0.2/24\"]\nhost_interface = \"tap9\"",
    )]))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(named.ports[1].host_interface.as_deref(), Some("tap9"));
}

/// (edits, path, words of the reason)
type Case = (
    &'static [(&'static str, &'static str)],
    &'static str,
    &'static str,
);

const CASES: &[Case] = &[
    (
        &[("\"192.0.2.2/24\", ", "\"192.0.2.2\", ")],
        "port[0].host_addresses[0]",
        "prefix",
    ),
    (
        &[("\"192.0.2.2/24\", ", "\"224.0.0.5/24\", ")],
        "port[0].host_addresses[0]",
        "not a unicast host address",
    ),
    (
        &[("\"192.0.2.2/24\", ", "\"192.0.2.2/24\", \"192.0.2.2/24\", ")],
        "port[0].host_addresses[1]",
        "already owned at port[0].host_addresses[0]",
    ),
    (
        &[("\"192.0.2.2/24\", ", "\"192.0.2.1/24\", ")],
        "port[0].host_addresses[0]",
        "192.0.2.1 is already owned at port[0].node_addresses[0]",
    ),
    (
        &[(
            "host_addresses = [\"10.1.0.2/24\"]",
            "host_addresses = [\"10.1.0.1/24\"]",
        )],
        "port[1].host_addresses[0]",
        "10.1.0.1 is already owned at port[1].snat_addresses[0]",
    ),
    (
        &[(
            "host_addresses = [\"10.1.0.2/24\"]",
            "host_addresses = [\"192.0.2.7/24\"]",
        )],
        "port[1].host_addresses[0]",
        "subnet 192.0.2.0/24 is already connected on port[0]",
    ),
    (
        &[("vip = \"203.0.113.10\"", "vip = \"192.0.2.2\"")],
        "service[0].vip",
        "port[0].host_addresses[0]",
    ),
    (
        &[(
            "external_ips = [\"203.0.113.20\"]",
            "external_ips = [\"198.18.0.2\"]",
        )],
        "service[0].external_ips[0]",
        "port[0].host_addresses[1]",
    ),
    (
        &[(
            "addresses = [\"198.51.100.0/28\"]",
            "addresses = [\"198.18.0.0/30\"]",
        )],
        "address_pool[0].addresses[0]",
        "198.18.0.2",
    ),
    (
        &[(
            "host_addresses = [\"10.1.0.2/24\"]",
            "host_addresses = [\"10.1.0.2/24\"]\nhost_interface = \"a-very-long-tap-name\"",
        )],
        "port[1].host_interface",
        "Linux interface names have at most 15",
    ),
    (
        &[(
            "host_addresses = [\"10.1.0.2/24\"]",
            "host_addresses = [\"10.1.0.2/24\"]\nhost_interface = \"out0\"",
        )],
        "port[1].host_interface",
        "the interface of port[0]",
    ),
    (
        &[(
            "host_addresses = [\"10.1.0.2/24\"]",
            "host_addresses = [\"10.1.0.2/24\"]\nhost_interface = \"outside-host\"",
        )],
        "port[1].host_interface",
        "already used by port[0].host_interface",
    ),
];

#[test]
fn each_rule_alone_yields_exactly_its_problem() {
    for (edits, path, words) in CASES {
        let found = problems(&edit(edits));
        assert!(
            found.len() == 1 && found[0].path == *path && found[0].reason.contains(words),
            "edits {edits:?}: expected one problem at {path} with {words:?}, got {found:?}"
        );
    }
}
