//! Test support of the BGP suites, on top of `portico-netns` (namespaces,
//! veths, process guards, the speaker's tokio runtime inside a namespace,
//! skips, the BIRD 2 rig [`Bird`] shared with the gateway's suites): the
//! router/speaker topology (GoBGP lives in gobgp.rs) and a log capture to
//! assert on the speaker's log lines.
//!
//! Skips follow `portico-netns`: without root, `ip netns` or a router
//! daemon, a test prints a loud SKIPPED banner and returns, unless
//! `PORTICO_REQUIRE_ROOT=1` (CI), where it fails instead.
#![allow(dead_code)] // each test binary uses part of it

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
    let router = Netns::new("bgr").expect("router namespace");
    let speaker = Netns::new("bgs").expect("speaker namespace");
    veth(
        &router,
        &unique_name("r"),
        Some("10.0.0.1/24"),
        &speaker,
        &unique_name("s"),
        Some("10.0.0.2/24"),
    )
    .expect("veth router ↔ speaker");
    (router, speaker)
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
