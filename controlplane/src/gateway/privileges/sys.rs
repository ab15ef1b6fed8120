//! The system calls of the privilege drop: `prctl(2)` (no_new_privs,
//! bounding and ambient sets), `capget(2)`/`capset(2)` (version 3, 64-bit
//! sets), and the per-thread broadcast.
//!
//! Capabilities and `no_new_privs` belong to a thread, not to the process.
//! Like glibc's `setuid` broadcast, every other thread is sent
//! [`drop_signal`] with `tgkill(2)`; its handler applies the same drop to
//! that thread with async-signal-safe system calls only, and records the
//! outcome in a fixed table (no allocation, no lock in the handler). The
//! caller lists `/proc/self/task` until no unsignalled thread is left and
//! waits for every signalled thread's record. Interrupted system calls are
//! restarted (`SA_RESTART`); `poll(2)` in the workers returns early, which
//! they count as "nothing yet".

#![allow(unsafe_code)]

use super::PrivilegeError;
use std::collections::BTreeSet;
use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// How long the broadcast waits for every thread.
const BROADCAST_TIMEOUT_MS: u64 = 2_000;
/// Threads recorded per broadcast (more are dropped but not recorded).
const MAX_THREADS: usize = 1024;

/// The capability sets of the calling thread (a bit per capability number).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sets {
    pub effective: u64,
    pub permitted: u64,
    pub inheritable: u64,
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// What the handler applies: the kept capabilities and the highest
/// capability number of the kernel.
static KEPT: AtomicU64 = AtomicU64::new(0);
static LAST_CAP: AtomicU32 = AtomicU32::new(0);
/// Outcome table: `tid` and `errno` (0: dropped) of each handled thread.
static RECORDED: AtomicUsize = AtomicUsize::new(0);
static RECORD_TID: [AtomicI32; MAX_THREADS] = [const { AtomicI32::new(0) }; MAX_THREADS];
static RECORD_ERRNO: [AtomicI32; MAX_THREADS] = [const { AtomicI32::new(0) }; MAX_THREADS];
/// One broadcast at a time (the table is shared).
static BROADCAST: Mutex<()> = Mutex::new(());

/// The real-time signal of the broadcast (glibc keeps the first two for
/// itself; signal-hook and DPDK use none of these).
pub fn drop_signal() -> libc::c_int {
    libc::SIGRTMIN() + 6
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// The calling thread's capability sets, or `None` if capget fails.
pub fn current_sets() -> Sets {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget writes two CapData structs (version 3) into `data`,
    // which is live and large enough; `header` is a valid header.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if rc != 0 {
        return Sets::default();
    }
    let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Sets {
        effective: join(data[0].effective, data[1].effective),
        permitted: join(data[0].permitted, data[1].permitted),
        inheritable: join(data[0].inheritable, data[1].inheritable),
    }
}

/// Apply the drop to the calling thread: no_new_privs, every capability
/// outside `kept` out of the bounding and ambient sets, then effective and
/// permitted reduced to `kept` (as far as held) and inheritable emptied.
/// Async-signal-safe (system calls only). Returns the errno of the first
/// failure.
fn apply_to_current_thread(kept: u64, last_cap: u32) -> Result<(), i32> {
    // SAFETY: prctl with integer arguments only; no memory is passed.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(errno());
    }
    for cap in 0..=last_cap.min(63) {
        if kept & (1 << cap) != 0 {
            continue;
        }
        // SAFETY: prctl with integer arguments only.
        let in_bounding = unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) } == 1;
        // Without CAP_SETPCAP (an unprivileged run) the bounding set stays;
        // the permitted set below still loses the capability.
        // SAFETY: prctl with integer arguments only.
        if in_bounding && unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            let e = errno();
            if e != libc::EPERM {
                return Err(e);
            }
        }
    }
    // SAFETY: prctl with integer arguments only. EINVAL: no ambient sets
    // (kernel < 4.3), nothing to clear.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    if rc != 0 && errno() != libc::EINVAL {
        return Err(errno());
    }
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: as in `current_sets`: capget fills the two structs of `data`.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(errno());
    }
    for (i, d) in data.iter_mut().enumerate() {
        let kept_word = (kept >> (32 * i)) as u32;
        d.permitted &= kept_word;
        d.effective = d.permitted;
        d.inheritable = 0;
    }
    // SAFETY: capset reads the header and two CapData structs, all live.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(errno());
    }
    Ok(())
}

