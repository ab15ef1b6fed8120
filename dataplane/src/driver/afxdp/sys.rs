//! The Linux calls only the AF_XDP driver makes, over the shared wrappers
//! of [`crate::driver::sys`]: `AF_XDP` sockets and their options, the
//! `bpf(2)` commands, netlink route sockets, and [`Chunk`], the view of one
//! UMEM chunk a frame owns.
//!
//! This file holds all of the driver's `unsafe` code (besides the namespace
//! tests): the [`Plain`] promises of the kernel structs it reads, `bpf(2)`,
//! and the chunk views.
//!
//! Invariants: a [`Chunk`] is a view of one UMEM chunk handed out by the
//! driver. The driver hands each chunk to at most one owner at a time (the
//! kernel via a fill or TX ring, or one frame), and never unmaps a UMEM
//! while a chunk of it is outside the driver (it leaks the mapping instead,
//! see `Umem` in `umem.rs`), so a `Chunk`'s bytes are always mapped and
//! never aliased by another Rust reference.
#![allow(unsafe_code)]

use crate::driver::sys::{self, Plain, Region};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

// SAFETY: plain u64 offsets (four `xdp_ring_offset`s).
unsafe impl Plain for libc::xdp_mmap_offsets {}
// SAFETY: six u64 counters.
unsafe impl Plain for libc::xdp_statistics {}
// SAFETY: one u32 flags word.
unsafe impl Plain for libc::xdp_options {}
// SAFETY: integers only (family, flags, ifindex, queue, fd).
unsafe impl Plain for libc::sockaddr_xdp {}
// SAFETY: integers only (address, length, chunk size, headroom, flags).
unsafe impl Plain for libc::xdp_umem_reg {}

/// A new `AF_XDP` socket.
pub(super) fn xdp_socket() -> io::Result<OwnedFd> {
    sys::socket(libc::AF_XDP, libc::SOCK_RAW, 0)
}

/// A netlink route socket.
pub(super) fn netlink_route_socket() -> io::Result<OwnedFd> {
    sys::socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE)
}

/// `XDP_MMAP_OFFSETS`: where producer, consumer, flags and descriptors sit
/// in each ring's mapping. Refuses kernels older than 5.4 (no flags word).
pub(super) fn mmap_offsets(fd: BorrowedFd<'_>) -> io::Result<libc::xdp_mmap_offsets> {
    let zero: libc::xdp_mmap_offsets = sys::zeroed();
    let (off, len) = sys::getsockopt(fd, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS, zero)?;
    if len != size_of::<libc::xdp_mmap_offsets>() {
        return Err(io::Error::other(
            "XDP_MMAP_OFFSETS without ring flags (kernel older than 5.4)",
        ));
    }
    Ok(off)
}

/// `XDP_STATISTICS` (the kernel's counters since the socket was bound).
pub(super) fn xdp_statistics(fd: BorrowedFd<'_>) -> io::Result<libc::xdp_statistics> {
    let zero: libc::xdp_statistics = sys::zeroed();
    sys::getsockopt(fd, libc::SOL_XDP, libc::XDP_STATISTICS, zero).map(|(s, _)| s)
}

/// `XDP_OPTIONS`: whether the bound socket runs in zero-copy mode.
pub(super) fn xdp_zero_copy(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let (o, _) = sys::getsockopt(
        fd,
        libc::SOL_XDP,
        libc::XDP_OPTIONS,
        libc::xdp_options { flags: 0 },
    )?;
    Ok(o.flags & libc::XDP_OPTIONS_ZEROCOPY != 0)
}

#[cfg(test)]
thread_local! {
    /// Tests: fail every `XDP_SHARED_UMEM` bind of this thread with this
    /// errno (a kernel that refuses sharing a queue's pool).
    pub(super) static REFUSE_SHARED_BIND: std::cell::Cell<Option<i32>> =
        const { std::cell::Cell::new(None) };
}

/// Bind an `AF_XDP` socket to `(ifindex, queue_id)`.
pub(super) fn bind_xdp(
    fd: BorrowedFd<'_>,
    ifindex: u32,
    queue_id: u32,
    flags: u16,
    shared_umem_fd: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let sxdp = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue_id,
        sxdp_shared_umem_fd: shared_umem_fd.map_or(0, |f| f.as_raw_fd() as u32),
    };
    #[cfg(test)]
    if flags & libc::XDP_SHARED_UMEM != 0
        && let Some(errno) = REFUSE_SHARED_BIND.with(|r| r.get())
    {
        return Err(io::Error::from_raw_os_error(errno));
    }
    sys::bind(fd, &sxdp)
}

/// A UMEM mapping several workers read: its owner, and the workers whose
/// sockets on the owner's queue share its buffer pool (`queues.rs`) and
/// copy each frame they receive out of its chunk before giving the chunk
/// back.
#[derive(Debug)]
pub(super) struct SharedRegion(pub(super) Region);

// SAFETY: `Region`'s shared methods only compute addresses inside the
// mapping (`len`, `addr`, `ptr_at`) or read bytes (`copy_out`, and the
// `Chunk` views made from `ptr_at`); which thread may touch which chunk's
// bytes is the chunk protocol of the module invariant (a chunk is owned by
// one place at a time; a worker reading a chunk received on its socket owns
// it until it hands the address back), so sharing the mapping between
// threads adds no aliasing of bytes.
unsafe impl Sync for SharedRegion {}

