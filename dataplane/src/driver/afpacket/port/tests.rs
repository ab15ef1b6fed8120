//! The ring walks against rings faked in anonymous memory: frames as the
//! kernel lays them out, garbage rings (proptest), TX slots.

use super::blocks::{
    BLOCK_FIRST_PKT, BLOCK_NUM_PKTS, BLOCK_STATUS, H_LEN, H_MAC, H_NEXT_OFFSET, H_SNAPLEN,
    H_STATUS, H_VLAN_TCI, H_VLAN_TPID,
};
use super::*;
use crate::driver::Frame;
use crate::wire::tcp::flags as tcp_flags;
use crate::wire::{MacAddr, build, checksum, ipv4};
use proptest::prelude::*;
use std::net::Ipv4Addr;

const BLOCK: usize = 4096;
const MTU: u32 = 1500;
const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

fn pool(n: usize) -> Pools {
    Pools::new(n, fixup::max_frame_len(MTU, true), 0)
}

/// A frame as the kernel would describe it in the ring.
#[derive(Clone, Default)]
struct Fake {
    bytes: Vec<u8>,
    status: u32,
    /// Wire length if different from `bytes.len()` (truncation, too big).
    len: Option<u32>,
    vlan_tci: u16,
    vlan_tpid: u16,
}

fn fake(bytes: Vec<u8>) -> Fake {
    Fake {
        bytes,
        status: libc::TP_STATUS_USER,
        ..Fake::default()
    }
}

/// Lay `frames` out in block `block` the way TPACKET_V3 does and hand
/// the block to user space.
fn write_block(region: &mut Region, block: usize, frames: &[Fake]) {
    write_block_sized(region, BLOCK, block, frames);
}

fn write_block_sized(region: &mut Region, block_size: usize, block: usize, frames: &[Fake]) {
    let base = block * block_size;
    const MAC: usize = 64;
    assert!(region.write_u32(base + BLOCK_NUM_PKTS, frames.len() as u32));
    assert!(region.write_u32(base + BLOCK_FIRST_PKT, 48));
    let mut off = 48;
    for (i, f) in frames.iter().enumerate() {
        let hdr = base + off;
        let next = if i + 1 == frames.len() {
            0
        } else {
            (MAC + f.bytes.len()).div_ceil(16) * 16
        };
        assert!(region.write_u32(hdr + H_NEXT_OFFSET, next as u32));
        assert!(region.write_u32(hdr + H_SNAPLEN, f.bytes.len() as u32));
        assert!(region.write_u32(hdr + H_LEN, f.len.unwrap_or(f.bytes.len() as u32)));
        assert!(region.write_u32(hdr + H_STATUS, f.status));
        assert!(region.write_u16(hdr + H_MAC, MAC as u16));
        assert!(region.write_u32(hdr + H_VLAN_TCI, u32::from(f.vlan_tci)));
        assert!(region.write_u16(hdr + H_VLAN_TPID, f.vlan_tpid));
        assert!(region.copy_in(hdr + MAC, &f.bytes));
        off += next;
    }
    region
        .atomic_u32(base + BLOCK_STATUS)
        .unwrap()
        .store(libc::TP_STATUS_USER, Ordering::Release);
}

fn block_status(region: &Region, block: usize) -> u32 {
    region
        .atomic_u32(block * BLOCK + BLOCK_STATUS)
        .unwrap()
        .load(Ordering::Acquire)
}

fn walk(
    region: &mut Region,
    rx: &mut RxRing,
    stats: &mut PortStats,
    pool: &mut Pools,
    max: usize,
) -> Vec<AfPacketFrame> {
    let mut out = Vec::new();
    let n = rx_walk(
        region,
        rx,
        RxContext {
            mtu: MTU,
            gso: false,
            stats,
        },
        pool,
        &mut out,
        max,
    );
    assert_eq!(n, out.len());
    out
}

