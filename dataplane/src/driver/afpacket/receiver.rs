//! The [`RxPath::Recvmsg`](super::RxPath::Recvmsg) path: the port's socket
//! has no RX ring, and each burst is one `recvmmsg(2)` straight into pool
//! buffers.
//!
//! Why (bench/RESULTS.md "GSO on veth: recvmmsg into the pool"): with an
//! RX ring a 64 KiB super-packet is copied twice before the pipeline sees
//! it — into the ring slot by the sender's softirq, then from the slot
//! into a pool buffer by the walk. `recvmmsg` copies the skb once, into
//! the buffer the frame is then processed and sent from.
//!
//! Each message is scattered into two parts: the `virtio_net_hdr` (with
//! `gso`, which the kernel writes first under `PACKET_VNET_HDR`) into a
//! header array of ours, the frame into a posted pool buffer of the
//! largest frame's size (a big one with `gso`). `PACKET_AUXDATA` brings
//! the fields the ring header would have held (`tp_status`, `tp_len`, the
//! VLAN tag the kernel moved out of the frame) as a control message, so
//! every frame passes the same checks and fix-ups as on the ring
//! (`port::rx_admit`, `port::rx_finish`): too big, truncated (`MSG_TRUNC`
//! or a snap length short of the wire length), offload, checksum.
//!
//! Buffers: up to [`BATCH`] pool buffers stay posted between bursts, and
//! at most half a receiver's share of their size class
//! ([`MsgReceiver::limit_posted`]: the pool serves every port and the
//! pipeline's own frames too, so several receivers must not hold all of
//! it between bursts). A
//! received frame that fits a small buffer is copied down into one (at
//! most an MTU's worth of bytes) and its big buffer stays posted; a
//! larger frame leaves in its buffer, whose slot is refilled from the pool
//! before the next call. When no buffer can be posted the burst makes no
//! call (`rx_pool_empty`): frames wait in the socket's receive queue,
//! which is sized for several batches of super-packets (`SO_RCVBUFFORCE`);
//! beyond it the kernel drops and counts them (`PACKET_STATISTICS`).
//!
//! Invariants: `recv` allocates nothing and makes exactly one `recvmmsg`
//! per call when a buffer is posted, none otherwise; every pool buffer is
//! either posted here, in the caller's hands, or back in the pool.

use super::pool::Pools;
use super::port::{RxContext, RxHeader, decode_offload, rx_admit, rx_finish};
use super::{AfPacketFrame, fixup};
use crate::driver::sys;
use crate::packet::Offload;
use crate::wire::vnet;
use std::io;
use std::os::fd::AsFd;

/// Datagrams per `recvmmsg` (and buffers posted).
pub(super) const BATCH: usize = 32;

/// `SO_RCVBUFFORCE`: room for four batches of super-packets waiting (the
/// kernel charges each skb's true size, a little above its length).
pub(super) const RCVBUF_BYTES: libc::c_int =
    (4 * BATCH * (super::pool::GSO_MAX_FRAME + 4096)) as libc::c_int;

/// A port's posted buffers and the preallocated batch.
#[derive(Debug)]
pub(super) struct MsgReceiver {
    batch: sys::RecvBatch,
    /// Buffers the next call receives into (`None`: the pool had none).
    posted: Vec<Option<AfPacketFrame>>,
    /// The `virtio_net_hdr` of each message.
    headers: Vec<[u8; vnet::HEADER_LEN]>,
    /// Bytes of the buffers to post: the largest frame the port takes.
    buf_len: usize,
    /// `PACKET_VNET_HDR` is on: each datagram starts with a header.
    gso: bool,
}

/// Set up a port socket without an RX ring for [`MsgReceiver`]: the
/// auxiliary data and a receive buffer for a few batches. The error names
/// the failed option.
pub(super) fn configure(fd: impl AsFd) -> Result<(), (&'static str, io::Error)> {
    let one: libc::c_int = 1;
    sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_AUXDATA, &one)
        .map_err(|e| ("PACKET_AUXDATA", e))?;
    // FORCE needs CAP_NET_ADMIN (which opening the ports needs anyway);
    // without it the kernel caps SO_RCVBUF at rmem_max.
    if sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &RCVBUF_BYTES).is_err() {
        sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &RCVBUF_BYTES)
            .map_err(|e| ("SO_RCVBUF", e))?;
    }
    Ok(())
}

