//! The plan's ports and settings mapped to what the drivers open: the one
//! driver of the gateway, each port's interface prepared (offloads off, MAC
//! and MTU read; for afxdp the queue count checked and the redirect
//! program attached), and the driver configuration each worker opens.

use super::GatewayError;
use super::lifecycle::Gateway;
use crate::mirror::ToDataplane;
use crate::source::static_file::PortFacts;
use dataplane::driver::afpacket::prepare::{
    PreparedInterface, kernel_owned_conflicts, prepare_interface,
};
use dataplane::driver::afpacket::{AfPacketConfig, AfPacketPortConfig, FanoutMode, RingConfig};
use dataplane::driver::afxdp::{
    AfXdpConfig, AfXdpError, AfXdpPortConfig, BusyPoll, QueueSockets, XdpAttachment, XdpRingConfig,
};
use dataplane::neighbour::NeighbourConfig;
use nic_config::{AfpacketPlan, AfxdpPlan, DriverKind, ListenerKind, Plan, PortPlan};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use tracing::{info, warn};

/// Every address Portico answers for: node and SNAT addresses, VIPs and
/// external IPs, of both families.
pub fn owned_addresses(plan: &Plan) -> Vec<IpAddr> {
    let mut owned: Vec<IpAddr> = plan.addresses.iter().map(|a| a.address).collect();
    owned.extend(
        plan.services
            .iter()
            .flat_map(|s| &s.listeners)
            .filter(|l| matches!(l.kind, ListenerKind::Vip | ListenerKind::ExternalIp))
            .map(|l| l.address),
    );
    owned.sort_unstable();
    owned.dedup();
    owned
}

/// Warn about every owned address the kernel also has on a port's
/// interface.
pub(super) fn warn_kernel_conflicts(plan: &Plan) {
    // The kernel's addresses are read as IPv4 ones.
    let owned: Vec<Ipv4Addr> = owned_addresses(plan)
        .into_iter()
        .filter_map(|a| match a {
            IpAddr::V4(a) => Some(a),
            IpAddr::V6(_) => None,
        })
        .collect();
    for port in &plan.ports {
        match kernel_owned_conflicts(&port.interface, &owned) {
            Ok(conflicts) => {
                for address in conflicts {
                    warn!(
                        %address,
                        interface = %port.interface,
                        "the kernel also has this Portico-owned address on the interface and \
                         will answer ARP and connections for it; remove it (ip addr del)"
                    );
                }
            }
            Err(e) => warn!(interface = %port.interface, error = %e,
                "cannot list the kernel's addresses of the interface"),
        }
    }
}

/// The one driver every port of `plan` uses.
pub(super) fn gateway_driver(plan: &Plan) -> Result<DriverKind, GatewayError> {
    let Some(first) = plan.ports.first() else {
        return Ok(DriverKind::Afpacket);
    };
    for port in &plan.ports {
        if port.driver != first.driver {
            return Err(GatewayError::MixedDrivers {
                port: port.name.clone(),
                driver: port.driver,
                first: first.name.clone(),
                first_driver: first.driver,
            });
        }
    }
    match first.driver {
        DriverKind::Afpacket | DriverKind::Afxdp => Ok(first.driver),
        #[cfg(feature = "dpdk")]
        DriverKind::Dpdk => Ok(first.driver),
        driver => Err(GatewayError::UnsupportedDriver {
            port: first.name.clone(),
            driver,
        }),
    }
}

/// Turn the offloads of `port`'s interface off (GRO/TSO would hand the
/// driver frames above the MTU; a warning names any that stay on), or on
/// with `gso` (af_packet GSO/GRO pass-through), and read its MAC and MTU.
pub(super) fn prepare_offloads(
    port: &PortPlan,
    gso: bool,
) -> Result<PreparedInterface, GatewayError> {
    let prepared =
        prepare_interface(&port.interface, gso).map_err(|source| GatewayError::Prepare {
            port: port.name.clone(),
            source,
        })?;
    if gso {
        if !prepared.offloads.pass_through() {
            warn!(interface = %port.interface, offloads = ?prepared.offloads,
                "gso: not every offload could be turned on; the kernel segments what the device cannot");
        }
    } else if !prepared.offloads.all_off() {
        warn!(interface = %port.interface, offloads = ?prepared.offloads,
            "some offloads stay on; frames above the MTU will be dropped");
    }
    Ok(prepared)
}

