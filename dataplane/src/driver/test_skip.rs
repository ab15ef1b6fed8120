//! How a driver's namespace test reports that it cannot run: a loud
//! `SKIPPED` banner on the process's stderr, or, with
//! `PORTICO_REQUIRE_ROOT=1` (set by `tests/run.sh` when it runs as root, as
//! CI does), a panic, so that a test needing root never skips silently there.

/// Reports that the `what` test of `driver` is not run, and why.
pub(crate) fn skip(driver: &str, what: &str, why: &str) {
    if std::env::var("PORTICO_REQUIRE_ROOT").is_ok_and(|v| v == "1") {
        panic!(
            "{driver} {what} test cannot run ({why}) but PORTICO_REQUIRE_ROOT=1 forbids skipping it"
        );
    }
    use std::io::Write;
    // Straight to stderr: the harness captures `eprintln!` of passing tests.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {why}\nSKIPPED: ============ {driver} {what} test NOT RUN ============"
    );
}
