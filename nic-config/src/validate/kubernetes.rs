//! `[kubernetes]` and the LoadBalancer `[[address_pool]]`s, with the
//! Kubernetes name rules they use.

use super::Validator;
use super::limits::{
    DEBOUNCE_RANGE_MS, DEFAULT_DEBOUNCE_MAX_FACTOR, MAX_DEBOUNCE_MAX_MS, STATUS_WRITE_RATE_RANGE,
    STATUS_WRITES_IN_FLIGHT_RANGE,
};
use super::ports::Owner;
use crate::addr::{IpPrefix, IpRange};
use crate::plan::{
    AddressPoolPlan, KubernetesPlan, LeaderElectionPlan, ListenerKind, ServicePlan,
    StatusWritesPlan, SynProxyPlan,
};
use crate::schema::{AddressPoolSection, KubernetesSection, SynProxy};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Address blocks never handed out from a pool: "this network" (RFC 791),
/// loopback (RFC 1122), multicast (RFC 5771) with the reserved block and
/// the limited broadcast address (RFC 1112); in IPv6 `::/8` (unspecified,
/// loopback, IPv4-mapped and the rest of the reserved block, RFC 4291
/// §2.4), link-local `fe80::/10` (§2.5.6) and multicast `ff00::/8` (§2.7).
const NOT_POOLABLE: [(IpAddr, IpAddr, &str); 6] = [
    (
        IpAddr::V4(Ipv4Addr::new(0, 0, 0, 0)),
        IpAddr::V4(Ipv4Addr::new(0, 255, 255, 255)),
        "0.0.0.0/8 (this network)",
    ),
    (
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)),
        IpAddr::V4(Ipv4Addr::new(127, 255, 255, 255)),
        "127.0.0.0/8 (loopback)",
    ),
    (
        IpAddr::V4(Ipv4Addr::new(224, 0, 0, 0)),
        IpAddr::V4(Ipv4Addr::new(255, 255, 255, 255)),
        "224.0.0.0/3 (multicast and reserved)",
    ),
    (
        IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0)),
        IpAddr::V6(Ipv6Addr::new(
            0xff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff,
        )),
        "::/8 (unspecified, loopback, IPv4-mapped and reserved)",
    ),
    (
        IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0)),
        IpAddr::V6(Ipv6Addr::new(
            0xfebf, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff,
        )),
        "fe80::/10 (link-local)",
    ),
    (
        IpAddr::V6(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0)),
        IpAddr::V6(Ipv6Addr::new(
            0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff,
        )),
        "ff00::/8 (multicast)",
    ),
];