fn udp(len: usize, id: u8) -> Vec<u8> {
    let payload = vec![id; len - 42];
    build::eth_ipv4_udp(
        A,
        B,
        Ipv4Addr::new(10, 0, 0, 1),
        1000,
        Ipv4Addr::new(10, 0, 0, 2),
        2000,
        &payload,
    )
}

#[test]
fn walk_copies_frames_returns_blocks_and_wraps() {
    let mut region = Region::anonymous(2 * BLOCK).unwrap();
    let mut rx = RxRing::blocks(BLOCK, 2);
    let (mut stats, mut pool) = (PortStats::default(), pool(16));
    let b0 = [fake(udp(60, 1)), fake(udp(700, 2)), fake(udp(100, 3))];
    let b1 = [fake(udp(1000, 4)), fake(udp(42, 5))];
    write_block(&mut region, 0, &b0);
    write_block(&mut region, 1, &b1);
    let out = walk(&mut region, &mut rx, &mut stats, &mut pool, 64);
    let want: Vec<&[u8]> = b0.iter().chain(&b1).map(|f| &f.bytes[..]).collect();
    let got: Vec<&[u8]> = out.iter().map(|f| f.data()).collect();
    assert_eq!(got, want);
    assert_eq!(block_status(&region, 0), libc::TP_STATUS_KERNEL);
    assert_eq!(block_status(&region, 1), libc::TP_STATUS_KERNEL);
    assert_eq!(stats.rx_frames, 5);
    assert!(!rx.has_frames(&region));
    // Nothing more until the kernel hands block 0 back again.
    assert!(walk(&mut region, &mut rx, &mut stats, &mut pool, 64).is_empty());
    write_block(&mut region, 0, &[fake(udp(80, 6))]);
    let out = walk(&mut region, &mut rx, &mut stats, &mut pool, 64);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].data(), &udp(80, 6)[..]);
}

#[test]
fn a_burst_stops_inside_a_block_and_the_next_resumes_there() {
    let mut region = Region::anonymous(2 * BLOCK).unwrap();
    let mut rx = RxRing::blocks(BLOCK, 2);
    let (mut stats, mut pool) = (PortStats::default(), pool(16));
    let frames: Vec<Fake> = (0..5).map(|i| fake(udp(60 + i, i as u8))).collect();
    write_block(&mut region, 0, &frames);
    let mut got = Vec::new();
    for expect in [2, 2, 1] {
        let out = walk(&mut region, &mut rx, &mut stats, &mut pool, 2);
        assert_eq!(out.len(), expect);
        got.extend(out.iter().map(|f| f.data().to_vec()));
        let released = block_status(&region, 0) == libc::TP_STATUS_KERNEL;
        assert_eq!(released, got.len() == 5, "block returned only when walked");
        assert_eq!(rx.has_frames(&region), got.len() < 5);
    }
    assert_eq!(
        got,
        frames.iter().map(|f| f.bytes.clone()).collect::<Vec<_>>()
    );
}

#[test]
fn an_empty_pool_leaves_frames_in_the_ring() {
    let mut region = Region::anonymous(BLOCK).unwrap();
    let mut rx = RxRing::blocks(BLOCK, 1);
    let (mut stats, mut pool) = (PortStats::default(), pool(1));
    write_block(&mut region, 0, &[fake(udp(60, 1)), fake(udp(61, 2))]);
    let first = walk(&mut region, &mut rx, &mut stats, &mut pool, 64);
    assert_eq!(first.len(), 1);
    assert_eq!(stats.rx_pool_empty, 1);
    assert_eq!(block_status(&region, 0), libc::TP_STATUS_USER);
    pool.extend(first);
    let second = walk(&mut region, &mut rx, &mut stats, &mut pool, 64);
    assert_eq!(second[0].data(), &udp(61, 2)[..]);
    assert_eq!(block_status(&region, 0), libc::TP_STATUS_KERNEL);
}