/// Prepare one port's interface for `driver` and read its MAC and MTU.
/// For afxdp, also check that the interface has one RX queue per worker
/// and attach the redirect program (returned; it stays attached as long as
/// the attachment lives).
pub(super) fn prepare_port(
    port: &PortPlan,
    driver: DriverKind,
    plan: &Plan,
) -> Result<(PortFacts, Option<XdpAttachment>), GatewayError> {
    match driver {
        DriverKind::Afpacket | DriverKind::Afxdp => {
            // GSO/GRO pass-through is an af_packet feature.
            let gso = driver == DriverKind::Afpacket && plan.dataplane.afpacket.gso;
            let prepared = prepare_offloads(port, gso)?;
            let info = &prepared.info;
            info!(port = %port.name, interface = %port.interface, mac = %info.mac, mtu = info.mtu,
                role = %port.role, driver = %driver, "port prepared");
            let facts = PortFacts {
                mac: info.mac.0,
                mtu: u16::try_from(info.mtu).unwrap_or(u16::MAX),
            };
            let attachment = if driver == DriverKind::Afxdp {
                Some(attach_xdp(port, plan)?)
            } else {
                None
            };
            Ok((facts, attachment))
        }
        other => Err(GatewayError::UnsupportedDriver {
            port: port.name.clone(),
            driver: other,
        }),
    }
}

/// Check the queue count of an afxdp port and attach the XDP program.
pub(super) fn attach_xdp(port: &PortPlan, plan: &Plan) -> Result<XdpAttachment, GatewayError> {
    let err = |source| GatewayError::Afxdp {
        port: port.name.clone(),
        source,
    };
    let workers = plan.dataplane.workers;
    let queues = dataplane::driver::afxdp::rx_queue_count(&port.interface).map_err(err)?;
    if queues as usize != workers {
        return Err(err(AfXdpError::QueueCount {
            ifname: port.interface.clone(),
            queues,
            workers,
        }));
    }
    let mode = plan.dataplane.afxdp.mode.to_dataplane();
    let attachment =
        XdpAttachment::attach(&port.interface, queues, workers as u32, mode).map_err(err)?;
    for stale in attachment.stale_removed() {
        warn!(interface = %port.interface, id = stale.id, mode = %stale.mode,
            "removed a stale Portico XDP program left attached by an earlier run");
    }
    info!(interface = %port.interface, mode = %attachment.mode(), queues,
        "XDP redirect program attached");
    Ok(attachment)
}

/// The AF_XDP driver configuration of worker 0 (see
/// [`WorkerDriver::for_worker`]).
pub(super) fn afxdp_config(a: &AfxdpPlan, attachments: &[XdpAttachment]) -> AfXdpConfig {
    let mut config = AfXdpConfig::new(
        attachments
            .iter()
            .map(|att| AfXdpPortConfig {
                ifname: att.ifname().to_string(),
                queue_id: 0,
                xsk_map: Some(att.map()),
                link: Some(att.link()),
                // Every worker also receives on the others' queues, so the
                // steering program delivers each frame to its owner.
                queue_sockets: Some(Arc::new(QueueSockets::new(
                    att.map().queues(),
                    att.map().workers(),
                ))),
            })
            .collect(),
    );
    config.rings = XdpRingConfig {
        frame_size: a.frame_size,
        umem_frames: a.umem_frames,
        fill_ring: a.fill_ring_size,
        completion_ring: a.completion_ring_size,
        rx_ring: a.rx_ring_size,
        tx_ring: a.tx_ring_size,
    };
    config.zero_copy = a.zero_copy.to_dataplane();
    config.need_wakeup = a.need_wakeup;
    config.shared_umem = a.shared_umem;
    config.multi_buffer = a.multi_buffer.to_dataplane();
    config.busy_poll = a.busy_poll.then_some(BusyPoll {
        us: a.busy_poll_us,
        budget: a.busy_poll_budget,
    });
    // Frames handed over by other workers wake `poll(2)` through the
    // worker's doorbell (see `dataplane::handoff`): the default timeout.
    config
}

/// The af_packet rings of `[dataplane.afpacket]`.
pub(super) fn afpacket_rings(a: &AfpacketPlan) -> RingConfig {
    let n = |v: u32| v as usize;
    RingConfig {
        rx_mode: a.rx_ring.to_dataplane(),
        rx_frame_count: n(a.rx_frame_count),
        rx_block_size: n(a.rx_block_size),
        rx_block_count: n(a.rx_block_count),
        rx_block_timeout_ms: a.rx_block_timeout_ms,
        tx_frame_count: n(a.tx_frame_count),
        ..RingConfig::default()
    }
}

/// The driver a worker runs, with its configuration; matched once when the
/// worker thread starts.
#[derive(Clone, Debug)]
pub(super) enum WorkerDriver {
    Afpacket(AfPacketConfig),
    Afxdp(AfXdpConfig),
    /// Queue `worker` of every started DPDK port.
    #[cfg(feature = "dpdk")]
    Dpdk {
        ports: Arc<dataplane::driver::dpdk::DpdkPorts>,
        worker: usize,
    },
}

