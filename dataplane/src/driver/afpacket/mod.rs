//! The af_packet driver: Linux packet sockets with memory-mapped rings, so
//! Portico runs on any interface (veth, bridges, plain NICs) without
//! special hardware.
//!
//! One [`AfPacketDriver`] serves one worker and holds one socket per port
//! ([`AfPacketPort`]). When several workers share a port, their sockets join
//! the same `PACKET_FANOUT` group: [`FanoutMode::Steered`] (what the gateway
//! uses) runs a classic-BPF program that sends each frame to the worker
//! owning its flow (`steering/`); [`FanoutMode::Hash`] (the default) spreads
//! by the kernel's symmetric flow hash, which does not know the owners.
//!
//! Design (see `port/` for the ring protocol):
//!
//! * **RX** ([`RxMode`], per driver): by default a `TPACKET_V2` ring of
//!   `rx_frame_count` fixed slots, each handed to user space (and `poll(2)`
//!   woken) as soon as the kernel wrote its frame; or a `TPACKET_V3` ring
//!   of `rx_block_count` blocks of `rx_block_size` bytes, into which the
//!   kernel packs variable-size frames and hands a block over when it is
//!   full or `rx_block_timeout_ms` after its first frame (the retire timer:
//!   at light load every frame waits for it, ≥ 1 ms). `rx_burst` walks the
//!   ring without any syscall, copies each frame into a preallocated pool
//!   buffer, and returns each slot or block as soon as it is walked.
//! * **TX**: the same socket's `PACKET_TX_RING`, in the same version (a
//!   socket has one `PACKET_VERSION` for both rings; V3 TX works since
//!   Linux 4.11): fixed slots of `tx_frame_size` bytes, data after the
//!   header (32 bytes in V2, 48 in V3). `tx_burst` copies frames into free
//!   slots, marks them `TP_STATUS_SEND_REQUEST`, then makes exactly one
//!   `send(fd, NULL, 0, MSG_DONTWAIT)`. A socket with both rings has
//!   `PACKET_VNET_HDR` also without `gso`: the header in front of each
//!   slot asks the kernel to copy a frame whole into the skb (every frame
//!   on a veth, small ones elsewhere) rather than attach the ring's page,
//!   which a veth copies again into a new one (`port::TxVnet`). `PACKET_QDISC_BYPASS` (on by
//!   default) hands frames straight to the device; `PACKET_LOSS` makes the
//!   kernel skip a malformed slot instead of stalling the ring.
//! * **TX by `sendmmsg`** ([`TxPath::Sendmsg`], `auto` on a veth with `gso`):
//!   a second, send-only socket per port and one `sendmmsg(2)` per burst
//!   instead of the TX ring, whose zero-copy pages a veth must copy again
//!   (see `sender.rs`).
//! * **RX by `recvmmsg`** ([`RxPath::Recvmsg`], a choice; `auto` is the
//!   ring): no RX ring; one `recvmmsg(2)` per burst into posted pool
//!   buffers, so a super-packet is copied once instead of twice (see
//!   `receiver.rs`). `rx_burst` then makes one syscall, also when idle.
//! * **The port's kernel stack** ([`AfPacketConfig::kernel_stack_rx`] off,
//!   the gateway's setting): a tcx ingress program ends each frame after
//!   the packet sockets took it, so the port's own IP stack does not route
//!   and drop it again (see `kernel_rx.rs`).
//! * **Own traffic**: `PACKET_IGNORE_OUTGOING` keeps a socket from receiving
//!   frames sent on its interface (the other workers' TX, kernel output).
//! * **Checks on RX**, counted per port in [`PortStats`]: frames longer than
//!   MTU + 14 (+4 with one VLAN tag) are dropped (`rx_too_big`; GRO/LRO on the
//!   port or TSO on a veth peer produce such super-frames, which only `gso`
//!   takes); frames the ring
//!   truncated are dropped (`rx_truncated`); a VLAN tag the kernel moved to
//!   `tp_vlan_tci` is put back in the frame; `TP_STATUS_CSUMNOTREADY` frames
//!   get their TCP/UDP checksum completed (see `fixup.rs`) and
//!   `TP_STATUS_CSUM_VALID` marks a frame checksum-verified.
//! * **GSO/GRO pass-through** (`gso`, off by default): `PACKET_VNET_HDR`
//!   (set before the rings) makes the kernel write a 10-byte
//!   `virtio_net_hdr` right before each RX frame's MAC header and read one
//!   at the start of each TX slot's data (`tp_len` counts it). Facts
//!   used (Linux `tpacket_rcv`/`tpacket_snd`, `virtio_net_hdr_from_skb`/
//!   `_to_skb`; VPP's af_packet plugin does the same): a GSO skb arrives
//!   whole with `gso_type`/`gso_size` and `NEEDS_CSUM` (`csum_start` from
//!   the MAC header, not counting a tag moved to `tp_vlan_tci`, so a tag
//!   put back shifts it by 4); with a vnet header the TX size limit is the
//!   slot, not the MTU. RX: a super-packet (TCPv4/v6, UDP_L4; UFO and
//!   unknown types are dropped as `rx_offload_bad`) may exceed the MTU,
//!   keeps its pseudo-header seed and is marked checksum-verified (the
//!   kernel trusts a `CHECKSUM_PARTIAL` skb the same way); any other
//!   frame is checked and completed exactly as without `gso`. TX: each
//!   frame's [`Offload`] is written back, so the device (or the peer
//!   veth's stack, or the kernel's software GSO when the device cannot)
//!   cuts the segments and completes their checksums. Slots grow to
//!   64 KiB (`pool.rs`, `block_size_for`); buffers come in two sizes.
//! * **Promiscuous mode** is a `PACKET_ADD_MEMBERSHIP` of each socket (the
//!   kernel reference-counts it and drops it when the socket closes), so it
//!   is part of opening a port, not of [`prepare`].
//!
//! Invariants: everything (pool, poll set, rings) is allocated in
//! [`AfPacketDriver::open`]; `rx_burst`, `tx_burst`, `release` and
//! `frame_from` never allocate (beyond the caller's `Vec` capacity), lock or
//! panic, `rx_burst` makes no syscall on the ring path (one `recvmmsg` on
//! the `recvmmsg` path) and `tx_burst` at most one (on the
//! `sendmmsg` path one per 64 frames, plus one per frame the kernel refuses). Pool buffers
//! hold the largest frame any port accepts, and TX slots hold a pool buffer;
//! a pool buffer is in the pool, posted to a port's receiver, or in the
//! caller's hands ([`AfPacketDriver::pool_free`] counts the first two).
//!
//! No `unsafe` code here: the Linux calls are the shared wrappers of
//! `driver::sys` (packet-socket ones in `socket.rs`), the ring mapping a
//! `sys::Region`, the idle wait a `sys::PollSet`.

