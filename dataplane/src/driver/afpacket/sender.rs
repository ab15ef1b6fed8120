//! The [`TxPath::Sendmsg`](super::TxPath::Sendmsg) path: a second packet
//! socket per port that only sends, one `sendmmsg(2)` per burst.
//!
//! Why (measured on veth, bench/RESULTS.md "GSO on veth: sendmmsg instead
//! of the TX ring"): a TX ring's skb carries the ring's pages as zero-copy
//! fragments, which a veth must copy (`skb_copy_ubufs`) before the peer's
//! stack may keep them — for a 64 KiB super-packet, a second copy of
//! every byte. `packet_snd` (the path of a socket without a TX ring: the
//! kernel takes `tpacket_snd` whenever one is mapped, so this must be a
//! socket of its own) copies the frame once into ordinary pages, which
//! the veth passes on as they are.
//!
//! The socket is bound to the port with protocol 0 (it receives nothing),
//! takes `virtio_net_hdr`s with `gso` (`PACKET_VNET_HDR`: each message is
//! the header, then the frame, gathered from the pool buffer without a
//! copy of ours), bypasses the qdisc when the driver does, and has a send
//! buffer for a few bursts of super-packets (veth releases it at its
//! `xmit`, a NIC at TX completion).
//!
//! Invariants: a frame is taken (sent, or dropped and counted) or left at
//! the front of the caller's batch, in order; `send` allocates nothing and
//! makes one `sendmmsg` per [`BATCH`] frames (plus one per frame the
//! kernel refused, to step over it).

use super::pool::{GSO_MAX_FRAME, Pools};
use super::port::{tx_fits, vnet_header};
use super::{AfPacketFrame, PortStats, socket};
use crate::driver::{Frame, sys};
use crate::wire::vnet;
use std::io;
use std::os::fd::OwnedFd;

/// Frames per `sendmmsg`.
pub(super) const BATCH: usize = 64;

/// `SO_SNDBUFFORCE`: room for two batches of super-packets in flight.
const SNDBUF_BYTES: libc::c_int = (2 * BATCH * (GSO_MAX_FRAME + 1024)) as libc::c_int;

/// A port's send-only socket and its preallocated batch.
#[derive(Debug)]
pub(super) struct MsgSender {
    fd: OwnedFd,
    batch: sys::SendBatch,
    /// The `virtio_net_hdr` of each frame of the batch being sent.
    headers: Vec<[u8; vnet::HEADER_LEN]>,
    /// `PACKET_VNET_HDR` is on: each message starts with a header.
    gso: bool,
}

impl MsgSender {
    /// Open the socket on `ifindex`; the error names the failed step.
    pub(super) fn open(
        ifindex: u32,
        gso: bool,
        qdisc_bypass: bool,
    ) -> Result<Self, (&'static str, io::Error)> {
        let fd = socket::packet_socket().map_err(|e| ("socket", e))?;
        let one: libc::c_int = 1;
        if gso {
            sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)
                .map_err(|e| ("PACKET_VNET_HDR", e))?;
        }
        if qdisc_bypass {
            sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &one)
                .map_err(|e| ("PACKET_QDISC_BYPASS", e))?;
        }
        // FORCE needs CAP_NET_ADMIN (which opening the ports needs anyway);
        // without it the kernel caps SO_SNDBUF at wmem_max.
        if sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &SNDBUF_BYTES).is_err() {
            sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &SNDBUF_BYTES)
                .map_err(|e| ("SO_SNDBUF", e))?;
        }
        socket::bind_packet(&fd, ifindex, 0).map_err(|e| ("bind", e))?;
        Ok(MsgSender {
            fd,
            batch: sys::SendBatch::new(BATCH),
            headers: vec![[0; vnet::HEADER_LEN]; BATCH],
            gso,
        })
    }

    /// Send frames from the front of `frames`; returns how many it took
    /// (sent, or dropped as too big or refused by the kernel, counted).
    /// Frames it took go back to `pool`; the rest (send buffer full) stay.
    pub(super) fn send(
        &mut self,
        mtu: u32,
        stats: &mut PortStats,
        pool: &mut Pools,
        frames: &mut Vec<AfPacketFrame>,
    ) -> usize {
        let mut taken = 0;
        while let Some(rest) = frames.get(taken..).filter(|r| !r.is_empty()) {
            let fits = |f: &AfPacketFrame| tx_fits(f, mtu, self.gso, GSO_MAX_FRAME);
            if !fits(&rest[0]) {
                stats.tx_too_big += 1;
                taken += 1;
                continue;
            }
            let run = rest.iter().take(BATCH).take_while(|f| fits(f)).count();
            let vnet_len = if self.gso { vnet::HEADER_LEN } else { 0 };
            for (h, f) in self.headers.iter_mut().zip(&rest[..run]) {
                if self.gso {
                    *h = vnet_header(&f.offload, f.data(), 0);
                }
            }
            let messages = self
                .headers
                .iter()
                .zip(&rest[..run])
                .map(|(h, f)| [&h[..vnet_len], f.data()]);
            match self.batch.send(&self.fd, messages) {
                Ok(sent) if sent > 0 => {
                    for f in &rest[..sent.min(run)] {
                        stats.tx_frames += 1;
                        stats.tx_bytes += f.data().len() as u64;
                        stats.tx_gso_frames += u64::from(self.gso && f.offload.is_gso());
                    }
                    taken += sent.min(run);
                }
                Ok(_) => break,
                // The send buffer is full: the caller keeps the rest.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    // Refused (or dropped by the device): step over it.
                    stats.tx_send_errors += 1;
                    taken += 1;
                }
            }
        }
        for frame in frames.drain(..taken) {
            pool.push(frame);
        }
        taken
    }
}
