//! The AF_XDP driver: XDP sockets (Documentation/networking/af_xdp.rst)
//! fed by a tiny XDP program that redirects every frame of an RX queue to
//! the socket of that queue ([`bpf`], attached once per interface by
//! [`XdpAttachment`]).
//!
//! One [`AfXdpDriver`] serves one worker: a socket per port, bound to the
//! worker's queue (`queue_id`; worker `w` binds queue `w`, so an interface
//! needs exactly as many RX queues as there are workers), and with
//! several workers an RX-only socket on each other worker's queue
//! ([`queues`]), so the redirect program can deliver each frame to the
//! worker owning its flow ([`steer`], installed by worker 0 through
//! [`Driver::install_steering`]). Design:
//!
//! * **UMEM**: one per worker, `umem_frames` chunks of `frame_size` bytes
//!   (aligned mode: 2048 or 4096), shared by all of the worker's ports with
//!   `XDP_SHARED_UMEM` (Linux 5.10+ for different devices): a frame received
//!   on one port is sent out of another by putting its address on that
//!   port's TX ring, without copying. When sharing is off or the kernel
//!   refuses it, each port gets its own UMEM and a frame crossing UMEMs is
//!   copied once into a chunk of the destination's.
//! * **Rings**: each socket has its own fill and completion rings (also
//!   with a shared UMEM) besides RX and TX; sizes from the configuration,
//!   powers of two. The ring protocol is in `ring.rs`.
//! * **RX** (`rx_burst`): up to `max` descriptors from the RX ring, no
//!   syscall; each becomes an [`XdpFrame`] over its chunk. With busy
//!   polling ([`BusyPoll`]: `SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL`,
//!   `SO_BUSY_POLL_BUDGET`, where the kernel accepts them; each port says
//!   what it got, [`XdpPort::busy_poll`]) a burst that finds the ring empty
//!   makes one `recvfrom`, which runs the queue's NAPI poll in the worker. The fill ring is
//!   topped up to its target from the free list in the same call (one
//!   `Release` store), after reclaiming completed TX chunks when the free
//!   list runs low.
//! * **Other queues** ([`queues`]): with several workers, `rx_burst` also
//!   takes the frames of its port's sockets on the other workers' queues
//!   (RX rings only, in those workers' UMEMs), as copies into this
//!   worker's UMEM, handing the chunks back through return rings; and it
//!   drains the return rings of its own UMEM before topping up the fill
//!   ring.
//! * **TX** (`tx_burst`): descriptors onto the TX ring, one `Release`
//!   store, then a `sendto` kick only when needed: in copy mode always
//!   (the kernel sends copy-mode frames only from `sendmsg`, at most 32 per
//!   call, so a burst of 64 takes two kicks; at most [`MAX_TX_KICKS`]), in
//!   zero-copy mode only when the kernel set `XDP_RING_NEED_WAKEUP` on the
//!   TX ring (`need_wakeup = true`).
//! * **Frames**: an [`XdpFrame`] owns its chunk until it is sent (the
//!   completion ring returns it) or released (straight back to the free
//!   list). Frames from `frame_from` (handoffs between workers) are copies
//!   into a free chunk.
//! * **Bind flags**: `XDP_ZEROCOPY` / `XDP_COPY` per `zero_copy`
//!   (auto tries zero-copy first; veth and generic XDP only do copy mode),
//!   `XDP_USE_NEED_WAKEUP` per `need_wakeup`; the sockets that share the
//!   UMEM inherit the owner's flags (the kernel rejects flags with
//!   `XDP_SHARED_UMEM`).
//!
//! Invariants: everything is allocated in [`AfXdpDriver::open`] (and the
//! sockets on other queues when they are joined, once); the
//! packet path never allocates (beyond the caller's `Vec` capacity), locks
//! or panics, `rx_burst` makes no syscall (except a `recvfrom` wake-up when
//! the kernel asks for one on the fill ring, and with busy polling one
//! when the RX ring is empty) and `tx_burst` at most
//! [`MAX_TX_KICKS`] `sendto`s. Every chunk is in exactly one place: a free
//! list, a fill ring, the kernel (received but not yet consumed, or queued
//! for TX), a completion ring, one frame, or, received on another worker's
//! socket on this worker's queue, that worker's RX ring or a return ring. A UMEM is never unmapped while
//! a frame still points into it: the driver counts frames out and, if some
//! are still out when it is dropped, leaks the mapping instead.
//!
//! * **Multi-buffer** (`chain.rs`, [`MultiBuffer`]): where a port's MTU +
//!   18 does not fit a chunk after the 256-byte headroom (or when asked),
//!   the UMEM owner binds with `XDP_USE_SG` and the UMEM gets *spans*
//!   (runs of consecutive chunks, one per RX/TX ring entry); a received
//!   `XDP_PKT_CONTD` chain is copied into a span and handed out as one
//!   frame, and a span frame leaves as one descriptor per chunk.
//!
//! Limits: without multi-buffer the MTU must fit a chunk minus the
//! 256-byte XDP headroom; no checksum offload information (frames are
//! never `checksum_verified`); no GSO pass-through (see `chain.rs`). On veth, native XDP sees a frame
//! only when the sending peer has TSO off (else the kernel skips the veth
//! NAPI path); generic XDP has no such condition.
//!
//! This file is over 700 lines and whole: it is the driver's state and its
//! [`Driver`] implementation, every burst touching the ports, the UMEMs,
//! the frame accounting and the sockets on other queues together; the
//! parts that stand alone are the files below.
//!
//! Files: `config.rs` (what a driver opens with), `socket.rs` (opening and
//! binding a socket), `ring.rs` (the ring protocol), `umem.rs` (chunks and
//! frames), `chain.rs` (multi-buffer chains), `port.rs` (one socket's ring
//! work), `stats.rs` (counters), `queues.rs` (sockets on the other
//! workers' queues), `steer/` (the steering program),
//! `bpf.rs`/`program.rs`/`netlink.rs` (the XDP program), this file (the
//! driver). All `unsafe` code lives in `sys.rs` (and the namespace tests);
//! the calls af_packet also makes are in `driver::sys`.

