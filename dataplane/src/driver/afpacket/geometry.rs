//! Ring geometry: the `PACKET_RX_RING` request of a [`RingConfig`] and the
//! slot rings (V2 RX, TX) in whole blocks: pages, 512 KiB with `gso`.

use super::{AfPacketError, RingConfig, RxMode, port};

/// The `PACKET_RX_RING` request of `ring` for frames of up to `max_frame`
/// bytes, or why it cannot be made (`invalid` names the interface).
pub(super) fn rx_request(
    ring: &RingConfig,
    max_frame: usize,
    gso: bool,
    page: usize,
    invalid: &dyn Fn(String) -> AfPacketError,
) -> Result<libc::tpacket_req3, AfPacketError> {
    let u =
        |v: usize, what: &str| u32::try_from(v).map_err(|_| invalid(format!("{what} too large")));
    match ring.rx_mode {
        RxMode::Frames => {
            if ring.rx_frame_count == 0 {
                return Err(invalid("rx_frame_count is 0".into()));
            }
            let frame_size =
                (port::V2_MAC_OFFSET + max_frame).next_multiple_of(libc::TPACKET_ALIGNMENT);
            slot_request(frame_size, ring.rx_frame_count, gso, page, invalid, "rx")
        }
        RxMode::Blocks => {
            // V3 ignores the frame size except for sanity checks: a
            // multiple of 16 dividing the block evenly enough.
            const RX_REQ_FRAME_SIZE: usize = 2048;
            if ring.rx_block_size == 0 || !ring.rx_block_size.is_multiple_of(page) {
                return Err(invalid(format!(
                    "rx_block_size {} is not a multiple of the page size {page}",
                    ring.rx_block_size
                )));
            }
            // Block header (48) + frame header (48) + alignment slack.
            if ring.rx_block_size < max_frame + 256 || ring.rx_block_size < RX_REQ_FRAME_SIZE {
                return Err(invalid(format!(
                    "rx_block_size {} cannot hold a {max_frame}-byte frame",
                    ring.rx_block_size
                )));
            }
            if ring.rx_block_count == 0 {
                return Err(invalid("rx_block_count is 0".into()));
            }
            Ok(libc::tpacket_req3 {
                tp_block_size: u(ring.rx_block_size, "rx_block_size")?,
                tp_block_nr: u(ring.rx_block_count, "rx_block_count")?,
                tp_frame_size: RX_REQ_FRAME_SIZE as u32,
                tp_frame_nr: u(
                    (ring.rx_block_size / RX_REQ_FRAME_SIZE) * ring.rx_block_count,
                    "rx ring",
                )?,
                tp_retire_blk_tov: ring.rx_block_timeout_ms.max(1),
                tp_sizeof_priv: 0,
                tp_feature_req_word: 0,
            })
        }
    }
}

/// The request of a ring of at least `count` slots of `frame_size` bytes
/// (V2 RX, and TX of either version), in whole blocks.
pub(super) fn slot_request(
    frame_size: usize,
    count: usize,
    gso: bool,
    page: usize,
    invalid: &dyn Fn(String) -> AfPacketError,
    ring: &str,
) -> Result<libc::tpacket_req3, AfPacketError> {
    let u = |v: usize, what: &str| {
        u32::try_from(v).map_err(|_| invalid(format!("{ring} {what} too large")))
    };
    let block_size = block_size_for(frame_size, gso, page);
    let per_block = block_size / frame_size;
    let blocks = count.div_ceil(per_block);
    Ok(libc::tpacket_req3 {
        tp_block_size: u(block_size, "block")?,
        tp_block_nr: u(blocks, "frame count")?,
        tp_frame_size: u(frame_size, "frame size")?,
        tp_frame_nr: u(blocks * per_block, "frame count")?,
        tp_retire_blk_tov: 0,
        tp_sizeof_priv: 0,
        tp_feature_req_word: 0,
    })
}

/// Bytes of a ring block holding slots of `frame_size`: whole pages; with
/// `gso`, [`GSO_BLOCK_BYTES`]. The kernel allocates each block as a
/// power-of-two run of pages (`alloc_pg_vec`), so a 64 KiB slot in a
/// block of its own (17 pages) would cost 128 KiB; 512 KiB blocks hold 7
/// such slots (12 % slack instead of 49 %).
pub(super) fn block_size_for(frame_size: usize, gso: bool, page: usize) -> usize {
    let pages = frame_size.div_ceil(page) * page;
    if gso {
        GSO_BLOCK_BYTES.max(pages)
    } else {
        pages
    }
}

/// Ring block size with `gso` (see [`block_size_for`]).
const GSO_BLOCK_BYTES: usize = 512 << 10;
