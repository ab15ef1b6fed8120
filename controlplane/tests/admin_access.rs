//! Who may use the admin socket (issue 15): the socket file is created
//! `0660` and given to the admin group, and every connection's peer
//! credentials are checked, so even a socket file opened to everyone by
//! mistake answers only root, the gateway's user and the admin group. The
//! clients are the real `portico stats` binary run as other users
//! (`setpriv`, util-linux).

mod common;

use common::BIN;
use portico::admin::{
    AdminAccess, AdminLimits, AdminServer, CounterReport, SnapshotReport, StatsReport,
};
use portico_tests::{TempDir, require_programs, require_root};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

const GROUP: u32 = 64_123;
const OUTSIDER: u32 = 64_124;

fn report() -> StatsReport {
    StatsReport {
        pid: std::process::id(),
        uptime_ms: 1,
        config: "test.toml".into(),
        snapshot: SnapshotReport {
            generation: 11,
            age_ms: 0,
        },
        total: CounterReport::default(),
        workers: Vec::new(),
        ports: Vec::new(),
        services: Vec::new(),
        snat: Vec::new(),
        control_plane: Default::default(),
        neighbours: Default::default(),
        announcements: Default::default(),
        bgp: Default::default(),
    }
}

/// `portico stats --json` as `uid:gid` with no supplementary groups.
fn stats_as(bin: &Path, socket: &Path, uid: u32, gid: u32) -> Output {
    Command::new("setpriv")
        .args([
            format!("--reuid={uid}"),
            format!("--regid={gid}"),
            "--clear-groups".into(),
        ])
        .arg(bin)
        .args(["stats", "--json", "--admin-socket"])
        .arg(socket)
        .output()
        .expect("setpriv runs")
}

#[test]
fn socket_mode_group_and_peer_credentials() {
    const TEST: &str = "socket_mode_group_and_peer_credentials";
    if !require_root(TEST) || !require_programs(TEST, &["setpriv"], "util-linux") {
        return;
    }
    // Everything the test users touch lives in a directory they can enter:
    // a copy of the binary, and the socket.
    let dir = TempDir::new("padmacc").expect("temp dir");
    std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let bin = dir.path.join("portico");
    std::fs::copy(BIN, &bin).expect("copy the binary");
    let socket = dir.path.join("portico.sock");
    let server = AdminServer::start_with(
        &socket,
        AdminLimits::default(),
        AdminAccess {
            group_gid: Some(GROUP),
        },
        |_| serde_json::to_string(&report()).map_err(|e| e.to_string()),
    )
    .expect("starts");
    let meta = std::fs::metadata(&socket).expect("socket");
    assert_eq!(
        (meta.permissions().mode() & 0o777, meta.gid()),
        (0o660, GROUP),
        "created 0660 and given to the admin group"
    );

    let member = stats_as(&bin, &socket, OUTSIDER, GROUP);
    assert!(member.status.success(), "{member:?}");
    let stats: StatsReport =
        serde_json::from_slice(&member.stdout).expect("a member gets the stats");
    assert_eq!(stats.snapshot.generation, 11);

    // Without the group the file's mode keeps the outsider out...
    let outsider = stats_as(&bin, &socket, OUTSIDER, OUTSIDER);
    assert!(!outsider.status.success());
    assert!(
        String::from_utf8_lossy(&outsider.stderr).contains("ermission denied"),
        "{outsider:?}"
    );
    // ...and with the file opened to everyone by mistake, the peer
    // credentials still do.
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let outsider = stats_as(&bin, &socket, OUTSIDER, OUTSIDER);
    assert!(!outsider.status.success(), "{outsider:?}");
    let stderr = String::from_utf8_lossy(&outsider.stderr);
    assert!(
        stderr.contains("permission denied: uid 64124 is neither root"),
        "{stderr}"
    );
    // Root always gets in.
    let root = Command::new(&bin)
        .args(["stats", "--json", "--admin-socket"])
        .arg(&socket)
        .output()
        .expect("runs");
    assert!(root.status.success(), "{root:?}");
    server.stop();
}
