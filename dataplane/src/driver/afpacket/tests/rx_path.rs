//! The two RX paths ([`RxPath`]) on a real veth pair: which one `Auto`
//! picks, and the `recvmmsg` path delivering frames, super-packets,
//! tagged and oversized frames, and pool exhaustion as the ring does.

use super::*;
use crate::wire::tcp::flags as tcp_flags;

/// A driver on `ifname` in `ns` with `gso`, `rx_path` and pools as given.
fn open_on(
    ns: &Netns,
    ifname: &str,
    gso: bool,
    rx_path: RxPath,
    pool_frames: usize,
    gso_pool_frames: usize,
) -> AfPacketDriver {
    let mut c = config(RingConfig::default());
    c.ports[0].ifname = ifname.to_string();
    c.gso = gso;
    c.pool_frames = pool_frames;
    c.gso_pool_frames = gso_pool_frames;
    c.rx_path = rx_path;
    in_netns(ns, || AfPacketDriver::open(&c)).expect("open driver")
}

/// `Auto` receives by the ring, with or without `gso` (the measured
/// choice); an explicit choice is kept with or without `gso`.
#[test]
fn auto_picks_the_ring_and_an_explicit_recvmsg_is_kept() {
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let path = |gso, rx_path| {
        let driver = open_on(&topo.ns_b, "pb", gso, rx_path, 64, 8);
        driver.port(0).expect("port").rx_path()
    };
    assert_eq!(path(true, RxPath::Auto), RxPath::Ring);
    assert_eq!(path(false, RxPath::Auto), RxPath::Ring);
    assert_eq!(path(true, RxPath::Recvmsg), RxPath::Recvmsg);
    assert_eq!(path(false, RxPath::Recvmsg), RxPath::Recvmsg);
}

/// Without `gso`: frames of every size, over several `recvmmsg` batches,
/// arrive intact and in order; a tagged frame gets its tag back; frames
/// above the MTU are dropped and counted; a burst allocates nothing; and
/// every buffer (posted ones included) is accounted for.
#[test]
fn recvmsg_frames_arrive_intact_in_order_and_oversized_ones_are_counted() {
    // pa may send up to 1600: frames of 1515..=1518 bytes reach pb.
    let Some(topo) = Topology::new(1600, 1500) else {
        return;
    };
    let peer = open_peer(&topo);
    let mut driver = open_on(&topo.ns_b, "pb", false, RxPath::Recvmsg, 512, 8);
    let mut sent: Vec<Vec<u8>> = (0..(receiver::BATCH as u32 * 2 + 7))
        .map(|i| test_frame(46 + (i as usize * 37) % 1468, 1000 + i as u16, i))
        .collect();
    sent.push(build::with_vlan(&test_frame(300, 2001, 900), 42));
    sent.push(build::with_vlan(&test_frame(1514, 2002, 901), 7));
    for (i, f) in sent.iter().enumerate() {
        if i == 5 {
            peer.send(&test_frame(1515, 3000, 999)).expect("peer send");
        }
        peer.send(f).expect("peer send");
    }
    peer.send(&test_frame(1518, 3001, 998)).expect("peer send");
    // Let everything reach the socket's queue, then one burst with
    // preallocated room must not allocate.
    std::thread::sleep(Duration::from_millis(200));
    let mut batch = Vec::with_capacity(64);
    let info = allocation_counter::measure(|| {
        driver.rx_burst(0, &mut batch, 64);
    });
    assert_eq!(info.count_total, 0, "recvmsg burst allocated: {info:?}");
    // One full recvmmsg batch, the oversized frame among it dropped.
    assert_eq!(
        batch.len() as u64 + driver.total_stats().rx_too_big,
        receiver::BATCH as u64
    );
    let mut got: Vec<(Vec<u8>, bool)> = Vec::new();
    for f in batch.drain(..) {
        if is_test_frame(f.data()) {
            got.push((f.data().to_vec(), f.checksum_verified()));
        }
        driver.release(f);
    }
    got.extend(rx_test_frames(&mut driver, sent.len() - got.len()));
    assert!(got.iter().all(|(_, verified)| !verified));
    let got: Vec<Vec<u8>> = got.into_iter().map(|(f, _)| f).collect();
    assert_eq!(got, sent, "frames arrive intact and in order");
    let stats = driver.total_stats();
    assert_eq!(stats.rx_vlan_restored, 2);
    assert_eq!((stats.rx_too_big, stats.rx_truncated), (2, 0));
    assert_eq!(driver.pool_free(), 512, "every buffer back or posted");
}

/// When the pool runs dry the burst receives nothing and counts it
/// (`rx_pool_empty`); the frames wait in the socket and arrive, in order,
/// once buffers come back.
#[test]
fn recvmsg_with_the_pool_exhausted_leaves_frames_queued_until_buffers_return() {
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let peer = open_peer(&topo);
    let mut driver = open_on(&topo.ns_b, "pb", false, RxPath::Recvmsg, 8, 0);
    let sent: Vec<Vec<u8>> = (0..20u32).map(|i| test_frame(200, 4000, i)).collect();
    for f in &sent {
        peer.send(f).expect("peer send");
    }
    let end = Instant::now() + DEADLINE;
    let mut held: Vec<AfPacketFrame> = Vec::with_capacity(64);
    while held.len() < 8 && Instant::now() < end {
        driver.wait(50);
        driver.rx_burst(0, &mut held, 64);
    }
    assert_eq!(held.len(), 8, "the whole pool is in the caller's hands");
    assert_eq!(driver.pool_free(), 0);
    let mut more = Vec::with_capacity(64);
    assert_eq!(driver.rx_burst(0, &mut more, 64), 0);
    assert!(driver.total_stats().rx_pool_empty >= 1);
    let mut got: Vec<Vec<u8>> = Vec::new();
    for f in held.drain(..) {
        if is_test_frame(f.data()) {
            got.push(f.data().to_vec());
        }
        driver.release(f);
    }
    got.extend(
        rx_test_frames(&mut driver, sent.len() - got.len())
            .into_iter()
            .map(|(f, _)| f),
    );
    assert_eq!(got, sent, "nothing lost, nothing reordered");
    assert_eq!(driver.pool_free(), 8);
}