pub mod prepare;

mod config;
mod fixup;
mod geometry;
mod kernel_rx;
mod pool;
mod port;
mod receiver;
mod sender;
mod socket;
mod stats;
pub mod steering;
#[cfg(test)]
mod tests;

use super::{Driver, Frame, PortCounters, sys};
use crate::packet::{Offload, PortId};
use crate::steering::SteeringRule;
use crate::wire::MacAddr;
use crate::wire::vnet;
pub use config::{
    AfPacketConfig, AfPacketPortConfig, FanoutMode, RingConfig, RxMode, RxPath, TxPath,
};
use geometry::{rx_request, slot_request};
use pool::{GSO_MAX_FRAME, Pools};
use port::{RxContext, RxRing, TxRing, TxVnet};
use receiver::MsgReceiver;
use sender::MsgSender;
use stats::KernelTotals;
pub use stats::{KernelStats, PortStats};
use std::io;
use std::os::fd::{AsFd, OwnedFd};

/// Why opening or preparing an interface failed. Every variant names the
/// interface and carries the OS error.
#[derive(Debug, thiserror::Error)]
pub enum AfPacketError {
    #[error("interface {ifname}: not found: {source}")]
    NoSuchInterface { ifname: String, source: io::Error },
    #[error("interface {ifname}: {request} failed: {source}")]
    Ioctl {
        ifname: String,
        request: &'static str,
        source: io::Error,
    },
    #[error("interface {ifname}: opening a socket failed: {source}")]
    Socket { ifname: String, source: io::Error },
    #[error("interface {ifname}: socket option {option} failed: {source}")]
    SocketOption {
        ifname: String,
        option: &'static str,
        source: io::Error,
    },
    #[error("interface {ifname}: mapping the {len_bytes}-byte rings failed: {source}")]
    Mmap {
        ifname: String,
        len_bytes: usize,
        source: io::Error,
    },
    #[error("interface {ifname}: bind failed: {source}")]
    Bind { ifname: String, source: io::Error },
    #[error("interface {ifname}: invalid ring configuration: {reason} ({source})")]
    InvalidConfig {
        ifname: String,
        reason: String,
        source: io::Error,
    },
    #[error("interface {ifname}: listing its addresses failed: {source}")]
    ListAddresses { ifname: String, source: io::Error },
}