pub mod bpf;
pub mod netlink;
pub mod program;

mod chain;
mod config;
mod port;
pub mod queues;
mod ring;
mod socket;
mod stats;
pub mod steer;
// af_packet's kernel-RX program loads and attaches through `bpf_fd`.
pub(in crate::driver) mod sys;
#[cfg(test)]
mod tests;
mod umem;

pub use bpf::XskMap;
pub use chain::MAX_CHAIN_DESCS;
pub use config::{
    AfXdpConfig, AfXdpPortConfig, BusyPoll, BusyPollState, MultiBuffer, XdpMode, XdpRingConfig,
    ZeroCopy,
};
pub use port::XdpPort;
pub use program::{AttachedMode, XdpAttachment, XdpLink};
pub use queues::QueueSockets;
pub use socket::rx_queue_count;
pub use stats::{XdpKernelStats, XdpPortStats};
pub use umem::XdpFrame;

use super::afpacket::prepare;
use super::{Driver, Frame, PortCounters};
use crate::driver::sys as driver_sys;
use crate::packet::PortId;
use crate::steering::SteeringRule;
use chain::RxPacket;
use queues::{RemoteSocket, ReturnRing};
use socket::{bind_own, flag_names, open_socket, ring_size};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use umem::Umem;

/// Headroom the kernel leaves before received data in a chunk
/// (`XDP_PACKET_HEADROOM`); frames we build start at the same offset.
pub const XDP_HEADROOM: u32 = 256;
/// Most `sendto` kicks per TX burst (copy mode sends 32 frames per kick).
pub const MAX_TX_KICKS: u32 = 4;
/// Ethernet header plus one VLAN tag plus FCS-less slack: what a frame may
/// exceed the MTU by.
pub const L2_OVERHEAD: u32 = 18;

