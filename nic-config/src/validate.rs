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

use crate::Problem;
use crate::addr::{Ipv4Prefix, Ipv4Range, MacAddr, is_host_address};
use crate::plan::{
    AddressPoolPlan, AddressRole, AfxdpPlan, BackendPlan, ConntrackPlan, DataplanePlan,
    DpdkDevicePlan, DpdkPlan, KubernetesPlan, LeaderElectionPlan, ListenerKind, ListenerPlan,
    NeighbourPlan, NeighbourTablePlan, OwnedAddress, Plan, PortIndex, PortPlan, RoutePlan,
    ServicePlan, SnatPlan, TimeoutsMs,
};
use crate::schema::{
    AddressPoolSection, AfxdpSection, ConfigFile, DEFAULT_AFFINITY_TIMEOUT_S, DriverKind,
    KubernetesSection, NeighbourTableSection, PortRole, Protocol, SessionAffinity, TimeoutsSection,
    XdpModeSetting, ZeroCopySetting,
};
use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::ops::RangeInclusive;

/// Most workers (and pinned cores).
pub const MAX_WORKERS: u64 = 64;
/// Largest receive burst (the dataplane's `MAX_BATCH`).
pub const MAX_BATCH_SIZE: u64 = 64;
/// Largest Maglev table (the dataplane's `maglev::MAX_TABLE_SIZE`).
pub const MAX_MAGLEV_TABLE_SIZE: u64 = 1 << 24;
/// Most backends per service (the dataplane's `maglev::MAX_BACKENDS`).
pub const MAX_BACKENDS: usize = 65_535;
/// Largest conntrack or affinity table per worker (the dataplane's
/// `conntrack::MAX_CAPACITY`).
pub const MAX_TABLE_CAPACITY: u64 = 1 << 30;
/// SNAT ports each worker needs at least.
pub const MIN_SNAT_PORTS_PER_WORKER: u64 = 64;
/// Longest Linux interface name in bytes (`IFNAMSIZ` - 1).
pub const MAX_INTERFACE_NAME_BYTES: usize = 15;
/// MTU bounds: IPv4's minimum (RFC 791: 68) to the usual jumbo limit.
pub const MTU_RANGE: RangeInclusive<u64> = 68..=9216;
/// Kubernetes' bound on `sessionAffinityConfig.clientIP.timeoutSeconds`.
pub const MAX_AFFINITY_TIMEOUT_S: u64 = 86_400;
/// Largest backend weight.
pub const MAX_WEIGHT: u64 = 65_535;
/// EAL memory bounds, in megabytes.
pub const DPDK_MEMORY_MB_RANGE: RangeInclusive<u64> = 64..=1 << 20;
/// Descriptors per DPDK queue.
pub const DPDK_DESC_RANGE: RangeInclusive<u64> = 64..=16_384;

/// Whether this build has the DPDK driver (nic-config's feature `dpdk`).
pub const DPDK_AVAILABLE: bool = cfg!(feature = "dpdk");

/// `DDDD:BB:DD.F` or `BB:DD.F` (hex digits; device up to 1f, function up
/// to 7), normalized with the domain.
fn pci_address(text: &str) -> Option<String> {
    let full = if text.matches(':').count() == 1 {
        format!("0000:{text}")
    } else {
        text.to_string()
    };
    let (domain, rest) = full.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let hex = |s: &str, len: usize| s.len() == len && s.chars().all(|c| c.is_ascii_hexdigit());
    let ok = hex(domain, 4)
        && hex(bus, 2)
        && hex(device, 2)
        && u8::from_str_radix(device, 16).is_ok_and(|d| d <= 0x1f)
        && function.len() == 1
        && function.chars().all(|c| ('0'..='7').contains(&c));
    ok.then(|| full.to_ascii_lowercase())
}

/// AF_XDP ring sizes (entries): powers of two in this range.
pub const XDP_RING_RANGE: RangeInclusive<u64> = 64..=32_768;
/// Most frames of one AF_XDP UMEM.
pub const MAX_UMEM_FRAMES: u64 = 1 << 20;

