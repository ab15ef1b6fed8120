//! Polling for a condition with a deadline.

use std::time::{Duration, Instant};

/// Poll `f` every 25 ms until it returns true or `timeout` passes; true if
/// it did (it is asked once more at the deadline).
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    f()
}
