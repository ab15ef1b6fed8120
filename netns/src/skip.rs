//! Whether a namespace test may run, and how it reports that it cannot.
//!
//! Invariant: under `PORTICO_REQUIRE_ROOT=1` no test skips: [`skip`] panics,
//! so a CI run as root never passes by skipping.

use crate::command::{have, run};
use std::io::Write as _;

/// True when `PORTICO_REQUIRE_ROOT=1`: `tests/run.sh` sets it when it runs
/// as root (as CI does), and then no test may skip for want of root,
/// namespaces or a program `tests/run.sh` installs.
pub fn skips_are_failures() -> bool {
    std::env::var("PORTICO_REQUIRE_ROOT").is_ok_and(|v| v == "1")
}

/// Reports that `test` cannot run and why: a loud `SKIPPED` banner written
/// straight to the process's stderr (not through `eprintln!`, which the test
/// harness captures for passing tests, so the banner is always visible), or
/// a panic under `PORTICO_REQUIRE_ROOT=1` (see [`skips_are_failures`]).
pub fn skip(test: &str, why: &str) {
    if skips_are_failures() {
        panic!("{test} cannot run ({why}) but PORTICO_REQUIRE_ROOT=1 forbids skipping it");
    }
    let _ = writeln!(
        std::io::stderr(),
        "\nSKIPPED: {why}\nSKIPPED: ============ {test} NOT RUN ============\n"
    );
}

/// True when the test can create namespaces (root, and `ip netns` works);
/// otherwise reports the skip with [`skip`] (which fails the test under
/// `PORTICO_REQUIRE_ROOT=1`) and returns false.
pub fn require_root(test: &str) -> bool {
    let why = if !is_root() {
        "needs root and network namespaces (not running as root); CI runs it as root"
    } else if run("ip", &["netns", "list"]).is_err() {
        "needs root and network namespaces (`ip netns list` fails: install iproute2)"
    } else {
        return true;
    };
    skip(test, why);
    false
}

/// True when every program in `programs` is on `PATH`; otherwise reports
/// the skip with [`skip`], naming the missing programs and `install_hint`
/// (how to get them, e.g. `"apt-get install bird2"`), and returns false.
/// Under `PORTICO_REQUIRE_ROOT=1` a missing program fails the test.
pub fn require_programs(test: &str, programs: &[&str], install_hint: &str) -> bool {
    let missing: Vec<&str> = programs.iter().copied().filter(|p| !have(p)).collect();
    if missing.is_empty() {
        return true;
    }
    skip(
        test,
        &format!("{} not installed ({install_hint})", missing.join(", ")),
    );
    false
}

#[cfg(target_os = "linux")]
fn is_root() -> bool {
    crate::sys::effective_uid() == 0
}

#[cfg(not(target_os = "linux"))]
fn is_root() -> bool {
    false
}
