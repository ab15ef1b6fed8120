#!/usr/bin/env bash
# Portico's full test run: formatting, lints, every test, doc tests, and a
# smoke run of every criterion bench (each benchmark executed once, untimed).
# Installs what it needs on a fresh Debian machine (run as root for that).
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
# End-to-end suites: real nginx in backend namespaces, curl as the client.
command -v nginx >/dev/null 2>&1 || need_pkgs+=(nginx-light)
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
command -v ip >/dev/null 2>&1 || need_pkgs+=(iproute2)
command -v ping >/dev/null 2>&1 || need_pkgs+=(iputils-ping)
# The end-to-end throughput smoke (tests/tests/throughput.rs) and the
# comparison with the kernel's NAT (bench/tests/compare.rs, `compare --quick`).
command -v wrk >/dev/null 2>&1 || need_pkgs+=(wrk)
command -v iperf3 >/dev/null 2>&1 || need_pkgs+=(iperf3)
command -v nft >/dev/null 2>&1 || need_pkgs+=(nftables)
command -v iptables-restore >/dev/null 2>&1 || need_pkgs+=(iptables)
if ((${#need_pkgs[@]})); then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}"
    else
        echo "tests/run.sh: missing packages ${need_pkgs[*]} (run as root to install)" >&2
    fi
fi

if ! command -v cargo-nextest >/dev/null 2>&1 && ! cargo nextest --version >/dev/null 2>&1; then
    cargo install --locked cargo-nextest
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo nextest run"
cargo nextest run --workspace --no-fail-fast
echo "== doc tests"
cargo test --workspace --doc
echo "== bench smoke (each benchmark once, not timed)"
cargo bench -p portico-bench -- --test
