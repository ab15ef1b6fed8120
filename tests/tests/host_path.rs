//! The host path (issue 13 §1) end to end, on every driver: the outside
//! port has a host address, carried by a TAP in the gateway's namespace,
//! and the client namespace (on the outside port's link) reaches the
//! gateway's kernel through it, while the VIP keeps forwarding through the
//! same port:
//!
//! * ping of the host address (also one larger than the MTU: fragments),
//!   answered by the kernel (the dataplane
//!   answers neither ARP nor ICMP for it: the client's ARP entry carries
//!   the port's MAC, learned from the kernel's reply);
//! * TCP from the client to a server listening on the host address in the
//!   gateway namespace, and from the kernel (bound to the host address) to
//!   a server in the client namespace;
//! * the counters (`to_host`, `from_host`) show the frames;
//! * the same over IPv6 (issue 17): the IPv6 host address and the
//!   kernel's link-local address on the TAP, `ping -6` of the host
//!   address (NDP and ICMPv6 answered by the kernel through the host path,
//!   the client's neighbour entry the port's MAC), TCP both ways;
//! * nothing answers for the host address on the inside port's link (the
//!   gateway namespace's kernel is kept from answering on the ports' own
//!   interfaces);
//! * with the TAP down the kernel's traffic stops, the dataplane still
//!   answers nothing for the host address, every frame for it is dropped
//!   and counted (`host_path_down`), and the VIP is unaffected.

mod common;

use common::router::{CLIENT_ADDR6, HOST_ADDR, HOST_ADDR6, client_ipv6, with_dual_host_addresses};
use common::{DriverKind, curl, number, stats, stats_until, tally};
use portico::demo::live::parse_body;
use portico::demo::topology::{CLIENT_ADDR, GatewayRun, ServiceOptions, Topology, VIP};
use portico_netns::Process;
use portico_tests::wait_until;
use std::time::Duration;

const HOST_IF: &str = "outside-host";
/// A TCP port for the servers of the test (the kernel's, on both sides).
const SERVER_PORT: u16 = 8099;

/// `portico tool http-serve` on `bind:SERVER_PORT` in `ns` (it answers
/// with its name and the address it saw), once it listens.
fn http_server(t: &Topology, ns: &portico_netns::Netns, bind: &str, name: &str) -> Process {
    let listen = format!("{bind}:{SERVER_PORT}");
    let portico = t.portico.to_str().expect("UTF-8 path");
    let server = ns
        .spawn(
            portico,
            &["tool", "http-serve", "--listen", &listen, "--name", name],
        )
        .expect("portico tool http-serve starts");
    let up = wait_until(Duration::from_secs(10), || {
        ns.exec("ss", &["-ltnH", "sport", "=", &format!(":{SERVER_PORT}")])
            .is_ok_and(|o| !String::from_utf8_lossy(&o.stdout).trim().is_empty())
    });
    assert!(up, "http-serve on {listen} never listened");
    server
}

/// The (name, address seen) of one GET of `url` from `ns` (curl options
/// `extra` first).
fn get(ns: &portico_netns::Netns, extra: &[&str], url: &str) -> Option<(String, String)> {
    let mut args = vec!["-sS", "--max-time", "5"];
    args.extend_from_slice(extra);
    args.push(url);
    let out = ns.exec_unchecked("curl", &args).ok()?;
    parse_body(String::from_utf8_lossy(&out.stdout).trim())
}

fn ping(t: &Topology, count: &str) -> bool {
    t.client_exec("ping", &["-c", count, "-i", "0.2", "-W", "2", HOST_ADDR])
        .is_ok_and(|o| o.status.success())
}

