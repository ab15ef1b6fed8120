//! `[bgp]`: portico-bgp's own checks ([`BgpConfig::validate`], whose
//! problems already carry their full path, `bgp.peer[1].hold_time_s`),
//! reported with the rest of the file's, and the checks only the whole file
//! can do:
//! * peers: an address (of either family) that is not the gateway's own
//!   and is used by one peer only (a link-local one with its `interface`:
//!   the same fe80:: address on two interfaces is two routers, and an
//!   advertisement naming that address goes to both); a directly connected
//!   peer (eBGP without `multihop_ttl`, TTL 1, or GTSM with
//!   `ttl_security_hops = 1`) in the connected subnet of a host address
//!   (the sessions are the kernel's TCP, through the host path: only host
//!   addresses reach it); the source
//!   address a host address of a port; one router id for every peer
//!   (RFC 4271 §4.2: the BGP Identifier "is the same for every local
//!   interface and BGP peer"), which is one of the node or host addresses
//!   (an address of the speaker, and so distinct between the instances of
//!   a tier, whose addresses are their own). portico-bgp's type has no
//!   default router id, so it is always written;
//! * IPv6 (issue 17): a peer of either family, over a session from a host
//!   address of its family; portico-bgp's checks run on the peers as the
//!   gateway runs them, with `next_hop_v6` derived from the first global
//!   IPv6 host address when left out (so `families = ["ipv6-unicast"]` on
//!   an IPv4 peer needs such an address, or `next_hop_v6`); a configured
//!   `next_hop_v6` is one of the instance's IPv6 host or node addresses
//!   (the router resolves it by NDP and forwards the VIPs' traffic to it:
//!   host addresses are answered by the kernel through the host path, node
//!   addresses by the dataplane). `next_hop_v6_link_local` is not checked
//!   against the ports: the kernel's link-local address of a host
//!   interface is derived from the port's MAC, which may be known only at
//!   start;
//! * IPv6 sessions: a link-local peer address is on the link of its
//!   `interface`, which must be the host interface of a port with an IPv6
//!   host address (the kernel's TCP runs over the TAP, whose IPv6 is on
//!   only then; the port's own kernel interface has its IPv6 off), so its
//!   subnet is not checked; a link-local `source_address` is refused (the
//!   TAP's link-local is the kernel's EUI-64 one, known only at start: the
//!   kernel picks it when the field is left out);
//! * advertisements: every name a pool or service lists in
//!   `bgp_advertisements` is an advertisement (once per list), a service
//!   that lists one has a VIP or external IP to announce, every
//!   advertisement is listed by a pool or service (else it announces
//!   nothing), and advertisements need a peer.
//!
//! A field portico-bgp already found wrong is left out of these checks
//! (one mistake, one problem).

use super::Validator;
use super::ports::Ports;
use crate::plan::{
    AddressPoolPlan, AddressRole, AdvertisementPlan, BgpPlan, ListenerKind, ServicePlan,
};
use crate::schema::{BgpConfig, ConfigFile};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

impl Validator {
    /// `services` and `pools`: the plans of `file.services` and
    /// `file.address_pools`, one per section in file order.
    pub(super) fn bgp(
        &mut self,
        file: &ConfigFile,
        ports: &Ports<'_>,
        services: &[ServicePlan],
        pools: &[AddressPoolPlan],
    ) -> BgpPlan {
        let bgp = &file.bgp;
        let mut flagged = HashSet::new();
        // portico-bgp's checks see the peers as the gateway runs them: an
        // IPv6 next hop derived from a host address when the peer has
        // none (`families = ["ipv6-unicast"]` over an IPv4 session needs
        // one).
        let host: Vec<IpAddr> = ports.host.iter().map(|(p, _)| p.address).collect();
        let effective = BgpConfig {
            peers: bgp
                .peers
                .iter()
                .map(|p| p.with_next_hop_from(&host))
                .collect(),
            ..bgp.clone()
        };
        if let Err(e) = effective.validate() {
            for p in e.problems {
                flagged.insert(p.path.clone());
                self.problem(p.path, p.reason);
            }
        }
        self.peers(bgp, ports, &host, &flagged);
        let advertisements = self.advertisement_users(file, services, pools, &flagged);
        BgpPlan {
            peers: bgp.peers.clone(),
            advertisements,
            shutdown_drain_s: bgp.shutdown_drain_s,
            watchdog_timeout_ms: bgp.watchdog_timeout_ms,
        }
    }