impl AfPacketError {
    fn invalid(ifname: &str, reason: String) -> Self {
        AfPacketError::InvalidConfig {
            ifname: ifname.to_string(),
            source: io::Error::from_raw_os_error(libc::EINVAL),
            reason,
        }
    }
}

/// A frame in a pooled buffer.
#[derive(Debug)]
pub struct AfPacketFrame {
    buf: Box<[u8]>,
    len: usize,
    checksum_verified: bool,
    /// From the RX ring's `virtio_net_hdr` (with `gso`), written back to
    /// the TX ring's.
    offload: Offload,
}

impl Frame for AfPacketFrame {
    #[inline]
    fn data(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        let len = self.len.min(self.buf.len());
        &mut self.buf[..len]
    }
    #[inline]
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
    #[inline]
    fn extend(&mut self, len: usize) -> bool {
        if len > self.buf.len() {
            return false;
        }
        self.len = self.len.max(len);
        true
    }
    fn checksum_verified(&self) -> bool {
        self.checksum_verified
    }
    #[inline]
    fn offload(&self) -> Offload {
        self.offload
    }
    #[inline]
    fn clear_offload(&mut self) {
        self.offload = Offload::NONE;
    }
}

/// One socket on one interface.
#[derive(Debug)]
pub struct AfPacketPort {
    ifname: String,
    ifindex: u32,
    mac: MacAddr,
    mtu: u32,
    /// `PACKET_VNET_HDR` is on: a `virtio_net_hdr` precedes every frame
    /// in both rings.
    gso: bool,
    // Field order matters for drop: unmap before closing the socket.
    /// The rings' mapping (`None` when the socket has no ring at all).
    region: Option<sys::Region>,
    fd: OwnedFd,
    rx: RxRing,
    /// [`RxPath::Recvmsg`]: the posted buffers frames arrive in (then
    /// `rx` is [`RxRing::None`]: no RX ring is mapped).
    receiver: Option<MsgReceiver>,
    tx: TxRing,
    /// [`TxPath::Sendmsg`]: the send-only socket every frame leaves by
    /// (then `tx` has no slots: no TX ring is mapped).
    sender: Option<MsgSender>,
    stats: PortStats,
    /// The kernel's counters, accumulated over reads (each read resets
    /// them in the kernel).
    kernel: KernelTotals,
    /// The tcx link that keeps the kernel stack off the port's frames
    /// (`kernel_stack_rx` off and the kernel has tcx).
    kernel_rx_link: Option<OwnedFd>,
}

