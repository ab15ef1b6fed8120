//! Descriptors and sockets: thin wrappers that take and return plain Rust
//! values (`io::Result`, [`OwnedFd`], copies of bytes).
//!
//! Invariants: a descriptor a wrapper creates is owned by exactly one
//! [`OwnedFd`] (closed once, on drop); buffers handed to the kernel are live
//! Rust values of exactly the length passed; the kernel writes only into
//! values of a [`Plain`] type, for which any bytes are a valid value.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

/// A type for which every bit pattern of its size is a valid value: C
/// integers, raw pointers and `#[repr(C)]` structs and unions of them. The
/// kernel may write any bytes into one ([`getsockopt`]) and all-zero bytes
/// are a valid value ([`zeroed`]).
///
/// # Safety
///
/// Implement it only for types without references, `bool`s, `char`s,
/// enums, niches or `Drop`: any byte pattern must be a valid value.
pub(crate) unsafe trait Plain: Copy {}

// SAFETY: integers accept every bit pattern.
unsafe impl Plain for libc::c_int {}
// SAFETY: integers accept every bit pattern.
unsafe impl Plain for u32 {}
// SAFETY: integers accept every bit pattern.
unsafe impl Plain for u64 {}
// SAFETY: integers and a byte array.
unsafe impl Plain for libc::sockaddr_ll {}
// SAFETY: integers (family, padding, port id, groups).
unsafe impl Plain for libc::sockaddr_nl {}
// SAFETY: three u32 counters.
unsafe impl Plain for libc::tpacket_stats_v3 {}
// SAFETY: seven u32 fields.
unsafe impl Plain for libc::tpacket_req3 {}
// SAFETY: integers and a byte array.
unsafe impl Plain for libc::packet_mreq {}
// SAFETY: integers and a byte array.
unsafe impl Plain for libc::timeval {}
// SAFETY: a name array and a union of integers, sockaddrs, maps and a raw
// pointer; a raw pointer accepts every bit pattern (null included).
unsafe impl Plain for libc::ifreq {}
// SAFETY: a family integer and a byte array.
unsafe impl Plain for libc::sockaddr {}

/// All-zero bytes as a `T` (C structs the kernel fills or reads with unused
/// fields zero).
pub(crate) fn zeroed<T: Plain>() -> T {
    // SAFETY: `T: Plain`, so all-zero bytes are a valid `T`.
    unsafe { std::mem::zeroed() }
}

/// An `InvalidInput` error saying what was wrong.
pub(crate) fn einval(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
}

/// A libc return code: negative is the thread's `errno`.
pub(crate) fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// [`cvt`] for the `ssize_t` of `send`/`recv`: the byte count.
pub(super) fn cvt_size(rc: libc::ssize_t) -> io::Result<usize> {
    usize::try_from(rc).map_err(|_| io::Error::last_os_error())
}

/// Own the descriptor a creating call returned (or its `errno` if it is
/// negative).
///
/// # Safety
///
/// `fd`, if not negative, must be a descriptor the caller just created
/// (`socket(2)`, `bpf(2)`, ...) and that nothing else owns or closes.
pub(crate) unsafe fn owned_fd(fd: libc::c_int) -> io::Result<OwnedFd> {
    let fd = cvt(fd)?;
    // SAFETY: `fd` is open and unowned (the caller's contract).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `socket(domain, kind | SOCK_CLOEXEC, protocol)`.
pub(crate) fn socket(
    domain: libc::c_int,
    kind: libc::c_int,
    protocol: libc::c_int,
) -> io::Result<OwnedFd> {
    // SAFETY: a plain syscall with integer arguments; returns a new fd or -1.
    let fd = unsafe { libc::socket(domain, kind | libc::SOCK_CLOEXEC, protocol) };
    // SAFETY: `fd` was just created by socket(2) and nothing else owns it.
    unsafe { owned_fd(fd) }
}

/// The interface name as a C string that fits `IFNAMSIZ` with its NUL.
pub(crate) fn ifname_c(ifname: &str) -> io::Result<CString> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
        return Err(einval("interface names are 1 to 15 bytes"));
    }
    CString::new(ifname).map_err(|_| einval("interface name contains a NUL byte"))
}

