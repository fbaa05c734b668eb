#!/usr/bin/env bash
# tools/fetch-debs.sh - run on a Debian 12 developer machine (with network):
# downloads into .debs/ (git-ignored) the runtime + dev .deb files that the
# GPU machine (no internet, no lmdb/libuv/jansson) needs to build tuned:
#   liblmdb0 liblmdb-dev libuv1 libuv1-dev libjansson4 libjansson-dev lmdb-utils,
#   and for the remote tier hiredis and a redis-server (with its libraries)
# On the GPU machine, `source tools/device-env.sh` unpacks them into a prefix.
#
# Idempotent: a package whose current candidate .deb is already in .debs/ is
# not downloaded again; older versions of the same package are removed.
# Runs `apt-get update` first only if a package is unknown to apt.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEBS_DIR="$ROOT/.debs"
PACKAGES=(liblmdb0 liblmdb-dev libuv1 libuv1-dev libjansson4 libjansson-dev lmdb-utils
          libhiredis0.14 libhiredis-dev redis-server redis-tools libjemalloc2 liblzf1)

log() { printf '==> fetch-debs: %s\n' "$*"; }
die() { printf '==> fetch-debs: ERROR: %s\n' "$*" >&2; exit 1; }

command -v apt-get >/dev/null 2>&1 || die "apt-get not found (run this on a Debian 12 machine)"

arch="$(dpkg --print-architecture)"
[[ "$arch" == amd64 ]] ||
    die "this machine is $arch; the GPU machine needs amd64 packages"

as_root() {
    if [[ "$(id -u)" -eq 0 ]]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root for '$*' (not root and no sudo)"
    fi
}

# candidate "VERSION ARCH" of a package, empty if apt does not know it
candidate() {
    apt-cache show --no-all-versions "$1" 2>/dev/null |
        awk '/^Version:/ {v=$2} /^Architecture:/ {a=$2} END {if (v != "") print v, a}'
}

need_update=0
for pkg in "${PACKAGES[@]}"; do
    [[ -n "$(candidate "$pkg")" ]] || need_update=1
done
if [[ $need_update -eq 1 ]]; then
    log "apt-get update (some packages unknown to apt)"
    DEBIAN_FRONTEND=noninteractive as_root apt-get update -q
fi

mkdir -p "$DEBS_DIR"
cd "$DEBS_DIR"
fetched=0
for pkg in "${PACKAGES[@]}"; do
    read -r ver parch <<<"$(candidate "$pkg")" || true
    [[ -n "${ver:-}" ]] || die "package $pkg not found by apt-get even after apt-get update"
    # apt-get download names files NAME_VERSION_ARCH.deb with ':' -> '%3a'
    file="${pkg}_${ver//:/%3a}_${parch}.deb"
    if [[ -s "$file" ]] && dpkg-deb --info "$file" >/dev/null 2>&1; then
        log "have $file"
    else
        log "downloading $pkg ($ver)"
        rm -f "$file"
        # apt-get download works unprivileged; as root it warns about the
        # _apt sandbox user, which is harmless.
        apt-get download -q "$pkg=$ver" 2>&1 | grep -v 'unsandboxed as root' || true
        [[ -s "$file" ]] || die "download of $pkg failed (expected .debs/$file)"
        fetched=$((fetched + 1))
    fi
    # drop other versions of the same package
    for old in "${pkg}"_*.deb; do
        [[ -e "$old" && "$old" != "$file" ]] || continue
        log "removing stale $old"
        rm -f "$old"
    done
done

log "$fetched downloaded; .debs/ now holds:"
for f in "$DEBS_DIR"/*.deb; do printf '    .debs/%s\n' "${f##*/}"; done