impl AfPacketPort {
    pub fn ifname(&self) -> &str {
        &self.ifname
    }
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }
    pub fn mac(&self) -> MacAddr {
        self.mac
    }
    pub fn mtu(&self) -> u32 {
        self.mtu
    }
    pub fn stats(&self) -> &PortStats {
        &self.stats
    }
    /// How this port's frames leave: [`TxPath::Ring`] or
    /// [`TxPath::Sendmsg`] (never `Auto`: resolved when the port opened).
    pub fn tx_path(&self) -> TxPath {
        if self.sender.is_some() {
            TxPath::Sendmsg
        } else {
            TxPath::Ring
        }
    }
    /// How this port's frames arrive: [`RxPath::Ring`] or
    /// [`RxPath::Recvmsg`] (never `Auto`).
    pub fn rx_path(&self) -> RxPath {
        if self.receiver.is_some() {
            RxPath::Recvmsg
        } else {
            RxPath::Ring
        }
    }
    /// Whether the port's kernel stack is kept off its frames (see
    /// `kernel_rx.rs`).
    pub fn kernel_stack_bypassed(&self) -> bool {
        self.kernel_rx_link.is_some()
    }
    /// TX slots in the ring (after rounding up to whole blocks; 0 on the
    /// `sendmmsg` path, which maps no TX ring).
    pub fn tx_ring_frames(&self) -> usize {
        self.tx.frame_count()
    }

    /// The kernel's counters since the last call (a syscall; reading resets
    /// them in the kernel).
    pub fn kernel_stats(&self) -> Result<KernelStats, AfPacketError> {
        let s =
            socket::packet_statistics(&self.fd).map_err(|source| AfPacketError::SocketOption {
                ifname: self.ifname.clone(),
                option: "PACKET_STATISTICS",
                source,
            })?;
        Ok(KernelStats {
            packets: s.tp_packets,
            drops: s.tp_drops,
            freeze_count: s.tp_freeze_q_cnt,
        })
    }

    fn open(
        cfg: &AfPacketPortConfig,
        config: &AfPacketConfig,
        frame_capacity: usize,
    ) -> Result<Self, AfPacketError> {
        let ifname = cfg.ifname.as_str();
        let info = prepare::interface_info(ifname)?;
        let ring = &config.ring;
        let page = sys::page_size();
        let invalid = |reason: String| AfPacketError::invalid(ifname, reason);

        let gso = config.gso;
        let tx_path = resolve_tx_path(config.tx_path, gso, ifname);
        let tx_ring = tx_path == TxPath::Ring;
        let rx_ring = resolve_rx_path(config.rx_path) == RxPath::Ring;
        let veth = is_veth(ifname);
        // Vnet headers on the socket: with gso, and on a socket with both
        // rings for the TX ring's linear copy (`port::TxVnet`); the RX ring
        // then only places each frame 10 bytes further into its slot.
        let tx_vnet = (gso || (tx_ring && rx_ring)).then_some(TxVnet {
            gso,
            linear_max_bytes: linear_tx_max_bytes(veth),
        });
        // With vnet headers every frame has 10 bytes more in front of it,
        // and with gso a super-packet may be up to 64 KiB.
        let vnet = if tx_vnet.is_some() {
            vnet::HEADER_LEN
        } else {
            0
        };
        let max_frame = if gso {
            GSO_MAX_FRAME
        } else {
            fixup::max_frame_len(info.mtu, true).max(frame_capacity)
        };
        let rx_req = rx_request(ring, max_frame + vnet, gso, page, &invalid)?;
        let tx_data = port::tx_data_offset(ring.rx_mode);
        // TX geometry: with gso a slot holds a whole super-packet.
        let tx_frame_size = if gso {
            ring.tx_frame_size
                .max((tx_data + vnet + GSO_MAX_FRAME).next_multiple_of(libc::TPACKET_ALIGNMENT))
        } else {
            ring.tx_frame_size
        };
        // A slot holds its header, the vnet header when there is one, and
        // the largest frame.
        let min_tx_frame_size = tx_data + vnet + frame_capacity;
        if !tx_frame_size.is_multiple_of(libc::TPACKET_ALIGNMENT)
            || tx_frame_size < min_tx_frame_size
        {
            return Err(invalid(format!(
                "tx_frame_size {tx_frame_size} must be a multiple of 16 and at least {min_tx_frame_size}"
            )));
        }
        if ring.tx_frame_count == 0 {
            return Err(invalid("tx_frame_count is 0".into()));
        }
        let tx_req = slot_request(
            tx_frame_size,
            ring.tx_frame_count,
            gso,
            page,
            &invalid,
            "tx",
        )?;
        // The sendmmsg path sends by a socket of its own: no TX ring (with
        // gso it would be 18.5 MiB per socket for nothing).
        let (tx_block_size, tx_block_count) = (
            tx_req.tp_block_size as usize,
            if tx_ring {
                tx_req.tp_block_nr as usize
            } else {
                0
            },
        );

        let fd = socket::packet_socket().map_err(|source| AfPacketError::Socket {
            ifname: ifname.to_string(),
            source,
        })?;
        let opt = |option: &'static str| {
            move |source| AfPacketError::SocketOption {
                ifname: ifname.to_string(),
                option,
                source,
            }
        };
        let one: libc::c_int = 1;
        let version = match ring.rx_mode {
            RxMode::Frames => libc::tpacket_versions::TPACKET_V2,
            RxMode::Blocks => libc::tpacket_versions::TPACKET_V3,
        } as libc::c_int;
        sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_VERSION, &version)
            .map_err(opt("PACKET_VERSION"))?;
        if config.qdisc_bypass {
            sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &one)
                .map_err(opt("PACKET_QDISC_BYPASS"))?;
        }
        sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_LOSS, &one)
            .map_err(opt("PACKET_LOSS"))?;
        if tx_vnet.is_some() {
            // Before the rings: the kernel refuses it once they exist.
            sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)
                .map_err(opt("PACKET_VNET_HDR"))?;
        }
        // A V2 socket reads the first four fields (`tpacket_req`) of the
        // same request.
        if rx_ring {
            sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &rx_req)
                .map_err(opt("PACKET_RX_RING"))?;
        } else {
            receiver::configure(&fd).map_err(|(option, source)| opt(option)(source))?;
        }
        if tx_ring {
            sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_TX_RING, &tx_req)
                .map_err(opt("PACKET_TX_RING"))?;
        }

        let (block, blocks) = (rx_req.tp_block_size as usize, rx_req.tp_block_nr as usize);
        let rx = match ring.rx_mode {
            _ if !rx_ring => RxRing::None,
            RxMode::Frames => RxRing::frames(block, blocks, rx_req.tp_frame_size as usize),
            RxMode::Blocks => RxRing::blocks(block, blocks),
        };
        let tx = TxRing::new(
            ring.rx_mode,
            rx.len_bytes(),
            tx_block_size,
            tx_block_count,
            tx_frame_size,
            tx_vnet,
        );
        let len_bytes = rx.len_bytes() + tx.len_bytes();
        let region = if len_bytes == 0 {
            None
        } else {
            Some(
                sys::Region::shared(&fd, len_bytes, 0).map_err(|source| AfPacketError::Mmap {
                    ifname: ifname.to_string(),
                    len_bytes,
                    source,
                })?,
            )
        };
        let receiver = (!rx_ring).then(|| MsgReceiver::new(max_frame.max(frame_capacity), gso));

        socket::bind_packet(&fd, info.ifindex, socket::ETH_P_ALL_BE).map_err(|source| {
            AfPacketError::Bind {
                ifname: ifname.to_string(),
                source,
            }
        })?;
        sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one)
            .map_err(opt("PACKET_IGNORE_OUTGOING"))?;
        if config.promiscuous {
            let mreq = libc::packet_mreq {
                mr_ifindex: info.ifindex as libc::c_int,
                mr_type: libc::PACKET_MR_PROMISC as libc::c_ushort,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)
                .map_err(opt("PACKET_ADD_MEMBERSHIP"))?;
        }
        if let Some(group) = cfg.fanout_group_id {
            steering::join(&fd, group, config.fanout_mode).map_err(opt("PACKET_FANOUT"))?;
        }
        let sender = if tx_ring {
            None
        } else {
            Some(
                MsgSender::open(info.ifindex, gso, config.qdisc_bypass)
                    .map_err(|(option, source)| opt(option)(source))?,
            )
        };
        // After the socket is bound: from here on it takes the frames.
        let kernel_rx_link = if config.kernel_stack_rx {
            None
        } else {
            kernel_rx::steal_ingress(info.ifindex).ok()
        };
        Ok(AfPacketPort {
            ifname: ifname.to_string(),
            ifindex: info.ifindex,
            mac: info.mac,
            mtu: info.mtu,
            gso,
            region,
            fd,
            rx,
            receiver,
            tx,
            sender,
            stats: PortStats::default(),
            kernel: KernelTotals::default(),
            kernel_rx_link,
        })
    }
}

