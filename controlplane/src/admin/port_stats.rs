//! A port's driver counters as the admin reports show them, and the cell
//! a worker publishes them in for the admin thread.

use dataplane::driver::afpacket::{KernelStats, PortStats};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! port_counters {
    ($($(#[$doc:meta])* $field:ident,)*) => {
        /// Driver counters of a port (af_packet [`PortStats`] plus the
        /// kernel's socket counters, accumulated).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct PortCounters {
            $($(#[$doc])* pub $field: u64,)*
        }

        impl PortCounters {
            /// Number of fields.
            pub const FIELDS: usize = [$(stringify!($field),)*].len();

            fn to_array(self) -> [u64; Self::FIELDS] {
                [$(self.$field,)*]
            }

            fn from_array(a: [u64; Self::FIELDS]) -> Self {
                let mut it = a.into_iter();
                PortCounters { $($field: it.next().unwrap_or(0),)* }
            }
        }
    };
}

port_counters! {
    rx_frames,
    rx_bytes,
    tx_frames,
    tx_bytes,
    /// Frames above MTU + Ethernet header, dropped on receive.
    rx_too_big,
    /// Frames the ring truncated, dropped.
    rx_truncated,
    /// Bursts cut short by an empty frame pool.
    rx_pool_empty,
    rx_ring_errors,
    rx_csum_completed,
    rx_csum_partial_left,
    rx_vlan_restored,
    tx_too_big,
    /// Frames left unsent because the TX ring was full.
    tx_ring_full,
    tx_send_errors,
    socket_errors,
    /// Frames the kernel dropped because the RX ring was full.
    kernel_rx_drops,
    /// Times the RX ring froze.
    kernel_freezes,
}

impl PortCounters {
    /// The driver's counters plus the kernel's accumulated ones.
    pub fn new(s: &PortStats, kernel: KernelTotals) -> Self {
        PortCounters {
            rx_frames: s.rx_frames,
            rx_bytes: s.rx_bytes,
            tx_frames: s.tx_frames,
            tx_bytes: s.tx_bytes,
            rx_too_big: s.rx_too_big,
            rx_truncated: s.rx_truncated,
            rx_pool_empty: s.rx_pool_empty,
            rx_ring_errors: s.rx_ring_errors,
            rx_csum_completed: s.rx_csum_completed,
            rx_csum_partial_left: s.rx_csum_partial_left,
            rx_vlan_restored: s.rx_vlan_restored,
            tx_too_big: s.tx_too_big,
            tx_ring_full: s.tx_ring_full,
            tx_send_errors: s.tx_send_errors,
            socket_errors: s.socket_errors,
            kernel_rx_drops: kernel.drops,
            kernel_freezes: kernel.freezes,
        }
    }

    /// Every frame this port lost, for whatever reason.
    pub fn dropped(&self) -> u64 {
        self.rx_too_big
            + self.rx_truncated
            + self.tx_too_big
            + self.tx_ring_full
            + self.kernel_rx_drops
    }

    /// Field-wise sum.
    pub fn accumulate(&mut self, other: &PortCounters) {
        let mut a = self.to_array();
        for (x, y) in a.iter_mut().zip(other.to_array()) {
            *x += y;
        }
        *self = PortCounters::from_array(a);
    }
}

/// The kernel's socket counters accumulated over reads (each read of
/// `PACKET_STATISTICS` resets them in the kernel).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelTotals {
    pub drops: u64,
    pub freezes: u64,
}

impl KernelTotals {
    pub fn add(&mut self, read: KernelStats) {
        self.drops += u64::from(read.drops);
        self.freezes += u64::from(read.freeze_count);
    }
}

/// One worker's published copy of one port's driver counters: written by
/// the worker thread (relaxed stores, a few times a second), read by the
/// admin thread.
#[derive(Debug)]
pub struct PortStatsCell {
    values: [AtomicU64; PortCounters::FIELDS],
}

impl Default for PortStatsCell {
    fn default() -> Self {
        PortStatsCell {
            values: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl PortStatsCell {
    pub fn store(&self, c: PortCounters) {
        for (cell, v) in self.values.iter().zip(c.to_array()) {
            cell.store(v, Ordering::Relaxed);
        }
    }

    pub fn load(&self) -> PortCounters {
        PortCounters::from_array(std::array::from_fn(|i| {
            self.values[i].load(Ordering::Relaxed)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_cells_round_trip_and_sum() {
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
        let c = PortCounters::new(&stats, kernel);
        let cell = PortStatsCell::default();
        cell.store(c);
        assert_eq!(cell.load(), c);
        assert_eq!(c.kernel_rx_drops, 5);
        assert_eq!(c.dropped(), 2 + 5);
        let mut sum = c;
        sum.accumulate(&c);
        assert_eq!(sum.rx_bytes, 1000);
        assert_eq!(sum.kernel_freezes, 2);
        assert_eq!(sum.socket_errors, 2);
    }
}
