//! The kernel path in the demo's own topology, for comparison: once Portico
//! has been measured and stopped, the same gateway namespace forwards with
//! Linux's NAT in kube-proxy's nftables shape (a `numgen random` verdict map
//! over one chain per endpoint, each a DNAT; full NAT to the SNAT address on
//! the way to the backends), and the demo sends the same requests the same
//! way, so the two latencies it prints differ only in who forwards.
//!
//! Invariants: nothing is installed while `portico run` is running (the
//! gateway namespace then has no address and `ip_forward=0`, see
//! [`super::topology`]); everything installed here lives in the gateway
//! namespace and goes with it when the topology is dropped.

use super::topology::{
    BACKEND_HTTP_PORT, BACKEND_UDP_PORT, DNS_PORT, HTTP_PORT, NODE_ADDR, SNAT_ADDR, Topology, VIP,
};
use std::fmt::Write as _;
use std::io;

/// Name of the nftables table the kernel path installs.
const TABLE: &str = "portico_demo_kernel_path";

/// The nftables program of the kernel path for `t`: the VIP's TCP and UDP
/// services spread at random over every backend (kube-proxy's nftables
/// mode: `numgen random mod n vmap` to one DNAT chain per endpoint), and
/// full NAT to [`SNAT_ADDR`] towards the backends, as the demo's Portico
/// services do.
pub fn nft_script(t: &Topology) -> String {
    let n = t.backends.len();
    let mut script = format!("table ip {TABLE} {{\n");
    let mut chains = String::new();
    for (proto, port, backend_port) in [
        ("tcp", HTTP_PORT, BACKEND_HTTP_PORT),
        ("udp", DNS_PORT, BACKEND_UDP_PORT),
    ] {
        let mut vmap = Vec::with_capacity(n);
        for (i, b) in t.backends.iter().enumerate() {
            let chain = format!("{proto}-ep{i}");
            let _ = writeln!(
                chains,
                "\tchain {chain} {{\n\t\tmeta l4proto {proto} dnat to {}:{backend_port}\n\t}}",
                b.addr
            );
            vmap.push(format!("{i} : goto {chain}"));
        }
        let _ = writeln!(
            chains,
            "\tchain svc-{proto} {{\n\t\tnumgen random mod {n} vmap {{ {} }}\n\t}}",
            vmap.join(", ")
        );
        let _ = writeln!(
            script,
            "\tchain prerouting-{proto} {{\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tip daddr {VIP} {proto} dport {port} goto svc-{proto}\n\t}}"
        );
    }
    script.push_str(&chains);
    let _ = writeln!(
        script,
        "\tchain postrouting {{\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t\toifname \"{}\" snat to {SNAT_ADDR}\n\t}}\n}}",
        t.inside_if
    );
    script
}

/// Why the kernel path cannot be measured here, if it cannot.
pub fn unavailable() -> Option<&'static str> {
    (!crate::netns::have("nft")).then_some("nft is not installed (apt-get install nftables)")
}

/// Turn the gateway namespace into a kernel NAT gateway: the node address
/// and the VIP on the outside port, the SNAT address on the inside port,
/// `ip_forward=1` and [`nft_script`]. Call only after `portico run` has
/// stopped.
pub fn install(t: &Topology) -> io::Result<()> {
    let gw = &t.gateway;
    gw.exec(
        "ip",
        &[
            "addr",
            "add",
            &format!("{NODE_ADDR}/24"),
            "dev",
            &t.outside_if,
        ],
    )?;
    gw.exec(
        "ip",
        &["addr", "add", &format!("{VIP}/32"), "dev", &t.outside_if],
    )?;
    gw.exec(
        "ip",
        &[
            "addr",
            "add",
            &format!("{SNAT_ADDR}/24"),
            "dev",
            &t.inside_if,
        ],
    )?;
    gw.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"])?;
    let rules = t.dir.path.join("kernel-path.nft");
    std::fs::write(&rules, nft_script(t))?;
    let rules = rules
        .to_str()
        .ok_or_else(|| io::Error::other("the demo directory's path is not UTF-8"))?;
    gw.exec("nft", &["-f", rules])
        .map_err(|e| io::Error::other(format!("nft -f refused the kernel path's rules: {e}")))?;
    Ok(())
}
