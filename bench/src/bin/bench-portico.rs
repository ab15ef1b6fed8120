//! The `portico` command line, built in this package so that the compare
//! smoke test (tests/compare.rs) always runs a gateway built from the
//! sources under test (`CARGO_BIN_EXE_bench-portico`); see `portico::cli`.

fn main() -> anyhow::Result<std::process::ExitCode> {
    portico::cli::main()
}
