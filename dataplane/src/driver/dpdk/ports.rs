//! Starting the ports: [`DpdkPorts::start`] configures every port with one
//! RX and one TX queue per worker and one mbuf pool per worker, then hands
//! each worker its queues ([`DpdkPorts::driver`]).

use super::driver::DpdkDriver;
use super::sys::{self, Mempool};
use super::{DpdkDevice, DpdkError, Eal, MAX_BURST};
use crate::packet::PortId;
use crate::wire::MacAddr;
use std::ffi::{CString, c_int};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Mbufs a `net_af_xdp` RX queue keeps in its fill ring (the PMD's
/// default ring size, independent of the descriptor count asked for).
const AF_XDP_FILL_RING_MBUFS: u32 = 2048;

/// One port in [`DpdkPortsConfig`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpdkPortConfig {
    /// What `rte_eth_dev_get_port_by_name` knows it by (the vdev name or PCI
    /// address: [`DpdkDevice::port_name`]).
    pub device: String,
    /// Set this MTU (`rte_eth_dev_set_mtu`); `None`: the device's.
    pub mtu: Option<u16>,
}

/// Ports, queues and pools for [`DpdkPorts::start`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpdkPortsConfig {
    /// In `PortId` order.
    pub ports: Vec<DpdkPortConfig>,
    /// Workers = RX and TX queues per port = mbuf pools.
    pub workers: usize,
    /// RX descriptors per queue (adjusted to the device's limits).
    pub rx_desc: u16,
    /// TX descriptors per queue (adjusted to the device's limits).
    pub tx_desc: u16,
    /// Mbufs per worker pool; 0: enough for every ring of the worker plus
    /// bursts in flight and the per-lcore cache.
    pub pool_mbufs: u32,
    /// Per-lcore cache of each pool (at most 512).
    pub pool_cache: u32,
    /// Receive frames for any destination MAC.
    pub promiscuous: bool,
    /// What the driver's [`Driver::wait_idle`](crate::driver::Driver::wait_idle)
    /// sleeps.
    pub idle_sleep_us: u32,
}

impl DpdkPortsConfig {
    /// Defaults for the devices of an [`EalConfig`](super::EalConfig): 1024 descriptors per
    /// ring, automatic pool size, 256-mbuf caches, promiscuous, 200 µs idle
    /// sleeps.
    pub fn new(devices: &[DpdkDevice], workers: usize) -> Self {
        DpdkPortsConfig {
            ports: devices
                .iter()
                .map(|d| DpdkPortConfig {
                    device: d.port_name().to_string(),
                    mtu: None,
                })
                .collect(),
            workers,
            rx_desc: 1024,
            tx_desc: 1024,
            pool_mbufs: 0,
            pool_cache: 256,
            promiscuous: true,
            idle_sleep_us: 200,
        }
    }

    fn pool_size(&self, rx_desc: u16, tx_desc: u16) -> u32 {
        if self.pool_mbufs > 0 {
            return self.pool_mbufs;
        }
        let ports = self.ports.len() as u32;
        // net_af_xdp fills its fill ring with 2048 mbufs whatever rx_desc is.
        let rx = u32::from(rx_desc).max(AF_XDP_FILL_RING_MBUFS);
        let rings = ports * (rx + u32::from(tx_desc));
        let bursts = ports * 2 * MAX_BURST as u32;
        let need = rings + bursts + 2 * self.pool_cache + 1024;
        // Mempools are most efficient at 2^n - 1 elements.
        need.next_power_of_two().saturating_sub(1).max(need)
    }
}

/// What DPDK says about a started port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpdkPortInfo {
    pub device: String,
    pub port_id: u16,
    pub driver_name: String,
    pub mac: MacAddr,
    pub mtu: u16,
    /// NUMA socket (-1: unknown).
    pub socket: i32,
    pub rx_desc: u16,
    pub tx_desc: u16,
}

/// `rte_eth_stats` of a port (all queues).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DpdkPortStats {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// Dropped by the device: RX ring full.
    pub rx_missed: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    /// RX mbuf allocation failures (pool empty).
    pub rx_nombuf: u64,
}

