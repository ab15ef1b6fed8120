//! The harness's daemons (etcd, kube-apiserver): started in their own
//! process group with output appended to a log, killed by PID (SIGKILL) and
//! reaped on drop.

use super::KubeClusterError;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A child process killed by PID (SIGKILL) and reaped on drop.
#[derive(Debug)]
pub(super) struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    pub(super) fn spawn(
        program: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<Self, KubeClusterError> {
        let what = format!("start {}", program.display());
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(KubeClusterError::io(format!("open {}", log.display())))?;
        let err = file.try_clone().map_err(KubeClusterError::io(&what))?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err))
            // Own process group: a Ctrl-C reaches only the test, whose
            // guards then stop the daemons.
            .process_group(0)
            .spawn()
            .map_err(KubeClusterError::io(what))?;
        Ok(Daemon {
            child,
            log: log.to_path_buf(),
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(description)` when the process has exited.
    pub(super) fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!("exited with {status}")),
            Ok(None) => None,
            Err(e) => Some(format!("wait failed: {e}")),
        }
    }

    pub(super) fn log_tail(&self) -> String {
        log_tail(&self.log)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // `Child::kill` sends SIGKILL to this PID only.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last 30 lines of the log at `path`.
pub(super) fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
