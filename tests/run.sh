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

# The DPDK driver (cargo feature `dpdk`): Debian's DPDK 22.11 and libclang
# for bindgen, ethtool for the end-to-end suite on vdevs. Only this step
# needs them; the default build and every step above work without.
dpdk_pkgs=()
pkg-config --exists libdpdk 2>/dev/null || dpdk_pkgs+=(libdpdk-dev)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 || dpdk_pkgs+=(libclang-dev)
command -v ethtool >/dev/null 2>&1 || dpdk_pkgs+=(ethtool)
if ((${#dpdk_pkgs[@]})); then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${dpdk_pkgs[@]}"
    else
        echo "tests/run.sh: missing packages ${dpdk_pkgs[*]} (run as root to install)" >&2
    fi
fi
# The Kubernetes tests' real API server: etcd + kube-apiserver v1.20.2 built
# from Debian's source package (cached under /var/cache/portico; ~6-10 min on
# a fresh 2-core machine, a no-op afterwards). A failed build fails the run,
# and with PORTICO_REQUIRE_KUBE_APISERVER=1 no Kubernetes test may skip.
echo "== tests/k8s/build-kube-apiserver.sh"
tests/k8s/build-kube-apiserver.sh
export PORTICO_REQUIRE_KUBE_APISERVER=1

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --exclude portico-dpdk-sys --all-targets -- -D warnings
echo "== cargo nextest run"
cargo nextest run --workspace --exclude portico-dpdk-sys --no-fail-fast
echo "== doc tests"
cargo test --workspace --exclude portico-dpdk-sys --doc
echo "== DPDK driver (feature dpdk): clippy, nextest (vdev and end-to-end suites)"
dpdk_crates=(-p portico-dpdk-sys -p portico-dataplane -p portico-nic-config -p portico -p portico-tests -p portico-bench)
cargo clippy "${dpdk_crates[@]}" --features dpdk --all-targets -- -D warnings
cargo nextest run -p portico-dataplane -p portico-nic-config -p portico --features dpdk --no-fail-fast -E 'test(dpdk) | binary(dpdk)'
cargo nextest run -p portico-tests --features dpdk --no-fail-fast --test dpdk
echo "== bench smoke (each benchmark once, not timed)"
cargo bench -p portico-bench -- --test
