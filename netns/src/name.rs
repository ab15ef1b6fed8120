//! Unique names for namespaces, interfaces and temporary directories.
//!
//! Invariant: a name is never handed out twice by one process (a counter),
//! and processes alive at the same time differ in their pid, so parallel
//! test processes never collide (pids wrap at 100000 in the name: two live
//! processes whose pids differ by a multiple of 100000 could collide, which
//! `pid_max`'s default of 32768 or 4194304 makes rare enough for tests).

use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A short unique name: `{prefix}{pid % 100000}x{n}` (≤ 15 bytes for
/// interface names when `prefix` is ≤ 4 bytes).
pub fn unique_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}x{n}", std::process::id() % 100_000)
}
