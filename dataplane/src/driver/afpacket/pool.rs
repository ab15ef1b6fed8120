//! The worker's frame buffers, in two sizes: `small` buffers hold the
//! largest frame of any port's MTU (every frame without GSO), `big` ones a
//! whole GSO/GRO super-packet ([`GSO_MAX_FRAME`]; only with `gso` on, and
//! far fewer of them: a 64 KiB buffer per frame in flight would cost 32×
//! the memory of the small ones). A frame goes back to the pool its
//! buffer's size says.
//!
//! Invariants: every buffer is allocated in [`Pools::new`]; `pop_for`,
//! `push` and `ready` never allocate (the vectors keep their capacity).

use super::AfPacketFrame;
use crate::packet::Offload;

/// The largest frame a super-packet can be: an IPv4 packet of 65535 bytes
/// (its total length is 16 bits) behind an Ethernet header with one
/// 802.1Q tag. (IPv6 "BIG TCP" jumbograms above 64 KiB are not accepted:
/// the port's `gso_max_size`/`gro_max_size` stay at their 64 KiB default.
/// The pipeline's offsets are 16 bits: a frame above 65 535 bytes — a
/// NIC's GRO can build one — is dropped by parse as `ipv4_bad_length`.)
pub(super) const GSO_MAX_FRAME: usize = 65535 + 18;

#[derive(Debug)]
pub(super) struct Pools {
    pub(super) small: Vec<AfPacketFrame>,
    pub(super) big: Vec<AfPacketFrame>,
    /// Bytes of a small buffer.
    pub(super) small_capacity: usize,
    /// Buffers of each size the pool was made with: (small, big; 0 big
    /// without `gso`).
    totals: (usize, usize),
}

/// The two buffer sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SizeClass {
    Small,
    Big,
}

fn buffers(count: usize, capacity: usize) -> Vec<AfPacketFrame> {
    (0..count)
        .map(|_| AfPacketFrame {
            buf: vec![0u8; capacity].into_boxed_slice(),
            len: 0,
            checksum_verified: false,
            offload: Offload::NONE,
        })
        .collect()
}

impl Pools {
    pub(super) fn new(small: usize, small_capacity: usize, big: usize) -> Self {
        Pools {
            small: buffers(small, small_capacity),
            big: buffers(big, GSO_MAX_FRAME),
            small_capacity,
            totals: (small, big),
        }
    }

    /// The size of buffer that holds `len` bytes (`None`: no buffer does).
    #[inline]
    fn class_for(&self, len: usize) -> Option<SizeClass> {
        if len <= self.small_capacity {
            Some(SizeClass::Small)
        } else if len <= GSO_MAX_FRAME {
            Some(SizeClass::Big)
        } else {
            None
        }
    }

    /// How many buffers of the size that holds `len` bytes the pool was
    /// made with (free or not); 0 for a length no buffer holds.
    pub(super) fn total_for(&self, len: usize) -> usize {
        match self.class_for(len) {
            Some(SizeClass::Small) => self.totals.0,
            Some(SizeClass::Big) => self.totals.1,
            None => 0,
        }
    }

    /// A buffer that holds `len` bytes, if one is free.
    #[inline]
    pub(super) fn pop_for(&mut self, len: usize) -> Option<AfPacketFrame> {
        match self.class_for(len)? {
            SizeClass::Small => self.small.pop(),
            SizeClass::Big => self.big.pop(),
        }
    }

    /// Whether the next frame, whatever its size, finds a buffer: a small
    /// one, and a big one when there are big buffers at all.
    #[inline]
    pub(super) fn ready(&self) -> bool {
        !self.small.is_empty() && (self.totals.1 == 0 || !self.big.is_empty())
    }

    #[inline]
    pub(super) fn push(&mut self, frame: AfPacketFrame) {
        if frame.buf.len() > self.small_capacity {
            self.big.push(frame);
        } else {
            self.small.push(frame);
        }
    }

    /// Free buffers of both sizes.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.small.len() + self.big.len()
    }

    #[cfg(test)]
    pub(super) fn extend(&mut self, frames: impl IntoIterator<Item = AfPacketFrame>) {
        for f in frames {
            self.push(f);
        }
    }
}
