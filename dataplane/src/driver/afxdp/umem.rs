//! UMEM memory: [`Umem`], one anonymous mapping cut into chunks with its
//! free list, and [`XdpFrame`], a frame in one chunk.
//!
//! Invariants: every chunk is in exactly one place (a free list, a fill
//! ring, the kernel, a completion ring or one frame); `give_back` never
//! grows the free list beyond its capacity (a duplicate from a corrupt
//! ring is dropped instead of allocating); a frame's bytes never cross its
//! chunk.

use super::sys::Chunk;
use super::{AfXdpError, XDP_HEADROOM, XdpRingConfig};
use crate::driver::Frame;
use crate::driver::sys::Region;

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

/// A UMEM: the mapping and its free chunks (base addresses).
#[derive(Debug)]
pub(super) struct Umem {
    pub(super) map: Region,
    pub(super) frame_size: u32,
    pub(super) free: Vec<u64>,
}

impl Umem {
    pub(super) fn new(ifname: &str, rings: &XdpRingConfig) -> Result<Umem, AfXdpError> {
        let len = rings.umem_frames as usize * rings.frame_size as usize;
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
        Ok(Umem {
            map,
            frame_size: rings.frame_size,
            free,
        })
    }

    /// The chunk base of a UMEM address.
    #[inline]
    pub(super) fn base(&self, addr: u64) -> u64 {
        addr - addr % u64::from(self.frame_size)
    }

    /// Put the chunk of `addr` back on the free list. The list never
    /// grows beyond its capacity (every chunk is in one place; a corrupt
    /// duplicate from the kernel is dropped rather than allocating).
    #[inline]
    pub(super) fn give_back(&mut self, addr: u64) {
        if self.free.len() < self.free.capacity() && addr < self.map.len() as u64 {
            let base = self.base(addr);
            self.free.push(base);
        }
    }

    /// A frame over `len` bytes at `addr` (which must not cross its chunk).
    #[inline]
    pub(super) fn frame(&self, index: u8, addr: u64, len: u32) -> Option<XdpFrame> {
        let in_chunk = addr % u64::from(self.frame_size);
        let cap = u64::from(self.frame_size) - in_chunk;
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

    /// A free chunk holding a copy of `bytes` at the XDP headroom.
    #[inline]
    pub(super) fn frame_with(&mut self, index: u8, bytes: &[u8]) -> Option<XdpFrame> {
        if bytes.len() + XDP_HEADROOM as usize > self.frame_size as usize {
            return None;
        }
        let base = self.free.pop()?;
        let len = bytes.len() as u32;
        match self.frame(index, base + u64::from(XDP_HEADROOM), len) {
            Some(mut f) => {
                f.data_mut().copy_from_slice(bytes);
                Some(f)
            }
            None => {
                self.free.push(base);
                None
            }
        }
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
        let mut umem = Umem::new("test", &rings).expect("anonymous mapping");
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