#[test]
fn status_flags_drive_checks_and_fixups() {
    const BIG_BLOCK: usize = 4 * BLOCK;
    let mut region = Region::anonymous(BIG_BLOCK).unwrap();
    let mut rx = RxRing::blocks(BIG_BLOCK, 1);
    let (mut stats, mut pool) = (PortStats::default(), pool(16));

    // CHECKSUM_PARTIAL TCP: the field holds the pseudo-header sum.
    let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let good_tcp = build::eth_ipv4_tcp(A, B, src, 40000, dst, 80, tcp_flags::SYN, 7, 0, b"");
    let mut partial_tcp = good_tcp.clone();
    let pseudo = checksum::pseudo_header_sum(src, dst, ipv4::protocol::TCP, 20);
    partial_tcp[14 + 20 + 16..14 + 20 + 18].copy_from_slice(&pseudo.to_be_bytes());
    assert_ne!(partial_tcp, good_tcp);

    let untagged = udp(100, 9);
    let tagged = build::with_vlan(&untagged, 42);
    let qinq_outer = {
        let mut t = build::with_vlan(&untagged, 5);
        t[12..14].copy_from_slice(&0x88a8u16.to_be_bytes());
        t
    };
    let frames = [
        Fake {
            status: libc::TP_STATUS_USER | libc::TP_STATUS_CSUM_VALID,
            ..fake(udp(60, 1))
        },
        Fake {
            status: libc::TP_STATUS_USER | libc::TP_STATUS_CSUMNOTREADY,
            ..fake(partial_tcp)
        },
        Fake {
            status: libc::TP_STATUS_USER | libc::TP_STATUS_VLAN_VALID,
            vlan_tci: 42,
            ..fake(untagged.clone())
        },
        Fake {
            status: libc::TP_STATUS_USER
                | libc::TP_STATUS_VLAN_VALID
                | libc::TP_STATUS_VLAN_TPID_VALID,
            vlan_tci: 5,
            vlan_tpid: 0x88a8,
            ..fake(untagged.clone())
        },
        // Too big: 1515 bytes untagged on an MTU of 1500.
        fake(udp(1515, 3)),
        // Too big once its stripped tag is counted: 1515 + 4 > 1518.
        Fake {
            status: libc::TP_STATUS_USER | libc::TP_STATUS_VLAN_VALID,
            vlan_tci: 1,
            ..fake(udp(1515, 4))
        },
        // Truncated by the ring.
        Fake {
            len: Some(300),
            ..fake(udp(200, 5))
        },
        fake(udp(1514, 6)),
    ];
    write_block_sized(&mut region, BIG_BLOCK, 0, &frames);
    let out = walk(&mut region, &mut rx, &mut stats, &mut pool, 64);
    let got: Vec<(&[u8], bool)> = out
        .iter()
        .map(|f| (f.data(), f.checksum_verified()))
        .collect();
    assert_eq!(
        got,
        vec![
            (&udp(60, 1)[..], true),
            (&good_tcp[..], true),
            (&tagged[..], false),
            (&qinq_outer[..], false),
            (&udp(1514, 6)[..], false),
        ]
    );
    assert_eq!(stats.rx_csum_completed, 1);
    assert_eq!(stats.rx_vlan_restored, 2);
    assert_eq!(stats.rx_too_big, 2);
    assert_eq!(stats.rx_truncated, 1);
    assert_eq!(stats.rx_frames, 5);
    assert_eq!(pool.len() + out.len(), 16);
}

