//! Network namespaces, veth pairs and processes started inside them: the
//! building blocks of `portico demo`'s topology and of the end-to-end tests
//! (the `portico-tests` crate re-exports this module).
//!
//! Every resource is owned by a guard that removes it on drop, also when a
//! test panics: namespaces are deleted by their unique name, processes are
//! killed by PID (never by name). Names carry the test process id and a
//! counter, so tests running in parallel never collide.
//!
//! Tests that need root call [`require_root`] first; without root (or
//! without `ip netns`) it prints a loud `SKIPPED` line to stderr and the test
//! returns. With `PORTICO_REQUIRE_ROOT=1` (set by `tests/run.sh` when it runs
//! as root, as CI does) a test that would skip fails instead: see [`skip`].

use std::io;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A short unique name: `{prefix}{pid % 100000}x{n}` (≤ 15 bytes for
/// interface names when `prefix` is ≤ 4 bytes).
pub fn unique_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}x{n}", std::process::id() % 100_000)
}

/// True when `PORTICO_REQUIRE_ROOT=1`: `tests/run.sh` sets it when it runs
/// as root (as CI does), and then no test may skip for want of root,
/// namespaces or a program `tests/run.sh` installs.
pub fn skips_are_failures() -> bool {
    std::env::var("PORTICO_REQUIRE_ROOT").is_ok_and(|v| v == "1")
}

/// Reports that `test` cannot run and why: a loud `SKIPPED` line on stderr,
/// or a panic under `PORTICO_REQUIRE_ROOT=1` (see [`skips_are_failures`]).
pub fn skip(test: &str, why: &str) {
    if skips_are_failures() {
        panic!("{test} cannot run ({why}) but PORTICO_REQUIRE_ROOT=1 forbids skipping it");
    }
    eprintln!("\n*** SKIPPED {test}: {why} ***\n");
}

