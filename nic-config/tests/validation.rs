//! Validation rules, one at a time and all at once.
//!
//! `BASE` is a valid file that exercises every feature. Each rule case edits
//! it (plain text replacements) so that exactly one rule is broken, and
//! expects exactly one problem, at the given path, whose reason contains the
//! given words.

mod common;

use common::{Case, case, problems};
use nic_config::{ConfigError, ListenerKind, parse};
use proptest::prelude::*;
use std::net::Ipv4Addr;

const BASE: &str = r#"
[dataplane]
workers = 2
batch_size = 32
maglev_table_size = 251

[dataplane.conntrack]
capacity = 1024
expiry_scan_per_poll = 16
early_drop_scan = 8

[dataplane.conntrack.timeouts]
udp_s = 31

[dataplane.snat]
port_range = "20000-29999"
quarantine_s = 60

[dataplane.affinity]
capacity = 1024

[[port]]
name = "outside"
driver = "afpacket"
interface = "out0"
role = "outside"
node_addresses = ["192.0.2.1/24"]
mac = "02:00:00:00:00:01"
mtu = 1500

[[port]]
name = "inside"
driver = "mem"
interface = "in0"
role = "inside"
node_addresses = ["10.1.0.1/24"]
snat_addresses = ["10.1.0.1/24", "10.1.0.2/24"]

[[route]]
destination = "198.51.100.0/24"
via = "192.0.2.254"

[[route]]
destination = "10.2.0.0/16"
via = "10.1.0.254"
port = "inside"

[[route]]
destination = "10.3.0.0/16"
port = "inside"

[[neighbour]]
address = "10.1.0.10"
mac = "02:00:00:00:01:10"

[[service]]
name = "web"
protocol = "tcp"
vip = "203.0.113.10"
port = 80
node_port = 30080
external_ips = ["203.0.113.20"]
session_affinity = "client_ip"
affinity_timeout_s = 600
tcp_backend_gone = "reset"
backends = [
  { address = "10.1.0.10", port = 8080, weight = 3 },
  { address = "10.1.0.11", port = 8080, condition = "draining" },
]

[[service]]
name = "dns"
protocol = "udp"
vip = "203.0.113.10"
port = 53
snat = false
backends = [{ address = "10.1.0.12", port = 53 }]

[kubernetes]
kubeconfig = "/etc/portico/kubeconfig"
serve_unclassed = true
debounce_ms = 30
lease_namespace = "portico-system"
identity = "gw-1"

[[address_pool]]
name = "public"
addresses = ["203.0.113.64/27", "203.0.113.200-203.0.113.210"]
avoid_buggy_ips = true

[[address_pool]]
name = "reserved"
addresses = ["198.51.100.0/28"]
auto_assign = false
"#;

/// `BASE` with each `(from, to)` applied once.
fn edit(edits: &[(&str, &str)]) -> String {
    common::edited(BASE, edits)
}

