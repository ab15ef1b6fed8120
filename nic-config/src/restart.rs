//! Which parts of a [`Plan`] a running gateway can change live.
//!
//! [`Plan::split`] cuts a plan into a [`RestartPart`] (the settings the
//! workers, their drivers and the interfaces were set up with) and a
//! [`LivePart`] (what the forwarding tables are built from). A reload
//! compares both halves with `PartialEq`: a different restart part needs a
//! restart ([`RestartPart::changes_to`] names each changed setting), a
//! different live part is a new snapshot, equal halves are no change.
//!
//! A port's host addresses and host interface are in the restart part:
//! the gateway creates the host interface (a TAP), assigns its addresses
//! and opens one queue per worker when it starts; changing them would
//! mean re-creating the TAP under the kernel's sockets (a BGP session
//! bound to a host address) while the workers hold its queues.
//!
//! `[bgp]` is in the live part: a changed peer needs that peer's session
//! restarted, not the workers, and a changed advertisement only new
//! UPDATEs: the gateway's `bgp` module restarts the sessions whose
//! `PeerConfig` differs (peer by peer, with `PartialEq`) and sends the
//! others the new desired routes.
//!
//! Invariants:
//! * every field of a plan is in exactly one half: [`Plan::split`]
//!   destructures [`Plan`], [`DataplanePlan`] and [`PortPlan`] without `..`,
//!   so a new field does not compile until it is put in one;
//! * `a == b` exactly when `a.split() == b.split()`;
//! * [`RestartPart::changes_to`] is empty exactly when the restart parts are
//!   equal (it destructures the parts without `..` too, and names the
//!   restart part as a whole if no single setting explains a difference).

use crate::addr::{IpPrefix, MacAddr};
use crate::plan::{
    AddressPoolPlan, AfpacketPlan, AfxdpPlan, BgpPlan, ConntrackPlan, DataplanePlan,
    DpdkDevicePlan, DpdkPlan, KubernetesPlan, MssClampPlan, NeighbourPlan, NeighbourTablePlan,
    OwnedAddress, Plan, PortIndex, PortPlan, RoutePlan, ServicePlan, SnatPlan, TimeoutsMs,
};
use crate::schema::{DriverKind, IdlePolicy, PortRole};
use std::fmt::Debug;

/// The settings only a restart applies: the workers, their tables and
/// drivers, the ports' interfaces, the DPDK EAL and the Kubernetes source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartPart<'a> {
    pub workers: usize,
    pub cores: &'a [usize],
    pub batch_size: usize,
    pub idle: IdlePolicy,
    pub idle_spin_polls: u32,
    pub conntrack: &'a ConntrackPlan,
    pub snat: &'a SnatPlan,
    pub affinity_capacity: u32,
    pub afxdp: &'a AfxdpPlan,
    pub afpacket: &'a AfpacketPlan,
    pub neighbour_table: &'a NeighbourTablePlan,
    pub new_flows_per_source_per_s: u32,
    pub source_prefix_len_v6: u8,
    /// One per port, in port order.
    pub ports: Vec<PortRestartPart<'a>>,
    pub dpdk: &'a DpdkPlan,
    pub kubernetes: Option<&'a KubernetesPlan>,
    /// The instance's name in the tier (its member Lease).
    pub instance: Option<&'a str>,
    /// [`Plan::vips_by_arp`].
    pub vips_by_arp: bool,
}

/// What a port's driver was opened with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortRestartPart<'a> {
    pub name: &'a str,
    pub driver: DriverKind,
    pub interface: &'a str,
    pub role: PortRole,
    pub mac: Option<MacAddr>,
    pub mtu: Option<u16>,
    pub dpdk_device: Option<&'a DpdkDevicePlan>,
    /// The host interface is created (and its addresses assigned) when
    /// the gateway starts; the workers' TAP queues are opened then.
    pub host_addresses: &'a [IpPrefix],
    pub host_interface: Option<&'a str>,
}

/// What a reload applies live: addresses, routes, neighbours, services,
/// the Maglev table size and the address pools (a new snapshot), and BGP
/// (per session).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LivePart<'a> {
    pub maglev_table_size: u32,
    /// One per port, in port order.
    pub ports: Vec<PortLivePart<'a>>,
    pub vip_port: PortIndex,
    pub addresses: &'a [OwnedAddress],
    pub routes: &'a [RoutePlan],
    pub neighbours: &'a [NeighbourPlan],
    pub services: &'a [ServicePlan],
    pub address_pools: &'a [AddressPoolPlan],
    pub bgp: &'a BgpPlan,
}

