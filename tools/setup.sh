#!/usr/bin/env bash
# tools/setup.sh - install the build dependencies (if missing) and build tuned.
#
# Usage: tools/setup.sh [--asan] [--release] [--no-deps]
#
#   1. Checks the Debian build dependencies (meson, ninja, pkg-config, gcc,
#      python3 and its venv module, lmdb, libuv, jansson, hiredis, redis-server, systemd's
#      systemd-analyze, lmdb-utils). Only if one is missing does
#      it run `apt-get update` + `apt-get install` (as root, or through sudo).
#      Then checks that the CUDA toolkit's headers are there
#      ($TUNED_TOOLKIT_ROOT, default /usr/local/cuda): they are not a Debian
#      package of main, so it says what to install and stops.
#      A dependency counts as present if dpkg says its package is installed OR
#      its tool / pkg-config module is found, so on the GPU machine (no apt,
#      no internet) it is satisfied by `source tools/device-env.sh`.
#   2. Configures build/ (meson setup --buildtype=debugoptimized
#      -Dtest_hooks=true, or --reconfigure when build/ already exists, which
#      switches an existing build/ to those options) and compiles it. The
#      test hooks (fake GPU, planted faults, the store's commit hook) are
#      what the tests and bench/daemon-load.sh run on; build/ is a test
#      build, not one to install.
#   3. With --asan, also configures and compiles build-asan/ with
#      -Db_sanitize=address,undefined -Db_lundef=false -Dtest_hooks=true.
#   4. With --release, also configures build-release/ with the default
#      options (no test hooks: what `meson install` would ship) and compiles
#      only the `tuned` executable and libtuned there; tools/test.sh checks
#      that they hold none of the hooks.
#
#   --no-deps   skip the dependency check entirely (never call apt-get).
#
# Idempotent: running it again only rebuilds what changed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '==> setup: %s\n' "$*"; }
die() { printf '==> setup: ERROR: %s\n' "$*" >&2; exit 1; }

want_asan=0
want_release=0
check_deps=1
for arg in "$@"; do
    case "$arg" in
        --asan) want_asan=1 ;;
        --release) want_release=1 ;;
        --no-deps) check_deps=0 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) die "unknown option '$arg' (try --help)" ;;
    esac
done

# ---------------------------------------------------------------- deps ----
# "debian-package:probe" where probe is cmd:NAME (on PATH), pc:NAME
# (pkg-config module) or py:NAME (a module python3 imports; python3-venv's
# ensurepip: the pip-install and wheel tests make venvs, and the wheel's
# build tools come from PyPI into one, tools/build-wheel.sh).
DEPS=(
    "meson:cmd:meson"
    "ninja-build:cmd:ninja"
    "pkg-config:cmd:pkg-config"
    "gcc:cmd:gcc"
    "python3:cmd:python3"
    "python3-venv:py:ensurepip"
    "liblmdb-dev:pc:lmdb"
    "libuv1-dev:pc:libuv"
    "libjansson-dev:pc:jansson"
    "libhiredis-dev:pc:hiredis"
    "redis-server:cmd:redis-server"
    "systemd:cmd:systemd-analyze"
    "lmdb-utils:cmd:mdb_stat"
)

deb_installed() {
    command -v dpkg-query >/dev/null 2>&1 || return 1
    [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" == ii* ]]
}

probe_ok() {
    local kind="$1" name="$2"
    case "$kind" in
        cmd) command -v "$name" >/dev/null 2>&1 ;;
        pc)  command -v pkg-config >/dev/null 2>&1 && pkg-config --exists "$name" ;;
        py)  python3 -c "import $name" >/dev/null 2>&1 ;;
        *)   return 1 ;;
    esac
}