/// The interface index of `ifname` in the calling thread's network
/// namespace.
pub(crate) fn if_index(ifname: &str) -> io::Result<u32> {
    let c = ifname_c(ifname)?;
    // SAFETY: `c` is a NUL-terminated string alive across the call; the
    // function only reads it.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

/// The size of `T` as a `socklen_t`.
fn socklen<T>() -> io::Result<libc::socklen_t> {
    libc::socklen_t::try_from(size_of::<T>()).map_err(|_| einval("option too large"))
}

/// `setsockopt(fd, level, name, &value, sizeof value)`.
pub(crate) fn setsockopt<T: Plain>(
    fd: impl AsFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    let len = socklen::<T>()?;
    // SAFETY: `value` points to a live `T` of exactly `len` bytes for the
    // duration of the call; the kernel only reads it.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
            (value as *const T).cast::<libc::c_void>(),
            len,
        )
    })
    .map(drop)
}

/// `setsockopt(fd, level, name, &sock_fprog, ...)` with a classic BPF
/// program (`SO_ATTACH_FILTER`, `PACKET_FANOUT_DATA`): the kernel copies
/// the instructions during the call.
pub(crate) fn setsockopt_program(
    fd: impl AsFd,
    level: libc::c_int,
    name: libc::c_int,
    program: &[libc::sock_filter],
) -> io::Result<()> {
    let len = u16::try_from(program.len()).map_err(|_| einval("BPF program too long"))?;
    let fprog = libc::sock_fprog {
        len,
        filter: program.as_ptr().cast_mut(),
    };
    let size = socklen::<libc::sock_fprog>()?;
    // SAFETY: `fprog` is live for the call and its `filter` points to
    // `len` initialised instructions borrowed for the call; the kernel
    // only reads both (it copies the program before returning).
    cvt(unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
            (&raw const fprog).cast::<libc::c_void>(),
            size,
        )
    })
    .map(drop)
}

/// `getsockopt` into `value` (its initial bytes are what the kernel sees
/// for options that read them); returns the value and the length the
/// kernel wrote.
pub(crate) fn getsockopt<T: Plain>(
    fd: impl AsFd,
    level: libc::c_int,
    name: libc::c_int,
    mut value: T,
) -> io::Result<(T, usize)> {
    let mut len = socklen::<T>()?;
    // SAFETY: `value` is a live, writable `T` of `len` bytes and `len` a
    // live socklen_t; the kernel writes at most `len` bytes, and any bytes
    // are a valid `T` (`T: Plain`).
    cvt(unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
            (&mut value as *mut T).cast::<libc::c_void>(),
            &mut len,
        )
    })?;
    Ok((value, len as usize))
}

/// Read and clear the socket's pending error (`SO_ERROR`), e.g. `ENETDOWN`
/// queued when the interface went down; returns the errno (0 if none).
pub(crate) fn take_socket_error(fd: impl AsFd) -> io::Result<i32> {
    getsockopt(fd, libc::SOL_SOCKET, libc::SO_ERROR, 0 as libc::c_int).map(|(e, _)| e)
}

/// `bind(fd, &addr, sizeof addr)`; `A` is the `sockaddr_*` of the socket's
/// family.
pub(crate) fn bind<A: Plain>(fd: impl AsFd, addr: &A) -> io::Result<()> {
    let len = socklen::<A>()?;
    // SAFETY: `addr` is a live `A` of `len` bytes; the kernel only reads it.
    cvt(unsafe {
        libc::bind(
            fd.as_fd().as_raw_fd(),
            (addr as *const A).cast::<libc::sockaddr>(),
            len,
        )
    })
    .map(drop)
}

/// `send(fd, NULL, 0, MSG_DONTWAIT)`: the kick that makes the kernel
/// transmit what a socket's TX ring holds.
pub(crate) fn send_empty(fd: impl AsFd) -> io::Result<()> {
    // SAFETY: a NULL buffer of length 0 is valid for send(2): the kernel
    // reads no bytes from it (a ring socket reads its frames from the ring).
    let rc = unsafe {
        libc::send(
            fd.as_fd().as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
        )
    };
    cvt_size(rc).map(drop)
}

/// `recv(fd, NULL, 0, MSG_DONTWAIT)`: the wake-up an AF_XDP socket's fill
/// ring asks for (as libxdp does).
pub(crate) fn recv_empty(fd: impl AsFd) -> io::Result<()> {
    // SAFETY: a NULL buffer of length 0 is valid for recv(2): the kernel
    // writes no bytes into it.
    let rc = unsafe {
        libc::recv(
            fd.as_fd().as_raw_fd(),
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
        )
    };
    cvt_size(rc).map(drop)
}