/// A port's addresses (the SNAT addresses as a whole are also in the
/// restart part: the workers' allocators are built from them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortLivePart<'a> {
    pub node_addresses: &'a [IpPrefix],
    pub snat_addresses: &'a [IpPrefix],
    /// In the snapshot: a reload applies it.
    pub mss_clamp: Option<MssClampPlan>,
}

impl Plan {
    /// The plan cut into the part only a restart applies and the part a
    /// reload applies live.
    pub fn split(&self) -> (RestartPart<'_>, LivePart<'_>) {
        let Plan {
            dataplane,
            ports,
            vip_port,
            addresses,
            routes,
            neighbours,
            services,
            dpdk,
            kubernetes,
            address_pools,
            bgp,
            instance,
            vips_by_arp,
        } = self;
        let DataplanePlan {
            workers,
            cores,
            batch_size,
            idle,
            idle_spin_polls,
            maglev_table_size,
            conntrack,
            snat,
            affinity_capacity,
            afxdp,
            afpacket,
            neighbour_table,
            new_flows_per_source_per_s,
            source_prefix_len_v6,
        } = dataplane;
        let (port_restart, port_live) = ports.iter().map(split_port).unzip();
        (
            RestartPart {
                workers: *workers,
                cores,
                batch_size: *batch_size,
                idle: *idle,
                idle_spin_polls: *idle_spin_polls,
                conntrack,
                snat,
                affinity_capacity: *affinity_capacity,
                afxdp,
                afpacket,
                neighbour_table,
                new_flows_per_source_per_s: *new_flows_per_source_per_s,
                source_prefix_len_v6: *source_prefix_len_v6,
                ports: port_restart,
                dpdk,
                kubernetes: kubernetes.as_ref(),
                instance: instance.as_deref(),
                vips_by_arp: *vips_by_arp,
            },
            LivePart {
                maglev_table_size: *maglev_table_size,
                ports: port_live,
                vip_port: *vip_port,
                addresses,
                routes,
                neighbours,
                services,
                address_pools,
                bgp,
            },
        )
    }
}

fn split_port(port: &PortPlan) -> (PortRestartPart<'_>, PortLivePart<'_>) {
    let PortPlan {
        name,
        driver,
        interface,
        role,
        node_addresses,
        snat_addresses,
        host_addresses,
        host_interface,
        mac,
        mtu,
        mss_clamp,
        dpdk_device,
    } = port;
    (
        PortRestartPart {
            name,
            driver: *driver,
            interface,
            role: *role,
            mac: *mac,
            mtu: *mtu,
            dpdk_device: dpdk_device.as_ref(),
            host_addresses,
            host_interface: host_interface.as_deref(),
        },
        PortLivePart {
            node_addresses,
            snat_addresses,
            mss_clamp: *mss_clamp,
        },
    )
}

/// Changed settings as `path (old -> new)`.
#[derive(Default)]
struct Changes(Vec<String>);

impl Changes {
    fn check<T: PartialEq>(&mut self, path: &str, old: &T, new: &T, show: impl Fn(&T) -> String) {
        if old != new {
            self.0
                .push(format!("{path} ({} -> {})", show(old), show(new)));
        }
    }

    fn debug<T: PartialEq + Debug>(&mut self, path: &str, old: &T, new: &T) {
        self.check(path, old, new, |v| format!("{v:?}"));
    }

    fn display<T: PartialEq + ToString>(&mut self, path: &str, old: &T, new: &T) {
        self.check(path, old, new, ToString::to_string);
    }
}

