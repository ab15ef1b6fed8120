//! From the file as written ([`ConfigFile`]) to a [`Plan`], or every
//! [`Problem`] of the file at once.
//!
//! Each problem names the key it is about with a path in the file's own
//! terms: tables by key (`dataplane.conntrack.capacity`), arrays of tables
//! and arrays by index in file order (`port[1].snat_addresses[0]`,
//! `service[0].backends[2].port`). A problem is reported where it can be
//! fixed (a duplicate at its second occurrence) and only once: a value that
//! failed to parse is left out of later cross-checks, so one mistake does
//! not cascade into several problems.
//!
//! One file per section of the configuration file, each adding to one
//! `Validator`: `dataplane` (`[dataplane]` and its tables; the af_packet
//! driver's `[dataplane.afpacket]` in `afpacket`), `ports`
//! (`[[port]]`, their addresses and roles), `dpdk` (`[dpdk]` and the
//! ports' DPDK devices), `routes` (`[[route]]` and `[[neighbour]]`),
//! `services` (`[[service]]`), `kubernetes` (`[kubernetes]` and
//! `[[address_pool]]`), `bgp` (`[bgp]`: portico-bgp's own checks and
//! the cross-checks with ports, pools and services) and `instances`
//! (`[[instance]]`: the file as each instance runs it, around the rest). The bounds values are checked against are in
//! [`limits`]. `Validator::run` calls the sections in a fixed order (the
//! order the problems are listed in); later sections see what earlier
//! ones resolved (port names, owned addresses, connected subnets).

mod afpacket;
mod bgp;
mod dataplane;
mod dpdk;
mod instances;
mod kubernetes;
pub mod limits;
mod ports;
mod routes;
mod services;

pub use dataplane::default_syn_proxy_flows;
pub use instances::{InstanceChoice, validate_instance};
pub use kubernetes::{is_dns_label, is_dns_subdomain, is_qualified_name};
pub use limits::*;

use crate::Problem;
use crate::addr::{MacAddr, is_host_address, is_link_local};
use crate::plan::{AddressRole, Plan};
use crate::schema::ConfigFile;
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::ops::RangeInclusive;

/// Validate a parsed file into a plan (for a file without `[[instance]]`;
/// see [`validate_instance`]).
pub fn validate(file: &ConfigFile) -> Result<Plan, Vec<Problem>> {
    validate_instance(file, InstanceChoice::Unnamed)
}

#[derive(Default)]
struct Validator {
    problems: Vec<Problem>,
}

impl Validator {
    fn problem(&mut self, path: impl Into<String>, reason: impl Into<String>) {
        self.problems.push(Problem {
            path: path.into(),
            reason: reason.into(),
        });
    }

    /// `value` if inside `range`, else a problem.
    fn ranged(&mut self, path: &str, value: u64, range: RangeInclusive<u64>) -> Option<u64> {
        if range.contains(&value) {
            Some(value)
        } else {
            self.problem(
                path,
                format!(
                    "{value} is out of range {}..={}",
                    range.start(),
                    range.end()
                ),
            );
            None
        }
    }

    /// A unicast host address of either family, not link-local.
    fn host(&mut self, path: &str, text: &str) -> Option<IpAddr> {
        let addr = self.host_or_link_local(path, text)?;
        if is_link_local(addr) {
            self.problem(
                path,
                format!("{addr} is link-local (fe80::/10), valid on one link only; use a global or unique-local address"),
            );
            return None;
        }
        Some(addr)
    }

    /// A unicast host address of either family, link-local allowed.
    fn host_or_link_local(&mut self, path: &str, text: &str) -> Option<IpAddr> {
        match text.parse::<IpAddr>() {
            Ok(addr) if is_host_address(addr) => Some(addr),
            Ok(addr) => {
                self.problem(path, format!("{addr} is not a unicast host address"));
                None
            }
            Err(_) => {
                self.problem(path, format!("{text:?} is not an IP address"));
                None
            }
        }
    }

    fn mac(&mut self, path: &str, text: &str) -> Option<MacAddr> {
        match text.parse::<MacAddr>() {
            Ok(mac) if mac.is_unicast() => Some(mac),
            Ok(mac) => {
                self.problem(path, format!("{mac} is not a unicast MAC address"));
                None
            }
            Err(e) => {
                self.problem(path, e.to_string());
                None
            }
        }
    }

    /// Seconds to milliseconds, at least `min_s` seconds.
    fn seconds_ms(&mut self, path: &str, seconds: u64, min_s: u64) -> Option<u64> {
        if seconds < min_s {
            self.problem(
                path,
                format!("{seconds} s is below the minimum of {min_s} s"),
            );
            return None;
        }
        let ms = seconds.checked_mul(1000);
        if ms.is_none() {
            self.problem(path, format!("{seconds} s is too large"));
        }
        ms
    }

    /// `{section}[{index}].name`: not empty, and not the name of an earlier
    /// element of `section` (`names`: those so far, with their index).
    fn unique_name<'f>(
        &mut self,
        section: &str,
        index: usize,
        name: &'f str,
        names: &mut HashMap<&'f str, usize>,
    ) {
        let path = format!("{section}[{index}].name");
        if name.is_empty() {
            self.problem(path, "is empty");
        } else if let Some(first) = names.get(name) {
            self.problem(
                path,
                format!("{name:?} is already the name of {section}[{first}]"),
            );
        } else {
            names.insert(name, index);
        }
    }

    /// A list of CPU numbers at `path`, each listed once.
    fn core_list(&mut self, path: &str, list: &[u64]) -> Vec<usize> {
        let mut seen = HashSet::new();
        let mut cores = Vec::with_capacity(list.len());
        for (i, &core) in list.iter().enumerate() {
            if !seen.insert(core) {
                self.problem(
                    format!("{path}[{i}]"),
                    format!("core {core} is listed twice"),
                );
            }
            cores.push(usize::try_from(core).unwrap_or(usize::MAX));
        }
        cores
    }

    /// Every section, in the order their problems are listed.
    fn run(&mut self, file: &ConfigFile) -> Plan {
        let dataplane = self.dataplane(file);
        let ports = self.ports(file);
        let vip_port = self.roles(file);
        let dpdk = self.dpdk(file);
        let routes = self.routes(file, &ports);
        let neighbours = self.neighbours(file, &ports);
        let services = self.services(file, &ports, dataplane.port_range.as_ref());
        let afxdp = self.afxdp(file);
        let afpacket = self.afpacket(&file.dataplane.afpacket);
        let neighbour_table = self.neighbour_table(&file.dataplane.neighbour_table);
        let kubernetes = file.kubernetes.as_ref().map(|k| self.kubernetes(k));
        let taken = kubernetes::not_poolable(&ports.owners, &services);
        let address_pools = self.address_pools(&file.address_pools, &taken);
        let bgp = self.bgp(file, &ports, &services, &address_pools);
        Plan {
            dataplane: dataplane.into_plan(
                file,
                ports.with_role(AddressRole::Snat),
                afxdp,
                afpacket,
                neighbour_table,
            ),
            ports: ports.plans,
            vip_port,
            addresses: ports.addresses,
            routes,
            neighbours,
            services,
            dpdk,
            kubernetes,
            address_pools,
            bgp,
            instance: None,
            vips_by_arp: true,
        }
    }
}