proptest! {
    /// Whatever the kernel (or a bug) leaves in the ring, the walk stays
    /// in bounds, never panics, respects `max` and loses no buffer.
    #[test]
    fn garbage_rings_never_panic_or_leak(
        bytes in proptest::collection::vec(any::<u8>(), 2 * BLOCK),
        max in 0usize..80,
    ) {
        let mut region = Region::anonymous(2 * BLOCK).unwrap();
        prop_assert!(region.copy_in(0, &bytes));
        for b in 0..2 {
            region.atomic_u32(b * BLOCK + BLOCK_STATUS).unwrap()
                .store(libc::TP_STATUS_USER, Ordering::Release);
        }
        let mut rx = RxRing::blocks(BLOCK, 2);
        let (mut stats, mut pool) = (PortStats::default(), pool(8));
        let mut held = Vec::new();
        for _ in 0..3 {
            let out = walk(&mut region, &mut rx, &mut stats, &mut pool, max);
            prop_assert!(out.len() <= max);
            for f in &out {
                prop_assert!(f.data().len() <= fixup::max_frame_len(MTU, true));
            }
            held.extend(out);
        }
        prop_assert_eq!(pool.len() + held.len(), 8);
    }
}

fn tx_frames(lens: &[usize]) -> Vec<AfPacketFrame> {
    let mut p = pool(lens.len()).small;
    for (f, (&len, id)) in p.iter_mut().zip(lens.iter().zip(0u8..)) {
        let bytes = udp(len, id);
        f.buf[..len].copy_from_slice(&bytes);
        f.len = len;
    }
    p
}

#[test]
fn tx_fill_uses_free_slots_in_order_and_stops_at_a_busy_one() {
    // Two blocks of two 2048-byte slots.
    let mut region = Region::anonymous(2 * BLOCK).unwrap();
    let mut tx = TxRing::new(RxMode::Blocks, 0, BLOCK, 2, 2048, None);
    assert_eq!(tx.frame_count(), 4);
    let (mut stats, mut pool) = (PortStats::default(), pool(0));
    let mut frames = tx_frames(&[60, 100, 1516, 200, 300, 400]);
    let (taken, queued) = tx_fill(
        &mut region,
        &mut tx,
        MTU,
        &mut stats,
        &mut pool,
        &mut frames,
    );
    // The 1516-byte untagged frame is above the MTU: taken and dropped.
    assert_eq!((taken, queued), (5, 4));
    assert_eq!(stats.tx_too_big, 1);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].data(), &udp(400, 5)[..]);
    assert_eq!(pool.len(), 5);
    let expect = [
        (0, udp(60, 0)),
        (2048, udp(100, 1)),
        (BLOCK, udp(200, 3)),
        (BLOCK + 2048, udp(300, 4)),
    ];
    for (slot, bytes) in &expect {
        let status = region
            .atomic_u32(slot + H_STATUS)
            .unwrap()
            .load(Ordering::Acquire);
        assert_eq!(status, libc::TP_STATUS_SEND_REQUEST);
        assert_eq!(region.read_u32(slot + H_LEN), Some(bytes.len() as u32));
        let mut data = vec![0u8; bytes.len()];
        assert!(region.copy_out(slot + V3_TX_DATA_OFFSET, &mut data));
        assert_eq!(&data, bytes);
    }
    // Full ring: nothing taken.
    let (taken, _) = tx_fill(
        &mut region,
        &mut tx,
        MTU,
        &mut stats,
        &mut pool,
        &mut frames,
    );
    assert_eq!(taken, 0);
    // The kernel frees slot 0: the cursor wrapped to it.
    region
        .atomic_u32(H_STATUS)
        .unwrap()
        .store(libc::TP_STATUS_AVAILABLE, Ordering::Release);
    let (taken, queued) = tx_fill(
        &mut region,
        &mut tx,
        MTU,
        &mut stats,
        &mut pool,
        &mut frames,
    );
    assert_eq!((taken, queued), (1, 1));
    assert_eq!(region.read_u32(H_LEN), Some(400));
    assert!(frames.is_empty());
    assert_eq!(stats.tx_frames, 5);
}