/// Frames without offload up to this many bytes leave a TX ring copied
/// whole into the skb's linear part ([`port::TxVnet`]): every frame on a
/// veth, which would otherwise copy the ring's pages into new ones
/// (measured: 5.37 → 4.74 µs of gateway CPU per UDP echo, bench/RESULTS.md);
/// elsewhere only frames small enough that one copy costs less than
/// attaching a page (a NIC DMAs the pages of larger ones as they are).
fn linear_tx_max_bytes(veth: bool) -> usize {
    /// Up to here a copy is cheaper than a page fragment's bookkeeping
    /// (the kernel's own `SKB_SMALL_HEAD_CACHE_SIZE` scale).
    const SMALL_FRAME_BYTES: usize = 256;
    if veth { usize::MAX } else { SMALL_FRAME_BYTES }
}

/// `ifname` is a veth (its driver's name, by ethtool).
fn is_veth(ifname: &str) -> bool {
    sys::ioctl_socket()
        .and_then(|s| sys::driver_name(&s, ifname))
        .is_ok_and(|d| d == "veth")
}

/// The path frames leave `ifname` by: `Auto` is [`TxPath::Sendmsg`] on a
/// veth with `gso` (where the ring's zero-copy pages cost a second copy of
/// each super-packet, see `sender.rs`), [`TxPath::Ring`] elsewhere (a
/// NIC DMAs the ring's pages as they are; small frames gain nothing).
fn resolve_tx_path(path: TxPath, gso: bool, ifname: &str) -> TxPath {
    match path {
        TxPath::Auto if gso && is_veth(ifname) => TxPath::Sendmsg,
        TxPath::Auto => TxPath::Ring,
        chosen => chosen,
    }
}

