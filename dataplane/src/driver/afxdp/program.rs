//! Attaching the redirect program to an interface, once per interface for
//! all workers: [`XdpAttachment::attach`] creates the XSK map (one slot per
//! worker and RX queue) and the steering maps ([`super::steer`]), loads the
//! steering program once (the `xdp.frags` variant, [`super::bpf`]) and
//! attaches it with a BPF link (`BPF_LINK_CREATE`, Linux 5.9+).
//! [`XdpLink::install`] writes a steering rule into the maps: map updates
//! only, no program load, nothing per packet.
//!
//! Lifetime: the attachment lives as long as the link's fd. Dropping the
//! [`XdpAttachment`] closes it and the kernel detaches the program; so does
//! the process dying in any way (SIGKILL, abort), since the kernel closes
//! its fds. What a link cannot cover is a program attached the old way,
//! through netlink, which outlives its process: before attaching, the
//! interface is queried (`RTM_GETLINK`); a program named
//! [`bpf::PROGRAM_NAME`] attached through netlink is stale (a crashed
//! Portico of an older build, or a test staging one) and is detached with a
//! warning; any other program is someone else's and attaching fails with
//! its id and name rather than replacing it.
//!
//! Mode: `Native` asks the driver (`XDP_FLAGS_DRV_MODE`), `Generic` the
//! kernel's skb path (`XDP_FLAGS_SKB_MODE`, any device, copy mode only),
//! `Auto` tries native first and falls back to generic.

use super::bpf::{self, XskMap};
use super::netlink::{self, XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE};
use super::steer::{self, SteerMaps};
use super::{AfXdpError, XdpMode};
use crate::steering::SteeringRule;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

/// Where a program runs once attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachedMode {
    Native,
    Generic,
}

impl AttachedMode {
    fn flags(self) -> u32 {
        match self {
            AttachedMode::Native => XDP_FLAGS_DRV_MODE,
            AttachedMode::Generic => XDP_FLAGS_SKB_MODE,
        }
    }
}

impl std::fmt::Display for AttachedMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AttachedMode::Native => "native",
            AttachedMode::Generic => "generic",
        })
    }
}

/// What [`XdpAttachment::attach`] found and removed first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleProgram {
    pub id: u32,
    pub mode: AttachedMode,
}

/// The BPF link of an interface's redirect program, shared by the
/// attachment and the drivers that install steering rules through it; the
/// program stays attached while one of them holds it.
#[derive(Debug)]
pub struct XdpLink {
    ifname: String,
    map: Arc<XskMap>,
    /// The rule's maps; `None` when the kernel refused the steering
    /// program and the queue-own fallback runs (`steering_refused`).
    steer: Option<SteerMaps>,
    /// Why the steering program did not load (the verifier's first lines).
    steering_refused: Option<String>,
    _link: OwnedFd,
}

impl XdpLink {
    /// Make the program steer by `rule` ([`SteerMaps::install`]: map
    /// updates through the fds, a cold path; no capability needed).
    pub fn install(&self, rule: &SteeringRule) -> Result<steer::InstallStats, AfXdpError> {
        let Some(steer) = &self.steer else {
            return Err(AfXdpError::SteeringUnavailable {
                ifname: self.ifname.clone(),
                reason: self.steering_refused.clone().unwrap_or_default(),
            });
        };
        steer.install(rule).map_err(|e| AfXdpError::Steering {
            ifname: self.ifname.clone(),
            source: e,
        })
    }

    /// Whether the attached program steers (a rule can be installed).
    pub fn steers(&self) -> bool {
        self.steer.is_some()
    }

    /// The XSK map the program redirects into.
    pub fn map(&self) -> &Arc<XskMap> {
        &self.map
    }
}

/// The redirect program attached to one interface.
#[derive(Debug)]
pub struct XdpAttachment {
    ifname: String,
    ifindex: u32,
    mode: AttachedMode,
    map: Arc<XskMap>,
    stale_removed: Vec<StaleProgram>,
    // Field order is drop order: the link (detach) before the program.
    link: Arc<XdpLink>,
    _program: OwnedFd,
}

