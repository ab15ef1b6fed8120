//! What one worker's AF_XDP driver is opened with: ports (interface,
//! queue, XSK map), UMEM and ring sizes, zero-copy and wake-up modes.

#[cfg(doc)]
use super::XdpAttachment;
use super::{QueueSockets, XdpLink, XskMap};
use std::sync::Arc;

/// Where the XDP program runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XdpMode {
    /// In the NIC driver (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// In the kernel's generic receive path (`XDP_FLAGS_SKB_MODE`).
    Generic,
    /// Native if the driver supports it, else generic.
    #[default]
    Auto,
}

/// Zero-copy (`XDP_ZEROCOPY`: the NIC DMAs into the UMEM) or copy mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ZeroCopy {
    /// Zero-copy where the driver supports it, else copy.
    #[default]
    Auto,
    On,
    Off,
}

/// Multi-buffer packets (`XDP_USE_SG`, Linux 6.6+; see `chain.rs`): a
/// frame larger than one UMEM chunk arrives and leaves as a chain of
/// descriptors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MultiBuffer {
    /// Only where needed: when a port's MTU does not fit one chunk.
    #[default]
    Auto,
    /// Always (opening fails where the kernel or driver refuses).
    On,
    /// Never: every port's MTU must fit one chunk.
    Off,
}

/// UMEM and ring sizes of every socket of a driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpRingConfig {
    /// Bytes per UMEM chunk: 2048 or 4096 (aligned mode).
    pub frame_size: u32,
    /// Chunks in the worker's UMEM (per UMEM when not shared).
    pub umem_frames: u32,
    /// Entries of each ring, powers of two.
    pub fill_ring: u32,
    pub completion_ring: u32,
    pub rx_ring: u32,
    pub tx_ring: u32,
}

impl Default for XdpRingConfig {
    fn default() -> Self {
        XdpRingConfig {
            frame_size: 4096,
            umem_frames: 8192,
            fill_ring: 2048,
            completion_ring: 2048,
            rx_ring: 2048,
            tx_ring: 2048,
        }
    }
}

/// One port of a worker.
#[derive(Clone, Debug)]
pub struct AfXdpPortConfig {
    /// Kernel interface name (in the caller's network namespace).
    pub ifname: String,
    /// RX queue the socket binds to.
    pub queue_id: u32,
    /// The interface's XSK map (from its [`XdpAttachment`]); `None` opens
    /// the socket without receiving (tests of TX only). The socket goes
    /// into the slot of its queue's own worker ([`XskMap::own_slot`]).
    pub xsk_map: Option<Arc<XskMap>>,
    /// The interface's program link ([`XdpAttachment::link`]), through
    /// which the driver installs steering rules; `None`: it does not.
    pub link: Option<Arc<XdpLink>>,
    /// The port's [`QueueSockets`], shared by all its workers' drivers:
    /// each worker then also receives on the other workers' queues, so the
    /// steering program can deliver every frame to its owner; `None`: on
    /// its own queue only.
    pub queue_sockets: Option<Arc<QueueSockets>>,
}

/// Everything one worker's driver needs.
#[derive(Clone, Debug)]
pub struct AfXdpConfig {
    /// Ports in `PortId` order.
    pub ports: Vec<AfXdpPortConfig>,
    pub rings: XdpRingConfig,
    pub zero_copy: ZeroCopy,
    /// `XDP_USE_NEED_WAKEUP`: the kernel says when it needs a syscall.
    pub need_wakeup: bool,
    /// One UMEM for all ports (`XDP_SHARED_UMEM`); falls back to one per
    /// port if the kernel refuses.
    pub shared_umem: bool,
    /// Busy polling on every socket, or `None`: see [`BusyPoll`].
    pub busy_poll: Option<BusyPoll>,
    /// Multi-buffer packets (jumbo frames): see [`MultiBuffer`].
    pub multi_buffer: MultiBuffer,
    /// What the driver's [`Driver::wait_idle`](crate::driver::Driver::wait_idle)
    /// sleeps at most.
    pub poll_timeout_ms: u32,
}

impl AfXdpConfig {
    /// Defaults for `ports` (interface, queue, map).
    pub fn new(ports: Vec<AfXdpPortConfig>) -> Self {
        AfXdpConfig {
            ports,
            rings: XdpRingConfig::default(),
            zero_copy: ZeroCopy::Auto,
            need_wakeup: true,
            shared_umem: true,
            busy_poll: None,
            multi_buffer: MultiBuffer::Auto,
            poll_timeout_ms: 10,
        }
    }
}

/// Busy polling of a socket (Linux 5.11+): `SO_PREFER_BUSY_POLL`,
/// `SO_BUSY_POLL` (`us`) and `SO_BUSY_POLL_BUDGET` (`budget`). With it an
/// `rx_burst` that finds the RX ring empty makes one `recvfrom`, which runs
/// the interface queue's NAPI poll in the worker (up to `budget` packets
/// or `us` microseconds) instead of waiting for the kernel's softirq.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BusyPoll {
    pub us: u32,
    pub budget: u32,
}

/// What a socket got of the [`BusyPoll`] it was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BusyPollState {
    /// Not asked for.
    Off,
    /// Every option set.
    On,
    /// The kernel refused `option` with `errno` (e.g. `ENOPROTOOPT` before
    /// Linux 5.11, `EPERM` without `CAP_NET_ADMIN`): the socket runs
    /// without busy polling.
    Refused { option: &'static str, errno: i32 },
}
