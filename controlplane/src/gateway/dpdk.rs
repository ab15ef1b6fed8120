//! `portico run` with `driver = "dpdk"` (cargo feature `dpdk`).
//!
//! The control thread starts the EAL and the ports before anything else
//! (vdevs open their sockets and run their ioctls in its network
//! namespace), in this order: the kernel interfaces of `net_af_packet` and
//! `net_af_xdp` vdevs get their offloads turned off like af_packet ports
//! (GRO/TSO would hand the PMD frames above the MTU); the EAL starts from
//! `[dpdk]` and the ports' devices (a vdev per kernel interface with one
//! queue per worker, or the PCI functions); every port gets an RX and a TX
//! queue per worker and every worker an mbuf pool. The ports' MAC and MTU
//! are what DPDK reports. Each worker thread then takes its queues
//! ([`DpdkPorts::driver`]).
//!
//! Counters: the driver reports them (`Driver::port_counters`): each
//! worker its own frame counts per port, worker 0 also the device's byte
//! counts and drops (`rte_eth_stats`, per port, not per queue).

use super::GatewayError;
use super::workers::{OpenDriver, WorkerStartError};
use crate::source::static_file::PortFacts;
use dataplane::driver::dpdk::{DpdkDevice, DpdkDriver, DpdkPorts, DpdkPortsConfig, Eal, EalConfig};
use nic_config::{DpdkDevicePlan, Plan};
use std::sync::Arc;
use tracing::info;

/// The EAL devices of the plan's ports, in port order.
pub(super) fn devices(plan: &Plan) -> Vec<DpdkDevice> {
    let workers = plan.dataplane.workers;
    plan.ports
        .iter()
        .enumerate()
        .map(|(i, port)| match &port.dpdk_device {
            None | Some(DpdkDevicePlan::AfPacket) => {
                DpdkDevice::af_packet(i, &port.interface, workers)
            }
            Some(DpdkDevicePlan::AfXdp) => DpdkDevice::af_xdp(i, &port.interface, workers),
            Some(DpdkDevicePlan::Pci(addr)) => DpdkDevice::Pci(addr.clone()),
            Some(DpdkDevicePlan::Vdev { name, args }) => DpdkDevice::Vdev {
                name: name.clone(),
                args: args.clone(),
            },
        })
        .collect()
}

/// Prepare the vdevs' kernel interfaces, start the EAL and the ports.
pub(super) fn start_ports(plan: &Plan) -> Result<Arc<DpdkPorts>, GatewayError> {
    for port in &plan.ports {
        if matches!(
            port.dpdk_device,
            None | Some(DpdkDevicePlan::AfPacket | DpdkDevicePlan::AfXdp)
        ) {
            super::driver_plan::prepare_offloads(port, false)?;
        }
    }
    let devices = devices(plan);
    let eal_config = EalConfig {
        main_lcore_cpus: plan.dpdk.cores.clone(),
        memory_mb: plan.dpdk.memory_mb,
        hugepages: plan.dpdk.hugepages,
        devices: devices.clone(),
        extra_args: plan.dpdk.extra_args.clone(),
    };
    let eal = Eal::init(&eal_config)?;
    info!(args = %eal.args().join(" "), ports = eal.port_count(), "DPDK EAL running");
    let mut config = DpdkPortsConfig::new(&devices, plan.dataplane.workers);
    config.rx_desc = plan.dpdk.rx_desc;
    config.tx_desc = plan.dpdk.tx_desc;
    for (c, port) in config.ports.iter_mut().zip(&plan.ports) {
        c.mtu = port.mtu;
    }
    let ports = DpdkPorts::start(eal, &config)?;
    for (info, port) in ports.ports().iter().zip(&plan.ports) {
        info!(port = %port.name, device = %info.device, pmd = %info.driver_name, mac = %info.mac,
            mtu = info.mtu, rx_desc = info.rx_desc, tx_desc = info.tx_desc, role = %port.role,
            "DPDK port started");
    }
    Ok(ports)
}

/// MAC and MTU of every port as DPDK reports them.
pub(super) fn port_facts(ports: &DpdkPorts) -> Vec<PortFacts> {
    ports
        .ports()
        .iter()
        .map(|p| PortFacts {
            mac: p.mac.0,
            mtu: p.mtu,
        })
        .collect()
}

impl OpenDriver for DpdkDriver {
    /// The started ports and the worker index (its queues).
    type Config = (Arc<DpdkPorts>, usize);

    fn open(config: &Self::Config) -> Result<Self, WorkerStartError> {
        let (ports, worker) = config;
        Ok(ports.driver(*worker)?)
    }
}
