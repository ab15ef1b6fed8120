//! `[[instance]]`: the instances of a tier run from one file, each with its
//! own node, SNAT and host addresses (`[[instance.port]]`, a port-level override
//! of the per-instance keys of `[[port]]`), and the choice of the instance
//! a plan is for (`portico run --instance NAME`).
//!
//! Rules (every problem at once, with its path):
//! * instance names are unique DNS subdomain names, like node names (they
//!   name member Leases);
//! * an `[[instance.port]]` names a `[[port]]`, once per instance;
//! * with instances declared, `[[port]]` leaves the per-instance keys
//!   empty (an address there would be claimed by every instance);
//! * no address belongs to two instances;
//! * every instance's addresses pass every check the `[[port]]` addresses
//!   pass (format, subnets, VIPs, address pools, BGP source addresses): the
//!   file is validated as each instance would run it, and the problems
//!   about an instance's own addresses are reported at
//!   `instance[k].port[m].…`;
//! * more than one instance needs `[kubernetes]` (the per-VIP ARP election
//!   runs on its member Leases) or BGP: a tier without `[kubernetes]`
//!   announces its VIPs by BGP only (no instance answers ARP for them,
//!   [`Plan::vips_by_arp`]), so it needs `[[bgp.peer]]`s and every service
//!   with a `vip` or `external_ips` needs `bgp_advertisements`; otherwise
//!   every instance would answer ARP for every VIP;
//! * with more than one instance and `[[bgp.peer]]`s, every instance has its
//!   own `bgp_router_id` (an IPv4 address, unique in the tier: RFC 4271
//!   §6.8) used in all its sessions, and no peer sets `source_address` (the
//!   source is each instance's own host address on the way to the peer);
//! * with instances declared, a plan is for a named instance that exists.

use super::Validator;
use crate::Problem;
use crate::plan::Plan;
use crate::schema::{ConfigFile, PortOverrideSection};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

/// Longest instance name: a node name (a DNS subdomain) that leaves room
/// in the member Lease's name (`<lease_name>-member.<name>`, at most 253).
pub const MAX_INSTANCE_NAME_BYTES: usize = 180;

/// Which instance a plan is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceChoice<'a> {
    /// No name given: the file must declare no `[[instance]]`.
    Unnamed,
    /// This instance (`--instance`): its `[[instance]]` when the file
    /// declares any (it must exist), else only its name in the tier.
    Named(&'a str),
    /// Check every instance (`portico check`); the plan returned is the
    /// first instance's.
    Every,
}

/// Validate `file` into the plan of the instance `choice` names.
pub fn validate_instance(
    file: &ConfigFile,
    choice: InstanceChoice<'_>,
) -> Result<Plan, Vec<Problem>> {
    if file.instances.is_empty() {
        let mut v = Validator::default();
        let mut plan = v.run(file);
        if let InstanceChoice::Named(name) = choice {
            plan.instance = Some(name.to_owned());
        }
        return if v.problems.is_empty() {
            Ok(plan)
        } else {
            Err(v.problems)
        };
    }
    let mut v = Validator::default();
    let resolved = v.instances(file);
    let router_ids = v.instance_router_ids(file);
    let selected = match choice {
        InstanceChoice::Named(name) => match file.instances.iter().position(|i| i.name == name) {
            Some(k) => Some(k),
            None => {
                let names: Vec<&str> = file.instances.iter().map(|i| i.name.as_str()).collect();
                v.problem(
                    "instance",
                    format!(
                        "no [[instance]] is named {name:?} (declared: {})",
                        names.join(", ")
                    ),
                );
                None
            }
        },
        InstanceChoice::Unnamed => {
            v.problem(
                "instance",
                format!(
                    "{} [[instance]] sections are declared: name this instance with \
                     `portico run --instance NAME` (or PORTICO_INSTANCE)",
                    file.instances.len()
                ),
            );
            None
        }
        InstanceChoice::Every => Some(0),
    };
    // The file as each instance runs it. The selected instance's (else the
    // first's) problems are all kept; the others' only where they are
    // about their own addresses.
    let primary = selected.unwrap_or(0);
    let mut plan = None;
    for (k, overrides) in resolved.iter().enumerate() {
        let only_own = k != primary;
        let merged = merged_file(file, overrides, router_ids.get(k).copied().flatten());
        let mut each = Validator::default();
        let p = each.run(&merged);
        for problem in each.problems {
            let mut problem = remap(problem, k, overrides);
            if router_ids.get(k).copied().flatten().is_some()
                && problem.path.starts_with("bgp.peer[")
                && problem.path.ends_with("].router_id")
            {
                // The identifier is the instance's own.
                problem.path = format!("instance[{k}].bgp_router_id");
            }
            let own = problem.path.starts_with(&format!("instance[{k}]"))
                || problem.reason.contains(&format!("instance[{k}]."));
            if (!only_own || own) && !v.problems.contains(&problem) {
                v.problems.push(problem);
            }
        }
        if k == primary {
            plan = Some(p);
        }
    }
    let Some(mut plan) = plan else {
        return Err(v.problems);
    };
    plan.instance = selected.map(|k| file.instances[k].name.clone());
    plan.vips_by_arp = file.instances.len() <= 1 || file.kubernetes.is_some();
    if v.problems.is_empty() {
        Ok(plan)
    } else {
        Err(v.problems)
    }
}

