//! `[dataplane.afpacket]`: the af_packet driver's RX ring mode, the
//! ring sizes and GSO/GRO pass-through (`gso`, which lowers the slot-count
//! defaults: each slot then holds 64 KiB). A size of the other RX mode is a problem (it would be
//! silently unused), as is a size out of its range; every problem is named.

use super::Validator;
use super::limits::{
    AFPACKET_BLOCK_COUNT_RANGE, AFPACKET_BLOCK_SIZE_RANGE, AFPACKET_BLOCK_TIMEOUT_MS_RANGE,
    AFPACKET_FRAME_COUNT_RANGE,
};
use crate::plan::AfpacketPlan;
use crate::schema::{AfpacketRxRing, AfpacketSection};
use std::ops::RangeInclusive;

/// The defaults of `[dataplane.afpacket]` (the dataplane's own defaults).
const DEFAULT_RX_FRAME_COUNT: u64 = 4096;
const DEFAULT_RX_BLOCK_SIZE: u64 = 1 << 18;
const DEFAULT_RX_BLOCK_COUNT: u64 = 16;
const DEFAULT_RX_BLOCK_TIMEOUT_MS: u64 = 1;
const DEFAULT_TX_FRAME_COUNT: u64 = 1024;
/// With `gso` every slot holds a 64 KiB super-packet (see the dataplane's
/// af_packet driver): fewer of them.
const DEFAULT_GSO_FRAME_COUNT: u64 = 256;
/// Block sizes are whole pages (the smallest page size Linux has).
const PAGE_BYTES: u64 = 4096;

impl Validator {
    /// `[dataplane.afpacket]`.
    pub(super) fn afpacket(&mut self, a: &AfpacketSection) -> AfpacketPlan {
        let frames = a.rx_ring == AfpacketRxRing::Frames;
        let mut field = |key: &str,
                         value: Option<u64>,
                         default: u64,
                         range: RangeInclusive<u64>,
                         used: bool| {
            let path = format!("dataplane.afpacket.{key}");
            match value {
                Some(_) if !used => {
                    let mode = if frames { "frames" } else { "blocks" };
                    self.problem(path, format!("is not used with rx_ring = \"{mode}\""));
                    default as u32
                }
                Some(v) => self.ranged(&path, v, range).map_or(0, |v| v as u32),
                None => default as u32,
            }
        };
        let (rx_default, tx_default) = if a.gso {
            (DEFAULT_GSO_FRAME_COUNT, DEFAULT_GSO_FRAME_COUNT)
        } else {
            (DEFAULT_RX_FRAME_COUNT, DEFAULT_TX_FRAME_COUNT)
        };
        let rx_frame_count = field(
            "rx_frame_count",
            a.rx_frame_count,
            rx_default,
            AFPACKET_FRAME_COUNT_RANGE,
            frames,
        );
        let rx_block_size = field(
            "rx_block_size",
            a.rx_block_size,
            DEFAULT_RX_BLOCK_SIZE,
            AFPACKET_BLOCK_SIZE_RANGE,
            !frames,
        );
        let rx_block_count = field(
            "rx_block_count",
            a.rx_block_count,
            DEFAULT_RX_BLOCK_COUNT,
            AFPACKET_BLOCK_COUNT_RANGE,
            !frames,
        );
        let rx_block_timeout_ms = field(
            "rx_block_timeout_ms",
            a.rx_block_timeout_ms,
            DEFAULT_RX_BLOCK_TIMEOUT_MS,
            AFPACKET_BLOCK_TIMEOUT_MS_RANGE,
            !frames,
        );
        let tx_frame_count = field(
            "tx_frame_count",
            a.tx_frame_count,
            tx_default,
            AFPACKET_FRAME_COUNT_RANGE,
            true,
        );
        if !u64::from(rx_block_size).is_multiple_of(PAGE_BYTES) {
            self.problem(
                "dataplane.afpacket.rx_block_size",
                format!("{rx_block_size} is not a multiple of {PAGE_BYTES} (whole pages)"),
            );
        }
        AfpacketPlan {
            rx_ring: a.rx_ring,
            rx_frame_count,
            rx_block_size,
            rx_block_count,
            rx_block_timeout_ms,
            tx_frame_count,
            gso: a.gso,
            tx_path: a.tx_path,
            rx_path: a.rx_path,
        }
    }
}
