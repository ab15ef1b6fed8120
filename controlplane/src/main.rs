//! `portico`: the gateway binary (the command line lives in
//! [`portico::cli`]).

fn main() -> anyhow::Result<std::process::ExitCode> {
    portico::cli::main()
}
