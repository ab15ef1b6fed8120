//! The driver and the XDP program on real veth pairs in throw-away network
//! namespaces: a [`Topology`] of two namespaces, a holding the peers
//! (`pa0`, `pa1`), b the driver's ends (`pb0`, `pb1`). A raw `AF_PACKET`
//! socket plays the peer. Work runs on threads that entered a namespace
//! ([`in_netns`]); the namespace guards delete both namespaces by name on
//! drop (which destroys the veth pairs, the XDP attachments with them).
//!
//! Over 700 lines and whole: every test shares the [`Topology`], peer and
//! driver helpers at the top; the program's own tests are in `steer/`.
//!
//! They need root and `ip netns`; without them they print a loud SKIPPED
//! banner to stderr and return (CI runs them as root, with
//! `PORTICO_REQUIRE_ROOT=1`: then a skip fails the test).

use super::*;
use crate::driver::test_frames::is_udp_to;
use crate::wire::{MacAddr, build};
use portico_netns::{Netns, RawSocket, Veth, in_netns, require_root};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const MAC_A: [u8; 6] = [0x02, 0x50, 0x54, 0, 0, 0xa];
const MAC_B: [u8; 6] = [0x02, 0x50, 0x54, 0, 0, 0xb];
const TEST_PORT: u16 = 9999;
const DEADLINE: Duration = Duration::from_secs(10);

/// Two namespaces joined by veth pairs; deleted on drop.
struct Topology {
    ns_a: Netns,
    ns_b: Netns,
}

impl Topology {
    /// `pairs` veth pairs `pa<i>` (in a) — `pb<i>` (in b), TSO off on the
    /// peers (native XDP on veth needs it).
    fn new(pairs: usize) -> Option<Topology> {
        Topology::with_mtu(pairs, 1500)
    }

    /// As [`Topology::new`], both ends of every pair with `mtu`.
    fn with_mtu(pairs: usize, mtu: u32) -> Option<Topology> {
        Topology::build(pairs, mtu, 1)
    }

    /// As [`Topology::with_mtu`], every end with `queues` RX and TX queues.
    fn build(pairs: usize, mtu: u32, queues: u32) -> Option<Topology> {
        if !require_root("AF_XDP namespace test") {
            return None;
        }
        let topo = Topology {
            ns_a: Netns::new("xdpa").expect("namespace a"),
            ns_b: Netns::new("xdpb").expect("namespace b"),
        };
        for i in 0..pairs {
            let (pa, pb) = (format!("pa{i}"), format!("pb{i}"));
            let (mut mac_a, mut mac_b) = (MAC_A, MAC_B);
            mac_a[4] = i as u8;
            mac_b[4] = i as u8;
            Veth::new(&topo.ns_a, &pa, &topo.ns_b, &pb)
                .macs(mac_a, mac_b)
                .mtus(mtu, mtu)
                .queues(queues)
                .create()
                .expect("topology");
            in_netns(&topo.ns_a, || {
                prepare::disable_offloads(&pa).expect("offloads off on the peer");
            });
        }
        Some(topo)
    }
}

/// The peer's raw socket on `ifname`, opened in namespace a.
fn open_peer(t: &Topology, ifname: &str) -> RawSocket {
    in_netns(&t.ns_a, || RawSocket::open(ifname)).expect("peer socket")
}

/// The next frame to UDP port [`TEST_PORT`] `peer` receives, within the
/// deadline.
fn peer_test_frame(peer: &RawSocket) -> Option<Vec<u8>> {
    peer.recv_matching(1, DEADLINE, is_test_frame)
        .expect("peer receive")
        .pop()
}

fn is_test_frame(f: &[u8]) -> bool {
    is_udp_to(f, TEST_PORT)
}

fn test_frame(i: u16, payload_len: usize) -> Vec<u8> {
    let payload = vec![i as u8; payload_len];
    build::eth_ipv4_udp(
        MacAddr(MAC_A),
        MacAddr(MAC_B),
        Ipv4Addr::new(10, 88, 0, 1),
        40000 + i,
        Ipv4Addr::new(10, 88, 0, 2),
        TEST_PORT,
        &payload,
    )
}

