//! The driver on vdevs over real veth pairs in throw-away namespaces.
//!
//! The EAL starts once per process, so one test exercises every vdev kind
//! over one EAL: namespaces `ptc-dpdk-<pid>-<n>-a` and `-b`, veth pairs
//! `pa`—`pb` (port 0, `net_af_packet` on `pb`) and `qa`—`qb` (port 1,
//! `net_af_xdp` on `qb`, copy mode: veth has no zero-copy). The EAL, the
//! ports and the driver live on a thread that entered namespace b (vdevs
//! open their sockets and run their ioctls in the caller's namespace); a
//! plain `AF_PACKET` socket on the `a` end plays the peer. The guard
//! deletes both namespaces by name on drop (which destroys the veth pairs).
//!
//! Needs root and `ip netns`; otherwise prints a loud SKIPPED line. An
//! af_xdp vdev that cannot start (old kernel, no BPF) is reported as a
//! SKIPPED line of its own; the af_packet checks still run.
#![allow(unsafe_code)]

use super::*;
use crate::driver::{Driver, Frame};
use crate::packet::PortId;
use crate::wire::{MacAddr, build, ethernet, ipv4, udp};
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static TOPOLOGY_COUNTER: AtomicUsize = AtomicUsize::new(0);

const MAC_A: MacAddr = MacAddr([0x02, 0x50, 0x44, 0, 0, 0xa]);
const MAC_B: MacAddr = MacAddr([0x02, 0x50, 0x44, 0, 0, 0xb]);
const MAC_C: MacAddr = MacAddr([0x02, 0x50, 0x44, 0, 0, 0xc]);
const MAC_D: MacAddr = MacAddr([0x02, 0x50, 0x44, 0, 0, 0xd]);
const IP_A: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
/// UDP destination port of every test frame (the namespaces' IPv6 chatter
/// on link-up is filtered out by it).
const TEST_PORT: u16 = 9998;
const DEADLINE: Duration = Duration::from_secs(10);
const FRAMES: usize = 64;
/// Bytes after the IPv4 packet of each frame the peer sends (like Ethernet
/// padding), stripped with `truncate` before the frames go back.
const PADDING: usize = 8;

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn skip(what: &str, why: &str) {
    crate::driver::test_skip::skip("dpdk", what, why);
}

struct Topology {
    ns_a: String,
    ns_b: String,
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in [&self.ns_a, &self.ns_b] {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

impl Topology {
    fn new() -> Option<Topology> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            skip(
                "vdev",
                "needs root and network namespaces (not running as root)",
            );
            return None;
        }
        let n = TOPOLOGY_COUNTER.fetch_add(1, Ordering::Relaxed);
        let base = format!("ptc-dpdk-{}-{n}", std::process::id());
        let ns_a = format!("{base}-a");
        let ns_b = format!("{base}-b");
        if let Err(e) = ip(&["netns", "add", &ns_a]) {
            skip("vdev", &format!("needs root and network namespaces ({e})"));
            return None;
        }
        let topo = Topology {
            ns_a: ns_a.clone(),
            ns_b: ns_b.clone(),
        };
        let macs = [MAC_A, MAC_B, MAC_C, MAC_D].map(|m| m.to_string());
        let steps: [&[&str]; 8] = [
            &["netns", "add", &ns_b],
            &[
                "-n", &ns_a, "link", "add", "pa", "address", &macs[0], "type", "veth", "peer",
                "name", "pb", "address", &macs[1], "netns", &ns_b,
            ],
            &[
                "-n", &ns_a, "link", "add", "qa", "address", &macs[2], "type", "veth", "peer",
                "name", "qb", "address", &macs[3], "netns", &ns_b,
            ],
            &["-n", &ns_a, "link", "set", "pa", "up"],
            &["-n", &ns_a, "link", "set", "qa", "up"],
            &["-n", &ns_b, "link", "set", "pb", "up"],
            &["-n", &ns_b, "link", "set", "qb", "up"],
            &["-n", &ns_b, "link", "set", "lo", "up"],
        ];
        for step in steps {
            if let Err(e) = ip(step) {
                panic!("building the test topology: {e}");
            }
        }
        Some(topo)
    }
}

