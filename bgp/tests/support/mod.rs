//! Test support of the BGP suites: namespaces and veths (deleted by name on
//! drop), real routers (BIRD 2, GoBGP) started in a namespace as children
//! and killed by PID, the speaker run on a thread inside a namespace, and a
//! log capture to assert on the speaker's log lines.
//!
//! Skips follow `controlplane/src/netns.rs`: without root, `ip netns` or a
//! router daemon, a test prints a loud SKIPPED line and returns, unless
//! `PORTICO_REQUIRE_ROOT=1` (CI), where it fails instead.
// The one unsafe call: setns(2) on a dedicated thread.
#![allow(unsafe_code)]
#![allow(dead_code)] // each test binary uses part of it

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd as _;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// `{prefix}{pid % 100000}x{n}`: unique across parallel test processes,
/// ≤ 15 bytes for a prefix of ≤ 4.
pub fn unique_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}x{n}", std::process::id() % 100_000)
}

fn skips_are_failures() -> bool {
    std::env::var("PORTICO_REQUIRE_ROOT").is_ok_and(|v| v == "1")
}

/// Reports that `test` cannot run: SKIPPED on stderr, or a panic under
/// `PORTICO_REQUIRE_ROOT=1`.
pub fn skip(test: &str, why: &str) {
    if skips_are_failures() {
        panic!("{test} cannot run ({why}) but PORTICO_REQUIRE_ROOT=1 forbids skipping it");
    }
    eprintln!("\n*** SKIPPED {test}: {why} ***\n");
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// True when the test can create namespaces and every program in
/// `programs` is installed; otherwise reports the skip.
pub fn require(test: &str, programs: &[&str]) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let netns = root
        && Command::new("ip")
            .args(["netns", "list"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if !netns {
        skip(
            test,
            "needs root and network namespaces (ip netns); CI runs it as root",
        );
        return false;
    }
    let missing: Vec<&str> = programs.iter().copied().filter(|p| !have(p)).collect();
    if !missing.is_empty() {
        skip(
            test,
            &format!(
                "{} not installed (apt-get install bird2 gobgpd)",
                missing.join(", ")
            ),
        );
        return false;
    }
    true
}

/// Runs a command, failing with its output when it fails.
pub fn run(cmd: &str, args: &[&str]) -> io::Result<Output> {
    let out = Command::new(cmd).args(args).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{cmd} {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        )));
    }
    Ok(out)
}

