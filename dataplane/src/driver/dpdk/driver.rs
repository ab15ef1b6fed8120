//! One worker's queues on every port: [`DpdkDriver`], the [`Driver`] of a
//! DPDK worker, and its per-port counters.

use super::MAX_BURST;
use super::ports::DpdkPorts;
use super::sys::{self, DpdkFrame, Mempool};
use crate::driver::{Driver, PortCounters};
use crate::packet::PortId;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Per-port counters one driver keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverPortStats {
    pub rx_frames: u64,
    /// Chained (multi-segment) mbufs, freed unseen.
    pub rx_multiseg_dropped: u64,
    pub tx_frames: u64,
    /// Frames `tx_burst` left with the caller (TX ring full).
    pub tx_ring_full: u64,
    /// `frame_from` found the pool empty.
    pub pool_empty: u64,
}

impl DriverPortStats {
    /// The common port counters: this driver's own, plus (`device`, given
    /// to worker 0 only, since `rte_eth_stats` are per port, not per queue)
    /// the device's byte counts and drops.
    fn counters(&self, device: Option<&super::DpdkPortStats>) -> PortCounters {
        let mut c = PortCounters {
            rx_frames: self.rx_frames,
            tx_frames: self.tx_frames,
            tx_ring_full: self.tx_ring_full,
            rx_too_big: self.rx_multiseg_dropped,
            rx_pool_empty: self.pool_empty,
            ..PortCounters::default()
        };
        if let Some(dev) = device {
            c.rx_bytes = dev.rx_bytes;
            c.tx_bytes = dev.tx_bytes;
            c.kernel_rx_drops = dev.rx_missed + dev.rx_nombuf;
            c.kernel_rx_dropped = dev.rx_errors;
            c.tx_send_errors = dev.tx_errors;
        }
        c
    }
}

/// One worker's queues on every port.
#[derive(Debug)]
pub struct DpdkDriver {
    port_ids: Vec<u16>,
    queue: u16,
    pool: Mempool,
    stats: Vec<DriverPortStats>,
    worker: usize,
    registered_lcore: bool,
    shared: Arc<DpdkPorts>,
    /// The host path's TAP queues: DPDK ports have no descriptors, so the
    /// idle wait looks at these (see [`Driver::wake_on_readable`]).
    wake: crate::driver::sys::PollSet,
    /// Not `Send`/`Sync`: the queues are polled, and the lcore registration
    /// undone, on the thread that took them (module invariant).
    _one_thread: PhantomData<*const ()>,
}

impl DpdkDriver {
    /// Worker `worker`'s driver over `port_ids`' queue `worker`, on the
    /// calling thread (registered as a non-EAL lcore). `DpdkPorts::driver`
    /// marked the queues taken.
    pub(super) fn new(
        shared: Arc<DpdkPorts>,
        worker: usize,
        port_ids: Vec<u16>,
        pool: Mempool,
    ) -> Self {
        DpdkDriver {
            stats: vec![DriverPortStats::default(); port_ids.len()],
            port_ids,
            queue: worker as u16,
            pool,
            worker,
            registered_lcore: sys::register_thread(),
            wake: crate::driver::sys::PollSet::new(std::iter::empty()),
            shared,
            _one_thread: PhantomData,
        }
    }

    pub fn ports(&self) -> &Arc<DpdkPorts> {
        &self.shared
    }

    pub fn worker(&self) -> usize {
        self.worker
    }

    /// This driver's counters of port `port`.
    pub fn stats(&self, port: PortId) -> Option<&DriverPortStats> {
        self.stats.get(usize::from(port))
    }

    /// The thread got its own lcore id (and so a mempool cache).
    pub fn lcore_registered(&self) -> bool {
        self.registered_lcore
    }
}

impl Drop for DpdkDriver {
    fn drop(&mut self) {
        if self.registered_lcore {
            sys::unregister_thread();
        }
        if let Some(flag) = self.shared.taken.get(self.worker) {
            flag.store(false, Ordering::Release);
        }
    }
}

impl Driver for DpdkDriver {
    type Frame = DpdkFrame;

    fn port_count(&self) -> usize {
        self.port_ids.len()
    }

    fn rx_burst(&mut self, port: PortId, out: &mut Vec<DpdkFrame>, max: usize) -> usize {
        let Some(&port_id) = self.port_ids.get(usize::from(port)) else {
            return 0;
        };
        let (got, multiseg) = sys::rx_burst(port_id, self.queue, out, max.min(MAX_BURST));
        if let Some(s) = self.stats.get_mut(usize::from(port)) {
            s.rx_frames += got as u64;
            s.rx_multiseg_dropped += multiseg;
        }
        got
    }

    fn tx_burst(&mut self, port: PortId, frames: &mut Vec<DpdkFrame>) -> usize {
        let Some(&port_id) = self.port_ids.get(usize::from(port)) else {
            return 0;
        };
        let sent = sys::tx_burst(port_id, self.queue, frames);
        if let Some(s) = self.stats.get_mut(usize::from(port)) {
            s.tx_frames += sent as u64;
            s.tx_ring_full += frames.len() as u64;
        }
        sent
    }

    fn release(&mut self, frame: DpdkFrame) {
        sys::mbuf_free(frame);
    }

    fn frame_from(&mut self, bytes: &[u8]) -> Option<DpdkFrame> {
        let frame = sys::frame_from(self.pool, bytes);
        if frame.is_none()
            && u16::try_from(bytes.len()).is_ok()
            && let Some(s) = self.stats.first_mut()
        {
            s.pool_empty += 1;
        }
        frame
    }

    /// Poll-mode devices have nothing to sleep on: sleep the configured
    /// idle time (`idle_sleep_us`).
    fn wait_idle(&mut self) -> bool {
        // A frame the kernel already wrote to the host path ends the wait
        // at once; one written during the sleep waits as long as a port's.
        if !self.wake.is_empty() && self.wake.wait(0, |_| {}) {
            return true;
        }
        std::thread::sleep(self.shared.idle_sleep);
        false
    }

    fn wake_on_readable(&mut self, fds: &[std::os::fd::RawFd]) {
        self.wake.add_raw(fds);
    }

    /// This driver's counters of each port; worker 0 adds the device's
    /// (`rte_eth_stats`: per port, not per queue).
    fn port_counters(&mut self, out: &mut [PortCounters]) {
        for (port, slot) in out.iter_mut().enumerate().take(self.port_ids.len()) {
            let Some(s) = self.stats.get(port) else {
                continue;
            };
            let device = if self.worker == 0 {
                self.shared.port_stats(port)
            } else {
                None
            };
            *slot = s.counters(device.as_ref());
        }
    }
}
