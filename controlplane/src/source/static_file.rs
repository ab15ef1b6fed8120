//! The standalone services of `portico.toml`: a validated
//! [`nic_config::Plan`] mapped onto the dataplane's [`SnapshotSpec`] and
//! worker configuration.
//!
//! Port MACs and MTUs not given in the file are read from the interfaces
//! when the gateway starts; callers pass what they found as [`PortFacts`].
//!
//! The plan holds both families and so does the spec: addresses, routes,
//! neighbours, listeners and endpoints of either family pass through as
//! they are (a service is single-family in both). The workers' IPv4 SNAT
//! pool takes the IPv4 SNAT addresses from the worker configuration; the
//! IPv6 ones reach the workers as the spec's owned addresses of role SNAT.

use crate::mirror::ToDataplane;
use dataplane::conntrack::{ConntrackConfig, Timeouts};
use dataplane::driver::hostpath::kernel_link_local;
use dataplane::flow::TableHasher;
use dataplane::snapshot::{
    AddrRole, EndpointSpec, NeighbourSpec, PortSpec, Route, ServiceSpec, SnapshotSpec,
};
use dataplane::snat::{DEFAULT_PROBE_LIMIT, DEFAULT_QUARANTINE_CAPACITY, SnatConfig};
use dataplane::stage::PipelineConfig;
use dataplane::worker::WorkerConfig;
use nic_config::Plan;
use std::net::IpAddr;

/// What the running system says about a port (the file may override it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortFacts {
    pub mac: [u8; 6],
    pub mtu: u16,
}

/// The kernel's link-local address on the host interface of every port
/// with an IPv6 host address ([`kernel_link_local`] of the port's MAC), a
/// host address of that port: NDP and traffic for it go to the kernel.
fn host_link_locals(plan: &Plan, ports: &[PortSpec]) -> Vec<(IpAddr, u8, AddrRole)> {
    plan.ports
        .iter()
        .zip(ports)
        .enumerate()
        .filter(|(_, (p, _))| p.host_addresses.iter().any(|h| h.address.is_ipv6()))
        .map(|(i, (_, spec))| {
            (
                IpAddr::V6(kernel_link_local(spec.mac)),
                i as u8,
                AddrRole::Host,
            )
        })
        .collect()
}

/// The snapshot spec of a plan.
pub fn snapshot_spec(plan: &Plan, facts: &[PortFacts]) -> SnapshotSpec {
    let ports: Vec<PortSpec> = plan
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let found = facts.get(i).copied().unwrap_or(PortFacts {
                mac: [0; 6],
                mtu: 1500,
            });
            let mtu = p.mtu.unwrap_or(found.mtu);
            PortSpec {
                mac: p.mac.map_or(found.mac, |m| m.0),
                mtu,
                mss_clamp: p.mss_clamp.map(|c| c.bytes(mtu)),
            }
        })
        .collect();
    let addresses = plan
        .addresses
        .iter()
        .map(|a| {
            let role = match a.role {
                nic_config::AddressRole::Node => AddrRole::Node,
                nic_config::AddressRole::Snat => AddrRole::Snat,
            };
            (a.address, a.port as u8, role)
        })
        .chain(plan.ports.iter().enumerate().flat_map(|(i, p)| {
            p.host_addresses
                .iter()
                .map(move |h| (h.address, i as u8, AddrRole::Host))
        }))
        .chain(host_link_locals(plan, &ports))
        .collect();
    let routes = plan
        .routes
        .iter()
        .map(|r| Route {
            dest: r.destination.network().address,
            prefix_len: r.destination.prefix_len,
            port: r.port as u8,
            via: r.via,
        })
        .collect();
    let neighbours = plan
        .neighbours
        .iter()
        .map(|n| NeighbourSpec {
            addr: n.address,
            mac: n.mac.0,
        })
        .collect();
    let services = plan.services.iter().map(service_spec).collect();
    SnapshotSpec {
        ports,
        vip_port: plan.vip_port as u8,
        addresses,
        routes,
        neighbours,
        services,
        maglev_table_size: plan.dataplane.maglev_table_size,
    }
}