impl RestartPart<'_> {
    /// Every setting of `self` that differs in `new`, each as
    /// `path (old -> new)` with the path of its key in the file. Empty
    /// exactly when `self == new`.
    pub fn changes_to(&self, new: &RestartPart<'_>) -> Vec<String> {
        let RestartPart {
            workers,
            cores,
            batch_size,
            idle,
            idle_spin_polls,
            conntrack,
            snat,
            affinity_capacity,
            afxdp,
            afpacket,
            neighbour_table,
            new_flows_per_source_per_s,
            source_prefix_len_v6,
            ports,
            dpdk,
            kubernetes,
            instance,
            vips_by_arp,
        } = self;
        let mut c = Changes::default();
        c.display("dataplane.workers", workers, &new.workers);
        c.debug("dataplane.cores", cores, &new.cores);
        c.display("dataplane.batch_size", batch_size, &new.batch_size);
        c.display("dataplane.idle", idle, &new.idle);
        c.display(
            "dataplane.idle_spin_polls",
            idle_spin_polls,
            &new.idle_spin_polls,
        );
        conntrack_changes(&mut c, conntrack, new.conntrack);
        snat_changes(&mut c, snat, new.snat);
        c.display(
            "dataplane.affinity.capacity",
            affinity_capacity,
            &new.affinity_capacity,
        );
        c.debug("dataplane.afxdp", afxdp, &new.afxdp);
        c.debug("dataplane.afpacket", afpacket, &new.afpacket);
        c.debug(
            "dataplane.neighbour_table",
            neighbour_table,
            &new.neighbour_table,
        );
        c.display(
            "dataplane.new_flows_per_source_per_s",
            new_flows_per_source_per_s,
            &new.new_flows_per_source_per_s,
        );
        c.display(
            "dataplane.source_prefix_len_v6",
            source_prefix_len_v6,
            &new.source_prefix_len_v6,
        );
        if ports.len() == new.ports.len() {
            for (i, (p, q)) in ports.iter().zip(&new.ports).enumerate() {
                port_changes(&mut c, i, p, q);
            }
        } else {
            c.display("number of ports", &ports.len(), &new.ports.len());
        }
        c.debug("dpdk", dpdk, &new.dpdk);
        c.debug("kubernetes", kubernetes, &new.kubernetes);
        c.debug("instance", instance, &new.instance);
        c.display(
            "instance (VIPs announced by ARP)",
            vips_by_arp,
            &new.vips_by_arp,
        );
        if c.0.is_empty() && self != new {
            c.0.push("settings only a restart applies".to_owned());
        }
        c.0
    }
}

fn conntrack_changes(c: &mut Changes, old: &ConntrackPlan, new: &ConntrackPlan) {
    let ConntrackPlan {
        capacity,
        expiry_scan_per_poll,
        early_drop_scan,
        syn_proxy_flows,
        timeouts,
    } = old;
    c.display("dataplane.conntrack.capacity", capacity, &new.capacity);
    c.display(
        "dataplane.conntrack.syn_proxy_flows",
        syn_proxy_flows,
        &new.syn_proxy_flows,
    );
    c.display(
        "dataplane.conntrack.expiry_scan_per_poll",
        expiry_scan_per_poll,
        &new.expiry_scan_per_poll,
    );
    c.display(
        "dataplane.conntrack.early_drop_scan",
        early_drop_scan,
        &new.early_drop_scan,
    );
    timeout_changes(c, timeouts, &new.timeouts);
}

fn timeout_changes(c: &mut Changes, old: &TimeoutsMs, new: &TimeoutsMs) {
    let before = c.0.len();
    for ((name, x), (_, y)) in old.named().iter().zip(new.named().iter()) {
        c.display(&format!("dataplane.conntrack.timeouts.{name}"), x, y);
    }
    if c.0.len() == before {
        c.debug("dataplane.conntrack.timeouts", old, new);
    }
}

fn snat_changes(c: &mut Changes, old: &SnatPlan, new: &SnatPlan) {
    let SnatPlan {
        addresses,
        port_range,
        quarantine_ms,
    } = old;
    c.debug("SNAT addresses", addresses, &new.addresses);
    c.debug("dataplane.snat.port_range", port_range, &new.port_range);
    c.display(
        "dataplane.snat.quarantine_ms",
        quarantine_ms,
        &new.quarantine_ms,
    );
}