/// Receive frames to [`TEST_PORT`] on `port` until `n` arrived or the
/// deadline passes; other frames are released.
fn rx_test_frames(d: &mut AfXdpDriver, port: PortId, n: usize) -> Vec<XdpFrame> {
    let deadline = Instant::now() + DEADLINE;
    let mut got = Vec::new();
    let mut batch = Vec::with_capacity(64);
    while got.len() < n && Instant::now() < deadline {
        d.rx_burst(port, &mut batch, 64);
        for f in batch.drain(..) {
            if is_test_frame(f.data()) {
                got.push(f);
            } else {
                d.release(f);
            }
        }
        d.wait(10);
    }
    got
}

fn config(ports: &[(&str, &XdpAttachment)]) -> AfXdpConfig {
    let mut c = AfXdpConfig::new(
        ports
            .iter()
            .map(|(ifname, att)| AfXdpPortConfig {
                ifname: (*ifname).to_string(),
                queue_id: 0,
                xsk_map: Some(att.map()),
                link: Some(att.link()),
                queue_sockets: None,
            })
            .collect(),
    );
    c.rings = XdpRingConfig {
        frame_size: 2048,
        umem_frames: 2048,
        fill_ring: 512,
        completion_ring: 512,
        rx_ring: 512,
        tx_ring: 512,
    };
    c
}

fn echo_through(mode: XdpMode, busy_poll: Option<BusyPoll>) {
    let Some(t) = Topology::new(1) else { return };
    in_netns(&t.ns_b, || {
        let att = XdpAttachment::attach("pb0", 1, 1, mode).expect("attach");
        // This kernel (5.18+) loads the steering program, not the fallback.
        assert!(att.link().steers());
        if mode == XdpMode::Native {
            assert_eq!(att.mode(), AttachedMode::Native);
        }
        let mut c = config(&[("pb0", &att)]);
        c.busy_poll = busy_poll;
        let mut d = AfXdpDriver::open(&c).expect("open");
        assert!(!d.ports()[0].zero_copy(), "veth has no zero-copy");
        // Linux 5.11+ as root accepts every busy-poll option.
        let want = match busy_poll {
            Some(_) => BusyPollState::On,
            None => BusyPollState::Off,
        };
        assert_eq!(d.ports()[0].busy_poll(), want);
        let peer = open_peer(&t, "pa0");
        let sent: Vec<Vec<u8>> = (0..100)
            .map(|i| test_frame(i, 100 + usize::from(i)))
            .collect();
        for f in &sent {
            peer.send(f).expect("peer send");
        }
        let mut got = rx_test_frames(&mut d, 0, sent.len());
        let bodies: Vec<Vec<u8>> = got.iter().map(|f| f.data().to_vec()).collect();
        assert_eq!(bodies, sent, "every frame arrives intact and in order");
        // Send them back (in place, no copy), in bursts of up to 64.
        while !got.is_empty() {
            let mut burst: Vec<XdpFrame> = got.drain(..got.len().min(64)).collect();
            let len = burst.len();
            assert_eq!(d.tx_burst(0, &mut burst), len, "the TX ring has room");
            assert!(burst.is_empty());
        }
        for f in &sent {
            assert_eq!(peer_test_frame(&peer).as_ref(), Some(f), "echoed frame");
        }
        let s = *d.ports()[0].stats();
        assert_eq!(s.tx_frames, 100);
        assert_eq!(s.tx_copies, 0);
        // Every chunk comes back: free + fill ring = the whole UMEM.
        let deadline = Instant::now() + DEADLINE;
        while Instant::now() < deadline && d.ports()[0].tx.outstanding() > 0 {
            d.wait(10);
        }
        d.reclaim_completions();
        assert_eq!(d.frames_out(), 0);
        let in_fill = d.ports()[0].fill.outstanding() as usize;
        assert!(
            d.free_frames() + in_fill <= 2048 && d.free_frames() + in_fill >= 2048 - 512,
            "free {} + fill {in_fill} (at most the RX ring's worth in the kernel)",
            d.free_frames()
        );
    });
}

#[test]
fn native_mode_with_busy_polling_receives_and_echoes_frames() {
    echo_through(XdpMode::Native, Some(BusyPoll { us: 20, budget: 64 }));
}

#[test]
fn generic_mode_receives_and_echoes_frames() {
    echo_through(XdpMode::Generic, None);
}

#[test]
fn native_mode_on_veth_receives_and_echoes_frames() {
    echo_through(XdpMode::Native, None);
}