extern "C" fn on_drop_signal(_signal: libc::c_int) {
    // SAFETY: __errno_location returns this thread's errno slot, valid for
    // the thread's life; the handler restores it so the interrupted code
    // sees its own errno.
    let errno_slot = unsafe { libc::__errno_location() };
    // SAFETY: see above.
    let saved = unsafe { *errno_slot };
    let outcome = apply_to_current_thread(
        KEPT.load(Ordering::Acquire),
        LAST_CAP.load(Ordering::Acquire),
    );
    let slot = RECORDED.fetch_add(1, Ordering::AcqRel);
    if slot < MAX_THREADS {
        RECORD_ERRNO[slot].store(outcome.err().unwrap_or(0), Ordering::Release);
        RECORD_TID[slot].store(gettid(), Ordering::Release);
    }
    // SAFETY: see above.
    unsafe { *errno_slot = saved };
}

/// The thread ids of the process.
fn tasks() -> Result<BTreeSet<i32>, PrivilegeError> {
    let mut tids = BTreeSet::new();
    for entry in std::fs::read_dir("/proc/self/task").map_err(PrivilegeError::Tasks)? {
        let entry = entry.map_err(PrivilegeError::Tasks)?;
        if let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            tids.insert(tid);
        }
    }
    Ok(tids)
}

/// The recorded outcomes so far: `tid -> errno`.
fn recorded() -> Vec<(i32, i32)> {
    let n = RECORDED.load(Ordering::Acquire).min(MAX_THREADS);
    (0..n)
        .map(|i| {
            (
                RECORD_TID[i].load(Ordering::Acquire),
                RECORD_ERRNO[i].load(Ordering::Acquire),
            )
        })
        .filter(|(tid, _)| *tid != 0)
        .collect()
}

/// Drop to `kept` in the calling thread and every other thread of the
/// process; returns how many threads were dropped.
pub fn drop_in_every_thread(kept: u64) -> Result<usize, PrivilegeError> {
    let _one = BROADCAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Without /proc/sys every number up to 63 is tried (PR_CAPBSET_READ
    // fails for numbers the kernel does not know).
    let last_cap: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63);
    KEPT.store(kept, Ordering::Release);
    LAST_CAP.store(last_cap, Ordering::Release);
    for i in 0..MAX_THREADS {
        RECORD_TID[i].store(0, Ordering::Release);
        RECORD_ERRNO[i].store(0, Ordering::Release);
    }
    RECORDED.store(0, Ordering::Release);

    // SAFETY: an all-zero sigaction is a valid value to fill in.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_drop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a live sigset_t.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: `action` is initialised; the handler only makes
    // async-signal-safe system calls and atomic stores.
    if unsafe { libc::sigaction(drop_signal(), &action, std::ptr::null_mut()) } != 0 {
        return Err(PrivilegeError::Handler(io::Error::last_os_error()));
    }

    let me = gettid();
    apply_to_current_thread(kept, last_cap).map_err(|e| PrivilegeError::Thread {
        tid: me,
        source: io::Error::from_raw_os_error(e),
    })?;
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut signalled = BTreeSet::from([me]);
    let deadline = Instant::now() + Duration::from_millis(BROADCAST_TIMEOUT_MS);
    loop {
        // Threads started since the last listing (their parent may not
        // have dropped yet when they were created).
        let fresh: Vec<i32> = tasks()?.difference(&signalled).copied().collect();
        for tid in &fresh {
            // SAFETY: tgkill with integer arguments; ESRCH (the thread
            // exited) is fine.
            unsafe { libc::syscall(libc::SYS_tgkill, pid, *tid, drop_signal()) };
            signalled.insert(*tid);
        }
        let done = recorded();
        if let Some((tid, e)) = done.iter().find(|(_, e)| *e != 0) {
            return Err(PrivilegeError::Thread {
                tid: *tid,
                source: io::Error::from_raw_os_error(*e),
            });
        }
        let done: BTreeSet<i32> = done.into_iter().map(|(tid, _)| tid).collect();
        let alive = tasks()?;
        let waiting: Vec<i32> = signalled
            .iter()
            .filter(|t| **t != me && !done.contains(t) && alive.contains(t))
            .copied()
            .collect();
        if fresh.is_empty() && waiting.is_empty() {
            return Ok(done.len() + 1);
        }
        if Instant::now() >= deadline {
            return Err(PrivilegeError::Timeout {
                tids: waiting,
                timeout_ms: BROADCAST_TIMEOUT_MS,
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
