//! UMEM memory: [`Umem`], one anonymous mapping cut into chunks with its
//! free list, plus (with multi-buffer, see `chain.rs`) *spans* of
//! consecutive chunks after them, and [`XdpFrame`], a frame in one chunk
//! or one span.
//!
//! Invariants: every chunk and span is in exactly one place (a free list,
//! a fill ring (chunks only), the kernel, a completion ring or one frame);
//! `give_back` never grows a free list beyond its capacity (a duplicate
//! from a corrupt ring is dropped instead of allocating); a frame's bytes
//! never cross its chunk or span. Spans never enter the fill ring: the
//! kernel receives into chunks only, and a multi-buffer packet is copied
//! into a span to be contiguous for the pipeline.

use super::sys::{Chunk, SharedRegion};
use super::{AfXdpError, XDP_HEADROOM, XdpRingConfig};
use crate::driver::Frame;
use crate::driver::sys::Region;
use std::sync::Arc;

/// A frame in a UMEM chunk.
#[derive(Debug)]
pub struct XdpFrame {
    pub(super) chunk: Chunk,
    /// UMEM address of the first byte.
    pub(super) addr: u64,
    pub(super) len: u32,
    pub(super) umem: u8,
}

impl Frame for XdpFrame {
    #[inline]
    fn data(&self) -> &[u8] {
        self.chunk.bytes(self.len as usize)
    }
    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        self.chunk.bytes_mut(self.len as usize)
    }
    #[inline]
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(u32::try_from(len).unwrap_or(u32::MAX));
    }
    /// Into the chunk's tailroom: a frame starts at the XDP headroom of its
    /// chunk and may use the rest of it (the TX path still refuses frames
    /// above the port's largest frame).
    #[inline]
    fn extend(&mut self, len: usize) -> bool {
        match u32::try_from(len) {
            Ok(l) if len <= self.chunk.cap() => {
                self.len = self.len.max(l);
                true
            }
            _ => false,
        }
    }
}

/// A UMEM: the mapping, its free chunks (base addresses) and its spans.
#[derive(Debug)]
pub(super) struct Umem {
    /// Shared with the workers that receive into it on other sockets.
    pub(super) map: Arc<SharedRegion>,
    pub(super) frame_size: u32,
    pub(super) free: Vec<u64>,
    pub(super) spans: Spans,
}

/// Multi-buffer spans: `count` runs of `chunks` consecutive chunks, from
/// UMEM offset `start` (after the chunks) to the end of the mapping. A
/// span sent as several TX descriptors comes back through the completion
/// ring once per descriptor: `pending` counts the ones still out.
#[derive(Debug, Default)]
pub(super) struct Spans {
    pub(super) start: u64,
    /// Bytes per span (0: no spans).
    pub(super) bytes: u64,
    pub(super) free: Vec<u64>,
    pending: Vec<u8>,
}

impl Umem {
    /// `rings.umem_frames` chunks, then `span_count` spans of `span_chunks`
    /// chunks each (none when either is 0).
    pub(super) fn new(
        ifname: &str,
        rings: &XdpRingConfig,
        span_chunks: u32,
        span_count: u32,
    ) -> Result<Umem, AfXdpError> {
        let (span_chunks, span_count) = if span_chunks == 0 || span_count == 0 {
            (0, 0)
        } else {
            (span_chunks, span_count)
        };
        let chunk_bytes = rings.frame_size as usize;
        let chunks = rings.umem_frames as usize + span_chunks as usize * span_count as usize;
        let len = chunks * chunk_bytes;
        let map = Region::anonymous(len).map_err(|source| AfXdpError::Mmap {
            ifname: ifname.to_string(),
            what: "UMEM",
            len_bytes: len,
            source,
        })?;
        let free = (0..u64::from(rings.umem_frames))
            .rev()
            .map(|i| i * u64::from(rings.frame_size))
            .collect();
        let start = u64::from(rings.umem_frames) * u64::from(rings.frame_size);
        let bytes = u64::from(span_chunks) * u64::from(rings.frame_size);
        let spans = Spans {
            start,
            bytes,
            free: (0..u64::from(span_count))
                .rev()
                .map(|i| start + i * bytes)
                .collect(),
            pending: vec![0; span_count as usize],
        };
        Ok(Umem {
            map: Arc::new(SharedRegion(map)),
            frame_size: rings.frame_size,
            free,
            spans,
        })
    }

    /// The span index of a UMEM address, if it lies in a span.
    #[inline]
    fn span_of(&self, addr: u64) -> Option<usize> {
        if self.spans.bytes == 0 || addr < self.spans.start || addr >= self.map.len() as u64 {
            return None;
        }
        usize::try_from((addr - self.spans.start) / self.spans.bytes).ok()
    }