#[test]
fn two_ports_share_one_umem_and_forward_without_copying() {
    let Some(t) = Topology::new(2) else { return };
    in_netns(&t.ns_b, || {
        let a0 = XdpAttachment::attach("pb0", 1, 1, XdpMode::Auto).expect("attach pb0");
        let a1 = XdpAttachment::attach("pb1", 1, 1, XdpMode::Auto).expect("attach pb1");
        let mut d = AfXdpDriver::open(&config(&[("pb0", &a0), ("pb1", &a1)])).expect("open");
        assert_eq!(d.umem_count(), 1, "XDP_SHARED_UMEM across two veths");
        let (tx_peer, rx_peer) = (open_peer(&t, "pa0"), open_peer(&t, "pa1"));
        let sent: Vec<Vec<u8>> = (0..20).map(|i| test_frame(i, 64)).collect();
        for f in &sent {
            tx_peer.send(f).expect("peer send");
        }
        let mut got = rx_test_frames(&mut d, 0, sent.len());
        assert_eq!(got.len(), sent.len());
        assert_eq!(d.tx_burst(1, &mut got), sent.len());
        for f in &sent {
            assert_eq!(peer_test_frame(&rx_peer).as_ref(), Some(f));
        }
        assert_eq!(
            d.ports()[1].stats().tx_copies,
            0,
            "zero copies between ports"
        );
    });
}

#[test]
fn separate_umems_forward_with_one_copy() {
    let Some(t) = Topology::new(2) else { return };
    in_netns(&t.ns_b, || {
        let a0 = XdpAttachment::attach("pb0", 1, 1, XdpMode::Generic).expect("attach pb0");
        let a1 = XdpAttachment::attach("pb1", 1, 1, XdpMode::Generic).expect("attach pb1");
        let mut c = config(&[("pb0", &a0), ("pb1", &a1)]);
        c.shared_umem = false;
        c.rings.umem_frames = 1024;
        let mut d = AfXdpDriver::open(&c).expect("open");
        assert_eq!(d.umem_count(), 2);
        let (tx_peer, rx_peer) = (open_peer(&t, "pa0"), open_peer(&t, "pa1"));
        let f = test_frame(7, 300);
        tx_peer.send(&f).expect("peer send");
        let mut got = rx_test_frames(&mut d, 0, 1);
        assert_eq!(d.tx_burst(1, &mut got), 1);
        assert_eq!(peer_test_frame(&rx_peer), Some(f));
        assert_eq!(d.ports()[1].stats().tx_copies, 1);
        assert_eq!(d.frames_out(), 0);
    });
}

#[test]
fn a_stale_portico_program_is_replaced_and_a_foreign_one_refused() {
    let Some(t) = Topology::new(1) else { return };
    in_netns(&t.ns_b, || {
        let ifindex = driver_sys::if_index("pb0").expect("ifindex");
        // A program attached through netlink outlives its process: stage
        // one as a crashed Portico would leave it.
        let map = XskMap::create(1, 1).expect("map");
        let prog = bpf::load_program(&map).expect("load");
        netlink::attach_legacy(ifindex, prog.as_raw_fd(), netlink::XDP_FLAGS_SKB_MODE)
            .expect("legacy attach");
        drop(prog);
        let before = netlink::query(ifindex).expect("query");
        let stale_id = before.skb_prog_id.expect("the staged program is attached");
        assert_eq!(
            bpf::program_name(stale_id).expect("name"),
            bpf::PROGRAM_NAME
        );

        let att = XdpAttachment::attach("pb0", 1, 1, XdpMode::Generic).expect("attach");
        assert_eq!(
            att.stale_removed(),
            &[program::StaleProgram {
                id: stale_id,
                mode: AttachedMode::Generic
            }]
        );
        let now = netlink::query(ifindex).expect("query");
        let id = now.skb_prog_id.expect("ours is attached");
        assert_ne!(id, stale_id);
        // Dropping the attachment (closing the link) detaches it.
        drop(att);
        assert_eq!(
            netlink::query(ifindex).expect("query"),
            netlink::XdpState::default()
        );

        // Someone else's program (same code, other name) is not touched.
        let foreign = bpf::load_program_named(&map, "not_portico").expect("load");
        netlink::attach_legacy(ifindex, foreign.as_raw_fd(), netlink::XDP_FLAGS_SKB_MODE)
            .expect("foreign attach");
        let err = XdpAttachment::attach("pb0", 1, 1, XdpMode::Generic).expect_err("refused");
        assert!(
            matches!(&err, AfXdpError::ForeignProgram { name, .. } if name == "not_portico"),
            "{err}"
        );
        netlink::detach(ifindex, netlink::XDP_FLAGS_SKB_MODE).expect("cleanup");
    });
}