/// Run `f` on a thread that entered network namespace `ns`.
fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::scope(|s| {
        let handle = s.spawn(move || {
            let file = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            // SAFETY: an open netns descriptor; setns changes only this
            // thread's network namespace.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", io::Error::last_os_error());
            f()
        });
        match handle.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// A plain `AF_PACKET` socket on the peer end.
struct RawSocket(OwnedFd);

impl RawSocket {
    fn open(ifname: &str) -> RawSocket {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain syscall with constant arguments.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::c_int::from(proto),
            )
        };
        assert!(fd >= 0, "socket: {}", io::Error::last_os_error());
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let name = CString::new(ifname).expect("ifname");
        // SAFETY: NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        assert_ne!(ifindex, 0, "{ifname}: {}", io::Error::last_os_error());
        // SAFETY: sockaddr_ll is plain data.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll of the size passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(rc, 0, "bind: {}", io::Error::last_os_error());
        let one: libc::c_int = 1;
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        for (level, name, value, len) in [
            (
                libc::SOL_PACKET,
                libc::PACKET_IGNORE_OUTGOING,
                (&one as *const libc::c_int).cast::<libc::c_void>(),
                std::mem::size_of::<libc::c_int>(),
            ),
            (
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast::<libc::c_void>(),
                std::mem::size_of::<libc::timeval>(),
            ),
        ] {
            // SAFETY: `value` points at a live option value of `len` bytes.
            let rc = unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, value, len as u32) };
            assert_eq!(rc, 0, "setsockopt: {}", io::Error::last_os_error());
        }
        RawSocket(fd)
    }

    fn send(&self, frame: &[u8]) {
        // SAFETY: `frame` is readable for its length.
        let rc = unsafe { libc::send(self.0.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        assert_eq!(
            rc,
            frame.len() as isize,
            "peer send: {}",
            io::Error::last_os_error()
        );
    }

    /// Test frames until `count` arrived or the deadline.
    fn recv_test_frames(&self, count: usize) -> Vec<Vec<u8>> {
        let end = Instant::now() + DEADLINE;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        while got.len() < count && Instant::now() < end {
            // SAFETY: `buf` is writable for its length.
            let rc =
                unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if let Ok(n) = usize::try_from(rc)
                && is_test_frame(&buf[..n])
            {
                got.push(buf[..n].to_vec());
            }
        }
        got
    }
}

fn is_test_frame(frame: &[u8]) -> bool {
    let Ok(l3) = ethernet::Packet::new_unchecked(frame).l3_info() else {
        return false;
    };
    let Some(ip_bytes) = frame.get(l3.offset..) else {
        return false;
    };
    let Ok(ip) = ipv4::Packet::new_checked(ip_bytes) else {
        return false;
    };
    l3.ethertype == ethernet::ethertype::IPV4
        && ip.protocol() == ipv4::protocol::UDP
        && udp::Packet::new_checked(ip.payload()).is_ok_and(|u| u.dst_port() == TEST_PORT)
}

/// A UDP test frame from `src` to `dst` carrying `id`, `len` bytes long.
fn test_frame(src: MacAddr, dst: MacAddr, len: usize, id: u32) -> Vec<u8> {
    let mut payload = vec![0u8; len.saturating_sub(42).max(4)];
    payload[..4].copy_from_slice(&id.to_be_bytes());
    for (i, b) in payload.iter_mut().enumerate().skip(4) {
        *b = (i as u32 ^ id) as u8;
    }
    build::eth_ipv4_udp(src, dst, IP_A, 40000, IP_B, TEST_PORT, &payload)
}

/// Test frames of `port` until `count` arrived or the deadline; everything
/// else is released.
fn rx_test_frames(d: &mut DpdkDriver, port: PortId, count: usize) -> Vec<DpdkFrame> {
    let end = Instant::now() + DEADLINE;
    let mut got = Vec::with_capacity(count);
    let mut batch = Vec::with_capacity(MAX_BURST);
    while got.len() < count && Instant::now() < end {
        if d.rx_burst(port, &mut batch, MAX_BURST) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        for f in batch.drain(..) {
            if is_test_frame(f.data()) && got.len() < count {
                got.push(f);
            } else {
                d.release(f);
            }
        }
    }
    got
}

/// RX from the peer, TX (with an in-place rewrite and a truncation) back to
/// it, `frame_from` + TX, on `port` whose kernel end is `peer` (namespace a,
/// MAC `peer_mac`; the vdev's end has `own_mac`).
fn exchange(
    t: &Topology,
    d: &mut DpdkDriver,
    port: PortId,
    peer: &str,
    peer_mac: MacAddr,
    own_mac: MacAddr,
) {
    let kind = d.ports().ports()[usize::from(port)].driver_name.clone();
    // Peer -> rx_burst, byte for byte and in order. Each frame carries
    // PADDING bytes of trailer after its IPv4 packet.
    let sent: Vec<Vec<u8>> = (0..FRAMES)
        .map(|i| {
            let mut f = test_frame(peer_mac, own_mac, 60 + i * 20, i as u32);
            f.extend_from_slice(&[0xee; PADDING]);
            f
        })
        .collect();
    in_netns(&t.ns_a, || {
        let s = RawSocket::open(peer);
        for f in &sent {
            s.send(f);
        }
    });
    let got = rx_test_frames(d, port, FRAMES);
    assert_eq!(got.len(), FRAMES, "{kind}: frames the driver received");
    for (f, want) in got.iter().zip(&sent) {
        assert_eq!(f.data(), &want[..], "{kind}: received bytes");
    }

    // Rewrite in place (swap the MACs), strip the trailer, send back.
    let echoed = std::thread::scope(|s| {
        let listener =
            s.spawn(|| in_netns(&t.ns_a, || RawSocket::open(peer).recv_test_frames(FRAMES)));
        // Give the peer's socket time to bind before sending.
        std::thread::sleep(Duration::from_millis(200));
        let mut queue = got;
        for f in &mut queue {
            let data = f.data_mut();
            data[..6].copy_from_slice(&peer_mac.0);
            data[6..12].copy_from_slice(&own_mac.0);
        }
        for f in &mut queue {
            let len = f.data().len();
            f.truncate(len - PADDING);
        }
        let end = Instant::now() + DEADLINE;
        while !queue.is_empty() && Instant::now() < end {
            if d.tx_burst(port, &mut queue) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert!(queue.is_empty(), "{kind}: TX ring never drained");
        listener.join().expect("peer listener")
    });
    assert_eq!(echoed.len(), FRAMES, "{kind}: frames the peer got back");
    for (i, f) in echoed.iter().enumerate() {
        assert_eq!(&f[..6], &peer_mac.0, "{kind}: destination MAC rewritten");
        assert_eq!(&f[6..12], &own_mac.0, "{kind}: source MAC rewritten");
        let want = sent[i].len() - PADDING;
        assert_eq!(f.len(), want, "{kind}: frame {i} length after truncate");
        assert_eq!(&f[12..want], &sent[i][12..want], "{kind}: frame {i} bytes");
    }

    // frame_from (copies into a pool mbuf) + TX.
    let fresh = test_frame(own_mac, peer_mac, 128, 4242);
    let echoed = std::thread::scope(|s| {
        let listener = s.spawn(|| in_netns(&t.ns_a, || RawSocket::open(peer).recv_test_frames(1)));
        std::thread::sleep(Duration::from_millis(200));
        let frame = d.frame_from(&fresh).expect("a pool mbuf");
        assert_eq!(frame.data(), &fresh[..]);
        let mut queue = vec![frame];
        let end = Instant::now() + DEADLINE;
        while !queue.is_empty() && Instant::now() < end {
            d.tx_burst(port, &mut queue);
        }
        listener.join().expect("peer listener")
    });
    assert_eq!(echoed, vec![fresh], "{kind}: frame_from + tx_burst");
}

#[test]
fn vdevs_receive_and_send_frames_on_veth_pairs() {
    let Some(t) = Topology::new() else {
        return;
    };
    in_netns(&t.ns_b.clone(), || {
        let devices = vec![
            DpdkDevice::af_packet(0, "pb", 1),
            DpdkDevice::af_xdp(1, "qb", 1),
        ];
        let mut eal_config = EalConfig::vdevs(devices.clone());
        eal_config.memory_mb = 256;
        let eal = Eal::init(&eal_config).expect("EAL on vdevs");
        // The same configuration again is the same EAL; another is refused.
        assert!(std::ptr::eq(eal, Eal::init(&eal_config).expect("again")));
        let mut other = eal_config.clone();
        other.memory_mb = 128;
        assert!(matches!(
            Eal::init(&other),
            Err(DpdkError::AlreadyInitialized { .. })
        ));
        let have_af_xdp = eal.port_count() == 2;
        if !have_af_xdp {
            skip(
                "af_xdp vdev",
                "the net_af_xdp vdev did not probe on this kernel (see the EAL log above)",
            );
        }
        let devices: Vec<DpdkDevice> = devices.into_iter().take(eal.port_count().into()).collect();
        let mut config = DpdkPortsConfig::new(&devices, 1);
        config.rx_desc = 256;
        config.tx_desc = 256;
        let ports = DpdkPorts::start(eal, &config).expect("ports start");
        assert_eq!(ports.ports()[0].mac, MAC_B, "the vdev reports pb's MAC");
        assert_eq!(ports.ports()[0].driver_name, "net_af_packet");
        let mut d = ports.driver(0).expect("worker 0's queues");
        assert!(matches!(
            ports.driver(0),
            Err(DpdkError::QueueTaken { worker: 0 })
        ));
        assert!(matches!(
            ports.driver(1),
            Err(DpdkError::NoSuchQueue { worker: 1, .. })
        ));
        assert_eq!(d.port_count(), devices.len());
        // Too long for an mbuf: refused, not truncated.
        assert!(d.frame_from(&[0u8; 4000]).is_none());
        assert!(d.frame_from(&[0u8; 70_000]).is_none());

        let in_use_at_start = ports.pool_in_use(0).expect("pool");
        exchange(&t, &mut d, 0, "pa", MAC_A, MAC_B);
        let s = ports.port_stats(0).expect("port stats");
        assert!(s.rx_packets >= FRAMES as u64, "{s:?}");
        assert!(s.tx_packets > FRAMES as u64, "{s:?}");
        if have_af_xdp {
            assert_eq!(ports.ports()[1].mac, MAC_D);
            exchange(&t, &mut d, 1, "qa", MAC_C, MAC_D);
        }
        // Every frame went back to the PMDs or the pool: what is in use
        // now is what the RX rings held before the exchanges (plus TX
        // completions not reaped yet, fewer than one exchange's frames).
        let in_use = ports.pool_in_use(0).expect("pool");
        assert!(
            in_use < in_use_at_start + FRAMES as u32,
            "{in_use} mbufs in use after the exchanges, {in_use_at_start} before"
        );
        drop(d);
        // The queues are free again once the driver is gone.
        let d = ports.driver(0).expect("worker 0's queues again");
        drop(d);
    });
}
