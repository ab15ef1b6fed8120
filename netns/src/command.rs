//! Running programs (`ip`, `kill`, ...) and finding them on `PATH`.

use std::io;
use std::process::{Command, Output, Stdio};

/// Run a command and wait for it; an error carries the command line and its
/// stderr and stdout when it fails.
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

/// Whether a program is on `PATH`.
pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