impl XdpAttachment {
    /// Remove a stale Portico program, then load and attach a fresh one
    /// with an XSK map of `queues` × `workers` slots (see
    /// [`XskMap::slot`]). Must run in the interface's network namespace.
    pub fn attach(
        ifname: &str,
        queues: u32,
        workers: u32,
        mode: XdpMode,
    ) -> Result<Self, AfXdpError> {
        let ifindex =
            crate::driver::sys::if_index(ifname).map_err(|source| AfXdpError::NoSuchInterface {
                ifname: ifname.to_string(),
                source,
            })?;
        let stale_removed = remove_stale(ifname, ifindex)?;
        let map = XskMap::create(queues, workers).map_err(|source| AfXdpError::Bpf {
            what: "creating the XSK map (BPF_MAP_CREATE)",
            source,
        })?;
        let steer_maps = SteerMaps::create().map_err(|e| AfXdpError::Steering {
            ifname: ifname.to_string(),
            source: e,
        })?;
        // A kernel without `bpf_xdp_load_bytes` (before 5.18) refuses the
        // steering program: the port still opens with the queue-own
        // program (the flows of other workers arrive by handoff).
        let (program, steer_maps, steering_refused) =
            match steer::load(&steer_maps, &map, bpf::PROGRAM_NAME, true) {
                Ok(p) => (p, Some(steer_maps), None),
                Err(refused) => {
                    let p = steer::load_queue_own(&map, bpf::PROGRAM_NAME, true).map_err(|e| {
                        AfXdpError::Verifier {
                            source: e.source,
                            log: e.verifier_log,
                        }
                    })?;
                    // The verifier says why in its last lines.
                    let lines: Vec<&str> = refused
                        .verifier_log
                        .lines()
                        .filter(|l| !l.is_empty())
                        .collect();
                    let log = lines[lines.len().saturating_sub(2)..].join("; ");
                    (p, None, Some(format!("{} ({log})", refused.source)))
                }
            };
        let try_mode = |m: AttachedMode| bpf::link_create(program.as_fd(), ifindex, m.flags());
        let (link, mode) = match mode {
            XdpMode::Native => (try_mode(AttachedMode::Native), AttachedMode::Native),
            XdpMode::Generic => (try_mode(AttachedMode::Generic), AttachedMode::Generic),
            XdpMode::Auto => match try_mode(AttachedMode::Native) {
                Ok(l) => (Ok(l), AttachedMode::Native),
                Err(_) => (try_mode(AttachedMode::Generic), AttachedMode::Generic),
            },
        };
        let link = link.map_err(|source| AfXdpError::Attach {
            ifname: ifname.to_string(),
            mode: mode.to_string(),
            source,
        })?;
        let map = Arc::new(map);
        Ok(XdpAttachment {
            ifname: ifname.to_string(),
            ifindex,
            mode,
            map: Arc::clone(&map),
            stale_removed,
            link: Arc::new(XdpLink {
                ifname: ifname.to_string(),
                map,
                steer: steer_maps,
                steering_refused,
                _link: link,
            }),
            _program: program,
        })
    }

    pub fn ifname(&self) -> &str {
        &self.ifname
    }
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }
    /// The mode the program runs in (what `Auto` resolved to).
    pub fn mode(&self) -> AttachedMode {
        self.mode
    }
    /// The XSK map the workers put their sockets into.
    pub fn map(&self) -> Arc<XskMap> {
        Arc::clone(&self.map)
    }
    /// The program's link, through which steering rules are installed.
    pub fn link(&self) -> Arc<XdpLink> {
        Arc::clone(&self.link)
    }
    /// Stale programs detached before attaching.
    pub fn stale_removed(&self) -> &[StaleProgram] {
        &self.stale_removed
    }
}

/// Detach netlink-attached Portico programs; refuse foreign ones.
fn remove_stale(ifname: &str, ifindex: u32) -> Result<Vec<StaleProgram>, AfXdpError> {
    let state = netlink::query(ifindex).map_err(|source| AfXdpError::Netlink {
        ifname: ifname.to_string(),
        what: "RTM_GETLINK",
        source,
    })?;
    if state.hw_attached {
        return Err(AfXdpError::ForeignProgram {
            ifname: ifname.to_string(),
            id: 0,
            name: "(offloaded to the NIC)".into(),
        });
    }
    let mut removed = Vec::new();
    for (id, mode) in [
        (state.drv_prog_id, AttachedMode::Native),
        (state.skb_prog_id, AttachedMode::Generic),
    ] {
        let Some(id) = id else { continue };
        let name = bpf::program_name(id).unwrap_or_default();
        if name != bpf::PROGRAM_NAME {
            return Err(AfXdpError::ForeignProgram {
                ifname: ifname.to_string(),
                id,
                name,
            });
        }
        netlink::detach(ifindex, mode.flags()).map_err(|source| {
            let source = if source.raw_os_error() == Some(libc::EBUSY) {
                io::Error::new(
                    source.kind(),
                    format!(
                        "{source}: it is held by a BPF link, i.e. another running Portico \
                         uses this interface"
                    ),
                )
            } else {
                source
            };
            AfXdpError::Netlink {
                ifname: ifname.to_string(),
                what: "RTM_SETLINK (detaching a stale Portico program)",
                source,
            }
        })?;
        removed.push(StaleProgram { id, mode });
    }
    Ok(removed)
}