/// True when the test can create namespaces; otherwise reports the skip
/// with [`skip`] (which fails the test under `PORTICO_REQUIRE_ROOT=1`).
pub fn require_root(test: &str) -> bool {
    // SAFETY-free check: `id -u` avoids libc here.
    let uid = Command::new("id").arg("-u").output().ok().and_then(|o| {
        String::from_utf8(o.stdout)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
    });
    let ok = uid == Some(0)
        && Command::new("ip")
            .args(["netns", "list"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if !ok {
        skip(
            test,
            "needs root and network namespaces (ip netns); CI runs it as root",
        );
    }
    ok
}

/// Run a command, failing with its stderr when it fails.
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

/// A network namespace, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(prefix: &str) -> io::Result<Self> {
        let name = unique_name(prefix);
        run("ip", &["netns", "add", &name])?;
        let ns = Netns { name };
        ns.exec("ip", &["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Run a command inside the namespace and wait for it.
    pub fn exec(&self, cmd: &str, args: &[&str]) -> io::Result<Output> {
        let mut full = vec!["netns", "exec", &self.name, cmd];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// Like [`Self::exec`] but returns the output whatever the exit status.
    pub fn exec_unchecked(&self, cmd: &str, args: &[&str]) -> io::Result<Output> {
        let mut full = vec!["netns", "exec", &self.name, cmd];
        full.extend_from_slice(args);
        Command::new("ip").args(&full).output()
    }

    /// Start a long-running process inside the namespace; killed on drop of
    /// the returned guard. Its output is kept in pipes (read it with
    /// [`Process::finish`]); it runs in its own process group, so a Ctrl-C
    /// in the terminal reaches only the caller, whose guards then stop it.
    pub fn spawn(&self, cmd: &str, args: &[&str]) -> io::Result<Process> {
        self.spawn_with(cmd, args, Stdio::piped(), Stdio::piped())
    }

    /// Like [`Self::spawn`] with stdout and stderr appended to `log`, for
    /// chatty processes whose pipes nobody reads.
    pub fn spawn_logged(&self, cmd: &str, args: &[&str], log: &Path) -> io::Result<Process> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let err = file.try_clone()?;
        self.spawn_with(cmd, args, Stdio::from(file), Stdio::from(err))
    }

    fn spawn_with(
        &self,
        cmd: &str,
        args: &[&str],
        stdout: Stdio,
        stderr: Stdio,
    ) -> io::Result<Process> {
        let mut full = vec!["netns", "exec", &self.name, cmd];
        full.extend_from_slice(args);
        let child = Command::new("ip")
            .args(&full)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0)
            .spawn()?;
        Ok(Process { child: Some(child) })
    }

    /// Path of the namespace handle (for `setns`).
    pub fn path(&self) -> PathBuf {
        Path::new("/var/run/netns").join(&self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A child process, killed (by PID) and reaped on drop.
#[derive(Debug)]
pub struct Process {
    child: Option<Child>,
}

impl Process {
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Ask the process to stop with SIGTERM and wait up to `timeout`.
    pub fn terminate(&mut self, timeout: Duration) -> io::Result<Option<std::process::ExitStatus>> {
        let Some(child) = self.child.as_mut() else {
            return Ok(None);
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait()? {
                self.child = None;
                return Ok(Some(status));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(None)
    }

    /// Send a signal (`"HUP"`, `"TERM"`, ...) by PID.
    pub fn signal(&self, name: &str) -> io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::other("process already finished"))?;
        run("kill", &[&format!("-{name}"), &pid.to_string()]).map(|_| ())
    }

    /// Whether the process has exited (reaping it if so).
    pub fn has_exited(&mut self) -> bool {
        match self.child.as_mut() {
            None => true,
            Some(child) => !matches!(child.try_wait(), Ok(None)),
        }
    }

    /// Wait up to `timeout` for the process to exit by itself and return
    /// what it wrote (its pipes are drained meanwhile, so a chatty process
    /// never blocks); on timeout it is killed and an error returned.
    pub fn wait_output(mut self, timeout: Duration) -> io::Result<Output> {
        let child = self
            .child
            .take()
            .ok_or_else(|| io::Error::other("process already finished"))?;
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        match rx.recv_timeout(timeout) {
            Ok(output) => output,
            Err(_) => {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
                // The waiting thread reaps it.
                let _ = rx.recv_timeout(Duration::from_secs(5));
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("process {pid} still running after {timeout:?}; killed"),
                ))
            }
        }
    }

    /// Stop the process and return everything it wrote.
    pub fn finish(mut self) -> io::Result<Output> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| io::Error::other("already finished"))?;
        let _ = child.kill();
        child.wait_with_output()
    }
}

impl Drop for Process {
    /// SIGTERM first (nginx's master then stops its workers), SIGKILL if it
    /// is still there after two seconds; always reaped.
    fn drop(&mut self) {
        if self.child.is_some() && matches!(self.terminate(Duration::from_secs(2)), Ok(Some(_))) {
            return;
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A veth pair with each end moved into a namespace and addressed.
pub fn veth(
    a: &Netns,
    a_if: &str,
    a_addr: Option<&str>,
    b: &Netns,
    b_if: &str,
    b_addr: Option<&str>,
) -> io::Result<()> {
    veth_with_queues(a, a_if, a_addr, b, b_if, b_addr, 1)
}

/// [`veth`] with `queues` RX and TX queues on both ends (AF_XDP binds one
/// socket per RX queue; the sending end's TX queue picks the receiving
/// end's RX queue).
pub fn veth_with_queues(
    a: &Netns,
    a_if: &str,
    a_addr: Option<&str>,
    b: &Netns,
    b_if: &str,
    b_addr: Option<&str>,
    queues: u32,
) -> io::Result<()> {
    let q = queues.max(1).to_string();
    let mut args = vec!["link", "add", a_if, "netns", &a.name];
    if queues > 1 {
        args.extend(["numtxqueues", &q, "numrxqueues", &q]);
    }
    args.extend(["type", "veth", "peer", "name", b_if, "netns", &b.name]);
    if queues > 1 {
        args.extend(["numtxqueues", &q, "numrxqueues", &q]);
    }
    run("ip", &args)?;
    for (ns, ifname, addr) in [(a, a_if, a_addr), (b, b_if, b_addr)] {
        if let Some(addr) = addr {
            ns.exec("ip", &["addr", "add", addr, "dev", ifname])?;
        }
        ns.exec("ip", &["link", "set", ifname, "up"])?;
    }
    Ok(())
}

/// Poll `f` until it returns true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    f()
}

/// A temporary directory removed on drop.
#[derive(Debug)]
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(prefix: &str) -> io::Result<Self> {
        let path = std::env::temp_dir().join(unique_name(prefix));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir { path })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// An nginx serving `GET /` with a body naming the backend (`backend <name>`)
/// on `listen` (address:port) inside `ns`, with its own config and logs in a
/// temporary directory. Returns the process guard and the directory.
pub fn nginx(ns: &Netns, name: &str, listen: &str) -> io::Result<(Process, TempDir)> {
    let dir = TempDir::new("ngx")?;
    let conf = format!(
        "worker_processes 1;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\ndaemon off;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {dir};\n  proxy_temp_path {dir};\n  fastcgi_temp_path {dir};\n  uwsgi_temp_path {dir};\n  scgi_temp_path {dir};\n  keepalive_requests 1000000;\n\
           server {{\n    listen {listen} reuseport;\n    location / {{ return 200 \"backend {name} saw $remote_addr\\n\"; }}\n  }}\n}}\n",
        dir = dir.path.display()
    );
    let conf_path = dir.path.join("nginx.conf");
    std::fs::write(&conf_path, conf)?;
    let proc = ns.spawn(
        "nginx",
        &[
            "-c",
            conf_path.to_str().unwrap_or_default(),
            "-p",
            dir.path.to_str().unwrap_or_default(),
        ],
    )?;
    Ok((proc, dir))
}

/// Whether a program is on PATH.
pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
