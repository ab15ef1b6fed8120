//! Network namespaces made with `ip netns`, commands and processes run
//! inside them, and threads that enter them.
//!
//! Invariant: a [`Netns`] is deleted (by its unique name) when its guard is
//! dropped; deleting it destroys the interfaces inside it, veth pairs with
//! both ends.

use crate::command::run;
use crate::name::unique_name;
use crate::process::Process;
use std::io;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A network namespace with its loopback up, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// A new namespace named [`unique_name`]`(prefix)`.
    pub fn new(prefix: &str) -> io::Result<Self> {
        let name = unique_name(prefix);
        run("ip", &["netns", "add", &name])?;
        // From here on the guard deletes it, also when bringing lo up fails.
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
        Ok(Process::new(child))
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

/// Run `f` on a thread that entered network namespace `ns` and return what
/// it returns: sockets `f` opens (and ioctls it makes) belong to `ns`. The
/// caller's thread stays where it is; a panic in `f` is resumed here.
///
/// # Panics
/// If the namespace cannot be entered (test support: the message names the
/// namespace and the OS error).
#[cfg(target_os = "linux")]
pub fn in_netns<T: Send>(ns: &Netns, f: impl FnOnce() -> T + Send) -> T {
    let path = ns.path();
    std::thread::scope(|s| {
        let handle = s.spawn(move || {
            if let Err(e) = crate::sys::enter_netns(&path) {
                panic!("entering network namespace {}: {e}", path.display());
            }
            f()
        });
        match handle.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}