/// Put `f` into V2 slot `slot` (at byte `off`) the way `tpacket_rcv` does
/// and hand the slot to user space.
fn write_slot(region: &mut Region, off: usize, f: &Fake) {
    use super::frames::{H_LEN, H_MAC, H_SNAPLEN, H_STATUS, H_VLAN_TCI, H_VLAN_TPID};
    assert!(region.write_u32(off + H_SNAPLEN, f.bytes.len() as u32));
    assert!(region.write_u32(off + H_LEN, f.len.unwrap_or(f.bytes.len() as u32)));
    assert!(region.write_u16(off + H_MAC, V2_MAC_OFFSET as u16));
    assert!(region.write_u16(off + H_VLAN_TCI, f.vlan_tci));
    assert!(region.write_u16(off + H_VLAN_TPID, f.vlan_tpid));
    assert!(region.copy_in(off + V2_MAC_OFFSET, &f.bytes));
    region
        .atomic_u32(off + H_STATUS)
        .unwrap()
        .store(f.status, Ordering::Release);
}

fn slot_status(region: &Region, off: usize) -> u32 {
    region
        .atomic_u32(off + super::frames::H_STATUS)
        .unwrap()
        .load(Ordering::Acquire)
}

#[test]
fn frame_ring_hands_each_slot_back_as_soon_as_it_is_copied_and_wraps() {
    // Two blocks of two 2048-byte slots: slots at 0, 2048, BLOCK, BLOCK + 2048.
    let mut region = Region::anonymous(2 * BLOCK).unwrap();
    let mut rx = RxRing::frames(BLOCK, 2, 2048);
    let (mut stats, mut pool) = (PortStats::default(), pool(16));
    let slots = [0, 2048, BLOCK, BLOCK + 2048];
    assert!(!rx.has_frames(&region));
    write_slot(&mut region, slots[0], &fake(udp(60, 1)));
    assert!(
        rx.has_frames(&region),
        "one frame is enough: no block to fill"
    );
    let out = walk(&mut region, &mut rx, &mut stats, &mut pool, 64);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].data(), &udp(60, 1)[..]);
    assert_eq!(slot_status(&region, slots[0]), libc::TP_STATUS_KERNEL);
    // Three more, then a burst of 2 stops after slot 2 (its block's
    // slots are returned one by one) and the next burst wraps to slot 0.
    for (i, &off) in slots[1..].iter().chain(&slots[..1]).enumerate() {
        write_slot(&mut region, off, &fake(udp(100 + i, i as u8)));
    }
    let out = walk(&mut region, &mut rx, &mut stats, &mut pool, 2);
    assert_eq!(out.len(), 2);
    assert_eq!(slot_status(&region, slots[2]), libc::TP_STATUS_KERNEL);
    assert_eq!(slot_status(&region, slots[3]), libc::TP_STATUS_USER);
    assert!(rx.has_frames(&region));
    let out = walk(&mut region, &mut rx, &mut stats, &mut pool, 64);
    let got: Vec<&[u8]> = out.iter().map(|f| f.data()).collect();
    assert_eq!(got, [&udp(102, 2)[..], &udp(103, 3)[..]]);
    assert!(!rx.has_frames(&region));
    assert_eq!(stats.rx_frames, 5);
}

#[test]
fn frame_ring_applies_the_same_checks_and_leaves_frames_when_the_pool_is_empty() {
    let mut region = Region::anonymous(BLOCK).unwrap();
    let mut rx = RxRing::frames(BLOCK, 1, 2048);
    let (mut stats, mut pool) = (PortStats::default(), pool(1));
    let mut too_big = fake(udp(60, 1));
    too_big.len = Some(1600);
    let mut tagged = fake(udp(60, 2));
    tagged.status |= libc::TP_STATUS_VLAN_VALID;
    tagged.vlan_tci = 42;
    write_slot(&mut region, 0, &too_big);
    write_slot(&mut region, 2048, &tagged);
    let out = walk(&mut region, &mut rx, &mut stats, &mut pool, 64);
    assert_eq!((out.len(), stats.rx_too_big), (1, 1));
    let mut want = udp(60, 2);
    want.splice(12..12, [0x81, 0x00, 0, 42]);
    assert_eq!(out[0].data(), &want[..]);
    assert_eq!(stats.rx_vlan_restored, 1);
    // The pool is now empty: the next frame stays in its slot.
    write_slot(&mut region, 0, &fake(udp(70, 3)));
    assert!(walk(&mut region, &mut rx, &mut stats, &mut pool, 64).is_empty());
    assert_eq!(stats.rx_pool_empty, 1);
    assert_eq!(slot_status(&region, 0), libc::TP_STATUS_USER);
    pool.extend(out);
    let out = walk(&mut region, &mut rx, &mut stats, &mut pool, 64);
    assert_eq!(out[0].data(), &udp(70, 3)[..]);
}

