//! The driver's per-port counters ([`XdpPortStats`]), the kernel's socket
//! counters ([`XdpKernelStats`], cumulative since the bind), and how both
//! become the common [`PortCounters`].

use crate::driver::PortCounters;

/// Per-port counters kept by the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpPortStats {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    /// Frames above MTU + Ethernet header (+ one tag), dropped.
    pub rx_too_big: u64,
    /// RX descriptors outside the UMEM or its chunk (never expected).
    pub rx_ring_errors: u64,
    /// Fill-ring top-ups that found the free list empty.
    pub rx_pool_empty: u64,
    /// Multi-buffer packets received (chains reassembled into one frame).
    pub rx_chains: u64,
    /// Chains dropped as malformed: too many buffers, a bad buffer, or
    /// never completed (see `chain.rs`).
    pub rx_bad_chain: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Frames above the port's limit handed to `tx_burst`, dropped.
    pub tx_too_big: u64,
    /// Frames `tx_burst` left with the caller (TX ring full or no chunk
    /// for a copy).
    pub tx_ring_full: u64,
    /// Frames copied because they came from another UMEM.
    pub tx_copies: u64,
    /// Frames sent as multi-buffer chains.
    pub tx_chains: u64,
    /// `sendto` kicks made, and the ones that failed with something other
    /// than `EAGAIN`/`EBUSY`/`ENOBUFS` (the ring is retried later).
    pub tx_kicks: u64,
    pub tx_send_errors: u64,
    /// Socket errors seen while waiting.
    pub socket_errors: u64,
    /// Frames of this worker's flows received on its sockets on other
    /// workers' queues (copied out of their UMEM; `queues.rs`).
    pub rx_other_queues: u64,
    /// Sockets on other workers' queues the kernel refused: their frames
    /// reach the queue's own worker and are handed off.
    pub queue_socket_failures: u64,
}

/// The kernel's counters of one socket (`XDP_STATISTICS`, cumulative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpKernelStats {
    /// Dropped for other reasons (e.g. too big for a chunk).
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    /// Dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty.
    pub rx_fill_ring_empty: u64,
    pub tx_ring_empty: u64,
}

impl XdpPortStats {
    /// The common port counters: the driver's own plus the kernel's (which
    /// `XDP_STATISTICS` reports cumulatively: nothing to accumulate).
    pub(super) fn counters(&self, kernel: &XdpKernelStats) -> PortCounters {
        PortCounters {
            rx_frames: self.rx_frames,
            rx_bytes: self.rx_bytes,
            tx_frames: self.tx_frames,
            tx_bytes: self.tx_bytes,
            rx_too_big: self.rx_too_big,
            rx_pool_empty: self.rx_pool_empty,
            rx_ring_errors: self.rx_ring_errors + kernel.rx_invalid_descs,
            tx_too_big: self.tx_too_big,
            tx_ring_full: self.tx_ring_full,
            tx_send_errors: self.tx_send_errors,
            socket_errors: self.socket_errors,
            rx_bad_chain: self.rx_bad_chain,
            kernel_rx_drops: kernel.rx_ring_full,
            kernel_rx_dropped: kernel.rx_dropped,
            kernel_fill_ring_empty: kernel.rx_fill_ring_empty,
            rx_chains: self.rx_chains,
            tx_chains: self.tx_chains,
            tx_copies: self.tx_copies,
            tx_kicks: self.tx_kicks,
            kernel_tx_invalid_descs: kernel.tx_invalid_descs,
            kernel_tx_ring_empty: kernel.tx_ring_empty,
            rx_other_queues: self.rx_other_queues,
            queue_socket_failures: self.queue_socket_failures,
            // af_packet's only: ring truncation, partial checksums, VLAN
            // tags from metadata, ring freezes, GSO.
            ..PortCounters::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every driver counter reaches the common counters (and so `portico
    /// stats` and the metrics), the cross-queue ones included.
    #[test]
    fn every_driver_counter_reaches_the_port_counters() {
        let s = XdpPortStats {
            rx_chains: 1,
            tx_chains: 2,
            tx_copies: 3,
            tx_kicks: 4,
            rx_other_queues: 5,
            queue_socket_failures: 6,
            ..XdpPortStats::default()
        };
        let k = XdpKernelStats {
            tx_invalid_descs: 7,
            tx_ring_empty: 8,
            ..XdpKernelStats::default()
        };
        let c = s.counters(&k);
        assert_eq!(
            (c.rx_chains, c.tx_chains, c.tx_copies, c.tx_kicks),
            (1, 2, 3, 4)
        );
        assert_eq!((c.rx_other_queues, c.queue_socket_failures), (5, 6));
        assert_eq!((c.kernel_tx_invalid_descs, c.kernel_tx_ring_empty), (7, 8));
        assert_eq!(c.dropped(), 0, "none of them is a drop");
    }

    #[test]
    fn kernel_drops_and_invalid_descriptors_count_in_the_port_counters() {
        let s = XdpPortStats {
            rx_frames: 3,
            rx_bytes: 300,
            rx_ring_errors: 1,
            tx_copies: 7,
            tx_kicks: 9,
            ..XdpPortStats::default()
        };
        let k = XdpKernelStats {
            rx_dropped: 2,
            rx_ring_full: 4,
            rx_invalid_descs: 5,
            rx_fill_ring_empty: 3,
            ..XdpKernelStats::default()
        };
        let c = s.counters(&k);
        assert_eq!(c.rx_frames, 3);
        assert_eq!(c.rx_bytes, 300);
        assert_eq!(c.rx_ring_errors, 1 + 5);
        assert_eq!((c.kernel_rx_drops, c.kernel_rx_dropped), (4, 2));
        assert_eq!(c.kernel_fill_ring_empty, 3);
        assert_eq!(c.dropped(), 6);
        let causes = c.drops_by_cause();
        assert_eq!(
            causes[..2],
            [("kernel_rx_ring_full", 4), ("kernel_rx_other", 2)]
        );
        assert_eq!(causes.iter().map(|(_, n)| n).sum::<u64>(), c.dropped());
        assert_eq!(c.kernel_freezes, 0, "AF_XDP has no ring freezes");
    }
}
