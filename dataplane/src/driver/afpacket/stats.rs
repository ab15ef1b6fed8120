//! The driver's per-port counters ([`PortStats`]), the kernel's socket
//! counters ([`KernelStats`], reset on every read, so accumulated in
//! [`KernelTotals`]), and how both become the common
//! [`PortCounters`](crate::driver::PortCounters).

use crate::driver::PortCounters;

/// Per-port counters kept by the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    /// Frames above MTU + Ethernet header (+ one tag), dropped.
    pub rx_too_big: u64,
    /// Frames the ring truncated (snaplen < len), dropped.
    pub rx_truncated: u64,
    /// `TP_STATUS_CSUMNOTREADY` frames whose L4 checksum we completed.
    pub rx_csum_completed: u64,
    /// `TP_STATUS_CSUMNOTREADY` frames that are not IPv4 TCP/UDP (left as is).
    pub rx_csum_partial_left: u64,
    /// Frames whose VLAN tag was put back from ring metadata.
    pub rx_vlan_restored: u64,
    /// Bursts cut short because the pool was empty (frames stay in the ring).
    pub rx_pool_empty: u64,
    /// Ring metadata that pointed outside its block (should never happen).
    pub rx_ring_errors: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Frames above the port's limit handed to `tx_burst`, dropped.
    pub tx_too_big: u64,
    /// Frames `tx_burst` left with the caller because the ring was full.
    pub tx_ring_full: u64,
    /// `send` calls that failed (the frames stay queued and are retried).
    pub tx_send_errors: u64,
    /// Socket errors (e.g. `ENETDOWN`) cleared while waiting.
    pub socket_errors: u64,
    /// GSO/GRO super-packets received whole (`gso` on).
    pub rx_gso_frames: u64,
    /// Frames whose `virtio_net_hdr` was unusable (an unsupported GSO
    /// type, a header outside the slot), dropped.
    pub rx_offload_bad: u64,
    /// Super-packets sent whole, for the device or the kernel to segment.
    pub tx_gso_frames: u64,
}

/// The kernel's counters of one socket since the previous read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelStats {
    pub packets: u32,
    /// Frames dropped because the RX ring was full.
    pub drops: u32,
    /// Times the ring froze (all blocks owned by user space).
    pub freeze_count: u32,
}

/// The kernel's counters of one socket accumulated over reads (each read of
/// `PACKET_STATISTICS` resets them in the kernel).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct KernelTotals {
    pub(super) drops: u64,
    pub(super) freezes: u64,
}

impl KernelTotals {
    pub(super) fn add(&mut self, read: KernelStats) {
        self.drops += u64::from(read.drops);
        self.freezes += u64::from(read.freeze_count);
    }
}

impl PortStats {
    /// The driver's counters plus the kernel's accumulated ones.
    pub(super) fn counters(&self, kernel: KernelTotals) -> PortCounters {
        PortCounters {
            rx_frames: self.rx_frames,
            rx_bytes: self.rx_bytes,
            tx_frames: self.tx_frames,
            tx_bytes: self.tx_bytes,
            rx_too_big: self.rx_too_big,
            rx_truncated: self.rx_truncated,
            rx_pool_empty: self.rx_pool_empty,
            rx_ring_errors: self.rx_ring_errors,
            rx_csum_completed: self.rx_csum_completed,
            rx_csum_partial_left: self.rx_csum_partial_left,
            rx_vlan_restored: self.rx_vlan_restored,
            tx_too_big: self.tx_too_big,
            tx_ring_full: self.tx_ring_full,
            tx_send_errors: self.tx_send_errors,
            socket_errors: self.socket_errors,
            rx_gso_frames: self.rx_gso_frames,
            rx_offload_bad: self.rx_offload_bad,
            tx_gso_frames: self.tx_gso_frames,
            // `tp_drops`: frames the kernel had no ring slot for.
            kernel_rx_drops: kernel.drops,
            kernel_freezes: kernel.freezes,
            // A packet socket has no other kernel drop counter, nor a
            // fill ring.
            kernel_rx_dropped: 0,
            kernel_fill_ring_empty: 0,
            // No multi-buffer chains, shared UMEMs or AF_XDP rings on a
            // packet socket.
            ..PortCounters::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_reads_accumulate_into_the_port_counters() {
        let stats = PortStats {
            rx_frames: 5,
            rx_bytes: 500,
            tx_ring_full: 2,
            socket_errors: 1,
            ..PortStats::default()
        };
        let mut kernel = KernelTotals::default();
        kernel.add(KernelStats {
            packets: 9,
            drops: 4,
            freeze_count: 1,
        });
        kernel.add(KernelStats {
            packets: 1,
            drops: 1,
            freeze_count: 0,
        });
        let c = stats.counters(kernel);
        assert_eq!(c.rx_frames, 5);
        assert_eq!(c.rx_bytes, 500);
        assert_eq!(c.socket_errors, 1);
        assert_eq!(c.kernel_rx_drops, 5);
        assert_eq!(c.kernel_freezes, 1);
        assert_eq!(c.dropped(), 2 + 5);
    }
}