/// Bounds of `kubernetes.debounce_ms`.
pub const DEBOUNCE_RANGE_MS: RangeInclusive<u64> = 0..=10_000;
/// Largest `kubernetes.debounce_max_ms`.
pub const MAX_DEBOUNCE_MAX_MS: u64 = 60_000;
/// Default `kubernetes.debounce_max_ms` as a multiple of `debounce_ms`.
pub const DEFAULT_DEBOUNCE_MAX_FACTOR: u64 = 10;
/// Address blocks never handed out from a pool: "this network" (RFC 791),
/// loopback (RFC 1122), multicast (RFC 5771) with the reserved block and
/// the limited broadcast address (RFC 1112).
const NOT_POOLABLE: [(Ipv4Addr, Ipv4Addr, &str); 3] = [
    (
        Ipv4Addr::new(0, 0, 0, 0),
        Ipv4Addr::new(0, 255, 255, 255),
        "0.0.0.0/8 (this network)",
    ),
    (
        Ipv4Addr::new(127, 0, 0, 0),
        Ipv4Addr::new(127, 255, 255, 255),
        "127.0.0.0/8 (loopback)",
    ),
    (
        Ipv4Addr::new(224, 0, 0, 0),
        Ipv4Addr::new(255, 255, 255, 255),
        "224.0.0.0/3 (multicast and reserved)",
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

/// Validate a parsed file into a plan.
pub fn validate(file: &ConfigFile) -> Result<Plan, Vec<Problem>> {
    let mut v = Validator::default();
    let plan = v.run(file);
    if v.problems.is_empty() {
        Ok(plan)
    } else {
        Err(v.problems)
    }
}

#[derive(Default)]
struct Validator {
    problems: Vec<Problem>,
}

/// Where an owned address was first declared.
struct Owner {
    port: PortIndex,
    path: String,
}

fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u64;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
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

    /// A unicast host address.
    fn host(&mut self, path: &str, text: &str) -> Option<Ipv4Addr> {
        match text.parse::<Ipv4Addr>() {
            Ok(addr) if is_host_address(addr) => Some(addr),
            Ok(addr) => {
                self.problem(path, format!("{addr} is not a unicast host address"));
                None
            }
            Err(_) => {
                self.problem(path, format!("{text:?} is not an IPv4 address"));
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

    /// `port[i].dpdk_device`: `Some` exactly for driver `dpdk`.
    fn dpdk_device(
        &mut self,
        at: &str,
        driver: DriverKind,
        text: Option<&str>,
    ) -> Option<DpdkDevicePlan> {
        let path = format!("{at}.dpdk_device");
        if driver != DriverKind::Dpdk {
            if text.is_some() {
                self.problem(
                    path,
                    format!(
                        "only ports with driver \"dpdk\" have a DPDK device (this one is {driver})"
                    ),
                );
            }
            return None;
        }
        let Some(text) = text else {
            return Some(DpdkDevicePlan::AfPacket);
        };
        match text {
            "net_af_packet" => return Some(DpdkDevicePlan::AfPacket),
            "net_af_xdp" => return Some(DpdkDevicePlan::AfXdp),
            _ => {}
        }
        if let Some(pci) = pci_address(text) {
            return Some(DpdkDevicePlan::Pci(pci));
        }
        let (name, args) = text.split_once(',').unwrap_or((text, ""));
        let name_ok = name.len() > 4
            && name.starts_with("net_")
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok || text.chars().any(|c| c.is_whitespace()) {
            self.problem(
                path,
                format!(
                    "{text:?} is neither \"net_af_packet\", \"net_af_xdp\", a PCI address \
                     (0000:03:00.0) nor a vdev (net_NAME[,ARGS], no spaces)"
                ),
            );
            return None;
        }
        Some(DpdkDevicePlan::Vdev {
            name: name.to_string(),
            args: args.to_string(),
        })
    }

    /// `[dpdk]`.
    fn dpdk(&mut self, file: &ConfigFile) -> DpdkPlan {
        let d = &file.dpdk;
        let mut cores = Vec::new();
        if let Some(list) = &d.cores {
            if list.is_empty() {
                self.problem("dpdk.cores", "is empty; leave it out to allow every CPU");
            }
            let mut seen = HashSet::new();
            for (i, &core) in list.iter().enumerate() {
                if !seen.insert(core) {
                    self.problem(
                        format!("dpdk.cores[{i}]"),
                        format!("core {core} is listed twice"),
                    );
                }
                cores.push(usize::try_from(core).unwrap_or(usize::MAX));
            }
        }
        let memory_mb = self.ranged("dpdk.memory_mb", d.memory_mb, DPDK_MEMORY_MB_RANGE);
        let rx_desc = self.ranged("dpdk.rx_desc", d.rx_desc, DPDK_DESC_RANGE);
        let tx_desc = self.ranged("dpdk.tx_desc", d.tx_desc, DPDK_DESC_RANGE);
        for (i, arg) in d.extra_args.iter().enumerate() {
            if arg.is_empty() || arg.contains('\0') {
                self.problem(
                    format!("dpdk.extra_args[{i}]"),
                    "is empty or contains a NUL byte",
                );
            }
        }
        DpdkPlan {
            cores,
            memory_mb: memory_mb.and_then(|m| u32::try_from(m).ok()).unwrap_or(0),
            hugepages: d.hugepages,
            rx_desc: rx_desc.and_then(|v| u16::try_from(v).ok()).unwrap_or(0),
            tx_desc: tx_desc.and_then(|v| u16::try_from(v).ok()).unwrap_or(0),
            extra_args: d.extra_args.clone(),
        }
    }

    fn run(&mut self, file: &ConfigFile) -> Plan {
        let dp = &file.dataplane;

        // --- workers and cores
        let mut cores = Vec::new();
        if let Some(list) = &dp.cores {
            if list.is_empty() {
                self.problem(
                    "dataplane.cores",
                    "is empty; leave it out to run the workers unpinned",
                );
            } else if list.len() as u64 > MAX_WORKERS {
                self.problem(
                    "dataplane.cores",
                    format!("lists {} cores; at most {MAX_WORKERS} workers", list.len()),
                );
            }
            let mut seen = HashSet::new();
            for (i, &core) in list.iter().enumerate() {
                if !seen.insert(core) {
                    self.problem(
                        format!("dataplane.cores[{i}]"),
                        format!("core {core} is listed twice"),
                    );
                }
                cores.push(usize::try_from(core).unwrap_or(usize::MAX));
            }
        }
        let workers = match (dp.workers, &dp.cores) {
            (Some(w), cores_given) => {
                let w = self.ranged("dataplane.workers", w, 1..=MAX_WORKERS);
                match (w, cores_given) {
                    (Some(w), Some(list)) if !list.is_empty() && list.len() as u64 != w => {
                        self.problem(
                            "dataplane.workers",
                            format!(
                                "is {w} but cores lists {} cores (one per worker)",
                                list.len()
                            ),
                        );
                        None
                    }
                    (w, _) => w,
                }
            }
            (None, Some(list)) => Some(list.len() as u64).filter(|n| (1..=MAX_WORKERS).contains(n)),
            (None, None) => Some(1),
        };

        let batch_size = self.ranged("dataplane.batch_size", dp.batch_size, 1..=MAX_BATCH_SIZE);

        let largest = file
            .services
            .iter()
            .enumerate()
            .max_by_key(|(_, s)| s.backends.len());
        let maglev = dp.maglev_table_size;
        // Bound first: primality by trial division is only cheap up to it.
        if maglev > MAX_MAGLEV_TABLE_SIZE {
            self.problem(
                "dataplane.maglev_table_size",
                format!("{maglev} exceeds the maximum of {MAX_MAGLEV_TABLE_SIZE}"),
            );
        } else if !is_prime(maglev) {
            self.problem(
                "dataplane.maglev_table_size",
                format!(
                    "{maglev} is not prime (Maglev needs a prime table size, e.g. 16381, 65537)"
                ),
            );
        } else if let Some((i, s)) = largest
            && (s.backends.len() as u64) > maglev
        {
            self.problem(
                "dataplane.maglev_table_size",
                format!(
                    "{maglev} slots are fewer than the {} backends of service[{i}] ({:?})",
                    s.backends.len(),
                    s.name
                ),
            );
        }

        // --- conntrack
        let ct = &dp.conntrack;
        let ct_capacity = self.ranged(
            "dataplane.conntrack.capacity",
            ct.capacity,
            1..=MAX_TABLE_CAPACITY,
        );
        let expiry_scan = self.ranged(
            "dataplane.conntrack.expiry_scan_per_poll",
            ct.expiry_scan_per_poll,
            1..=u64::from(u32::MAX),
        );
        let early_drop_scan = self.ranged(
            "dataplane.conntrack.early_drop_scan",
            ct.early_drop_scan,
            0..=u64::from(u32::MAX),
        );
        let timeouts = self.timeouts(&ct.timeouts);

        // --- SNAT ports
        let port_range = self.port_range(&dp.snat.port_range);
        if let (Some(range), Some(w)) = (&port_range, workers) {
            let width = u64::from(*range.end()) - u64::from(*range.start()) + 1;
            if width < w * MIN_SNAT_PORTS_PER_WORKER {
                self.problem(
                    "dataplane.snat.port_range",
                    format!(
                        "{width} ports are too few for {w} workers (each needs at least {MIN_SNAT_PORTS_PER_WORKER})"
                    ),
                );
            }
        }
        let quarantine_ms = self.seconds_ms("dataplane.snat.quarantine_s", dp.snat.quarantine_s, 0);
        let affinity_capacity = self.ranged(
            "dataplane.affinity.capacity",
            dp.affinity.capacity,
            1..=MAX_TABLE_CAPACITY,
        );

        // --- ports
        let mut ports = Vec::new();
        let mut port_by_name: HashMap<&str, PortIndex> = HashMap::new();
        let mut interfaces: HashMap<&str, usize> = HashMap::new();
        let mut owners: HashMap<Ipv4Addr, Owner> = HashMap::new();
        let mut addresses = Vec::new();
        let mut connected: Vec<(Ipv4Prefix, PortIndex, String)> = Vec::new();
        let mut roles_seen: HashSet<(Ipv4Addr, AddressRole)> = HashSet::new();
        // Ports with an address that did not parse: their connected subnets
        // are unknown, so "not in a connected subnet" is not reported there.
        let mut broken_ports: HashSet<PortIndex> = HashSet::new();
        if file.ports.is_empty() {
            self.problem("port", "no [[port]] is configured");
        }
        for (i, p) in file.ports.iter().enumerate() {
            let at = format!("port[{i}]");
            if p.name.is_empty() {
                self.problem(format!("{at}.name"), "is empty");
            } else if let Some(first) = port_by_name.get(p.name.as_str()) {
                self.problem(
                    format!("{at}.name"),
                    format!("{:?} is already the name of port[{first}]", p.name),
                );
            } else {
                port_by_name.insert(&p.name, i);
            }
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
        let vip_port = self.roles(file);
        let dpdk = self.dpdk(file);

        let node_addrs: Vec<Ipv4Addr> = addresses
            .iter()
            .filter(|a| a.role == AddressRole::Node)
            .map(|a| a.address)
            .collect();
        let snat_addrs: Vec<Ipv4Addr> = addresses
            .iter()
            .filter(|a| a.role == AddressRole::Snat)
            .map(|a| a.address)
            .collect();
        let dual: Vec<Ipv4Addr> = node_addrs
            .iter()
            .copied()
            .filter(|a| snat_addrs.contains(a))
            .collect();
        let any_node_addresses = file.ports.iter().any(|p| !p.node_addresses.is_empty());
        let any_snat_addresses = file.ports.iter().any(|p| !p.snat_addresses.is_empty());

        // --- routes
        let mut routes: Vec<RoutePlan> = connected
            .iter()
            .map(|&(destination, port, _)| RoutePlan {
                destination,
                port,
                via: None,
            })
            .collect();
        let mut destinations: HashMap<Ipv4Prefix, usize> = HashMap::new();
        for (i, r) in file.routes.iter().enumerate() {
            let at = format!("route[{i}]");
            let destination = match r.destination.parse::<Ipv4Prefix>() {
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
            let via = r
                .via
                .as_deref()
                .and_then(|text| self.host(&format!("{at}.via"), text));
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
                    self.next_hop_port(&at, via, port, &connected, &owners, &broken_ports)
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

        // --- neighbours
        let mut neighbours = Vec::new();
        let mut neighbour_at: HashMap<Ipv4Addr, usize> = HashMap::new();
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

        // --- services
        let mut services = Vec::new();
        let mut service_names: HashMap<&str, usize> = HashMap::new();
        // (protocol, address, port) → (service index, path) of its first use
        let mut listeners_taken: HashMap<(Protocol, Ipv4Addr, u16), (usize, String)> =
            HashMap::new();
        let mut snat_wanted_at: Option<usize> = None;
        for (i, s) in file.services.iter().enumerate() {
            let at = format!("service[{i}]");
            if s.name.is_empty() {
                self.problem(format!("{at}.name"), "is empty");
            } else if let Some(first) = service_names.get(s.name.as_str()) {
                self.problem(
                    format!("{at}.name"),
                    format!("{:?} is already the name of service[{first}]", s.name),
                );
            } else {
                service_names.insert(&s.name, i);
            }
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
            let mut candidates: Vec<(String, Ipv4Addr, Option<u16>, ListenerKind)> = Vec::new();
            if let Some(text) = &s.vip {
                let path = format!("{at}.vip");
                if let Some(addr) = self.host(&path, text) {
                    candidates.push((path, addr, port, ListenerKind::Vip));
                }
            }
            for (j, text) in s.external_ips.iter().enumerate() {
                let path = format!("{at}.external_ips[{j}]");
                if let Some(addr) = self.host(&path, text) {
                    candidates.push((path, addr, port, ListenerKind::ExternalIp));
                }
            }
            if let Some(np) = s.node_port {
                let path = format!("{at}.node_port");
                let np = self
                    .ranged(&path, np, 1..=65_535)
                    .and_then(|p| u16::try_from(p).ok());
                if !any_node_addresses {
                    self.problem(
                        &path,
                        "needs a node address, but no port has node_addresses",
                    );
                } else if let Some(np) = np {
                    if let Some(range) = &port_range
                        && range.contains(&np)
                        && let Some(addr) = dual.first()
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
                    for &addr in &node_addrs {
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
            let mut backend_at: HashMap<SocketAddrV4, usize> = HashMap::new();
            for (j, b) in s.backends.iter().enumerate() {
                let bat = format!("{at}.backends[{j}]");
                let addr = self.host(&format!("{bat}.address"), &b.address);
                let bport = self
                    .ranged(&format!("{bat}.port"), b.port, 1..=65_535)
                    .and_then(|p| u16::try_from(p).ok());
                let weight = self
                    .ranged(&format!("{bat}.weight"), b.weight, 0..=MAX_WEIGHT)
                    .and_then(|w| u32::try_from(w).ok());
                let (Some(addr), Some(bport), Some(weight)) = (addr, bport, weight) else {
                    continue;
                };
                let sa = SocketAddrV4::new(addr, bport);
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

        let afxdp_ports = file
            .ports
            .iter()
            .filter(|p| p.driver == DriverKind::Afxdp)
            .count() as u64;
        let afxdp = self.afxdp(&dp.afxdp, afxdp_ports);
        let neighbour_table = self.neighbour_table(&dp.neighbour_table);
        // --- kubernetes and address pools
        let kubernetes = file.kubernetes.as_ref().map(|k| self.kubernetes(k));
        let mut taken: Vec<(Ipv4Addr, String)> = owners
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
        let address_pools = self.address_pools(&file.address_pools, &taken);

        Plan {
            dataplane: DataplanePlan {
                workers: workers.unwrap_or(1) as usize,
                cores,
                batch_size: batch_size.unwrap_or(1) as usize,
                idle: dp.idle,
                maglev_table_size: u32::try_from(maglev).unwrap_or(0),
                conntrack: ConntrackPlan {
                    capacity: ct_capacity.and_then(|c| u32::try_from(c).ok()).unwrap_or(0),
                    expiry_scan_per_poll: expiry_scan
                        .and_then(|c| u32::try_from(c).ok())
                        .unwrap_or(0),
                    early_drop_scan: early_drop_scan
                        .and_then(|c| u32::try_from(c).ok())
                        .unwrap_or(0),
                    timeouts,
                },
                snat: SnatPlan {
                    addresses: snat_addrs,
                    port_range: port_range.unwrap_or(1..=1),
                    quarantine_ms: quarantine_ms.unwrap_or(0),
                },
                affinity_capacity: affinity_capacity
                    .and_then(|c| u32::try_from(c).ok())
                    .unwrap_or(0),
                afxdp,
                neighbour_table,
            },
            ports,
            vip_port,
            addresses,
            routes,
            neighbours,
            services,
            dpdk,
            kubernetes,
            address_pools,
        }
    }

    fn kubernetes(&mut self, k: &KubernetesSection) -> KubernetesPlan {
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
            leader_election: LeaderElectionPlan {
                lease_name: k.lease_name.clone(),
                lease_namespace: k.lease_namespace.clone(),
                lease_duration_ms: k.lease_duration_ms,
                renew_deadline_ms: k.renew_deadline_ms,
                retry_period_ms: k.retry_period_ms,
                identity: k.identity.clone(),
            },
        }
    }

    /// `taken`: addresses a pool must not contain, sorted, with what they
    /// are.
    fn address_pools(
        &mut self,
        pools: &[AddressPoolSection],
        taken: &[(Ipv4Addr, String)],
    ) -> Vec<AddressPoolPlan> {
        let mut plans = Vec::new();
        let mut names: HashMap<&str, usize> = HashMap::new();
        // Every valid entry so far, with its path and text.
        let mut entries: Vec<(Ipv4Range, String, &str)> = Vec::new();
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
                let range = match text.parse::<Ipv4Range>() {
                    Ok(r) => r,
                    Err(e) => {
                        self.problem(path, e.to_string());
                        all_parsed = false;
                        continue;
                    }
                };
                if let Some((_, _, what)) = NOT_POOLABLE.iter().find(|(first, last, _)| {
                    range.overlaps(&Ipv4Range {
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
            if all_parsed && !pool.addresses.is_empty() && plan.size() == 0 {
                self.problem(
                    format!("{at}.addresses"),
                    "has no address left to hand out: every one ends in .0 or .255 and avoid_buggy_ips is set",
                );
            }
            plans.push(plan);
        }
        plans
    }

    fn timeouts(&mut self, t: &TimeoutsSection) -> TimeoutsMs {
        let mut ms = [0u64; 11];
        for (slot, (name, seconds)) in ms.iter_mut().zip(t.named()) {
            let path = format!("dataplane.conntrack.timeouts.{name}");
            *slot = self.seconds_ms(&path, seconds, 1).unwrap_or(0);
        }
        let [
            tcp_syn_sent_ms,
            tcp_syn_recv_ms,
            tcp_established_ms,
            tcp_fin_wait_ms,
            tcp_close_wait_ms,
            tcp_last_ack_ms,
            tcp_time_wait_ms,
            tcp_close_ms,
            udp_ms,
            udp_stream_ms,
            icmp_ms,
        ] = ms;
        TimeoutsMs {
            tcp_syn_sent_ms,
            tcp_syn_recv_ms,
            tcp_established_ms,
            tcp_fin_wait_ms,
            tcp_close_wait_ms,
            tcp_last_ack_ms,
            tcp_time_wait_ms,
            tcp_close_ms,
            udp_ms,
            udp_stream_ms,
            icmp_ms,
        }
    }

    /// `"first-last"`, both in `1..=65535`, `first <= last`.
    /// `[dataplane.afxdp]`; `afxdp_ports` is how many ports use the driver
    /// (they share one UMEM per worker).
    fn afxdp(&mut self, a: &AfxdpSection, afxdp_ports: u64) -> AfxdpPlan {
        let mut ring = |key: &str, v: u64| -> u32 {
            let path = format!("dataplane.afxdp.{key}");
            match self.ranged(&path, v, XDP_RING_RANGE) {
                Some(v) if v.is_power_of_two() => v as u32,
                Some(v) => {
                    self.problem(path, format!("{v} is not a power of two"));
                    0
                }
                None => 0,
            }
        };
        let fill = ring("fill_ring_size", a.fill_ring_size);
        let completion = ring("completion_ring_size", a.completion_ring_size);
        let rx = ring("rx_ring_size", a.rx_ring_size);
        let tx = ring("tx_ring_size", a.tx_ring_size);
        let frame_size = if matches!(a.frame_size, 2048 | 4096) {
            a.frame_size as u32
        } else {
            self.problem(
                "dataplane.afxdp.frame_size",
                format!("{} is not 2048 or 4096", a.frame_size),
            );
            0
        };
        let umem_frames = self
            .ranged(
                "dataplane.afxdp.umem_frames",
                a.umem_frames,
                1..=MAX_UMEM_FRAMES,
            )
            .unwrap_or(0) as u32;
        let needed = afxdp_ports * (u64::from(fill) + u64::from(tx));
        if umem_frames > 0 && fill > 0 && tx > 0 && u64::from(umem_frames) < needed {
            self.problem(
                "dataplane.afxdp.umem_frames",
                format!(
                    "{umem_frames} frames cannot fill the fill and TX rings of {afxdp_ports} \
                     afxdp port(s) ({afxdp_ports} × ({fill} + {tx}) = {needed})"
                ),
            );
        }
        if a.zero_copy == ZeroCopySetting::On && a.mode == XdpModeSetting::Generic {
            self.problem(
                "dataplane.afxdp.zero_copy",
                "\"on\" needs native XDP, but mode is \"generic\" (copy mode only)",
            );
        }
        AfxdpPlan {
            mode: a.mode,
            zero_copy: a.zero_copy,
            frame_size,
            umem_frames,
            fill_ring_size: fill,
            completion_ring_size: completion,
            rx_ring_size: rx,
            tx_ring_size: tx,
            need_wakeup: a.need_wakeup,
            shared_umem: a.shared_umem,
        }
    }

    /// `[dataplane.neighbour_table]`.
    fn neighbour_table(&mut self, n: &NeighbourTableSection) -> NeighbourTablePlan {
        let mut field = |key: &str, value: u64, range: RangeInclusive<u64>| {
            self.ranged(&format!("dataplane.neighbour_table.{key}"), value, range)
        };
        let capacity = field("capacity", n.capacity, 16..=1 << 22).map(u64::next_power_of_two);
        let reachable_ms = field("reachable_ms", n.reachable_ms, 1_000..=86_400_000);
        let retrans_ms = field("retrans_ms", n.retrans_ms, 10..=60_000);
        let max_probes = field("max_probes", n.max_probes, 1..=100);
        let failed_hold_ms = field("failed_hold_ms", n.failed_hold_ms, 0..=3_600_000);
        let gc_stale_ms = field("gc_stale_ms", n.gc_stale_ms, 1_000..=86_400_000);
        let gc_min_entries = match capacity {
            Some(c) if n.gc_min_entries > c => {
                self.problem(
                    "dataplane.neighbour_table.gc_min_entries",
                    format!(
                        "{} is more than the {c} entries of the table (capacity, rounded up to \
                         a power of two)",
                        n.gc_min_entries
                    ),
                );
                None
            }
            _ => Some(n.gc_min_entries),
        };
        // Every value below is range-checked, so each fits its type.
        let narrow = |v: Option<u64>| v.and_then(|v| u32::try_from(v).ok()).unwrap_or(0);
        NeighbourTablePlan {
            capacity: narrow(capacity),
            reachable_ms: reachable_ms.unwrap_or(0),
            retrans_ms: retrans_ms.unwrap_or(0),
            max_probes: narrow(max_probes),
            failed_hold_ms: failed_hold_ms.unwrap_or(0),
            gc_stale_ms: gc_stale_ms.unwrap_or(0),
            gc_min_entries: narrow(gc_min_entries),
        }
    }

    fn port_range(&mut self, text: &str) -> Option<RangeInclusive<u16>> {
        let path = "dataplane.snat.port_range";
        let parsed = text.split_once('-').and_then(|(a, b)| {
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
            if digits(a) && digits(b) {
                Some((a.parse::<u16>().ok()?, b.parse::<u16>().ok()?))
            } else {
                None
            }
        });
        match parsed {
            None => {
                self.problem(
                    path,
                    format!("{text:?} is not a port range like \"1024-65535\""),
                );
                None
            }
            Some((0, _)) => {
                self.problem(path, "port 0 cannot be a source port");
                None
            }
            Some((a, b)) if a > b => {
                self.problem(path, format!("{a}-{b} is empty (first > last)"));
                None
            }
            Some((a, b)) => Some(a..=b),
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
    fn roles(&mut self, file: &ConfigFile) -> PortIndex {
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

    /// The port a next hop is reached on: the longest connected subnet
    /// containing it (on `port` when given).
    fn next_hop_port(
        &mut self,
        at: &str,
        via: Ipv4Addr,
        port: Option<PortIndex>,
        connected: &[(Ipv4Prefix, PortIndex, String)],
        owners: &HashMap<Ipv4Addr, Owner>,
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
