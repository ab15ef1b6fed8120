//! Dropping privileges once the gateway is set up.
//!
//! `portico run` needs root's capabilities to open its ports (AF_PACKET and
//! AF_XDP sockets, XDP attachment, offloads, promiscuous mode; for DPDK the
//! EAL: hugepages, PCI resources, port I/O, physical addresses). Once the
//! ports, rings and sockets exist and the workers have opened their drivers,
//! [`drop_after_start`] keeps only the capabilities the running gateway
//! still uses ([`kept_capabilities`]) and sets `no_new_privs`:
//!
//! | driver | capabilities kept after start-up |
//! |---|---|
//! | `afpacket`, `mem` | none (sockets and rings are open file descriptors; closing them needs nothing; af_packet's steering program is classic BPF on a socket, which needs no capability) |
//! | `afxdp`, one worker | none (as af_packet: the one worker owns every flow, no steering program is loaded) |
//! | `afxdp`, several workers | none on Linux 6.5+ (the steering XDP program is loaded once at start-up; worker 0 installs a new steering rule as updates of the program's BPF maps, through their fds, which needs no capability); `CAP_BPF` on older kernels when `kernel.unprivileged_bpf_disabled` is set (there every `bpf(2)` command, map updates included, checks it: [`map_updates_need_cap_bpf`]) |
//! | `dpdk` | `CAP_SYS_ADMIN`, `CAP_IPC_LOCK`, `CAP_SYS_RAWIO` (the EAL may map further hugepages at run time, and with `--iova-mode=pa` reads their physical addresses from `/proc/self/pagemap`; PMDs access their PCI resources) |
//!
//! Invariants:
//! * no frame is forwarded before the drop: the workers wait, ready, at
//!   their start gate until `portico run` releases them after it
//!   ([`Gateway::release_workers`](super::Gateway::release_workers));
//! * capabilities are per thread in Linux: the drop is applied to every
//!   thread of the process (each existing thread is signalled and applies
//!   it to itself, see `sys`), and threads started later inherit the
//!   reduced sets from their (already reduced) parent;
//! * dropped capabilities are removed from the effective, permitted,
//!   inheritable, ambient and bounding sets, so nothing can raise them again
//!   (and `no_new_privs` stops an `execve` from gaining any);
//! * nothing is dropped that the process does not have: an unprivileged
//!   run (tests with the `mem` driver) only sets `no_new_privs`.

mod sys;

use nic_config::DriverKind;
use tracing::{info, warn};

/// Linux capability numbers (`linux/capability.h`) that may be kept.
pub const CAP_NET_ADMIN: u32 = 12;
pub const CAP_IPC_LOCK: u32 = 14;
pub const CAP_SYS_RAWIO: u32 = 17;
pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_BPF: u32 = 39;

/// Why dropping privileges failed (the gateway stops: it would otherwise
/// run with more privileges than documented).
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("listing the process's threads (/proc/self/task; is /proc mounted?): {0}")]
    Tasks(std::io::Error),
    #[error("installing the privilege-drop signal handler: {0}")]
    Handler(std::io::Error),
    #[error("dropping privileges in thread {tid}: {source}")]
    Thread { tid: i32, source: std::io::Error },
    #[error("thread(s) {tids:?} did not drop their privileges within {timeout_ms} ms")]
    Timeout { tids: Vec<i32>, timeout_ms: u64 },
}

/// The capabilities (a bit per capability number) a gateway running
/// `driver` keeps after start-up; `map_updates_need_cap_bpf`: this
/// kernel's `bpf(2)` refuses map updates without `CAP_BPF`
/// ([`map_updates_need_cap_bpf`]).
pub fn kept_capabilities(
    driver: DriverKind,
    workers: usize,
    map_updates_need_cap_bpf: bool,
) -> u64 {
    match driver {
        DriverKind::Dpdk => bit(CAP_SYS_ADMIN) | bit(CAP_IPC_LOCK) | bit(CAP_SYS_RAWIO),
        DriverKind::Afxdp if workers > 1 && map_updates_need_cap_bpf => bit(CAP_BPF),
        _ => 0,
    }
}

