//! The three datapaths' rule sets for the measured services plus filler
//! services, as text: an `iptables-restore` file in kube-proxy's
//! iptables-mode shape, an `nft -f` file in kube-proxy's nftables-mode shape
//! and the `[[service]]` tables of a Portico configuration.
//!
//! Invariants:
//! * every datapath gets the same services: first the measured ones (each
//!   `vip:port/proto` → its real endpoints), then fillers on `10.96.0.0/16`
//!   VIPs (UDP port 53) with two made-up endpoints each, until there are
//!   `services` in all (never fewer than the measured ones);
//! * the measured services come LAST in kube-proxy's linear `KUBE-SERVICES`
//!   chain (the worst case of its map-ordered rules); in the nftables map and
//!   in Portico the order does not matter (hash lookups);
//! * traffic from outside the cluster CIDR (`10.244.0.0/16`) is masqueraded,
//!   as kube-proxy does with `--cluster-cidr`, so all three do full NAT.

pub use dataplane::flow::Proto;
use std::fmt::Write as _;
use std::net::Ipv4Addr;

/// The cluster CIDR whose sources kube-proxy does not masquerade.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";

/// One service: VIP, port, protocol and endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    pub vip: Ipv4Addr,
    pub port: u16,
    /// Tcp or Udp (a service has no ICMP rules).
    pub proto: Proto,
    /// Portico's `syn_proxy` mode (`"off"`, `"on"`, `"auto"`) for a TCP
    /// service; `None` leaves the key out (the default). The kernel rule
    /// sets have no counterpart: their SYN proxy is a separate table
    /// ([`nft_synproxy_script`]).
    pub syn_proxy: Option<&'static str>,
    pub endpoints: Vec<(Ipv4Addr, u16)>,
}

/// The services every datapath is programmed with.
#[derive(Clone, Debug)]
pub struct ServiceSet {
    /// The services the loads go to.
    pub measured: Vec<Service>,
    /// Total services including the measured ones.
    pub services: usize,
}

/// VIP of filler service `i` (1-based): `10.96.0.0` + i.
pub fn filler_vip(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 0, 0)).wrapping_add(i as u32))
}

/// Endpoint `j` of filler service `i`: inside the cluster CIDR.
pub fn filler_endpoint(i: usize, j: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 244, 0, 0)).wrapping_add((2 * i + j) as u32 + 2))
}

impl ServiceSet {
    /// The measured services, then the fillers.
    pub fn services(&self) -> Vec<Service> {
        let mut all = self.measured.clone();
        let fillers = self.services.saturating_sub(self.measured.len());
        for i in 1..=fillers {
            all.push(Service {
                vip: filler_vip(i),
                port: 53,
                proto: Proto::Udp,
                syn_proxy: None,
                endpoints: (0..2).map(|j| (filler_endpoint(i, j), 5353)).collect(),
            });
        }
        all
    }

    /// The same set with the last endpoint of the first measured service
    /// with more than one endpoint removed (the change whose programming
    /// time is measured).
    pub fn without_one_endpoint(&self) -> ServiceSet {
        let mut changed = self.clone();
        if let Some(s) = changed.measured.iter_mut().find(|s| s.endpoints.len() > 1) {
            s.endpoints.pop();
        }
        changed
    }
}

/// kube-proxy's probability for endpoint `k` of `n` (`1/(n-k)`), printed
/// the way kube-proxy prints it.
pub fn probability(k: usize, n: usize) -> String {
    format!("{:.10}", 1.0 / (n - k) as f64)
}