impl MsgReceiver {
    /// A receiver posting buffers of `buf_len` bytes (none posted yet:
    /// the first call takes them from the pool).
    pub(super) fn new(buf_len: usize, gso: bool) -> Self {
        MsgReceiver {
            batch: sys::RecvBatch::new(BATCH),
            posted: (0..BATCH).map(|_| None).collect(),
            headers: vec![[0; vnet::HEADER_LEN]; BATCH],
            buf_len,
            gso,
        }
    }

    /// Bytes of each buffer this receiver posts.
    pub(super) fn buf_len(&self) -> usize {
        self.buf_len
    }

    /// Post at most `buffers` buffers (at least one, at most [`BATCH`]);
    /// any posted beyond that go back to `pool`. Each `recvmmsg` then
    /// takes at most that many datagrams.
    pub(super) fn limit_posted(&mut self, buffers: usize, pool: &mut Pools) {
        let keep = buffers.clamp(1, BATCH);
        for f in self.posted.drain(keep.min(self.posted.len())..).flatten() {
            pool.push(f);
        }
    }

    /// Buffers posted (taken from the pool, not in anyone's hands).
    pub(super) fn posted(&self) -> usize {
        self.posted.iter().flatten().count()
    }

    /// Receive up to `max` frames from `fd` into pool buffers appended to
    /// `out` (one `recvmmsg`); returns how many it appended. Frames that
    /// fail a check are counted and their buffer reused.
    pub(super) fn recv(
        &mut self,
        fd: impl AsFd,
        mut ctx: RxContext<'_>,
        pool: &mut Pools,
        out: &mut Vec<AfPacketFrame>,
        max: usize,
    ) -> usize {
        for slot in self.posted.iter_mut().filter(|s| s.is_none()) {
            *slot = pool.pop_for(self.buf_len);
        }
        let vnet_len = if self.gso { vnet::HEADER_LEN } else { 0 };
        let messages = self
            .posted
            .iter_mut()
            .filter_map(Option::as_mut)
            .zip(self.headers.iter_mut())
            .take(max)
            .map(|(f, h)| [&mut h[..vnet_len], &mut f.buf[..]]);
        let received = match self.batch.recv(&fd, messages) {
            Ok(n) => n,
            Err(_) => {
                ctx.stats.socket_errors += 1;
                let _ = sys::take_socket_error(&fd);
                return 0;
            }
        };
        if received == 0 && self.posted.iter().all(Option::is_none) {
            ctx.stats.rx_pool_empty += 1;
        }
        let mut taken = 0;
        let mut message = 0;
        for slot in &mut self.posted {
            if message == received {
                break;
            }
            let Some(buf) = slot.as_ref() else {
                continue;
            };
            let header = self.headers.get(message).copied().unwrap_or_default();
            let got = self.batch.received(message);
            message += 1;
            let Some(rx) = got.and_then(|r| admit(r, &header, vnet_len, buf, &mut ctx)) else {
                continue;
            };
            let stats = &mut *ctx.stats;
            let small = rx.len <= pool.small_capacity && buf.buf.len() > pool.small_capacity;
            let frame = match small.then(|| pool.pop_for(rx.len)).flatten() {
                // Copy a small frame down; the big buffer stays posted.
                Some(mut f) => {
                    if copy_down(buf, &mut f, &rx) {
                        Some(f)
                    } else {
                        pool.push(f);
                        None
                    }
                }
                None => slot.take().and_then(|mut f| {
                    if restore_in_place(&mut f, &rx) {
                        Some(f)
                    } else {
                        *slot = Some(f);
                        None
                    }
                }),
            };
            let Some(mut frame) = frame else {
                stats.rx_ring_errors += 1;
                continue;
            };
            frame.len = rx.len;
            rx_finish(&mut frame, &rx.header, rx.offload, stats);
            stats.rx_frames += 1;
            stats.rx_bytes += frame.len as u64;
            out.push(frame);
            taken += 1;
        }
        taken
    }
}