fn port_changes(c: &mut Changes, i: usize, old: &PortRestartPart<'_>, new: &PortRestartPart<'_>) {
    let PortRestartPart {
        name,
        driver,
        interface,
        role,
        mac,
        mtu,
        dpdk_device,
        host_addresses,
        host_interface,
    } = old;
    c.display(&format!("port[{i}].name"), name, &new.name);
    c.display(&format!("port[{i}].driver"), driver, &new.driver);
    c.display(&format!("port[{i}].interface"), interface, &new.interface);
    c.display(&format!("port[{i}].role"), role, &new.role);
    c.check(&format!("port[{i}].mac"), mac, &new.mac, |m| {
        format!("{:?}", m.map(|m| m.to_string()))
    });
    c.debug(&format!("port[{i}].mtu"), mtu, &new.mtu);
    c.debug(
        &format!("port[{i}].dpdk_device"),
        dpdk_device,
        &new.dpdk_device,
    );
    c.check(
        &format!("port[{i}].host_addresses"),
        host_addresses,
        &new.host_addresses,
        |a| {
            format!(
                "{:?}",
                a.iter().map(ToString::to_string).collect::<Vec<_>>()
            )
        },
    );
    c.debug(
        &format!("port[{i}].host_interface"),
        host_interface,
        &new.host_interface,
    );
}

#[cfg(test)]
mod tests {
    use crate::plan::{DpdkDevicePlan, Plan};
    use crate::schema::PortRole;

