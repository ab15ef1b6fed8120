#!/usr/bin/env bash
# Builds kube-apiserver v1.20.2 from Debian bookworm's own `kubernetes` source
# package with Debian's Go, for the Kubernetes tests (tests/src/kube_cluster/).
#
# - Idempotent: when the cached binary exists, exits 0 at once.
# - Installs with apt-get (root needed for that) what the Kubernetes tests need
#   at run time (etcd-server, openssl), also when the binary is cached, and
#   what the build needs (golang-go, dpkg-dev, make, rsync, reflect2 sources).
# - The deb-src line lives in a PRIVATE apt configuration (own sources file,
#   own sources.list.d, own lists and cache dirs): the system's apt sources,
#   lists and archives are not touched.
# - The vendored github.com/modern-go/reflect2 v1.0.1 segfaults under Go >= 1.18
#   (it relies on runtime internals that moved); it is replaced by the sources of
#   Debian's golang-github-modern-go-reflect2-dev (v1.0.2+), API-compatible.
#
# Output: $PORTICO_KUBE_APISERVER_CACHE (default
# /var/cache/portico/kube-apiserver-v1.20.2)/kube-apiserver
set -euo pipefail

version=v1.20.2
cache_dir=${PORTICO_KUBE_APISERVER_CACHE:-/var/cache/portico/kube-apiserver-$version}
binary=$cache_dir/kube-apiserver

install() {
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "build-kube-apiserver: missing packages $* (run as root on Debian)" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

# What the Kubernetes tests need at run time (tests/src/kube_cluster/).
need_pkgs=()
command -v etcd >/dev/null 2>&1 || need_pkgs+=(etcd-server)
command -v openssl >/dev/null 2>&1 || need_pkgs+=(openssl)
if ((${#need_pkgs[@]})); then install "${need_pkgs[@]}"; fi

if [ -x "$binary" ]; then
    echo "build-kube-apiserver: $binary already built"
    exit 0
fi

# What the build needs.
need_pkgs=()
command -v go >/dev/null 2>&1 || need_pkgs+=(golang-go)
command -v dpkg-source >/dev/null 2>&1 || need_pkgs+=(dpkg-dev)
command -v make >/dev/null 2>&1 || need_pkgs+=(make)
command -v rsync >/dev/null 2>&1 || need_pkgs+=(rsync)
[ -d /usr/share/gocode/src/github.com/modern-go/reflect2 ] || need_pkgs+=(golang-github-modern-go-reflect2-dev)
if ((${#need_pkgs[@]})); then install "${need_pkgs[@]}"; fi

# Debian's mirror: whatever the system's sources use for the main archive.
mirror=${PORTICO_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
    mirror=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
        /etc/apt/sources.list.d/*.list 2>/dev/null | grep -v security |
        grep -oE 'https?://[^ ]+/debian/?' | head -n1 || true)
    mirror=${mirror:-http://deb.debian.org/debian}
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/portico-kube-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "build-kube-apiserver: building in $work (mirror $mirror)"

# Private apt configuration: only a deb-src line for bookworm.
mkdir -p "$work/apt/lists/partial" "$work/apt/sources.list.d" "$work/apt/cache/archives/partial"
echo "deb-src $mirror bookworm main" >"$work/apt/sources.list"
apt_opts=(
    -o "Dir::Etc::SourceList=$work/apt/sources.list"
    -o "Dir::Etc::SourceParts=$work/apt/sources.list.d"
    -o "Dir::State::Lists=$work/apt/lists"
    -o "Dir::Cache=$work/apt/cache"
    -o "Dir::Cache::pkgcache="
    -o "Dir::Cache::srcpkgcache="
    -o "APT::Sandbox::User=root"
)
apt-get "${apt_opts[@]}" update -qq
(cd "$work" && apt-get "${apt_opts[@]}" source --download-only kubernetes/bookworm)
dsc=$(ls "$work"/kubernetes_*.dsc)
(cd "$work" && dpkg-source --no-check -x "$dsc" src >/dev/null)
src=$work/src

# Replace the vendored reflect2 by Debian's packaged sources.
vendored=$src/vendor/github.com/modern-go/reflect2
[ -d "$vendored" ] || { echo "build-kube-apiserver: no vendored reflect2 at $vendored" >&2; exit 1; }
rm -rf "$vendored"
mkdir -p "$vendored"
# Only the package's own files (no tests), as `go mod vendor` would have them.
find -L /usr/share/gocode/src/github.com/modern-go/reflect2 -maxdepth 1 -type f \
    \( -name '*.go' -o -name '*.s' -o -name 'LICENSE' -o -name 'go.mod' \) ! -name '*_test.go' \
    -exec cp {} "$vendored/" \;

# Build with Debian's Go; no module downloads (everything vendored).
export GOFLAGS=-mod=vendor GOPROXY=off GO111MODULE=on GOCACHE=$work/gocache GOPATH=$work/gopath
(cd "$src" && make WHAT=cmd/kube-apiserver KUBE_GIT_VERSION=$version KUBE_GIT_TREE_STATE=clean)

built=$(find "$src/_output" -type f -name kube-apiserver -perm -u+x | head -n1)
[ -n "$built" ] || { echo "build-kube-apiserver: no kube-apiserver in $src/_output" >&2; exit 1; }
"$built" --version
mkdir -p "$cache_dir"
cp "$built" "$binary.tmp.$$"
mv "$binary.tmp.$$" "$binary"
echo "build-kube-apiserver: $binary (built in ${SECONDS} s)"