/// `sendto(fd, msg, len, 0, &addr, sizeof addr)`; returns the bytes sent.
pub(crate) fn send_to<A: Plain>(fd: impl AsFd, msg: &[u8], addr: &A) -> io::Result<usize> {
    let len = socklen::<A>()?;
    // SAFETY: `msg` is a live buffer of `msg.len()` bytes and `addr` a live
    // `A` of `len` bytes; the kernel only reads both.
    let rc = unsafe {
        libc::sendto(
            fd.as_fd().as_raw_fd(),
            msg.as_ptr().cast::<libc::c_void>(),
            msg.len(),
            0,
            (addr as *const A).cast::<libc::sockaddr>(),
            len,
        )
    };
    cvt_size(rc)
}

/// The `mmsghdr`/`iovec` arrays of `sendmmsg(2)`, allocated once: each
/// message is gathered from two parts (a header and a frame, say) that are
/// borrowed only for the call.
///
/// Invariant: the raw pointers in `msgs` and `iovs` are written by
/// [`SendBatch::send`] right before its syscall and point into slices
/// borrowed for that call; nothing reads them afterwards.
pub(crate) struct SendBatch {
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
}

// SAFETY: the pointers inside are only meaningful during `send`, which
// borrows what they point to (type invariant); between calls they are
// dead values, so moving the arrays to another thread shares nothing.
unsafe impl Send for SendBatch {}

impl std::fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBatch")
            .field("capacity", &self.msgs.len())
            .finish()
    }
}

/// `capacity` empty message headers and two empty `iovec`s per message
/// (a message is two parts), for [`SendBatch`] and [`RecvBatch`].
fn empty_messages(capacity: usize) -> (Vec<libc::mmsghdr>, Vec<libc::iovec>) {
    let iov = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    // SAFETY: `mmsghdr` is integers and raw pointers; all-zero bytes
    // (null pointers, zero lengths) are a valid value.
    let msg: libc::mmsghdr = unsafe { std::mem::zeroed() };
    (vec![msg; capacity], vec![iov; capacity * 2])
}

impl SendBatch {
    /// Arrays for up to `capacity` messages per call.
    pub(crate) fn new(capacity: usize) -> Self {
        let (msgs, iovs) = empty_messages(capacity);
        SendBatch { msgs, iovs }
    }

    /// `sendmmsg(fd, ..., MSG_DONTWAIT)` of the first `capacity` (of
    /// [`SendBatch::new`]) messages of `messages`, each the concatenation of its two parts, to
    /// the address the socket is bound to. Returns how many the kernel
    /// took, from the front (fewer when one failed; its error comes with
    /// the next call); an error when the first one failed. Allocates
    /// nothing.
    pub(crate) fn send<'a>(
        &mut self,
        fd: impl AsFd,
        messages: impl IntoIterator<Item = [&'a [u8]; 2]>,
    ) -> io::Result<usize> {
        let mut n = 0;
        for (parts, (msg, iovs)) in messages
            .into_iter()
            .zip(self.msgs.iter_mut().zip(self.iovs.chunks_exact_mut(2)))
        {
            for (iov, part) in iovs.iter_mut().zip(parts) {
                *iov = libc::iovec {
                    iov_base: part.as_ptr().cast_mut().cast::<libc::c_void>(),
                    iov_len: part.len(),
                };
            }
            let h = &mut msg.msg_hdr;
            h.msg_name = std::ptr::null_mut();
            h.msg_namelen = 0;
            h.msg_iov = iovs.as_mut_ptr();
            h.msg_iovlen = 2;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
            msg.msg_len = 0;
            n += 1;
        }
        if n == 0 {
            return Ok(0);
        }
        let count = libc::c_uint::try_from(n).map_err(|_| einval("batch too large"))?;
        // SAFETY: the first `n` entries of `msgs` are initialised above;
        // each points at two `iovs` entries of this batch, which point at
        // parts borrowed (`'a`) for this call. The kernel reads those and
        // writes only the `msg_len` fields of `msgs`.
        let rc = unsafe {
            libc::sendmmsg(
                fd.as_fd().as_raw_fd(),
                self.msgs.as_mut_ptr(),
                count,
                libc::MSG_DONTWAIT,
            )
        };
        cvt(rc).map(|k| k as usize)
    }
}

/// What `recvmmsg(2)` reported for one message of a [`RecvBatch`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Received {
    /// Bytes the kernel wrote, over all parts.
    pub(crate) len: usize,
    /// `MSG_TRUNC`: the datagram was longer than the parts.
    pub(crate) truncated: bool,
    /// The `PACKET_AUXDATA` control message, when the kernel sent one.
    pub(crate) aux: Option<libc::tpacket_auxdata>,
}