const CASES: &[Case] = &[
    // --- dataplane
    case(
        &[("workers = 2", "workers = 0")],
        "dataplane.workers",
        "out of range 1..=64",
    ),
    case(
        &[("workers = 2", "workers = 65")],
        "dataplane.workers",
        "out of range 1..=64",
    ),
    case(
        &[("workers = 2", "workers = 2\ncores = [4, 5, 6]")],
        "dataplane.workers",
        "cores lists 3",
    ),
    case(
        &[("workers = 2", "cores = [4, 4]")],
        "dataplane.cores[1]",
        "core 4 is listed twice",
    ),
    case(
        &[("workers = 2", "cores = []")],
        "dataplane.cores",
        "is empty",
    ),
    case(
        &[("batch_size = 32", "batch_size = 0")],
        "dataplane.batch_size",
        "out of range 1..=64",
    ),
    case(
        &[("batch_size = 32", "batch_size = 65")],
        "dataplane.batch_size",
        "out of range 1..=64",
    ),
    case(
        &[(
            "batch_size = 32",
            "batch_size = 32\nidle_spin_polls = 1000001",
        )],
        "dataplane.idle_spin_polls",
        "out of range 0..=1000000",
    ),
    case(
        &[(
            "batch_size = 32",
            "batch_size = 32\nidle = \"spin\"\nidle_spin_polls = 10",
        )],
        "dataplane.idle_spin_polls",
        "applies only to idle = \"adaptive\"",
    ),
    case(
        &[("maglev_table_size = 251", "maglev_table_size = 250")],
        "dataplane.maglev_table_size",
        "not prime",
    ),
    case(
        &[("maglev_table_size = 251", "maglev_table_size = 16777259")],
        "dataplane.maglev_table_size",
        "exceeds the maximum",
    ),
    case(
        &[
            ("maglev_table_size = 251", "maglev_table_size = 2"),
            (
                "condition = \"draining\" },",
                "condition = \"draining\" },\n  { address = \"10.1.0.13\", port = 8080 },",
            ),
        ],
        "dataplane.maglev_table_size",
        "fewer than the 3 backends of service[0]",
    ),
    case(
        &[("capacity = 1024\nexpiry", "capacity = 0\nexpiry")],
        "dataplane.conntrack.capacity",
        "out of range",
    ),
    case(
        &[("capacity = 1024\nexpiry", "capacity = 1073741825\nexpiry")],
        "dataplane.conntrack.capacity",
        "out of range",
    ),
    case(
        &[("expiry_scan_per_poll = 16", "expiry_scan_per_poll = 0")],
        "dataplane.conntrack.expiry_scan_per_poll",
        "out of range",
    ),
    case(
        &[(
            "early_drop_scan = 8",
            "early_drop_scan = 8\nsyn_proxy_flows = 0",
        )],
        "dataplane.conntrack.syn_proxy_flows",
        "out of range",
    ),
    case(
        &[(
            "capacity = 1024\nexpiry",
            "capacity = 1000000\nsyn_proxy_flows = 65537\nexpiry",
        )],
        "dataplane.conntrack.syn_proxy_flows",
        "out of range",
    ),
    case(
        &[(
            "early_drop_scan = 8",
            "early_drop_scan = 8\nsyn_proxy_flows = 1025",
        )],
        "dataplane.conntrack.syn_proxy_flows",
        "more than dataplane.conntrack.capacity (1024 flows)",
    ),
    case(
        &[("udp_s = 31", "udp_s = 0")],
        "dataplane.conntrack.timeouts.udp_s",
        "below the minimum of 1 s",
    ),
    case(
        &[("udp_s = 31", "udp_s = 31\ntcp_close_s = 0")],
        "dataplane.conntrack.timeouts.tcp_close_s",
        "below the minimum",
    ),
    case(
        &[("udp_s = 31", "udp_s = 9223372036854775807")],
        "dataplane.conntrack.timeouts.udp_s",
        "too large",
    ),
    case(
        &[("\"20000-29999\"", "\"abc\"")],
        "dataplane.snat.port_range",
        "not a port range",
    ),
    case(
        &[("\"20000-29999\"", "\"20000-70000\"")],
        "dataplane.snat.port_range",
        "not a port range",
    ),
    case(
        &[("\"20000-29999\"", "\"0-1000\"")],
        "dataplane.snat.port_range",
        "port 0",
    ),
    case(
        &[("\"20000-29999\"", "\"29999-20000\"")],
        "dataplane.snat.port_range",
        "is empty",
    ),
    case(
        &[("\"20000-29999\"", "\"20000-20126\"")],
        "dataplane.snat.port_range",
        "127 ports are too few for 2 workers",
    ),
    case(
        &[("quarantine_s = 60", "quarantine_s = 9223372036854775807")],
        "dataplane.snat.quarantine_s",
        "too large",
    ),
    case(
        &[(
            "[dataplane.affinity]\ncapacity = 1024",
            "[dataplane.affinity]\ncapacity = 0",
        )],
        "dataplane.affinity.capacity",
        "out of range",
    ),
    // --- ports
    case(
        &[("name = \"outside\"\ndriver", "name = \"\"\ndriver")],
        "port[0].name",
        "is empty",
    ),
    case(
        &[(
            "[[route]]",
            "[[port]]\nname = \"inside\"\ndriver = \"mem\"\ninterface = \"in1\"\nrole = \"inside\"\n\n[[route]]",
        )],
        "port[2].name",
        "already the name of port[1]",
    ),
    case(
        &[("interface = \"in0\"", "interface = \"\"")],
        "port[1].interface",
        "is empty",
    ),
    case(
        &[("interface = \"in0\"", "interface = \"a-very-long-name\"")],
        "port[1].interface",
        "16 bytes",
    ),
    case(
        &[("interface = \"in0\"", "interface = \"in/0\"")],
        "port[1].interface",
        "not a valid interface name",
    ),
    case(
        &[("interface = \"in0\"", "interface = \"out0\"")],
        "port[1].interface",
        "already used by port[0]",
    ),
    case(
        &[(
            "[dataplane.affinity]",
            "[dataplane.afxdp]\nfill_ring_size = 1000\n[dataplane.affinity]",
        )],
        "dataplane.afxdp.fill_ring_size",
        "1000 is not a power of two",
    ),
    case(
        &[(
            "[dataplane.affinity]",
            "[dataplane.afxdp]\ntx_ring_size = 65536\n[dataplane.affinity]",
        )],
        "dataplane.afxdp.tx_ring_size",
        "out of range 64..=32768",
    ),
    case(
        &[(
            "[dataplane.affinity]",
            "[dataplane.neighbour_table]\ncapacity = 8\n[dataplane.affinity]",
        )],
        "dataplane.neighbour_table.capacity",
        "8 is out of range 16..=4194304",
    ),
    case(
        &[(
            "[dataplane.affinity]",
            "[dataplane.neighbour_table]\ngc_stale_ms = 10\n[dataplane.affinity]",
        )],
        "dataplane.neighbour_table.gc_stale_ms",
        "10 is out of range 1000..=86400000",
    ),
    case(
        &[(
            "[dataplane.affinity]",
            "[dataplane.neighbour_table]\nmax_probes = 0\n[dataplane.affinity]",
        )],
        "dataplane.neighbour_table.max_probes",
        "0 is out of range 1..=100",
    ),
    case(
        &[(
            "[dataplane.affinity]",
            "[dataplane.neighbour_table]\ncapacity = 1000\ngc_min_entries = 1025\n[dataplane.affinity]",
        )],
        "dataplane.neighbour_table.gc_min_entries",
        "1025 is more than the 1024 entries of the table",
    ),
    case(
        &[(
            "[dataplane.affinity]",
            "[dataplane.afxdp]\nframe_size = 3000\n[dataplane.affinity]",
        )],
        "dataplane.afxdp.frame_size",
        "3000 is not 2048 or 4096",
    ),
    case(
        &[
            ("driver = \"mem\"", "driver = \"afxdp\""),
            (
                "[dataplane.affinity]",
                "[dataplane.afxdp]\numem_frames = 4000\n[dataplane.affinity]",
            ),
        ],
        "dataplane.afxdp.umem_frames",
        "4000 frames cannot fill the fill and TX rings of 1 afxdp port(s) (1 × (2048 + 2048) = 4096)",
    ),
    case(
        &[
            ("driver = \"mem\"", "driver = \"afxdp\"\nmtu = 9000"),
            (
                "[dataplane.affinity]",
                "[dataplane.afxdp]\nmulti_buffer = \"off\"\n[dataplane.affinity]",
            ),
        ],
        "port[1].mtu",
        "9000 does not fit one 4096-byte AF_XDP frame (at most 3822",
    ),
    case(
        &[(
            "[dataplane.affinity]",
            "[dataplane.afpacket]\nrx_block_count = 8\n[dataplane.affinity]",
        )],
        "dataplane.afpacket.rx_block_count",
        "is not used with rx_ring = \"frames\"",
    ),
    case(
        &[(
            "[dataplane.affinity]",
            "[dataplane.afpacket]\nrx_ring = \"blocks\"\nrx_block_size = 5000\n[dataplane.affinity]",
        )],
        "dataplane.afpacket.rx_block_size",
        "5000 is not a multiple of 4096",
    ),
    case(
        &[(
            "[dataplane.affinity]",
            "[dataplane.afpacket]\nrx_frame_count = 10\n[dataplane.affinity]",
        )],
        "dataplane.afpacket.rx_frame_count",
        "10 is out of range 64..=262144",
    ),
    case(
        &[(
            "[dataplane.affinity]",
            "[dataplane.afxdp]\nbusy_poll = true\nbusy_poll_budget = 0\n[dataplane.affinity]",
        )],
        "dataplane.afxdp.busy_poll_budget",
        "0 is out of range 1..=1024",
    ),
    case(
        &[(
            "[dataplane.affinity]",
            "[dataplane.afxdp]\nmode = \"generic\"\nzero_copy = \"on\"\n[dataplane.affinity]",
        )],
        "dataplane.afxdp.zero_copy",
        "needs native XDP",
    ),
    case(
        &[(
            "interface = \"in0\"",
            "interface = \"in0\"\ndpdk_device = \"net_af_xdp\"",
        )],
        "port[1].dpdk_device",
        "only ports with driver \"dpdk\"",
    ),
    case(
        &[("mac = \"02:00:00:00:00:01\"", "mac = \"02:00:00:00:01\"")],
        "port[0].mac",
        "not a MAC address",
    ),
    case(
        &[("mac = \"02:00:00:00:00:01\"", "mac = \"03:00:00:00:00:01\"")],
        "port[0].mac",
        "not a unicast MAC",
    ),
    case(
        &[("mtu = 1500", "mtu = 67")],
        "port[0].mtu",
        "out of range 68..=9216",
    ),
    case(
        &[("mtu = 1500", "mtu = 1500\nmss_clamp = 87")],
        "port[0].mss_clamp",
        "out of range 88..=9176",
    ),
    case(
        &[("mtu = 1500", "mtu = 1500\nmss_clamp = 1461")],
        "port[0].mss_clamp",
        "above the port's mtu 1500 - 40 = 1460",
    ),
    case(
        &[("mtu = 1500", "mtu = 1500\nmss_clamp = \"auto\"")],
        "port[0].mss_clamp",
        "\"auto\" is neither a number of bytes nor \"pmtu\"",
    ),
    case(
        &[("role = \"inside\"", "role = \"both\"")],
        "port[1].role",
        "single port",
    ),
    case(
        &[("role = \"outside\"", "role = \"inside\"")],
        "port",
        "no port has role outside",
    ),
    case(
        &[(
            "[[route]]",
            "[[port]]\nname = \"dmz\"\ndriver = \"mem\"\ninterface = \"dmz0\"\nrole = \"outside\"\n\n[[route]]",
        )],
        "port[2].role",
        "a second outside port",
    ),
    case(
        &[("[\"192.0.2.1/24\"]", "[\"192.0.2.1\"]")],
        "port[0].node_addresses[0]",
        "with a prefix length",
    ),
    case(
        &[("[\"192.0.2.1/24\"]", "[\"192.0.2.1/33\"]")],
        "port[0].node_addresses[0]",
        "prefix length",
    ),
    case(
        &[("[\"192.0.2.1/24\"]", "[\"192.0.2.300/24\"]")],
        "port[0].node_addresses[0]",
        "not an IP address",
    ),
    case(
        &[("[\"192.0.2.1/24\"]", "[\"224.0.0.1/24\"]")],
        "port[0].node_addresses[0]",
        "not a unicast host address",
    ),
    case(
        &[("[\"192.0.2.1/24\"]", "[\"192.0.2.1/0\"]")],
        "port[0].node_addresses[0]",
        "/0",
    ),
    case(
        &[("\"10.1.0.2/24\"]", "\"192.0.2.1/24\"]")],
        "port[1].snat_addresses[1]",
        "already owned at port[0].node_addresses[0]",
    ),
    case(
        &[("\"10.1.0.2/24\"]", "\"10.1.0.1/24\"]")],
        "port[1].snat_addresses[1]",
        "already owned at port[1].node_addresses[0]",
    ),
    case(
        &[("[\"192.0.2.1/24\"]", "[\"192.0.2.1/24\", \"192.0.2.1/24\"]")],
        "port[0].node_addresses[1]",
        "already owned",
    ),
    case(
        &[("\"10.1.0.2/24\"]", "\"192.0.2.2/24\"]")],
        "port[1].snat_addresses[1]",
        "subnet 192.0.2.0/24 is already connected on port[0]",
    ),
    // --- routes
    case(
        &[("\"198.51.100.0/24\"", "\"198.51.100.1/24\"")],
        "route[0].destination",
        "host bits",
    ),
    case(
        &[("\"198.51.100.0/24\"", "\"198.51.100.0\"")],
        "route[0].destination",
        "prefix length",
    ),
    case(
        &[("\"10.3.0.0/16\"", "\"10.2.0.0/16\"")],
        "route[2].destination",
        "already routed by route[1]",
    ),
    case(
        &[("via = \"192.0.2.254\"", "via = \"192.0.9.254\"")],
        "route[0].via",
        "not inside any connected subnet",
    ),
    case(
        &[("via = \"192.0.2.254\"", "via = \"192.0.2.1\"")],
        "route[0].via",
        "own address",
    ),
    case(
        &[("via = \"192.0.2.254\"", "via = \"gateway\"")],
        "route[0].via",
        "not an IP address",
    ),
    case(
        &[(
            "via = \"10.1.0.254\"\nport = \"inside\"",
            "via = \"10.1.0.254\"\nport = \"outside\"",
        )],
        "route[1].via",
        "not inside a connected subnet of port[0]",
    ),
    case(
        &[(
            "via = \"10.1.0.254\"\nport = \"inside\"",
            "via = \"10.1.0.254\"\nport = \"elsewhere\"",
        )],
        "route[1].port",
        "no port is named \"elsewhere\"",
    ),
    case(
        &[("\"10.3.0.0/16\"\nport = \"inside\"", "\"10.3.0.0/16\"")],
        "route[2]",
        "needs port",
    ),
    // --- neighbours
    case(
        &[(
            "[[service]]",
            "[[neighbour]]\naddress = \"10.1.0.10\"\nmac = \"02:00:00:00:01:11\"\n\n[[service]]",
        )],
        "neighbour[1].address",
        "already listed at neighbour[0]",
    ),
    case(
        &[(
            "address = \"10.1.0.10\"\nmac",
            "address = \"10.9.0.10\"\nmac",
        )],
        "neighbour[0].address",
        "not inside any connected subnet",
    ),
    case(
        &[(
            "address = \"10.1.0.10\"\nmac",
            "address = \"10.1.0.2\"\nmac",
        )],
        "neighbour[0].address",
        "own address",
    ),
    case(
        &[("mac = \"02:00:00:00:01:10\"", "mac = \"ff:ff:ff:ff:ff:ff\"")],
        "neighbour[0].mac",
        "not a unicast MAC",
    ),
    // --- services
    case(
        &[("name = \"dns\"", "name = \"\"")],
        "service[1].name",
        "is empty",
    ),
    case(
        &[("name = \"dns\"", "name = \"web\"")],
        "service[1].name",
        "already the name of service[0]",
    ),
    case(
        &[("vip = \"203.0.113.10\"\nport = 53", "port = 53")],
        "service[1]",
        "at least one of vip, node_port, external_ips",
    ),
    case(
        &[("port = 53\n", "port = 0\n")],
        "service[1].port",
        "out of range 1..=65535",
    ),
    case(
        &[("port = 53\n", "port = 65536\n")],
        "service[1].port",
        "out of range 1..=65535",
    ),
    case(
        &[("node_port = 30080", "node_port = 0")],
        "service[0].node_port",
        "out of range",
    ),
    case(
        &[("node_port = 30080", "node_port = 70000")],
        "service[0].node_port",
        "out of range",
    ),
    case(
        &[
            (
                "node_addresses = [\"192.0.2.1/24\"]",
                "snat_addresses = [\"192.0.2.1/24\"]",
            ),
            ("node_addresses = [\"10.1.0.1/24\"]\n", ""),
        ],
        "service[0].node_port",
        "no port has node_addresses",
    ),
    case(
        &[("\"20000-29999\"", "\"20000-39999\"")],
        "service[0].node_port",
        "30080 is inside the SNAT port range 20000-39999, and 10.1.0.1 is both",
    ),
    case(
        &[(
            "protocol = \"udp\"\nvip = \"203.0.113.10\"\nport = 53",
            "protocol = \"tcp\"\nvip = \"203.0.113.10\"\nport = 80",
        )],
        "service[1].vip",
        "tcp 203.0.113.10:80 is already served by service[0] (\"web\") at service[0].vip",
    ),
    case(
        &[("[\"203.0.113.20\"]", "[\"203.0.113.10\"]")],
        "service[0].external_ips[0]",
        "already served by this service",
    ),
    case(
        &[(
            "protocol = \"udp\"\nvip = \"203.0.113.10\"\nport = 53",
            "protocol = \"tcp\"\nvip = \"203.0.113.10\"\nport = 53\nnode_port = 30080",
        )],
        "service[1].node_port",
        "already served by service[0]",
    ),
    case(
        &[(
            "vip = \"203.0.113.10\"\nport = 80",
            "vip = \"192.0.2.1\"\nport = 80",
        )],
        "service[0].vip",
        "gateway's own address (port[0].node_addresses[0])",
    ),
    case(
        &[("[\"203.0.113.20\"]", "[\"10.1.0.2\"]")],
        "service[0].external_ips[0]",
        "gateway's own address (port[1].snat_addresses[1])",
    ),
    case(
        &[(
            "vip = \"203.0.113.10\"\nport = 80",
            "vip = \"203.0.113\"\nport = 80",
        )],
        "service[0].vip",
        "not an IP address",
    ),
    case(
        &[("snat_addresses = [\"10.1.0.1/24\", \"10.1.0.2/24\"]\n", "")],
        "service[0].snat",
        "needs a SNAT address",
    ),
    case(
        &[(
            "session_affinity = \"client_ip\"",
            "session_affinity = \"none\"",
        )],
        "service[0].affinity_timeout_s",
        "only applies with session_affinity",
    ),
    case(
        &[("affinity_timeout_s = 600", "affinity_timeout_s = 0")],
        "service[0].affinity_timeout_s",
        "out of range 1..=86400",
    ),
    case(
        &[("affinity_timeout_s = 600", "affinity_timeout_s = 86401")],
        "service[0].affinity_timeout_s",
        "out of range 1..=86400",
    ),
    case(
        &[("snat = false", "snat = false\ntcp_backend_gone = \"drop\"")],
        "service[1].tcp_backend_gone",
        "only applies to tcp",
    ),
    case(
        &[(
            "[dataplane]\n",
            "[dataplane]\nnew_flows_per_source_per_s = 1000001\n",
        )],
        "dataplane.new_flows_per_source_per_s",
        "out of range 0..=1000000",
    ),
    case(
        &[("[dataplane]\n", "[dataplane]\nsource_prefix_len_v6 = 0\n")],
        "dataplane.source_prefix_len_v6",
        "out of range 1..=128",
    ),
    case(
        &[("snat = false", "snat = false\nsyn_proxy = \"on\"")],
        "service[1].syn_proxy",
        "only applies to tcp",
    ),
    case(
        &[("snat = false", "snat = false\ntcp_pickup = true")],
        "service[1].tcp_pickup",
        "only applies to tcp",
    ),
    case(
        &[(
            "tcp_backend_gone = \"reset\"",
            "tcp_backend_gone = \"reset\"\ntcp_pickup = true",
        )],
        "service[0].tcp_pickup",
        "needs snat = false",
    ),
    case(
        &[(
            "tcp_backend_gone = \"reset\"",
            "tcp_backend_gone = \"reset\"\nsnat = false\ntcp_pickup = true\nsyn_proxy = \"on\"",
        )],
        "service[0].tcp_pickup",
        "cannot be combined with syn_proxy",
    ),
    case(
        &[(
            "tcp_backend_gone = \"reset\"",
            "tcp_backend_gone = \"reset\"\nsyn_proxy = \"on\"\nsyn_proxy_half_open_threshold = 10",
        )],
        "service[0].syn_proxy_half_open_threshold",
        "only applies with syn_proxy = \"auto\"",
    ),
    case(
        &[(
            "tcp_backend_gone = \"reset\"",
            "tcp_backend_gone = \"reset\"\nsyn_proxy = \"auto\"\nsyn_proxy_half_open_threshold = 0",
        )],
        "service[0].syn_proxy_half_open_threshold",
        "out of range 1..=16777216",
    ),
    case(
        &[(
            "identity = \"gw-1\"",
            "identity = \"gw-1\"\nsyn_proxy_half_open_threshold = 16777217",
        )],
        "kubernetes.syn_proxy_half_open_threshold",
        "out of range 1..=16777216",
    ),
    case(
        &[("port = 8080, weight = 3", "port = 0, weight = 3")],
        "service[0].backends[0].port",
        "out of range 1..=65535",
    ),
    case(
        &[("port = 8080, weight = 3", "port = 8080, weight = 65536")],
        "service[0].backends[0].weight",
        "out of range 0..=65535",
    ),
    case(
        &[("\"10.1.0.11\", port = 8080", "\"10.1.0.10\", port = 8080")],
        "service[0].backends[1]",
        "10.1.0.10:8080 is already listed at service[0].backends[0]",
    ),
    case(
        &[("\"10.1.0.11\", port = 8080", "\"10.1.0\", port = 8080")],
        "service[0].backends[1].address",
        "not an IP address",
    ),
    case(
        &[("\"10.1.0.11\", port = 8080", "\"0.0.0.0\", port = 8080")],
        "service[0].backends[1].address",
        "not a unicast host address",
    ),
    // --- kubernetes
    case(
        &[(
            "kubeconfig = \"/etc/portico/kubeconfig\"",
            "kubeconfig = \"\"",
        )],
        "kubernetes.kubeconfig",
        "is empty",
    ),
    case(
        &[(
            "serve_unclassed",
            "load_balancer_class = \"my class\"\nserve_unclassed",
        )],
        "kubernetes.load_balancer_class",
        "not a qualified name",
    ),
    case(
        &[(
            "serve_unclassed",
            "load_balancer_class = \"-x.io/lb\"\nserve_unclassed",
        )],
        "kubernetes.load_balancer_class",
        "not a qualified name",
    ),
    case(
        &[("debounce_ms = 30", "debounce_ms = 10001")],
        "kubernetes.debounce_ms",
        "out of range 0..=10000",
    ),
    case(
        &[("debounce_ms = 30", "debounce_ms = 30\ndebounce_max_ms = 29")],
        "kubernetes.debounce_max_ms",
        "out of range 30..=60000",
    ),
    case(
        &[(
            "debounce_ms = 30",
            "debounce_ms = 30\nstatus_writes_per_s = 0",
        )],
        "kubernetes.status_writes_per_s",
        "out of range 1..=10000",
    ),
    case(
        &[(
            "debounce_ms = 30",
            "debounce_ms = 30\nstatus_write_burst = 10001",
        )],
        "kubernetes.status_write_burst",
        "out of range 1..=10000",
    ),
    case(
        &[(
            "debounce_ms = 30",
            "debounce_ms = 30\nstatus_writes_in_flight = 257",
        )],
        "kubernetes.status_writes_in_flight",
        "out of range 1..=256",
    ),
    case(
        &[(
            "identity = \"gw-1\"",
            "identity = \"gw-1\"\nlease_name = \"Portico\"",
        )],
        "kubernetes.lease_name",
        "not a Kubernetes object name",
    ),
    case(
        &[("\"portico-system\"", "\"portico.system\"")],
        "kubernetes.lease_namespace",
        "not a Kubernetes namespace name",
    ),
    case(
        &[(
            "identity = \"gw-1\"",
            "identity = \"gw-1\"\nretry_period_ms = 0",
        )],
        "kubernetes.retry_period_ms",
        "at least 1 ms",
    ),
    case(
        &[(
            "identity = \"gw-1\"",
            "identity = \"gw-1\"\nrenew_deadline_ms = 2000",
        )],
        "kubernetes.renew_deadline_ms",
        "more than retry_period_ms (2000 ms)",
    ),
    case(
        &[(
            "identity = \"gw-1\"",
            "identity = \"gw-1\"\nlease_duration_ms = 10000",
        )],
        "kubernetes.lease_duration_ms",
        "more than renew_deadline_ms (10000 ms)",
    ),
    case(
        &[("identity = \"gw-1\"", "identity = \" \"")],
        "kubernetes.identity",
        "is empty",
    ),
    // --- address pools
    case(
        &[("name = \"public\"", "name = \"Public\"")],
        "address_pool[0].name",
        "not a pool name",
    ),
    case(
        &[("name = \"reserved\"", "name = \"public\"")],
        "address_pool[1].name",
        "already the name of address_pool[0]",
    ),
    case(
        &[("[\"198.51.100.0/28\"]", "[]")],
        "address_pool[1].addresses",
        "is empty",
    ),
    case(
        &[("\"203.0.113.64/27\"", "\"203.0.113.65/27\"")],
        "address_pool[0].addresses[0]",
        "host bits set; did you mean 203.0.113.64/27",
    ),
    case(
        &[("203.0.113.200-203.0.113.210", "203.0.113.210-203.0.113.200")],
        "address_pool[0].addresses[1]",
        "is empty (first > last)",
    ),
    case(
        &[("\"198.51.100.0/28\"", "\"198.51.100.0\"")],
        "address_pool[1].addresses[0]",
        "neither a CIDR",
    ),
    case(
        &[("203.0.113.200-203.0.113.210", "203.0.113.90-203.0.113.210")],
        "address_pool[0].addresses[1]",
        "overlaps 203.0.113.64/27 at address_pool[0].addresses[0]",
    ),
    case(
        &[("\"198.51.100.0/28\"", "\"203.0.113.205/32\"")],
        "address_pool[1].addresses[0]",
        "overlaps 203.0.113.200-203.0.113.210 at address_pool[0].addresses[1]",
    ),
    case(
        &[("\"198.51.100.0/28\"", "\"192.0.2.0/28\"")],
        "address_pool[1].addresses[0]",
        "contains 192.0.2.1, the gateway's own address (port[0].node_addresses[0])",
    ),
    case(
        &[("\"198.51.100.0/28\"", "\"10.1.0.2-10.1.0.9\"")],
        "address_pool[1].addresses[0]",
        "contains 10.1.0.2, the gateway's own address (port[1].snat_addresses[1])",
    ),
    case(
        &[("\"198.51.100.0/28\"", "\"203.0.113.0/28\"")],
        "address_pool[1].addresses[0]",
        "contains 203.0.113.10, the vip of service[0] (\"web\")",
    ),
    case(
        &[("\"198.51.100.0/28\"", "\"203.0.113.20/32\"")],
        "address_pool[1].addresses[0]",
        "contains 203.0.113.20, the external_ip of service[0]",
    ),
    case(
        &[("\"198.51.100.0/28\"", "\"127.0.0.0/30\"")],
        "address_pool[1].addresses[0]",
        "overlaps 127.0.0.0/8 (loopback)",
    ),
    case(
        &[("\"198.51.100.0/28\"", "\"239.1.0.0/16\"")],
        "address_pool[1].addresses[0]",
        "multicast",
    ),
    case(
        &[(
            "[\"198.51.100.0/28\"]\nauto_assign = false",
            "[\"198.51.100.0/32\", \"198.51.100.255-198.51.101.0\"]\navoid_buggy_ips = true",
        )],
        "address_pool[1].addresses",
        "no address left to hand out",
    ),
];