/// An instance's overrides resolved: `(override index m, port index)`.
type Overrides = Vec<(usize, usize, PortOverrideSection)>;

/// `file` with instance `overrides` put into its ports and the instance's
/// BGP identifier into every peer.
fn merged_file(
    file: &ConfigFile,
    overrides: &Overrides,
    router_id: Option<Ipv4Addr>,
) -> ConfigFile {
    let mut merged = file.clone();
    merged.instances.clear();
    if let Some(id) = router_id {
        for peer in &mut merged.bgp.peers {
            peer.router_id = id;
        }
    }
    for (_, port, o) in overrides {
        if let Some(p) = merged.ports.get_mut(*port) {
            o.apply_to(p);
        }
    }
    merged
}

/// Say `instance[k].port[m].key[j]` where the merged file said
/// `port[i].key[j]`, in the path and the reason.
fn remap(mut problem: Problem, k: usize, overrides: &Overrides) -> Problem {
    for (m, port, _) in overrides {
        for key in PortOverrideSection::KEYS {
            let from = format!("port[{port}].{key}[");
            let to = format!("instance[{k}].port[{m}].{key}[");
            if problem.path.starts_with(&from) {
                problem.path = problem.path.replacen(&from, &to, 1);
            }
            problem.reason = problem.reason.replace(&from, &to);
        }
    }
    problem
}

impl Validator {
    /// Each instance's `bgp_router_id`, parsed (`None`: not set or not an
    /// address); problems for bad, shared or missing ones.
    fn instance_router_ids(&mut self, file: &ConfigFile) -> Vec<Option<Ipv4Addr>> {
        let needed = file.instances.len() > 1 && !file.bgp.peers.is_empty();
        let mut first_with: HashMap<Ipv4Addr, usize> = HashMap::new();
        let mut ids = Vec::with_capacity(file.instances.len());
        for (k, inst) in file.instances.iter().enumerate() {
            let path = format!("instance[{k}].bgp_router_id");
            let id = match &inst.bgp_router_id {
                None => {
                    if needed {
                        self.problem(
                            &path,
                            format!(
                                "missing: with {} instances and [[bgp.peer]]s every instance \
                                 needs its own BGP identifier (an IPv4 address unique in the \
                                 tier, RFC 4271 §6.8)",
                                file.instances.len()
                            ),
                        );
                    }
                    None
                }
                Some(text) => match text.parse::<Ipv4Addr>() {
                    Ok(id) if id.is_unspecified() => {
                        self.problem(&path, "0.0.0.0 is not a BGP identifier (RFC 6286 §2.1)");
                        None
                    }
                    Ok(id) => Some(id),
                    Err(_) => {
                        self.problem(
                            &path,
                            format!("{text:?} is not an IPv4 address (e.g. \"192.0.2.11\")"),
                        );
                        None
                    }
                },
            };
            if let Some(id) = id
                && let Some(first) = first_with.insert(id, k)
            {
                self.problem(
                    &path,
                    format!("{id} is already instance[{first}]'s BGP identifier"),
                );
            }
            ids.push(id);
        }
        ids
    }