/// Room for one control message per datagram: `CMSG_SPACE` of a
/// `tpacket_auxdata` is 40 bytes on 64-bit Linux; 64 leaves slack.
const CONTROL_WORDS: usize = 8;

/// The `mmsghdr`/`iovec` arrays and control buffers of `recvmmsg(2)`,
/// allocated once: each message is scattered into two parts (a header and
/// a frame buffer, say) that are borrowed only for the call.
///
/// Invariant: the raw pointers in `msgs` and `iovs` are written by
/// [`RecvBatch::recv`] right before its syscall and point into slices
/// borrowed for that call, or into `control` (owned, never resized);
/// after the call only the lengths and flags the kernel wrote are read.
pub(crate) struct RecvBatch {
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    control: Vec<[u64; CONTROL_WORDS]>,
    /// Messages the last call received.
    received: usize,
}

// SAFETY: as for `SendBatch`: the pointers inside are only meaningful
// during `recv`, which borrows what they point to (type invariant).
unsafe impl Send for RecvBatch {}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("capacity", &self.msgs.len())
            .finish()
    }
}

impl RecvBatch {
    /// Arrays for up to `capacity` messages per call.
    pub(crate) fn new(capacity: usize) -> Self {
        let (msgs, iovs) = empty_messages(capacity);
        RecvBatch {
            msgs,
            iovs,
            control: vec![[0; CONTROL_WORDS]; capacity],
            received: 0,
        }
    }

