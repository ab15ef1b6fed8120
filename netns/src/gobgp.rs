//! A real GoBGP (`gobgpd`, Debian `gobgpd`) in a namespace, driven through
//! its `gobgp` CLI: portico-bgp's GoBGP suite and the tier's GoBGP router
//! share it (one copy).
//!
//! `gobgpd` runs with its configuration and log in a [`TempDir`] and its
//! API on the namespace's loopback (`127.0.0.1:50051`; every namespace has
//! its own), stopped by PID on drop. GoBGP keeps the routes in its RIB
//! only: it programs no FIB.

use crate::{Netns, Process, TempDir, wait_until};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The API port `gobgpd` listens on (the namespace's loopback).
const API_PORT: &str = "50051";

/// `gobgpd` in a namespace; stopped (by PID) on drop.
#[derive(Debug)]
pub struct GoBgp {
    pub daemon: Process,
    pub dir: TempDir,
    pub ns_name: String,
    pub log: PathBuf,
}

impl GoBgp {
    /// Starts `gobgpd` with the TOML `config` (`gobgpd.toml` in its
    /// directory) and waits until its API answers.
    pub fn start(ns: &Netns, config: &str) -> GoBgp {
        let dir = TempDir::new("gobgp").expect("GoBGP's temporary directory");
        let conf = dir.path.join("gobgpd.toml");
        std::fs::write(&conf, config).expect("gobgpd.toml");
        let log = dir.path.join("gobgpd.log");
        let daemon = ns
            .spawn_logged(
                "gobgpd",
                &[
                    "-f",
                    conf.to_str().expect("utf-8"),
                    "-p",
                    "--api-hosts",
                    &format!("127.0.0.1:{API_PORT}"),
                    "--pprof-disable",
                    "-l",
                    "debug",
                ],
                &log,
            )
            .expect("spawn gobgpd");
        let g = GoBgp {
            daemon,
            dir,
            ns_name: ns.name.clone(),
            log,
        };
        let up = wait_until(Duration::from_secs(15), || {
            g.cli(&["global"]).contains("AS:")
        });
        assert!(up, "gobgpd did not come up: {}", g.log_text());
        g
    }

    /// `gobgp <args>` inside the namespace: its stdout and stderr.
    pub fn cli(&self, args: &[&str]) -> String {
        let mut argv = vec![
            "netns",
            "exec",
            &self.ns_name,
            "gobgp",
            "-u",
            "127.0.0.1",
            "-p",
            API_PORT,
        ];
        argv.extend_from_slice(args);
        match Command::new("ip").args(&argv).output() {
            Ok(o) => format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => format!("gobgp: {e}"),
        }
    }

    /// `gobgp global rib -a ipv4 -j`: the IPv4 RIB as JSON text (an
    /// object of prefix → paths).
    pub fn rib_json(&self) -> String {
        self.cli(&["global", "rib", "-a", "ipv4", "-j"])
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}
