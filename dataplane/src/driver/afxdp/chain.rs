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
use super::umem::{Umem, XdpFrame};
use super::{XDP_HEADROOM, sys};
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::afxdp::XdpRingConfig;
    use crate::driver::afxdp::ring::Entry;

    const CHUNK: u32 = 4096;
    /// A 9000-byte MTU's largest frame.
    const MAX_FRAME: u32 = 9018;

    fn ring(size: u32) -> Ring {
        let mut r = Ring::anonymous(Entry::Desc, size);
        r.init_consumer();
        r
    }

    fn umem(spans: u32) -> Umem {
        let rings = XdpRingConfig {
            frame_size: CHUNK,
            umem_frames: 32,
            ..XdpRingConfig::default()
        };
        Umem::new("test", &rings, span_chunks(CHUNK, MAX_FRAME), spans).expect("umem")
    }

    /// Play the kernel's copy-mode RX: split `bytes` over free chunks
    /// (3840 bytes each after the headroom) onto `rx` from index `at`;
    /// returns the descriptors written.
    fn kernel_receive(rx: &mut Ring, u: &mut Umem, at: u32, bytes: &[u8]) -> u32 {
        let per = (CHUNK - XDP_HEADROOM) as usize;
        let parts: Vec<&[u8]> = bytes.chunks(per).collect();
        for (i, part) in parts.iter().enumerate() {
            let base = u.free.pop().expect("a free chunk");
            let addr = base + u64::from(XDP_HEADROOM);
            let mut f = u.frame(0, addr, part.len() as u32).expect("chunk frame");
            f.data_mut().copy_from_slice(part);
            let options = if i + 1 < parts.len() {
                libc::XDP_PKT_CONTD
            } else {
                0
            };
            let d = Desc {
                addr,
                len: part.len() as u32,
                options,
            };
            rx.kernel_write_desc(at + i as u32, d);
        }
        parts.len() as u32
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn a_chain_is_reassembled_into_one_contiguous_frame_and_its_chunks_come_back() {
        let mut rx = ring(64);
        let mut u = umem(4);
        let free_before = u.free.len();
        let big = pattern(9014);
        let small = pattern(60);
        let n = kernel_receive(&mut rx, &mut u, 0, &big);
        assert_eq!(n, 3, "9014 bytes take three 3840-byte buffers");
        let m = kernel_receive(&mut rx, &mut u, n, &small);
        rx.set_shared_producer(n + m);
        let ready = rx.available(64);
        let RxPacket::Frame { frame, used } =
            take_packet(&rx, &mut u, 0, 0, ready, false, MAX_FRAME)
        else {
            panic!("a frame");
        };
        assert_eq!(used, 3);
        assert_eq!(frame.data(), &big[..], "bytes in order, contiguous");
        assert!(u.in_span(frame.addr), "reassembled in a span");
        assert_eq!(
            u.free.len(),
            free_before - 1,
            "the chain's chunks are free again"
        );
        let RxPacket::Frame { frame: f2, used } =
            take_packet(&rx, &mut u, 0, 3, ready - 3, false, MAX_FRAME)
        else {
            panic!("the next frame");
        };
        assert_eq!(
            (used, f2.data()),
            (1, &small[..]),
            "a single buffer is no chain"
        );
        assert!(!u.in_span(f2.addr));
    }

    #[test]
    fn a_chain_cut_by_the_burst_waits_and_one_that_cannot_end_is_dropped() {
        let mut rx = ring(64);
        let mut u = umem(4);
        let n = kernel_receive(&mut rx, &mut u, 0, &pattern(9000));
        // Only the first two buffers are visible to this burst.
        assert!(matches!(
            take_packet(&rx, &mut u, 0, 0, n - 1, false, MAX_FRAME),
            RxPacket::Incomplete
        ));
        // The same, with a full ring: the chain can never end.
        let free = u.free.len();
        assert!(matches!(
            take_packet(&rx, &mut u, 0, 0, n - 1, true, MAX_FRAME),
            RxPacket::BadChain { used: 2 }
        ));
        assert_eq!(u.free.len(), free + 2, "its buffers are given back");
    }

    #[test]
    fn bad_chains_are_dropped_by_reason() {
        // Longer than the port's largest frame: too big.
        let mut rx = ring(64);
        let mut u = umem(4);
        let free = u.free.len();
        let n = kernel_receive(&mut rx, &mut u, 0, &pattern(9100));
        assert!(matches!(
            take_packet(&rx, &mut u, 0, 0, n, false, MAX_FRAME),
            RxPacket::TooBig { used: 3 }
        ));
        assert_eq!(u.free.len(), free);

        // More buffers than one packet may have: bad chain.
        let mut rx = ring(64);
        let mut u = umem(4);
        for i in 0..=MAX_CHAIN_DESCS {
            let options = if i < MAX_CHAIN_DESCS {
                libc::XDP_PKT_CONTD
            } else {
                0
            };
            let addr = u.free.pop().expect("chunk") + u64::from(XDP_HEADROOM);
            rx.kernel_write_desc(
                i,
                Desc {
                    addr,
                    len: 100,
                    options,
                },
            );
        }
        assert!(matches!(
            take_packet(&rx, &mut u, 0, 0, MAX_CHAIN_DESCS + 1, false, u32::MAX),
            RxPacket::BadChain { used } if used == MAX_CHAIN_DESCS + 1
        ));
        assert_eq!(u.free.len(), 32, "every buffer back");

        // A buffer crossing its chunk, or outside the UMEM: bad chain.
        let mut rx = ring(64);
        let mut u = umem(4);
        rx.kernel_write_desc(
            0,
            Desc {
                addr: 256,
                len: 3840,
                options: libc::XDP_PKT_CONTD,
            },
        );
        rx.kernel_write_desc(
            1,
            Desc {
                addr: 4096 + 300,
                len: 3840,
                options: 0,
            },
        );
        assert!(matches!(
            take_packet(&rx, &mut u, 0, 0, 2, false, MAX_FRAME),
            RxPacket::BadChain { used: 2 }
        ));
        rx.kernel_write_desc(
            2,
            Desc {
                addr: 256,
                len: 100,
                options: libc::XDP_PKT_CONTD,
            },
        );
        rx.kernel_write_desc(
            3,
            Desc {
                addr: 1 << 40,
                len: 100,
                options: 0,
            },
        );
        assert!(matches!(
            take_packet(&rx, &mut u, 0, 2, 2, false, MAX_FRAME),
            RxPacket::BadChain { used: 2 }
        ));

        // No span free: dropped, buffers back.
        let mut rx = ring(64);
        let mut u = umem(0);
        let free = u.free.len();
        let n = kernel_receive(&mut rx, &mut u, 0, &pattern(5000));
        assert!(matches!(
            take_packet(&rx, &mut u, 0, 0, n, false, MAX_FRAME),
            RxPacket::NoSpan { used: 2 }
        ));
        assert_eq!(u.free.len(), free);
    }

    #[test]
    fn a_span_frame_is_split_per_chunk_on_tx_and_freed_after_its_last_completion() {
        let mut tx = Ring::anonymous(Entry::Desc, 64);
        tx.init_producer();
        let mut u = umem(2);
        let bytes = pattern(9018);
        let f = u.frame_with(0, &bytes).expect("a span");
        let spans_free = u.spans.free.len();
        assert_eq!(descs_for(CHUNK, f.addr, f.len), 3);
        assert_eq!(push_frame(&mut tx, &mut u, f.addr, f.len), 3);
        tx.submit();
        let descs: Vec<Desc> = (0..3)
            .map(|i| tx.kernel_read_desc(i).expect("desc"))
            .collect();
        let base = f.addr - u64::from(XDP_HEADROOM);
        assert_eq!(
            descs,
            vec![
                Desc {
                    addr: f.addr,
                    len: 3840,
                    options: libc::XDP_PKT_CONTD
                },
                Desc {
                    addr: base + 4096,
                    len: 4096,
                    options: libc::XDP_PKT_CONTD
                },
                Desc {
                    addr: base + 8192,
                    len: 9018 - 3840 - 4096,
                    options: 0
                },
            ]
        );
        // The buffers, laid end to end, are the frame.
        let mut joined = Vec::new();
        for d in &descs {
            let g = u.frame(0, d.addr, d.len).expect("view");
            joined.extend_from_slice(g.data());
        }
        assert_eq!(joined, bytes);
        // Completions come back one per descriptor.
        u.complete(descs[0].addr);
        u.complete(descs[1].addr);
        assert_eq!(u.spans.free.len(), spans_free, "still out");
        u.complete(descs[2].addr);
        assert_eq!(u.spans.free.len(), spans_free + 1, "free after the last");
        // A frame of one chunk is one descriptor without options.
        let g = u.frame_with(0, &bytes[..1500]).expect("a chunk");
        assert!(!u.in_span(g.addr));
        assert_eq!(push_frame(&mut tx, &mut u, g.addr, g.len), 1);
        assert_eq!(tx.kernel_read_desc(3), Some(Desc::single(g.addr, 1500)));
    }

    #[test]
    fn spans_are_sized_for_the_largest_frame() {
        assert_eq!(span_chunks(4096, 9018), 3);
        assert_eq!(span_chunks(2048, 9018), 5);
        assert_eq!(span_chunks(4096, 1518), 2, "at least two chunks");
        assert_eq!(descs_for(4096, 256, 3840), 1);
        assert_eq!(descs_for(4096, 256, 3841), 2);
    }
}