/// The path frames arrive by: `Auto` is [`RxPath::Ring`] (no syscall per
/// burst). `recvmmsg` copies a super-packet once instead of twice, but the
/// one copy runs on the worker's core instead of the sender's softirq:
/// measured on an idle veth rig, one GSO flow ran slower with it
/// (bench/RESULTS.md), so it is a choice, not a default.
fn resolve_rx_path(path: RxPath) -> RxPath {
    match path {
        RxPath::Auto => RxPath::Ring,
        chosen => chosen,
    }
}

/// One worker's af_packet ports.
#[derive(Debug)]
pub struct AfPacketDriver {
    ports: Vec<AfPacketPort>,
    pool: Pools,
    frame_capacity: usize,
    poll_set: sys::PollSet,
    poll_timeout_ms: u32,
    /// Ports whose fanout group runs the steering program.
    steered_ports: Vec<usize>,
}

impl AfPacketDriver {
    /// Open every port's socket and allocate the pool. Must run in the
    /// network namespace of the interfaces. Does not change the interfaces
    /// beyond promiscuous membership (see [`prepare`]).
    pub fn open(config: &AfPacketConfig) -> Result<Self, AfPacketError> {
        // Buffers hold the largest frame of any port: MTU + header + one tag
        // (and at least a minimum Ethernet frame).
        let mut frame_capacity = 64;
        for p in &config.ports {
            let info = prepare::interface_info(&p.ifname)?;
            frame_capacity = frame_capacity.max(fixup::max_frame_len(info.mtu, true));
        }
        let mut ports = config
            .ports
            .iter()
            .map(|p| AfPacketPort::open(p, config, frame_capacity))
            .collect::<Result<Vec<_>, _>>()?;
        let big = if config.gso {
            config.gso_pool_frames
        } else {
            0
        };
        let mut pool = Pools::new(config.pool_frames, frame_capacity, big);
        // Receivers without a ring keep buffers posted between bursts; each
        // keeps at most half its share of its size class, so the other
        // ports and the pipeline (`frame_from`) always find buffers.
        let receivers = ports.iter().filter(|p| p.receiver.is_some()).count();
        for r in ports.iter_mut().filter_map(|p| p.receiver.as_mut()) {
            let share = pool.total_for(r.buf_len()) / (2 * receivers);
            r.limit_posted(share, &mut pool);
        }
        let poll_set = sys::PollSet::new(ports.iter().map(|p| p.fd.as_fd()));
        Ok(AfPacketDriver {
            ports,
            pool,
            frame_capacity,
            poll_set,
            poll_timeout_ms: config.poll_timeout_ms,
            steered_ports: steering::steered_ports(config),
        })
    }