    /// The instance sections' own rules; each instance's resolved
    /// overrides.
    fn instances(&mut self, file: &ConfigFile) -> Vec<Overrides> {
        let port_index: HashMap<&str, usize> = file
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.as_str(), i))
            .collect();
        for (i, p) in file.ports.iter().enumerate() {
            for key in PortOverrideSection::keys_set_in(p) {
                self.problem(
                    format!("port[{i}].{key}"),
                    "with [[instance]] sections each instance has its own addresses: \
                     set them in each [[instance.port]] instead",
                );
            }
        }
        let count = file.instances.len();
        if count > 1 && file.kubernetes.is_none() {
            if file.bgp.peers.is_empty() {
                self.problem(
                    "instance",
                    format!(
                        "{count} instances need [kubernetes] (the per-VIP ARP election runs on \
                         member Leases) or [[bgp.peer]]s (VIPs announced by BGP only): without \
                         either every instance would answer ARP for every VIP"
                    ),
                );
            } else {
                for (i, service) in file.services.iter().enumerate() {
                    let addressed = service.vip.is_some() || !service.external_ips.is_empty();
                    if addressed && service.bgp_advertisements.is_empty() {
                        self.problem(
                            format!("service[{i}].bgp_advertisements"),
                            format!(
                                "with {count} instances and no [kubernetes], VIPs are announced \
                                 by BGP only (no instance answers ARP for them): list the \
                                 [[bgp.advertisement]]s this service's addresses are announced \
                                 with, or add [kubernetes] for the per-VIP ARP election"
                            ),
                        );
                    }
                }
            }
        }
        if count > 1 {
            for (i, peer) in file.bgp.peers.iter().enumerate() {
                if peer.source_address.is_some() {
                    self.problem(
                        format!("bgp.peer[{i}].source_address"),
                        format!(
                            "with {count} instances leave it out: each instance's session \
                             starts from its own host address on the way to the peer (set \
                             host_addresses in [[instance.port]])"
                        ),
                    );
                }
            }
        }
        let mut names = HashMap::new();
        let mut owner_of: HashMap<IpAddr, String> = HashMap::new();
        let mut resolved = Vec::with_capacity(file.instances.len());
        for (k, inst) in file.instances.iter().enumerate() {
            self.unique_name("instance", k, &inst.name, &mut names);
            let good_name =
                super::is_dns_subdomain(&inst.name) && inst.name.len() <= MAX_INSTANCE_NAME_BYTES;
            if !inst.name.is_empty() && !good_name {
                self.problem(
                    format!("instance[{k}].name"),
                    format!(
                        "{:?} is not a DNS subdomain name of at most {MAX_INSTANCE_NAME_BYTES} \
                         bytes (lower-case letters, digits, '-' and '.', like a node name): \
                         it names the instance's member Lease",
                        inst.name
                    ),
                );
            }
            let mut seen_ports: HashMap<usize, usize> = HashMap::new();
            let mut overrides = Vec::new();
            for (m, o) in inst.ports.iter().enumerate() {
                let at = format!("instance[{k}].port[{m}]");
                let Some(&port) = port_index.get(o.name.as_str()) else {
                    self.problem(
                        format!("{at}.name"),
                        format!("no [[port]] is named {:?}", o.name),
                    );
                    continue;
                };
                if let Some(first) = seen_ports.insert(port, m) {
                    self.problem(
                        format!("{at}.name"),
                        format!(
                            "port {:?} is already set at instance[{k}].port[{first}]",
                            o.name
                        ),
                    );
                    continue;
                }
                for (key, list) in [
                    ("node_addresses", &o.node_addresses),
                    ("snat_addresses", &o.snat_addresses),
                    ("host_addresses", &o.host_addresses),
                ] {
                    for (j, text) in list.iter().enumerate() {
                        // Format problems come from the merged check.
                        let Some(addr) = text
                            .split('/')
                            .next()
                            .and_then(|a| a.parse::<IpAddr>().ok())
                        else {
                            continue;
                        };
                        let path = format!("{at}.{key}[{j}]");
                        match owner_of.get(&addr) {
                            Some(first) if !first.starts_with(&format!("instance[{k}].")) => {
                                self.problem(
                                    &path,
                                    format!("{addr} is already the address of another instance ({first})"),
                                );
                            }
                            Some(_) => {}
                            None => {
                                owner_of.insert(addr, path);
                            }
                        }
                    }
                }
                overrides.push((m, port, o.clone()));
            }
            resolved.push(overrides);
        }
        resolved
    }
}
