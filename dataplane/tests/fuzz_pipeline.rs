//! The stateful fuzz run on the stable toolchain (issue 15), part of CI:
//! every committed seed of `dataplane/fuzz/seeds/pipeline_sequence/` is
//! replayed through [`SequenceHarness`], then inputs mutated from them are
//! run for a bounded time (`PORTICO_FUZZ_SECONDS`, default 20) and count
//! (`PORTICO_FUZZ_MAX_EXECS`, default 200,000). Any violated invariant or
//! panic fails the test with the input (hex) and writes it to
//! `target/fuzz-failures/` for `cargo fuzz run pipeline_sequence FILE`.
//! The libFuzzer target over the same harness is
//! `dataplane/fuzz/fuzz_targets/pipeline_sequence.rs`.

use dataplane::fuzz_harness::{SequenceHarness, seed_inputs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn seeds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/pipeline_sequence")
}

fn committed_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(seeds_dir())
        .expect("the committed seed corpus exists")
        .map(|e| {
            let path = e.expect("entry").path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (name, std::fs::read(&path).expect("seed readable"))
        })
        .collect();
    seeds.sort();
    seeds
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Run one input in a fresh harness; on failure keep the input and panic.
fn run_one(input: &[u8], origin: &str) -> u64 {
    let outcome = std::panic::catch_unwind(|| SequenceHarness::new().run(input));
    let why = match outcome {
        Ok(Ok(stats)) => return stats.frames_sent,
        Ok(Err(violation)) => violation.to_string(),
        Err(_) => "panicked".to_owned(),
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join(format!(
        "pipeline_sequence-{:016x}",
        xxhash_rust::xxh3::xxh3_64(input)
    ));
    let _ = std::fs::write(&file, input);
    panic!(
        "{origin}: {why}\ninput ({} bytes, saved to {}): {}",
        input.len(),
        file.display(),
        hex(input)
    );
}

/// The seeds the harness proposes are committed (after a change of the
/// harness's encoding, run this test once with `PORTICO_FUZZ_WRITE_SEEDS=1`
/// to write the new ones, and commit them).
#[test]
fn the_committed_seeds_are_the_harness_seeds() {
    if std::env::var("PORTICO_FUZZ_WRITE_SEEDS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(seeds_dir()).expect("seed dir");
        for seed in seed_inputs() {
            let name = format!("seed-{:016x}", xxhash_rust::xxh3::xxh3_64(&seed));
            std::fs::write(seeds_dir().join(name), &seed).expect("seed written");
        }
    }
    let committed: Vec<Vec<u8>> = committed_seeds().into_iter().map(|(_, b)| b).collect();
    for seed in seed_inputs() {
        assert!(
            committed.contains(&seed),
            "seed {} is not committed in {}",
            hex(&seed),
            seeds_dir().display()
        );
    }
}

/// A small deterministic generator (xorshift64*), so a failing run is
/// reproduced by its seed, printed at the start.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One mutation of `input`: flip, set, insert or delete bytes, or splice
/// in part of another seed.
fn mutate(rng: &mut Rng, input: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] ^= 1 << rng.below(8);
            }
            1 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] = rng.next() as u8;
            }
            2 if input.len() < 4096 => {
                let i = rng.below(input.len() + 1);
                input.insert(i, rng.next() as u8);
            }
            3 if !input.is_empty() => {
                let i = rng.below(input.len());
                let n = 1 + rng.below(8).min(input.len() - i - 1);
                input.drain(i..i + n.min(input.len() - i));
            }
            _ => {
                let other = &seeds[rng.below(seeds.len())];
                if other.is_empty() {
                    continue;
                }
                let from = rng.below(other.len());
                let to = (from + 1 + rng.below(32)).min(other.len());
                let at = rng.below(input.len() + 1);
                input.splice(at..at, other[from..to].iter().copied());
            }
        }
    }
}

#[test]
fn seeds_replay_and_mutations_hold_every_invariant() {
    let seconds: u64 = std::env::var("PORTICO_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let max_execs: u64 = std::env::var("PORTICO_FUZZ_MAX_EXECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let seeds: Vec<Vec<u8>> = committed_seeds().into_iter().map(|(_, b)| b).collect();
    assert!(!seeds.is_empty(), "no committed seeds");
    for (name, seed) in committed_seeds() {
        run_one(&seed, &format!("seed {name}"));
    }
    let rng_seed = std::env::var("PORTICO_FUZZ_RNG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    println!("fuzz run: PORTICO_FUZZ_RNG_SEED={rng_seed}, {seconds} s, at most {max_execs} inputs");
    let mut rng = Rng(rng_seed);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let (mut execs, mut frames) = (0u64, 0u64);
    while Instant::now() < deadline && execs < max_execs {
        let mut input = seeds[rng.below(seeds.len())].clone();
        mutate(&mut rng, &mut input, &seeds);
        frames += run_one(
            &input,
            &format!("mutated input #{execs} (PORTICO_FUZZ_RNG_SEED={rng_seed})"),
        );
        execs += 1;
    }
    println!("fuzz run: {execs} inputs, {frames} frames sent by the gateway, no violation");
    assert!(execs > 0, "the time bound allowed no run at all");
}
