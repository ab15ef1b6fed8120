//! The host path at start: for every port with host addresses, its host
//! interface (a multi-queue TAP in the gateway's namespace, with the
//! port's MAC and MTU and the host addresses of both families, IPv6 ones
//! without duplicate address detection; see
//! [`dataplane::driver::hostpath`]), one queue per worker, and every
//! port's own kernel interface kept from answering for them. Each worker gets its
//! queue of every port as one [`HostPath`].
//!
//! The TAPs are not persistent: they go away with the gateway's last
//! queue, so a stopped gateway leaves no interface behind.

use super::GatewayError;
use crate::source::static_file::PortFacts;
use dataplane::driver::hostpath::{
    HostInterfaceSpec, HostPath, create_host_interface, isolate_kernel_interface,
};
use nic_config::{DpdkDevicePlan, Plan};
use std::os::fd::OwnedFd;
use tracing::info;

/// One host path per worker (`None` for every worker when no port has
/// host addresses).
pub(super) fn open(
    plan: &Plan,
    facts: &[PortFacts],
    workers: usize,
) -> Result<Vec<Option<HostPath>>, GatewayError> {
    if plan.ports.iter().all(|p| p.host_interface.is_none()) {
        return Ok((0..workers).map(|_| None).collect());
    }
    // queues[port][worker]
    let mut queues: Vec<Vec<Option<OwnedFd>>> = Vec::with_capacity(plan.ports.len());
    for (i, port) in plan.ports.iter().enumerate() {
        let Some(name) = &port.host_interface else {
            queues.push((0..workers).map(|_| None).collect());
            continue;
        };
        let fact = facts.get(i).copied().unwrap_or(PortFacts {
            mac: [0; 6],
            mtu: 1500,
        });
        let spec = HostInterfaceSpec {
            name: name.clone(),
            mac: port.mac.map_or(fact.mac, |m| m.0),
            mtu: port.mtu.unwrap_or(fact.mtu),
            addresses: port
                .host_addresses
                .iter()
                .map(|p| (p.address, p.prefix_len))
                .collect(),
        };
        let fds = create_host_interface(&spec, workers)?;
        info!(
            port = %port.name,
            interface = %name,
            addresses = ?port.host_addresses.iter().map(ToString::to_string).collect::<Vec<_>>(),
            queues = fds.len(),
            "host interface up"
        );
        queues.push(fds.into_iter().map(Some).collect());
    }
    // The kernel interface of every port (not a NIC bound to DPDK) sees
    // the port's frames too: by the weak host model it would answer for
    // the TAPs' addresses there, whichever port's they are.
    for port in &plan.ports {
        if !matches!(
            port.dpdk_device,
            Some(DpdkDevicePlan::Pci(_) | DpdkDevicePlan::Vdev { .. })
        ) {
            isolate_kernel_interface(&port.interface)?;
        }
    }
    Ok((0..workers)
        .map(|w| {
            Some(HostPath::new(
                queues
                    .iter_mut()
                    .map(|q| q.get_mut(w).and_then(Option::take))
                    .collect(),
            ))
        })
        .collect())
}
