//! The driver's configuration: ports, fanout, ring sizes, GSO/GRO
//! pass-through (what `[dataplane.afpacket]` becomes).

/// How the kernel spreads a port's frames over the workers' sockets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FanoutMode {
    /// `PACKET_FANOUT_HASH`: by the symmetric flow hash (both directions of
    /// a flow land on the same socket).
    #[default]
    Hash,
    /// `PACKET_FANOUT_CPU`: by the CPU that received the frame (pairs with
    /// RSS and IRQ affinity).
    Cpu,
    /// `PACKET_FANOUT_LB`: round robin.
    Lb,
    /// `PACKET_FANOUT_CBPF`: the flow-affine steering program (see
    /// `steering/`); the workers must join in worker order. Until worker 0
    /// installs the rule of its first snapshot ([`Driver::install_steering`](crate::driver::Driver::install_steering))
    /// the kernel delivers every frame to worker 0.
    Steered,
}

impl FanoutMode {
    pub(super) fn raw(self) -> u32 {
        match self {
            FanoutMode::Hash => libc::PACKET_FANOUT_HASH,
            FanoutMode::Cpu => libc::PACKET_FANOUT_CPU,
            FanoutMode::Lb => libc::PACKET_FANOUT_LB,
            FanoutMode::Steered => libc::PACKET_FANOUT_CBPF,
        }
    }
}

/// One port of a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfPacketPortConfig {
    /// Kernel interface name (in the caller's network namespace).
    pub ifname: String,
    /// Join this `PACKET_FANOUT` group: every worker's socket on the port
    /// uses the same id; different ports need different ids.
    pub fanout_group_id: Option<u16>,
}

/// How a socket's RX ring hands frames to user space (its
/// `PACKET_VERSION`, which its TX ring shares).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RxMode {
    /// `TPACKET_V2`: fixed slots, each handed over (and `poll(2)` woken)
    /// as soon as its frame is written. No added latency; a slot holds
    /// the largest frame, so the ring holds `rx_frame_count` frames
    /// whatever their size. The default.
    #[default]
    Frames,
    /// `TPACKET_V3`: frames packed into blocks, handed over when a block
    /// is full or `rx_block_timeout_ms` after its first frame (at least
    /// 1 ms and one jiffy): fewer status words to touch and more small
    /// frames per byte of ring, at up to the timeout of added latency
    /// when traffic is light.
    Blocks,
}

/// How a port's frames leave (`[dataplane.afpacket] tx_path`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TxPath {
    /// [`TxPath::Sendmsg`] on a veth port with `gso` on,
    /// [`TxPath::Ring`] otherwise. The default.
    #[default]
    Auto,
    /// The socket's `PACKET_TX_RING`: one copy into a slot, one `send`
    /// kick per burst. The skb's pages are the ring's (a zero-copy skb):
    /// a NIC DMAs them as they are, but a veth must copy them again
    /// (`skb_copy_ubufs`) before the peer's stack may keep them.
    Ring,
    /// A second, send-only packet socket per port and one `sendmmsg(2)`
    /// per burst, each frame gathered from its `virtio_net_hdr` and the
    /// pool buffer: the kernel copies it once into ordinary pages, which
    /// a veth hands to the peer as they are.
    Sendmsg,
}

/// How a port's frames arrive (`[dataplane.afpacket] rx_path`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RxPath {
    /// The driver's measured choice: [`RxPath::Ring`] on every port
    /// today (on an idle veth rig a single GSO flow ran at 0.87–0.91× the
    /// kernel through the ring and 0.70–0.79× by `recvmmsg`, whose copy
    /// lands on the worker's core; bench/RESULTS.md). The default.
    #[default]
    Auto,
    /// The socket's `PACKET_RX_RING` ([`RxMode`]): the kernel copies each
    /// frame into a slot in the sender's softirq, the walk copies it into
    /// a pool buffer; no syscall while frames wait.
    Ring,
    /// No RX ring: one `recvmmsg(2)` per burst straight into pool buffers
    /// (the `virtio_net_hdr` into a header of its own, the frame's
    /// `PACKET_AUXDATA` as a control message), so a super-packet is
    /// copied once, by the worker, instead of twice. Each burst is a
    /// syscall, also when nothing waits (see `receiver.rs`).
    Recvmsg,
}

