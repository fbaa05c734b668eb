#!/usr/bin/env bash
# bench/fleet-latency.sh [BUILD_DIR] [N]: the `get` latency of a remote
# read-through against a local hit, in one run on one machine, with a real
# redis-server (Debian package) on a Unix socket and two daemons with
# test-only fake GPUs of one model (so the numbers are the daemon's and the
# fleet's, not a GPU's):
#
#   1. daemon A (--remote) tunes N shapes (default 200), publishing each
#      record to Redis;
#   2. daemon B (--remote, a fresh store) is asked for each shape twice on
#      one connection, one request at a time: the first `get` reads through
#      to Redis (the reply says "from":"remote"), the second is a local hit;
#   3. prints p50/p90/p99/max of both, in µs, from the client's write of the
#      request to its read of the whole reply (Python, time.perf_counter_ns).
# Exit status 1 when a first get was not read through, or a second not exact.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
n="${2:-200}"
tuned="$build/tuned"
command -v redis-server >/dev/null ||
    { echo "bench: needs redis-server (apt-get install redis-server)"; exit 1; }
tmp="$(mktemp -d /tmp/tuned-fleet-XXXXXX)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

redis-server --port 0 --unixsocket "$tmp/redis.sock" --unixsocketperm 700 --save '' \
    --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
pids+=($!)
# await_fake_daemon
source "$root/bench/daemon-lib.sh"
start() { # start NAME
    TUNED_TEST_FAKE_GPU=1 TUNED_TEST_FAKE_MS=1 "$tuned" serve -q --socket "$tmp/$1.sock" \
        --db "$tmp/$1.db" --remote "unix://$tmp/redis.sock" >>"$tmp/$1.log" 2>&1 &
    pids+=($!)
    await_fake_daemon "$tmp/$1.sock" "$tmp/$1.log" "daemon $1"
}
start A
start B
echo "host: $(nproc) cores, $(uname -r); $(redis-server --version | cut -d' ' -f1-3)"
echo "tuned: $("$tuned" --version), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
python3 - "$tmp" "$n" <<'PY'
import json, socket, sys, time
tmp, n = sys.argv[1], int(sys.argv[2])

class Client:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.s.settimeout(60)
        self.buf = b""

    def call(self, obj):
        t0 = time.perf_counter_ns()
        self.s.sendall((json.dumps(obj) + "\n").encode())
        while b"\n" not in self.buf:
            got = self.s.recv(65536)
            if not got:
                raise OSError("the daemon closed the connection")
            self.buf += got
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line), (time.perf_counter_ns() - t0) / 1e3

shapes = [(1 + i // 20, 1024 + 64 * (i % 20)) for i in range(n)]
a = Client(f"{tmp}/A.sock")
deadline = time.time() + 600


def wait_job(j):
    while True:
        r, _ = a.call({"op": "job", "job": j})
        if (r.get("job") or {}).get("state") in ("done", "failed", "cancelled"):
            return
        if time.time() > deadline:
            sys.exit(f"job {j} did not finish: {r}")
        time.sleep(0.05)


jobs = []
for rows, cols in shapes:
    while True:
        r, _ = a.call({"op": "tune", "rows": rows, "cols": cols, "budget": 8, "time_s": 30})
        if r.get("ok") or (r.get("error") or {}).get("code") != "queue_full":
            break
        wait_job(jobs.pop(0))  # the queue holds 64: let the oldest finish
    if not r.get("ok"):
        sys.exit(f"tune {rows}x{cols}: {r}")
    jobs.append(r["job"])
for j in jobs:
    wait_job(j)
# Published once the lease is released: wait for the last one in Redis.
time.sleep(1.0)
b = Client(f"{tmp}/B.sock")
first, second, bad = [], [], []
for rows, cols in shapes:
    r1, t1 = b.call({"op": "get", "rows": rows, "cols": cols})
    r2, t2 = b.call({"op": "get", "rows": rows, "cols": cols})
    if r1.get("from") != "remote" or r1.get("source") != "exact":
        bad.append(f"{rows}x{cols} first: {r1.get('source')} from {r1.get('from', 'local')}")
    elif r2.get("source") != "exact" or "from" in r2:
        bad.append(f"{rows}x{cols} second: {r2.get('source')} from {r2.get('from', 'local')}")
    first.append(t1)
    second.append(t2)

def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]

print(f"{n} keys, each asked twice of daemon B on one connection, one request at a time")
print(f"{'get':<26}{'p50 us':>10}{'p90 us':>10}{'p99 us':>10}{'max us':>10}")
for name, v in (("remote read-through", first), ("local hit", second)):
    print(f"{name:<26}" + "".join(f"{pct(v, p):>10.1f}" for p in (50, 90, 99)) +
          f"{max(v):>10.1f}")
print(f"read-through / local at p50: {pct(first, 50) / pct(second, 50):.1f}x")
if bad:
    print(f"FAIL: {len(bad)} of {n}: " + "; ".join(bad[:5]))
    sys.exit(1)
print(f"PASS: every first get read through (exact, from remote), every second a local hit")
PY