/// A DNS label (RFC 1123): 1 to 63 lowercase letters, digits and `-`,
/// starting and ending with a letter or digit. Kubernetes namespaces and
/// pool names.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// A DNS subdomain (RFC 1123): at most 253 bytes, DNS labels joined by `.`.
/// Most Kubernetes object names (a Lease's).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A Kubernetes qualified name (a label key): an optional DNS subdomain
/// prefix and `/`, then 1 to 63 letters, digits, `-`, `_`, `.`, starting and
/// ending with a letter or digit. `spec.loadBalancerClass` is one.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let b = name.as_bytes();
    prefix.is_none_or(is_dns_subdomain)
        && (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// Addresses a pool must not contain, sorted, each with what it is: the
/// gateway's own addresses and the standalone services' VIPs and external
/// IPs.
pub(super) fn not_poolable(
    owners: &HashMap<IpAddr, Owner>,
    services: &[ServicePlan],
) -> Vec<(IpAddr, String)> {
    let mut taken: Vec<(IpAddr, String)> = owners
        .iter()
        .map(|(addr, owner)| (*addr, format!("the gateway's own address ({})", owner.path)))
        .collect();
    for (i, s) in services.iter().enumerate() {
        for l in s
            .listeners
            .iter()
            .filter(|l| l.kind != ListenerKind::NodePort)
        {
            taken.push((
                l.address,
                format!("the {} of service[{i}] ({:?})", l.kind, s.name),
            ));
        }
    }
    taken.sort();
    taken.dedup_by_key(|(addr, _)| *addr);
    taken
}

impl Validator {
    pub(super) fn kubernetes(&mut self, k: &KubernetesSection) -> KubernetesPlan {
        let at = "kubernetes";
        if k.kubeconfig.as_deref() == Some("") {
            self.problem(
                format!("{at}.kubeconfig"),
                "is empty; leave it out to infer the cluster",
            );
        }
        if !is_qualified_name(&k.load_balancer_class) {
            self.problem(
                format!("{at}.load_balancer_class"),
                format!(
                    "{:?} is not a qualified name like \"example.com/name\" (what spec.loadBalancerClass accepts)",
                    k.load_balancer_class
                ),
            );
        }
        let debounce_ms = self.ranged(
            &format!("{at}.debounce_ms"),
            k.debounce_ms,
            DEBOUNCE_RANGE_MS,
        );
        let debounce_max_ms = match (debounce_ms, k.debounce_max_ms) {
            (Some(d), None) => Some(d * DEFAULT_DEBOUNCE_MAX_FACTOR),
            (Some(d), Some(max)) => self.ranged(
                &format!("{at}.debounce_max_ms"),
                max,
                d..=MAX_DEBOUNCE_MAX_MS,
            ),
            (None, _) => None,
        };
        let status_writes_per_s = self.ranged(
            &format!("{at}.status_writes_per_s"),
            k.status_writes_per_s,
            STATUS_WRITE_RATE_RANGE,
        );
        let status_write_burst = self.ranged(
            &format!("{at}.status_write_burst"),
            k.status_write_burst,
            STATUS_WRITE_RATE_RANGE,
        );
        let status_writes_in_flight = self.ranged(
            &format!("{at}.status_writes_in_flight"),
            k.status_writes_in_flight,
            STATUS_WRITES_IN_FLIGHT_RANGE,
        );
        if !is_dns_subdomain(&k.lease_name) {
            self.problem(
                format!("{at}.lease_name"),
                format!(
                    "{:?} is not a Kubernetes object name (lowercase DNS subdomain)",
                    k.lease_name
                ),
            );
        }
        if !is_dns_label(&k.lease_namespace) {
            self.problem(
                format!("{at}.lease_namespace"),
                format!(
                    "{:?} is not a Kubernetes namespace name (lowercase DNS label)",
                    k.lease_namespace
                ),
            );
        }
        if k.retry_period_ms == 0 {
            self.problem(format!("{at}.retry_period_ms"), "must be at least 1 ms");
        } else if k.renew_deadline_ms <= k.retry_period_ms {
            self.problem(
                format!("{at}.renew_deadline_ms"),
                format!(
                    "{} ms must be more than retry_period_ms ({} ms), so a renewal can be retried",
                    k.renew_deadline_ms, k.retry_period_ms
                ),
            );
        } else if k.lease_duration_ms <= k.renew_deadline_ms {
            self.problem(
                format!("{at}.lease_duration_ms"),
                format!(
                    "{} ms must be more than renew_deadline_ms ({} ms), so a leader stops before its lease can be taken over",
                    k.lease_duration_ms, k.renew_deadline_ms
                ),
            );
        }
        let syn_proxy_half_open_threshold = self
            .half_open_threshold(
                &format!("{at}.syn_proxy_half_open_threshold"),
                k.syn_proxy_half_open_threshold,
            )
            .unwrap_or(1);
        let syn_proxy = match k.syn_proxy.unwrap_or_default() {
            SynProxy::Off => SynProxyPlan::Off,
            SynProxy::On => SynProxyPlan::On,
            SynProxy::Auto => SynProxyPlan::Auto {
                half_open_threshold: syn_proxy_half_open_threshold,
            },
        };
        let mut external_ip_cidrs = Vec::new();
        for (i, text) in k.external_ip_cidrs.iter().enumerate() {
            let path = format!("{at}.external_ip_cidrs[{i}]");
            match text.parse::<IpPrefix>() {
                Ok(p) if p.is_network() => external_ip_cidrs.push(p),
                Ok(p) => self.problem(
                    path,
                    format!("{text:?} has host bits set; the network is {}", p.network()),
                ),
                Err(e) => self.problem(
                    path,
                    format!(
                        "{text:?}: {e} (a CIDR like \"203.0.113.0/24\" or \"2001:db8:1::/64\")"
                    ),
                ),
            }
        }
        if let Some(id) = &k.identity
            && id.trim().is_empty()
        {
            self.problem(
                format!("{at}.identity"),
                "is empty; leave it out to use the host name",
            );
        }
        KubernetesPlan {
            kubeconfig: k.kubeconfig.as_ref().map(Into::into),
            load_balancer_class: k.load_balancer_class.clone(),
            serve_unclassed: k.serve_unclassed,
            debounce_ms: debounce_ms.unwrap_or(0),
            debounce_max_ms: debounce_max_ms.unwrap_or(0),
            status_writes: StatusWritesPlan {
                per_s: u32::try_from(status_writes_per_s.unwrap_or(1)).unwrap_or(u32::MAX),
                burst: u32::try_from(status_write_burst.unwrap_or(1)).unwrap_or(u32::MAX),
                in_flight: usize::try_from(status_writes_in_flight.unwrap_or(1))
                    .unwrap_or(usize::MAX),
            },
            leader_election: LeaderElectionPlan {
                lease_name: k.lease_name.clone(),
                lease_namespace: k.lease_namespace.clone(),
                lease_duration_ms: k.lease_duration_ms,
                renew_deadline_ms: k.renew_deadline_ms,
                retry_period_ms: k.retry_period_ms,
                identity: k.identity.clone(),
            },
            external_ip_cidrs,
            syn_proxy,
            syn_proxy_half_open_threshold,
        }
    }

    /// `taken`: addresses a pool must not contain, sorted, with what they
    /// are.
    pub(super) fn address_pools(
        &mut self,
        pools: &[AddressPoolSection],
        taken: &[(IpAddr, String)],
    ) -> Vec<AddressPoolPlan> {
        let mut plans = Vec::new();
        let mut names: HashMap<&str, usize> = HashMap::new();
        // Every valid entry so far, with its path and text.
        let mut entries: Vec<(IpRange, String, &str)> = Vec::new();
        for (i, pool) in pools.iter().enumerate() {
            let at = format!("address_pool[{i}]");
            if !is_dns_label(&pool.name) {
                self.problem(
                    format!("{at}.name"),
                    format!(
                        "{:?} is not a pool name (1 to 63 lowercase letters, digits and -)",
                        pool.name
                    ),
                );
            } else if let Some(first) = names.get(pool.name.as_str()) {
                self.problem(
                    format!("{at}.name"),
                    format!(
                        "{:?} is already the name of address_pool[{first}]",
                        pool.name
                    ),
                );
            } else {
                names.insert(&pool.name, i);
            }
            if pool.addresses.is_empty() {
                self.problem(
                    format!("{at}.addresses"),
                    "is empty; a pool needs addresses",
                );
            }
            let mut ranges = Vec::new();
            let mut all_parsed = true;
            for (j, text) in pool.addresses.iter().enumerate() {
                let path = format!("{at}.addresses[{j}]");
                let range = match text.parse::<IpRange>() {
                    Ok(r) => r,
                    Err(e) => {
                        self.problem(path, e.to_string());
                        all_parsed = false;
                        continue;
                    }
                };
                if let Some((_, _, what)) = NOT_POOLABLE.iter().find(|(first, last, _)| {
                    range.overlaps(&IpRange {
                        first: *first,
                        last: *last,
                    })
                }) {
                    self.problem(path, format!("{text} overlaps {what}"));
                    all_parsed = false;
                    continue;
                }
                if let Some((_, first, first_text)) =
                    entries.iter().find(|(other, _, _)| other.overlaps(&range))
                {
                    self.problem(path, format!("{text} overlaps {first_text} at {first}"));
                    all_parsed = false;
                    continue;
                }
                let start = taken.partition_point(|(addr, _)| *addr < range.first);
                if let Some((addr, what)) = taken.get(start).filter(|(a, _)| range.contains(*a)) {
                    self.problem(path, format!("{text} contains {addr}, {what}"));
                    all_parsed = false;
                    continue;
                }
                entries.push((range, path, text));
                ranges.push(range);
            }
            let plan = AddressPoolPlan {
                name: pool.name.clone(),
                ranges,
                auto_assign: pool.auto_assign,
                avoid_buggy_ips: pool.avoid_buggy_ips,
            };
            if all_parsed && plan.has_family(true) && plan.size_of_family(true) == 0 {
                self.problem(
                    format!("{at}.addresses"),
                    if plan.has_family(false) {
                        "has no IPv4 address left to hand out: every IPv4 one ends in .0 or .255 \
                         and avoid_buggy_ips is set"
                    } else {
                        "has no address left to hand out: every one ends in .0 or .255 and \
                         avoid_buggy_ips is set"
                    },
                );
            }
            plans.push(plan);
        }
        plans
    }
}