    /// `host`: the host addresses of every port.
    fn peers(
        &mut self,
        bgp: &BgpConfig,
        ports: &Ports<'_>,
        host: &[IpAddr],
        flagged: &HashSet<String>,
    ) {
        let node = ports.with_role(AddressRole::Node);
        let any_broken = !ports.broken.is_empty();
        // A session is its address and, for a link-local one, its
        // interface: the same fe80:: address on two links is two routers.
        let mut first_at: HashMap<(IpAddr, Option<&str>), usize> = HashMap::new();
        for (i, peer) in bgp.peers.iter().enumerate() {
            let at = |field: &str| format!("bgp.peer[{i}].{field}");
            let ok = |field: &str| !flagged.contains(&at(field));
            if ok("address") {
                let a = peer.address;
                let key = (a, peer.link_local_scope());
                if let Some(first) = first_at.get(&key) {
                    let on = key.1.map(|i| format!(" on {i}")).unwrap_or_default();
                    self.problem(
                        at("address"),
                        format!(
                            "{a}{on} is already the address of bgp.peer[{first}]: a router has one session (only a link-local address is told apart by its interface)"
                        ),
                    );
                } else {
                    first_at.insert(key, i);
                    self.peer_address(&at("address"), peer, ports, any_broken);
                }
            }
            if ok("interface")
                && let Some(interface) = &peer.interface
                && peer.is_link_local()
            {
                self.peer_interface(&at("interface"), interface, ports);
            }
            if ok("source_address")
                && let Some(IpAddr::V6(src)) = peer.source_address
                && src.is_unicast_link_local()
            {
                self.problem(
                    at("source_address"),
                    format!(
                        "{src} is link-local: the host interface's link-local address is the \
                         kernel's (derived from the port's MAC); leave source_address out and \
                         the kernel uses it"
                    ),
                );
            } else if ok("source_address")
                && let Some(src) = peer.source_address
                && src.is_ipv4() == peer.address.is_ipv4()
                && !host.contains(&src)
            {
                self.problem(
                    at("source_address"),
                    format!(
                        "{src} is not a host address of any port (BGP is the kernel's TCP through the host path: put the address in a port's host_addresses)"
                    ),
                );
            }
            if ok("next_hop_v6")
                && let Some(nh) = peer.next_hop_v6
                && !host.contains(&IpAddr::V6(nh))
                && !node.contains(&IpAddr::V6(nh))
            {
                self.problem(
                    at("next_hop_v6"),
                    format!(
                        "{nh} is not an IPv6 host or node address of this instance: the router \
                         resolves the next hop by NDP and sends the VIPs' traffic there, and only \
                         the instance's own addresses are answered (leave it out to use the \
                         first global IPv6 host address)"
                    ),
                );
            }
            if ok("router_id") {
                let id = peer.router_id;
                let first = &bgp.peers[0];
                if i > 0 && id != first.router_id {
                    if !flagged.contains("bgp.peer[0].router_id") {
                        self.problem(
                            at("router_id"),
                            format!(
                                "{id} differs from bgp.peer[0]'s {}: a BGP speaker has one identifier for every peer (RFC 4271 §4.2)",
                                first.router_id
                            ),
                        );
                    }
                } else if i == 0 && id.is_unspecified() {
                    self.problem(
                        at("router_id"),
                        "missing: this instance's BGP identifier, one of its node or host \
                         addresses (in a tier of [[instance]]s: bgp_router_id in each)",
                    );
                } else if i == 0
                    && !node.contains(&IpAddr::V4(id))
                    && !host.contains(&IpAddr::V4(id))
                {
                    self.problem(
                        at("router_id"),
                        format!(
                            "{id} is not a node or host address of any port (use one: an identifier of this instance's own keeps the instances of a tier distinct)"
                        ),
                    );
                }
            }
        }
    }

    /// A peer's address (the first peer with it): not ours, and in a
    /// connected subnet when its packets have TTL 1.
    fn peer_address(
        &mut self,
        path: &str,
        peer: &portico_bgp::PeerConfig,
        ports: &Ports<'_>,
        any_broken: bool,
    ) {
        let a = peer.address;
        if !any_broken
            && !ports
                .host
                .iter()
                .any(|(h, _)| h.address.is_ipv4() == a.is_ipv4())
        {
            let family = if a.is_ipv4() { "IPv4" } else { "IPv6" };
            self.problem(
                path,
                format!(
                    "{a} is {family}, but no port has an {family} host address (the session is \
                     the kernel's TCP from a host address: add one to a port's host_addresses)"
                ),
            );
            return;
        }
        if let Some(owner) = ports.owners.get(&a) {
            self.problem(
                path,
                format!("{a} is the gateway's own address ({})", owner.path),
            );
        } else if peer.is_directly_connected()
            && !peer.is_link_local()
            && !any_broken
            && !ports.host.iter().any(|(net, _)| net.network().contains(a))
        {
            self.problem(
                path,
                format!(
                    "{a} is in no host address's subnet, and a directly connected router (eBGP TTL 1, or ttl_security_hops = 1) must be: put the router on the subnet of a port's host_addresses or set multihop_ttl (or ttl_security_hops) to its distance"
                ),
            );
        }
    }