#[test]
fn a_bad_interface_name_is_a_clear_error() {
    let err = XdpAttachment::attach("no-such-if0", 1, 1, XdpMode::Auto).expect_err("no interface");
    assert!(
        err.to_string().contains("no-such-if0") && err.to_string().contains("not found"),
        "{err}"
    );
    let err =
        XdpAttachment::attach("a-name-far-too-long", 1, 1, XdpMode::Auto).expect_err("too long");
    assert!(err.to_string().contains("1 to 15 bytes"), "{err}");
    let mut c = AfXdpConfig::new(vec![AfXdpPortConfig {
        ifname: "lo".into(),
        queue_id: 0,
        xsk_map: None,
        link: None,
        queue_sockets: None,
    }]);
    c.rings.fill_ring = 1000;
    let err = AfXdpDriver::open(&c).expect_err("bad ring size");
    assert!(
        err.to_string()
            .contains("fill_ring 1000 must be a power of two"),
        "{err}"
    );
}

/// Jumbo frames (MTU 9000) through the driver in `mode` with
/// `frame_size`-byte chunks: received as multi-buffer chains, reassembled,
/// echoed as chains, byte for byte.
fn jumbo_echo(mode: XdpMode, frame_size: u32) {
    let Some(t) = Topology::with_mtu(1, 9000) else {
        return;
    };
    in_netns(&t.ns_b, || {
        // Native mode on a 9000-byte veth needs the frags program.
        let att = XdpAttachment::attach("pb0", 1, 1, mode).expect("attach with MTU 9000");
        if mode == XdpMode::Native {
            assert_eq!(att.mode(), AttachedMode::Native);
        }
        let mut c = config(&[("pb0", &att)]);
        c.rings.frame_size = frame_size;
        let mut d = AfXdpDriver::open(&c).expect("open");
        assert!(d.ports()[0].multi_buffer(), "XDP_USE_SG for a jumbo MTU");
        let peer = open_peer(&t, "pa0");
        // Sizes around the buffer boundaries up to the largest frame
        // (9000 + 14).
        let sizes = [60usize, 1500, 3839, 3841, 7000, 8972];
        let sent: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| test_frame(i as u16, n))
            .collect();
        assert_eq!(sent.last().map(Vec::len), Some(9000 + 14));
        for f in &sent {
            peer.send(f).expect("peer send");
        }
        let mut got = rx_test_frames(&mut d, 0, sent.len());
        let bodies: Vec<Vec<u8>> = got.iter().map(|f| f.data().to_vec()).collect();
        assert_eq!(bodies, sent, "every jumbo frame arrives whole and in order");
        let per_buffer = (frame_size - XDP_HEADROOM) as usize;
        let chains = sent.iter().filter(|f| f.len() > per_buffer).count() as u64;
        assert_eq!(d.ports()[0].stats().rx_chains, chains);
        assert_eq!(d.tx_burst(0, &mut got), sent.len(), "the TX ring has room");
        for f in &sent {
            assert_eq!(peer_test_frame(&peer).as_ref(), Some(f), "echoed frame");
        }
        let s = *d.ports()[0].stats();
        assert_eq!((s.tx_frames, s.tx_chains), (sent.len() as u64, chains));
        assert_eq!(s.rx_bad_chain, 0);
        let k = d.ports()[0].kernel_stats().expect("XDP_STATISTICS");
        assert_eq!(k.tx_invalid_descs, 0, "the kernel took every chain");
        // Spans and chunks all come back.
        let deadline = Instant::now() + DEADLINE;
        while Instant::now() < deadline && d.ports()[0].tx.outstanding() > 0 {
            d.wait(10);
        }
        d.reclaim_completions();
        assert_eq!(d.frames_out(), 0);
        assert_eq!(d.umems[0].spans.free.len(), 512, "every span is free again");
    });
}

#[test]
fn native_mode_carries_jumbo_frames_as_multi_buffer_chains() {
    jumbo_echo(XdpMode::Native, 4096);
}

#[test]
fn generic_mode_carries_jumbo_frames_in_2048_byte_chunks() {
    jumbo_echo(XdpMode::Generic, 2048);
}

