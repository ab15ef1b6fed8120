//! [`Region`]: one `mmap(2)` mapping shared with the kernel (a packet
//! socket's rings, an AF_XDP ring) or private to the process (a UMEM).
//!
//! Invariants: a `Region` owns one mapping of `len` bytes from a successful
//! `mmap(2)` and unmaps it on drop; every accessor checks its offset and
//! length against `len` (and 4-byte alignment for atomics) and returns
//! `None`/`false` instead of touching memory outside the mapping. Which
//! bytes are *meaningful* is the ring protocol's business: reading a slot
//! the kernel owns yields stale bytes, never an out-of-bounds access. No
//! reference into the mapping leaves it except `&AtomicU32` for the status
//! and index words the kernel and user space hand back and forth
//! (`Acquire` loads / `Release` stores).
#![allow(unsafe_code)]

use super::fd::einval;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;

/// One memory mapping.
pub(crate) struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region").field("len", &self.len).finish()
    }
}

// SAFETY: the mapping is owned by this value; no Rust reference into it
// outlives the borrows of its methods (views handed out by `ptr_at` are
// raw pointers whose users keep their own invariants), so moving it to
// another thread is like moving a `Box<[u8]>`.
unsafe impl Send for Region {}

impl Region {
    fn map(fd: Option<libc::c_int>, len: usize, offset: u64) -> io::Result<Region> {
        if len == 0 {
            return Err(einval("empty mapping"));
        }
        let offset = libc::off_t::try_from(offset).map_err(|_| einval("offset too large"))?;
        let (flags, fd) = match fd {
            Some(fd) => (libc::MAP_SHARED | libc::MAP_POPULATE, fd),
            None => (
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
            ),
        };
        // SAFETY: a fresh mapping at an address the kernel chooses; no
        // existing memory is affected. The result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| einval("mmap returned NULL"))?;
        Ok(Region { ptr, len })
    }

    /// Map `len` bytes of `fd` at byte `offset` (a socket's rings: offset 0
    /// for a packet socket's RX+TX rings, `XDP_PGOFF_RX_RING`, ... for an
    /// AF_XDP socket's), shared with the kernel.
    pub(crate) fn shared(fd: impl AsFd, len: usize, offset: u64) -> io::Result<Region> {
        Region::map(Some(fd.as_fd().as_raw_fd()), len, offset)
    }

