#!/usr/bin/env bash
# tools/device-env.sh - build environment for the GPU machine (Ubuntu 24.04,
# no internet, no lmdb/libuv/jansson installed). Meant to be SOURCED:
#
#     source tools/device-env.sh && tools/test.sh
#
# It unpacks every .debs/*.deb (fetched on a developer machine with
# tools/fetch-debs.sh) with `dpkg -x` into a prefix (default /tmp/tuned-prefix,
# override with TUNED_PREFIX; never /), rewrites the /usr paths in the
# extracted pkg-config .pc files to point into the prefix, and exports
# PKG_CONFIG_PATH, LD_LIBRARY_PATH, LIBRARY_PATH and PATH (for mdb_stat)
# accordingly; LD_LIBRARY_PATH also gets the CUDA toolkit's libraries
# (/usr/local/cuda/lib64, where it exists).
# (PKG_CONFIG_SYSROOT_DIR is not used: it mangles .pc files whose paths are
# written relative to ${prefix}.)
#
# Idempotent: the prefix is re-extracted only when the set of .deb files
# changed, and path variables get each entry once.
# Executed instead of sourced, it does the same work and prints the export
# lines, so `eval "$(tools/device-env.sh)"` works too.
#
# When sourced, the calling shell's options are left untouched: the unpacking
# runs as a separate `set -euo pipefail` bash process (this script with
# --unpack), and a failure prints an error and does `return 1` instead of
# exiting the caller's shell.

_tuned_env_sourced=0
[[ "${BASH_SOURCE[0]}" != "$0" ]] && _tuned_env_sourced=1

