//! The building blocks on real namespaces: a veth pair gets what was asked
//! for, raw sockets in two namespaces exchange frames over it, entering a
//! namespace moves only the thread made for it, the tasks of a namespace's
//! tokio runtime open their sockets there, and guards clean up.
//!
//! Need root and `ip netns`; otherwise a loud SKIPPED banner (a failure
//! under `PORTICO_REQUIRE_ROOT=1`).

use portico_netns::{
    HostVeth, Netns, NsRuntime, RawSocket, Veth, in_netns, require_programs, require_root, run,
    skips_are_failures, unique_name, wait_until,
};
use std::collections::HashSet;
use std::io::{self, Read as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;
use tokio::io::AsyncWriteExt as _;

const MAC_A: [u8; 6] = [0x02, 0x50, 0x4e, 0, 0, 0xa];
const MAC_B: [u8; 6] = [0x02, 0x50, 0x4e, 0, 0, 0xb];

/// The namespaces `ip netns list` shows.
fn listed_namespaces() -> String {
    let out = run("ip", &["netns", "list"]).expect("ip netns list");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ip -o link show <ifname>` inside `ns`.
fn link(ns: &Netns, ifname: &str) -> String {
    let out = ns
        .exec("ip", &["-o", "link", "show", ifname])
        .expect("ip link show");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The network namespace of the calling thread (`net:[inode]`).
fn own_netns() -> String {
    std::fs::read_link("/proc/thread-self/ns/net")
        .expect("readlink /proc/thread-self/ns/net")
        .display()
        .to_string()
}

/// An Ethernet frame from `MAC_A` to `MAC_B` of an experimental ethertype
/// (0x88b5) carrying `id`, 60 bytes long.
fn frame(id: u8) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&MAC_B);
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.resize(60, id);
    f
}

fn is_test_frame(f: &[u8]) -> bool {
    f.get(12..14) == Some(&[0x88, 0xb5][..])
}

#[test]
fn unique_names_never_repeat_and_fit_an_interface_name() {
    let names: HashSet<String> = (0..1000).map(|_| unique_name("abcd")).collect();
    assert_eq!(names.len(), 1000);
    assert!(names.iter().all(|n| n.len() <= 15), "{names:?}");
}

#[test]
fn a_veth_pair_has_its_macs_mtus_and_addresses_and_carries_raw_frames() {
    if !require_root("portico-netns veth test") {
        return;
    }
    let a = Netns::new("nta").expect("namespace a");
    let b = Netns::new("ntb").expect("namespace b");
    Veth::new(&a, "va", &b, "vb")
        .macs(MAC_A, MAC_B)
        .mtus(1400, 1300)
        .addrs(Some("10.99.0.1/24"), None)
        .create()
        .expect("veth pair");
    let (link_a, link_b) = (link(&a, "va"), link(&b, "vb"));
    assert!(
        link_a.contains("link/ether 02:50:4e:00:00:0a") && link_a.contains("mtu 1400"),
        "{link_a}"
    );
    assert!(
        link_b.contains("link/ether 02:50:4e:00:00:0b") && link_b.contains("mtu 1300"),
        "{link_b}"
    );
    assert!(link_a.contains("UP") && link_b.contains("UP"));
    let addrs = a.exec("ip", &["-o", "addr", "show", "va"]).expect("addr");
    assert!(String::from_utf8_lossy(&addrs.stdout).contains("10.99.0.1/24"));

    let sender = in_netns(&a, || RawSocket::open("va")).expect("socket in a");
    let receiver = in_netns(&b, || RawSocket::open("vb")).expect("socket in b");
    let sent: Vec<Vec<u8>> = (0..5).map(frame).collect();
    for f in &sent {
        sender.send(f).expect("send");
    }
    let got = receiver
        .recv_matching(sent.len(), Duration::from_secs(5), is_test_frame)
        .expect("receive");
    assert_eq!(got, sent, "every frame arrives, intact and in order");
    // The sender does not see its own frames.
    let echoed = sender
        .recv_matching(1, Duration::from_millis(300), is_test_frame)
        .expect("receive on the sender");
    assert!(echoed.is_empty(), "{echoed:?}");
    // An interface of another namespace is not found from here.
    let err = in_netns(&a, || RawSocket::open("vb")).expect_err("vb is in b");
    assert!(err.to_string().contains("vb"), "{err}");
}

#[test]
fn in_netns_moves_only_its_own_thread() {
    if !require_root("portico-netns in_netns test") {
        return;
    }
    let ns = Netns::new("nte").expect("namespace");
    let before = own_netns();
    let inside = in_netns(&ns, own_netns);
    assert_ne!(inside, before, "the thread entered the namespace");
    assert_eq!(own_netns(), before, "the caller stayed where it was");
    let other = Netns::new("nte").expect("another namespace");
    assert_ne!(in_netns(&other, own_netns), inside);
}

#[test]
fn dropping_a_namespace_deletes_it_and_its_veth_ends() {
    if !require_root("portico-netns cleanup test") {
        return;
    }
    let a = Netns::new("ntd").expect("namespace a");
    let b = Netns::new("ntd").expect("namespace b");
    let (name_a, name_b) = (a.name.clone(), b.name.clone());
    Veth::new(&a, "da", &b, "db").create().expect("veth pair");
    assert!(listed_namespaces().contains(&name_a));
    drop(a);
    let listed = listed_namespaces();
    assert!(!listed.contains(&name_a), "{listed}");
    assert!(listed.contains(&name_b), "{listed}");
    // The peer end goes with its partner's namespace (the kernel destroys a
    // namespace's devices asynchronously, after `ip netns del` returns).
    assert!(
        wait_until(Duration::from_secs(10), || b
            .exec("ip", &["link", "show", "db"])
            .is_err()),
        "db still exists"
    );
    drop(b);
    assert!(!listed_namespaces().contains(&name_b));
}

#[test]
fn a_host_veth_links_the_callers_namespace_and_goes_on_drop() {
    if !require_root("portico-netns host veth test") {
        return;
    }
    let ns = Netns::new("nth").expect("namespace");
    // A /30 of this process, so parallel runs do not share one.
    let pid = std::process::id();
    let (third, block) = (pid % 256, pid / 256 % 64 * 4);
    let host_addr = format!("10.253.{third}.{}/30", block + 1);
    let ns_addr = format!("10.253.{third}.{}/30", block + 2);
    let link = HostVeth::new(&ns, &host_addr, &ns_addr).expect("host veth");
    let host_side = run("ip", &["-o", "addr", "show", &link.host_if]).expect("host end");
    assert!(String::from_utf8_lossy(&host_side.stdout).contains(&host_addr));
    let ns_side = ns
        .exec("ip", &["-o", "addr", "show", &link.ns_if])
        .expect("namespace end");
    assert!(String::from_utf8_lossy(&ns_side.stdout).contains(&ns_addr));
    let shown = run("ip", &["-o", "link", "show", &link.host_if]).expect("host link");
    assert!(String::from_utf8_lossy(&shown.stdout).contains("UP"));
    let host_if = link.host_if.clone();
    drop(link);
    assert!(
        run("ip", &["link", "show", &host_if]).is_err(),
        "{host_if} deleted"
    );
}

#[test]
fn require_programs_passes_installed_programs_and_reports_missing_ones() {
    assert!(require_programs(
        "require_programs self-test",
        &["sh", "ip"],
        "iproute2"
    ));
    let missing = std::panic::catch_unwind(|| {
        require_programs(
            "require_programs self-test (this SKIPPED banner is expected)",
            &["sh", "portico-no-such-program"],
            "nowhere",
        )
    });
    if skips_are_failures() {
        let panic = missing.expect_err("a missing program fails the test");
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            message.contains("portico-no-such-program not installed (nowhere)"),
            "{message}"
        );
    } else {
        assert!(!missing.expect("a skip, not a panic"), "a skip");
    }
}

/// Address and port of a listener that a task on `rt` binds to `ip:0`
/// (panicking if it cannot); the task then accepts one connection, waits
/// 50 ms on a timer and writes `hello`, or holds the listener for ever when
/// `serve` is false.
fn listen_on(rt: &NsRuntime, ip: &'static str, serve: bool) -> SocketAddr {
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
    rt.enter(|| {
        tokio::spawn(async move {
            let listener = tokio::net::TcpListener::bind((ip, 0))
                .await
                .expect("bind in the namespace");
            let _ = bound_tx.send(listener.local_addr().expect("local address"));
            if !serve {
                return std::future::pending::<()>().await;
            }
            let (mut stream, _) = listener.accept().await.expect("accept");
            tokio::time::sleep(Duration::from_millis(50)).await;
            stream.write_all(b"hello").await.expect("write");
        })
    });
    rt.block_on(bound_rx).expect("the task bound its listener")
}

#[test]
fn a_namespace_runtime_runs_its_tasks_in_the_namespace_until_stopped() {
    if !require_root("portico-netns NsRuntime test") {
        return;
    }
    let ns = Netns::new("ntr").expect("namespace");
    // An address only this namespace has.
    let ip = "10.252.0.1";
    ns.exec("ip", &["addr", "add", &format!("{ip}/32"), "dev", "lo"])
        .expect("address on lo");
    let mut rt = NsRuntime::new(&ns).expect("namespace runtime");

    let before = own_netns();
    let task = rt.enter(|| tokio::spawn(async { own_netns() }));
    let task_netns = rt.block_on(task).expect("task");
    assert_eq!(task_netns, in_netns(&ns, own_netns), "the task runs in ns");
    assert_eq!(own_netns(), before, "the caller stayed where it was");
    let err = TcpListener::bind((ip, 0)).expect_err("the address is not here");
    assert_eq!(err.kind(), io::ErrorKind::AddrNotAvailable, "{err}");

    // A task's socket is in the namespace; its IO and its timer progress
    // while the test thread waits elsewhere.
    let addr = listen_on(&rt, ip, true);
    let got = in_netns(&ns, || {
        let mut stream = TcpStream::connect(addr)?;
        let mut got = String::new();
        stream.read_to_string(&mut got)?;
        io::Result::Ok(got)
    })
    .expect("a client in the namespace");
    assert_eq!(got, "hello");

    // Stopping drops the tasks still on the runtime: their sockets close.
    let addr = listen_on(&rt, ip, false);
    assert!(
        in_netns(&ns, || TcpStream::connect(addr)).is_ok(),
        "listening"
    );
    rt.stop();
    let err = in_netns(&ns, || TcpStream::connect(addr)).expect_err("closed");
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
}