/// `iptables-restore` input for the nat table, kube-proxy iptables mode.
pub fn iptables_restore(set: &ServiceSet) -> String {
    let services = set.services();
    // The measured services go last in KUBE-SERVICES.
    let measured = set.measured.len().min(services.len());
    let order: Vec<usize> = (measured..services.len()).chain(0..measured).collect();
    let mut chains = String::new();
    let mut rules = String::new();
    let base = [
        "KUBE-SERVICES",
        "KUBE-NODEPORTS",
        "KUBE-POSTROUTING",
        "KUBE-MARK-MASQ",
    ];
    for c in base {
        let _ = writeln!(chains, ":{c} - [0:0]");
    }
    rules.push_str(
        "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n\
         -A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n\
         -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n\
         -A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0\n\
         -A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully\n",
    );
    let mut per_service = String::new();
    for &i in &order {
        let Some(s) = services.get(i) else { continue };
        let svc = format!("KUBE-SVC-S{i:014}");
        let _ = writeln!(chains, ":{svc} - [0:0]");
        let p = s.proto.name();
        let _ = writeln!(
            rules,
            "-A KUBE-SERVICES -d {}/32 -p {p} -m comment --comment \"default/svc{i}:port cluster IP\" -m {p} --dport {} -j {svc}",
            s.vip, s.port
        );
        let _ = writeln!(
            per_service,
            "-A {svc} ! -s {CLUSTER_CIDR} -d {}/32 -p {p} -m {p} --dport {} -j KUBE-MARK-MASQ",
            s.vip, s.port
        );
        let n = s.endpoints.len();
        for (k, (addr, port)) in s.endpoints.iter().enumerate() {
            let sep = format!("KUBE-SEP-S{i:07}E{k:06}");
            let _ = writeln!(chains, ":{sep} - [0:0]");
            if k + 1 < n {
                let _ = writeln!(
                    per_service,
                    "-A {svc} -m statistic --mode random --probability {} -j {sep}",
                    probability(k, n)
                );
            } else {
                let _ = writeln!(per_service, "-A {svc} -j {sep}");
            }
            let _ = writeln!(per_service, "-A {sep} -s {addr}/32 -j KUBE-MARK-MASQ");
            let _ = writeln!(
                per_service,
                "-A {sep} -p {p} -m {p} -j DNAT --to-destination {addr}:{port}"
            );
        }
    }
    rules.push_str("-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\n");
    format!(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n{chains}{rules}{per_service}COMMIT\n"
    )
}

/// An `iptables-restore` input that empties the nat table again.
pub fn iptables_empty() -> &'static str {
    "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n"
}

/// Name of kube-proxy's nftables table here.
pub const NFT_TABLE: &str = "kube-proxy";

/// `nft -f` input, kube-proxy nftables mode: a `service-ips` verdict map,
/// a chain per service with `numgen random mod n vmap`, a chain per
/// endpoint with the DNAT, masquerade in postrouting. Replaces the table
/// atomically when loaded again.
pub fn nft_script(set: &ServiceSet) -> String {
    let services = set.services();
    let mut out = format!(
        "table ip {NFT_TABLE}\ndelete table ip {NFT_TABLE}\ntable ip {NFT_TABLE} {{\n\
         \tchain mark-for-masquerade {{ meta mark set meta mark or 0x4000; }}\n\
         \tchain masquerading {{\n\t\tmeta mark & 0x4000 == 0 return\n\t\tmeta mark set meta mark xor 0x4000\n\t\tmasquerade fully-random\n\t}}\n\
         \tchain nat-prerouting {{ type nat hook prerouting priority dstnat; policy accept; jump services; }}\n\
         \tchain nat-output {{ type nat hook output priority -100; policy accept; jump services; }}\n\
         \tchain nat-postrouting {{ type nat hook postrouting priority srcnat; policy accept; jump masquerading; }}\n\
         \tmap service-ips {{ type ipv4_addr . inet_proto . inet_service : verdict; }}\n\
         \tchain services {{ ip daddr . meta l4proto . th dport vmap @service-ips; }}\n"
    );
    let mut elements = String::new();
    for (i, s) in services.iter().enumerate() {
        let p = s.proto.name();
        let svc = format!("service-s{i}-{p}");
        let n = s.endpoints.len();
        let mut vmap = String::new();
        for k in 0..n {
            let sep = if k == 0 { "" } else { ", " };
            let _ = write!(vmap, "{sep}{k} : goto endpoint-s{i}-e{k}");
        }
        let _ = writeln!(
            out,
            "\tchain {svc} {{\n\t\tip daddr {} {p} dport {} ip saddr != {CLUSTER_CIDR} jump mark-for-masquerade\n\t\tnumgen random mod {n} vmap {{ {vmap} }};\n\t}}",
            s.vip, s.port
        );
        for (k, (addr, port)) in s.endpoints.iter().enumerate() {
            let _ = writeln!(
                out,
                "\tchain endpoint-s{i}-e{k} {{\n\t\tip saddr {addr} jump mark-for-masquerade\n\t\tmeta l4proto {p} dnat to {addr}:{port}\n\t}}"
            );
        }
        let _ = writeln!(
            elements,
            "add element ip {NFT_TABLE} service-ips {{ {} . {p} . {} : goto {svc} }}",
            s.vip, s.port
        );
    }
    out.push_str("}\n");
    out.push_str(&elements);
    out
}

