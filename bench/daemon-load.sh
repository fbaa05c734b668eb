#!/usr/bin/env bash
# bench/daemon-load.sh [BUILD_DIR]: the daemon's load test (issue 5's bar:
# at least 100k requests/s and p99 under 1 ms, 64 connections, `get` of
# stored keys over the Unix socket, while a tune job runs).
#
#   1. starts `tuned serve` with the test-only fake GPU (1 ms variants) on a
#      temporary socket and store, tunes 16 shapes through it, stops it;
#   2. starts it again with slow fake variants (TUNED_TEST_FAKE_MS, default
#      250) so that a tune runs through the whole measurement, and runs
#      build/bench/loadgen --connections 64 --duration 10 --tune-during;
#   3. prints loadgen's lines and PASS or FAIL against the bar.
# Environment: CONNECTIONS, DURATION, TUNED_TEST_FAKE_MS, TUNED_TEST_FAKE_BUSY
# (1: the fake worker spins a CPU core per variant, as NVRTC would).
# The fake GPU is a test hook: BUILD_DIR (default build/) must be configured
# with -Dtest_hooks=true, as tools/setup.sh configures build/; a build
# without hooks is refused.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
tuned="$build/tuned"
[[ -x "$tuned" ]] || tuned="$build/tuned"
tmp="$(mktemp -d /tmp/tuned-load-XXXXXX)"
pid=""
cleanup() { [[ -n "$pid" ]] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
sock="$tmp/s.sock"

start() { # start FAKE_MS
    TUNED_TEST_FAKE_GPU=1 TUNED_TEST_FAKE_MS="$1" "$tuned" serve -q --socket "$sock" \
        --db "$tmp/db" >>"$tmp/log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do
        if [[ -S "$sock" ]]; then
            grep -q "TEST ONLY: fake GPU" "$tmp/log" && return 0
            echo "$tuned has no fake GPU: configure $build with -Dtest_hooks=true"; exit 1
        fi
        sleep 0.05
    done
    echo "daemon did not start:"; cat "$tmp/log"; exit 1
}
stop() { kill -TERM "$pid"; wait "$pid"; pid=""; }

start 1
"$build/bench/loadgen" --socket "$sock" --populate 16 --duration 0.2 --warmup 0 >/dev/null
stop
start "${TUNED_TEST_FAKE_MS:-250}"
out="$("$build/bench/loadgen" --socket "$sock" --connections "${CONNECTIONS:-64}" \
       --duration "${DURATION:-10}" --warmup 1 --tune-during)" || { echo "$out"; exit 1; }
stop
echo "$out"
rps="$(sed -n 's/.* \([0-9]*\) req\/s$/\1/p' <<<"$out")"
p99="$(sed -n 's/.* p99 \([0-9.]*\) .*/\1/p' <<<"$out")"
if awk -v r="$rps" -v p="$p99" 'BEGIN { exit !(r >= 100000 && p < 1000) }'; then
    echo "PASS: $rps req/s >= 100000, p99 $p99 us < 1000 us"
else
    echo "FAIL: $rps req/s (want >= 100000), p99 $p99 us (want < 1000 us)"
    exit 1
fi