    /// Anonymous private memory (a UMEM; ring stand-ins in unit tests).
    pub(crate) fn anonymous(len: usize) -> io::Result<Region> {
        Region::map(None, len, 0)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Start address (for `XDP_UMEM_REG`).
    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    #[inline]
    fn in_bounds(&self, off: usize, len: usize) -> bool {
        off.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// A pointer to `len` bytes at `off`, if they are inside the mapping.
    /// Dereferencing it is the caller's business (AF_XDP's UMEM chunks);
    /// the pointer stays valid as long as the mapping does.
    #[inline]
    pub(crate) fn ptr_at(&self, off: usize, len: usize) -> Option<NonNull<u8>> {
        if !self.in_bounds(off, len) {
            return None;
        }
        // SAFETY: `off <= len` of the mapping (checked), so the result is
        // inside it or one past its end, and non-null.
        Some(unsafe { self.ptr.add(off) })
    }

    /// The 32-bit word at `off`, shared with the kernel.
    #[inline]
    pub(crate) fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
        if !self.in_bounds(off, 4) || !off.is_multiple_of(4) {
            return None;
        }
        // SAFETY: in bounds and 4-byte aligned (the mapping is page-aligned
        // and `off % 4 == 0`, both checked); the mapping lives as long as
        // `&self`; AtomicU32 has the size and alignment of u32, and
        // concurrent access by the kernel to a status or index word is what
        // atomics are for.
        Some(unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(off).cast::<u32>()) })
    }

    /// A native-endian u16 at `off`.
    #[inline]
    pub(crate) fn read_u16(&self, off: usize) -> Option<u16> {
        if !self.in_bounds(off, 2) {
            return None;
        }
        // SAFETY: the 2 bytes at `off` are inside the mapping (checked);
        // read_unaligned has no alignment requirement.
        Some(unsafe { self.ptr.as_ptr().add(off).cast::<u16>().read_unaligned() })
    }

    /// A native-endian u32 at `off`.
    #[inline]
    pub(crate) fn read_u32(&self, off: usize) -> Option<u32> {
        if !self.in_bounds(off, 4) {
            return None;
        }
        // SAFETY: the 4 bytes at `off` are inside the mapping (checked);
        // read_unaligned has no alignment requirement.
        Some(unsafe { self.ptr.as_ptr().add(off).cast::<u32>().read_unaligned() })
    }

    /// A native-endian u64 at `off`.
    #[inline]
    pub(crate) fn read_u64(&self, off: usize) -> Option<u64> {
        if !self.in_bounds(off, 8) {
            return None;
        }
        // SAFETY: the 8 bytes at `off` are inside the mapping (checked);
        // read_unaligned has no alignment requirement.
        Some(unsafe { self.ptr.as_ptr().add(off).cast::<u64>().read_unaligned() })
    }

    /// Store a native-endian u32 at `off`; false if out of bounds.
    #[inline]
    pub(crate) fn write_u32(&mut self, off: usize, value: u32) -> bool {
        if !self.in_bounds(off, 4) {
            return false;
        }
        // SAFETY: the 4 bytes at `off` are inside the mapping (checked), and
        // `&mut self` excludes other Rust accesses.
        unsafe {
            self.ptr
                .as_ptr()
                .add(off)
                .cast::<u32>()
                .write_unaligned(value);
        }
        true
    }

    /// Store a native-endian u64 at `off`; false if out of bounds.
    #[inline]
    pub(crate) fn write_u64(&mut self, off: usize, value: u64) -> bool {
        if !self.in_bounds(off, 8) {
            return false;
        }
        // SAFETY: the 8 bytes at `off` are inside the mapping (checked), and
        // `&mut self` excludes other Rust accesses.
        unsafe {
            self.ptr
                .as_ptr()
                .add(off)
                .cast::<u64>()
                .write_unaligned(value);
        }
        true
    }

    /// Store a native-endian u16 at `off` (unit tests fake kernel headers).
    #[cfg(test)]
    pub(crate) fn write_u16(&mut self, off: usize, value: u16) -> bool {
        self.copy_in(off, &value.to_ne_bytes())
    }

    /// Copy `dst.len()` bytes starting at `off` out of the mapping.
    #[inline]
    pub(crate) fn copy_out(&self, off: usize, dst: &mut [u8]) -> bool {
        if !self.in_bounds(off, dst.len()) {
            return false;
        }
        // SAFETY: source range inside the mapping (checked); `dst` is a
        // distinct Rust buffer, so the ranges cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len());
        }
        true
    }

    /// Copy `src` into the mapping at `off`.
    #[inline]
    pub(crate) fn copy_in(&mut self, off: usize, src: &[u8]) -> bool {
        if !self.in_bounds(off, src.len()) {
            return false;
        }
        // SAFETY: destination range inside the mapping (checked); `src` is a
        // distinct Rust buffer; `&mut self` excludes other Rust accesses.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len());
        }
        true
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe exactly the mapping made in `map`,
        // which no Rust reference points into once `self` is dropped (the
        // AF_XDP driver leaks a UMEM whose chunks are still out instead of
        // dropping it).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast::<libc::c_void>(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn accessors_refuse_anything_outside_the_mapping() {
        let mut r = Region::anonymous(4096).expect("anonymous mapping");
        assert!(Region::anonymous(0).is_err(), "an empty mapping is refused");
        assert_eq!(r.len(), 4096);
        assert!(r.write_u64(4088, 0x0102_0304_0506_0708));
        assert_eq!(r.read_u64(4088), Some(0x0102_0304_0506_0708));
        assert!(r.write_u32(4092, 0xdead_beef));
        assert_eq!(r.read_u32(4092), Some(0xdead_beef));
        assert!(!r.write_u64(4089, 1), "crosses the end");
        assert!(!r.write_u32(usize::MAX - 1, 1), "offset overflow");
        assert_eq!(r.read_u16(4095), None);
        assert!(r.atomic_u32(2).is_none(), "misaligned");
        assert!(r.atomic_u32(4096).is_none(), "past the end");
        r.atomic_u32(8)
            .expect("aligned")
            .store(7, Ordering::Release);
        assert_eq!(r.read_u32(8), Some(7));
        let mut out = [0u8; 3];
        assert!(r.copy_in(100, &[1, 2, 3]));
        assert!(r.copy_out(100, &mut out));
        assert_eq!(out, [1, 2, 3]);
        assert!(!r.copy_out(4094, &mut out));
        assert!(!r.copy_in(4094, &[1, 2, 3]));
        assert!(r.ptr_at(4096, 0).is_some(), "an empty view at the end");
        assert!(r.ptr_at(4000, 97).is_none());
    }
}