/// Name of the table of [`nft_synproxy_script`].
pub const NFT_SYNPROXY_TABLE: &str = "syn-proxy";

/// `nft -f` input putting the kernel's SYN proxy (nf_synproxy, the
/// nftables `synproxy` statement) in front of the TCP services of `set`
/// on a forwarding gateway, as the nftables wiki sets it up: client SYNs
/// to a service are left untracked (`raw` prerouting, `notrack`), the
/// untracked SYN and the invalid ACK answering the cookie meet `synproxy`
/// in the forward hook (which answers the SYN with a cookie, validates the
/// ACK and opens the connection to the service itself, through the NAT of
/// [`nft_script`]'s output hook), other invalid packets are dropped. Needs
/// `net.netfilter.nf_conntrack_tcp_loose=0` (else the ACK would create a
/// flow instead of reaching `synproxy`). Replaces the table when loaded
/// again.
pub fn nft_synproxy_script(set: &ServiceSet, mss: u16, wscale: u8) -> String {
    let mut services = String::new();
    for s in set.measured.iter().filter(|s| s.proto == Proto::Tcp) {
        let sep = if services.is_empty() { "" } else { ", " };
        let _ = write!(services, "{sep}{} . {}", s.vip, s.port);
    }
    format!(
        "table ip {t}\ndelete table ip {t}\ntable ip {t} {{\n\
         \tset services {{ type ipv4_addr . inet_service; elements = {{ {services} }}; }}\n\
         \tchain raw-prerouting {{\n\t\ttype filter hook prerouting priority raw; policy accept;\n\
         \t\tip daddr . tcp dport @services tcp flags syn / fin,syn,rst,ack notrack\n\t}}\n\
         \tchain forward {{\n\t\ttype filter hook forward priority filter; policy accept;\n\
         \t\tip daddr . tcp dport @services ct state invalid,untracked synproxy mss {mss} wscale {wscale} timestamp sack-perm\n\
         \t\tip daddr . tcp dport @services ct state invalid drop\n\t}}\n}}\n",
        t = NFT_SYNPROXY_TABLE,
    )
}