as_root() {
    if [[ "$(id -u)" -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root to run '$*' (not root and no sudo)"
    fi
}

install_deps() {
    local missing=() entry pkg kind name
    for entry in "${DEPS[@]}"; do
        pkg="${entry%%:*}"
        kind="${entry#*:}"; kind="${kind%%:*}"
        name="${entry##*:}"
        if deb_installed "$pkg" || probe_ok "$kind" "$name"; then
            continue
        fi
        missing+=("$pkg")
    done
    if [[ ${#missing[@]} -eq 0 ]]; then
        log "build dependencies: all present"
        return 0
    fi
    log "missing build dependencies: ${missing[*]}"
    command -v apt-get >/dev/null 2>&1 ||
        die "apt-get not found; install ${missing[*]} by hand (on the GPU machine: 'source tools/device-env.sh' first)"
    export DEBIAN_FRONTEND=noninteractive
    log "apt-get update"
    as_root apt-get update -q ||
        die "apt-get update failed (no network? on the GPU machine: 'source tools/device-env.sh' first)"
    log "apt-get install ${missing[*]}"
    as_root apt-get install -y -q --no-install-recommends "${missing[@]}" ||
        die "apt-get install failed"
}

if [[ $check_deps -eq 1 ]]; then
    install_deps
else
    log "skipping dependency check (--no-deps)"
fi

# The CUDA toolkit's headers (cuda.h, nvrtc.h) are no Debian package of
# main: NVIDIA's CUDA toolkit (or Debian non-free's nvidia-cuda-dev)
# brings them, and NVRTC, which tuning needs at run time.
toolkit="${TUNED_TOOLKIT_ROOT:-/usr/local/cuda}"
[[ -f "$toolkit/include/cuda.h" && -f "$toolkit/include/nvrtc.h" ]] ||
    die "the CUDA toolkit's headers (cuda.h, nvrtc.h) are not under $toolkit/include: install the CUDA toolkit (NVIDIA's cuda-toolkit packages, or Debian non-free's nvidia-cuda-dev) or name its root in TUNED_TOOLKIT_ROOT"

command -v meson >/dev/null 2>&1 || die "meson not found on PATH"
command -v ninja >/dev/null 2>&1 || die "ninja not found on PATH"

# --------------------------------------------------------------- build ----
# configure_and_build DIR [meson options...]: compiles every target, or
# only those in the targets array when it is not empty.
targets=()
configure_and_build() {
    local dir="$1"; shift
    if [[ -f "$dir/meson-private/coredata.dat" ]]; then
        log "reconfiguring $dir/"
        local out rc=0
        out="$(mktemp)"
        meson setup --reconfigure "$dir" "$@" 2>&1 | tee "$out" || rc=$?
        if [[ $rc -ne 0 ]] && grep -qiE 'incompatible|--wipe' "$out"; then
            # made by another meson version: start that build dir afresh
            rm -f "$out"
            log "$dir/ was made by an incompatible meson; re-creating it (--wipe)"
            meson setup --wipe "$dir" "$@" || die "meson setup of $dir/ failed"
        else
            rm -f "$out"
            [[ $rc -eq 0 ]] || die "meson setup --reconfigure of $dir/ failed"
        fi
    else
        log "configuring $dir/"
        meson setup "$dir" "$@" || die "meson setup of $dir/ failed"
    fi
    log "compiling $dir/${targets[*]+ (${targets[*]})}"
    meson compile -C "$dir" ${targets[@]+"${targets[@]}"} || die "build of $dir/ failed"
    log "$dir/ is up to date"
}

configure_and_build build --buildtype=debugoptimized -Dtest_hooks=true -Dtoolkit_root="$toolkit"

if [[ $want_asan -eq 1 ]]; then
    configure_and_build build-asan --buildtype=debug \
        -Db_sanitize=address,undefined -Db_lundef=false -Dtest_hooks=true -Dtoolkit_root="$toolkit"
fi

if [[ $want_release -eq 1 ]]; then
    # -Dtest_hooks=false is the default; said here so that --reconfigure
    # resets a build-release/ someone configured otherwise.
    targets=(tuned:executable tuned:shared_library)
    configure_and_build build-release -Dtest_hooks=false -Dtoolkit_root="$toolkit"
    targets=()
fi

log "done"