/// A received frame that passed the checks.
struct Admitted {
    header: RxHeader,
    offload: Offload,
    /// Bytes in the buffer (without a tag the kernel moved out).
    snap: usize,
    /// Bytes of the frame once its tag is back.
    len: usize,
    /// Put the tag from `header` back at offset 12.
    restore: bool,
}

/// The checks of the RX ring (`port::rx_admit`) on message `r`, whose
/// `virtio_net_hdr` is `raw_vnet` and frame is in `buf`. `None` (counted)
/// when the frame is dropped.
fn admit(
    r: sys::Received,
    raw_vnet: &[u8; vnet::HEADER_LEN],
    vnet_len: usize,
    buf: &AfPacketFrame,
    ctx: &mut RxContext<'_>,
) -> Option<Admitted> {
    let stats = &mut *ctx.stats;
    let (Some(snap), Some(aux)) = (r.len.checked_sub(vnet_len), r.aux) else {
        stats.rx_ring_errors += 1;
        return None;
    };
    let header = RxHeader {
        // MSG_TRUNC: fewer bytes than the wire length, caught below.
        snaplen: snap.min(buf.buf.len()),
        len: aux.tp_len as usize,
        status: aux.tp_status,
        mac: 0,
        vlan_tci: aux.tp_vlan_tci,
        vlan_tpid: aux.tp_vlan_tpid,
    };
    let tag_in_meta = header.tag_in_meta();
    let tag_len = if tag_in_meta { 4 } else { 0 };
    let tagged = tag_in_meta
        || buf.buf.get(12..14).is_some_and(|et| {
            header.snaplen >= 14 && fixup::is_vlan_tpid(u16::from_be_bytes([et[0], et[1]]))
        });
    let offload = if ctx.gso {
        let Some(o) = decode_offload(raw_vnet, tag_len as u16) else {
            stats.rx_offload_bad += 1;
            return None;
        };
        o
    } else {
        Offload::NONE
    };
    if r.truncated && header.snaplen >= header.len {
        // The kernel's wire length disagrees with MSG_TRUNC: trust the flag.
        stats.rx_truncated += 1;
        return None;
    }
    if !rx_admit(&header, tagged, tag_len, offload, ctx.mtu, stats) {
        return None;
    }
    let restore = tag_in_meta && header.snaplen >= 12;
    Some(Admitted {
        snap: header.snaplen,
        len: header.snaplen + if restore { 4 } else { 0 },
        header,
        offload,
        restore,
    })
}

/// Copy the frame in `from` into `to`, its tag put back on the way.
fn copy_down(from: &AfPacketFrame, to: &mut AfPacketFrame, rx: &Admitted) -> bool {
    let (Some(src), Some(dst)) = (from.buf.get(..rx.snap), to.buf.get_mut(..rx.len)) else {
        return false;
    };
    if rx.restore {
        let (addrs, rest) = dst.split_at_mut(12);
        let (tag, payload) = rest.split_at_mut(4);
        addrs.copy_from_slice(&src[..12]);
        tag.copy_from_slice(&rx.header.tag());
        payload.copy_from_slice(&src[12..]);
    } else {
        dst.copy_from_slice(src);
    }
    true
}

