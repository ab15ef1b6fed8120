//! `[[port]]`: names, interfaces, drivers, MACs and MTUs, the addresses
//! each port owns (node and SNAT) with their connected subnets, the ports'
//! host addresses and host interfaces, and the ports' roles.
//!
//! Host addresses are checked like node and SNAT addresses (a unicast
//! address with a prefix other than /0, a connected subnet on this port
//! only) and must be no other owned address of any port, in any role
//! (they enter the same owner map, so the later sections' VIP, external
//! IP, pool and next-hop checks refuse them too). A port with host
//! addresses has a host interface: `host_interface` or `<name[..10]>-host`,
//! a valid interface name used by no port and no other host interface.

use super::Validator;
use super::limits::{DPDK_AVAILABLE, MAX_INTERFACE_NAME_BYTES, MSS_CLAMP_RANGE, MTU_RANGE};
use crate::addr::{IpPrefix, is_host_address, is_link_local};
use crate::plan::{AddressRole, MssClampPlan, OwnedAddress, PortIndex, PortPlan};
use crate::schema::{ConfigFile, DriverKind, MssClampSetting, PortRole};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

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
    pub(super) owners: HashMap<IpAddr, Owner>,
    pub(super) addresses: Vec<OwnedAddress>,
    /// Connected subnets with their port and the path of the address that
    /// made them.
    pub(super) connected: Vec<(IpPrefix, PortIndex, String)>,
    /// Ports with an address that did not parse: their connected subnets
    /// are unknown, so "not in a connected subnet" is not reported there.
    pub(super) broken: HashSet<PortIndex>,
    /// Every host address with its prefix and port.
    pub(super) host: Vec<(IpPrefix, PortIndex)>,
}

impl Ports<'_> {
    /// The owned addresses of `role`, in port order.
    pub(super) fn with_role(&self, role: AddressRole) -> Vec<IpAddr> {
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
        let mut owners: HashMap<IpAddr, Owner> = HashMap::new();
        let mut addresses = Vec::new();
        let mut connected: Vec<(IpPrefix, PortIndex, String)> = Vec::new();
        let mut roles_seen: HashSet<(IpAddr, AddressRole)> = HashSet::new();
        let mut broken_ports: HashSet<PortIndex> = HashSet::new();
        let mut host: Vec<(IpPrefix, PortIndex)> = Vec::new();
        let mut host_interfaces: Vec<(String, String)> = Vec::new();
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
            let mss_clamp = self.mss_clamp(&format!("{at}.mss_clamp"), p.mss_clamp.as_ref(), mtu);

            let mut lists: [(Option<AddressRole>, &str, Vec<IpPrefix>); 3] = [
                (Some(AddressRole::Node), "node_addresses", Vec::new()),
                (Some(AddressRole::Snat), "snat_addresses", Vec::new()),
                (None, "host_addresses", Vec::new()),
            ];
            for (role, key, parsed) in &mut lists {
                let texts = match role {
                    Some(AddressRole::Node) => &p.node_addresses,
                    Some(AddressRole::Snat) => &p.snat_addresses,
                    None => &p.host_addresses,
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
                        // port is the one allowed repetition (a host
                        // address is the kernel's alone).
                        let shared = match role {
                            Some(r) => owner.port == i && roles_seen.insert((addr, *r)),
                            None => false,
                        };
                        if !shared || owner.path.contains("host_addresses") {
                            self.problem(
                                &path,
                                format!("{addr} is already owned at {}", owner.path),
                            );
                            continue;
                        }
                    } else {
                        if let Some(r) = role {
                            roles_seen.insert((addr, *r));
                        }
                        owners.insert(
                            addr,
                            Owner {
                                port: i,
                                path: path.clone(),
                            },
                        );
                    }
                    let net = prefix.network();
                    if !prefix.is_host() {
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
                    match role {
                        Some(r) => addresses.push(OwnedAddress {
                            address: addr,
                            port: i,
                            role: *r,
                        }),
                        None => host.push((prefix, i)),
                    }
                    parsed.push(prefix);
                }
            }
            let [
                (_, _, node_addresses),
                (_, _, snat_addresses),
                (_, _, host_addresses),
            ] = lists;
            let host_interface = (!p.host_addresses.is_empty()).then(|| {
                let name = p
                    .host_interface
                    .clone()
                    .unwrap_or_else(|| default_host_interface(&p.name));
                host_interfaces.push((name.clone(), format!("{at}.host_interface")));
                name
            });
            ports.push(PortPlan {
                name: p.name.clone(),
                driver: p.driver,
                interface: p.interface.clone(),
                role: p.role,
                node_addresses,
                snat_addresses,
                host_addresses,
                host_interface,
                mac,
                mtu,
                mss_clamp,
                dpdk_device,
            });
        }
        for (k, (name, path)) in host_interfaces.iter().enumerate() {
            if self.interface_name(path, name) {
                if let Some(j) = file.ports.iter().position(|p| p.interface == *name) {
                    self.problem(
                        path,
                        format!("{name:?} is the interface of port[{j}]; a host interface is a TAP of its own"),
                    );
                } else if let Some((_, first)) =
                    host_interfaces[..k].iter().find(|(n, _)| n == name)
                {
                    self.problem(path, format!("{name:?} is already used by {first}"));
                }
            }
        }
        Ports {
            plans: ports,
            by_name: port_by_name,
            owners,
            addresses,
            connected,
            broken: broken_ports,
            host,
        }
    }

    /// Linux's rules for an interface name (`dev_valid_name`).
    fn interface(&mut self, at: &str, name: &str) {
        self.interface_name(&format!("{at}.interface"), name);
    }

    /// Whether `name` follows Linux's rules for an interface name
    /// (`dev_valid_name`); a problem at `path` if not.
    fn interface_name(&mut self, path: &str, name: &str) -> bool {
        let before = self.problems.len();
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
        self.problems.len() == before
    }
}

