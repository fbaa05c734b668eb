#!/usr/bin/env bash
# bench/daemon-load.sh [BUILD_DIR]: the daemon's load test beside Redis, in
# one run on one machine: `get` of stored keys over the Unix socket, 64
# connections, one request in flight each (like redis-benchmark -c 64 -P 1).
#
#   1. starts `tuned serve` with the test-only fake GPU (1 ms variants) on a
#      temporary socket and store, tunes 16 shapes through it, stops it;
#   2. starts it again with slow fake variants (TUNED_TEST_FAKE_MS, default
#      1000) so that a tune runs through the measurement, and `redis-server`
#      (Debian package redis-server) on a Unix socket with no persistence
#      (--save '' --appendonly no --port 0);
#   3. quiet store: `redis-benchmark -s SOCK -c 64 -t get` against Redis, then
#      build/bench/loadgen --connections 64 --tune-during against tuned;
#   4. the same while another process imports 20k records into tuned's store
#      in a loop (`tuned import`, each round a little faster, so every round
#      changes the store and the daemon rebuilds its index);
#   5. prints both throughputs, p50/p99/p99.9/max, and the ratios tuned/Redis.
# Bars: tuned's get throughput >= Redis GET's, its p99 <= Redis's p99, and
# with the import running no request over 5 ms (loadgen's max).
# Environment: CONNECTIONS (64), DURATION (10 s per phase), TUNED_TEST_FAKE_MS.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
tuned="$build/tuned"
conns="${CONNECTIONS:-64}"
duration="${DURATION:-10}"
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null ||
    { echo "bench: needs redis-server and redis-benchmark (apt-get install redis-server redis-tools)"; exit 1; }
# daemon_lib_init, start, stop, prepare_store
source "$root/bench/daemon-lib.sh"
daemon_lib_init load
rsock="$tmp/redis.sock"
prepare_store
start "${TUNED_TEST_FAKE_MS:-1000}" # a tune that outlasts both runs
redis-server --save '' --appendonly no --port 0 --unixsocket "$rsock" --unixsocketperm 700 \
    --daemonize no --logfile "$tmp/redis.log" &
rpid=$!
for _ in $(seq 200); do [[ -S "$rsock" ]] && break; sleep 0.05; done
redis-cli -s "$rsock" set key:__rand_int__ "$(head -c 200 /dev/zero | tr '\0' x)" >/dev/null

importer() { # imports 20k records again and again
    local k=0
    while :; do "$tuned" import -q "$tmp/import-$((k % 2)).jsonl" --db "$tmp/db" || true; k=$((k + 1)); done
}

# redis-benchmark's percentile table: "  99.900% <= 0.615 milliseconds (...)"
redis_run() { # prints "rps p50 p99 p999 max" (latencies in us)
    local n=$((170000 * duration))
    redis-benchmark -s "$rsock" -c "$conns" -t get -n "$n" >"$tmp/redis.out" 2>&1
    awk '
        /throughput summary:/ { rps = $3 }
        /^ *[0-9.]+% <= [0-9.]+ milliseconds/ {
            p = $1; sub("%", "", p); v = $3 * 1000
            if (p50 == "" && p >= 50) p50 = v
            if (p99 == "" && p >= 99) p99 = v
            if (p999 == "" && p >= 99.9) p999 = v
            max = v
        }
        END { printf "%s %s %s %s %s\n", rps, p50, p99, p999, max }' "$tmp/redis.out"
}
tuned_run() { # prints loadgen's lines, then "rps p50 p99 p999 max"
    "$build/bench/loadgen" --socket "$sock" --connections "$conns" --duration "$duration" \
        --warmup 1 --tune-during >"$tmp/loadgen.out" || { cat "$tmp/loadgen.out"; exit 1; }
    awk '/req\/s$/ { rps = $(NF-1) }
         /latency us:/ { p50 = $5; p99 = $9; p999 = $11; max = $13 }
         END { printf "%s %s %s %s %s\n", rps, p50, p99, p999, max }' "$tmp/loadgen.out"
}

report() { # report PHASE REDIS_LINE TUNED_LINE
    read -r rr r50 r99 r999 rmax <<<"$2"
    read -r tr t50 t99 t999 tmax <<<"$3"
    printf '%s\n' "== $1"
    printf '%-8s %12s %10s %10s %10s %10s\n' "" "req/s" "p50 us" "p99 us" "p99.9 us" "max us"
    printf '%-8s %12.0f %10.1f %10.1f %10.1f %10.1f\n' redis "$rr" "$r50" "$r99" "$r999" "$rmax"
    printf '%-8s %12.0f %10.1f %10.1f %10.1f %10.1f\n' tuned "$tr" "$t50" "$t99" "$t999" "$tmax"
    awk -v tr="$tr" -v rr="$rr" -v t99="$t99" -v r99="$r99" -v t999="$t999" -v r999="$r999" \
        'BEGIN { printf "tuned/redis: throughput %.2fx, p99 %.2fx, p99.9 %.2fx\n", tr / rr, t99 / r99, t999 / r999 }'
}

echo "machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1); $(redis-server --version | cut -d' ' -f1-3)"
echo "tuned: $("$tuned" --version), $conns connections, ${duration} s per run, Unix sockets"
quiet_r="$(redis_run)"
quiet_t="$(tuned_run)"; cat "$tmp/loadgen.out"
report "quiet store" "$quiet_r" "$quiet_t"
importer >/dev/null 2>&1 &
ipid=$!
sleep 1
busy_r="$(redis_run)"
busy_t="$(tuned_run)"; cat "$tmp/loadgen.out"
kill "$ipid"; wait "$ipid" 2>/dev/null || true; ipid=""
report "while another process imports 20k records in a loop" "$busy_r" "$busy_t"
loads="$(python3 - "$sock" <<'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b'{"op":"stats"}\n')
b = b""
while b"\n" not in b:
    b += s.recv(65536)
st = json.loads(b)["store"]
print("index rebuilds %d, last %d ms off the loop" % (st["loads"], st["last_load_ms"]))
PY
)"
echo "$loads"
stop
read -r tr _ t99 _ _ <<<"$quiet_t"; read -r rr _ r99 _ _ <<<"$quiet_r"
read -r _ _ _ _ bmax <<<"$busy_t"
awk -v tr="$tr" -v rr="$rr" -v t99="$t99" -v r99="$r99" -v bmax="$bmax" 'BEGIN {
    printf "%s: throughput >= redis\n", (tr >= rr ? "PASS" : "FAIL")
    printf "%s: p99 <= redis p99\n", (t99 <= r99 ? "PASS" : "FAIL")
    printf "%s: no request over 5 ms while importing (max %.0f us)\n", (bmax <= 5000 ? "PASS" : "FAIL"), bmax }'