/// Why opening a port or attaching the program failed; every variant names
/// what it was about and carries the OS error.
#[derive(Debug, thiserror::Error)]
pub enum AfXdpError {
    #[error("interface {ifname}: not found: {source}")]
    NoSuchInterface { ifname: String, source: io::Error },
    #[error(transparent)]
    Interface(#[from] super::afpacket::AfPacketError),
    #[error("interface {ifname}: opening an AF_XDP socket failed: {source}")]
    Socket { ifname: String, source: io::Error },
    #[error("interface {ifname}: socket option {option} failed: {source}")]
    SocketOption {
        ifname: String,
        option: &'static str,
        source: io::Error,
    },
    #[error("interface {ifname}: mapping the {what} ({len_bytes} bytes) failed: {source}")]
    Mmap {
        ifname: String,
        what: &'static str,
        len_bytes: usize,
        source: io::Error,
    },
    #[error("interface {ifname}: binding queue {queue} ({flags}) failed: {source}")]
    Bind {
        ifname: String,
        queue: u32,
        flags: String,
        source: io::Error,
    },
    #[error("interface {ifname}: {reason}")]
    InvalidConfig { ifname: String, reason: String },
    #[error(
        "interface {ifname} has {queues} RX queue(s) but the gateway runs {workers} worker(s); \
         AF_XDP needs one queue per worker (set workers = {queues}, or change the queues: \
         ethtool -L {ifname} combined {workers}, or numrxqueues for veth)"
    )]
    QueueCount {
        ifname: String,
        queues: u32,
        workers: usize,
    },
    #[error("{what} failed: {source}")]
    Bpf {
        what: &'static str,
        source: io::Error,
    },
    #[error("loading the XDP program failed: {source}; verifier log:\n{log}")]
    Verifier { source: io::Error, log: String },
    #[error("interface {ifname}: {source}")]
    Steering {
        ifname: String,
        source: steer::SteerError,
    },
    #[error(
        "interface {ifname}: the kernel refused the steering program ({reason}); frames go to \
         their queue's own worker and reach the others by handoff (steering needs Linux 5.18+, \
         bpf_xdp_load_bytes)"
    )]
    SteeringUnavailable { ifname: String, reason: String },
    #[error("interface {ifname}: attaching the XDP program in {mode} mode failed: {source}")]
    Attach {
        ifname: String,
        mode: String,
        source: io::Error,
    },
    #[error(
        "interface {ifname}: another XDP program is attached (id {id}, name {name:?}); \
         Portico does not replace programs it did not load (detach it: ip link set dev \
         {ifname} xdp off)"
    )]
    ForeignProgram {
        ifname: String,
        id: u32,
        name: String,
    },
    #[error("interface {ifname}: netlink {what} failed: {source}")]
    Netlink {
        ifname: String,
        what: &'static str,
        source: io::Error,
    },
    #[error("interface {ifname}: putting the socket into the XSK map failed: {source}")]
    MapInsert { ifname: String, source: io::Error },
}

pub(super) fn invalid(ifname: &str, reason: impl Into<String>) -> AfXdpError {
    AfXdpError::InvalidConfig {
        ifname: ifname.to_string(),
        reason: reason.into(),
    }
}

/// One worker's AF_XDP ports.
#[derive(Debug)]
pub struct AfXdpDriver {
    // Field order is drop order: sockets before the UMEMs they use.
    /// This worker's sockets on other workers' queues, by port
    /// (`queues.rs`).
    remote: Vec<(PortId, RemoteSocket)>,
    ports: Vec<XdpPort>,
    umems: Vec<Umem>,
    /// Frames handed out (rx, frame_from) and not yet back (tx, release).
    frames_out: usize,
    poll_set: driver_sys::PollSet,
    poll_timeout_ms: u32,
    /// The ports' program links (steering rules go in through them).
    links: Vec<Arc<XdpLink>>,
    /// Chunks other workers give back, by the UMEM they belong to.
    returns_in: Vec<(u8, Arc<ReturnRing>)>,
    /// Ports whose sockets on the other queues are still to open (once
    /// every worker has published its own, see `queues.rs`).
    pending: Vec<(PortId, Arc<QueueSockets>)>,
    /// Why sockets on other queues could not be opened (the slots stay
    /// empty; the program falls back to the queue's own worker).
    queue_socket_errors: Vec<AfXdpError>,
}

