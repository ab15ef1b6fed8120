//! `[[port]]`: names, interfaces, drivers, MACs and MTUs, the addresses
//! each port owns (node and SNAT) with their connected subnets, and the
//! ports' roles.

use super::Validator;
use super::limits::{DPDK_AVAILABLE, MAX_INTERFACE_NAME_BYTES, MTU_RANGE};
use crate::addr::{Ipv4Prefix, is_host_address};
use crate::plan::{AddressRole, OwnedAddress, PortIndex, PortPlan};
use crate::schema::{ConfigFile, DriverKind, PortRole};
use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;

/// Where an owned address was first declared.
pub(super) struct Owner {
    pub(super) port: PortIndex,
    pub(super) path: String,
}

/// The ports as resolved, and what later sections check against.
pub(super) struct Ports<'f> {
    pub(super) plans: Vec<PortPlan>,
    pub(super) by_name: HashMap<&'f str, PortIndex>,
    /// Every owned address with where it was first declared.
    pub(super) owners: HashMap<Ipv4Addr, Owner>,
    pub(super) addresses: Vec<OwnedAddress>,
    /// Connected subnets with their port and the path of the address that
    /// made them.
    pub(super) connected: Vec<(Ipv4Prefix, PortIndex, String)>,
    /// Ports with an address that did not parse: their connected subnets
    /// are unknown, so "not in a connected subnet" is not reported there.
    pub(super) broken: HashSet<PortIndex>,
}

impl Ports<'_> {
    /// The owned addresses of `role`, in port order.
    pub(super) fn with_role(&self, role: AddressRole) -> Vec<Ipv4Addr> {
        self.addresses
            .iter()
            .filter(|a| a.role == role)
            .map(|a| a.address)
            .collect()
    }
}

