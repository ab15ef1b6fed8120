//! The `portico` command line, built in this package for the end-to-end
//! suites (see `portico::cli`).

fn main() -> anyhow::Result<std::process::ExitCode> {
    portico::cli::main()
}