impl std::ops::Deref for SharedRegion {
    type Target = Region;
    fn deref(&self) -> &Region {
        &self.0
    }
}

/// `cap` bytes of one UMEM chunk, owned by one frame.
pub(super) struct Chunk {
    ptr: NonNull<u8>,
    cap: usize,
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunk").field("cap", &self.cap).finish()
    }
}

impl Chunk {
    /// A view of `len` bytes at `off` of a UMEM, handed out as one chunk.
    /// The caller (the driver's chunk accounting) guarantees that no other
    /// `Chunk` of the same bytes exists and the kernel does not own them.
    #[inline]
    pub(super) fn new(umem: &Region, off: usize, len: usize) -> Option<Chunk> {
        let ptr = umem.ptr_at(off, len)?;
        Some(Chunk { ptr, cap: len })
    }

    /// Bytes from the view's start to the end of its chunk (what a frame
    /// may grow to).
    #[inline]
    pub(super) fn cap(&self) -> usize {
        self.cap
    }

    /// The first `len` bytes (clamped to the chunk).
    #[inline]
    pub(super) fn bytes(&self, len: usize) -> &[u8] {
        // SAFETY: `ptr..ptr+cap` lies inside a live UMEM mapping (checked by
        // `Region::ptr_at`; the driver never unmaps a UMEM while chunks are
        // out) and no other reference to these bytes exists (module
        // invariant); `len` is clamped to `cap`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), len.min(self.cap)) }
    }

    #[inline]
    pub(super) fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), len.min(self.cap)) }
    }
}

/// Copy `dst.len()` bytes at UMEM offset `off` into `dst` (a received
/// buffer into the span a chain is reassembled in); false, with nothing
/// copied, when they are not inside the mapping.
pub(super) fn copy_from_umem(umem: &Region, off: usize, dst: &mut [u8]) -> bool {
    let Some(src) = umem.ptr_at(off, dst.len()) else {
        return false;
    };
    // SAFETY: `src..src+len` lies inside the live UMEM mapping (checked by
    // `ptr_at`); it is a received buffer the driver owns (consumed from the
    // RX ring, not yet given back), so neither the kernel nor a frame
    // writes it, and it is a different chunk than the span behind `dst`
    // (spans never enter the fill ring), so the ranges do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), dst.len()) };
    true
}

// ---------------------------------------------------------------- bpf(2)

pub(super) const BPF_MAP_CREATE: u32 = 0;
pub(super) const BPF_MAP_UPDATE_ELEM: u32 = 2;
pub(super) const BPF_MAP_DELETE_ELEM: u32 = 3;
pub(in crate::driver) const BPF_PROG_LOAD: u32 = 5;
pub(super) const BPF_PROG_TEST_RUN: u32 = 10;
pub(super) const BPF_PROG_GET_FD_BY_ID: u32 = 13;
pub(super) const BPF_OBJ_GET_INFO_BY_FD: u32 = 15;
pub(in crate::driver) const BPF_LINK_CREATE: u32 = 28;

/// `bpf(cmd, attr, sizeof attr)`; `A` is a `#[repr(C)]` prefix of
/// `union bpf_attr` whose unused bytes are zero. Returns the result (an fd
/// for the commands that create one).
pub(super) fn bpf<A: Copy>(cmd: u32, attr: &mut A) -> io::Result<libc::c_int> {
    // SAFETY: `attr` is a live, writable `A` of the size passed; each
    // caller's `A` matches the layout the kernel expects for `cmd`, and the
    // pointers inside it refer to live buffers of the lengths given.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            (attr as *mut A).cast::<libc::c_void>(),
            size_of::<A>() as libc::c_long,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        libc::c_int::try_from(rc).map_err(|_| sys::einval("bpf returned an out-of-range value"))
    }
}

/// [`bpf`] for commands that return a new fd.
pub(in crate::driver) fn bpf_fd<A: Copy>(cmd: u32, attr: &mut A) -> io::Result<OwnedFd> {
    let fd = bpf(cmd, attr)?;
    // SAFETY: the commands passed here create a new descriptor and return
    // it; nothing else owns it.
    unsafe { sys::owned_fd(fd) }
}

/// Tests: take the capabilities `caps` (a bit per capability number) out
/// of the calling thread's effective set (`capget`/`capset`, version 3;
/// capabilities are per thread), as the gateway's drop after start-up
/// does for the whole process.
#[cfg(test)]
pub(super) fn drop_effective_capabilities(caps: u64) -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: `header` and the two `data` words are live and writable, the
    // layout capget(2) takes for version 3.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut Header,
            data.as_mut_ptr(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    for (i, d) in data.iter_mut().enumerate() {
        d.effective &= !((caps >> (32 * i)) as u32);
    }
    // SAFETY: as above; capset(2) only reads them.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

// ---------------------------------------------------------------- netlink

/// Send one netlink request to the kernel.
pub(super) fn netlink_send(sock: impl AsFd, msg: &[u8]) -> io::Result<()> {
    // All-zero with the family set addresses the kernel.
    let mut sa: libc::sockaddr_nl = sys::zeroed();
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    sys::send_to(sock, msg, &sa).map(drop)
}

/// One datagram from a netlink socket into `buf`; returns its length.
pub(super) fn netlink_recv(sock: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    sys::recv(sock, buf)
}