impl Validator {
    pub(super) fn ports<'f>(&mut self, file: &'f ConfigFile) -> Ports<'f> {
        let mut ports = Vec::new();
        let mut port_by_name: HashMap<&str, PortIndex> = HashMap::new();
        let mut interfaces: HashMap<&str, usize> = HashMap::new();
        let mut owners: HashMap<Ipv4Addr, Owner> = HashMap::new();
        let mut addresses = Vec::new();
        let mut connected: Vec<(Ipv4Prefix, PortIndex, String)> = Vec::new();
        let mut roles_seen: HashSet<(Ipv4Addr, AddressRole)> = HashSet::new();
        let mut broken_ports: HashSet<PortIndex> = HashSet::new();
        if file.ports.is_empty() {
            self.problem("port", "no [[port]] is configured");
        }
        for (i, p) in file.ports.iter().enumerate() {
            let at = format!("port[{i}]");
            self.unique_name("port", i, &p.name, &mut port_by_name);
            self.interface(&at, &p.interface);
            if !p.interface.is_empty() {
                if let Some(first) = interfaces.get(p.interface.as_str()) {
                    self.problem(
                        format!("{at}.interface"),
                        format!("{:?} is already used by port[{first}]", p.interface),
                    );
                } else {
                    interfaces.insert(&p.interface, i);
                }
            }
            if p.driver == DriverKind::Dpdk && !DPDK_AVAILABLE {
                self.problem(
                    format!("{at}.driver"),
                    "the dpdk driver is not compiled into this build (build portico with \
                     `--features dpdk`, which needs libdpdk-dev)",
                );
            }
            let dpdk_device = self.dpdk_device(&at, p.driver, p.dpdk_device.as_deref());
            let mac = p
                .mac
                .as_deref()
                .and_then(|m| self.mac(&format!("{at}.mac"), m));
            let mtu = p
                .mtu
                .and_then(|m| self.ranged(&format!("{at}.mtu"), m, MTU_RANGE))
                .and_then(|m| u16::try_from(m).ok());

            let mut lists: [(AddressRole, &str, Vec<Ipv4Prefix>); 2] = [
                (AddressRole::Node, "node_addresses", Vec::new()),
                (AddressRole::Snat, "snat_addresses", Vec::new()),
            ];
            for (role, key, parsed) in &mut lists {
                let texts = match role {
                    AddressRole::Node => &p.node_addresses,
                    AddressRole::Snat => &p.snat_addresses,
                };
                for (j, text) in texts.iter().enumerate() {
                    let path = format!("{at}.{key}[{j}]");
                    let Some(prefix) = self.owned_prefix(&path, text) else {
                        broken_ports.insert(i);
                        continue;
                    };
                    let addr = prefix.address;
                    if let Some(owner) = owners.get(&addr) {
                        // The same address as node and SNAT address of one
                        // port is the one allowed repetition.
                        if owner.port != i || !roles_seen.insert((addr, *role)) {
                            self.problem(
                                &path,
                                format!("{addr} is already owned at {}", owner.path),
                            );
                            continue;
                        }
                    } else {
                        roles_seen.insert((addr, *role));
                        owners.insert(
                            addr,
                            Owner {
                                port: i,
                                path: path.clone(),
                            },
                        );
                    }
                    let net = prefix.network();
                    if prefix.prefix_len < 32 {
                        match connected.iter().find(|(n, _, _)| *n == net) {
                            Some((_, other, first)) if *other != i => {
                                self.problem(
                                    &path,
                                    format!(
                                        "subnet {net} is already connected on port[{other}] (by {first})"
                                    ),
                                );
                                continue;
                            }
                            Some(_) => {}
                            None => connected.push((net, i, path.clone())),
                        }
                    }
                    addresses.push(OwnedAddress {
                        address: addr,
                        port: i,
                        role: *role,
                    });
                    parsed.push(prefix);
                }
            }
            let [(_, _, node_addresses), (_, _, snat_addresses)] = lists;
            ports.push(PortPlan {
                name: p.name.clone(),
                driver: p.driver,
                interface: p.interface.clone(),
                role: p.role,
                node_addresses,
                snat_addresses,
                mac,
                mtu,
                dpdk_device,
            });
        }
        Ports {
            plans: ports,
            by_name: port_by_name,
            owners,
            addresses,
            connected,
            broken: broken_ports,
        }
    }

    /// Linux's rules for an interface name (`dev_valid_name`).
    fn interface(&mut self, at: &str, name: &str) {
        let path = format!("{at}.interface");
        if name.is_empty() {
            self.problem(path, "is empty");
        } else if name.len() > MAX_INTERFACE_NAME_BYTES {
            self.problem(
                path,
                format!(
                    "{name:?} is {} bytes; Linux interface names have at most {MAX_INTERFACE_NAME_BYTES}",
                    name.len()
                ),
            );
        } else if name == "."
            || name == ".."
            || name.contains(['/', ':'])
            || name.contains(char::is_whitespace)
        {
            self.problem(path, format!("{name:?} is not a valid interface name"));
        }
    }

    /// An address the gateway owns, with its prefix.
    fn owned_prefix(&mut self, path: &str, text: &str) -> Option<Ipv4Prefix> {
        match text.parse::<Ipv4Prefix>() {
            Ok(p) if !is_host_address(p.address) => {
                self.problem(path, format!("{} is not a unicast host address", p.address));
                None
            }
            Ok(p) if p.prefix_len == 0 => {
                self.problem(
                    path,
                    format!("{p}: a /0 prefix would put every address on this port"),
                );
                None
            }
            Ok(p) => Some(p),
            Err(e) => {
                self.problem(path, e.to_string());
                None
            }
        }
    }

    /// Exactly one outside and at least one inside port, or a single port
    /// of role both. Returns the VIP port.
    pub(super) fn roles(&mut self, file: &ConfigFile) -> PortIndex {
        let ports = &file.ports;
        if ports.is_empty() {
            return 0;
        }
        let with = |role: PortRole| -> Vec<usize> {
            ports
                .iter()
                .enumerate()
                .filter(|(_, p)| p.role == role)
                .map(|(i, _)| i)
                .collect()
        };
        let (outside, inside, both) = (
            with(PortRole::Outside),
            with(PortRole::Inside),
            with(PortRole::Both),
        );
        if !both.is_empty() {
            if ports.len() > 1 {
                for &i in &both {
                    self.problem(
                        format!("port[{i}].role"),
                        format!(
                            "role both is for a gateway with a single port, but there are {} ports",
                            ports.len()
                        ),
                    );
                }
            }
            return both[0];
        }
        if outside.is_empty() {
            self.problem("port", "no port has role outside (facing clients)");
        }
        for &i in outside.iter().skip(1) {
            self.problem(
                format!("port[{i}].role"),
                format!(
                    "a second outside port; VIPs are announced on exactly one (port[{}])",
                    outside[0]
                ),
            );
        }
        if inside.is_empty() {
            self.problem("port", "no port has role inside (facing backends)");
        }
        outside.first().copied().unwrap_or(0)
    }
}