/// The default host interface of port `name`: its first 10 bytes (cut at a
/// character boundary) and `-host`, at most 15 bytes.
pub(super) fn default_host_interface(name: &str) -> String {
    let mut end = name.len().min(10);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}-host", &name[..end])
}

impl Validator {
    /// An address the gateway owns, with its prefix.
    fn owned_prefix(&mut self, path: &str, text: &str) -> Option<IpPrefix> {
        match text.parse::<IpPrefix>() {
            Ok(p) if !is_host_address(p.address) => {
                self.problem(path, format!("{} is not a unicast host address", p.address));
                None
            }
            Ok(p) if is_link_local(p.address) => {
                self.problem(
                    path,
                    format!(
                        "{p} is link-local (fe80::/10): it is on every link, so it cannot name \
                         one port; give a global or unique-local address"
                    ),
                );
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

impl Validator {
    /// A port's `mss_clamp` at `path` (the port's `mtu`, when configured,
    /// bounds a number).
    fn mss_clamp(
        &mut self,
        path: &str,
        setting: Option<&MssClampSetting>,
        mtu: Option<u16>,
    ) -> Option<MssClampPlan> {
        match setting? {
            MssClampSetting::Keyword(k) if k == "pmtu" => Some(MssClampPlan::Pmtu),
            MssClampSetting::Keyword(k) => {
                self.problem(
                    path,
                    format!(
                        "{k:?} is neither a number of bytes nor \"pmtu\" (the port's MTU - 40)"
                    ),
                );
                None
            }
            MssClampSetting::Bytes(b) => {
                let b = u16::try_from(self.ranged(path, *b, MSS_CLAMP_RANGE)?).ok()?;
                match mtu {
                    Some(m) if b > m.saturating_sub(40) => {
                        self.problem(
                            path,
                            format!(
                                "{b} is above the port's mtu {m} - 40 = {}: no SYN could leave with it; use \"pmtu\" or a smaller number",
                                m.saturating_sub(40)
                            ),
                        );
                        None
                    }
                    _ => Some(MssClampPlan::Bytes(b)),
                }
            }
        }
    }
}