fn service_spec(s: &nic_config::ServicePlan) -> ServiceSpec {
    ServiceSpec {
        name: s.name.clone(),
        proto: s.protocol.to_dataplane(),
        listeners: s
            .listeners
            .iter()
            .map(|l| (l.address, l.port, l.kind.to_dataplane()))
            .collect(),
        endpoints: s
            .backends
            .iter()
            .map(|b| EndpointSpec {
                addr: b.address,
                weight: b.weight,
                condition: b.condition.to_dataplane(),
            })
            .collect(),
        snat: s.snat,
        affinity_timeout_ms: s.affinity_timeout_ms,
        tcp_backend_gone: s.tcp_backend_gone.to_dataplane(),
        syn_proxy: s.syn_proxy.to_dataplane(),
        tcp_pickup: s.tcp_pickup,
    }
}

/// The configuration of worker `worker` of the plan.
pub fn worker_config(plan: &Plan, worker: usize) -> WorkerConfig {
    let d = &plan.dataplane;
    let t = &d.conntrack.timeouts;
    WorkerConfig {
        pipeline: PipelineConfig {
            worker: worker as u8,
            workers: d.workers as u8,
            conntrack: ConntrackConfig {
                capacity: d.conntrack.capacity,
                timeouts: Timeouts {
                    tcp_syn_sent_ms: t.tcp_syn_sent_ms,
                    tcp_syn_recv_ms: t.tcp_syn_recv_ms,
                    tcp_established_ms: t.tcp_established_ms,
                    tcp_fin_wait_ms: t.tcp_fin_wait_ms,
                    tcp_close_wait_ms: t.tcp_close_wait_ms,
                    tcp_last_ack_ms: t.tcp_last_ack_ms,
                    tcp_time_wait_ms: t.tcp_time_wait_ms,
                    tcp_close_ms: t.tcp_close_ms,
                    udp_ms: t.udp_ms,
                    udp_stream_ms: t.udp_stream_ms,
                    icmp_ms: t.icmp_ms,
                },
                expiry_scan_per_poll: d.conntrack.expiry_scan_per_poll,
                early_drop_scan: d.conntrack.early_drop_scan,
                syn_proxy_flows: d.conntrack.syn_proxy_flows,
            },
            snat: SnatConfig {
                addrs: d
                    .snat
                    .addresses
                    .iter()
                    .filter_map(|a| match a {
                        IpAddr::V4(a) => Some(*a),
                        IpAddr::V6(_) => None,
                    })
                    .collect(),
                port_range: d.snat.port_range.clone(),
                quarantine_ms: d.snat.quarantine_ms,
                quarantine_capacity: DEFAULT_QUARANTINE_CAPACITY,
                probe_limit: DEFAULT_PROBE_LIMIT,
            },
            affinity_capacity: d.affinity_capacity,
            seed: 0x7061_7274_6963_6f00 ^ worker as u64,
            // Fixed here (`portico simulate` reproduces a run); the gateway
            // replaces both with random ones per process.
            table_hasher: TableHasher::from_seed(0x7061_7274_6963_6f00),
            new_flows_per_source_per_s: d.new_flows_per_source_per_s,
            source_prefix_len_v6: d.source_prefix_len_v6,
        },
        batch_size: d.batch_size,
        idle: (d.idle, d.idle_spin_polls).to_dataplane(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::snapshot::SnapshotBuilder;
    use dataplane::stage::Pipeline;

    fn example(name: &str) -> Plan {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples")
            .join(name);
        nic_config::load(&path).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    #[test]
    fn every_example_maps_to_a_snapshot_and_workers_that_build() {
        for name in [
            "standalone-two-port.toml",
            "one-arm.toml",
            "dual-stack.toml",
        ] {
            let plan = example(name);
            let facts = vec![
                PortFacts {
                    mac: [2, 0, 0, 0, 0, 9],
                    mtu: 1500
                };
                plan.ports.len()
            ];
            let spec = snapshot_spec(&plan, &facts);
            let snap = SnapshotBuilder::new()
                .build(&spec)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(snap.services.iter().flatten().count(), plan.services.len());
            for l in plan.services.iter().flat_map(|s| &s.listeners) {
                let owned = match l.address {
                    IpAddr::V4(a) => snap.owned(a),
                    IpAddr::V6(a) => snap.owned6(a),
                };
                assert!(
                    owned.is_some(),
                    "{name}: listener address {} owned",
                    l.address
                );
            }
            for w in 0..plan.dataplane.workers {
                Pipeline::new(&worker_config(&plan, w).pipeline, Default::default())
                    .unwrap_or_else(|e| panic!("{name} worker {w}: {e}"));
            }
        }
    }

    #[test]
    fn file_values_override_interface_facts() {
        let plan = example("standalone-two-port.toml");
        let spec = snapshot_spec(
            &plan,
            &[PortFacts {
                mac: [2, 9, 9, 9, 9, 9],
                mtu: 9000,
            }; 2],
        );
        for (p, s) in plan.ports.iter().zip(&spec.ports) {
            assert_eq!(s.mac, p.mac.map_or([2, 9, 9, 9, 9, 9], |m| m.0));
            assert_eq!(s.mtu, p.mtu.unwrap_or(9000));
        }
    }

    #[test]
    fn ipv6_addresses_routes_neighbours_and_services_reach_the_snapshot() {
        let plan = example("dual-stack.toml");
        let spec = snapshot_spec(
            &plan,
            &[PortFacts {
                mac: [2, 0, 0, 0, 0, 9],
                mtu: 1500,
            }; 2],
        );
        let ip = |s: &str| -> IpAddr { s.parse().expect("ip") };
        assert!(
            spec.addresses
                .contains(&(ip("2001:db8::1"), 0, AddrRole::Node))
        );
        assert!(
            spec.addresses
                .contains(&(ip("fd00:1::1"), 1, AddrRole::Snat))
        );
        assert!(spec.routes.contains(&Route {
            dest: ip("::"),
            prefix_len: 0,
            port: 0,
            via: Some(ip("fe80::1")),
        }));
        assert!(spec.routes.contains(&Route {
            dest: ip("fd00:1::"),
            prefix_len: 64,
            port: 1,
            via: None,
        }));
        assert_eq!(spec.neighbours[0].addr, ip("fd00:1::10"));
        let web6 = spec
            .services
            .iter()
            .find(|s| s.name == "web6")
            .expect("web6");
        assert!(web6.listeners.iter().all(|(a, _, _)| a.is_ipv6()));
        assert_eq!(
            web6.endpoints[0].addr,
            "[fd00:1::10]:8080".parse().expect("addr")
        );
        let snap = SnapshotBuilder::new().build(&spec).expect("builds");
        let v6: std::net::Ipv6Addr = "2001:db8:5::10".parse().expect("ip");
        let listener = snap
            .listener6(dataplane::flow::Proto::Tcp, v6, 80)
            .expect("the IPv6 VIP listens");
        assert_eq!(
            snap.service(listener.service).map(|s| &*s.name),
            Some("web6")
        );
        // The IPv4 SNAT addresses go to the workers' SNAT pool.
        assert_eq!(
            worker_config(&plan, 0).pipeline.snat.addrs,
            [std::net::Ipv4Addr::new(10, 1, 0, 1)]
        );
    }

    /// The dual-stack example forwards over IPv6: a client's SYN to the
    /// IPv6 VIP leaves the inside port from the IPv6 SNAT address to the
    /// IPv6 backend (the one with a static NDP entry).
    #[test]
    fn the_dual_stack_example_forwards_an_ipv6_syn_with_full_nat() {
        use dataplane::clock::ManualClock;
        use dataplane::counters::SharedCounters;
        use dataplane::driver::mem::{MemConfig, MemDriver};
        use dataplane::snapshot::Publisher;
        use dataplane::wire::{MacAddr, build};
        use dataplane::worker::Worker;
        use std::net::Ipv6Addr;
        use std::sync::Arc;

        let mut plan = example("dual-stack.toml");
        // One worker: no steering to another.
        plan.dataplane.workers = 1;
        if let Some(web6) = plan.services.iter_mut().find(|s| s.name == "web6") {
            web6.backends.truncate(1);
        }
        let (out_mac, in_mac) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let facts = [
            PortFacts {
                mac: out_mac,
                mtu: 1500,
            },
            PortFacts {
                mac: in_mac,
                mtu: 1500,
            },
        ];
        let snap = SnapshotBuilder::new()
            .build(&snapshot_spec(&plan, &facts))
            .expect("builds");
        let publisher = Publisher::new(snap);
        let mut worker = Worker::new(
            &worker_config(&plan, 0),
            MemDriver::new(MemConfig::default()),
            ManualClock::new(1_000),
            publisher.reader(),
            Arc::new(SharedCounters::default()),
            None,
            Arc::new(dataplane::neighbour::NeighbourTable::new(Default::default())),
        )
        .expect("worker");
        worker.poll();
        for p in [0, 1] {
            worker.driver_mut().take_tx(p);
        }
        let client: Ipv6Addr = "2001:db8:7::99".parse().expect("ip");
        let vip: Ipv6Addr = "2001:db8:5::10".parse().expect("ip");
        let syn = build::eth_ipv6_tcp(
            MacAddr([2, 0, 0, 0, 0, 0x99]),
            MacAddr(out_mac),
            (client, 40_000),
            (vip, 80),
            dataplane::wire::tcp::flags::SYN,
            1,
            0,
            b"",
        );
        worker.driver_mut().inject(0, &syn).expect("inject");
        worker.poll();
        let sent = worker.driver_mut().take_tx(1);
        assert_eq!(
            sent.len(),
            1,
            "one frame to the backend; verdict {:?}, counters {:?}",
            worker.pipeline().metas()[0].verdict,
            worker.pipeline().counters()
        );
        let f = &sent[0];
        let addr = |at: usize| -> Ipv6Addr {
            let mut b = [0u8; 16];
            b.copy_from_slice(&f[at..at + 16]);
            Ipv6Addr::from(b)
        };
        assert_eq!(&f[12..14], &[0x86, 0xdd], "IPv6");
        assert_eq!(
            addr(22),
            "fd00:1::1".parse::<Ipv6Addr>().expect("ip"),
            "from the IPv6 SNAT address"
        );
        assert_eq!(
            addr(38),
            "fd00:1::10".parse::<Ipv6Addr>().expect("ip"),
            "to the backend"
        );
        assert_eq!(
            u16::from_be_bytes([f[56], f[57]]),
            8080,
            "the backend's port"
        );
        assert_eq!(
            &f[0..6],
            &[2, 0, 0, 0, 1, 0x10],
            "the static NDP entry's MAC"
        );
    }

    #[test]
    fn a_pmtu_clamp_follows_the_ports_mtu_and_a_number_is_kept() {
        let mut plan = example("standalone-two-port.toml");
        plan.ports[0].mtu = None;
        plan.ports[0].mss_clamp = Some(nic_config::MssClampPlan::Pmtu);
        plan.ports[1].mss_clamp = Some(nic_config::MssClampPlan::Bytes(1300));
        let facts = [PortFacts {
            mac: [2, 9, 9, 9, 9, 9],
            mtu: 1400,
        }; 2];
        let spec = snapshot_spec(&plan, &facts);
        assert_eq!(
            spec.ports[0].mss_clamp,
            Some(1360),
            "the interface's MTU - 40"
        );
        assert_eq!(spec.ports[1].mss_clamp, Some(1300));
        let snap = SnapshotBuilder::new().build(&spec).expect("builds");
        assert_eq!(snap.ports[0].mss_clamp, Some(1360));
    }
}