    /// `recvmmsg(fd, ..., MSG_DONTWAIT)` into the first `capacity` (of
    /// [`RecvBatch::new`]) messages of `messages`, each datagram scattered
    /// over its two parts in order. Returns how many datagrams arrived
    /// (0 when none was waiting); [`RecvBatch::received`] then reports
    /// each. Allocates nothing.
    pub(crate) fn recv<'a>(
        &mut self,
        fd: impl AsFd,
        messages: impl IntoIterator<Item = [&'a mut [u8]; 2]>,
    ) -> io::Result<usize> {
        self.received = 0;
        let mut n = 0;
        for (parts, ((msg, iovs), control)) in messages.into_iter().zip(
            self.msgs
                .iter_mut()
                .zip(self.iovs.chunks_exact_mut(2))
                .zip(self.control.iter_mut()),
        ) {
            for (iov, part) in iovs.iter_mut().zip(parts) {
                *iov = libc::iovec {
                    iov_base: part.as_mut_ptr().cast::<libc::c_void>(),
                    iov_len: part.len(),
                };
            }
            let h = &mut msg.msg_hdr;
            h.msg_name = std::ptr::null_mut();
            h.msg_namelen = 0;
            h.msg_iov = iovs.as_mut_ptr();
            h.msg_iovlen = 2;
            h.msg_control = control.as_mut_ptr().cast::<libc::c_void>();
            h.msg_controllen = size_of_val(control);
            h.msg_flags = 0;
            msg.msg_len = 0;
            n += 1;
        }
        if n == 0 {
            return Ok(0);
        }
        let count = libc::c_uint::try_from(n).map_err(|_| einval("batch too large"))?;
        // SAFETY: the first `n` entries of `msgs` are initialised above;
        // each points at two `iovs` entries of this batch, which point at
        // parts borrowed mutably (`'a`) for this call, and at its own
        // `control` buffer of `msg_controllen` bytes. The kernel writes at
        // most `iov_len` bytes into each part, at most `msg_controllen`
        // into each control buffer, and the length and flag fields.
        let rc = unsafe {
            libc::recvmmsg(
                fd.as_fd().as_raw_fd(),
                self.msgs.as_mut_ptr(),
                count,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        match cvt(rc) {
            Ok(k) => {
                self.received = (k as usize).min(n);
                Ok(self.received)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Message `i` of the last [`RecvBatch::recv`] (`None` beyond what it
    /// received).
    pub(crate) fn received(&self, i: usize) -> Option<Received> {
        if i >= self.received {
            return None;
        }
        let msg = self.msgs.get(i)?;
        let control = self.control.get(i)?;
        let mut bytes = [0u8; CONTROL_WORDS * 8];
        for (chunk, word) in bytes.chunks_exact_mut(8).zip(control) {
            chunk.copy_from_slice(&word.to_ne_bytes());
        }
        let used = msg.msg_hdr.msg_controllen.min(bytes.len());
        Some(Received {
            len: msg.msg_len as usize,
            truncated: msg.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            aux: auxdata(&bytes[..used]),
        })
    }
}

/// The `SOL_PACKET`/`PACKET_AUXDATA` message among the control messages
/// in `control` (parsed by hand: `cmsghdr` is `cmsg_len` (a `size_t`),
/// level and type (`int`s), then the data at the next `size_t` boundary).
fn auxdata(control: &[u8]) -> Option<libc::tpacket_auxdata> {
    const WORD: usize = size_of::<usize>();
    let data_at = size_of::<libc::cmsghdr>().next_multiple_of(WORD);
    let int = |b: &[u8], at: usize| -> Option<i32> {
        Some(i32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let mut at = 0;
    while let Some(rest) = control.get(at..) {
        let len = usize::from_ne_bytes(rest.get(..WORD)?.try_into().ok()?);
        if len < data_at || len > rest.len() {
            return None;
        }
        let (level, kind) = (int(rest, WORD)?, int(rest, WORD + 4)?);
        if level == libc::SOL_PACKET && kind == libc::PACKET_AUXDATA {
            let d = rest.get(data_at..len)?;
            let u32_at = |o: usize| Some(u32::from_ne_bytes(d.get(o..o + 4)?.try_into().ok()?));
            let u16_at = |o: usize| Some(u16::from_ne_bytes(d.get(o..o + 2)?.try_into().ok()?));
            return Some(libc::tpacket_auxdata {
                tp_status: u32_at(0)?,
                tp_len: u32_at(4)?,
                tp_snaplen: u32_at(8)?,
                tp_mac: u16_at(12)?,
                tp_net: u16_at(14)?,
                tp_vlan_tci: u16_at(16)?,
                tp_vlan_tpid: u16_at(18)?,
            });
        }
        at += len.next_multiple_of(WORD);
    }
    None
}

/// One datagram into `buf` (blocking); returns its length.
pub(crate) fn recv(fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes; the
    // kernel writes at most that many.
    let rc = unsafe {
        libc::recv(
            fd.as_fd().as_raw_fd(),
            buf.as_mut_ptr().cast::<libc::c_void>(),
            buf.len(),
            0,
        )
    };
    cvt_size(rc)
}

/// `poll(2)` over `fds`; returns how many have events (0 on timeout).
pub(super) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    let nfds = libc::nfds_t::try_from(fds.len()).map_err(|_| einval("too many fds"))?;
    // SAFETY: `fds` is a live, writable slice of `nfds` pollfd structs; the
    // kernel writes only their `revents` fields.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), nfds, timeout_ms) };
    cvt(rc).map(|n| n as usize)
}

/// The system page size (ring blocks and UMEM chunks are measured in it).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(v).ok().filter(|&p| p > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One control message as the kernel lays it out: `cmsghdr`, then the
    /// data at the next `size_t` boundary, padded to a whole `size_t`.
    fn cmsg(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
        let word = size_of::<usize>();
        let data_at = size_of::<libc::cmsghdr>().next_multiple_of(word);
        let len = data_at + data.len();
        let mut b = vec![0u8; len.next_multiple_of(word)];
        b[..word].copy_from_slice(&len.to_ne_bytes());
        b[word..word + 4].copy_from_slice(&level.to_ne_bytes());
        b[word + 4..word + 8].copy_from_slice(&kind.to_ne_bytes());
        b[data_at..len].copy_from_slice(data);
        b
    }

    #[test]
    fn auxdata_is_found_behind_another_message_and_a_bad_length_is_refused() {
        let mut aux = Vec::new();
        for v in [0x11u32, 1500, 1400] {
            aux.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [0u16, 14, 42, 0x88a8] {
            aux.extend_from_slice(&v.to_ne_bytes());
        }
        let mut control = cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMP, &[7; 16]);
        control.extend(cmsg(libc::SOL_PACKET, libc::PACKET_AUXDATA, &aux));
        let a = auxdata(&control).expect("found");
        assert_eq!((a.tp_status, a.tp_len, a.tp_snaplen), (0x11, 1500, 1400));
        assert_eq!((a.tp_net, a.tp_vlan_tci, a.tp_vlan_tpid), (14, 42, 0x88a8));
        // Only some other message; a length past the buffer; nothing.
        assert!(auxdata(&cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMP, &[7; 16])).is_none());
        let mut long = cmsg(libc::SOL_PACKET, libc::PACKET_AUXDATA, &aux);
        long[..size_of::<usize>()].copy_from_slice(&4096usize.to_ne_bytes());
        assert!(auxdata(&long).is_none());
        assert!(auxdata(&[]).is_none());
    }
}
