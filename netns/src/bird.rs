//! A real BIRD 2 router (Debian `bird2`) in a namespace, driven through
//! `birdc`: the BGP suites of portico-bgp and the gateway's end-to-end BGP
//! suites share it (one copy).
//!
//! BIRD runs with `-f` (foreground, a [`Process`] guard kills it by PID),
//! its control socket, configuration and logs in a [`TempDir`]; `birdc`
//! talks to the socket by path, so no namespace is needed for it.

use crate::{Netns, Process, TempDir, wait_until};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// BIRD 2 running in a namespace with its own control socket, config and
/// logs in a temporary directory; stopped (by PID) on drop.
#[derive(Debug)]
pub struct Bird {
    pub daemon: Process,
    pub sock: PathBuf,
    pub dir: TempDir,
    pub ns_name: String,
}

impl Bird {
    /// Starts `bird -f` with `config` (a `log` line to the directory's
    /// bird.log is prepended; its stdout and stderr go to bird.out) and
    /// waits for its control socket.
    pub fn start(ns: &Netns, config: &str) -> Bird {
        let dir = TempDir::new("bird").expect("BIRD's temporary directory");
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
        let daemon = ns
            .spawn_logged(
                "bird",
                &[
                    "-f",
                    "-c",
                    conf.to_str().expect("utf-8 path"),
                    "-s",
                    sock.to_str().expect("utf-8 path"),
                    "-P",
                    pid.to_str().expect("utf-8 path"),
                ],
                &dir.path.join("bird.out"),
            )
            .expect("spawn bird");
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
            self.log_text(),
            std::fs::read_to_string(self.dir.path.join("bird.out")).unwrap_or_default()
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