    fn plan(text: &str) -> Plan {
        crate::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Two ports, two services, a route.
    const BASE: &str = include_str!("../../examples/standalone-two-port.toml");

    /// An edit of a plan: what it changes, whether only a restart applies
    /// it, the edit.
    type Edit = (&'static str, bool, fn(&mut Plan));

    fn edits() -> Vec<Edit> {
        vec![
            ("workers", true, |p| p.dataplane.workers += 1),
            ("cores", true, |p| p.dataplane.cores = vec![3]),
            ("batch_size", true, |p| p.dataplane.batch_size -= 1),
            ("idle", true, |p| {
                p.dataplane.idle = crate::IdlePolicy::Spin;
            }),
            ("idle_spin_polls", true, |p| {
                p.dataplane.idle_spin_polls += 1
            }),
            ("conntrack", true, |p| p.dataplane.conntrack.capacity += 1),
            ("syn_proxy_flows", true, |p| {
                p.dataplane.conntrack.syn_proxy_flows += 1;
            }),
            ("timeouts", true, |p| {
                p.dataplane.conntrack.timeouts.icmp_ms += 1;
            }),
            ("snat", true, |p| p.dataplane.snat.quarantine_ms += 1),
            ("affinity", true, |p| p.dataplane.affinity_capacity += 1),
            ("afxdp", true, |p| p.dataplane.afxdp.need_wakeup ^= true),
            ("afxdp busy poll", true, |p| {
                p.dataplane.afxdp.busy_poll ^= true
            }),
            ("afpacket", true, |p| {
                p.dataplane.afpacket.rx_frame_count += 1
            }),
            ("neighbour_table", true, |p| {
                p.dataplane.neighbour_table.retrans_ms += 1;
            }),
            ("new_flows_per_source_per_s", true, |p| {
                p.dataplane.new_flows_per_source_per_s += 1;
            }),
            ("source_prefix_len_v6", true, |p| {
                p.dataplane.source_prefix_len_v6 += 1;
            }),
            ("port name", true, |p| p.ports[0].name.push('x')),
            ("port driver", true, |p| {
                p.ports[0].driver = crate::DriverKind::Afxdp;
            }),
            ("port interface", true, |p| p.ports[0].interface.push('x')),
            ("port role", true, |p| p.ports[0].role = PortRole::Both),
            ("port mac", true, |p| {
                p.ports[0].mac = Some(crate::MacAddr([2, 0, 0, 0, 0, 1]));
            }),
            ("port mtu", true, |p| p.ports[0].mtu = Some(1400)),
            ("port dpdk_device", true, |p| {
                p.ports[0].dpdk_device = Some(DpdkDevicePlan::AfXdp);
            }),
            ("port host_addresses", true, |p| {
                p.ports[0].host_addresses = vec!["192.0.2.77/24".parse().unwrap()];
            }),
            ("port host_interface", true, |p| {
                p.ports[0].host_interface = Some("tap0".into());
            }),
            ("port count", true, |p| {
                let extra = p.ports[1].clone();
                p.ports.push(extra);
            }),
            ("dpdk", true, |p| p.dpdk.memory_mb += 1),
            ("kubernetes", true, |p| {
                p.kubernetes = Some(crate::KubernetesPlan {
                    kubeconfig: None,
                    load_balancer_class: "portico.dev/lb".into(),
                    serve_unclassed: false,
                    debounce_ms: 0,
                    debounce_max_ms: 0,
                    status_writes: crate::StatusWritesPlan {
                        per_s: 200,
                        burst: 50,
                        in_flight: 8,
                    },
                    leader_election: crate::LeaderElectionPlan {
                        lease_name: "l".into(),
                        lease_namespace: "n".into(),
                        lease_duration_ms: 3,
                        renew_deadline_ms: 2,
                        retry_period_ms: 1,
                        identity: None,
                    },
                    external_ip_cidrs: Vec::new(),
                    syn_proxy: crate::SynProxyPlan::Off,
                    syn_proxy_half_open_threshold: 1000,
                });
            }),
            ("maglev", false, |p| p.dataplane.maglev_table_size = 251),
            ("node addresses", false, |p| {
                p.ports[0].node_addresses.clear()
            }),
            ("snat addresses", false, |p| {
                p.ports[1].snat_addresses.clear();
            }),
            ("vip_port", false, |p| p.vip_port = 1),
            ("addresses", false, |p| p.addresses.clear()),
            ("routes", false, |p| p.routes.clear()),
            ("neighbours", false, |p| {
                p.neighbours.push(crate::NeighbourPlan {
                    address: "10.1.0.10".parse().expect("addr"),
                    mac: crate::MacAddr([2, 0, 0, 0, 0, 2]),
                });
            }),
            ("services", false, |p| p.services.clear()),
            ("address pools", false, |p| {
                p.address_pools.push(crate::AddressPoolPlan {
                    name: "pool".into(),
                    ranges: Vec::new(),
                    auto_assign: true,
                    avoid_buggy_ips: true,
                });
            }),
            ("bgp peers", false, |p| {
                p.bgp.peers.push(portico_bgp::PeerConfig::new(
                    "192.0.2.254".parse().expect("addr"),
                    65000,
                    65001,
                    "192.0.2.1".parse().expect("addr"),
                ));
            }),
            ("bgp advertisements", false, |p| {
                p.bgp.advertisements.push(crate::AdvertisementPlan {
                    advertisement: portico_bgp::Advertisement::new("public"),
                    address_pools: Vec::new(),
                    vips: vec!["192.0.2.10".parse().expect("addr")],
                });
            }),
            ("bgp shutdown drain", false, |p| {
                p.bgp.shutdown_drain_s += 1;
            }),
            ("bgp watchdog", false, |p| {
                p.bgp.watchdog_timeout_ms += 1;
            }),
        ]
    }

    #[test]
    fn every_edit_lands_in_exactly_one_part() {
        let old = plan(BASE);
        let (old_restart, old_live) = old.split();
        assert!(old_restart.changes_to(&old_restart).is_empty());
        for (what, restart, edit) in edits() {
            let mut new = old.clone();
            edit(&mut new);
            assert_ne!(old, new, "{what}: the edit changes the plan");
            let (new_restart, new_live) = new.split();
            let changes = old_restart.changes_to(&new_restart);
            if restart {
                assert_ne!(old_restart, new_restart, "{what}");
                if what != "port count" {
                    // (A new port also has addresses, in the live part.)
                    assert_eq!(old_live, new_live, "{what}");
                }
                assert!(!changes.is_empty(), "{what}: a change is named");
                assert!(
                    !changes
                        .iter()
                        .any(|c| c == "settings only a restart applies"),
                    "{what}: named by its key, not as a whole: {changes:?}"
                );
            } else {
                assert_eq!(old_restart, new_restart, "{what}");
                assert_ne!(old_live, new_live, "{what}");
                assert!(changes.is_empty(), "{what}: {changes:?}");
            }
        }
    }

    #[test]
    fn changes_name_the_key_with_old_and_new_value() {
        let old = plan(BASE);
        let mut new = old.clone();
        new.dataplane.conntrack.timeouts.udp_ms = 7;
        new.ports[1].mtu = Some(1400);
        let (a, _) = old.split();
        let (b, _) = new.split();
        let changes = a.changes_to(&b);
        assert_eq!(
            changes,
            [
                format!(
                    "dataplane.conntrack.timeouts.udp_ms ({} -> 7)",
                    old.dataplane.conntrack.timeouts.udp_ms
                ),
                "port[1].mtu (None -> Some(1400))".to_owned(),
            ]
        );
    }
}