/// Whether this kernel's `bpf(2)` refuses a map update without `CAP_BPF`:
/// before Linux 6.5 (commit "bpf: Move unprivileged checks into
/// map_create() and bpf_prog_load()") every command checked
/// `kernel.unprivileged_bpf_disabled`; since, only creating maps and
/// loading programs do. An unreadable release or sysctl counts as "yes"
/// (keeping `CAP_BPF` costs less than a rule that cannot be installed).
pub fn map_updates_need_cap_bpf() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let disabled = std::fs::read_to_string("/proc/sys/kernel/unprivileged_bpf_disabled")
        .map_or(true, |v| v.trim() != "0");
    disabled && release_before(&release, (6, 5))
}

/// Whether the kernel release string `release` (`6.18.44-...`) is older
/// than `major.minor`; an unparsable one counts as older.
fn release_before(release: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(ma)), Some(Ok(mi))) => (ma, mi) < (major, minor),
        _ => true,
    }
}

fn bit(cap: u32) -> u64 {
    1 << cap
}

impl super::Gateway {
    /// Drop the privileges the running gateway no longer needs
    /// ([`drop_after_start`] for its driver). `portico run` calls it right
    /// after [`Gateway::start`](super::Gateway::start), which returns once
    /// the ports are prepared and every worker has opened its driver.
    pub fn drop_privileges(&self) -> Result<(), super::GatewayError> {
        let driver = super::driver_plan::gateway_driver(&self.plan)?;
        Ok(drop_after_start(driver, self.plan.dataplane.workers)?)
    }
}

/// Keep only [`kept_capabilities`]`(driver, workers)` in every thread of the process
/// and set `no_new_privs`. A thread that does not take the signal within
/// the broadcast's timeout (one that blocks it) is named in a warning; the
/// others, the calling thread included, are dropped.
pub fn drop_after_start(driver: DriverKind, workers: usize) -> Result<(), PrivilegeError> {
    let kept = kept_capabilities(driver, workers, map_updates_need_cap_bpf());
    let threads = match sys::drop_in_every_thread(kept) {
        Ok(n) => n,
        Err(PrivilegeError::Timeout { tids, timeout_ms }) => {
            warn!(
                ?tids,
                timeout_ms, "threads kept their privileges: they did not take the drop signal"
            );
            0
        }
        Err(e) => return Err(e),
    };
    let now = sys::current_sets();
    info!(
        %driver,
        threads,
        effective = format_args!("{:#x}", now.effective),
        permitted = format_args!("{:#x}", now.permitted),
        "privileges dropped (no_new_privs set)"
    );
    if now.effective & !kept != 0 {
        warn!(
            effective = format_args!("{:#x}", now.effective),
            "capabilities left beyond the kept set"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dpdk_and_afxdp_on_an_old_kernel_keep_capabilities() {
        for workers in [1, 2] {
            for old in [false, true] {
                assert_eq!(kept_capabilities(DriverKind::Afpacket, workers, old), 0);
                assert_eq!(kept_capabilities(DriverKind::Mem, workers, old), 0);
                assert_eq!(
                    kept_capabilities(DriverKind::Dpdk, workers, old),
                    (1 << 14) | (1 << 17) | (1 << 21)
                );
            }
        }
        // One AF_XDP worker installs no steering rule; several do so with
        // map updates: nothing to keep, but CAP_BPF where bpf(2) checks it
        // for map updates.
        assert_eq!(kept_capabilities(DriverKind::Afxdp, 1, true), 0);
        assert_eq!(kept_capabilities(DriverKind::Afxdp, 2, false), 0);
        assert_eq!(kept_capabilities(DriverKind::Afxdp, 2, true), 1 << 39);
    }

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert!(!release_before("6.18.44-fc-v669", (6, 5)));
        assert!(!release_before("6.5.0\n", (6, 5)));
        assert!(release_before("6.4.16-generic", (6, 5)));
        assert!(release_before("5.15.0-91-generic", (6, 5)));
        assert!(!release_before("7.0", (6, 5)));
        assert!(release_before("", (6, 5)), "unreadable: keep");
        assert!(release_before("garbage", (6, 5)));
    }
}