impl AfXdpDriver {
    /// Open every port's socket on its queue, set up and fill the rings,
    /// and put each socket into its interface's XSK map. Must run in the
    /// network namespace of the interfaces.
    pub fn open(config: &AfXdpConfig) -> Result<Self, AfXdpError> {
        let rings = &config.rings;
        let first = config.ports.first().map_or("", |p| p.ifname.as_str());
        if !(rings.frame_size == 2048 || rings.frame_size == 4096)
            || rings.frame_size as usize > driver_sys::page_size()
        {
            return Err(invalid(
                first,
                format!(
                    "frame_size {} must be 2048 or 4096 (at most the page size)",
                    rings.frame_size
                ),
            ));
        }
        for (what, v) in [
            ("fill_ring", rings.fill_ring),
            ("completion_ring", rings.completion_ring),
            ("rx_ring", rings.rx_ring),
            ("tx_ring", rings.tx_ring),
        ] {
            ring_size(first, what, v)?;
        }
        let ports_n = config.ports.len().max(1) as u32;
        let umem_count = if config.shared_umem { 1 } else { ports_n };
        let per_umem_ports = ports_n / umem_count;
        let needed = per_umem_ports.saturating_mul(rings.fill_ring.saturating_add(rings.tx_ring));
        if rings.umem_frames < needed || rings.umem_frames > (1 << 20) {
            return Err(invalid(
                first,
                format!(
                    "umem_frames {} must cover the fill and TX rings of {per_umem_ports} \
                     port(s) ({needed}) and be at most 2^20",
                    rings.umem_frames
                ),
            ));
        }
        if config.ports.len() > usize::from(u8::MAX) {
            return Err(invalid(first, "at most 255 ports"));
        }

        let mut infos = Vec::with_capacity(config.ports.len());
        for pc in &config.ports {
            infos.push(prepare::interface_info(&pc.ifname)?);
        }
        // Multi-buffer (chain.rs) where a port's largest frame does not fit
        // one chunk after the headroom, or where asked for.
        let largest = infos.iter().map(|i| i.mtu + L2_OVERHEAD).max().unwrap_or(0);
        let needs_chains = largest + XDP_HEADROOM > rings.frame_size;
        let sg = match config.multi_buffer {
            MultiBuffer::On => true,
            MultiBuffer::Auto => needs_chains,
            MultiBuffer::Off => false,
        };
        let span_chunks = if sg {
            chain::span_chunks(rings.frame_size, largest)
        } else {
            0
        };
        if span_chunks > MAX_CHAIN_DESCS {
            return Err(invalid(
                first,
                format!(
                    "a {largest}-byte frame needs {span_chunks} {}-byte chunks, more than \
                     the {MAX_CHAIN_DESCS} buffers of one multi-buffer packet",
                    rings.frame_size
                ),
            ));
        }
        // Spans for a full RX or TX ring of multi-buffer frames per UMEM.
        let span_count = rings.rx_ring.max(rings.tx_ring);

        let mut umems: Vec<Umem> = Vec::new();
        let mut ports: Vec<XdpPort> = Vec::new();
        for (pc, info) in config.ports.iter().zip(infos) {
            let ifname = pc.ifname.as_str();
            let max_frame = info.mtu + L2_OVERHEAD;
            if max_frame + XDP_HEADROOM > rings.frame_size && !sg {
                return Err(invalid(
                    ifname,
                    format!(
                        "MTU {} does not fit a {}-byte chunk after the {XDP_HEADROOM}-byte \
                         headroom and multi-buffer is off (raise frame_size, lower the MTU \
                         or set multi_buffer)",
                        info.mtu, rings.frame_size
                    ),
                ));
            }
            // Share the first UMEM if asked; fall back to an own UMEM when
            // the kernel refuses the shared bind.
            let mut bound = None;
            if config.shared_umem
                && let Some(owner) = ports.first()
            {
                let s = open_socket(ifname, rings, None)?;
                match sys::bind_xdp(
                    s.fd.as_fd(),
                    info.ifindex,
                    pc.queue_id,
                    libc::XDP_SHARED_UMEM,
                    Some(owner.fd.as_fd()),
                ) {
                    Ok(()) => bound = Some((s, owner.umem, owner.zero_copy, owner.need_wakeup)),
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                    Err(source) => {
                        return Err(AfXdpError::Bind {
                            ifname: ifname.to_string(),
                            queue: pc.queue_id,
                            flags: flag_names(libc::XDP_SHARED_UMEM),
                            source,
                        });
                    }
                }
            }
            let (s, umem, zero_copy, need_wakeup) = match bound {
                Some(b) => b,
                None => {
                    let umem = Umem::new(ifname, rings, span_chunks, span_count)?;
                    let s = open_socket(ifname, rings, Some(&umem))?;
                    let zero_copy = bind_own(&s, ifname, info.ifindex, pc.queue_id, config, sg)?;
                    umems.push(umem);
                    (s, (umems.len() - 1) as u8, zero_copy, config.need_wakeup)
                }
            };
            let busy_poll = socket::enable_busy_poll(s.fd.as_fd(), config.busy_poll);
            if let Some(map) = &pc.xsk_map {
                map.insert(map.own_slot(pc.queue_id), s.fd.as_fd())
                    .map_err(|source| AfXdpError::MapInsert {
                        ifname: ifname.to_string(),
                        source,
                    })?;
            }
            ports.push(XdpPort {
                ifname: ifname.to_string(),
                ifindex: info.ifindex,
                queue_id: pc.queue_id,
                mac: info.mac,
                mtu: info.mtu,
                max_frame,
                umem,
                zero_copy,
                need_wakeup,
                multi_buffer: sg,
                busy_poll,
                fill_target: 0,
                tx_kick_pending: false,
                stats: XdpPortStats::default(),
                xsk_map: pc.xsk_map.clone(),
                rx: s.rx,
                tx: s.tx,
                fill: s.fill,
                comp: s.comp,
                fd: s.fd,
            });
        }
        // Fill targets: each UMEM's ports keep at most half its chunks in
        // their fill rings; the rest serve TX, handoffs and frames in flight.
        for (ui, umem) in umems.iter_mut().enumerate() {
            let sharing = ports.iter().filter(|p| usize::from(p.umem) == ui).count() as u32;
            let share = (umem.free.len() as u32 / 2) / sharing.max(1);
            for p in ports.iter_mut().filter(|p| usize::from(p.umem) == ui) {
                p.fill_target = share.min(p.fill.size());
                p.refill(umem);
            }
        }
        let poll_set = driver_sys::PollSet::new(ports.iter().map(|p| p.fd.as_fd()));
        let links = config.ports.iter().filter_map(|p| p.link.clone()).collect();
        // Publish each port's socket for the other workers' sockets on
        // this queue (multi-buffer too: their chains are copied into a
        // span, `queues::rx_copy`).
        let mut returns_in = Vec::new();
        let mut pending = Vec::new();
        for (i, (pc, p)) in config.ports.iter().zip(&ports).enumerate() {
            let Some(reg) = pc
                .queue_sockets
                .as_ref()
                .filter(|r| r.spans_queues() && pc.xsk_map.is_some())
            else {
                continue;
            };
            let Some(umem) = umems.get(usize::from(p.umem)) else {
                continue;
            };
            let (Some(map), chunks) = (
                p.xsk_map.as_ref(),
                (umem.map.len() / rings.frame_size as usize).max(1),
            ) else {
                continue;
            };
            let port = queues::Port {
                ifname: &p.ifname,
                ifindex: p.ifindex,
                rings,
                map,
            };
            let returns = reg
                .publish(
                    p.queue_id,
                    &p.fd,
                    &umem.map,
                    rings.frame_size,
                    chunks,
                    &port,
                )
                .map_err(|source| AfXdpError::Socket {
                    ifname: p.ifname.clone(),
                    source,
                })?;
            returns_in.extend(returns.into_iter().map(|r| (p.umem, r)));
            pending.push((i as PortId, Arc::clone(reg)));
        }
        let mut driver = AfXdpDriver {
            remote: Vec::new(),
            ports,
            umems,
            frames_out: 0,
            poll_set,
            poll_timeout_ms: config.poll_timeout_ms,
            links,
            returns_in,
            pending,
            queue_socket_errors: Vec::new(),
        };
        driver.connect_pending(false);
        Ok(driver)
    }