impl WorkerDriver {
    /// The configuration worker `worker` opens: af_packet workers share
    /// one (fanout spreads the frames), AF_XDP worker `w` binds RX queue
    /// `w` of every port, DPDK worker `w` takes queue `w` of every port.
    pub(super) fn for_worker(&self, worker: usize) -> WorkerDriver {
        match self {
            WorkerDriver::Afpacket(c) => WorkerDriver::Afpacket(c.clone()),
            WorkerDriver::Afxdp(c) => {
                let mut c = c.clone();
                for p in &mut c.ports {
                    p.queue_id = worker as u32;
                }
                WorkerDriver::Afxdp(c)
            }
            #[cfg(feature = "dpdk")]
            WorkerDriver::Dpdk { ports, .. } => WorkerDriver::Dpdk {
                ports: Arc::clone(ports),
                worker,
            },
        }
    }
}

/// The dataplane's neighbour table settings from `[dataplane.neighbour_table]`.
pub(super) fn neighbour_config(n: &nic_config::NeighbourTablePlan) -> NeighbourConfig {
    NeighbourConfig {
        capacity: n.capacity,
        reachable_ms: n.reachable_ms,
        retrans_ms: n.retrans_ms,
        max_probes: n.max_probes,
        failed_hold_ms: n.failed_hold_ms,
        gc_stale_ms: n.gc_stale_ms,
        gc_min_entries: n.gc_min_entries,
    }
}

impl Gateway {
    /// The driver configuration the workers open (worker 0's; see
    /// [`WorkerDriver::for_worker`]).
    pub(super) fn worker_driver(&self) -> Result<WorkerDriver, GatewayError> {
        let workers = self.plan.dataplane.workers;
        let ifnames: Vec<&str> = self
            .plan
            .ports
            .iter()
            .map(|p| p.interface.as_str())
            .collect();
        match gateway_driver(&self.plan)? {
            DriverKind::Afpacket => {
                // Fanout group ids are per network namespace: derive them
                // from the process id so two gateways in one namespace do
                // not join each other's groups.
                let fanout_base = std::process::id() as u16;
                let mut config = AfPacketConfig::new(&ifnames);
                config.ring = afpacket_rings(&self.plan.dataplane.afpacket);
                config.gso = self.plan.dataplane.afpacket.gso;
                config.tx_path = self.plan.dataplane.afpacket.tx_path.to_dataplane();
                config.rx_path = self.plan.dataplane.afpacket.rx_path.to_dataplane();
                // The ports are Portico's: their kernel stack has no
                // addresses and nothing to do with the frames.
                config.kernel_stack_rx = false;
                if workers > 1 {
                    config.ports = ifnames
                        .iter()
                        .enumerate()
                        .map(|(i, name)| AfPacketPortConfig {
                            ifname: (*name).to_string(),
                            fanout_group_id: Some(fanout_base.wrapping_add(i as u16)),
                        })
                        .collect();
                    // Each frame to the worker owning its flow (the
                    // workers join in worker order, see `OpenTurns`).
                    config.fanout_mode = FanoutMode::Steered;
                }
                Ok(WorkerDriver::Afpacket(config))
            }
            DriverKind::Afxdp => Ok(WorkerDriver::Afxdp(afxdp_config(
                &self.plan.dataplane.afxdp,
                &self.xdp,
            ))),
            #[cfg(feature = "dpdk")]
            DriverKind::Dpdk if self.dpdk_ports.is_some() => Ok(WorkerDriver::Dpdk {
                ports: self.dpdk_ports.clone().ok_or(GatewayError::WorkerStart {
                    worker: 0,
                    reason: "the DPDK ports are not started".into(),
                })?,
                worker: 0,
            }),
            driver => Err(GatewayError::UnsupportedDriver {
                port: self
                    .plan
                    .ports
                    .first()
                    .map(|p| p.name.clone())
                    .unwrap_or_default(),
                driver,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::reload::tests::{BASE, plan};

    #[test]
    fn owned_addresses_cover_node_snat_vip_and_external_ips() {
        let p = plan(&BASE.replace(
            "vip = \"192.0.2.10\"",
            "vip = \"192.0.2.10\"\nexternal_ips = [\"192.0.2.11\"]",
        ));
        let owned = owned_addresses(&p);
        for a in ["192.0.2.1", "10.1.0.1", "192.0.2.10", "192.0.2.11"] {
            assert!(owned.contains(&a.parse().expect("addr")), "{a}: {owned:?}");
        }
        assert!(
            !owned.contains(&"10.1.0.10".parse().expect("addr")),
            "backends are not owned"
        );
    }
}
