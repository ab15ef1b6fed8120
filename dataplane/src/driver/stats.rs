//! The port counters every driver reports in one shape ([`PortCounters`],
//! filled by [`super::Driver::port_counters`]), and the cell a worker
//! publishes them through ([`PortStatsCell`]).
//!
//! Invariants: a driver fills the counters itself, from its own per-port
//! stats and the kernel's or device's counters (accumulating those the
//! kernel resets on read), so every report is a total since the driver
//! opened; a counter a driver does not have stays 0. Counters are read a
//! few times a second (see [`crate::worker::DRIVER_STATS_INTERVAL_MS`]),
//! never per packet. A field added to [`PortCounters`] is stored, loaded
//! and summed without further code (one list, in `port_counters!`).

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! port_counters {
    ($($(#[$doc:meta])* $field:ident,)*) => {
        /// The counters of one port, as every driver reports them (one
        /// worker's queue; sum over the workers for the port). A report
        /// without a counter (from a gateway older than the reader) reads
        /// it as 0.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[cfg_attr(feature = "serde", serde(default))]
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
    /// Frames the kernel (or device) dropped because the RX ring was full
    /// (af_packet `tp_drops`, AF_XDP `rx_ring_full`, DPDK `imissed` +
    /// `rx_nombuf`): the worker did not keep up.
    kernel_rx_drops,
    /// Times the RX ring froze.
    kernel_freezes,
    /// Frames the kernel dropped for other reasons (AF_XDP `rx_dropped`:
    /// e.g. too big for a UMEM chunk).
    kernel_rx_dropped,
    /// Times the kernel found the fill ring empty (AF_XDP
    /// `rx_fill_ring_empty_descs`; each such frame is lost, counted here
    /// rather than in a drop counter because the kernel counts events).
    kernel_fill_ring_empty,
    /// GSO/GRO super-packets received whole (af_packet with `gso`).
    rx_gso_frames,
    /// Frames dropped because their offload metadata (`virtio_net_hdr`)
    /// was unusable.
    rx_offload_bad,
    /// Super-packets sent whole, segmented after the driver.
    tx_gso_frames,
    /// Multi-buffer packets (AF_XDP `XDP_PKT_CONTD` chains) dropped as
    /// malformed: too many buffers, a bad buffer, or never completed.
    rx_bad_chain,
}

impl PortCounters {
    /// Every frame this port lost, for whatever reason.
    pub fn dropped(&self) -> u64 {
        self.rx_too_big
            + self.rx_truncated
            + self.tx_too_big
            + self.tx_ring_full
            + self.kernel_rx_drops
            + self.kernel_rx_dropped
            + self.rx_offload_bad
            + self.rx_bad_chain
    }

    /// The drops of [`PortCounters::dropped`] by cause, kernel ones first:
    /// `(cause, frames)`, every cause listed, zero or not (stable names,
    /// the `cause` label of the metrics).
    pub fn drops_by_cause(&self) -> [(&'static str, u64); 8] {
        [
            ("kernel_rx_ring_full", self.kernel_rx_drops),
            ("kernel_rx_other", self.kernel_rx_dropped),
            ("rx_too_big", self.rx_too_big),
            ("rx_truncated", self.rx_truncated),
            ("tx_too_big", self.tx_too_big),
            ("tx_ring_full", self.tx_ring_full),
            ("rx_offload_bad", self.rx_offload_bad),
            ("rx_bad_chain", self.rx_bad_chain),
        ]
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

/// One worker's published copy of one port's counters: written by the
/// worker thread (relaxed stores, a few times a second), read by the admin
/// thread.
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
        let c = PortCounters {
            rx_frames: 5,
            rx_bytes: 500,
            tx_ring_full: 2,
            socket_errors: 1,
            kernel_rx_drops: 5,
            kernel_freezes: 1,
            ..PortCounters::default()
        };
        let cell = PortStatsCell::default();
        assert_eq!(cell.load(), PortCounters::default());
        cell.store(c);
        assert_eq!(cell.load(), c);
        assert_eq!(c.dropped(), 2 + 5);
        let mut sum = c;
        sum.accumulate(&c);
        assert_eq!(sum.rx_bytes, 1000);
        assert_eq!(sum.kernel_freezes, 2);
        assert_eq!(sum.socket_errors, 2);
        assert_eq!(sum.dropped(), 2 * c.dropped());
    }
}