#[test]
fn a_jumbo_mtu_without_multi_buffer_is_refused_by_name() {
    let Some(t) = Topology::with_mtu(1, 9000) else {
        return;
    };
    in_netns(&t.ns_b, || {
        let att = XdpAttachment::attach("pb0", 1, 1, XdpMode::Auto).expect("attach");
        let mut c = config(&[("pb0", &att)]);
        c.multi_buffer = MultiBuffer::Off;
        let err = AfXdpDriver::open(&c).expect_err("MTU 9000 in one chunk");
        let msg = err.to_string();
        assert!(
            msg.contains("pb0") && msg.contains("MTU 9000") && msg.contains("multi_buffer"),
            "{msg}"
        );
    });
}

/// A frame from client `10.88.<i / 250 + 1>.<i % 250 + 1>` to
/// `10.88.0.2`:[`TEST_PORT`].
fn client_frame(i: u16) -> Vec<u8> {
    client_frame_of(i, 64)
}

/// [`client_frame`] with `payload` bytes of UDP payload.
fn client_frame_of(i: u16, payload: usize) -> Vec<u8> {
    build::eth_ipv4_udp(
        MacAddr(MAC_A),
        MacAddr(MAC_B),
        Ipv4Addr::new(10, 88, (i / 250 + 1) as u8, (i % 250 + 1) as u8),
        40000 + i,
        Ipv4Addr::new(10, 88, 0, 2),
        TEST_PORT,
        &vec![(i % 251) as u8; payload],
    )
}

/// Two workers' drivers on a 2-queue veth, worker 0 having installed a
/// steering rule through its driver: the program runs (a frame whose
/// owner's worker has a socket on its queue goes there), and a frame whose
/// owner has none on its queue falls back to the queue's own worker's
/// socket (slot `q * 2 + q`), so every frame reaches a socket and none
/// passes to the kernel. With one socket per worker, as here, that is
/// every frame whose owner is not its queue's worker.
#[test]
fn with_a_steering_rule_installed_every_frame_still_reaches_a_socket() {
    let Some(t) = Topology::build(1, 1500, 2) else {
        return;
    };
    in_netns(&t.ns_b, || {
        let att = XdpAttachment::attach("pb0", 2, 2, XdpMode::Auto).expect("attach");
        let c0 = config(&[("pb0", &att)]);
        let mut c1 = c0.clone();
        c1.ports[0].queue_id = 1;
        let mut d = [
            AfXdpDriver::open(&c0).expect("open worker 0"),
            AfXdpDriver::open(&c1).expect("open worker 1"),
        ];
        let rule = SteeringRule::new(
            2,
            1024..=65535,
            vec![Ipv4Addr::new(10, 88, 0, 2)],
            Vec::new(),
            Vec::new(),
        );
        assert!(d[0].install_steering(&rule).expect("install"), "it steers");
        let peer = open_peer(&t, "pa0");
        let n = 400u16;
        for i in 0..n {
            peer.send(&client_frame(i)).expect("peer send");
        }
        let deadline = Instant::now() + DEADLINE;
        let mut got = [0usize; 2];
        let mut batch = Vec::with_capacity(64);
        while got.iter().sum::<usize>() < usize::from(n) && Instant::now() < deadline {
            for (w, dw) in d.iter_mut().enumerate() {
                dw.rx_burst(0, &mut batch, 64);
                for f in batch.drain(..) {
                    if is_test_frame(f.data()) {
                        got[w] += 1;
                    }
                    dw.release(f);
                }
                dw.wait(1);
            }
        }
        assert_eq!(
            got.iter().sum::<usize>(),
            usize::from(n),
            "per worker {got:?}"
        );
    });
}

/// The kernel keeps one buffer pool (UMEM, fill and completion ring) per
/// (device, queue) (`xsk_reg_pool_at_qid`, `EBUSY`): a second worker's
/// socket with its own UMEM cannot bind a queue a worker already bound.
/// Sockets of several workers on one queue would have to share that
/// queue's pool and fill ring (see DESIGN.md: why AF_XDP steering stops at
/// the program).
#[test]
fn a_second_umem_on_a_bound_queue_is_refused_busy() {
    let Some(t) = Topology::build(1, 1500, 2) else {
        return;
    };
    in_netns(&t.ns_b, || {
        let att = XdpAttachment::attach("pb0", 2, 2, XdpMode::Generic).expect("attach");
        let c = config(&[("pb0", &att)]);
        let d0 = AfXdpDriver::open(&c).expect("open worker 0 on queue 0");
        let ifindex = d0.ports()[0].ifindex();
        let bind_other_umem = |queue: u32| {
            let umem = Umem::new("pb0", &c.rings, 0, 0).expect("umem");
            let s = socket::open_socket("pb0", &c.rings, Some(&umem)).expect("socket");
            sys::bind_xdp(s.fd.as_fd(), ifindex, queue, libc::XDP_COPY, None)
        };
        let err = bind_other_umem(0).expect_err("a second pool on queue 0");
        assert_eq!(err.raw_os_error(), Some(libc::EBUSY), "{err}");
        bind_other_umem(1).expect("queue 1 has no pool yet");
    });
}

