#!/usr/bin/env bash
# Builds Portico's OCI image without Docker: a root filesystem with the
# release `portico` (cargo profile `appliance`), the shared libraries it links
# (ldd), CA certificates and a non-root user, packed with umoci and exported
# with skopeo.
#
#   images/container/build.sh [--variant plain|dpdk]
#
# Variants: `plain` (afpacket/AF_XDP; tag VERSION) and `dpdk` (feature dpdk,
# the DPDK runtime and the PMDs of images/appliance; tag VERSION-dpdk).
# Output in $PORTICO_CONTAINER_OUT (default target/container-image):
#   oci/                       OCI image layout (tag portico:TAG inside)
#   portico-TAG.docker.tar     docker-archive (`kind load image-archive`,
#                              `ctr -n k8s.io images import`, `docker load`)
# The user is portico (65532:65532); /usr/bin/portico carries the file
# capabilities the drivers need at start-up (cap_net_admin, cap_net_raw,
# cap_ipc_lock, cap_bpf; plus cap_sys_admin, cap_sys_rawio in the dpdk
# variant): a non-root process raises them at exec, and `portico run` drops
# them again once its ports are open (controlplane/src/gateway/privileges).
# Layer and config times are SOURCE_DATE_EPOCH (reproducible digests for
# identical inputs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/rootfs.sh
. "$here/../lib/rootfs.sh"   # repo, target, epoch, build_portico, rootfs_*
out=${PORTICO_CONTAINER_OUT:-$target/container-image}
variant=plain
while (($#)); do
    case "$1" in
        --variant) variant=$2; shift 2 ;;
        *) echo "container/build.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done
for tool in umoci:umoci skopeo:skopeo setcap:libcap2-bin; do
    command -v "${tool%%:*}" >/dev/null 2>&1 ||
        { echo "container/build.sh: ${tool%%:*} missing (apt-get install ${tool#*:})" >&2; exit 1; }
done
[ -f /etc/ssl/certs/ca-certificates.crt ] ||
    { echo "container/build.sh: /etc/ssl/certs/ca-certificates.crt missing (apt-get install ca-certificates)" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n1)
source_url=$(sed -n 's/^repository = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n1)
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
caps=cap_net_admin,cap_net_raw,cap_ipc_lock,cap_bpf
case "$variant" in
    plain) features=() tag=$version ;;
    dpdk) features=(--features dpdk) tag=$version-dpdk caps+=,cap_sys_admin,cap_sys_rawio ;;
    *) echo "container/build.sh: --variant plain or dpdk" >&2; exit 2 ;;
esac
# Both variants build into target/appliance/portico: the binary is copied
# into the root filesystem right after its build.
build_portico "${features[@]}"
binary=$target/appliance/portico

work=$(mktemp -d "${TMPDIR:-/tmp}/portico-container.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
rootfs_init "$root"
mkdir -p "$root"/{usr/bin,etc/portico,etc/ssl/certs,run/portico,tmp,proc,sys,dev}
chmod 1777 "$root/tmp"
strip --strip-debug -o "$root/usr/bin/portico" "$binary"
chmod 0755 "$root/usr/bin/portico"
setcap "$caps+ep" "$root/usr/bin/portico"
elfs=("$binary")
if [ "$variant" = dpdk ]; then
    pmddir=$(ls -d /usr/lib/x86_64-linux-gnu/dpdk/pmds-* | head -n1)
    for p in "${PORTICO_PMDS[@]}"; do
        elfs+=("$pmddir/librte_$p.so")
    done
    rootfs_copy "$root" "${elfs[@]:1}"
fi
libs_text=$(rootfs_libs "${elfs[@]}") || { echo "container/build.sh: unresolved libraries" >&2; exit 1; }
mapfile -t libs <<<"$libs_text"
rootfs_copy "$root" "${libs[@]}"
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
printf 'root:x:0:0:root:/:/usr/sbin/nologin\nportico:x:65532:65532:portico:/:/usr/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nportico:x:65532:\n' >"$root/etc/group"
chown 65532:65532 "$root/run/portico"
find "$root" -exec touch -h -d "@$epoch" {} +

created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
oci=$work/oci
umoci init --layout "$oci"
umoci new --image "$oci:$tag"
umoci unpack --image "$oci:$tag" "$work/bundle" >/dev/null
rm -rf "$work/bundle/rootfs" && mv "$root" "$work/bundle/rootfs"
umoci repack --image "$oci:$tag" --history.created "$created" --history.created_by "images/container/build.sh" "$work/bundle"
umoci config --image "$oci:$tag" --created "$created" --history.created "$created" \
    --os linux --architecture amd64 \
    --config.user 65532:65532 --config.workingdir / \
    --config.entrypoint /usr/bin/portico \
    --config.cmd run --config.cmd --config --config.cmd /etc/portico/portico.toml \
    --config.env PATH=/usr/bin \
    --config.label "org.opencontainers.image.title=portico" \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label "org.opencontainers.image.source=$source_url" \
    --config.label "org.opencontainers.image.revision=$revision" \
    --config.label "org.opencontainers.image.licenses=Apache-2.0" \
    --config.label "dev.portico.variant=$variant" \
    --config.label "dev.portico.file-capabilities=$caps"
umoci gc --layout "$oci"

mkdir -p "$out"
rm -rf "$out/oci.tmp" && cp -a "$oci" "$out/oci.tmp"
if [ -d "$out/oci" ]; then
    # Keep the other variant's tag: merge by copying this tag into the existing layout.
    skopeo copy --quiet "oci:$oci:$tag" "oci:$out/oci:$tag"
    umoci gc --layout "$out/oci"   # the blobs of the tag's previous image
    rm -rf "$out/oci.tmp"
else
    mv "$out/oci.tmp" "$out/oci"
fi
rm -f "$out/portico-$tag.docker.tar"
skopeo copy --quiet "oci:$oci:$tag" "docker-archive:$out/portico-$tag.docker.tar:portico:$tag"
echo "container: $out/oci (portico:$tag), $out/portico-$tag.docker.tar ($(du -h "$out/portico-$tag.docker.tar" | cut -f1))"
