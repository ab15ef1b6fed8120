//! [`XdpPort`]: one socket on one interface queue with its four rings, and
//! the ring work behind the driver's bursts (reclaiming completed TX
//! chunks, topping up the fill ring, kicking TX).

use super::ring::Ring;
use super::umem::Umem;
use super::{AfXdpError, BusyPollState, MAX_TX_KICKS, XdpKernelStats, XdpPortStats, XskMap, sys};
use crate::driver::sys as driver_sys;
use crate::wire::MacAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

/// One socket on one interface queue.
#[derive(Debug)]
pub struct XdpPort {
    pub(super) ifname: String,
    pub(super) ifindex: u32,
    pub(super) queue_id: u32,
    pub(super) mac: MacAddr,
    pub(super) mtu: u32,
    /// Largest frame accepted/sent: MTU + Ethernet header + one tag.
    pub(super) max_frame: u32,
    pub(super) umem: u8,
    pub(super) zero_copy: bool,
    pub(super) need_wakeup: bool,
    /// Bound with `XDP_USE_SG` (own or inherited from the UMEM owner).
    pub(super) multi_buffer: bool,
    /// What the socket got of the busy polling asked for.
    pub(super) busy_poll: BusyPollState,
    /// Frames to keep in the fill ring.
    pub(super) fill_target: u32,
    pub(super) tx_kick_pending: bool,
    pub(super) stats: XdpPortStats,
    pub(super) xsk_map: Option<Arc<XskMap>>,
    // Field order is drop order: unmap the rings before closing the socket.
    pub(super) rx: Ring,
    pub(super) tx: Ring,
    pub(super) fill: Ring,
    pub(super) comp: Ring,
    pub(super) fd: OwnedFd,
}

impl XdpPort {
    pub fn ifname(&self) -> &str {
        &self.ifname
    }
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }
    pub fn queue_id(&self) -> u32 {
        self.queue_id
    }
    pub fn mac(&self) -> MacAddr {
        self.mac
    }
    pub fn mtu(&self) -> u32 {
        self.mtu
    }
    /// The socket runs in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }
    /// Whether the socket busy-polls (or why not).
    pub fn busy_poll(&self) -> BusyPollState {
        self.busy_poll
    }
    /// Whether the socket takes multi-buffer packets (`XDP_USE_SG`).
    pub fn multi_buffer(&self) -> bool {
        self.multi_buffer
    }
    /// Whether the socket was bound with `XDP_USE_NEED_WAKEUP`.
    pub fn need_wakeup(&self) -> bool {
        self.need_wakeup
    }
    /// Index of the UMEM the socket uses (equal for ports sharing one).
    pub fn umem_index(&self) -> usize {
        usize::from(self.umem)
    }
    pub fn stats(&self) -> &XdpPortStats {
        &self.stats
    }

    /// The kernel's counters of the socket (a syscall).
    pub fn kernel_stats(&self) -> Result<XdpKernelStats, AfXdpError> {
        let s =
            sys::xdp_statistics(self.fd.as_fd()).map_err(|source| AfXdpError::SocketOption {
                ifname: self.ifname.clone(),
                option: "XDP_STATISTICS",
                source,
            })?;
        Ok(XdpKernelStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty: s.rx_fill_ring_empty_descs,
            tx_ring_empty: s.tx_ring_empty_descs,
        })
    }

    /// Move completed TX chunks to the free list.
    #[inline]
    pub(super) fn reclaim(&mut self, umem: &mut Umem) {
        let n = self.comp.available(self.comp.size());
        let mut taken = 0;
        while taken < n {
            let Some(addr) = self.comp.peek_addr(taken) else {
                break;
            };
            taken += 1;
            umem.complete(addr);
        }
        self.comp.release(taken);
    }

    /// Top the fill ring up to its target from the free list.
    #[inline]
    pub(super) fn refill(&mut self, umem: &mut Umem) {
        let level = self.fill.outstanding();
        let want = self.fill_target.saturating_sub(level);
        if want == 0 {
            return;
        }
        if (umem.free.len() as u32) < want {
            self.reclaim(umem);
        }
        let n = self.fill.free(want).min(umem.free.len() as u32);
        if n < want && umem.free.is_empty() {
            self.stats.rx_pool_empty += 1;
        }
        for _ in 0..n {
            let Some(addr) = umem.free.pop() else { break };
            if !self.fill.push_addr(addr) {
                umem.free.push(addr);
                break;
            }
        }
        self.fill.submit();
        if self.need_wakeup && self.fill.needs_wakeup() {
            let _ = driver_sys::recv_empty(&self.fd);
        }
    }

    /// Kick the TX path: always in copy mode, in zero-copy mode only when
    /// the kernel asks. Repeats while frames stay queued (copy mode sends
    /// 32 per call), at most [`MAX_TX_KICKS`] times.
    #[inline]
    pub(super) fn kick_tx(&mut self) {
        let needed = !self.zero_copy || !self.need_wakeup || self.tx.needs_wakeup();
        if !needed {
            self.tx_kick_pending = false;
            return;
        }
        for _ in 0..MAX_TX_KICKS {
            self.stats.tx_kicks += 1;
            match driver_sys::send_empty(&self.fd) {
                Ok(()) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS)
                    ) => {}
                Err(_) => {
                    self.stats.tx_send_errors += 1;
                    self.tx_kick_pending = true;
                    return;
                }
            }
            if self.tx.outstanding() == 0 {
                self.tx_kick_pending = false;
                return;
            }
        }
        self.tx_kick_pending = true;
    }
}
