//! The two TX paths ([`TxPath`]) on a real veth pair: which one `Auto`
//! picks, and the `sendmmsg` path carrying frames, super-packets and
//! refusals as the ring does.

use super::*;
use crate::wire::tcp::flags as tcp_flags;

/// A driver on `pb` with `gso` and `tx_path` as given.
fn open(topo: &Topology, gso: bool, tx_path: TxPath) -> AfPacketDriver {
    let mut c = config(RingConfig::default());
    c.gso = gso;
    c.gso_pool_frames = 8;
    c.tx_path = tx_path;
    in_netns(&topo.ns_b, || AfPacketDriver::open(&c)).expect("open driver")
}

/// `Auto` sends by `sendmmsg` on a veth with `gso` only; an explicit
/// choice is kept with or without `gso`; the `sendmmsg` path maps no TX
/// ring.
#[test]
fn auto_picks_sendmsg_on_a_veth_with_gso_and_the_ring_otherwise() {
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let path = |gso, tx_path| {
        let driver = open(&topo, gso, tx_path);
        let port = driver.port(0).expect("port");
        (port.tx_path(), port.tx_ring_frames() > 0)
    };
    assert_eq!(path(true, TxPath::Auto), (TxPath::Sendmsg, false));
    assert_eq!(path(false, TxPath::Auto), (TxPath::Ring, true));
    assert_eq!(path(true, TxPath::Ring), (TxPath::Ring, true));
    assert_eq!(path(false, TxPath::Sendmsg), (TxPath::Sendmsg, false));
}

/// Without `gso`: frames of every size arrive intact and in order, one
/// above the MTU in the middle of the burst is dropped and counted
/// (`tx_too_big`) without holding up the rest, and a burst allocates
/// nothing.
#[test]
fn sendmsg_frames_arrive_in_order_and_a_frame_above_the_mtu_is_counted() {
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let peer = open_peer(&topo);
    let mut driver = open(&topo, false, TxPath::Sendmsg);
    // More than one sendmmsg batch.
    let sent: Vec<Vec<u8>> = (0..(sender::BATCH as u32 + 36))
        .map(|i| test_frame(60 + (i as usize * 53) % 1454, 5000 + i as u16, i))
        .collect();
    let too_big = test_frame(1515, 6000, 999);
    let mut batch: Vec<AfPacketFrame> = Vec::with_capacity(2 * sender::BATCH);
    let info = allocation_counter::measure(|| {
        for (i, f) in sent.iter().enumerate() {
            if i == 10 {
                batch.push(driver.frame_from(&too_big).expect("pool buffer"));
            }
            batch.push(driver.frame_from(f).expect("pool buffer"));
        }
        assert_eq!(driver.tx_burst(0, &mut batch), sent.len() + 1);
    });
    assert_eq!(info.count_total, 0, "sendmsg path allocated: {info:?}");
    assert!(batch.is_empty());
    assert_eq!(peer_test_frames(&peer, sent.len()), sent);
    let stats = driver.total_stats();
    assert_eq!(stats.tx_frames, sent.len() as u64);
    assert_eq!(stats.tx_too_big, 1);
    assert_eq!((stats.tx_send_errors, stats.tx_ring_full), (0, 0));
    // Without gso there are no big buffers.
    assert_eq!(driver.pool_free(), 512, "every buffer back in the pool");
}

/// With `gso`: a TCP super-packet of ~20 KB (above the MTU, with its
/// partial checksum) leaves whole through its `virtio_net_hdr` and reaches
/// the peer byte for byte as sent, counted as a GSO frame; an ordinary
/// frame beside it goes with an empty header; a frame above the MTU
/// without an offload is still too big.
#[test]
fn sendmsg_with_gso_carries_a_super_packet_whole() {
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let peer = open_peer(&topo);
    let mut driver = open(&topo, true, TxPath::Sendmsg);
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7) as u8).collect();
    let mut sp = build::eth_ipv4_tcp(
        MAC_B,
        MAC_A,
        IP_B,
        TEST_PORT,
        IP_A,
        TEST_PORT,
        tcp_flags::ACK,
        1,
        1,
        &data,
    );
    let offload = build::make_partial(&mut sp, 1448);
    assert!(offload.is_gso());
    let small = test_frame(300, 7000, 1);
    let mut batch = Vec::new();
    let mut f = driver.frame_from(&sp).expect("big buffer");
    f.offload = offload;
    batch.push(f);
    batch.push(driver.frame_from(&small).expect("buffer"));
    batch.push(driver.frame_from(&sp).expect("big buffer, no offload"));
    assert_eq!(driver.tx_burst(0, &mut batch), 3);
    let is_sp = |f: &[u8]| f.len() > 1514 && tcp_to(f, TEST_PORT);
    let got = peer
        .recv_matching(1, DEADLINE, is_sp)
        .expect("peer receive");
    assert_eq!(got, vec![sp.clone()], "the super-packet arrives whole");
    assert_eq!(peer_test_frames(&peer, 1), vec![small]);
    let stats = driver.total_stats();
    assert_eq!((stats.tx_frames, stats.tx_gso_frames), (2, 1));
    assert_eq!(stats.tx_bytes, (sp.len() + 300) as u64);
    assert_eq!((stats.tx_too_big, stats.tx_send_errors), (1, 0));
    assert_eq!(driver.pool_free(), 512 + 8);
}

/// A TCP frame to `port` (IPv4, no options).
fn tcp_to(f: &[u8], port: u16) -> bool {
    f.len() >= 54
        && f[12..14] == [0x08, 0x00]
        && f[23] == 6
        && u16::from_be_bytes([f[36], f[37]]) == port
}

/// The smallest `tx_frame_size` the driver accepts still sends the largest
/// frame the MTU allows through the TX ring, whose slots also carry the
/// `virtio_net_hdr` of the linear copy (`port::TxVnet`): the size check
/// counts that header as the slots do.
#[test]
fn the_smallest_tx_slot_accepted_holds_an_mtu_frame_and_its_vnet_header() {
    let Some(topo) = Topology::new(1500, 1500) else {
        return;
    };
    let peer = open_peer(&topo);
    let smallest = (1024..=4096).step_by(16).find_map(|size| {
        let mut c = config(RingConfig {
            tx_frame_size: size,
            ..RingConfig::default()
        });
        c.tx_path = TxPath::Ring;
        in_netns(&topo.ns_b, || AfPacketDriver::open(&c))
            .ok()
            .map(|d| (size, d))
    });
    let (size, mut driver) = smallest.expect("some slot size opens");
    let frame = test_frame(1514, 7000, 1);
    let mut batch = vec![driver.frame_from(&frame).expect("pool buffer")];
    assert_eq!(driver.tx_burst(0, &mut batch), 1);
    let stats = driver.total_stats();
    assert_eq!(
        (stats.tx_frames, stats.tx_too_big),
        (1, 0),
        "tx_frame_size {size}: {stats:?}"
    );
    assert_eq!(peer_test_frames(&peer, 1), vec![frame]);
}
