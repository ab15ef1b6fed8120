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
//! and summed without further code (one list, in `port_counters!`), and
//! reaches `portico stats` (text and JSON) and the metrics through
//! [`PortCounters::HELP`]: a field needs its help text for an operator.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! port_counters {
    ($($(#[$doc:meta])* $field:ident: $help:literal,)*) => {
        /// The counters of one port, as every driver reports them (one
        /// worker's queue; sum over the workers for the port). A report
        /// without a counter (from a gateway older than the reader) reads
        /// it as 0.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[cfg_attr(feature = "serde", serde(default))]
        pub struct PortCounters {
            $($(#[$doc])* #[doc = $help] pub $field: u64,)*
        }

        impl PortCounters {
            /// Number of fields.
            pub const FIELDS: usize = [$(stringify!($field),)*].len();

            /// Every field's name (as in the JSON report) and its help
            /// text for an operator (the metrics' `# HELP`: what the
            /// counter counts and what to do when it grows), in field
            /// order.
            pub const HELP: [(&'static str, &'static str); Self::FIELDS] =
                [$((stringify!($field), $help),)*];

            /// Every field's value, in the order of [`Self::HELP`].
            pub fn values(&self) -> [u64; Self::FIELDS] {
                [$(self.$field,)*]
            }

            /// The counters of `a` (in the order of [`Self::HELP`]).
            pub fn from_values(a: [u64; Self::FIELDS]) -> Self {
                let mut it = a.into_iter();
                PortCounters { $($field: it.next().unwrap_or(0),)* }
            }
        }
    };
}

port_counters! {
    rx_frames: "Frames received.",
    rx_bytes: "Bytes received.",
    tx_frames: "Frames sent.",
    tx_bytes: "Bytes sent.",
    rx_too_big: "Frames above MTU + Ethernet header (+ one VLAN tag), dropped on \
        receive: a peer's MTU is larger than the port's; align the MTUs.",
    rx_truncated: "Frames the ring truncated (af_packet: snaplen below the frame's \
        length), dropped: the ring's frame size is too small for the link's MTU.",
    rx_pool_empty: "Receive bursts cut short because the worker's frame pool was \
        empty (frames stay in the ring): frames are held elsewhere (TX rings, \
        handoff queues); if it grows with kernel RX drops, enlarge the pool.",
    rx_ring_errors: "Ring metadata or descriptors that pointed outside their \
        memory (never expected; AF_XDP adds the kernel's rx_invalid_descs): report \
        a bug.",
    rx_csum_completed: "Frames received with a partial checksum \
        (TP_STATUS_CSUMNOTREADY) whose TCP/UDP checksum the driver completed.",
    rx_csum_partial_left: "Frames received with a partial checksum that are not \
        TCP/UDP and were left as they were.",
    rx_vlan_restored: "Frames whose VLAN tag the driver put back from the ring's \
        metadata.",
    tx_too_big: "Frames above the port's limit handed to the driver, dropped: a \
        route or MTU mismatch inside the gateway; check the ports' MTUs.",
    /// Frames left unsent because the TX ring was full.
    tx_ring_full: "Frames dropped because the TX ring was full: the link or the \
        kernel does not drain the ring as fast as the worker fills it.",
    tx_send_errors: "Send calls (or device TX) that failed; the frames stay queued \
        and are retried: look at the gateway's log and the interface's state.",
    socket_errors: "Socket errors (e.g. ENETDOWN) cleared while waiting: the \
        interface went down or was reconfigured.",
    /// Frames the kernel (or device) dropped because the RX ring was full
    /// (af_packet `tp_drops`, AF_XDP `rx_ring_full`, DPDK `imissed` +
    /// `rx_nombuf`): the worker did not keep up.
    kernel_rx_drops: "Frames the kernel (or device) dropped because the RX ring \
        was full: the worker did not keep up; add workers or cores, or enlarge \
        the rings.",
    kernel_freezes: "Times the af_packet RX ring froze (every block owned by the \
        worker): the worker did not return blocks in time.",
    /// Frames the kernel dropped for other reasons (AF_XDP `rx_dropped`:
    /// e.g. too big for a UMEM chunk).
    kernel_rx_dropped: "Frames the kernel (or device) dropped for other reasons \
        (AF_XDP rx_dropped: e.g. too big for a UMEM chunk; DPDK rx_errors): check \
        the MTU against the frame size.",
    /// Times the kernel found the fill ring empty (AF_XDP
    /// `rx_fill_ring_empty_descs`; each such frame is lost, counted here
    /// rather than in a drop counter because the kernel counts events).
    kernel_fill_ring_empty: "Times the kernel found an AF_XDP fill ring empty \
        (the frame is lost): the worker does not refill fast enough or its \
        frames are held elsewhere; enlarge the UMEM.",
    rx_gso_frames: "GSO/GRO super-packets received whole (af_packet with gso).",
    rx_offload_bad: "Frames dropped because their offload metadata \
        (virtio_net_hdr) was unusable: an unsupported GSO type; turn gso off on \
        the port if it keeps growing.",
    tx_gso_frames: "Super-packets sent whole, segmented after the driver (by the \
        device or the kernel).",
    /// Multi-buffer packets (AF_XDP `XDP_PKT_CONTD` chains) dropped as
    /// malformed: too many buffers, a bad buffer, or never completed.
    rx_bad_chain: "AF_XDP multi-buffer packets dropped as malformed (too many \
        buffers, a bad buffer, never completed): frames larger than the chain \
        limit arrive; lower the peer's MTU.",
    rx_chains: "AF_XDP multi-buffer packets received (chains reassembled into one \
        frame).",
    tx_chains: "AF_XDP frames sent as multi-buffer chains.",
    tx_copies: "AF_XDP frames copied before sending because they came from \
        another port's UMEM.",
    tx_kicks: "AF_XDP sendto calls made to start transmission (the kernel's \
        need_wakeup).",
    kernel_tx_invalid_descs: "AF_XDP TX descriptors the kernel rejected \
        (XDP_STATISTICS tx_invalid_descs; never expected): report a bug.",
    kernel_tx_ring_empty: "Times the kernel found an AF_XDP TX ring empty \
        (XDP_STATISTICS tx_ring_empty_descs): the normal state of an idle port.",
    /// Frames of this worker's flows received on its sockets on other
    /// workers' queues (AF_XDP: copied out of the shared UMEM).
    rx_other_queues: "AF_XDP frames of this worker's flows received on its socket \
        on another worker's queue (the shared-UMEM cross-queue path: the redirect \
        program steered them to their owner, each costs a copy). Expected with \
        several workers; if it grows towards rx_packets, the NIC's RSS spreads \
        flows unlike the steering: fewer queues than workers, or an RSS \
        indirection table to align.",
    /// Sockets on other workers' queues the kernel refused.
    queue_socket_failures: "AF_XDP sockets on other workers' queues the kernel \
        refused (XDP_SHARED_UMEM join, logged at start): those queues' frames \
        reach their queue's worker and are handed off instead of steered. \
        Non-zero: read the gateway's log for the error; the driver or kernel \
        may lack shared-UMEM support on that interface.",
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
        let mut a = self.values();
        for (x, y) in a.iter_mut().zip(other.values()) {
            *x += y;
        }
        *self = PortCounters::from_values(a);
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
        for (cell, v) in self.values.iter().zip(c.values()) {
            cell.store(v, Ordering::Relaxed);
        }
    }

    pub fn load(&self) -> PortCounters {
        PortCounters::from_values(std::array::from_fn(|i| {
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
