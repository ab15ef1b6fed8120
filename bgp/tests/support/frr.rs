//! A real FRR (Debian `frr`) in a router namespace: `zebra` and `bgpd`
//! on their own zserv socket, pid files and vty socket directory (a
//! [`TempDir`]), read through `vtysh -d bgpd`; both stopped by PID on drop.
//! zebra is needed: bgpd finds the interface of an incoming link-local
//! connection (its scope) in zebra's interface table, and it resolves
//! next hops (NHT) through zebra; it also programs the namespace's FIB.

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use portico_netns::{Netns, Process, TempDir, wait_until};

/// The daemons the suites run (Debian installs them outside `PATH`).
pub const BGPD: &str = "/usr/lib/frr/bgpd";
pub const ZEBRA: &str = "/usr/lib/frr/zebra";

/// `bgpd` in a namespace with its configuration, pid file, vty socket and
/// log in a [`TempDir`].
pub struct Frr {
    /// bgpd first: dropped (stopped) before zebra.
    pub daemon: Process,
    pub zebra: Process,
    pub dir: TempDir,
    pub ns_name: String,
    pub log: PathBuf,
}

impl Frr {
    /// Starts `bgpd` with `config` (FRR's `bgpd.conf` syntax) and waits
    /// until `vtysh` answers.
    pub fn start(ns: &Netns, config: &str) -> Frr {
        let dir = TempDir::new("frr").expect("FRR's temporary directory");
        let path = |name: &str| dir.path.join(name).to_str().expect("utf-8").to_owned();
        std::fs::write(path("bgpd.conf"), config).expect("bgpd.conf");
        // The daemons drop to the package's `frr` user, which writes its
        // pid files and sockets here.
        std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o777))
            .expect("chmod FRR's directory");
        std::fs::write(path("zebra.conf"), "hostname r1\n").expect("zebra.conf");
        let zserv = path("zserv.api");
        let daemon_args = |name: &str| {
            [
                "-f".to_owned(),
                path(&format!("{name}.conf")),
                "-i".to_owned(),
                path(&format!("{name}.pid")),
                "--vty_socket".to_owned(),
                path(""),
                "-z".to_owned(),
                zserv.clone(),
                // No TCP vty.
                "-P".to_owned(),
                "0".to_owned(),
                "--log".to_owned(),
                "stdout".to_owned(),
            ]
        };
        let spawn = |daemon: &str, name: &str| {
            let args = daemon_args(name);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ns.spawn_logged(daemon, &args, &dir.path.join(format!("{name}.log")))
                .unwrap_or_else(|e| panic!("spawn {daemon}: {e}"))
        };
        let zebra = spawn(ZEBRA, "zebra");
        let zserv_up = wait_until(Duration::from_secs(10), || {
            std::path::Path::new(&zserv).exists()
        });
        assert!(
            zserv_up,
            "zebra did not come up: {}",
            std::fs::read_to_string(dir.path.join("zebra.log")).unwrap_or_default()
        );
        let daemon = spawn(BGPD, "bgpd");
        let log = dir.path.join("bgpd.log");
        let frr = Frr {
            daemon,
            zebra,
            dir,
            ns_name: ns.name.clone(),
            log,
        };
        let up = wait_until(Duration::from_secs(15), || {
            frr.vtysh("show bgp summary")
                .contains("BGP router identifier")
        });
        assert!(up, "bgpd did not come up: {}", frr.log_text());
        frr
    }

    /// `vtysh -c <command>` against this bgpd: its stdout and stderr.
    pub fn vtysh(&self, command: &str) -> String {
        let socket = self.dir.path.to_str().expect("utf-8");
        let argv = [
            "netns",
            "exec",
            &self.ns_name,
            "vtysh",
            "--vty_socket",
            socket,
            "-d",
            "bgpd",
            "-c",
            command,
        ];
        match Command::new("ip").args(argv).output() {
            Ok(o) => format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => format!("vtysh: {e}"),
        }
    }

    /// `command` (ending in `json`) parsed; `Null` when it is not JSON.
    pub fn json(&self, command: &str) -> serde_json::Value {
        serde_json::from_str(&self.vtysh(command)).unwrap_or(serde_json::Value::Null)
    }

    /// The BGP state of `neighbor` (`Established`, `Active`, …).
    pub fn neighbor_state(&self, neighbor: &str) -> String {
        let v = self.json(&format!("show bgp neighbors {neighbor} json"));
        v[neighbor]["bgpState"].as_str().unwrap_or("").to_owned()
    }

    /// What bgpd logged and its neighbour table, for failure messages.
    pub fn diagnostics(&self) -> String {
        format!(
            "--- bgpd.log (tail) ---\n{}\n--- show bgp neighbors ---\n{}",
            self.log_text()
                .lines()
                .rev()
                .take(60)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n"),
            self.vtysh("show bgp neighbors")
        )
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}
