//! A byte string as a sequence of frames and events through a whole worker
//! (`dataplane::fuzz_harness`): no panic, and the conntrack/SNAT/buffer
//! invariants hold after every step and once everything expired.
#![no_main]

use dataplane::fuzz_harness::SequenceHarness;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = SequenceHarness::new().run(data) {
        panic!("{violation}");
    }
});
