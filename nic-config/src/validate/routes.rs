//! `[[route]]` and `[[neighbour]]`: destinations and next hops resolved
//! to ports through the connected subnets, and static neighbour entries
//! (ARP for IPv4, NDP for IPv6).
//!
//! A next hop is of its destination's family. An IPv6 next hop may be
//! link-local (`fe80::/10`, what IPv6 routers usually announce, RFC 4861
//! §8): every port has that subnet, so such a route names its `port`.

use super::Validator;
use super::ports::{Owner, Ports};
use crate::addr::{IpPrefix, family_name, is_link_local};
use crate::plan::{NeighbourPlan, PortIndex, RoutePlan};
use crate::schema::ConfigFile;
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

impl Validator {
    /// The connected subnets, then the static routes in file order.
    pub(super) fn routes(&mut self, file: &ConfigFile, ports: &Ports<'_>) -> Vec<RoutePlan> {
        let Ports {
            by_name: port_by_name,
            owners,
            connected,
            broken: broken_ports,
            ..
        } = ports;
        let mut routes: Vec<RoutePlan> = connected
            .iter()
            .map(|&(destination, port, _)| RoutePlan {
                destination,
                port,
                via: None,
            })
            .collect();
        let mut destinations: HashMap<IpPrefix, usize> = HashMap::new();
        for (i, r) in file.routes.iter().enumerate() {
            let at = format!("route[{i}]");
            let destination = match r.destination.parse::<IpPrefix>() {
                Ok(d) if !d.is_network() => {
                    self.problem(
                        format!("{at}.destination"),
                        format!("{d} has host bits set; did you mean {}?", d.network()),
                    );
                    None
                }
                Ok(d) => Some(d),
                Err(e) => {
                    self.problem(format!("{at}.destination"), e.to_string());
                    None
                }
            };
            if let Some(d) = destination {
                if let Some(first) = destinations.get(&d) {
                    self.problem(
                        format!("{at}.destination"),
                        format!("{d} is already routed by route[{first}]"),
                    );
                } else {
                    destinations.insert(d, i);
                }
            }
            let port = match &r.port {
                Some(name) => match port_by_name.get(name.as_str()) {
                    Some(&p) => Some(Some(p)),
                    None => {
                        self.problem(format!("{at}.port"), format!("no port is named {name:?}"));
                        None
                    }
                },
                None => Some(None),
            };
            let via_path = format!("{at}.via");
            let via = r.via.as_deref().and_then(|text| {
                let via = self.host_or_link_local(&via_path, text)?;
                if is_link_local(via) && r.port.is_none() {
                    self.problem(
                        &via_path,
                        format!(
                            "{via} is link-local (fe80::/10), on the link of every port: \
                             give the route's port"
                        ),
                    );
                    return None;
                }
                match destination {
                    Some(d) if d.address.is_ipv4() != via.is_ipv4() => {
                        self.problem(
                            &via_path,
                            format!(
                                "{via} is an {} next hop for the {} destination {d}",
                                family_name(via),
                                family_name(d.address)
                            ),
                        );
                        None
                    }
                    _ => Some(via),
                }
            });
            let resolved = match (r.via.is_some(), via, port) {
                (false, _, Some(None)) => {
                    self.problem(
                        at.clone(),
                        "a route without via needs port (the port the destination is on)",
                    );
                    None
                }
                (false, _, Some(Some(p))) => Some(p),
                (true, Some(via), Some(port)) => {
                    self.next_hop_port(&at, via, port, connected, owners, broken_ports)
                }
                _ => None,
            };
            if let (Some(destination), Some(port)) = (destination, resolved) {
                routes.push(RoutePlan {
                    destination,
                    port,
                    via,
                });
            }
        }
        routes
    }

    pub(super) fn neighbours(
        &mut self,
        file: &ConfigFile,
        ports: &Ports<'_>,
    ) -> Vec<NeighbourPlan> {
        let Ports {
            owners,
            connected,
            broken: broken_ports,
            ..
        } = ports;
        let mut neighbours = Vec::new();
        let mut neighbour_at: HashMap<IpAddr, usize> = HashMap::new();
        for (i, n) in file.neighbours.iter().enumerate() {
            let at = format!("neighbour[{i}]");
            let address = self.host(&format!("{at}.address"), &n.address);
            if let Some(addr) = address {
                if let Some(first) = neighbour_at.get(&addr) {
                    self.problem(
                        format!("{at}.address"),
                        format!("{addr} is already listed at neighbour[{first}]"),
                    );
                } else if let Some(owner) = owners.get(&addr) {
                    self.problem(
                        format!("{at}.address"),
                        format!("{addr} is the gateway's own address ({})", owner.path),
                    );
                } else if !connected.iter().any(|(net, _, _)| net.contains(addr)) {
                    if broken_ports.is_empty() {
                        self.problem(
                            format!("{at}.address"),
                            format!("{addr} is not inside any connected subnet"),
                        );
                    }
                } else {
                    neighbour_at.insert(addr, i);
                }
            }
            let mac = self.mac(&format!("{at}.mac"), &n.mac);
            if let (Some(address), Some(mac)) = (address, mac) {
                neighbours.push(NeighbourPlan { address, mac });
            }
        }
        neighbours
    }

    /// The port a next hop is reached on: the longest connected subnet
    /// containing it (on `port` when given).
    fn next_hop_port(
        &mut self,
        at: &str,
        via: IpAddr,
        port: Option<PortIndex>,
        connected: &[(IpPrefix, PortIndex, String)],
        owners: &HashMap<IpAddr, Owner>,
        broken_ports: &HashSet<PortIndex>,
    ) -> Option<PortIndex> {
        let path = format!("{at}.via");
        if let Some(owner) = owners.get(&via) {
            self.problem(
                path,
                format!("{via} is the gateway's own address ({})", owner.path),
            );
            return None;
        }
        if is_link_local(via) {
            // On-link on every port; `routes` required the port.
            return port;
        }
        let best = connected
            .iter()
            .filter(|(net, p, _)| net.contains(via) && port.is_none_or(|want| want == *p))
            .max_by_key(|(net, _, _)| net.prefix_len);
        match (best, port) {
            (Some((_, p, _)), _) => Some(*p),
            // The subnet may be the one whose address did not parse.
            (None, Some(p)) if broken_ports.contains(&p) => None,
            (None, None) if !broken_ports.is_empty() => None,
            (None, Some(p)) => {
                self.problem(
                    path,
                    format!("{via} is not inside a connected subnet of port[{p}]"),
                );
                None
            }
            (None, None) => {
                self.problem(path, format!("{via} is not inside any connected subnet"));
                None
            }
        }
    }
}