/// The steering program splits one queue's frames by owner: worker 0's
/// socket on queue 0 in slot `(0, 0)`, a second socket sharing its buffer
/// pool on queue 0 in worker 1's slot `(0, 1)`; after worker 0 installs
/// the rule, each client's frames reach exactly the socket of the worker
/// [`SteeringRule::owner`] names.
#[test]
fn the_installed_program_delivers_each_frame_to_its_owners_slot() {
    let Some(t) = Topology::new(1) else { return };
    in_netns(&t.ns_b, || {
        let att = XdpAttachment::attach("pb0", 1, 2, XdpMode::Auto).expect("attach");
        let c = config(&[("pb0", &att)]);
        let mut d = AfXdpDriver::open(&c).expect("open worker 0");
        let (fd1, mut rx1) = socket::open_rx_socket("pb0", &c.rings).expect("socket");
        let (ifindex, fd0) = (d.ports()[0].ifindex(), d.ports()[0].fd.as_fd());
        sys::bind_xdp(fd1.as_fd(), ifindex, 0, libc::XDP_SHARED_UMEM, Some(fd0))
            .expect("share queue 0's pool");
        let map = att.map();
        map.insert(map.slot(0, 1), fd1.as_fd())
            .expect("slot (0, 1)");
        let server = Ipv4Addr::new(10, 88, 0, 2);
        let rule = SteeringRule::new(2, 1024..=65535, vec![server], Vec::new(), Vec::new());
        assert!(d.install_steering(&rule).expect("install"));
        let n = 300u16;
        let owners: Vec<u8> = (0..n)
            .map(|i| {
                let f = client_frame(i);
                let src = Ipv4Addr::new(f[26], f[27], f[28], f[29]);
                rule.owner(&crate::flow::FlowKey::new(
                    crate::flow::Proto::Udp,
                    src,
                    40000 + i,
                    server,
                    TEST_PORT,
                ))
            })
            .collect();
        let want1 = owners.iter().filter(|&&w| w == 1).count() as u32;
        assert!(
            want1 > 50 && want1 < 250,
            "both workers own clients: {want1}"
        );
        let peer = open_peer(&t, "pa0");
        for i in 0..n {
            peer.send(&client_frame(i)).expect("peer send");
        }
        let got0 = rx_test_frames(&mut d, 0, usize::from(n) - want1 as usize);
        let deadline = Instant::now() + DEADLINE;
        while rx1.available(u32::MAX) < want1 && Instant::now() < deadline {
            d.wait(10);
        }
        // Worker 0's clients, in order, and nothing more.
        let sources: Vec<[u8; 4]> = got0
            .iter()
            .map(|f| [f.data()[26], f.data()[27], f.data()[28], f.data()[29]])
            .collect();
        let want0: Vec<[u8; 4]> = (0..n)
            .filter(|&i| owners[usize::from(i)] == 0)
            .map(|i| {
                let f = client_frame(i);
                [f[26], f[27], f[28], f[29]]
            })
            .collect();
        assert_eq!(sources, want0, "worker 0 gets exactly its clients");
        assert_eq!(
            rx1.available(u32::MAX),
            want1,
            "worker 1's slot gets its clients"
        );
        for f in got0 {
            d.release(f);
        }
        // Worker 1's frames stay in its ring (chunks of worker 0's UMEM):
        // clear the slot before the socket closes.
        map.remove(map.slot(0, 1)).expect("clear slot (0, 1)");
    });
}

/// Two workers' drivers on a 2-queue veth sharing the port's
/// [`QueueSockets`]; `refuse`: the kernel refuses every shared bind.
fn two_workers(refuse: Option<i32>, check: impl FnOnce(&Topology, &mut [AfXdpDriver; 2]) + Send) {
    two_workers_with_mtu(1500, refuse, check);
}