    /// The base and size of the chunk or span holding `addr`.
    #[inline]
    fn region(&self, addr: u64) -> (u64, u64) {
        match self.span_of(addr) {
            Some(i) => (
                self.spans.start + i as u64 * self.spans.bytes,
                self.spans.bytes,
            ),
            None => {
                let size = u64::from(self.frame_size);
                (addr - addr % size, size)
            }
        }
    }

    /// Put the chunk or span of `addr` back on its free list. A list never
    /// grows beyond its capacity (every chunk is in one place; a corrupt
    /// duplicate from the kernel is dropped rather than allocating).
    #[inline]
    pub(super) fn give_back(&mut self, addr: u64) {
        if addr >= self.map.len() as u64 {
            return;
        }
        let (base, _) = self.region(addr);
        let list = if self.span_of(addr).is_some() {
            &mut self.spans.free
        } else {
            &mut self.free
        };
        if list.len() < list.capacity() {
            list.push(base);
        }
    }

    /// A TX descriptor at `addr` completed (completion ring): a chunk goes
    /// back at once, a span when its last outstanding descriptor is done.
    #[inline]
    pub(super) fn complete(&mut self, addr: u64) {
        if let Some(i) = self.span_of(addr)
            && let Some(p) = self.spans.pending.get_mut(i)
            && *p > 1
        {
            *p -= 1;
            return;
        }
        if let Some(i) = self.span_of(addr)
            && let Some(p) = self.spans.pending.get_mut(i)
        {
            *p = 0;
        }
        self.give_back(addr);
    }

    /// Record that the span of `addr` went out as `descs` TX descriptors.
    #[inline]
    pub(super) fn span_sent(&mut self, addr: u64, descs: u8) {
        if let Some(i) = self.span_of(addr)
            && let Some(p) = self.spans.pending.get_mut(i)
        {
            *p = descs;
        }
    }

    /// Whether `addr` lies in a span.
    #[inline]
    pub(super) fn in_span(&self, addr: u64) -> bool {
        self.span_of(addr).is_some()
    }

    /// A frame over `len` bytes at `addr` (which must not cross its chunk
    /// or span).
    #[inline]
    pub(super) fn frame(&self, index: u8, addr: u64, len: u32) -> Option<XdpFrame> {
        let (base, size) = self.region(addr);
        let cap = size - (addr - base);
        if u64::from(len) > cap {
            return None;
        }
        let chunk = Chunk::new(&self.map, usize::try_from(addr).ok()?, cap as usize)?;
        Some(XdpFrame {
            chunk,
            addr,
            len,
            umem: index,
        })
    }

    /// A free chunk, or a span when `len` bytes do not fit a chunk, with a
    /// frame of `len` bytes at the XDP headroom (contents: whatever the
    /// buffer held).
    #[inline]
    pub(super) fn frame_of_len(&mut self, index: u8, len: usize) -> Option<XdpFrame> {
        let need = len as u64 + u64::from(XDP_HEADROOM);
        let span = need > u64::from(self.frame_size);
        if span && need > self.spans.bytes {
            return None;
        }
        let base = if span {
            self.spans.free.pop()?
        } else {
            self.free.pop()?
        };
        let frame = u32::try_from(len)
            .ok()
            .and_then(|l| self.frame(index, base + u64::from(XDP_HEADROOM), l));
        if frame.is_none() {
            self.give_back(base);
        }
        frame
    }

    /// A free chunk (or span) holding a copy of `bytes` at the XDP headroom.
    #[inline]
    pub(super) fn frame_with(&mut self, index: u8, bytes: &[u8]) -> Option<XdpFrame> {
        let mut f = self.frame_of_len(index, bytes.len())?;
        f.data_mut().copy_from_slice(bytes);
        Some(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_grows_into_its_chunk_and_no_further() {
        let rings = XdpRingConfig {
            frame_size: 2048,
            umem_frames: 4,
            ..XdpRingConfig::default()
        };
        let mut umem = Umem::new("test", &rings, 0, 0).expect("anonymous mapping");
        let mut f = umem.frame_with(0, &[7u8; 60]).expect("a free chunk");
        let room = (2048 - XDP_HEADROOM) as usize;
        assert!(!f.extend(room + 1), "past the chunk");
        assert_eq!(f.data().len(), 60, "a refused extend changes nothing");
        assert!(f.extend(100));
        assert_eq!(f.data().len(), 100);
        assert_eq!(&f.data()[..60], &[7u8; 60], "the frame's bytes stay");
        f.data_mut()[60..].fill(9);
        assert!(f.extend(room));
        assert_eq!(f.data().len(), room);
        assert!(f.extend(80), "shorter than the frame: nothing to do");
        assert_eq!(f.data().len(), room);
        f.truncate(70);
        assert!(f.extend(90));
        assert_eq!(&f.data()[60..90], &[9u8; 30]);
    }
}