#[test]
fn tx_slots_of_a_frames_socket_use_the_v2_header() {
    use super::frames::{H_LEN, H_STATUS};
    let mut region = Region::anonymous(BLOCK).unwrap();
    let mut tx = TxRing::new(RxMode::Frames, 0, BLOCK, 1, 2048, None);
    let (mut stats, mut pool) = (PortStats::default(), pool(0));
    let mut frames = tx_frames(&[60, 100]);
    let (taken, queued) = tx_fill(
        &mut region,
        &mut tx,
        MTU,
        &mut stats,
        &mut pool,
        &mut frames,
    );
    assert_eq!((taken, queued), (2, 2));
    for (slot, bytes) in [(0, udp(60, 0)), (2048, udp(100, 1))] {
        let status = region.atomic_u32(slot + H_STATUS).unwrap();
        assert_eq!(status.load(Ordering::Acquire), libc::TP_STATUS_SEND_REQUEST);
        assert_eq!(region.read_u32(slot + H_LEN), Some(bytes.len() as u32));
        let mut data = vec![0u8; bytes.len()];
        assert!(region.copy_out(slot + V2_TX_DATA_OFFSET, &mut data));
        assert_eq!(data, bytes);
    }
}

proptest! {
    /// The V2 walk over garbage slots: in bounds, no panic, no lost buffer.
    #[test]
    fn garbage_frame_rings_never_panic_or_leak(
        bytes in proptest::collection::vec(any::<u8>(), 2 * BLOCK),
        max in 0usize..80,
    ) {
        let mut region = Region::anonymous(2 * BLOCK).unwrap();
        prop_assert!(region.copy_in(0, &bytes));
        let mut rx = RxRing::frames(BLOCK, 2, 2048);
        let (mut stats, mut pool) = (PortStats::default(), pool(8));
        let mut held = Vec::new();
        for _ in 0..3 {
            let out = walk(&mut region, &mut rx, &mut stats, &mut pool, max);
            prop_assert!(out.len() <= max);
            for f in &out {
                prop_assert!(f.data().len() <= fixup::max_frame_len(MTU, true));
            }
            held.extend(out);
        }
        prop_assert_eq!(pool.len() + held.len(), 8);
    }
}

/// A TCP super-packet of `payload` bytes (seed in the checksum field) and
/// its offload.
fn super_packet(payload: usize) -> (Vec<u8>, Offload) {
    let data: Vec<u8> = (0..payload).map(|i| i as u8).collect();
    let src = Ipv4Addr::new(10, 0, 0, 1);
    let dst = Ipv4Addr::new(10, 0, 0, 2);
    let mut f = build::eth_ipv4_tcp(A, B, src, 1, dst, 2, tcp_flags::ACK, 1, 1, &data);
    let o = build::make_partial(&mut f, 1448);
    (f, o)
}