/// [`two_workers`] on a veth of `mtu` (9000: multi-buffer ports).
fn two_workers_with_mtu(
    mtu: u32,
    refuse: Option<i32>,
    check: impl FnOnce(&Topology, &mut [AfXdpDriver; 2]) + Send,
) {
    let Some(t) = Topology::build(1, mtu, 2) else {
        return;
    };
    in_netns(&t.ns_b, || {
        sys::REFUSE_SHARED_BIND.with(|r| r.set(refuse));
        let att = XdpAttachment::attach("pb0", 2, 2, XdpMode::Auto).expect("attach");
        let mut c0 = config(&[("pb0", &att)]);
        c0.ports[0].queue_sockets = Some(Arc::new(QueueSockets::new(2, 2)));
        let mut c1 = c0.clone();
        c1.ports[0].queue_id = 1;
        let mut d = [
            AfXdpDriver::open(&c0).expect("open worker 0"),
            AfXdpDriver::open(&c1).expect("open worker 1"),
        ];
        check(&t, &mut d);
    });
}

/// The clients of the frames [`send_clients`] sends, each with its owner
/// by `rule`.
fn client_owners(rule: &SteeringRule, n: u16) -> Vec<([u8; 4], u8)> {
    (0..n)
        .map(|i| {
            let f = client_frame(i);
            let src = [f[26], f[27], f[28], f[29]];
            let key = crate::flow::FlowKey::new(
                crate::flow::Proto::Udp,
                Ipv4Addr::from(src),
                40000 + i,
                Ipv4Addr::new(10, 88, 0, 2),
                TEST_PORT,
            );
            (src, rule.owner(&key))
        })
        .collect()
}

/// Send `n` client frames from the peer, poll both drivers until all
/// arrived (or the deadline); the clients each worker received.
fn send_clients(t: &Topology, d: &mut [AfXdpDriver; 2], n: u16) -> [Vec<[u8; 4]>; 2] {
    send_clients_of(t, d, n, 64)
}

/// [`send_clients`] with `payload` bytes per frame; a frame that arrives
/// other than as sent fails the test.
fn send_clients_of(
    t: &Topology,
    d: &mut [AfXdpDriver; 2],
    n: u16,
    payload: usize,
) -> [Vec<[u8; 4]>; 2] {
    let peer = open_peer(t, "pa0");
    let sent: Vec<Vec<u8>> = (0..n).map(|i| client_frame_of(i, payload)).collect();
    for f in &sent {
        peer.send(f).expect("peer send");
    }
    let deadline = Instant::now() + DEADLINE;
    let mut got: [Vec<[u8; 4]>; 2] = [Vec::new(), Vec::new()];
    let mut batch = Vec::with_capacity(64);
    while got.iter().map(Vec::len).sum::<usize>() < usize::from(n) && Instant::now() < deadline {
        for (w, dw) in d.iter_mut().enumerate() {
            dw.rx_burst(0, &mut batch, 64);
            for f in batch.drain(..) {
                if is_test_frame(f.data()) {
                    let b = f.data();
                    let i = u16::from_be_bytes([b[34], b[35]]).wrapping_sub(40000);
                    assert!(
                        sent.get(usize::from(i)).is_some_and(|s| s.as_slice() == b),
                        "client {i}'s frame arrives whole ({} bytes)",
                        b.len()
                    );
                    got[w].push([b[26], b[27], b[28], b[29]]);
                }
                dw.release(f);
            }
            dw.wait(1);
        }
    }
    got
}

/// One burst on port 0, every frame released (the first one also takes
/// the sockets later workers opened for this one).
fn poll_once(d: &mut AfXdpDriver) {
    let mut batch = Vec::with_capacity(64);
    d.rx_burst(0, &mut batch, 64);
    for f in batch {
        d.release(f);
    }
}

/// Each worker received exactly the clients `owners` gives it.
fn each_worker_got_its_clients(got: &[Vec<[u8; 4]>; 2], owners: &[([u8; 4], u8)]) {
    for (w, clients) in got.iter().enumerate() {
        let mut want: Vec<[u8; 4]> = owners
            .iter()
            .filter(|(_, o)| usize::from(*o) == w)
            .map(|(c, _)| *c)
            .collect();
        let mut clients = clients.clone();
        clients.sort_unstable();
        want.sort_unstable();
        assert_eq!(clients, want, "worker {w} gets exactly its clients");
    }
}

fn server_rule() -> SteeringRule {
    SteeringRule::new(
        2,
        1024..=65535,
        vec![Ipv4Addr::new(10, 88, 0, 2)],
        Vec::new(),
        Vec::new(),
    )
}

