# Helpers shared by images/appliance/build.sh and images/container/build.sh
# (sourced): copying ELF files with their shared libraries into a root
# filesystem laid out like Debian's merged /usr.

# The repository, cargo's target directory and the file times of the images.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
epoch=${SOURCE_DATE_EPOCH:-1700000000}

# build_portico [CARGO ARGS]: the release `portico` of profile `appliance`
# (thin LTO, see Cargo.toml); its path is $target/appliance/portico. Each
# feature set's crates stay cached, so switching variants only relinks.
build_portico() {
    echo "== cargo build --profile appliance -p portico $*"
    (cd "$repo" && cargo build --profile appliance -p portico --bin portico "$@")
}

# The DPDK PMDs the images carry in the EAL's plugin directory (the EAL loads
# every library there; these need nothing beyond libbpf/libxdp).
PORTICO_PMDS=(bus_pci bus_vdev mempool_ring net_virtio net_af_packet net_af_xdp net_ring)

# rootfs_init ROOT: /lib, /lib64 and /sbin as symlinks into /usr (merged
# /usr), so that a library reached through /lib and through /usr/lib is one
# file (the EAL's PMD plugins link to ../../librte_*.so; two copies of one
# library would register DPDK's tailqs twice and abort).
rootfs_init() {
    local root=$1
    mkdir -p "$root/usr/lib" "$root/usr/lib64" "$root/usr/sbin"
    ln -sfn usr/lib "$root/lib"
    ln -sfn usr/lib64 "$root/lib64"
}

# rootfs_copy ROOT PATH...: copy each file with its chain of symlinks (each
# link recreated with its own target, the final file copied).
rootfs_copy() {
    local root=$1 p t
    shift
    for p in "$@"; do
        while [ -L "$p" ]; do
            t=$(readlink "$p")
            mkdir -p "$root$(dirname "$p")"
            ln -sfn "$t" "$root$p"
            case "$t" in /*) p=$t ;; *) p=$(dirname "$p")/$t ;; esac
        done
        mkdir -p "$root$(dirname "$p")"
        cp "$p" "$root$p"
    done
}

# rootfs_libs ELF...: the shared libraries (paths as ldd prints them) and
# the dynamic loader the ELF files need; fails naming any missing one.
rootfs_libs() {
    local out
    out=$(ldd "$@")
    if grep -q 'not found' <<<"$out"; then
        grep 'not found' <<<"$out" >&2
        return 1
    fi
    sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p' <<<"$out" | sort -u
}
