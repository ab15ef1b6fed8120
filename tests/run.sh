#!/usr/bin/env bash
# Portico's full test run: formatting, lints, every test, doc tests, and a
# smoke run of every criterion bench (each benchmark executed once, untimed).
# Installs what it needs on a fresh Debian machine (run as root for that).
set -euo pipefail
cd "$(dirname "$0")/.."

# What the later steps run, each detected by the exact command or file that
# step uses (a looser glob once matched a neighbouring package and hid a
# missing install), and installed with apt when missing (as root).
need_pkgs=()
need_command() { command -v "$1" >/dev/null 2>&1 || need_pkgs+=("$2"); }
need_file() { compgen -G "$1" >/dev/null || need_pkgs+=("$2"); }
# End-to-end suites: real nginx in backend namespaces, curl as the client,
# ss and ping for the checks (tests/tests/, controlplane/tests/).
need_command nginx nginx-light
need_command curl curl
need_command ip iproute2
need_command ss iproute2
need_command nstat iproute2
need_command ping iputils-ping
need_command setpriv util-linux
need_command sysctl procps
# The end-to-end throughput smoke (tests/tests/throughput.rs) and the
# comparison with the kernel's NAT (bench/tests/compare.rs, `compare --quick`).
need_command wrk wrk
need_command iperf3 iperf3
need_command nft nftables
need_command conntrack conntrack
need_command iptables-restore iptables
# The BGP speaker's tests against real routers (bgp/tests/): BIRD 2,
# GoBGP and FRR, each daemon and its control client (FRR's daemons live
# outside PATH; frr_ipv6.rs runs zebra and bgpd).
need_command bird bird2
need_command birdc bird2
need_command gobgpd gobgpd
need_command gobgp gobgpd
need_file /usr/lib/frr/bgpd frr
need_file /usr/lib/frr/zebra frr
need_command vtysh frr
# The DPDK driver (cargo feature `dpdk`, the last steps below): Debian's DPDK
# 22.11 as `pkg-config libdpdk` finds it (dataplane/dpdk-sys/build.rs), the
# C library bindgen loads (clang-sys opens `libclang.so`; `libclang-cpp.so`
# is the C++ interface and does not do) with clang's own headers, and
# ethtool for the end-to-end suite on vdevs.
pkg-config --exists libdpdk 2>/dev/null || need_pkgs+=(libdpdk-dev)
need_file '/usr/lib/llvm-*/lib/libclang.so' libclang-dev
need_file '/usr/lib/llvm-*/lib/clang/*/include/stddef.h' libclang-dev
need_command ethtool ethtool
# The images (images/appliance/build.sh, images/container/build.sh) and their
# suites (tests/tests/{appliance,container_image}.rs): QEMU to boot the
# appliance, static busybox and cpio for its initramfs, umoci and skopeo for
# the OCI image, setcap/getcap for its file capabilities, the CA bundle.
need_command qemu-system-x86_64 qemu-system-x86
need_command cpio cpio
need_file /bin/busybox busybox-static
need_command umoci umoci
need_command skopeo skopeo
need_command setcap libcap2-bin
need_command getcap libcap2-bin
need_file /etc/ssl/certs/ca-certificates.crt ca-certificates
# The fuzz targets' build check (dataplane/fuzz, its own workspace):
# libfuzzer-sys compiles libFuzzer from C++ with `c++`.
need_command c++ g++
if ((${#need_pkgs[@]})); then
    # Sorted and unique: iproute2 or libclang-dev may be named twice.
    mapfile -t need_pkgs < <(printf '%s\n' "${need_pkgs[@]}" | sort -u)
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "== apt-get install ${need_pkgs[*]}"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}"
    else
        echo "tests/run.sh: missing packages ${need_pkgs[*]} (run as root to install)" >&2
    fi
fi

if ! command -v cargo-nextest >/dev/null 2>&1 && ! cargo nextest --version >/dev/null 2>&1; then
    cargo install --locked cargo-nextest
fi

# As root (CI), no test may skip for want of root, namespaces or a program
# installed above: a test that would skip fails (portico::netns::skip).
if [ "$(id -u)" = 0 ]; then
    export PORTICO_REQUIRE_ROOT=1
fi

# The Kubernetes tests' real API server: etcd + kube-apiserver v1.20.2 built
# from Debian's source package (cached under /var/cache/portico; ~6-10 min on
# a fresh 2-core machine, a no-op afterwards). A failed build fails the run,
# and with PORTICO_REQUIRE_KUBE_APISERVER=1 no Kubernetes test may skip.
echo "== tests/k8s/build-kube-apiserver.sh"
tests/k8s/build-kube-apiserver.sh
export PORTICO_REQUIRE_KUBE_APISERVER=1

# The images the appliance and container suites test: the appliance (kernel +
# initramfs, cached under /var/cache/portico/appliance by its inputs) and the
# OCI image, both from the release `portico` of profile `appliance` (thin
# LTO: ~6 min on a fresh 2-core machine, the rest a few seconds).
echo "== images/appliance/build.sh"
images/appliance/build.sh
echo "== images/container/build.sh (plain and dpdk variants)"
images/container/build.sh
images/container/build.sh --variant dpdk

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --exclude portico-dpdk-sys --all-targets -- -D warnings
echo "== fuzz targets build (dataplane/fuzz: its own workspace, run by cargo-fuzz)"
cargo check --manifest-path dataplane/fuzz/Cargo.toml --locked --bins --examples
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