    /// The `interface` of a link-local peer: a port's host interface, on
    /// a port with an IPv6 host address.
    fn peer_interface(&mut self, path: &str, interface: &str, ports: &Ports<'_>) {
        let has_v6_host = |k: usize| {
            ports
                .host
                .iter()
                .any(|(h, p)| *p == k && h.address.is_ipv6())
        };
        let by_host = ports
            .plans
            .iter()
            .position(|p| p.host_interface.as_deref() == Some(interface));
        if let Some(k) = by_host {
            if !has_v6_host(k) {
                self.problem(
                    path,
                    format!(
                        "`{interface}` is port {:?}'s host interface, which has IPv6 only with an \
                         IPv6 host address: add one to that port's host_addresses",
                        ports.plans[k].name
                    ),
                );
            }
            return;
        }
        let reason = match ports
            .plans
            .iter()
            .find(|p| p.interface == interface || p.name == interface)
        {
            Some(p) => match &p.host_interface {
                Some(tap) => format!(
                    "`{interface}` is port {:?} itself, whose kernel interface the dataplane \
                     owns: the kernel's BGP session goes through the port's host interface: \
                     interface = \"{tap}\"",
                    p.name
                ),
                None => format!(
                    "`{interface}` is port {:?} itself, which has no host interface: give it \
                     an IPv6 host address and name its host interface (`{}` by default)",
                    p.name,
                    super::ports::default_host_interface(&p.name)
                ),
            },
            None => {
                let taps: Vec<&str> = ports
                    .plans
                    .iter()
                    .filter_map(|p| p.host_interface.as_deref())
                    .collect();
                format!(
                    "`{interface}` is not the host interface of any port (the session is the \
                     kernel's TCP through a port's host interface: {})",
                    if taps.is_empty() {
                        "no port has host_addresses".to_owned()
                    } else {
                        taps.join(", ")
                    }
                )
            }
        };
        self.problem(path, reason);
    }

    /// Who uses each advertisement, and the names pools and services list.
    fn advertisement_users(
        &mut self,
        file: &ConfigFile,
        services: &[ServicePlan],
        pools: &[AddressPoolPlan],
        flagged: &HashSet<String>,
    ) -> Vec<AdvertisementPlan> {
        let bgp = &file.bgp;
        let mut plans: Vec<AdvertisementPlan> = bgp
            .advertisements
            .iter()
            .map(|a| AdvertisementPlan {
                advertisement: a.clone(),
                address_pools: Vec::new(),
                vips: Vec::new(),
            })
            .collect();
        // The first advertisement of each name (later ones are reported by
        // portico-bgp as duplicates).
        let mut by_name: HashMap<&str, usize> = HashMap::new();
        for (i, a) in bgp.advertisements.iter().enumerate() {
            by_name.entry(a.name.as_str()).or_insert(i);
        }
        let mut used = vec![false; plans.len()];

        for (i, pool) in file.address_pools.iter().enumerate() {
            let at = format!("address_pool[{i}].bgp_advertisements");
            for k in self.listed(&at, &pool.bgp_advertisements, &by_name) {
                used[k] = true;
                if let (Some(plan), Some(p)) = (plans.get_mut(k), pools.get(i)) {
                    plan.address_pools.push(p.name.clone());
                }
            }
        }
        for (i, s) in file.services.iter().enumerate() {
            let at = format!("service[{i}].bgp_advertisements");
            if !s.bgp_advertisements.is_empty() && s.vip.is_none() && s.external_ips.is_empty() {
                self.problem(
                    &at,
                    "nothing to announce: the service has no vip or external_ips",
                );
            }
            let vips: Vec<IpAddr> = services.get(i).map_or_else(Vec::new, |p| {
                p.listeners
                    .iter()
                    .filter(|l| matches!(l.kind, ListenerKind::Vip | ListenerKind::ExternalIp))
                    .map(|l| l.address)
                    .collect()
            });
            for k in self.listed(&at, &s.bgp_advertisements, &by_name) {
                used[k] = true;
                if let Some(plan) = plans.get_mut(k) {
                    for v in &vips {
                        if !plan.vips.contains(v) {
                            plan.vips.push(*v);
                        }
                    }
                }
            }
        }

        for (i, a) in bgp.advertisements.iter().enumerate() {
            let path = format!("bgp.advertisement[{i}].name");
            if !used[i] && by_name.get(a.name.as_str()) == Some(&i) && !flagged.contains(&path) {
                self.problem(
                    path,
                    format!(
                        "no address_pool or service lists {:?} in bgp_advertisements, so it announces nothing",
                        a.name
                    ),
                );
            }
        }
        if bgp.peers.is_empty() && !bgp.advertisements.is_empty() {
            self.problem(
                "bgp.peer",
                "there is no [[bgp.peer]] for the advertisements to go to",
            );
        }
        plans
    }

    /// The advertisements (indices) a `bgp_advertisements` list at `path`
    /// names; a name that is no advertisement, or is listed twice, is a
    /// problem.
    fn listed(
        &mut self,
        path: &str,
        names: &[String],
        by_name: &HashMap<&str, usize>,
    ) -> Vec<usize> {
        let mut found = Vec::new();
        for (j, name) in names.iter().enumerate() {
            let at = format!("{path}[{j}]");
            match by_name.get(name.as_str()) {
                None => self.problem(
                    at,
                    format!("{name:?} is not the name of any [[bgp.advertisement]]"),
                ),
                Some(&k) if found.contains(&k) => {
                    self.problem(at, format!("{name:?} is listed twice"));
                }
                Some(&k) => found.push(k),
            }
        }
        found
    }
}