/// The `[[service]]` tables of a Portico configuration.
pub fn portico_services(set: &ServiceSet) -> String {
    let mut out = String::new();
    for (i, s) in set.services().iter().enumerate() {
        let mut backends = String::new();
        for (addr, port) in &s.endpoints {
            let _ = write!(backends, "\n    {{ address = \"{addr}\", port = {port} }},");
        }
        let syn_proxy = s
            .syn_proxy
            .map_or(String::new(), |m| format!("syn_proxy = \"{m}\"\n"));
        let _ = write!(
            out,
            "\n[[service]]\nname = \"svc{i}\"\nprotocol = \"{}\"\nvip = \"{}\"\nport = {}\nsnat = true\n{syn_proxy}backends = [{backends}\n]\n",
            s.proto.name(),
            s.vip,
            s.port
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(services: usize) -> ServiceSet {
        let backends = [Ipv4Addr::new(10, 1, 0, 10), Ipv4Addr::new(10, 1, 0, 11)];
        ServiceSet {
            measured: vec![
                Service {
                    vip: Ipv4Addr::new(192, 0, 2, 10),
                    port: 53,
                    proto: Proto::Udp,
                    syn_proxy: None,
                    endpoints: backends.iter().map(|&b| (b, 9000)).collect(),
                },
                Service {
                    vip: Ipv4Addr::new(192, 0, 2, 10),
                    port: 80,
                    proto: Proto::Tcp,
                    syn_proxy: None,
                    endpoints: backends.iter().map(|&b| (b, 8080)).collect(),
                },
            ],
            services,
        }
    }

    #[test]
    fn every_datapath_has_every_service_once() {
        let s = set(50);
        let ipt = iptables_restore(&s);
        let nft = nft_script(&s);
        let portico = portico_services(&s);
        assert_eq!(ipt.matches("-A KUBE-SERVICES -d ").count(), 50);
        assert_eq!(nft.matches("add element").count(), 50);
        assert_eq!(portico.matches("[[service]]").count(), 50);
        assert_eq!(ipt.matches("-j DNAT").count(), 100);
        assert_eq!(nft.matches(" dnat to ").count(), 100);
        // The measured services are the last KUBE-SERVICES matches, each
        // with its protocol.
        let last: Vec<&str> = ipt
            .lines()
            .filter(|l| l.starts_with("-A KUBE-SERVICES -d "))
            .collect();
        assert!(last[48].contains("192.0.2.10/32 -p udp"), "{}", last[48]);
        assert!(last[49].contains("192.0.2.10/32 -p tcp"), "{}", last[49]);
        assert!(ipt.contains("-p tcp -m tcp -j DNAT --to-destination 10.1.0.11:8080"));
        assert!(nft.contains("192.0.2.10 . tcp . 80 : goto service-s1-tcp"));
        assert!(nft.contains("meta l4proto tcp dnat to 10.1.0.10:8080"));
        assert!(portico.contains("protocol = \"tcp\"\nvip = \"192.0.2.10\"\nport = 80"));
    }

    #[test]
    fn fewer_services_than_measured_still_has_the_measured() {
        let s = set(1);
        assert_eq!(s.services().len(), 2);
        assert_eq!(
            iptables_restore(&s).matches("-A KUBE-SERVICES -d ").count(),
            2
        );
    }

    #[test]
    fn the_change_removes_one_endpoint_of_a_measured_service() {
        let s = set(10);
        let changed = s.without_one_endpoint();
        assert_eq!(changed.measured[0].endpoints.len(), 1);
        assert_eq!(changed.measured[1].endpoints.len(), 2);
        assert_eq!(
            iptables_restore(&changed).matches("-j DNAT").count(),
            iptables_restore(&s).matches("-j DNAT").count() - 1
        );
    }

    #[test]
    fn probabilities_split_evenly() {
        assert_eq!(probability(0, 2), "0.5000000000");
        assert_eq!(probability(1, 2), "1.0000000000");
        assert_eq!(probability(0, 3), "0.3333333333");
    }

    #[test]
    fn syn_proxy_is_written_only_where_set() {
        let mut s = set(3);
        s.measured[1].syn_proxy = Some("on");
        let portico = portico_services(&s);
        assert_eq!(portico.matches("syn_proxy = ").count(), 1);
        assert!(portico.contains("port = 80\nsnat = true\nsyn_proxy = \"on\"\nbackends"));
        let nft = nft_synproxy_script(&s, 1460, 7);
        // Only the TCP service is proxied.
        assert!(nft.contains("elements = { 192.0.2.10 . 80 }"), "{nft}");
        assert!(nft.contains("synproxy mss 1460 wscale 7 timestamp sack-perm"));
        assert!(nft.contains("notrack"));
    }

    #[test]
    fn filler_addresses_are_distinct() {
        let vips: std::collections::HashSet<_> = (1..10_000).map(filler_vip).collect();
        assert_eq!(vips.len(), 9999);
        assert!(!vips.contains(&Ipv4Addr::new(192, 0, 2, 10)));
    }
}
