//! Multi-buffer AF_XDP (`XDP_USE_SG`, Linux 6.6+;
//! Documentation/networking/af_xdp.rst "Multi-Buffer Support"): a packet
//! larger than one UMEM chunk travels as a chain of descriptors, every one
//! but the last with `XDP_PKT_CONTD` in `options`.
//!
//! What this driver does with chains:
//!
//! * **RX** ([`take_packet`]): a chain is copied, in order, into one free
//!   *span* (consecutive chunks after the UMEM's chunks, see `umem.rs`) at
//!   the XDP headroom, and its chunks go straight back to the free list, so
//!   the pipeline sees one contiguous frame like any other. Headers are in
//!   the first buffer anyway; the copy is what keeps every stage (length
//!   checks against the IP header, ICMP errors quoting the packet) unaware
//!   of chains. The pipeline rewrites only headers and updates the L4
//!   checksum incrementally (RFC 1624: old and new header words, no
//!   payload), so a payload spread over buffers never needs summing.
//! * **TX** ([`push_frame`]): a frame in a span goes out as one descriptor
//!   per chunk it covers, in order, `XDP_PKT_CONTD` on all but the last;
//!   the completion ring returns each descriptor's address, and the span
//!   is free again when the last one is back (`Umem::complete`).
//! * **Bad chains** are dropped whole and counted (`rx_bad_chain`): more
//!   than [`MAX_CHAIN_DESCS`] buffers, a buffer outside the UMEM or its
//!   chunk, or a chain still open when a whole RX ring's worth of
//!   descriptors is ready (it can never complete). A chain longer than the
//!   port's largest frame is `rx_too_big`, as a single buffer would be.
//!   The kernel publishes a packet's descriptors together (`xsk_flush`
//!   after `__xsk_rcv` wrote them all), so a chain cut by the burst size is
//!   not an error: it is left for the next burst.
//!
//! Kernel facts this rests on (Linux 6.18, `net/xdp/xsk.c`):
//!
//! * `xsk_rcv_check`/`__xsk_rcv`: without `XDP_USE_SG` a packet longer
//!   than the RX frame size (chunk − 256 headroom) is dropped and counted
//!   in `rx_dropped`; with it, copy mode splits the packet (linear part and
//!   frags) over `(len − 1) / frame_size + 1` buffers, each `XDP_PKT_CONTD`
//!   but the last. The skb's `gso_size`, `gso_type` and `ip_summed` are not
//!   carried: an XSK descriptor has address, length and options only (RX
//!   metadata kfuncs give hash, timestamp and VLAN tag, nothing of GSO).
//! * `xsk_bind`: `XDP_USE_SG` is a UMEM flag (`XDP_UMEM_SG_FLAG`); sockets
//!   sharing the UMEM (`XDP_SHARED_UMEM`) may not pass it and inherit it
//!   (`xs->sg`). Kernels before 6.6 reject the unknown bind flag with
//!   `EINVAL`; a zero-copy driver without multi-buffer support refuses it
//!   (`xp_assign_dev`, `EOPNOTSUPP`).
//! * `xsk_build_skb` (copy-mode TX): the first descriptor becomes the
//!   linear part, each further one a page frag (`alloc_page` + copy);
//!   `MAX_SKB_FRAGS` frags at most (`-EOVERFLOW` drops the packet, counted
//!   in `tx_invalid_descs`). The skb is sent by `__dev_direct_xmit` with
//!   no GSO type, and veth's `veth_xmit` → `__dev_forward_skb` →
//!   `is_skb_forwardable` drops a non-GSO skb longer than the peer's MTU +
//!   hard header + VLAN header. So AF_XDP TX cannot hand the kernel a
//!   super-packet to segment: there is no GSO field in an XSK descriptor
//!   or in `struct xsk_tx_metadata`.
//! * `xsk_skb_metadata`: TX metadata (`XDP_TX_METADATA` in `options`, a
//!   `tx_metadata_len` UMEM, Linux 6.8+) offers `XDP_TXMD_FLAGS_CHECKSUM`
//!   (`csum_start`/`csum_offset`, `CHECKSUM_PARTIAL`) and launch time;
//!   nothing else.
//! * veth (`drivers/net/veth.c`): `veth_xdp_set` refuses a program without
//!   `BPF_F_XDP_HAS_FRAGS` when the peer's MTU exceeds one page minus the
//!   XDP headroom ("Peer MTU is too large to set XDP"), so jumbo frames on
//!   native veth XDP need the frags flag (`bpf.rs` loads with it); and
//!   `veth_xmit` skips the NAPI (XDP) path for a GSO skb when the sender
//!   has TSO on (`veth_skb_is_eligible_for_gro`), as before.
//!
//! What "GSO pass-through" can be on AF_XDP here: RX can take a GRO
//! super-packet whole (a chain of up to 17 buffers) but without its
//! segment size, and TX cannot give one back to the kernel to segment; so
//! forwarding one would mean segmenting in software with full checksums.
//! The driver does not: such a packet is larger than the port's largest
//! frame and is dropped as `rx_too_big`, and the gateway's veth peers run
//! with TSO off (which the native path needs anyway). Jumbo frames (MTU
//! 9000) are what multi-buffer gives: three 4096-byte chunks per packet.