#[test]
fn base_is_valid_and_resolved() {
    let plan = parse(BASE).unwrap_or_else(|e| panic!("{e}"));
    let d = &plan.dataplane;
    assert_eq!((d.workers, d.batch_size, d.maglev_table_size), (2, 32, 251));
    assert_eq!(d.conntrack.capacity, 1024);
    assert_eq!(
        d.conntrack.syn_proxy_flows, 64,
        "one per 16 flows by default"
    );
    let set = parse(&BASE.replace(
        "early_drop_scan = 8",
        "early_drop_scan = 8\nsyn_proxy_flows = 1024",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(set.dataplane.conntrack.syn_proxy_flows, 1024, "as set");
    // `portico check` shows it.
    let printed = set.to_string();
    assert!(
        printed.contains("conntrack: 1024 flows per worker (1024 SYN-proxied at most)"),
        "{printed}"
    );
    assert_eq!(d.conntrack.timeouts.udp_ms, 31_000);
    // Unset timeouts keep kube-proxy's defaults.
    assert_eq!(d.conntrack.timeouts.tcp_established_ms, 86_400_000);
    assert_eq!(d.conntrack.timeouts.tcp_close_wait_ms, 3_600_000);
    assert_eq!(d.snat.port_range, 20000..=29999);
    assert_eq!(d.snat.quarantine_ms, 60_000);
    assert_eq!(
        d.snat.addresses,
        vec![Ipv4Addr::new(10, 1, 0, 1), Ipv4Addr::new(10, 1, 0, 2)]
    );
    assert_eq!(plan.vip_port, 0);
    assert_eq!(plan.ports[0].mtu, Some(1500));
    assert_eq!(plan.ports[0].mac.map(|m| m.0), Some([2, 0, 0, 0, 0, 1]));

    // Connected subnets first (once per subnet), then static routes with
    // their resolved ports.
    let routes: Vec<String> = plan
        .routes
        .iter()
        .map(|r| format!("{} {:?} {}", r.destination, r.via, r.port))
        .collect();
    assert_eq!(
        routes,
        [
            "192.0.2.0/24 None 0",
            "10.1.0.0/24 None 1",
            "198.51.100.0/24 Some(192.0.2.254) 0",
            "10.2.0.0/16 Some(10.1.0.254) 1",
            "10.3.0.0/16 None 1",
        ]
    );

    let web = plan.service("web").unwrap();
    assert_eq!(web.affinity_timeout_ms, Some(600_000));
    let listeners: Vec<String> = web
        .listeners
        .iter()
        .map(|l| format!("{}:{} {}", l.address, l.port, l.kind))
        .collect();
    assert_eq!(
        listeners,
        [
            "203.0.113.10:80 vip",
            "203.0.113.20:80 external_ip",
            "192.0.2.1:30080 node_port",
            "10.1.0.1:30080 node_port",
        ]
    );
    let dns = plan.service("dns").unwrap();
    assert!(!dns.snat);
    assert_eq!(dns.listeners[0].kind, ListenerKind::Vip);
    assert_eq!(dns.affinity_timeout_ms, None);

    let k = plan.kubernetes.as_ref().unwrap();
    assert_eq!(
        k.kubeconfig.as_deref(),
        Some(std::path::Path::new("/etc/portico/kubeconfig"))
    );
    assert_eq!(k.load_balancer_class, "portico.dev/lb");
    assert!(k.serve_unclassed);
    // The longest delay defaults to ten quiet times.
    assert_eq!((k.debounce_ms, k.debounce_max_ms), (30, 300));
    // The leader's write-back pacing defaults.
    assert_eq!(
        (
            k.status_writes.per_s,
            k.status_writes.burst,
            k.status_writes.in_flight
        ),
        (200, 50, 8)
    );
    let le = &k.leader_election;
    assert_eq!(
        (le.lease_name.as_str(), le.lease_namespace.as_str()),
        ("portico", "portico-system")
    );
    assert_eq!(
        (
            le.lease_duration_ms,
            le.renew_deadline_ms,
            le.retry_period_ms
        ),
        (15_000, 10_000, 2_000)
    );
    assert_eq!(le.identity.as_deref(), Some("gw-1"));

    let pools: Vec<String> = plan
        .address_pools
        .iter()
        .map(|p| {
            let ranges: Vec<String> = p.ranges.iter().map(|r| r.to_string()).collect();
            format!(
                "{} [{}] {} auto={} avoid={}",
                p.name,
                ranges.join(" "),
                p.size(),
                p.auto_assign,
                p.avoid_buggy_ips
            )
        })
        .collect();
    assert_eq!(
        pools,
        [
            "public [203.0.113.64-203.0.113.95 203.0.113.200-203.0.113.210] 43 auto=true avoid=true",
            "reserved [198.51.100.0-198.51.100.15] 16 auto=false avoid=false",
        ]
    );
    assert!(plan.address_pools[1].offers(Ipv4Addr::new(198, 51, 100, 0)));
    let printed = plan.to_string();
    assert!(
        printed.contains("class portico.dev/lb and unclassed Services"),
        "{printed}"
    );
    assert!(
        printed.contains("reserved: 198.51.100.0-198.51.100.15 (16 addresses)"),
        "{printed}"
    );
}

#[test]
fn kubernetes_defaults_and_buggy_ips() {
    let plan = parse(&edit(&[
        (
            "kubeconfig = \"/etc/portico/kubeconfig\"\nserve_unclassed = true\ndebounce_ms = 30\nlease_namespace = \"portico-system\"\nidentity = \"gw-1\"\n",
            "",
        ),
        ("\"198.51.100.0/28\"]", "\"198.51.100.0/24\"]\navoid_buggy_ips = true"),
    ]))
    .unwrap_or_else(|e| panic!("{e}"));
    let k = plan.kubernetes.unwrap();
    assert_eq!(k.kubeconfig, None);
    assert!(!k.serve_unclassed);
    assert_eq!((k.debounce_ms, k.debounce_max_ms), (20, 200));
    assert_eq!(k.leader_election.lease_namespace, "default");
    assert_eq!(k.leader_election.identity, None);
    let reserved = &plan.address_pools[1];
    assert_eq!(reserved.size(), 254);
    assert!(!reserved.offers(Ipv4Addr::new(198, 51, 100, 0)));
    assert!(!reserved.offers(Ipv4Addr::new(198, 51, 100, 255)));
    assert!(reserved.offers(Ipv4Addr::new(198, 51, 100, 1)));
}

#[test]
fn without_kubernetes_there_is_no_kubernetes_plan() {
    let plan = parse(
        "[[port]]\nname = \"lan\"\ndriver = \"afpacket\"\ninterface = \"eth0\"\nrole = \"both\"\n",
    )
    .unwrap();
    assert_eq!(plan.kubernetes, None);
    assert!(plan.address_pools.is_empty());
}

#[test]
fn address_pools_is_accepted_as_a_spelling() {
    let plan = parse(&edit(&[(
        "[[address_pool]]\nname = \"reserved\"",
        "[[address_pools]]\nname = \"reserved\"",
    )]));
    // Both spellings in one file are one key given twice.
    assert!(plan.is_err());
    let text = BASE.replace("[[address_pool]]", "[[address_pools]]");
    let plan = parse(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plan.address_pools.len(), 2);
}

#[test]
fn name_rules_follow_kubernetes() {
    use nic_config::validate::{is_dns_label, is_dns_subdomain, is_qualified_name};
    for ok in ["a", "portico", "a-1", "0abc"] {
        assert!(is_dns_label(ok), "{ok}");
    }
    for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
        assert!(!is_dns_label(bad), "{bad}");
    }
    assert!(is_dns_subdomain("a.b-c.d"));
    assert!(!is_dns_subdomain("a..b"));
    for ok in ["portico.dev/lb", "lb", "example.com/My_Class.v1", "x/Y"] {
        assert!(is_qualified_name(ok), "{ok}");
    }
    for bad in [
        "",
        "/lb",
        "a/",
        "a/b/c",
        "Ex.com/lb",
        "a/-b",
        "a b",
        &"x".repeat(64),
    ] {
        assert!(!is_qualified_name(bad), "{bad}");
    }
}

#[test]
fn afpacket_ring_problems_are_all_named_at_once() {
    let text = edit(&[(
        "[dataplane.affinity]",
        "[dataplane.afpacket]\nrx_frame_count = 4096\nrx_block_size = 1000\n\
         rx_block_timeout_ms = 0\ntx_frame_count = 1\n[dataplane.affinity]",
    )]);
    let found = problems(&text);
    let lines: Vec<String> = found
        .iter()
        .map(|p| format!("{}: {}", p.path, p.reason))
        .collect();
    assert_eq!(
        lines,
        [
            "dataplane.afpacket.rx_block_size: is not used with rx_ring = \"frames\"",
            "dataplane.afpacket.rx_block_timeout_ms: is not used with rx_ring = \"frames\"",
            "dataplane.afpacket.tx_frame_count: 1 is out of range 64..=262144",
        ]
    );
    let text = edit(&[(
        "[dataplane.affinity]",
        "[dataplane.afpacket]\nrx_ring = \"blocks\"\nrx_frame_count = 4096\n\
         rx_block_size = 1000\nrx_block_count = 0\nrx_block_timeout_ms = 2000\n\
         [dataplane.affinity]",
    )]);
    let paths: Vec<String> = problems(&text).into_iter().map(|p| p.path).collect();
    assert_eq!(
        paths,
        [
            "dataplane.afpacket.rx_frame_count",
            "dataplane.afpacket.rx_block_size",
            "dataplane.afpacket.rx_block_count",
            "dataplane.afpacket.rx_block_timeout_ms",
        ]
    );
}

#[test]
fn afpacket_blocks_mode_takes_its_sizes() {
    let plan = parse(&edit(&[(
        "[dataplane.affinity]",
        "[dataplane.afpacket]\nrx_ring = \"blocks\"\nrx_block_size = 65536\n\
         rx_block_count = 64\nrx_block_timeout_ms = 2\ntx_frame_count = 512\n\
         [dataplane.affinity]",
    )]))
    .unwrap_or_else(|e| panic!("{e}"));
    let a = plan.dataplane.afpacket;
    assert_eq!(a.rx_ring, nic_config::AfpacketRxRing::Blocks);
    assert_eq!(
        (
            a.rx_block_size,
            a.rx_block_count,
            a.rx_block_timeout_ms,
            a.tx_frame_count
        ),
        (65536, 64, 2, 512)
    );
}

#[test]
fn afpacket_gso_lowers_the_slot_defaults_and_names_a_bad_value() {
    let plan = parse(&edit(&[(
        "[dataplane.affinity]",
        "[dataplane.afpacket]\ngso = true\n[dataplane.affinity]",
    )]))
    .unwrap_or_else(|e| panic!("{e}"));
    let a = plan.dataplane.afpacket;
    assert!(a.gso);
    assert_eq!((a.rx_frame_count, a.tx_frame_count), (256, 256));
    let plan = parse(&edit(&[(
        "[dataplane.affinity]",
        "[dataplane.afpacket]\ngso = true\nrx_frame_count = 1024\n[dataplane.affinity]",
    )]))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plan.dataplane.afpacket.rx_frame_count, 1024);
    let err = parse(&edit(&[(
        "[dataplane.affinity]",
        "[dataplane.afpacket]\ngso = \"yes\"\n[dataplane.affinity]",
    )]))
    .expect_err("a string is not a bool");
    let text = err.to_string();
    assert!(text.contains("gso"), "{text}");
}