    pub fn port(&self, port: PortId) -> Option<&AfPacketPort> {
        self.ports.get(usize::from(port))
    }

    pub fn ports(&self) -> &[AfPacketPort] {
        &self.ports
    }

    /// Counters summed over all ports.
    pub fn total_stats(&self) -> PortStats {
        let mut t = PortStats::default();
        for p in &self.ports {
            let s = &p.stats;
            t.rx_frames += s.rx_frames;
            t.rx_bytes += s.rx_bytes;
            t.rx_too_big += s.rx_too_big;
            t.rx_truncated += s.rx_truncated;
            t.rx_csum_completed += s.rx_csum_completed;
            t.rx_csum_partial_left += s.rx_csum_partial_left;
            t.rx_vlan_restored += s.rx_vlan_restored;
            t.rx_gso_frames += s.rx_gso_frames;
            t.rx_offload_bad += s.rx_offload_bad;
            t.tx_gso_frames += s.tx_gso_frames;
            t.rx_pool_empty += s.rx_pool_empty;
            t.rx_ring_errors += s.rx_ring_errors;
            t.tx_frames += s.tx_frames;
            t.tx_bytes += s.tx_bytes;
            t.tx_too_big += s.tx_too_big;
            t.tx_ring_full += s.tx_ring_full;
            t.tx_send_errors += s.tx_send_errors;
            t.socket_errors += s.socket_errors;
        }
        t
    }

    /// Free buffers in the pool, both sizes (leak checks).
    pub fn pool_free(&self) -> usize {
        let posted: usize = self
            .ports
            .iter()
            .filter_map(|p| p.receiver.as_ref())
            .map(MsgReceiver::posted)
            .sum();
        self.pool.small.len() + self.pool.big.len() + posted
    }

    /// Bytes each pool buffer holds.
    pub fn frame_capacity(&self) -> usize {
        self.frame_capacity
    }