# ---- unpack: runs in its own `bash` process (`device-env.sh --unpack`) so
# that `set -euo pipefail` applies whatever the calling shell's settings.
# Messages go to stderr; stdout stays clean.
_tuned_env_unpack() {
    set -euo pipefail
    local root prefix triplet="x86_64-linux-gnu"
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    prefix="${TUNED_PREFIX:-/tmp/tuned-prefix}"
    prefix="${prefix%/}"
    err() { printf '==> device-env: ERROR: %s\n' "$*" >&2; exit 1; }
    log() { printf '==> device-env: %s\n' "$*" >&2; }

    [[ "$prefix" == /?* && "$prefix" != *[\#\&\\:\ ]* ]] ||
        err "TUNED_PREFIX must be an absolute directory other than /, without '#&\\:' or spaces (got '${TUNED_PREFIX:-}')"
    command -v dpkg-deb >/dev/null 2>&1 ||
        err "dpkg-deb not found; cannot unpack .debs/"

    shopt -s nullglob
    local debs=("$root"/.debs/*.deb)
    [[ ${#debs[@]} -gt 0 ]] ||
        err "no .deb files in $root/.debs/ - run tools/fetch-debs.sh on a developer machine and bring .debs/ along"

    local stamp="$prefix/.tuned-debs.stamp" want
    want="$(cd "$root/.debs" && sha256sum -- *.deb)"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        log "prefix $prefix is up to date (${#debs[@]} packages)"
        return 0
    fi

    if [[ -e "$prefix" ]]; then
        if [[ -f "$stamp" ]] || [[ -d "$prefix" && -z "$(ls -A "$prefix")" ]]; then
            rm -rf -- "$prefix"
        else
            err "$prefix exists and was not made by this script; remove it or set TUNED_PREFIX"
        fi
    fi
    mkdir -p "$prefix"
    local deb
    for deb in "${debs[@]}"; do
        log "unpacking $(basename "$deb")"
        dpkg-deb -x "$deb" "$prefix"   # same as `dpkg -x`
    done

    # Point every "var=/usr..." line of the .pc files into the prefix.
    # (Some use prefix=/usr + ${prefix}/..., others spell /usr/lib/... out.)
    local npc=0 pc
    for pc in "$prefix"/usr/lib/"$triplet"/pkgconfig/*.pc \
              "$prefix"/usr/lib/pkgconfig/*.pc "$prefix"/usr/share/pkgconfig/*.pc; do
        if [[ -L "$pc" ]]; then   # make symlinked .pc files real files first
            cp --remove-destination -- "$(readlink -f "$pc")" "$pc"
        fi
        sed -i -E "s#^([A-Za-z_][A-Za-z0-9_.]*)=/usr(/|\$)#\1=$prefix/usr\2#" "$pc"
        npc=$((npc + 1))
    done
    [[ $npc -gt 0 ]] || err "no pkg-config files found after unpacking .debs/ (are the -dev packages there?)"

    printf '%s\n' "$want" > "$stamp"
    log "unpacked ${#debs[@]} packages into $prefix ($npc .pc files rewritten)"
}

if [[ $_tuned_env_sourced -eq 0 && "${1:-}" == --unpack ]]; then
    _tuned_env_unpack
    exit 0
fi

if [[ $_tuned_env_sourced -eq 0 ]]; then
    set -euo pipefail
fi
unset -f _tuned_env_unpack

_tuned_env_prefix="${TUNED_PREFIX:-/tmp/tuned-prefix}"
_tuned_env_prefix="${_tuned_env_prefix%/}"
_tuned_env_triplet="x86_64-linux-gnu"

if ! bash "${BASH_SOURCE[0]}" --unpack; then
    printf '==> device-env: FAILED; environment NOT changed\n' >&2
    unset _tuned_env_prefix _tuned_env_triplet
    if [[ $_tuned_env_sourced -eq 1 ]]; then
        unset _tuned_env_sourced
        return 1
    fi
    exit 1
fi

# ---- environment ---------------------------------------------------------
# _tuned_env_prepend VAR DIR: put DIR first in colon list VAR, once.
_tuned_env_prepend() {
    local var="$1" dir="$2" cur
    cur="${!var:-}"
    cur=":${cur}:"
    cur="${cur//:$dir:/:}"
    cur="${cur#:}"; cur="${cur%:}"
    printf -v "$var" '%s' "$dir${cur:+:$cur}"
    export "${var?}"
}

_tuned_env_prepend PKG_CONFIG_PATH "$_tuned_env_prefix/usr/share/pkgconfig"
_tuned_env_prepend PKG_CONFIG_PATH "$_tuned_env_prefix/usr/lib/pkgconfig"
_tuned_env_prepend PKG_CONFIG_PATH "$_tuned_env_prefix/usr/lib/$_tuned_env_triplet/pkgconfig"
_tuned_env_prepend LD_LIBRARY_PATH "$_tuned_env_prefix/usr/lib/$_tuned_env_triplet"
# hiredis.pc names ${prefix}/lib; Debian puts the library in its multiarch
# directory, where the linker looks only through LIBRARY_PATH.
_tuned_env_prepend LIBRARY_PATH "$_tuned_env_prefix/usr/lib/$_tuned_env_triplet"
_tuned_env_prepend PATH "$_tuned_env_prefix/usr/bin"
# The CUDA toolkit's libraries (NVRTC) for programs run from the build tree.
if [[ -d /usr/local/cuda/lib64 ]]; then
    _tuned_env_prepend LD_LIBRARY_PATH /usr/local/cuda/lib64
fi
export TUNED_PREFIX="$_tuned_env_prefix"

if [[ $_tuned_env_sourced -eq 1 ]]; then
    printf '==> device-env: PKG_CONFIG_PATH, LD_LIBRARY_PATH, LIBRARY_PATH and PATH now use %s\n' "$_tuned_env_prefix" >&2
    if command -v pkg-config >/dev/null 2>&1; then
        for _tuned_env_m in lmdb libuv jansson; do
            pkg-config --exists "$_tuned_env_m" ||
                printf '==> device-env: WARNING: pkg-config cannot find %s\n' "$_tuned_env_m" >&2
        done
        unset _tuned_env_m
    fi
else
    printf 'export PKG_CONFIG_PATH=%q\n' "$PKG_CONFIG_PATH"
    printf 'export LD_LIBRARY_PATH=%q\n' "$LD_LIBRARY_PATH"
    printf 'export LIBRARY_PATH=%q\n' "$LIBRARY_PATH"
    printf 'export PATH=%q\n' "$PATH"
    printf 'export TUNED_PREFIX=%q\n' "$TUNED_PREFIX"
    printf '==> device-env: executed, not sourced: eval these lines, or use "source tools/device-env.sh"\n' >&2
fi
unset -f _tuned_env_prepend
unset _tuned_env_prefix _tuned_env_triplet _tuned_env_sourced
