//! `portico`: the gateway binary.

fn main() -> anyhow::Result<()> {
    println!("portico {}", env!("CARGO_PKG_VERSION"));
    Ok(())
}