    /// Sleep in `poll(2)` until a port has frames or `timeout_ms` passes;
    /// returns whether frames are (probably) waiting. Returns at once if a
    /// ring already holds frames at its cursor (a burst stopped early, or
    /// frames arrived since the last burst). For the worker's idle policy; a signal
    /// or a poll error counts as "nothing yet".
    pub fn wait(&mut self, timeout_ms: u32) -> bool {
        if self
            .ports
            .iter()
            .any(|p| p.region.as_ref().is_some_and(|r| p.rx.has_frames(r)))
        {
            return true;
        }
        let ports = &mut self.ports;
        self.poll_set.wait(timeout_ms, |i| {
            if let Some(port) = ports.get_mut(i) {
                port.stats.socket_errors += 1;
                let _ = sys::take_socket_error(&port.fd);
            }
        })
    }
}

impl Driver for AfPacketDriver {
    type Frame = AfPacketFrame;

    fn port_count(&self) -> usize {
        self.ports.len()
    }

    fn rx_burst(&mut self, port: PortId, out: &mut Vec<AfPacketFrame>, max: usize) -> usize {
        let Some(p) = self.ports.get_mut(usize::from(port)) else {
            return 0;
        };
        let ctx = RxContext {
            mtu: p.mtu,
            gso: p.gso,
            stats: &mut p.stats,
        };
        if let Some(receiver) = &mut p.receiver {
            return receiver.recv(&p.fd, ctx, &mut self.pool, out, max);
        }
        match &mut p.region {
            Some(region) => port::rx_walk(region, &mut p.rx, ctx, &mut self.pool, out, max),
            None => 0,
        }
    }

    fn tx_burst(&mut self, port: PortId, frames: &mut Vec<AfPacketFrame>) -> usize {
        let Some(p) = self.ports.get_mut(usize::from(port)) else {
            return 0;
        };
        if let Some(sender) = &mut p.sender {
            let taken = sender.send(p.mtu, &mut p.stats, &mut self.pool, frames);
            p.stats.tx_ring_full += frames.len() as u64;
            return taken;
        }
        let Some(region) = &mut p.region else {
            return 0;
        };
        let (taken, queued) = port::tx_fill(
            region,
            &mut p.tx,
            p.mtu,
            &mut p.stats,
            &mut self.pool,
            frames,
        );
        p.stats.tx_ring_full += frames.len() as u64;
        if queued > 0 || p.tx.kick_pending {
            match socket::kick_tx(&p.fd) {
                Ok(()) => p.tx.kick_pending = false,
                Err(_) => {
                    p.stats.tx_send_errors += 1;
                    p.tx.kick_pending = true;
                }
            }
        }
        taken
    }

    fn release(&mut self, frame: AfPacketFrame) {
        self.pool.push(frame);
    }

    /// [`AfPacketDriver::wait`] with the configured `poll_timeout_ms`.
    fn wait_idle(&mut self) -> bool {
        self.wait(self.poll_timeout_ms)
    }

    fn wake_on_readable(&mut self, fds: &[std::os::fd::RawFd]) {
        self.poll_set.add_raw(fds);
    }

    /// The driver's [`PortStats`] plus the kernel's `PACKET_STATISTICS`
    /// (read here, one syscall per port, and accumulated).
    fn port_counters(&mut self, out: &mut [PortCounters]) {
        for (port, slot) in self.ports.iter_mut().zip(out) {
            if let Ok(read) = port.kernel_stats() {
                port.kernel.add(read);
            }
            *slot = port.stats.counters(port.kernel);
        }
    }

    fn install_steering(&mut self, rule: &SteeringRule) -> io::Result<bool> {
        for &i in &self.steered_ports {
            if let Some(p) = self.ports.get(i) {
                steering::install(&p.fd, rule)?;
            }
        }
        Ok(!self.steered_ports.is_empty())
    }

    fn frame_from(&mut self, bytes: &[u8]) -> Option<AfPacketFrame> {
        let mut frame = self.pool.pop_for(bytes.len())?;
        let Some(dst) = frame.buf.get_mut(..bytes.len()) else {
            self.pool.push(frame);
            return None;
        };
        dst.copy_from_slice(bytes);
        frame.len = bytes.len();
        frame.checksum_verified = false;
        frame.offload = Offload::NONE;
        Some(frame)
    }
}