use super::ring::{Desc, Ring};
use super::{XDP_HEADROOM, sys};
use super::umem::{Umem, XdpFrame};
use crate::driver::Frame;

/// Most buffers in one packet: the linear part plus `MAX_SKB_FRAGS` (17)
/// frags, what copy-mode TX accepts (`xsk_build_skb`).
pub const MAX_CHAIN_DESCS: u32 = 18;

/// What [`take_packet`] found at the head of the RX ring.
#[derive(Debug)]
pub(super) enum RxPacket {
    /// One packet (a single buffer, or a chain copied into a span);
    /// `used` descriptors consumed.
    Frame { frame: XdpFrame, used: u32 },
    /// A chain above the port's largest frame, dropped.
    TooBig { used: u32 },
    /// A bad chain (see the module docs), dropped.
    BadChain { used: u32 },
    /// A descriptor outside the UMEM or its chunk, dropped.
    BadDesc { used: u32 },
    /// No span free for a chain: dropped (chunks returned).
    NoSpan { used: u32 },
    /// The chain's end is not in the ring yet: consume nothing.
    Incomplete,
}

/// The packet starting at consumer position `at` of `rx`, with `ready`
/// descriptors ready from `at` on; `ring_full` says the ring holds a full
/// ring's worth (an open chain then never completes). Buffers of dropped
/// or copied packets go back to `umem`'s free list.
pub(super) fn take_packet(
    rx: &Ring,
    umem: &mut Umem,
    index: u8,
    at: u32,
    ready: u32,
    ring_full: bool,
    max_frame: u32,
) -> RxPacket {
    let Some(first) = rx.peek_desc(at) else {
        return RxPacket::BadDesc { used: 1 };
    };
    if !first.continues() {
        if first.addr >= umem.map.len() as u64 || umem.in_span(first.addr) {
            return RxPacket::BadDesc { used: 1 };
        }
        if first.len > max_frame {
            umem.give_back(first.addr);
            return RxPacket::TooBig { used: 1 };
        }
        return match umem.frame(index, first.addr, first.len) {
            Some(frame) => RxPacket::Frame { frame, used: 1 },
            None => {
                umem.give_back(first.addr);
                RxPacket::BadDesc { used: 1 }
            }
        };
    }
    // Find the chain's end and check every buffer before copying.
    let mut used = 0u32;
    let mut total = 0u64;
    let mut bad = false;
    loop {
        if used == ready {
            if ring_full {
                give_back_all(rx, umem, at, used);
                return RxPacket::BadChain { used };
            }
            return RxPacket::Incomplete;
        }
        let Some(d) = rx.peek_desc(at.wrapping_add(used)) else {
            give_back_all(rx, umem, at, used);
            return RxPacket::BadChain { used: used + 1 };
        };
        used += 1;
        total += u64::from(d.len);
        bad |= !buffer_ok(umem, d);
        if !d.continues() {
            break;
        }
    }
    let over_limit = used > MAX_CHAIN_DESCS;
    if bad || over_limit {
        give_back_all(rx, umem, at, used);
        return RxPacket::BadChain { used };
    }
    if total > u64::from(max_frame) {
        give_back_all(rx, umem, at, used);
        return RxPacket::TooBig { used };
    }
    let Some(mut frame) = umem.frame_of_len(index, total as usize) else {
        give_back_all(rx, umem, at, used);
        return RxPacket::NoSpan { used };
    };
    let mut off = 0usize;
    for i in 0..used {
        let Some(d) = rx.peek_desc(at.wrapping_add(i)) else {
            break;
        };
        let len = d.len as usize;
        if let Some(dst) = frame.data_mut().get_mut(off..off + len) {
            sys::copy_from_umem(&umem.map, d.addr as usize, dst);
        }
        off += len;
        umem.give_back(d.addr);
    }
    RxPacket::Frame { frame, used }
}