/// An mbuf pool (never freed, see the module docs) and its size.
#[derive(Debug)]
pub(super) struct Pool {
    pub(super) mempool: Mempool,
    mbufs: u32,
}

/// The started ports, shared by the workers' drivers (`Send` and `Sync`:
/// the mempool handles are, and queues are handed out to one driver at a
/// time through `taken`).
#[derive(Debug)]
pub struct DpdkPorts {
    ports: Vec<DpdkPortInfo>,
    pools: Vec<Pool>,
    pub(super) taken: Vec<AtomicBool>,
    pub(super) idle_sleep: Duration,
}

/// Distinguishes the pools of several `start` calls in one process
/// (mempool names are global).
static POOL_GENERATION: AtomicUsize = AtomicUsize::new(0);

fn port_error(device: &str, call: &'static str) -> impl FnOnce(c_int) -> DpdkError {
    move |rc| DpdkError::Port {
        device: device.to_string(),
        call,
        reason: sys::strerror(rc),
    }
}

impl DpdkPorts {
    /// Configure and start every port (see the module docs).
    pub fn start(_eal: &Eal, config: &DpdkPortsConfig) -> Result<Arc<DpdkPorts>, DpdkError> {
        let workers = config.workers;
        if workers == 0 || workers > usize::from(u16::MAX) {
            return Err(DpdkError::Invalid(format!("{workers} workers (1..=65535)")));
        }
        if config.ports.is_empty() || config.ports.len() > usize::from(PortId::MAX) {
            return Err(DpdkError::Invalid(format!(
                "{} ports (1..=255)",
                config.ports.len()
            )));
        }
        let queues = workers as u16;
        let mut port_ids = Vec::with_capacity(config.ports.len());
        for p in &config.ports {
            let Some(id) = sys::port_by_name(&p.device)? else {
                return Err(DpdkError::NoSuchPort {
                    device: p.device.clone(),
                });
            };
            port_ids.push(id);
        }

        // Descriptor counts, as the first port's limits allow (the same for
        // every port keeps the pool size simple).
        let mut rx_desc = config.rx_desc.max(1);
        let mut tx_desc = config.tx_desc.max(1);
        for (p, &id) in config.ports.iter().zip(&port_ids) {
            sys::adjust_nb_rx_tx_desc(id, &mut rx_desc, &mut tx_desc)
                .map_err(port_error(&p.device, "rte_eth_dev_adjust_nb_rx_tx_desc"))?;
        }

        // One pool per worker, on the first port's socket.
        let socket = sys::dev_socket_id(port_ids[0]);
        let mbufs = config.pool_size(rx_desc, tx_desc);
        let max_mtu = config
            .ports
            .iter()
            .filter_map(|p| p.mtu)
            .max()
            .unwrap_or(1500);
        // Ethernet header + one VLAN tag + FCS room, at least the default.
        let data_room = (u32::from(max_mtu) + 22).max(2048) + sys::RTE_PKTMBUF_HEADROOM;
        let data_room = u16::try_from(data_room)
            .map_err(|_| DpdkError::Invalid(format!("mtu {max_mtu} is too large")))?;
        let generation = POOL_GENERATION.fetch_add(1, Ordering::Relaxed);
        let mut pools = Vec::with_capacity(workers);
        for w in 0..workers {
            // At most 26 bytes, unique per process through POOL_GENERATION.
            let name = CString::new(format!("portico{generation}w{w}"))
                .map_err(|_| DpdkError::Invalid("pool name".into()))?;
            let Some(mempool) = sys::pktmbuf_pool_create(
                &name,
                mbufs,
                config.pool_cache.min(512),
                data_room,
                socket,
            ) else {
                return Err(DpdkError::Mempool {
                    worker: w,
                    mbufs,
                    reason: sys::rte_errno_text(),
                });
            };
            pools.push(Pool { mempool, mbufs });
        }

        let mut ports = Vec::with_capacity(config.ports.len());
        for (p, &id) in config.ports.iter().zip(&port_ids) {
            let device = p.device.as_str();
            let caps = sys::dev_caps(id).map_err(port_error(device, "rte_eth_dev_info_get"))?;
            let max = caps.max_rx_queues.min(caps.max_tx_queues);
            if queues > max {
                return Err(DpdkError::TooManyQueues {
                    device: device.to_string(),
                    queues: workers,
                    max,
                });
            }
            sys::eth_configure(id, queues).map_err(port_error(device, "rte_eth_dev_configure"))?;
            let port_socket = sys::dev_socket_id(id);
            let queue_socket = if port_socket < 0 {
                sys::SOCKET_ID_ANY
            } else {
                port_socket
            } as u32;
            for (q, pool) in pools.iter().enumerate() {
                sys::rx_queue_setup(id, q as u16, rx_desc, queue_socket, pool.mempool)
                    .map_err(port_error(device, "rte_eth_rx_queue_setup"))?;
                sys::tx_queue_setup(id, q as u16, tx_desc, queue_socket)
                    .map_err(port_error(device, "rte_eth_tx_queue_setup"))?;
            }
            if let Some(mtu) = p.mtu {
                sys::set_mtu(id, mtu).map_err(port_error(device, "rte_eth_dev_set_mtu"))?;
            }
            sys::dev_start(id).map_err(port_error(device, "rte_eth_dev_start"))?;
            if config.promiscuous {
                sys::promiscuous_enable(id);
            }
            let mac = sys::mac_addr(id).map_err(port_error(device, "rte_eth_macaddr_get"))?;
            let mtu = sys::mtu(id).map_err(port_error(device, "rte_eth_dev_get_mtu"))?;
            let name_len = caps
                .driver_name
                .iter()
                .position(|&c| c == 0)
                .unwrap_or(caps.driver_name.len());
            let driver_name: String = caps.driver_name[..name_len]
                .iter()
                .map(|&c| char::from(c as u8))
                .collect();
            ports.push(DpdkPortInfo {
                device: device.to_string(),
                port_id: id,
                driver_name,
                mac: MacAddr(mac),
                mtu,
                socket: port_socket,
                rx_desc,
                tx_desc,
            });
        }
        Ok(Arc::new(DpdkPorts {
            ports,
            pools,
            taken: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            idle_sleep: Duration::from_micros(u64::from(config.idle_sleep_us)),
        }))
    }