/// With `gso`, the kernel writes a `virtio_net_hdr` right before the MAC
/// header: a super-packet above the MTU is taken whole with its offload
/// (its seed kept, marked verified), in a big buffer; a header the driver
/// cannot pass on drops the frame (`rx_offload_bad`); an ordinary frame
/// with a partial checksum is completed as without `gso`.
#[test]
fn gso_frames_come_with_their_vnet_header() {
    const SLOT: usize = 16384;
    let mut region = Region::anonymous(4 * SLOT).unwrap();
    let mut rx = RxRing::frames(SLOT, 4, SLOT);
    let mut stats = PortStats::default();
    let mut pool = Pools::new(4, fixup::max_frame_len(MTU, true), 2);
    let (sp, o) = super_packet(10_000);
    let (small, small_o) = super_packet(100);
    let small_o = Offload {
        gso: crate::packet::Gso::None,
        gso_size: 0,
        ..small_o
    };
    let full_small = {
        let mut f = small.clone();
        crate::wire::gso::complete_checksum(&mut f, &small_o).unwrap();
        f
    };
    let mac = V2_MAC_OFFSET + vnet::HEADER_LEN;
    let put = |region: &mut Region, off: usize, bytes: &[u8], hdr: [u8; 10], status: u32| {
        use super::frames::{H_LEN, H_MAC, H_SNAPLEN, H_STATUS};
        assert!(region.write_u32(off + H_SNAPLEN, bytes.len() as u32));
        assert!(region.write_u32(off + H_LEN, bytes.len() as u32));
        assert!(region.write_u16(off + H_MAC, mac as u16));
        assert!(region.copy_in(off + mac - vnet::HEADER_LEN, &hdr));
        assert!(region.copy_in(off + mac, bytes));
        region
            .atomic_u32(off + H_STATUS)
            .unwrap()
            .store(libc::TP_STATUS_USER | status, Ordering::Release);
    };
    put(
        &mut region,
        0,
        &sp,
        o.encode(54),
        libc::TP_STATUS_CSUMNOTREADY,
    );
    let mut ufo = o.encode(54);
    ufo[1] = vnet::gso_type::UDP;
    put(&mut region, SLOT, &sp, ufo, 0);
    put(
        &mut region,
        2 * SLOT,
        &small,
        small_o.encode(54),
        libc::TP_STATUS_CSUMNOTREADY,
    );
    let mut out = Vec::new();
    let ctx = RxContext {
        mtu: MTU,
        gso: true,
        stats: &mut stats,
    };
    let n = rx_walk(&mut region, &mut rx, ctx, &mut pool, &mut out, 64);
    assert_eq!(n, 2);
    assert_eq!(out[0].data(), &sp[..]);
    assert_eq!(out[0].offload(), o);
    assert!(out[0].checksum_verified());
    assert_eq!(out[0].buf.len(), GSO_MAX_FRAME);
    assert_eq!(out[1].data(), &full_small[..]);
    assert_eq!(out[1].offload(), Offload::NONE);
    assert_eq!(
        (
            stats.rx_gso_frames,
            stats.rx_offload_bad,
            stats.rx_csum_completed
        ),
        (1, 1, 1)
    );
}

const GSO_VNET: TxVnet = TxVnet {
    gso: true,
    linear_max_bytes: 0,
};

/// The `hdr_len` field of a `virtio_net_hdr` (bytes 2..4, little-endian).
fn vnet_hdr_len(hdr: &[u8; vnet::HEADER_LEN]) -> u16 {
    u16::from_le_bytes([hdr[2], hdr[3]])
}

