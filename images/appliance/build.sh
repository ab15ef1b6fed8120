#!/usr/bin/env bash
# Builds the Portico appliance: the Debian kernel and an initramfs holding
# busybox, the init (images/appliance/init), the modules for virtio-net,
# uio_pci_generic, fw_cfg and the ACPI button, the release `portico` (cargo
# profile `appliance`, feature dpdk) and every shared library it and the
# DPDK PMDs it may load need. No Docker: Debian packages only.
#
#   images/appliance/build.sh            # -> target/appliance-image/{vmlinuz,initramfs.img}
#
# Cached under $PORTICO_APPLIANCE_CACHE (default /var/cache/portico/appliance),
# keyed on every input (binary, libraries, busybox, kernel package, init,
# this script): an unchanged input set is a copy of the cached files; the
# three newest builds are kept.
# Reproducible: file times are set to SOURCE_DATE_EPOCH and the cpio archive
# is written in sorted order (newc, owner root).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/rootfs.sh
. "$here/../lib/rootfs.sh"   # repo, target, epoch, build_portico, rootfs_*
out=${PORTICO_APPLIANCE_OUT:-$target/appliance-image}
cache=${PORTICO_APPLIANCE_CACHE:-/var/cache/portico/appliance}
# Modules loaded at boot, in order (their dependencies come along).
modules=(virtio_pci virtio_net uio_pci_generic qemu_fw_cfg button evdev)

need() { command -v "$1" >/dev/null 2>&1 || { echo "appliance/build.sh: $1 missing (apt-get install $2)" >&2; exit 1; }; }
need cpio cpio
need busybox busybox-static
need dpkg-deb dpkg
need apt-get apt
! ldd /bin/busybox >/dev/null 2>&1 ||
    { echo "appliance/build.sh: /bin/busybox is not static (apt-get install busybox-static)" >&2; exit 1; }
pkg-config --exists libdpdk || { echo "appliance/build.sh: apt-get install libdpdk-dev" >&2; exit 1; }

build_portico --features dpdk
binary=$target/appliance/portico

# The Debian kernel: the version linux-image-amd64 depends on (apt's lists
# are refreshed once when they do not know it, e.g. on a fresh machine).
if ! apt-cache show linux-image-amd64 >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq
fi
kpkg=$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n1)
kver=${kpkg#linux-image-}
kdeb_version=$(apt-cache policy "$kpkg" | sed -n 's/^ *Candidate: //p')
[ -n "$kpkg" ] && [ -n "$kdeb_version" ] || { echo "appliance/build.sh: no linux-image-amd64 in apt (apt-get update)" >&2; exit 1; }
pmddir=$(pkg-config --variable=pmdsdir libdpdk 2>/dev/null || true)
[ -n "$pmddir" ] || pmddir=$(ls -d /usr/lib/x86_64-linux-gnu/dpdk/pmds-* | head -n1)

pmd_files=()
for p in "${PORTICO_PMDS[@]}"; do pmd_files+=("$pmddir/librte_$p.so"); done
libs_text=$(rootfs_libs "$binary" "${pmd_files[@]}") ||
    { echo "appliance/build.sh: unresolved libraries (apt-get install dpdk)" >&2; exit 1; }
mapfile -t libs <<<"$libs_text"

key=$( {
    echo "kernel $kpkg $kdeb_version"; echo "modules ${modules[*]}"; echo "pmds ${PORTICO_PMDS[*]}"
    sha256sum "$binary" /bin/busybox "$here/init" "$here/build.sh" "$here/../lib/rootfs.sh" "${pmd_files[@]}" "${libs[@]}"
} | sha256sum | cut -c1-16)
entry=$cache/$key
if [ ! -f "$entry/initramfs.img" ]; then
    work=$(mktemp -d "${TMPDIR:-/tmp}/portico-appliance.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    echo "== kernel $kpkg $kdeb_version"
    (cd "$work" && apt-get download -q "$kpkg=$kdeb_version")
    dpkg-deb -x "$work"/"$kpkg"_*.deb "$work/kernel"
    kmods=$work/kernel/lib/modules/$kver
    busybox depmod -b "$work/kernel" "$kver"

    root=$work/root
    rootfs_init "$root"
    mkdir -p "$root"/{bin,dev,proc,sys,run,tmp,etc/portico} "$root/lib/modules/$kver"
    ln -sfn bin "$root/sbin"
    mkdir -p "$root/var" && ln -sfn ../run "$root/var/run"
    cp /bin/busybox "$root/bin/busybox"
    for applet in $(busybox --list); do [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"; done
    install -m 0755 "$here/init" "$root/init"
    printf '%s\n' "${modules[@]}" >"$root/etc/portico/modules"
    echo "root:x:0:0:root:/:/bin/sh" >"$root/etc/passwd"
    echo "root:x:0:" >"$root/etc/group"

    # Modules: the closure of $modules over modules.dep, and a modules.dep for them.
    declare -A want=()
    for m in "${modules[@]}"; do
        line=$(grep -E "(^|/)$m\.ko(\.[a-z]+)?:" "$kmods/modules.dep") || { echo "appliance/build.sh: no module $m in $kpkg" >&2; exit 1; }
        for f in ${line/:/}; do want[$f]=1; done
    done
    for f in "${!want[@]}"; do
        mkdir -p "$root/lib/modules/$kver/$(dirname "$f")"
        cp "$kmods/$f" "$root/lib/modules/$kver/$f"
    done
    busybox depmod -b "$root" "$kver"

    # portico, the PMDs (the EAL's plugin directory) and their libraries.
    # Line tables stay in target/ (backtraces there); the image is stripped.
    strip --strip-debug -o "$root/bin/portico" "$binary"
    rootfs_copy "$root" "${pmd_files[@]}" "${libs[@]}"

    find "$root" -exec touch -h -d "@$epoch" {} +
    mkdir -p "$entry.tmp"
    (cd "$root" && find . -print0 | LC_ALL=C sort -z |
        cpio --null --create --format=newc --owner=0:0 --reproducible --quiet) | gzip -n -9 >"$entry.tmp/initramfs.img"
    cp "$work/kernel/boot/vmlinuz-$kver" "$entry.tmp/vmlinuz"
    {
        echo "kernel=$kpkg $kdeb_version"
        echo "portico=$("$binary" --version)"
        echo "key=$key"
        echo "files=$(cd "$root" && find . -type f | wc -l)"
        echo "root_bytes=$(du -sb "$root" | cut -f1)"
    } >"$entry.tmp/manifest"
    rm -rf "$entry" && mv "$entry.tmp" "$entry"
    echo "== built $entry"
    # The cache keeps the three newest builds.
    ls -1dt "$cache"/*/ 2>/dev/null | tail -n +4 | xargs -r rm -rf
else
    echo "== cached $entry"
fi
mkdir -p "$out"
for f in vmlinuz initramfs.img manifest; do cp "$entry/$f" "$out/$f.tmp" && mv "$out/$f.tmp" "$out/$f"; done
echo "appliance: $out/vmlinuz $out/initramfs.img ($(du -sh "$out" | cut -f1))"