fn client_neighbour(t: &Topology) -> String {
    let out = t
        .client
        .exec("ip", &["neigh", "show", HOST_ADDR])
        .expect("ip neigh");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// IPv6 through the host path: the TAP's addresses, `ping -6` (NDP and
/// ICMPv6 answered by the kernel), TCP both ways.
fn ipv6_reaches_the_kernel(t: &Topology, gw: &GatewayRun, port_mac: &str) {
    let addr = t
        .gateway
        .exec("ip", &["-6", "addr", "show", HOST_IF])
        .expect("ip -6 addr");
    let addr = String::from_utf8_lossy(&addr.stdout);
    assert!(
        addr.contains(&format!("{HOST_ADDR6}/64")) && addr.contains("inet6 fe80::"),
        "the TAP has the IPv6 host address and a link-local address: {addr}"
    );
    assert!(
        !addr.contains("tentative"),
        "no duplicate address detection: {addr}"
    );
    let before = stats(gw);
    let local_before = number(&before, "/total/local_replies");
    let ping6 = t
        .client_exec(
            "ping",
            &["-6", "-c", "3", "-i", "0.2", "-W", "2", HOST_ADDR6],
        )
        .expect("ping -6");
    assert!(
        ping6.status.success(),
        "ping -6 {HOST_ADDR6}: {}; drops {}; log:\n{}",
        String::from_utf8_lossy(&ping6.stdout),
        stats(gw)["total"]["drops"],
        gw.log_text()
    );
    let neigh = t
        .client
        .exec("ip", &["-6", "neigh", "show", HOST_ADDR6])
        .expect("ip neigh");
    let neigh = String::from_utf8_lossy(&neigh.stdout);
    assert!(
        neigh.contains(port_mac),
        "the client's neighbour entry for {HOST_ADDR6} is the port's MAC {port_mac}: {neigh}"
    );
    // NS, echo requests in; NA, echo replies (and the kernel's own NS,
    // MLD reports) out.
    let s = stats_until(gw, |s| {
        number(s, "/total/to_host") >= number(&before, "/total/to_host") + 4
            && number(s, "/total/from_host") >= number(&before, "/total/from_host") + 4
    });
    assert_eq!(
        number(&s, "/total/local_replies"),
        local_before,
        "the dataplane answered nothing for the IPv6 host address: {s}"
    );

    // The kernel's link-local address (a host address of the port in the
    // snapshot): NDP and echo for it reach the kernel too.
    let link_local = addr
        .lines()
        .find_map(|l| l.trim().strip_prefix("inet6 fe80::"))
        .and_then(|rest| rest.split('/').next())
        .map(|rest| format!("fe80::{rest}"))
        .expect("a link-local address");
    let scoped = format!("{link_local}%{}", t.client_if);
    let ping_ll = t
        .client_exec("ping", &["-6", "-c", "2", "-i", "0.2", "-W", "2", &scoped])
        .expect("ping -6 link-local");
    assert!(
        ping_ll.status.success(),
        "ping -6 {scoped}: {}",
        String::from_utf8_lossy(&ping_ll.stdout)
    );

    // TCP to the kernel's IPv6 host address, and from it. The client's
    // veth hands af_packet IPv6 TCP with the checksum left to offload,
    // which the af_packet driver fixes up for IPv4 only so far: complete
    // checksums from the client here (the host path is under test).
    t.client
        .exec("ethtool", &["-K", &t.client_if, "tx", "off"])
        .expect("ethtool -K tx off");
    let server = http_server(t, &t.gateway, &format!("[{HOST_ADDR6}]"), "kernel6");
    let url = format!("http://[{HOST_ADDR6}]:{SERVER_PORT}/");
    let got = get(&t.client, &["-6"], &url);
    if got.is_none() {
        let out = t
            .client_exec("curl", &["-6", "-sS", "--max-time", "3", &url])
            .expect("curl");
        panic!(
            "curl -6 {url} from the client: {}; drops {}",
            String::from_utf8_lossy(&out.stderr),
            stats(gw)["total"]["drops"]
        );
    }
    assert_eq!(
        got,
        Some(("kernel6".to_owned(), CLIENT_ADDR6.to_owned())),
        "curl -6 from the client to the IPv6 host address"
    );
    drop(server);
    let client_server = http_server(t, &t.client, &format!("[{CLIENT_ADDR6}]"), "client6");
    let url = format!("http://[{CLIENT_ADDR6}]:{SERVER_PORT}/");
    assert_eq!(
        get(&t.gateway, &["-6", "--interface", HOST_ADDR6], &url),
        Some(("client6".to_owned(), HOST_ADDR6.to_owned())),
        "curl -6 from the IPv6 host address to the client"
    );
    drop(client_server);
}

fn vip_answers(t: &Topology, requests: usize) {
    let bodies = curl(t, &format!("http://{VIP}/"), requests, true);
    let (per_backend, _, failed) = tally(&bodies);
    assert_eq!(failed, 0, "VIP requests failed; answers {per_backend:?}");
}

/// The ports' driver of a run: the topology's, or DPDK's `net_af_packet`
/// vdevs on the topology's af_packet veths.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ports {
    Kernel(DriverKind),
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    Dpdk,
}

