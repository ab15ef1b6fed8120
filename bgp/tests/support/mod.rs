//! Test support of the BGP suites, on top of `portico-netns` (namespaces,
//! veths, process guards, the speaker's tokio runtime inside a namespace,
//! skips, the BIRD 2 rig [`Bird`] shared with the gateway's suites): the
//! topologies (router ↔ speaker on a veth, [`link`]; router ↔ middle ↔
//! speaker, [`two_hops`]; any veth with addresses, [`connect`]), the BIRD
//! labs on them (`lab`), the FRR rig (`frr`; GoBGP lives in gobgp.rs) and
//! a log capture to assert on the speaker's log lines.
//!
//! Skips follow `portico-netns`: without root, `ip netns` or a router
//! daemon, a test prints a loud SKIPPED banner and returns, unless
//! `PORTICO_REQUIRE_ROOT=1` (CI), where it fails instead.
#![allow(dead_code)] // each test binary uses part of it

pub mod frr;
pub mod lab;

use std::io::{self, Write};
use std::sync::{Arc, Mutex, OnceLock};

#[allow(unused_imports)] // not every suite uses both
pub use portico_netns::bird::{Bird, BirdRoute};
use portico_netns::{Netns, unique_name, veth};

/// True when the test can create namespaces and every program in
/// `programs` (router daemons and their CLIs) is installed; otherwise
/// reports the skip.
pub fn require(test: &str, programs: &[&str]) -> bool {
    portico_netns::require_root(test)
        && portico_netns::require_programs(test, programs, "apt-get install bird2 gobgpd")
}

/// A router namespace and a speaker namespace linked by a veth:
/// 10.0.0.1/24 (router) ↔ 10.0.0.2/24 (speaker).
pub fn router_and_speaker() -> (Netns, Netns) {
    router_and_speaker_with_ipv6(false)
}

/// The router's and the speaker's IPv6 addresses on the veth of
/// [`router_and_speaker_with_ipv6`], and the speaker's link-local one.
pub const ROUTER_V6: &str = "2001:db8::1";
pub const SPEAKER_V6: &str = "2001:db8::2";
pub const SPEAKER_LINK_LOCAL: &str = "fe80::2";

/// [`router_and_speaker`], with `ipv6` also 2001:db8::1/64 ↔
/// 2001:db8::2/64 and fe80::2/64 on the speaker's side (no duplicate
/// address detection, so they are usable at once).
pub fn router_and_speaker_with_ipv6(ipv6: bool) -> (Netns, Netns) {
    let link = link(ipv6);
    (link.router, link.speaker)
}

/// The router's link-local address on the veth of [`link`] with IPv6.
pub const ROUTER_LINK_LOCAL: &str = "fe80::1";

/// The two namespaces of [`router_and_speaker`] and the names of their
/// ends of the veth.
pub struct Link {
    pub router: Netns,
    pub speaker: Netns,
    pub router_if: String,
    pub speaker_if: String,
}

/// [`router_and_speaker_with_ipv6`] with the interface names; with
/// `ipv6` the router's side also has [`ROUTER_LINK_LOCAL`]/64.
pub fn link(ipv6: bool) -> Link {
    let router = Netns::new("bgr").expect("router namespace");
    let speaker = Netns::new("bgs").expect("speaker namespace");
    let v6: &[(&str, &str)] = if ipv6 {
        &[
            (ROUTER_V6, SPEAKER_V6),
            (ROUTER_LINK_LOCAL, SPEAKER_LINK_LOCAL),
        ]
    } else {
        &[]
    };
    let (router_if, speaker_if) = connect(&router, &speaker, Some(("10.0.0.1", "10.0.0.2")), v6);
    Link {
        router,
        speaker,
        router_if,
        speaker_if,
    }
}