    pub fn port(&self, port: PortId) -> Option<&XdpPort> {
        self.ports.get(usize::from(port))
    }

    pub fn ports(&self) -> &[XdpPort] {
        &self.ports
    }

    /// This worker's sockets on other workers' queues: `(port, queue)`.
    pub fn queue_sockets(&self) -> Vec<(PortId, u32)> {
        self.remote.iter().map(|(p, r)| (*p, r.queue)).collect()
    }

    /// Why sockets on other queues could not be opened (each also counted
    /// as `queue_socket_failures`).
    pub fn queue_socket_errors(&self) -> &[AfXdpError] {
        &self.queue_socket_errors
    }

    /// Take the sockets on other queues opened for this worker so far
    /// (cold): `when_complete` only once every worker of the port has
    /// published (one atomic load per port while pending), and then for
    /// the last time.
    fn connect_pending(&mut self, when_complete: bool) {
        let mut i = 0;
        while let Some((port, reg)) = self.pending.get(i) {
            let (port, complete) = (*port, reg.complete());
            if when_complete && !complete {
                i += 1;
                continue;
            }
            let Some(p) = self.ports.get_mut(usize::from(port)) else {
                self.pending.swap_remove(i);
                continue;
            };
            let (sockets, errors) = reg.take(p.queue_id);
            p.stats.queue_socket_failures += errors.len() as u64;
            for s in sockets {
                self.poll_set.add_raw(&[s.fd.as_raw_fd()]);
                self.remote.push((port, s));
            }
            self.queue_socket_errors.extend(errors);
            if complete {
                self.pending.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Number of UMEMs (1 when every port shares one).
    pub fn umem_count(&self) -> usize {
        self.umems.len()
    }

    /// Free chunks over all UMEMs (leak checks).
    pub fn free_frames(&self) -> usize {
        self.umems.iter().map(|u| u.free.len()).sum()
    }

    /// Frames handed out and not yet returned.
    pub fn frames_out(&self) -> usize {
        self.frames_out
    }

    /// Move completed TX chunks of every port back to the free lists.
    pub fn reclaim_completions(&mut self) {
        for p in &mut self.ports {
            if let Some(u) = self.umems.get_mut(usize::from(p.umem)) {
                p.reclaim(u);
            }
        }
    }

    /// Sleep in `poll(2)` until a socket has frames or `timeout_ms`
    /// passes; returns whether frames are (probably) waiting. Retries TX
    /// kicks left pending first.
    pub fn wait(&mut self, timeout_ms: u32) -> bool {
        let mut ready = false;
        for p in &mut self.ports {
            if p.tx_kick_pending {
                p.kick_tx();
            }
            ready |= p.rx.available(1) > 0;
        }
        for (_, r) in &mut self.remote {
            ready |= r.rx.available(1) > 0;
        }
        if ready {
            return true;
        }
        let ports = &mut self.ports;
        self.poll_set.wait(timeout_ms, |i| {
            if let Some(port) = ports.get_mut(i) {
                port.stats.socket_errors += 1;
            }
        })
    }

    /// Counters summed over all ports.
    pub fn total_stats(&self) -> XdpPortStats {
        let mut t = XdpPortStats::default();
        for p in &self.ports {
            let s = &p.stats;
            t.rx_frames += s.rx_frames;
            t.rx_bytes += s.rx_bytes;
            t.rx_too_big += s.rx_too_big;
            t.rx_ring_errors += s.rx_ring_errors;
            t.rx_pool_empty += s.rx_pool_empty;
            t.rx_chains += s.rx_chains;
            t.rx_bad_chain += s.rx_bad_chain;
            t.tx_chains += s.tx_chains;
            t.tx_frames += s.tx_frames;
            t.tx_bytes += s.tx_bytes;
            t.tx_too_big += s.tx_too_big;
            t.tx_ring_full += s.tx_ring_full;
            t.tx_copies += s.tx_copies;
            t.tx_kicks += s.tx_kicks;
            t.tx_send_errors += s.tx_send_errors;
            t.socket_errors += s.socket_errors;
            t.rx_other_queues += s.rx_other_queues;
            t.queue_socket_failures += s.queue_socket_failures;
        }
        t
    }

    #[inline]
    fn free_frame(&mut self, frame: XdpFrame) {
        self.frames_out = self.frames_out.saturating_sub(1);
        if let Some(u) = self.umems.get_mut(usize::from(frame.umem)) {
            u.give_back(frame.addr);
        }
    }
}

impl Drop for AfXdpDriver {
    fn drop(&mut self) {
        for (port, r) in &self.remote {
            if let Some(map) = self
                .ports
                .get(usize::from(*port))
                .and_then(|p| p.xsk_map.as_ref())
            {
                let _ = map.remove(r.slot);
            }
        }
        self.remote.clear();
        for p in &self.ports {
            if let Some(map) = &p.xsk_map {
                // Frames of the queue pass to the kernel until another
                // socket takes the slot; the socket closing would clear it
                // too.
                let _ = map.remove(map.own_slot(p.queue_id));
            }
        }
        self.ports.clear();
        if self.frames_out > 0 {
            // Frames still point into the UMEMs: keep the memory mapped.
            for u in std::mem::take(&mut self.umems) {
                std::mem::forget(u);
            }
        }
    }
}

impl Driver for AfXdpDriver {
    type Frame = XdpFrame;

    fn port_count(&self) -> usize {
        self.ports.len()
    }

    fn rx_burst(&mut self, port: PortId, out: &mut Vec<XdpFrame>, max: usize) -> usize {
        if !self.pending.is_empty() {
            self.connect_pending(true);
        }
        let Some(p) = self.ports.get_mut(usize::from(port)) else {
            return 0;
        };
        let Some(umem) = self.umems.get_mut(usize::from(p.umem)) else {
            return 0;
        };
        let want = u32::try_from(max).unwrap_or(u32::MAX);
        let mut n = p.rx.available(want);
        if n == 0 && p.busy_poll == BusyPollState::On {
            // Run the queue's NAPI poll here (bounded by the budget and
            // SO_BUSY_POLL), then look again.
            let _ = driver_sys::recv_empty(&p.fd);
            n = p.rx.available(want);
        }
        let mut got = 0usize;
        let mut consumed = 0u32;
        // A chain may reach past `max`: look at everything ready then.
        let mut ready = n;
        let ring_size = p.rx.size();
        while consumed < ready && got < max {
            let packet = loop {
                let packet = chain::take_packet(
                    &p.rx,
                    umem,
                    p.umem,
                    consumed,
                    ready - consumed,
                    ready == ring_size,
                    p.max_frame,
                );
                // A chain cut by `max`: look again at all that is ready.
                let more = match packet {
                    RxPacket::Incomplete => p.rx.available(ring_size),
                    _ => ready,
                };
                if more == ready {
                    break packet;
                }
                ready = more;
            };
            match packet {
                RxPacket::Frame { frame, used } => {
                    consumed += used;
                    if used > 1 {
                        p.stats.rx_chains += 1;
                    }
                    p.stats.rx_frames += 1;
                    p.stats.rx_bytes += u64::from(frame.len);
                    out.push(frame);
                    got += 1;
                }
                RxPacket::TooBig { used } => {
                    consumed += used;
                    p.stats.rx_too_big += 1;
                }
                RxPacket::BadChain { used } => {
                    consumed += used;
                    p.stats.rx_bad_chain += 1;
                }
                RxPacket::BadDesc { used } => {
                    consumed += used;
                    p.stats.rx_ring_errors += 1;
                }
                RxPacket::NoSpan { used } => {
                    consumed += used;
                    p.stats.rx_pool_empty += 1;
                }
                RxPacket::Incomplete => break,
            }
        }
        p.rx.release(consumed);
        // Frames of this worker's flows that arrived on other queues.
        for (_, r) in self.remote.iter_mut().filter(|(rp, _)| *rp == port) {
            if got >= max {
                break;
            }
            got += queues::rx_copy(r, p, umem, out, max - got);
        }
        // Chunks the other workers received on this worker's queue.
        for (_, ring) in self.returns_in.iter().filter(|(u, _)| *u == p.umem) {
            ring.drain(|addr| umem.give_back(addr));
        }
        self.frames_out += got;
        p.refill(umem);
        got
    }

    fn tx_burst(&mut self, port: PortId, frames: &mut Vec<XdpFrame>) -> usize {
        let pi = usize::from(port);
        let Some(p) = self.ports.get_mut(pi) else {
            return 0;
        };
        let pu = usize::from(p.umem);
        let max_frame = p.max_frame;
        if let Some(u) = self.umems.get_mut(pu) {
            p.reclaim(u);
        }
        let mut room = p.tx.free(p.tx.size());
        let mut queued = 0u32;
        let mut taken = 0usize;
        // Frames from other UMEMs are copied; their chunks go back to their
        // own free lists after the loop (two mutable UMEMs at once).
        for f in frames.iter() {
            if f.len > p.max_frame {
                p.stats.tx_too_big += 1;
                taken += 1;
                continue;
            }
            let Some(u) = self.umems.get_mut(pu) else {
                break;
            };
            if chain::descs_for(u.frame_size, f.addr, f.len) > room
                || (usize::from(f.umem) != pu
                    && chain::descs_for(u.frame_size, u64::from(XDP_HEADROOM), f.len) > room)
            {
                break;
            }
            let (addr, len) = if usize::from(f.umem) == pu {
                (f.addr, f.len)
            } else {
                let Some(copy) = u.frame_with(p.umem, f.data()) else {
                    break;
                };
                p.stats.tx_copies += 1;
                // The copy's chunk now belongs to the TX ring.
                (copy.addr, copy.len)
            };
            let descs = chain::push_frame(&mut p.tx, u, addr, len);
            if descs == 0 {
                break;
            }
            room -= descs;
            if descs > 1 {
                p.stats.tx_chains += 1;
            }
            p.stats.tx_frames += 1;
            p.stats.tx_bytes += u64::from(len);
            queued += 1;
            taken += 1;
        }
        p.stats.tx_ring_full += (frames.len() - taken) as u64;
        if queued > 0 {
            p.tx.submit();
        }
        if queued > 0 || p.tx_kick_pending {
            p.kick_tx();
        }
        // Settle the taken frames: same-UMEM frames now belong to the
        // kernel (their chunks come back through the completion ring);
        // too-big and copied ones go back to their free lists.
        for f in frames.drain(..taken) {
            if usize::from(f.umem) == pu && f.len <= max_frame {
                self.frames_out = self.frames_out.saturating_sub(1);
            } else {
                self.free_frame(f);
            }
        }
        taken
    }

    fn release(&mut self, frame: XdpFrame) {
        self.free_frame(frame);
    }

    /// [`AfXdpDriver::wait`] with the configured `poll_timeout_ms`.
    fn wait_idle(&mut self) -> bool {
        self.wait(self.poll_timeout_ms)
    }

    fn wake_on_readable(&mut self, fds: &[std::os::fd::RawFd]) {
        self.poll_set.add_raw(fds);
    }

    /// The driver's [`XdpPortStats`] plus the kernel's `XDP_STATISTICS`
    /// (one syscall per port; an unreadable socket reports zeros).
    /// The sockets on other workers' queues add their own kernel drops (RX
    /// ring full, other drops; the fill ring is the queue owner's, counted
    /// there).
    fn port_counters(&mut self, out: &mut [PortCounters]) {
        for (i, (port, slot)) in self.ports.iter().zip(out).enumerate() {
            let mut kernel = port.kernel_stats().unwrap_or_default();
            for (_, r) in self.remote.iter().filter(|(p, _)| usize::from(*p) == i) {
                if let Ok(k) = sys::xdp_statistics(r.fd.as_fd()) {
                    kernel.rx_ring_full += k.rx_ring_full;
                    kernel.rx_dropped += k.rx_dropped;
                    kernel.rx_invalid_descs += k.rx_invalid_descs;
                }
            }
            *slot = port.stats().counters(&kernel);
        }
    }

    /// Write `rule` into each port's steering maps ([`XdpLink::install`]).
    fn install_steering(&mut self, rule: &SteeringRule) -> io::Result<bool> {
        for link in &self.links {
            link.install(rule).map_err(io::Error::other)?;
        }
        Ok(!self.links.is_empty())
    }

    fn frame_from(&mut self, bytes: &[u8]) -> Option<XdpFrame> {
        let umem = self.ports.first().map_or(0, |p| usize::from(p.umem));
        let f = self.umems.get_mut(umem)?.frame_with(umem as u8, bytes)?;
        self.frames_out += 1;
        Some(f)
    }
}
