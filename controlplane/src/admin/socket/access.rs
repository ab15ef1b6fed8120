//! Who may use the admin socket, decided twice: by the socket file's owner,
//! group and mode (the kernel refuses `connect` without write permission on
//! the file), and by the peer's credentials on every accepted connection
//! (`SO_PEERCRED`, unix(7)), so a socket file made reachable by mistake — a
//! `chmod 0666`, a bind mount into a container — still answers only root,
//! the gateway's own user, and members of the configured admin group.
//!
//! Invariants:
//! * the socket file never exists with a wider mode than [`SOCKET_MODE`]:
//!   it is created under a umask that yields that mode (no window between
//!   `bind` and a later `chmod`), then given to the admin group, if any;
//! * a connection is served only if [`AdminAccess::permits`] the peer; a
//!   refused peer gets one `{"error": "permission denied: …"}` line and a
//!   log line; its request is never handled.

use rustix::fs::Mode;
use rustix::net::UCred;
use std::io;
use std::path::{Path, PathBuf};

/// Mode of the socket file: read and write for the owner and the group.
pub const SOCKET_MODE: u32 = 0o660;
/// The umask `bind` runs under so the file is created with [`SOCKET_MODE`].
const BIND_UMASK: u32 = 0o777 & !SOCKET_MODE;

/// Why an admin group or the socket's ownership could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error(
        "admin group {name:?}: no such group in /etc/group (give a group name or a numeric gid)"
    )]
    UnknownGroup { name: String },
    #[error("reading /etc/group to resolve the admin group {name:?}: {source}")]
    GroupFile { name: String, source: io::Error },
    #[error("giving {} to group {gid}: {source}", path.display())]
    Chown {
        path: PathBuf,
        gid: u32,
        source: io::Error,
    },
    #[error("{} has mode {mode:o} after creation, expected {SOCKET_MODE:o}", path.display())]
    Mode { path: PathBuf, mode: u32 },
}

/// The admin socket's access policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdminAccess {
    /// Members of this group (primary or supplementary) may connect, and
    /// the socket file belongs to it. `None`: root and the gateway's own
    /// user only.
    pub group_gid: Option<u32>,
}

impl AdminAccess {
    /// The policy for `--admin-group NAME_OR_GID` (`None`: no group).
    pub fn for_group(group: Option<&str>) -> Result<Self, AccessError> {
        Ok(AdminAccess {
            group_gid: group.map(resolve_group).transpose()?,
        })
    }

    /// Whether the peer with these credentials may be served; `Err` says why
    /// not, for the refusal line and the log.
    pub fn permits(&self, peer: &UCred) -> Result<(), String> {
        let uid = peer.uid.as_raw();
        if uid == 0 || uid == rustix::process::geteuid().as_raw() {
            return Ok(());
        }
        if let Some(gid) = self.group_gid
            && (peer.gid.as_raw() == gid || supplementary_groups(peer.pid).contains(&gid))
        {
            return Ok(());
        }
        Err(match self.group_gid {
            Some(gid) => format!(
                "permission denied: uid {uid} is neither root, the gateway's user, nor in group {gid}"
            ),
            None => format!(
                "permission denied: uid {uid} is neither root nor the gateway's user (start the gateway with --admin-group to let a group in)"
            ),
        })
    }
}

/// Resolve a group name (from /etc/group) or a numeric gid.
fn resolve_group(name: &str) -> Result<u32, AccessError> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(gid);
    }
    let text = std::fs::read_to_string("/etc/group").map_err(|source| AccessError::GroupFile {
        name: name.to_owned(),
        source,
    })?;
    gid_in_group_file(&text, name).ok_or_else(|| AccessError::UnknownGroup {
        name: name.to_owned(),
    })
}

/// The gid of `name` in group(5) text.
fn gid_in_group_file(text: &str, name: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        let group = fields.next()?;
        let _password = fields.next()?;
        let gid = fields.next()?;
        (group == name).then(|| gid.parse().ok()).flatten()
    })
}

/// The supplementary groups of process `pid` (its `Groups:` line in
/// /proc/PID/status; empty if the process is gone).
fn supplementary_groups(pid: rustix::process::Pid) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{}/status", pid.as_raw_nonzero()))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Groups:"))
                .map(|groups| {
                    groups
                        .split_whitespace()
                        .filter_map(|g| g.parse().ok())
                        .collect()
                })
        })
        .unwrap_or_default()
}

/// The peer's credentials on an accepted connection.
pub fn peer_credentials(stream: &std::os::unix::net::UnixStream) -> io::Result<UCred> {
    rustix::net::sockopt::socket_peercred(stream).map_err(io::Error::from)
}

/// Run `bind` with the umask that makes the socket file [`SOCKET_MODE`],
/// restoring the previous umask after. The umask is per process: files
/// other threads create meanwhile are created at most as wide as usual
/// (this mask is narrower than any umask a gateway runs under).
pub fn bind_with_mode<T>(bind: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let previous = rustix::process::umask(Mode::from_raw_mode(BIND_UMASK));
    let bound = bind();
    rustix::process::umask(previous);
    bound
}

/// Give the socket file to the admin group (if any) and check its mode.
pub fn finish_socket_file(path: &Path, access: &AdminAccess) -> Result<(), AccessError> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(gid) = access.group_gid {
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(|source| AccessError::Chown {
            path: path.to_path_buf(),
            gid,
            source,
        })?;
    }
    let mode = std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(0);
    if mode != SOCKET_MODE {
        return Err(AccessError::Mode {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_file_lookup() {
        let text = "root:x:0:\nadm:x:4:syslog\nportico-ops:x:1234:alice,bob\n";
        assert_eq!(gid_in_group_file(text, "portico-ops"), Some(1234));
        assert_eq!(gid_in_group_file(text, "adm"), Some(4));
        assert_eq!(gid_in_group_file(text, "portico"), None);
        assert_eq!(gid_in_group_file("broken-line\n", "broken-line"), None);
    }

    #[test]
    fn numeric_group_and_unknown_name() {
        assert_eq!(
            AdminAccess::for_group(Some("4321")).expect("gid"),
            AdminAccess {
                group_gid: Some(4321)
            }
        );
        let err = AdminAccess::for_group(Some("no-such-group-portico-test")).unwrap_err();
        assert!(err.to_string().contains("no such group"), "{err}");
    }

    #[test]
    fn root_and_own_user_permitted_others_not() {
        let access = AdminAccess::default();
        let cred = |uid: u32, gid: u32| UCred {
            pid: rustix::process::getpid(),
            uid: rustix::process::Uid::from_raw(uid),
            gid: rustix::process::Gid::from_raw(gid),
        };
        assert!(access.permits(&cred(0, 0)).is_ok());
        let me = rustix::process::geteuid().as_raw();
        assert!(access.permits(&cred(me, 12345)).is_ok());
        if me != 54321 {
            let denied = access.permits(&cred(54321, 54321)).unwrap_err();
            assert!(denied.contains("permission denied: uid 54321"), "{denied}");
        }
        let group = AdminAccess {
            group_gid: Some(777),
        };
        assert!(group.permits(&cred(54321, 777)).is_ok());
        assert!(group.permits(&cred(54321, 778)).is_err());
    }
}