/// With `gso`: a TCP super-packet that a second driver sends into the
/// peer end (a GSO skb with its partial checksum) arrives whole, with its
/// offload, counted as a GSO frame and received into a big buffer; small
/// frames beside it are copied down into small buffers. Sent back out by
/// the driver, the same super-packet with the same offload reaches the
/// other driver.
#[test]
fn recvmsg_with_gso_takes_a_super_packet_whole_and_sends_it_back_the_same() {
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let mut a = open_on(&topo.ns_a, "pa", true, RxPath::Ring, 64, 8);
    let mut b = open_on(&topo.ns_b, "pb", true, RxPath::Recvmsg, 64, 8);
    assert_eq!(a.port(0).expect("port").tx_path(), TxPath::Sendmsg);
    let data: Vec<u8> = (0..30_000u32).map(|i| (i * 13) as u8).collect();
    let mut sp = build::eth_ipv4_tcp(
        MAC_A,
        MAC_B,
        IP_A,
        TEST_PORT,
        IP_B,
        TEST_PORT,
        tcp_flags::ACK,
        1,
        1,
        &data,
    );
    let offload = build::make_partial(&mut sp, 1448);
    assert!(offload.is_gso());
    let small = test_frame(300, 7000, 1);
    let mut out = Vec::new();
    let mut f = a.frame_from(&sp).expect("big buffer");
    f.offload = offload;
    out.push(f);
    out.push(a.frame_from(&small).expect("buffer"));
    assert_eq!(a.tx_burst(0, &mut out), 2);

    let is_sp = |f: &[u8]| f.len() > 1514 && f.get(34..38).is_some();
    let end = Instant::now() + DEADLINE;
    let mut batch = Vec::with_capacity(64);
    let (mut got_sp, mut got_small) = (None, None);
    while (got_sp.is_none() || got_small.is_none()) && Instant::now() < end {
        b.wait(50);
        b.rx_burst(0, &mut batch, 64);
        for f in batch.drain(..) {
            if is_sp(f.data()) {
                got_sp = Some(f);
            } else if is_test_frame(f.data()) {
                assert!(f.buf.len() <= b.frame_capacity(), "copied down");
                got_small = Some(f.data().to_vec());
                b.release(f);
            } else {
                b.release(f);
            }
        }
    }
    let got = got_sp.expect("the super-packet arrives");
    assert_eq!(
        got.data(),
        &sp[..],
        "byte for byte, partial checksum seed included"
    );
    assert_eq!(got.offload(), offload, "with its offload");
    assert!(got.checksum_verified());
    assert_eq!(got_small, Some(small));
    let stats = b.total_stats();
    assert_eq!((stats.rx_gso_frames, stats.rx_offload_bad), (1, 0));

    // And back out: the same super-packet reaches a's ring.
    let mut back = vec![got];
    assert_eq!(b.tx_burst(0, &mut back), 1);
    let end = Instant::now() + DEADLINE;
    let mut echoed = None;
    while echoed.is_none() && Instant::now() < end {
        a.wait(50);
        a.rx_burst(0, &mut batch, 64);
        for f in batch.drain(..) {
            if is_sp(f.data()) {
                echoed = Some((f.data().to_vec(), f.offload()));
            }
            a.release(f);
        }
    }
    assert_eq!(echoed, Some((sp, offload)));
    assert_eq!(b.total_stats().tx_gso_frames, 1);
    assert_eq!(b.pool_free(), 64 + 8);
}

/// A receiver without a ring keeps at most half its size class posted
/// between bursts: with `gso` and 8 big buffers, one port posts 4, and the
/// pipeline's own super-packets (`frame_from`) find the other 4 while the
/// port waits for frames.
#[test]
fn recvmsg_posts_at_most_half_its_size_class_between_bursts() {
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let mut b = open_on(&topo.ns_b, "pb", true, RxPath::Recvmsg, 64, 8);
    let mut batch = Vec::with_capacity(64);
    b.rx_burst(0, &mut batch, 64);
    for f in batch.drain(..) {
        b.release(f);
    }
    let posted = b.ports[0].receiver.as_ref().map(MsgReceiver::posted);
    assert_eq!(posted, Some(4), "half of the 8 big buffers posted");
    let big_frame = vec![0u8; 3000];
    let taken: Vec<AfPacketFrame> = (0..4)
        .map(|i| {
            b.frame_from(&big_frame)
                .unwrap_or_else(|| panic!("big buffer {i} for the pipeline"))
        })
        .collect();
    assert!(
        b.frame_from(&big_frame).is_none(),
        "the pool holds 8 in all"
    );
    for f in taken {
        b.release(f);
    }
    assert_eq!(b.pool_free(), 64 + 8);
}