/// Put the tag back in the frame's own buffer (moving all but the MAC
/// addresses up by 4 bytes; only frames whose tag the kernel moved out).
fn restore_in_place(frame: &mut AfPacketFrame, rx: &Admitted) -> bool {
    if !rx.restore {
        return rx.snap <= frame.buf.len();
    }
    if rx.len > frame.buf.len() {
        return false;
    }
    frame.buf.copy_within(12..rx.snap, 16);
    match frame.buf.get_mut(12..16) {
        Some(tag) => {
            tag.copy_from_slice(&rx.header.tag());
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::afpacket::PortStats;

    fn frame(bytes: &[u8], capacity: usize) -> AfPacketFrame {
        let mut buf = vec![0u8; capacity];
        buf[..bytes.len()].copy_from_slice(bytes);
        AfPacketFrame {
            buf: buf.into_boxed_slice(),
            len: 0,
            checksum_verified: false,
            offload: Offload::NONE,
        }
    }

    fn aux(len: u32, status: u32) -> libc::tpacket_auxdata {
        libc::tpacket_auxdata {
            tp_status: status,
            tp_len: len,
            tp_snaplen: len,
            tp_mac: 0,
            tp_net: 14,
            tp_vlan_tci: 0x0123,
            tp_vlan_tpid: 0,
        }
    }

    /// `admit` on one message: what it returns and the counters it left.
    fn run(
        r: sys::Received,
        vnet: [u8; vnet::HEADER_LEN],
        gso: bool,
        buf: &AfPacketFrame,
    ) -> (Option<Admitted>, PortStats) {
        let mut stats = PortStats::default();
        let mut ctx = RxContext {
            mtu: 1500,
            gso,
            stats: &mut stats,
        };
        let vnet_len = if gso { vnet::HEADER_LEN } else { 0 };
        let got = admit(r, &vnet, vnet_len, buf, &mut ctx);
        (got, stats)
    }

    fn received(len: usize, truncated: bool, aux: Option<libc::tpacket_auxdata>) -> sys::Received {
        sys::Received {
            len,
            truncated,
            aux,
        }
    }

    #[test]
    fn each_bad_message_is_dropped_and_counted_where_the_ring_counts_it() {
        let buf = frame(&[0x45; 100], 2048);
        // MSG_TRUNC, whatever tp_len says.
        let (got, s) = run(received(100, true, Some(aux(100, 0))), [0; 10], false, &buf);
        assert!(got.is_none());
        assert_eq!(s.rx_truncated, 1);
        // Fewer bytes than the wire length.
        let (got, s) = run(
            received(100, false, Some(aux(200, 0))),
            [0; 10],
            false,
            &buf,
        );
        assert!(got.is_none());
        assert_eq!(s.rx_truncated, 1);
        // No PACKET_AUXDATA, or not even a vnet header's worth of bytes.
        let (got, s) = run(received(100, false, None), [0; 10], false, &buf);
        assert!(got.is_none());
        assert_eq!(s.rx_ring_errors, 1);
        let (got, s) = run(received(4, false, Some(aux(0, 0))), [0; 10], true, &buf);
        assert!(got.is_none());
        assert_eq!(s.rx_ring_errors, 1);
        // Above the MTU without an offload.
        let (got, s) = run(
            received(1515, false, Some(aux(1515, 0))),
            [0; 10],
            false,
            &buf,
        );
        assert!(got.is_none());
        assert_eq!(s.rx_too_big, 1);
        // UFO (gso_type 3) is not passed on.
        let mut ufo = [0u8; 10];
        ufo[0] = 1;
        ufo[1] = 3;
        ufo[4] = 0xa8;
        ufo[5] = 0x05;
        let (got, s) = run(received(110, false, Some(aux(100, 0))), ufo, true, &buf);
        assert!(got.is_none());
        assert_eq!(s.rx_offload_bad, 1);
        // A good one: the vnet header is not part of the frame.
        let (got, s) = run(received(110, false, Some(aux(100, 0))), [0; 10], true, &buf);
        let got = got.expect("admitted");
        assert_eq!((got.snap, got.len, got.restore), (100, 100, false));
        assert_eq!(s, PortStats::default());
    }

    #[test]
    fn a_tag_the_kernel_moved_out_is_put_back_copied_down_or_in_place() {
        let bytes: Vec<u8> = (0..60u8).collect();
        let big = frame(&bytes, 4096);
        let status = libc::TP_STATUS_VLAN_VALID;
        let (got, _) = run(
            received(60, false, Some(aux(60, status))),
            [0; 10],
            false,
            &big,
        );
        let rx = got.expect("admitted");
        assert_eq!((rx.len, rx.restore), (64, true));
        let mut want = bytes[..12].to_vec();
        want.extend_from_slice(&[0x81, 0x00, 0x01, 0x23]);
        want.extend_from_slice(&bytes[12..]);

        let mut small = frame(&[], 128);
        assert!(copy_down(&big, &mut small, &rx));
        assert_eq!(&small.buf[..64], &want[..]);

        let mut in_place = frame(&bytes, 4096);
        assert!(restore_in_place(&mut in_place, &rx));
        assert_eq!(&in_place.buf[..64], &want[..]);
        // No room for the tag: refused, not truncated.
        let mut tight = frame(&bytes, 62);
        assert!(!restore_in_place(&mut tight, &rx));
    }
}
