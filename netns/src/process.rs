//! A child process owned by a guard.
//!
//! Invariant: a [`Process`] is stopped (SIGTERM, then SIGKILL) by its PID,
//! never by name, and reaped when its guard is dropped.

use crate::command::run;
use std::io;
use std::process::{Child, Command, ExitStatus, Output};
use std::time::{Duration, Instant};

/// A child process, killed (by PID) and reaped on drop.
#[derive(Debug)]
pub struct Process {
    child: Option<Child>,
}

impl Process {
    pub(crate) fn new(child: Child) -> Self {
        Process { child: Some(child) }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Ask the process to stop with SIGTERM and wait up to `timeout`.
    pub fn terminate(&mut self, timeout: Duration) -> io::Result<Option<ExitStatus>> {
        let Some(child) = self.child.as_mut() else {
            return Ok(None);
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        self.wait_exit(timeout)
    }

    /// Wait up to `timeout` for the process to exit (after a signal sent
    /// with [`Process::signal`]); `None` if it still runs (or was reaped
    /// already).
    pub fn wait_exit(&mut self, timeout: Duration) -> io::Result<Option<ExitStatus>> {
        let Some(child) = self.child.as_mut() else {
            return Ok(None);
        };
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