    pub fn ports(&self) -> &[DpdkPortInfo] {
        &self.ports
    }

    pub fn workers(&self) -> usize {
        self.pools.len()
    }

    /// The device counters of port `index` (any thread).
    pub fn port_stats(&self, index: usize) -> Option<DpdkPortStats> {
        let port = self.ports.get(index)?;
        let s = sys::eth_stats(port.port_id)?;
        Some(DpdkPortStats {
            rx_packets: s.ipackets,
            tx_packets: s.opackets,
            rx_bytes: s.ibytes,
            tx_bytes: s.obytes,
            rx_missed: s.imissed,
            rx_errors: s.ierrors,
            tx_errors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// Mbufs of worker `worker`'s pool not in the pool (in rings, in
    /// frames, in caches): for leak checks.
    pub fn pool_in_use(&self, worker: usize) -> Option<u32> {
        Some(self.pools.get(worker)?.mempool.in_use_count())
    }

    /// Mbufs in each worker pool.
    pub fn pool_mbufs(&self) -> u32 {
        self.pools.first().map_or(0, |p| p.mbufs)
    }

    /// Worker `worker`'s driver: queue `worker` of every port. Call on the
    /// worker's thread (it is registered as a non-EAL lcore).
    pub fn driver(self: &Arc<Self>, worker: usize) -> Result<DpdkDriver, DpdkError> {
        let Some(flag) = self.taken.get(worker) else {
            return Err(DpdkError::NoSuchQueue {
                worker,
                queues: self.taken.len(),
            });
        };
        if flag.swap(true, Ordering::AcqRel) {
            return Err(DpdkError::QueueTaken { worker });
        }
        Ok(DpdkDriver::new(
            Arc::clone(self),
            worker,
            self.ports.iter().map(|p| p.port_id).collect(),
            self.pools[worker].mempool,
        ))
    }
}

impl Drop for DpdkPorts {
    fn drop(&mut self) {
        // Every driver (which polls the queues) holds an Arc to `self`, so
        // none is left. Stopping leaves the port configured; its pools stay
        // (never freed).
        for p in &self.ports {
            sys::dev_stop(p.port_id);
        }
    }
}