/// Ring sizes of every socket of a driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    pub rx_mode: RxMode,
    /// [`RxMode::Frames`]: RX slots (rounded up to whole blocks). A slot
    /// holds the largest frame of any port plus the 66-byte ring header,
    /// rounded up to 16; a block is a slot rounded up to the page size.
    pub rx_frame_count: usize,
    /// [`RxMode::Blocks`]: bytes per RX block, a multiple of the page
    /// size that holds the largest frame plus ring headers.
    pub rx_block_size: usize,
    /// [`RxMode::Blocks`]: RX blocks.
    pub rx_block_count: usize,
    /// [`RxMode::Blocks`]: the kernel hands over a partly filled RX block
    /// after this long.
    pub rx_block_timeout_ms: u32,
    /// Bytes per TX slot, header (32 with frames, 48 with blocks)
    /// included; a multiple of 16, at least the header, the 10-byte
    /// `virtio_net_hdr` (with `gso`, or with both rings: the linear copy)
    /// and the largest frame.
    pub tx_frame_size: usize,
    /// TX slots; rounded up to whole blocks (a block is `tx_frame_size`
    /// rounded up to the page size).
    pub tx_frame_count: usize,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            rx_mode: RxMode::Frames,
            rx_frame_count: 4096,
            rx_block_size: 1 << 18,
            rx_block_count: 16,
            rx_block_timeout_ms: 1,
            tx_frame_size: 2048,
            tx_frame_count: 1024,
        }
    }
}

/// Everything one worker's driver needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfPacketConfig {
    /// Ports in `PortId` order.
    pub ports: Vec<AfPacketPortConfig>,
    pub ring: RingConfig,
    pub fanout_mode: FanoutMode,
    /// `PACKET_QDISC_BYPASS`: TX skips the qdisc layer.
    pub qdisc_bypass: bool,
    /// Receive frames for any destination MAC (`PACKET_MR_PROMISC`).
    pub promiscuous: bool,
    /// What the driver's [`Driver::wait_idle`](crate::driver::Driver::wait_idle) sleeps at most.
    pub poll_timeout_ms: u32,
    /// Buffers in the worker's frame pool.
    pub pool_frames: usize,
    /// GSO/GRO pass-through (`PACKET_VNET_HDR`, see the module docs):
    /// super-packets up to 64 KiB in and out, partial checksums left to
    /// the device.
    pub gso: bool,
    /// With `gso`: buffers of 64 KiB for super-packets, besides the
    /// `pool_frames` MTU-size ones.
    pub gso_pool_frames: usize,
    /// How frames leave each port (resolved per port when it opens).
    pub tx_path: TxPath,
    /// How frames arrive at each port (resolved per port when it opens).
    pub rx_path: RxPath,
    /// The port's own kernel stack also receives every frame (the
    /// default). Off (what the gateway sets), a tcx ingress program ends
    /// each frame after the packet sockets took it, where the kernel would
    /// otherwise route it, find nothing and drop it (see `kernel_rx.rs`);
    /// a kernel without tcx (before 6.6) keeps it on.
    pub kernel_stack_rx: bool,
}

impl AfPacketConfig {
    /// Defaults for the given interfaces: no fanout, bypass and promiscuous
    /// on, 10 ms idle poll, 4096 pool buffers, the kernel stack still
    /// receiving.
    pub fn new(ifnames: &[&str]) -> Self {
        AfPacketConfig {
            ports: ifnames
                .iter()
                .map(|n| AfPacketPortConfig {
                    ifname: (*n).to_string(),
                    fanout_group_id: None,
                })
                .collect(),
            ring: RingConfig::default(),
            fanout_mode: FanoutMode::Hash,
            qdisc_bypass: true,
            promiscuous: true,
            poll_timeout_ms: 10,
            pool_frames: 4096,
            gso: false,
            gso_pool_frames: 256,
            tx_path: TxPath::Auto,
            rx_path: RxPath::Auto,
            kernel_stack_rx: true,
        }
    }
}