fn host_path_on(test: &str, ports: Ports) {
    let driver = match ports {
        Ports::Kernel(d) => d,
        Ports::Dpdk => DriverKind::Afpacket,
    };
    let Some(t) = common::topology_on(test, 2, driver) else {
        return;
    };
    client_ipv6(&t);
    let mut config = with_dual_host_addresses(&t.config_toml(&ServiceOptions::all(&t)));
    if ports == Ports::Dpdk {
        config = config.replace("driver = \"afpacket\"", "driver = \"dpdk\"")
            + "\n[dpdk]\nmemory_mb = 256\n";
        // net_af_packet vdevs hand frames over as the kernel has them.
        for (ns, ifname) in std::iter::once((&t.client, t.client_if.as_str()))
            .chain(t.backends.iter().map(|b| (&b.ns, b.ifname.as_str())))
        {
            ns.exec("ethtool", &["-K", ifname, "tx", "off"])
                .unwrap_or_else(|e| panic!("ethtool -K {ifname} tx off: {e}"));
        }
    }
    let gw = t.start_gateway(&config).expect("portico run starts");
    let url = format!("http://{VIP}/");
    let up = wait_until(Duration::from_secs(30), || {
        curl(&t, &url, 1, true).first().is_some_and(Option::is_some)
    });
    assert!(up, "the VIP never answered; log:\n{}", gw.log_text());
    let log = gw.log_text();
    assert!(log.contains("host interface up"), "{log}");
    if ports == Ports::Dpdk {
        assert!(log.contains("DPDK port started"), "{log}");
    }

    // The TAP in the gateway namespace: the port's MAC, the host address.
    let port_mac = Topology::mac_of(&t.gateway, &t.outside_if).expect("port MAC");
    let tap_mac = Topology::mac_of(&t.gateway, HOST_IF).expect("TAP MAC");
    assert_eq!(tap_mac, port_mac, "the host interface has the port's MAC");
    let addr = t
        .gateway
        .exec("ip", &["-4", "addr", "show", HOST_IF])
        .expect("ip addr");
    assert!(
        String::from_utf8_lossy(&addr.stdout).contains(&format!("{HOST_ADDR}/24")),
        "{}",
        String::from_utf8_lossy(&addr.stdout)
    );

    // Ping, answered by the kernel; ARP answered by the kernel with the
    // port's MAC.
    let before = stats(&gw);
    let local_before = number(&before, "/total/local_replies");
    assert!(ping(&t, "5"), "ping {HOST_ADDR}; log:\n{}", gw.log_text());
    // A ping larger than the MTU: fragments both ways, reassembled by the
    // kernels. (Not on DPDK's net_af_packet vdevs yet: full-size frames
    // arrive there cut short, `ipv4_bad_length`; a driver issue of its own.)
    let big = ports == Ports::Dpdk
        || t.client_exec(
            "ping",
            &["-c", "2", "-i", "0.2", "-W", "2", "-s", "3000", HOST_ADDR],
        )
        .is_ok_and(|o| o.status.success());
    assert!(
        big,
        "a fragmented ping of {HOST_ADDR}; drops {}; ports {}",
        stats(&gw)["total"]["drops"],
        stats(&gw)["ports"]
    );
    let neigh = client_neighbour(&t);
    assert!(
        neigh.contains(&port_mac),
        "the client's ARP entry for {HOST_ADDR} is the port's MAC {port_mac}: {neigh}"
    );
    let s = stats_until(&gw, |s| {
        number(s, "/total/to_host") >= 6 && number(s, "/total/from_host") >= 6
    });
    assert_eq!(
        number(&s, "/total/local_replies"),
        local_before,
        "the dataplane answered nothing for the host address: {s}"
    );

    // TCP to the kernel: a server on the host address in the gateway
    // namespace, curl from the client.
    let server = http_server(&t, &t.gateway, HOST_ADDR, "kernel");
    let url = format!("http://{HOST_ADDR}:{SERVER_PORT}/");
    assert_eq!(
        get(&t.client, &[], &url),
        Some(("kernel".to_owned(), CLIENT_ADDR.to_string())),
        "curl from the client to the host address; log:\n{}",
        gw.log_text()
    );
    drop(server);

    // TCP from the kernel: bound to the host address, to a server in the
    // client namespace.
    let client_server = http_server(&t, &t.client, &CLIENT_ADDR.to_string(), "client");
    let url = format!("http://{CLIENT_ADDR}:{SERVER_PORT}/");
    assert_eq!(
        get(&t.gateway, &["--interface", HOST_ADDR], &url),
        Some(("client".to_owned(), HOST_ADDR.to_owned())),
        "curl from the host address to the client"
    );
    drop(client_server);

    ipv6_reaches_the_kernel(&t, &gw, &port_mac);

    // The other port's link: by the weak host model the gateway
    // namespace's kernel would answer ARP for the host address on the
    // inside port's own interface; nothing answers there (the dataplane
    // answers only on the host address's port, the kernel's interfaces
    // are kept quiet).
    let b = &t.backends[0];
    b.ns.exec(
        "ip",
        &["route", "add", &format!("{HOST_ADDR}/32"), "dev", &b.ifname],
    )
    .expect("a route on the backend's link");
    let answered =
        b.ns.exec_unchecked("ping", &["-c", "2", "-W", "1", HOST_ADDR])
            .is_ok_and(|o| o.status.success());
    let neigh =
        b.ns.exec("ip", &["neigh", "show", HOST_ADDR])
            .expect("ip neigh");
    let neigh = String::from_utf8_lossy(&neigh.stdout);
    assert!(
        !answered && !neigh.contains("lladdr"),
        "nothing answers for {HOST_ADDR} on the inside link: {neigh}"
    );

    // The VIP through the same port, meanwhile.
    vip_answers(&t, 20);

    // The TAP down: nothing answers for the host address (the dataplane
    // does not stand in), every frame for it is counted as dropped, and
    // forwarding goes on.
    t.gateway
        .exec("ip", &["link", "set", HOST_IF, "down"])
        .expect("TAP down");
    t.client
        .exec("ip", &["neigh", "flush", "dev", &t.client_if])
        .expect("flush the client's ARP cache");
    let down_before = number(&stats(&gw), "/total/drops/host_path_down");
    assert!(!ping(&t, "3"), "nothing answers with the host path down");
    let s = stats_until(&gw, |s| {
        number(s, "/total/drops/host_path_down") >= down_before + 3
    });
    assert!(
        !client_neighbour(&t).contains(&port_mac),
        "no ARP answer for {HOST_ADDR} without the kernel: {}",
        client_neighbour(&t)
    );
    assert_eq!(number(&s, "/total/local_replies"), local_before, "{s}");
    vip_answers(&t, 20);

    // Up again: the kernel answers again.
    t.gateway
        .exec("ip", &["link", "set", HOST_IF, "up"])
        .expect("TAP up");
    assert!(
        wait_until(Duration::from_secs(10), || ping(&t, "1")),
        "ping after the TAP came back"
    );
    let socket = t.dir.path.join("portico.sock");
    let text = t
        .gateway
        .exec(
            t.portico.to_str().expect("UTF-8"),
            &["stats", "--admin-socket", socket.to_str().expect("UTF-8")],
        )
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(text.contains("host path: to kernel"), "{text}");
}

#[test]
fn host_address_reaches_the_kernel_afpacket() {
    host_path_on(
        "host_path::host_address_reaches_the_kernel_afpacket",
        Ports::Kernel(DriverKind::Afpacket),
    );
}

#[test]
fn host_address_reaches_the_kernel_afxdp() {
    host_path_on(
        "host_path::host_address_reaches_the_kernel_afxdp",
        Ports::Kernel(DriverKind::Afxdp),
    );
}

#[cfg(feature = "dpdk")]
#[test]
fn host_address_reaches_the_kernel_dpdk() {
    host_path_on(
        "host_path::host_address_reaches_the_kernel_dpdk",
        Ports::Dpdk,
    );
}