/// Flow-affine steering across queues: each worker also has a socket on
/// the other worker's queue (sharing that queue's pool), and with the rule
/// installed every frame reaches the worker that owns its client, on
/// whichever queue it arrived; the frames taken on the other queue are
/// copies, their chunks go back to the queue's worker.
#[test]
fn two_workers_receive_their_clients_frames_from_either_queue() {
    two_workers(None, |t, d| {
        // Worker 1 joined queue 0 when it opened; worker 0 joins queue 1
        // on its first burst.
        poll_once(&mut d[0]);
        assert_eq!(d[0].queue_sockets(), [(0, 1)]);
        assert_eq!(d[1].queue_sockets(), [(0, 0)]);
        let rule = server_rule();
        assert!(d[0].install_steering(&rule).expect("install"));
        let n = 400;
        let owners = client_owners(&rule, n);
        let got = send_clients(t, d, n);
        each_worker_got_its_clients(&got, &owners);
        let other: u64 = d.iter().map(|dw| dw.total_stats().rx_other_queues).sum();
        assert!(other > 0, "some frames arrived on the other worker's queue");
        for dw in d.iter_mut() {
            assert_eq!(dw.frames_out(), 0);
            assert_eq!(dw.total_stats().queue_socket_failures, 0);
        }
        // The chunks worker 1 took from queue 0 are back with worker 0.
        poll_once(&mut d[0]);
        let in_fill = d[0].ports()[0].fill.outstanding() as usize;
        assert!(
            d[0].free_frames() + in_fill >= 2048 - 512,
            "free {}",
            d[0].free_frames()
        );
    });
}

/// Multi-buffer ports (MTU 9000, `XDP_USE_SG`) are steered the same way:
/// the `xdp.frags` program reads the headers from the first buffer, and a
/// jumbo frame taken through the socket on the other worker's queue is
/// copied, chain and all, into a span of the owner's UMEM.
#[test]
fn two_workers_receive_their_clients_jumbo_frames_from_either_queue() {
    two_workers_with_mtu(9000, None, |t, d| {
        poll_once(&mut d[0]);
        assert!(d[0].ports()[0].multi_buffer(), "XDP_USE_SG for MTU 9000");
        assert_eq!(d[0].queue_sockets(), [(0, 1)]);
        assert_eq!(d[1].queue_sockets(), [(0, 0)]);
        let rule = server_rule();
        assert!(d[0].install_steering(&rule).expect("install"));
        let n = 200;
        let owners = client_owners(&rule, n);
        // 6000 bytes: a chain of two or more buffers.
        let got = send_clients_of(t, d, n, 6000);
        each_worker_got_its_clients(&got, &owners);
        let stats: Vec<_> = d.iter().map(|dw| dw.total_stats()).collect();
        let other: u64 = stats.iter().map(|s| s.rx_other_queues).sum();
        let chains: u64 = stats.iter().map(|s| s.rx_chains).sum();
        assert!(other > 0, "some jumbo frames came through the other queue");
        assert_eq!(chains, u64::from(n), "every frame was a chain: {stats:?}");
        for (dw, s) in d.iter_mut().zip(&stats) {
            assert_eq!(dw.frames_out(), 0);
            assert_eq!((s.rx_bad_chain, s.queue_socket_failures), (0, 0), "{s:?}");
        }
    });
}

/// When the kernel refuses a socket on another worker's queue, the slot
/// stays empty, the refusal is counted and kept, and every frame still
/// reaches a worker: the queue's own (which hands it off).
#[test]
fn a_refused_queue_socket_is_counted_and_every_frame_still_arrives() {
    two_workers(Some(libc::EINVAL), |t, d| {
        poll_once(&mut d[0]);
        for dw in d.iter() {
            assert!(dw.queue_sockets().is_empty());
            assert_eq!(dw.total_stats().queue_socket_failures, 1);
            let msg = dw.queue_socket_errors()[0].to_string();
            assert!(
                msg.contains("XDP_SHARED_UMEM") && msg.contains("pb0"),
                "{msg}"
            );
        }
        assert!(d[0].install_steering(&server_rule()).expect("install"));
        let got = send_clients(t, d, 400);
        assert_eq!(got.iter().map(Vec::len).sum::<usize>(), 400, "{got:?}");
        assert_eq!(
            d.iter()
                .map(|dw| dw.total_stats().rx_other_queues)
                .sum::<u64>(),
            0
        );
    });
}
