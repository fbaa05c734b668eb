# bench/daemon-lib.sh: what the daemon's bench scripts (daemon-load.sh,
# daemon-profile.sh, fleet-latency.sh) share; sourced, not run, it only
# defines functions. The caller sets tuned and build; daemon_lib_init makes
# tmp, sock, and a trap that stops whatever pid, rpid and ipid name and
# removes tmp.
#
#   daemon_lib_init NAME  the scratch directory /tmp/tuned-NAME-XXXXXX, the
#                      socket in it and the exit trap
#   prepare_store      a store of 16 tuned shapes (through a daemon with 1 ms
#                      fake variants) and 20k imported records
#   await_fake_daemon SOCK LOG WHAT  waits for a fake-GPU daemon to listen
#   start FAKE_MS      tuned serve with the test-only fake GPU (variants of
#                      FAKE_MS ms) on $sock with the store $tmp/db; exits
#                      when the binary has no test hooks
#   stop               SIGTERM, then waits for it
#   make_import_files  $tmp/import-0.jsonl and import-1.jsonl: 20k plausible
#                      records each of a GPU of their own (an H200 the
#                      daemon does not have), times 200 and 199 us, so that
#                      importing them in turn changes every record

daemon_lib_init() { # daemon_lib_init NAME
    tmp="$(mktemp -d "/tmp/tuned-$1-XXXXXX")"
    sock="$tmp/s.sock"
    pid="" rpid="" ipid=""
    trap daemon_lib_cleanup EXIT
}
daemon_lib_cleanup() {
    local p
    for p in "$ipid" "$rpid"; do
        if [[ -n "$p" ]]; then kill "$p" 2>/dev/null; wait "$p" 2>/dev/null || true; fi
    done
    if [[ -n "$pid" ]]; then kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}

# Waits for a daemon started with the fake GPU to listen on SOCK, its
# output in LOG; exits the script when it does not, or when the binary has
# no fake GPU (a build without test hooks).
await_fake_daemon() { # await_fake_daemon SOCK LOG WHAT
    for _ in $(seq 200); do
        if [[ -S "$1" ]]; then
            grep -q "TEST ONLY: fake GPU" "$2" && return 0
            echo "$tuned has no fake GPU: configure $build with -Dtest_hooks=true"; exit 1
        fi
        sleep 0.05
    done
    echo "$3 did not start:"; cat "$2"; exit 1
}

start() { # start FAKE_MS
    TUNED_TEST_FAKE_GPU=1 TUNED_TEST_FAKE_MS="$1" "$tuned" serve -q --socket "$sock" \
        --db "$tmp/db" >>"$tmp/log" 2>&1 &
    pid=$!
    await_fake_daemon "$sock" "$tmp/log" "daemon"
}
stop() { kill -TERM "$pid"; wait "$pid"; pid=""; }

make_import_files() {
    python3 - "$tmp" <<'PY'
import json, sys
def fnv(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h
ident = "NVIDIA H200|sm_90|132sm|143771MiB|drv13000|nvrtc13.0|tpl0123456789abcdef"
for k in (0, 1):
    with open(f"{sys.argv[1]}/import-{k}.jsonl", "w") as f:
        f.write(json.dumps({"tuned_export": 1, "schema": 2, "record_version": 2,
                            "writer": "bench", "records": 20000}) + "\n")
        for i in range(20000):
            m = 200.0 - k
            f.write(json.dumps({"v": 2, "kernel": "softmax", "dtype": "fp16",
                "rows": 1 + i // 100, "cols": 1024 + (i % 100) * 8, "layout": 0,
                "gpu_fp": "%016x" % fnv(ident), "config": "w8.r1.c1.m1.v8.ld=cs.st=cs.reg=f32",
                "gpu": ident, "gpu_name": "NVIDIA H200", "cc_major": 9, "cc_minor": 0,
                "sm_count": 132, "mem_mib": 143771, "driver": 13000, "nvrtc_major": 13,
                "nvrtc_minor": 0, "template_hash": "0123456789abcdef",
                "policy": "l2flush-settle-events-median/3", "median_us": m,
                "copy_us": 0.9 * m, "gbps": 100.0, "evaluations": 50, "cubin": "0" * 16,
                "date": "2026-11-21T10:00:00Z", "tool_version": "0.1.0"}) + "\n")
PY
}

prepare_store() {
    make_import_files
    start 1
    "$build/bench/loadgen" --socket "$sock" --populate 16 --duration 0.2 --warmup 0 >/dev/null
    stop
    "$tuned" import -q "$tmp/import-0.jsonl" --db "$tmp/db"
}