/// A veth between `router` and `speaker` with the `v4` pair of /24
/// addresses and each `v6` pair as /64s (no duplicate address detection,
/// so they are usable at once); the names of its router and speaker ends.
pub fn connect(
    router: &Netns,
    speaker: &Netns,
    v4: Option<(&str, &str)>,
    v6: &[(&str, &str)],
) -> (String, String) {
    let (r_if, s_if) = (unique_name("r"), unique_name("s"));
    let v4 = v4.map(|(r, s)| (format!("{r}/24"), format!("{s}/24")));
    veth(
        router,
        &r_if,
        v4.as_ref().map(|a| a.0.as_str()),
        speaker,
        &s_if,
        v4.as_ref().map(|a| a.1.as_str()),
    )
    .expect("veth router ↔ speaker");
    for (r, s) in v6 {
        for (ns, ifname, addr) in [(router, &r_if, r), (speaker, &s_if, s)] {
            let addr = format!("{addr}/64");
            ns.exec("ip", &["-6", "addr", "add", &addr, "dev", ifname, "nodad"])
                .expect("IPv6 address on the veth");
        }
    }
    (r_if, s_if)
}

/// Three namespaces in a row: speaker ↔ middle (a forwarding router) ↔
/// router, each side's default route through the middle; IPv4
/// 10.0.1.2/24 ↔ 10.0.1.1/24, 10.0.2.1/24 ↔ 10.0.2.2/24, and with `ipv6`
/// also 2001:db8:1::2/64 ↔ ::1, 2001:db8:2::1/64 ↔ ::2 (no DAD). A router
/// one hop further than on a veth: every packet between the ends loses
/// one TTL / hop limit in the middle.
pub struct TwoHops {
    pub router: Netns,
    pub middle: Netns,
    pub speaker: Netns,
}

/// The two ends' addresses of [`two_hops`].
pub const FAR_ROUTER: &str = "10.0.2.2";
pub const FAR_SPEAKER: &str = "10.0.1.2";
pub const FAR_ROUTER_V6: &str = "2001:db8:2::2";
pub const FAR_SPEAKER_V6: &str = "2001:db8:1::2";

pub fn two_hops(ipv6: bool) -> TwoHops {
    let ns = |prefix| Netns::new(prefix).expect("namespace");
    let (router, middle, speaker) = (ns("bgr"), ns("bgm"), ns("bgs"));
    let v6 = |pair: (&'static str, &'static str)| if ipv6 { vec![pair] } else { Vec::new() };
    connect(
        &middle,
        &speaker,
        Some(("10.0.1.1", FAR_SPEAKER)),
        &v6(("2001:db8:1::1", FAR_SPEAKER_V6)),
    );
    connect(
        &router,
        &middle,
        Some((FAR_ROUTER, "10.0.2.1")),
        &v6((FAR_ROUTER_V6, "2001:db8:2::1")),
    );
    let run = |ns: &Netns, cmd: &str, args: &[&str]| {
        ns.exec(cmd, args)
            .unwrap_or_else(|e| panic!("{cmd} {args:?}: {e}"));
    };
    run(&middle, "sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
    run(
        &speaker,
        "ip",
        &["route", "add", "default", "via", "10.0.1.1"],
    );
    run(
        &router,
        "ip",
        &["route", "add", "default", "via", "10.0.2.1"],
    );
    if ipv6 {
        run(
            &middle,
            "sysctl",
            &["-qw", "net.ipv6.conf.all.forwarding=1"],
        );
        run(
            &speaker,
            "ip",
            &["-6", "route", "add", "default", "via", "2001:db8:1::1"],
        );
        run(
            &router,
            "ip",
            &["-6", "route", "add", "default", "via", "2001:db8:2::1"],
        );
    }
    TwoHops {
        router,
        middle,
        speaker,
    }
}

/// Every log line of this test process (nextest runs one test per
/// process), also written to stderr.
pub fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer_buf = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "portico_bgp=info".into()),
            )
            .with_ansi(false)
            .with_writer(move || Tee(writer_buf.clone()))
            .try_init();
        buf
    })
    .clone()
}

/// The captured log so far.
pub fn log_text() -> String {
    String::from_utf8_lossy(&logs().lock().expect("log lock")).into_owned()
}

struct Tee(Arc<Mutex<Vec<u8>>>);

impl Write for Tee {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if let Ok(mut v) = self.0.lock() {
            v.extend_from_slice(b);
        }
        io::stderr().write_all(b)?;
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}