/// A received buffer lies in one chunk of the UMEM (never in a span).
fn buffer_ok(umem: &Umem, d: Desc) -> bool {
    let end = d.addr.saturating_add(u64::from(d.len));
    let chunk = u64::from(umem.frame_size);
    d.addr < umem.map.len() as u64
        && !umem.in_span(d.addr)
        && d.len > 0
        && (end - 1) / chunk == d.addr / chunk
}

/// Return the buffers of `n` descriptors from `at` to the free list.
fn give_back_all(rx: &Ring, umem: &mut Umem, at: u32, n: u32) {
    for i in 0..n {
        if let Some(d) = rx.peek_desc(at.wrapping_add(i)) {
            umem.give_back(d.addr);
        }
    }
}

/// Descriptors a frame of `len` bytes at `addr` needs: one per chunk its
/// bytes touch.
#[inline]
pub(super) fn descs_for(frame_size: u32, addr: u64, len: u32) -> u32 {
    if len == 0 {
        return 1;
    }
    let chunk = u64::from(frame_size);
    let last = (addr + u64::from(len) - 1) / chunk;
    (last - addr / chunk + 1) as u32
}

/// Queue a frame of `len` bytes at UMEM address `addr` on `tx`: one
/// descriptor, or one per chunk of its span with `XDP_PKT_CONTD` on all
/// but the last. The caller checked there is room for
/// [`descs_for`] entries. Returns the descriptors written (0: the ring
/// mapping refused the first, nothing queued).
pub(super) fn push_frame(tx: &mut Ring, umem: &mut Umem, addr: u64, len: u32) -> u32 {
    let chunk = u64::from(umem.frame_size);
    let n = descs_for(umem.frame_size, addr, len);
    if n == 1 {
        return u32::from(tx.push_desc(Desc::single(addr, len)));
    }
    let mut at = addr;
    let mut left = u64::from(len);
    let mut written = 0u32;
    while left > 0 {
        let room = chunk - at % chunk;
        let part = left.min(room);
        left -= part;
        let options = if left > 0 { libc::XDP_PKT_CONTD } else { 0 };
        if !tx.push_desc(Desc {
            addr: at,
            len: part as u32,
            options,
        }) {
            break;
        }
        written += 1;
        at += part;
    }
    umem.span_sent(addr, written.min(u32::from(u8::MAX)) as u8);
    written
}

/// Bytes a span must hold for a frame of `max_frame` bytes after the XDP
/// headroom, in chunks of `frame_size` (at least 2: a span is for frames
/// that do not fit one chunk).
pub(super) fn span_chunks(frame_size: u32, max_frame: u32) -> u32 {
    (max_frame + XDP_HEADROOM).div_ceil(frame_size).max(2)
}