/// Without `gso` but with a vnet header for the linear copy, a frame up to
/// `linear_max_bytes` is covered whole by `hdr_len` (the kernel copies it
/// into the skb's linear part), a longer one from its Ethernet header on
/// (the rest as the ring's pages), and a super-packet is too big as on a
/// socket without vnet headers.
#[test]
fn tx_slots_without_gso_ask_for_a_linear_copy_of_small_frames() {
    use super::frames::H_LEN;
    const SLOT: usize = 4096;
    let mut region = Region::anonymous(4 * SLOT).unwrap();
    let linear = TxVnet {
        gso: false,
        linear_max_bytes: 256,
    };
    let mut tx = TxRing::new(RxMode::Frames, 0, SLOT, 4, SLOT, Some(linear));
    let mut stats = PortStats::default();
    let mut pool = Pools::new(4, fixup::max_frame_len(MTU, true), 1);
    let small = udp(100, 1);
    let large = udp(1000, 2);
    let (sp, o) = super_packet(3000);
    let mut frames = Vec::new();
    for (bytes, offload) in [
        (small.clone(), Offload::NONE),
        (large.clone(), Offload::NONE),
        (sp, o),
    ] {
        let mut f = pool.pop_for(bytes.len()).unwrap();
        f.buf[..bytes.len()].copy_from_slice(&bytes);
        f.len = bytes.len();
        f.offload = offload;
        frames.push(f);
    }
    let (taken, queued) = tx_fill(
        &mut region,
        &mut tx,
        MTU,
        &mut stats,
        &mut pool,
        &mut frames,
    );
    assert_eq!((taken, queued), (3, 2));
    assert_eq!((stats.tx_gso_frames, stats.tx_too_big), (0, 1));
    let data = V2_TX_DATA_OFFSET;
    let mut hdr = [0u8; vnet::HEADER_LEN];
    for (slot, bytes, hdr_len) in [(0, &small, small.len()), (SLOT, &large, 14)] {
        assert!(region.copy_out(slot + data, &mut hdr));
        assert_eq!(usize::from(vnet_hdr_len(&hdr)), hdr_len);
        assert_eq!(Offload::decode(&hdr, 0), Ok(Offload::NONE));
        assert_eq!(
            region.read_u32(slot + H_LEN),
            Some((10 + bytes.len()) as u32)
        );
        let mut got = vec![0u8; bytes.len()];
        assert!(region.copy_out(slot + data + 10, &mut got));
        assert_eq!(&got, bytes);
    }
}

/// With `gso`, each TX slot starts with a `virtio_net_hdr`: a super-packet
/// goes whole (above the MTU) with its offload, an ordinary frame with an
/// empty header, and a frame above the MTU without GSO is still too big.
#[test]
fn gso_tx_slots_carry_the_vnet_header() {
    use super::frames::H_LEN;
    const SLOT: usize = 16384;
    let mut region = Region::anonymous(4 * SLOT).unwrap();
    let mut tx = TxRing::new(RxMode::Frames, 0, SLOT, 4, SLOT, Some(GSO_VNET));
    let mut stats = PortStats::default();
    let mut pool = Pools::new(4, fixup::max_frame_len(MTU, true), 2);
    let (sp, o) = super_packet(8000);
    let mut frames = Vec::new();
    for (bytes, offload) in [
        (sp.clone(), o),
        (udp(100, 1), Offload::NONE),
        (sp.clone(), Offload::NONE),
    ] {
        let mut f = pool.pop_for(bytes.len()).unwrap();
        f.buf[..bytes.len()].copy_from_slice(&bytes);
        f.len = bytes.len();
        f.offload = offload;
        frames.push(f);
    }
    let mtu = MTU;
    let (taken, queued) = tx_fill(
        &mut region,
        &mut tx,
        mtu,
        &mut stats,
        &mut pool,
        &mut frames,
    );
    assert_eq!((taken, queued), (3, 2));
    assert_eq!((stats.tx_gso_frames, stats.tx_too_big), (1, 1));
    let data = V2_TX_DATA_OFFSET;
    let mut hdr = [0u8; vnet::HEADER_LEN];
    assert!(region.copy_out(data, &mut hdr));
    assert_eq!(hdr, o.encode(54));
    assert_eq!(region.read_u32(H_LEN), Some((10 + sp.len()) as u32));
    let mut got = vec![0u8; sp.len()];
    assert!(region.copy_out(data + 10, &mut got));
    assert_eq!(got, sp);
    assert!(region.copy_out(SLOT + data, &mut hdr));
    assert_eq!(Offload::decode(&hdr, 0), Ok(Offload::NONE));
    assert_eq!(pool.len(), 6, "every buffer back in its pool");
}
