#!/usr/bin/env bash
# bench/daemon-profile.sh [BUILD_DIR] [OUT_DIR]: where the daemon's event
# loop spends its CPU while it answers `get` under load, the same setup as
# bench/daemon-load.sh's quiet phase (a store of 16 tuned shapes and 20k
# imported records, the test-only fake GPU with a tune running, loadgen
# with 64 connections on the Unix socket), with perf on the loop's thread.
#
# Writes OUT_DIR/loadgen.txt (loadgen's numbers, taken under perf: lower
# than daemon-load.sh's), OUT_DIR/perf-objects.txt (self time by object:
# kernel, jansson, libc, tuned, ...), OUT_DIR/perf-self.txt (self time by
# symbol) and OUT_DIR/perf-children.txt (inclusive time by symbol).
# Environment: DURATION (seconds of profile, 4), CONNECTIONS (64).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
out="${2:-$PWD/daemon-profile}"
tuned="$build/tuned"
duration="${DURATION:-4}"
conns="${CONNECTIONS:-64}"
command -v perf >/dev/null || { echo "profile: needs perf"; exit 1; }
mkdir -p "$out"
# daemon_lib_init, start, stop, prepare_store
source "$root/bench/daemon-lib.sh"
daemon_lib_init profile
prepare_store
start 1000 # a tune that outlasts the profile
# libuv's loop runs on the daemon's main thread: its tid is the pid.
"$build/bench/loadgen" --socket "$sock" --connections "$conns" --duration "$((duration + 2))" \
    --warmup 1 --tune-during >"$out/loadgen.txt" &
lpid=$!
sleep 1.5
perf record -q --call-graph dwarf,16384 -F 1999 -t "$pid" -o "$tmp/perf.data" -- sleep "$duration" 2>/dev/null
wait "$lpid"
# Whole reports first, then their heads (head on a pipe would fail the
# script under pipefail).
report() { # report OUT_FILE LINES PERF_REPORT_ARGS...
    local file="$1" lines="$2"
    shift 2
    perf report -i "$tmp/perf.data" --stdio -g none "$@" >"$tmp/report.txt" 2>/dev/null
    grep -v -e '^#' -e '^$' "$tmp/report.txt" | sed -n "1,${lines}p" >"$file"
}
report "$out/perf-objects.txt" 12 --no-children --sort dso
report "$out/perf-self.txt" 40 --no-children --sort dso,sym
report "$out/perf-children.txt" 150 --children --sort sym
stop
cat "$out/loadgen.txt" "$out/perf-objects.txt"