#[test]
fn afpacket_tx_path_takes_its_three_names_and_refuses_others() {
    for (name, want) in [
        ("auto", nic_config::AfpacketTxPath::Auto),
        ("ring", nic_config::AfpacketTxPath::Ring),
        ("sendmsg", nic_config::AfpacketTxPath::Sendmsg),
    ] {
        let section = format!("[dataplane.afpacket]\ntx_path = \"{name}\"\n[dataplane.affinity]");
        let plan = parse(&edit(&[("[dataplane.affinity]", section.as_str())]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.dataplane.afpacket.tx_path, want);
    }
    let err = parse(&edit(&[(
        "[dataplane.affinity]",
        "[dataplane.afpacket]\ntx_path = \"mmap\"\n[dataplane.affinity]",
    )]))
    .expect_err("mmap is not a tx path");
    let text = err.to_string();
    assert!(text.contains("tx_path") || text.contains("mmap"), "{text}");
}

#[test]
fn afpacket_rx_path_takes_its_three_names_and_refuses_others() {
    for (name, want) in [
        ("auto", nic_config::AfpacketRxPath::Auto),
        ("ring", nic_config::AfpacketRxPath::Ring),
        ("recvmsg", nic_config::AfpacketRxPath::Recvmsg),
    ] {
        let section = format!("[dataplane.afpacket]\nrx_path = \"{name}\"\n[dataplane.affinity]");
        let plan = parse(&edit(&[("[dataplane.affinity]", section.as_str())]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.dataplane.afpacket.rx_path, want);
    }
    let err = parse(&edit(&[(
        "[dataplane.affinity]",
        "[dataplane.afpacket]\nrx_path = \"sendmsg\"\n[dataplane.affinity]",
    )]))
    .expect_err("sendmsg is not an rx path");
    let text = err.to_string();
    assert!(
        text.contains("rx_path") || text.contains("sendmsg"),
        "{text}"
    );
}

#[test]
fn defaults_fill_everything_left_out() {
    let plan = parse(
        "[[port]]\nname = \"lan\"\ndriver = \"afpacket\"\ninterface = \"eth0\"\nrole = \"both\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let d = &plan.dataplane;
    assert_eq!(
        d.afpacket,
        nic_config::AfpacketPlan {
            rx_ring: nic_config::AfpacketRxRing::Frames,
            rx_frame_count: 4096,
            rx_block_size: 262_144,
            rx_block_count: 16,
            rx_block_timeout_ms: 1,
            tx_frame_count: 1024,
            gso: false,
            tx_path: nic_config::AfpacketTxPath::Auto,
            rx_path: nic_config::AfpacketRxPath::Auto,
        }
    );
    assert!(!d.afxdp.busy_poll);
    assert_eq!((d.afxdp.busy_poll_us, d.afxdp.busy_poll_budget), (20, 64));
    assert_eq!((d.workers, d.cores.len(), d.batch_size), (1, 0, 64));
    assert_eq!(d.idle, nic_config::IdlePolicy::Adaptive);
    assert_eq!(d.idle_spin_polls, 64);
    assert_eq!(d.maglev_table_size, 16381);
    assert_eq!(
        (
            d.conntrack.capacity,
            d.conntrack.expiry_scan_per_poll,
            d.conntrack.early_drop_scan,
            d.conntrack.syn_proxy_flows
        ),
        (262_144, 64, 64, 16_384)
    );
    // Linux's conntrack timeouts with kube-proxy's overrides.
    let t = d.conntrack.timeouts;
    assert_eq!(
        t.named().map(|(_, ms)| ms / 1000),
        [120, 60, 86_400, 120, 3_600, 30, 120, 10, 30, 120, 30]
    );
    assert_eq!(d.snat.port_range, 1024..=65535);
    assert_eq!(d.snat.quarantine_ms, 60_000);
    assert!(d.snat.addresses.is_empty());
    assert_eq!(d.affinity_capacity, 65_536);
    // Linux's neighbour defaults.
    let n = d.neighbour_table;
    assert_eq!(
        (n.capacity, n.reachable_ms, n.retrans_ms, n.max_probes),
        (16_384, 30_000, 1_000, 3)
    );
    assert_eq!(
        (n.failed_hold_ms, n.gc_stale_ms, n.gc_min_entries),
        (5_000, 60_000, 4_096)
    );
    assert_eq!((plan.ports[0].mac, plan.ports[0].mtu), (None, None));
    assert!(plan.routes.is_empty() && plan.services.is_empty());
}

#[test]
fn huge_maglev_size_is_rejected_quickly() {
    let got = problems(&edit(&[(
        "maglev_table_size = 251",
        "maglev_table_size = 9223372036854775783",
    )]));
    assert_eq!(got.len(), 1);
    assert!(got[0].reason.contains("exceeds the maximum"), "{got:?}");
}

#[test]
fn client_ip_affinity_defaults_to_kubernetes_timeout() {
    let plan = parse(&edit(&[("affinity_timeout_s = 600\n", "")])).unwrap();
    assert_eq!(plan.services[0].affinity_timeout_ms, Some(10_800_000));
}

#[test]
fn syn_proxy_is_off_by_default_and_auto_has_a_threshold() {
    let plan = parse(&edit(&[])).unwrap();
    assert_eq!(plan.services[0].syn_proxy, nic_config::SynProxyPlan::Off);
    let plan = parse(&edit(&[(
        "tcp_backend_gone = \"reset\"",
        "tcp_backend_gone = \"reset\"\nsyn_proxy = \"auto\"",
    )]))
    .unwrap();
    assert_eq!(
        plan.services[0].syn_proxy,
        nic_config::SynProxyPlan::Auto {
            half_open_threshold: 1000
        }
    );
    let plan = parse(&edit(&[(
        "tcp_backend_gone = \"reset\"",
        "tcp_backend_gone = \"reset\"\nsyn_proxy = \"on\"",
    )]))
    .unwrap();
    assert_eq!(plan.services[0].syn_proxy, nic_config::SynProxyPlan::On);
}

#[test]
fn the_kubernetes_syn_proxy_default_is_off_and_settable() {
    let k = parse(&edit(&[])).unwrap().kubernetes.unwrap();
    assert_eq!(k.syn_proxy, nic_config::SynProxyPlan::Off);
    assert_eq!(k.syn_proxy_half_open_threshold, 1000);
    let k = parse(&edit(&[(
        "identity = \"gw-1\"",
        "identity = \"gw-1\"\nsyn_proxy = \"auto\"\nsyn_proxy_half_open_threshold = 50",
    )]))
    .unwrap()
    .kubernetes
    .unwrap();
    assert_eq!(
        k.syn_proxy,
        nic_config::SynProxyPlan::Auto {
            half_open_threshold: 50
        }
    );
    assert_eq!(k.syn_proxy_half_open_threshold, 50);
}

#[test]
fn mss_clamp_is_a_number_or_pmtu_per_port() {
    let plan = parse(&edit(&[])).unwrap();
    assert!(plan.ports.iter().all(|p| p.mss_clamp.is_none()));
    let plan = parse(&edit(&[("mtu = 1500", "mtu = 1500\nmss_clamp = 1400")])).unwrap();
    assert_eq!(
        plan.ports[0].mss_clamp,
        Some(nic_config::MssClampPlan::Bytes(1400))
    );
    let plan = parse(&edit(&[("mtu = 1500", "mtu = 1500\nmss_clamp = \"pmtu\"")])).unwrap();
    let clamp = plan.ports[0].mss_clamp.expect("clamped");
    assert_eq!(clamp, nic_config::MssClampPlan::Pmtu);
    assert_eq!(clamp.bytes(1500), 1460);
    assert!(plan.to_string().contains("MSS clamped to pmtu"), "{plan}");
    // Every problem at once: both ports' clamps.
    let text = edit(&[
        ("mtu = 1500", "mtu = 1500\nmss_clamp = 9999"),
        (
            "interface = \"in0\"",
            "interface = \"in0\"\nmss_clamp = \"max\"",
        ),
    ]);
    let got: Vec<String> = problems(&text).into_iter().map(|p| p.path).collect();
    assert_eq!(got, ["port[0].mss_clamp", "port[1].mss_clamp"]);
}

#[test]
fn cores_imply_workers() {
    let plan = parse(&edit(&[("workers = 2", "cores = [3, 1]")])).unwrap();
    assert_eq!(plan.dataplane.workers, 2);
    assert_eq!(plan.dataplane.cores, vec![3, 1]);
}

#[test]
fn each_rule_alone_yields_exactly_its_problem() {
    let failures = common::failing_cases(BASE, CASES);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn several_problems_are_all_reported_in_file_order() {
    let text = edit(&[
        ("workers = 2", "workers = 0"),
        ("mtu = 1500", "mtu = 20"),
        ("via = \"192.0.2.254\"", "via = \"192.0.9.254\""),
        ("port = 53\n", "port = 0\n"),
        ("role = \"inside\"", "role = \"outside\""),
    ]);
    let paths: Vec<String> = problems(&text).into_iter().map(|p| p.path).collect();
    assert_eq!(
        paths,
        [
            "dataplane.workers",
            "port[0].mtu",
            "port[1].role",
            "port",
            "route[0].via",
            "service[1].port",
        ]
    );
    // Display: one `path: reason` line per problem.
    let printed = parse(&text).unwrap_err().to_string();
    assert_eq!(printed.lines().count(), 6);
    assert!(printed.lines().all(|l| l.contains(": ")));
    assert!(printed.starts_with("dataplane.workers: 0 is out of range 1..=64\n"));
}

#[test]
fn a_gateway_needs_an_inside_port() {
    let got = problems(
        "[[port]]\nname = \"out\"\ndriver = \"afpacket\"\ninterface = \"eth0\"\nrole = \"outside\"\n",
    );
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].path, "port");
    assert!(got[0].reason.contains("no port has role inside"), "{got:?}");
}

#[test]
fn no_ports_is_a_problem() {
    let got = problems("[dataplane]\nworkers = 1\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].path, "port");
}

#[test]
fn unknown_fields_are_rejected_by_name() {
    for (from, to, key_path, field) in [
        (
            "[dataplane]",
            "[dataplane]\nthreads = 4",
            "dataplane.threads",
            "threads",
        ),
        (
            "role = \"inside\"",
            "role = \"inside\"\nvlan = 3",
            "port[1].vlan",
            "vlan",
        ),
        (
            "udp_s = 31",
            "udp_s = 31\nsctp_s = 3",
            "dataplane.conntrack.timeouts.sctp_s",
            "sctp_s",
        ),
        (
            "port = 8080, weight = 3",
            "port = 8080, wieght = 3",
            "service[0].backends[0].wieght",
            "wieght",
        ),
        ("\n[dataplane]", "\n[extra]\n[dataplane]", "extra", "extra"),
        (
            "debounce_ms = 30",
            "debounce_ms = 30\nclass = \"x\"",
            "kubernetes.class",
            "class",
        ),
        (
            "auto_assign = false",
            "auto_assign = false\nshared = true",
            "address_pool[1].shared",
            "shared",
        ),
    ] {
        let text = edit(&[(from, to)]);
        let at = text
            .find(&format!("{field} ="))
            .or_else(|| text.find(&format!("[{field}]")))
            .unwrap();
        let line = text[..at].matches('\n').count() + 1;
        match parse(&text) {
            Err(ConfigError::Syntax {
                line: l,
                key_path: k,
                message,
                ..
            }) => {
                assert_eq!(k, key_path);
                assert!(
                    message.contains(&format!("unknown field `{field}`")),
                    "{message}"
                );
                assert_eq!(l, line, "{key_path}");
            }
            other => panic!("{key_path}: expected an unknown-field error, got {other:?}"),
        }
    }
}

#[test]
fn shape_errors_carry_position_and_path() {
    let err = parse(&edit(&[("role = \"inside\"", "role = \"middle\"")])).unwrap_err();
    let ConfigError::Syntax {
        line,
        column,
        key_path,
        message,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!((*line, *column), (35, 8));
    assert_eq!(key_path, "port[1].role");
    assert!(message.contains("unknown variant `middle`"));
    assert!(
        err.to_string()
            .starts_with("line 35, column 8: port[1].role: ")
    );
    assert!(err.problems().is_empty());

    let err = parse("[dataplane\n").unwrap_err();
    assert!(
        matches!(err, ConfigError::Syntax { line: 1, .. }),
        "{err:?}"
    );
}

#[test]
fn load_reports_unreadable_files() {
    let err = nic_config::load("/nonexistent/portico.toml").unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    assert!(err.to_string().contains("/nonexistent/portico.toml"));
}

/// Edits that break independent rules on different lines.
const INDEPENDENT: &[(&str, &str, &str)] = &[
    ("batch_size = 32", "batch_size = 99", "dataplane.batch_size"),
    (
        "expiry_scan_per_poll = 16",
        "expiry_scan_per_poll = 0",
        "dataplane.conntrack.expiry_scan_per_poll",
    ),
    (
        "udp_s = 31",
        "udp_s = 0",
        "dataplane.conntrack.timeouts.udp_s",
    ),
    ("mtu = 1500", "mtu = 1", "port[0].mtu"),
    (
        "interface = \"in0\"",
        "interface = \"in/0\"",
        "port[1].interface",
    ),
    (
        "\"198.51.100.0/24\"",
        "\"198.51.100.1/24\"",
        "route[0].destination",
    ),
    (
        "mac = \"02:00:00:00:01:10\"",
        "mac = \"x\"",
        "neighbour[0].mac",
    ),
    (
        "affinity_timeout_s = 600",
        "affinity_timeout_s = 0",
        "service[0].affinity_timeout_s",
    ),
    (
        "port = 8080, weight = 3",
        "port = 8080, weight = 70000",
        "service[0].backends[0].weight",
    ),
    ("port = 53\n", "port = 0\n", "service[1].port"),
    (
        "debounce_ms = 30",
        "debounce_ms = 99999",
        "kubernetes.debounce_ms",
    ),
    (
        "\"203.0.113.64/27\"",
        "\"203.0.113.64/33\"",
        "address_pool[0].addresses[0]",
    ),
    ("name = \"reserved\"", "name = \"\"", "address_pool[1].name"),
];

proptest! {
    /// Any combination of independent mistakes is reported in full: one
    /// problem per mistake, nothing else.
    #[test]
    fn every_problem_is_reported(mask in 1u32..(1 << INDEPENDENT.len())) {
        let chosen: Vec<_> = INDEPENDENT
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, c)| *c)
            .collect();
        let edits: Vec<(&str, &str)> = chosen.iter().map(|&(f, t, _)| (f, t)).collect();
        let mut got: Vec<String> = problems(&edit(&edits)).into_iter().map(|p| p.path).collect();
        let mut want: Vec<String> = chosen.iter().map(|c| c.2.to_owned()).collect();
        got.sort();
        want.sort();
        prop_assert_eq!(got, want);
    }

    /// The SNAT port range is accepted exactly when every worker gets at
    /// least 64 ports.
    #[test]
    fn port_range_must_cover_the_workers(workers in 1u32..=64, first in 1u16..=65535, len in 1u32..=5000) {
        let last = (u32::from(first) + len - 1).min(65535);
        let width = last - u32::from(first) + 1;
        let text = edit(&[
            ("workers = 2", &format!("workers = {workers}")),
            ("\"20000-29999\"", &format!("\"{first}-{last}\"")),
            // No dual-role address, so NodePorts may fall in the range.
            ("node_addresses = [\"10.1.0.1/24\"]\n", ""),
        ]);
        let result = parse(&text);
        if width >= 64 * workers {
            prop_assert!(result.is_ok(), "{:?}", result.err().map(|e| e.to_string()));
        } else {
            let got = result.err().map(|e| e.problems().to_vec()).unwrap_or_default();
            prop_assert_eq!(got.len(), 1);
            prop_assert_eq!(got[0].path.as_str(), "dataplane.snat.port_range");
        }
    }
}

#[test]
fn neighbour_table_capacity_rounds_up_to_a_power_of_two() {
    let plan = parse(
        "[dataplane.neighbour_table]\ncapacity = 1000\ngc_min_entries = 1024\ngc_stale_ms = 5000\n\
         [[port]]\nname = \"lan\"\ndriver = \"afpacket\"\ninterface = \"eth0\"\nrole = \"both\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let n = plan.dataplane.neighbour_table;
    assert_eq!(
        (n.capacity, n.gc_min_entries, n.gc_stale_ms),
        (1024, 1024, 5_000)
    );
}

#[test]
fn external_ip_cidrs_are_networks_and_default_to_none() {
    let plan = parse(BASE).unwrap_or_else(|e| panic!("{e}"));
    let k = plan.kubernetes.as_ref().expect("kubernetes");
    assert!(
        k.external_ip_cidrs.is_empty(),
        "no externalIP served by default"
    );
    assert!(
        plan.to_string().contains("externalIPs: none served"),
        "{plan}"
    );

    let plan = parse(&edit(&[(
        "serve_unclassed = true\n",
        "serve_unclassed = true\nexternal_ip_cidrs = [\"203.0.113.0/24\", \"198.18.0.0/15\"]\n",
    )]))
    .unwrap_or_else(|e| panic!("{e}"));
    let cidrs: Vec<String> = plan
        .kubernetes
        .as_ref()
        .expect("kubernetes")
        .external_ip_cidrs
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(cidrs, ["203.0.113.0/24", "198.18.0.0/15"]);

    // Every bad entry is named at once.
    let found = problems(&edit(&[(
        "serve_unclassed = true\n",
        "serve_unclassed = true\nexternal_ip_cidrs = [\"203.0.113.7/24\", \"nope\", \"10.0.0.0/8\"]\n",
    )]));
    let paths: Vec<&str> = found.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "kubernetes.external_ip_cidrs[0]",
            "kubernetes.external_ip_cidrs[1]"
        ],
        "{found:?}"
    );
    assert!(
        found[0].reason.contains("the network is 203.0.113.0/24"),
        "{found:?}"
    );
}