/// A network namespace, deleted by name on drop.
#[derive(Debug)]
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(prefix: &str) -> Netns {
        let name = unique_name(prefix);
        run("ip", &["netns", "add", &name]).expect("ip netns add");
        let ns = Netns { name };
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// Runs `argv` inside the namespace; panics if it fails.
    pub fn exec(&self, argv: &[&str]) -> String {
        let mut full = vec!["netns", "exec", &self.name];
        full.extend_from_slice(argv);
        let out = run("ip", &full).unwrap_or_else(|e| panic!("{e}"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Like [`Self::exec`], whatever the exit status (stdout + stderr).
    pub fn exec_unchecked(&self, argv: &[&str]) -> String {
        let mut full = vec!["netns", "exec", &self.name];
        full.extend_from_slice(argv);
        match Command::new("ip").args(&full).output() {
            Ok(o) => format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => format!("cannot run {argv:?}: {e}"),
        }
    }

    /// Starts `argv` in the namespace as a child with output appended to
    /// `log`; killed by PID on drop.
    pub fn spawn(&self, argv: &[&str], log: &std::path::Path) -> Daemon {
        let file = File::create(log).expect("log file");
        let err = file.try_clone().expect("log file");
        let mut full = vec!["netns", "exec", &self.name];
        full.extend_from_slice(argv);
        let child = Command::new("ip")
            .args(&full)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"));
        Daemon {
            child: Some(child),
            log: log.to_path_buf(),
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A router namespace and a speaker namespace linked by a veth:
/// 10.0.0.1/24 (router) ↔ 10.0.0.2/24 (speaker).
pub fn router_and_speaker() -> (Netns, Netns) {
    let router = Netns::new("bgr");
    let speaker = Netns::new("bgs");
    veth(
        &router,
        &unique_name("r"),
        "10.0.0.1/24",
        &speaker,
        &unique_name("s"),
        "10.0.0.2/24",
    );
    (router, speaker)
}

/// A veth pair `a_if` (in `a`, with `a_addr`) ↔ `b_if` (in `b`).
pub fn veth(a: &Netns, a_if: &str, a_addr: &str, b: &Netns, b_if: &str, b_addr: &str) {
    run(
        "ip",
        &[
            "link", "add", a_if, "netns", &a.name, "type", "veth", "peer", "name", b_if, "netns",
            &b.name,
        ],
    )
    .expect("ip link add veth");
    for (ns, ifname, addr) in [(a, a_if, a_addr), (b, b_if, b_addr)] {
        ns.exec(&["ip", "addr", "add", addr, "dev", ifname]);
        ns.exec(&["ip", "link", "set", ifname, "up"]);
    }
}

/// A child process (run through `ip netns exec`, which execs it, so the
/// PID is the daemon's), killed by PID on drop.
#[derive(Debug)]
pub struct Daemon {
    child: Option<Child>,
    pub log: PathBuf,
}

impl Daemon {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The daemon's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A temporary directory, removed on drop.
#[derive(Debug)]
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        let path = std::env::temp_dir().join(unique_name(prefix));
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Polls `f` every 20 ms until it is true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// BIRD 2 running in a namespace with its own control socket, config and
/// log in a temporary directory.
#[derive(Debug)]
pub struct Bird {
    pub daemon: Daemon,
    pub sock: PathBuf,
    pub dir: TempDir,
    pub ns_name: String,
}

impl Bird {
    /// Starts `bird -f` with `config` (a `log` line to the directory's
    /// bird.log is prepended) and waits for its control socket.
    pub fn start(ns: &Netns, config: &str) -> Bird {
        let dir = TempDir::new("bird");
        let sock = dir.path.join("bird.ctl");
        let conf = dir.path.join("bird.conf");
        let log = dir.path.join("bird.log");
        let pid = dir.path.join("bird.pid");
        std::fs::write(
            &conf,
            format!(
                "log \"{}\" all;\ndebug protocols {{ states, events }};\n{config}",
                log.display()
            ),
        )
        .expect("bird.conf");
        let daemon = ns.spawn(
            &[
                "bird",
                "-f",
                "-c",
                conf.to_str().expect("utf-8 path"),
                "-s",
                sock.to_str().expect("utf-8 path"),
                "-P",
                pid.to_str().expect("utf-8 path"),
            ],
            &dir.path.join("bird.out"),
        );
        let bird = Bird {
            daemon,
            sock,
            dir,
            ns_name: ns.name.clone(),
        };
        let up = wait_until(Duration::from_secs(10), || {
            bird.sock.exists() && bird.birdc("show status").contains("Daemon is up")
        });
        assert!(up, "BIRD did not come up: {}", bird.diagnostics());
        bird
    }

    /// `birdc -s <sock> <cmd>` (the socket is a path, so no namespace
    /// needed); stdout.
    pub fn birdc(&self, cmd: &str) -> String {
        let mut argv = vec!["-s", self.sock.to_str().unwrap_or_default()];
        argv.extend(cmd.split_whitespace());
        match Command::new("birdc").args(&argv).output() {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            Err(e) => format!("birdc: {e}"),
        }
    }

    /// `show protocols all <proto>`.
    pub fn protocol(&self, proto: &str) -> String {
        self.birdc(&format!("show protocols all {proto}"))
    }

    /// The `BGP state:` of `proto`.
    pub fn bgp_state(&self, proto: &str) -> String {
        self.protocol(proto)
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("BGP state:")
                    .map(|s| s.trim().to_string())
            })
            .unwrap_or_default()
    }

    /// The routes of `proto` (`show route all protocol <proto>`).
    pub fn routes(&self, proto: &str) -> Vec<BirdRoute> {
        parse_routes(&self.birdc(&format!("show route all protocol {proto}")))
    }

    /// How many routes `proto` imported (`show route count protocol`).
    pub fn route_count(&self, proto: &str) -> Option<usize> {
        let out = self.birdc(&format!("show route count protocol {proto}"));
        out.lines()
            .find(|l| l.contains(" of ") && l.contains("routes"))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
    }

    pub fn diagnostics(&self) -> String {
        format!(
            "--- bird.log ---\n{}\n--- bird stdout/stderr ---\n{}",
            std::fs::read_to_string(self.dir.path.join("bird.log")).unwrap_or_default(),
            self.daemon.log_text()
        )
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path.join("bird.log")).unwrap_or_default()
    }
}

/// One route of `show route all`.
#[derive(Debug, Clone, Default)]
pub struct BirdRoute {
    pub prefix: String,
    /// `via 10.0.0.2 on r0` lines.
    pub via: Vec<String>,
    /// `BGP.origin` → `IGP` and so on.
    pub attrs: std::collections::BTreeMap<String, String>,
}

fn parse_routes(out: &str) -> Vec<BirdRoute> {
    let mut routes: Vec<BirdRoute> = Vec::new();
    for line in out.lines() {
        if line.starts_with("BIRD ") || line.starts_with("Table ") || line.trim().is_empty() {
            continue;
        }
        let starts_route = !line.starts_with(char::is_whitespace) && line.contains('/');
        // A second route for the same prefix starts with spaces + "unicast".
        let same_prefix_route = line.starts_with(' ') && line.contains(" unicast ");
        if starts_route || same_prefix_route {
            let prefix = if starts_route {
                line.split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string()
            } else {
                routes.last().map(|r| r.prefix.clone()).unwrap_or_default()
            };
            routes.push(BirdRoute {
                prefix,
                ..Default::default()
            });
            continue;
        }
        let Some(r) = routes.last_mut() else { continue };
        let t = line.trim();
        if let Some(v) = t.strip_prefix("via ") {
            r.via.push(v.to_string());
        } else if let Some((k, v)) = t.split_once(':') {
            r.attrs.insert(k.to_string(), v.trim().to_string());
        }
    }
    routes
}

/// A tokio runtime whose thread lives in a network namespace: tasks
/// spawned on it (the speaker's session task) open their sockets there.
/// The test thread enters it to spawn and uses `block_on` to wait (the
/// namespace thread drives IO and timers).
pub struct NsRuntime {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NsRuntime {
    pub fn new(ns: &Netns) -> NsRuntime {
        let path = format!("/var/run/netns/{}", ns.name);
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let file = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            // SAFETY: `file` is an open netns descriptor; setns changes the
            // network namespace of this thread only.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", io::Error::last_os_error());
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            tx.send(rt.handle().clone()).expect("handle");
            rt.block_on(async {
                let _ = stop_rx.await;
            });
            // Dropping the runtime drops the tasks still on it (their
            // sockets close, as in a crash).
        });
        let handle = rx.recv().expect("namespace runtime started");
        NsRuntime {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Runs `f` with this runtime entered (so `tokio::spawn` lands on it).
    pub fn enter<T>(&self, f: impl FnOnce() -> T) -> T {
        let _guard = self.handle.enter();
        f()
    }

    /// Waits for `fut` (polled on the calling thread; IO and timers are
    /// driven by the namespace thread).
    pub fn block_on<F: std::future::Future>(&self, fut: F) -> F::Output {
        self.handle.block_on(fut)
    }

    /// Stops the runtime, dropping every task on it.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for NsRuntime {
    fn drop(&mut self) {
        self.stop();
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
