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
tmp="$(mktemp -d /tmp/tuned-profile-XXXXXX)"
pid=""
cleanup() {
    if [[ -n "$pid" ]]; then kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
sock="$tmp/s.sock"

start() { # start FAKE_MS
    TUNED_TEST_FAKE_GPU=1 TUNED_TEST_FAKE_MS="$1" "$tuned" serve -q --socket "$sock" \
        --db "$tmp/db" >>"$tmp/log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do
        [[ -S "$sock" ]] && return 0
        sleep 0.05
    done
    echo "daemon did not start:"; cat "$tmp/log"; exit 1
}
stop() { kill -TERM "$pid"; wait "$pid"; pid=""; }

# The same 20k records of another GPU as daemon-load.sh imports.
python3 - "$tmp" <<'PY'
import json, sys
def fnv(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h
ident = "NVIDIA H200|sm_90|132sm|143771MiB|drv13000|nvrtc13.0|tpl0123456789abcdef"
with open(f"{sys.argv[1]}/import.jsonl", "w") as f:
    f.write(json.dumps({"tuned_export": 1, "schema": 2, "record_version": 2,
                        "writer": "bench", "records": 20000}) + "\n")
    for i in range(20000):
        f.write(json.dumps({"v": 2, "kernel": "softmax", "dtype": "fp16",
            "rows": 1 + i // 100, "cols": 1024 + (i % 100) * 8, "layout": 0,
            "gpu_fp": "%016x" % fnv(ident), "config": "w8.r1.c1.m1.v8.ld=cs.st=cs.reg=f32",
            "gpu": ident, "gpu_name": "NVIDIA H200", "cc_major": 9, "cc_minor": 0,
            "sm_count": 132, "mem_mib": 143771, "driver": 13000, "nvrtc_major": 13,
            "nvrtc_minor": 0, "template_hash": "0123456789abcdef",
            "policy": "l2flush-settle-events-median/3", "median_us": 200.0,
            "copy_us": 180.0, "gbps": 100.0, "evaluations": 50, "cubin": "0" * 16,
            "date": "2026-11-21T10:00:00Z", "tool_version": "0.1.0"}) + "\n")
PY

start 1
"$build/bench/loadgen" --socket "$sock" --populate 16 --duration 0.2 --warmup 0 >/dev/null
stop
"$tuned" import -q "$tmp/import.jsonl" --db "$tmp/db"
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
