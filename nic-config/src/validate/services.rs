//! `[[service]]`: names, listeners (VIP, external IPs, NodePort on every
//! node address of the service's family), session affinity and backends.
//!
//! A service is single-family (Portico does no NAT46/64): its family is
//! that of the first of its VIP, external IPs and backends that is an
//! address (else of the first node address, for a NodePort-only service
//! without backends), and every other address of it is of that family —
//! one that is not is a problem at its own path naming the address that
//! set the family. Its NodePort listens on the node addresses of its
//! family, and full NAT needs a SNAT address of its family.

use super::Validator;
use super::limits::{MAX_AFFINITY_TIMEOUT_S, MAX_BACKENDS, MAX_WEIGHT};
use super::ports::Ports;
use crate::addr::family_name;
use crate::plan::{
    AddressRole, BackendPlan, ListenerKind, ListenerPlan, ServicePlan, SynProxyPlan,
};
use crate::schema::{
    ConfigFile, DEFAULT_AFFINITY_TIMEOUT_S, DEFAULT_SYN_PROXY_HALF_OPEN_THRESHOLD,
    MAX_SYN_PROXY_HALF_OPEN_THRESHOLD, Protocol, ServiceSection, SessionAffinity, SynProxy,
};
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;

impl Validator {
    /// `port_range`: the SNAT port range, when it is valid.
    pub(super) fn services(
        &mut self,
        file: &ConfigFile,
        ports: &Ports<'_>,
        port_range: Option<&RangeInclusive<u16>>,
    ) -> Vec<ServicePlan> {
        let owners = &ports.owners;
        let node_addrs = ports.with_role(AddressRole::Node);
        let snat_addrs = ports.with_role(AddressRole::Snat);
        let dual: Vec<IpAddr> = node_addrs
            .iter()
            .copied()
            .filter(|a| snat_addrs.contains(a))
            .collect();
        let any_node_addresses = file.ports.iter().any(|p| !p.node_addresses.is_empty());
        let any_snat_addresses = file.ports.iter().any(|p| !p.snat_addresses.is_empty());

        let mut services = Vec::new();
        let mut service_names: HashMap<&str, usize> = HashMap::new();
        // (protocol, address, port) → (service index, path) of its first use
        let mut listeners_taken: HashMap<(Protocol, IpAddr, u16), (usize, String)> = HashMap::new();
        let mut snat_wanted_at: Option<usize> = None;
        for (i, s) in file.services.iter().enumerate() {
            let at = format!("service[{i}]");
            self.unique_name("service", i, &s.name, &mut service_names);
            if s.vip.is_none() && s.node_port.is_none() && s.external_ips.is_empty() {
                self.problem(
                    at.clone(),
                    "has nowhere to listen: give at least one of vip, node_port, external_ips",
                );
            }
            let port = self
                .ranged(&format!("{at}.port"), s.port, 1..=65_535)
                .and_then(|p| u16::try_from(p).ok());

            let mut listeners = Vec::new();
            let mut candidates: Vec<(String, IpAddr, Option<u16>, ListenerKind)> = Vec::new();
            // The service's family and the path of the address that set it.
            let mut family: Option<(bool, String)> = None;
            if let Some(text) = &s.vip {
                let path = format!("{at}.vip");
                if let Some(addr) = self.host(&path, text)
                    && self.same_family(&path, addr, &mut family)
                {
                    candidates.push((path, addr, port, ListenerKind::Vip));
                }
            }
            for (j, text) in s.external_ips.iter().enumerate() {
                let path = format!("{at}.external_ips[{j}]");
                if let Some(addr) = self.host(&path, text)
                    && self.same_family(&path, addr, &mut family)
                {
                    candidates.push((path, addr, port, ListenerKind::ExternalIp));
                }
            }
            if family.is_none() {
                // A NodePort-only service: its backends' family (checked
                // with the backends below), else the first node address's.
                family = s
                    .backends
                    .iter()
                    .enumerate()
                    .find_map(|(j, b)| {
                        let addr = b.address.parse::<IpAddr>().ok()?;
                        Some((addr.is_ipv4(), format!("{at}.backends[{j}].address")))
                    })
                    .or_else(|| {
                        node_addrs
                            .first()
                            .map(|a| (a.is_ipv4(), "the first node address".to_owned()))
                    });
            }
            let ipv4 = family.as_ref().is_none_or(|(v4, _)| *v4);
            let family_word = if ipv4 { "IPv4" } else { "IPv6" };
            if let Some(np) = s.node_port {
                let path = format!("{at}.node_port");
                let np = self
                    .ranged(&path, np, 1..=65_535)
                    .and_then(|p| u16::try_from(p).ok());
                let family_nodes: Vec<IpAddr> = node_addrs
                    .iter()
                    .copied()
                    .filter(|a| a.is_ipv4() == ipv4)
                    .collect();
                if !any_node_addresses {
                    self.problem(
                        &path,
                        "needs a node address, but no port has node_addresses",
                    );
                } else if family_nodes.is_empty() {
                    if ports.broken.is_empty() {
                        self.problem(
                            &path,
                            format!(
                                "needs an {family_word} node address (the service is {family_word}), but no port has one"
                            ),
                        );
                    }
                } else if let Some(np) = np {
                    if let Some(range) = &port_range
                        && range.contains(&np)
                        && let Some(addr) = dual.iter().find(|a| a.is_ipv4() == ipv4)
                    {
                        self.problem(
                            &path,
                            format!(
                                "{np} is inside the SNAT port range {}-{}, and {addr} is both a node and a SNAT address",
                                range.start(),
                                range.end()
                            ),
                        );
                    }
                    for &addr in &family_nodes {
                        candidates.push((path.clone(), addr, Some(np), ListenerKind::NodePort));
                    }
                }
            }
            let mut reported: HashSet<String> = HashSet::new();
            for (path, addr, lport, kind) in candidates {
                if kind != ListenerKind::NodePort
                    && let Some(owner) = owners.get(&addr)
                {
                    self.problem(
                        &path,
                        format!("{addr} is the gateway's own address ({})", owner.path),
                    );
                    continue;
                }
                let Some(lport) = lport else { continue };
                let key = (s.protocol, addr, lport);
                if let Some((other, first)) = listeners_taken.get(&key) {
                    if reported.insert(path.clone()) {
                        let whose = if *other == i {
                            "this service".to_owned()
                        } else {
                            format!("service[{other}] ({:?})", file.services[*other].name)
                        };
                        self.problem(
                            &path,
                            format!(
                                "{} {addr}:{lport} is already served by {whose} at {first}",
                                s.protocol
                            ),
                        );
                    }
                    continue;
                }
                listeners_taken.insert(key, (i, path));
                listeners.push(ListenerPlan {
                    address: addr,
                    port: lport,
                    kind,
                });
            }

            if s.snat && snat_wanted_at.is_none() {
                snat_wanted_at = Some(i);
            }
            if s.snat
                && any_snat_addresses
                && ports.broken.is_empty()
                && !snat_addrs.iter().any(|a| a.is_ipv4() == ipv4)
            {
                self.problem(
                    format!("{at}.snat"),
                    format!(
                        "full NAT of an {family_word} service needs an {family_word} SNAT address, \
                         but no port has one (or set snat = false)"
                    ),
                );
            }
            let affinity_timeout_ms = match (s.session_affinity, s.affinity_timeout_s) {
                (SessionAffinity::None, None) => None,
                (SessionAffinity::None, Some(_)) => {
                    self.problem(
                        format!("{at}.affinity_timeout_s"),
                        "only applies with session_affinity = \"client_ip\"",
                    );
                    None
                }
                (SessionAffinity::ClientIp, t) => {
                    let t = t.unwrap_or(DEFAULT_AFFINITY_TIMEOUT_S);
                    self.ranged(
                        &format!("{at}.affinity_timeout_s"),
                        t,
                        1..=MAX_AFFINITY_TIMEOUT_S,
                    )
                    .map(|t| t * 1000)
                }
            };
            let syn_proxy = self.syn_proxy(&at, s);
            if s.tcp_pickup && s.protocol == Protocol::Udp {
                self.problem(format!("{at}.tcp_pickup"), "only applies to tcp services");
            } else if s.tcp_pickup && s.snat {
                self.problem(
                    format!("{at}.tcp_pickup"),
                    "needs snat = false: a connection picked up mid-stream would reach the \
                     backend from this gateway's SNAT address, which has no such connection",
                );
            } else if s.tcp_pickup && syn_proxy != SynProxyPlan::Off {
                self.problem(
                    format!("{at}.tcp_pickup"),
                    "cannot be combined with syn_proxy: with the SYN proxy an ACK without a \
                     flow is checked as a SYN cookie",
                );
            }
            if s.protocol == Protocol::Udp && s.tcp_backend_gone.is_some() {
                self.problem(
                    format!("{at}.tcp_backend_gone"),
                    "only applies to tcp services (udp flows move to another backend)",
                );
            }

            if s.backends.len() > MAX_BACKENDS {
                self.problem(
                    format!("{at}.backends"),
                    format!(
                        "{} backends exceed the maximum of {MAX_BACKENDS}",
                        s.backends.len()
                    ),
                );
            }
            let mut backends = Vec::new();
            let mut backend_at: HashMap<SocketAddr, usize> = HashMap::new();
            for (j, b) in s.backends.iter().enumerate() {
                let bat = format!("{at}.backends[{j}]");
                let apath = format!("{bat}.address");
                let addr = self
                    .host(&apath, &b.address)
                    .filter(|a| self.same_family(&apath, *a, &mut family));
                let bport = self
                    .ranged(&format!("{bat}.port"), b.port, 1..=65_535)
                    .and_then(|p| u16::try_from(p).ok());
                let weight = self
                    .ranged(&format!("{bat}.weight"), b.weight, 0..=MAX_WEIGHT)
                    .and_then(|w| u32::try_from(w).ok());
                let (Some(addr), Some(bport), Some(weight)) = (addr, bport, weight) else {
                    continue;
                };
                let sa = SocketAddr::new(addr, bport);
                if let Some(first) = backend_at.get(&sa) {
                    self.problem(
                        bat,
                        format!("backend {sa} is already listed at {at}.backends[{first}]"),
                    );
                    continue;
                }
                backend_at.insert(sa, j);
                backends.push(BackendPlan {
                    address: sa,
                    weight,
                    condition: b.condition,
                });
            }
            services.push(ServicePlan {
                name: s.name.clone(),
                protocol: s.protocol,
                listeners,
                backends,
                snat: s.snat,
                affinity_timeout_ms,
                tcp_backend_gone: s.tcp_backend_gone.unwrap_or_default(),
                syn_proxy,
                tcp_pickup: s.tcp_pickup,
            });
        }
        if let Some(i) = snat_wanted_at
            && !any_snat_addresses
        {
            self.problem(
                format!("service[{i}].snat"),
                "full NAT needs a SNAT address, but no port has snat_addresses (or set snat = false)",
            );
        }
        services
    }

    /// Whether `addr` (at `path`) is of the service's `family`; sets the
    /// family when it is the first address, else a problem when not.
    fn same_family(
        &mut self,
        path: &str,
        addr: IpAddr,
        family: &mut Option<(bool, String)>,
    ) -> bool {
        match family {
            None => {
                *family = Some((addr.is_ipv4(), path.to_owned()));
                true
            }
            Some((v4, _)) if *v4 == addr.is_ipv4() => true,
            Some((_, first)) => {
                let other = if addr.is_ipv4() { "IPv6" } else { "IPv4" };
                self.problem(
                    path,
                    format!(
                        "{addr} is {}, but the service is {other} (by {first}): a service is \
                         single-family, its addresses and backends all IPv4 or all IPv6 (no NAT46/64)",
                        family_name(addr)
                    ),
                );
                false
            }
        }
    }

    /// `syn_proxy` and `syn_proxy_half_open_threshold` of the service at `at`.
    fn syn_proxy(&mut self, at: &str, s: &ServiceSection) -> SynProxyPlan {
        if s.protocol == Protocol::Udp && s.syn_proxy.is_some_and(|m| m != SynProxy::Off) {
            self.problem(format!("{at}.syn_proxy"), "only applies to tcp services");
        }
        let mode = s.syn_proxy.unwrap_or_default();
        if mode != SynProxy::Auto && s.syn_proxy_half_open_threshold.is_some() {
            self.problem(
                format!("{at}.syn_proxy_half_open_threshold"),
                "only applies with syn_proxy = \"auto\"",
            );
        }
        match mode {
            _ if s.protocol == Protocol::Udp => SynProxyPlan::Off,
            SynProxy::Off => SynProxyPlan::Off,
            SynProxy::On => SynProxyPlan::On,
            SynProxy::Auto => self
                .half_open_threshold(
                    &format!("{at}.syn_proxy_half_open_threshold"),
                    s.syn_proxy_half_open_threshold,
                )
                .map_or(SynProxyPlan::Off, |half_open_threshold| {
                    SynProxyPlan::Auto {
                        half_open_threshold,
                    }
                }),
        }
    }

    /// A `syn_proxy_half_open_threshold` at `path` (absent: the default),
    /// if in range.
    pub(super) fn half_open_threshold(&mut self, path: &str, t: Option<u64>) -> Option<u32> {
        let t = t.unwrap_or(DEFAULT_SYN_PROXY_HALF_OPEN_THRESHOLD);
        self.ranged(path, t, 1..=MAX_SYN_PROXY_HALF_OPEN_THRESHOLD)
            .and_then(|t| u32::try_from(t).ok())
    }
}
