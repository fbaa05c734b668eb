#!/usr/bin/env python3
"""fleet-gpu.py TUNED OUT: two daemons on one real GPU sharing a Redis.

On the GPU machine (redis-server on PATH, from tools/device-env.sh), with
the real GPU (no test hooks needed):

  flight   redis-server on a Unix socket in a temp directory; daemons A and
           B, each with its own store, both --remote on it, both on GPU 0.
           12 concurrent `tune` requests of one shape, alternating A and B:
           exactly one tune runs (counted in both logs), and both then
           answer `exact` with the same config.
  latency  A tunes N small shapes (quick tunes, one after another), each
           published to Redis; B is asked for each twice on one
           connection: the first `get` reads through ("from":"remote"),
           the second is a local hit. p50/p90/max of both, in µs, from the
           client's write of the request to its read of the reply.

Writes OUT/fleet-gpu.txt (the table) and OUT/daemon-A.log, daemon-B.log,
redis.log; exit status 1 when a check fails.
"""
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from daemon_client import (  # noqa: E402 - the tests' client and helpers
    Client, call_all_at_once, call_once, stop_process, wait_for)

FLIGHT_SHAPE = (4096, 4096)
LATENCY_SHAPES = [(rows, cols) for rows in (8, 24, 40, 56) for cols in (1536, 2560, 3584, 4608)]
failures = []
lines = []


def say(text):
    print(text, flush=True)
    lines.append(text)


def fail(text):
    failures.append(text)
    say("FAIL " + text)


def redis_ping(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(2)
        s.connect(path)
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False
    finally:
        s.close()


class Daemon:
    def __init__(self, tuned, tmp, out, name, remote):
        self.name = name
        self.sock = os.path.join(tmp, name + ".sock")
        self.logpath = os.path.join(out, f"daemon-{name}.log")
        self.logf = open(self.logpath, "w")
        self.p = subprocess.Popen([tuned, "serve", "--socket", self.sock, "--db",
                                   os.path.join(tmp, name + ".db"), "--remote", remote],
                                  stdout=self.logf, stderr=self.logf)

    def ready(self):
        def ping():
            if self.p.poll() is not None:
                return True
            try:
                return self.call({"op": "ping"}, 5).get("ok")
            except OSError:
                return False
        wait_for(ping, 60, 0.1)
        return self.p.poll() is None

    def call(self, obj, timeout=30):
        return call_once(self.sock, obj, timeout)

    def tunes(self, rows, cols):
        self.logf.flush()
        with open(self.logpath) as f:
            return sum(1 for line in f if f": tuning {rows}x{cols} " in line)

    def stop(self):
        stop_process(self.p)
        self.logf.close()


def get(d, rows, cols):
    return d.call({"op": "get", "rows": rows, "cols": cols, "dtype": "fp16"})


def case_flight(a, b):
    rows, cols = FLIGHT_SHAPE
    t0 = time.time()
    replies = call_all_at_once((a, b), {"op": "tune", "rows": rows, "cols": cols,
                                        "dtype": "fp16", "budget": 60, "time_s": 20}, 12)
    if len(replies) != 12 or not all(r and r.get("ok") for r in replies):
        refused = [r for r in replies if not (r or {}).get("ok")]
        fail(f"flight: {len(refused)} of {len(replies)} tunes not accepted: {refused[:3]}")
        return
    both = wait_for(lambda: all(get(d, rows, cols).get("source") == "exact" for d in (a, b)), 120,
                    0.2)
    took = time.time() - t0
    ga, gb = get(a, rows, cols), get(b, rows, cols)
    tunes = [a.tunes(rows, cols), b.tunes(rows, cols)]
    if not both:
        fail(f"flight: not both exact after {took:.1f} s: {ga.get('source')}, {gb.get('source')}")
    elif sum(tunes) != 1:
        fail(f"flight: {sum(tunes)} tunes ran (A {tunes[0]}, B {tunes[1]}), not 1")
    elif ga.get("config") != gb.get("config"):
        fail(f"flight: A serves {ga.get('config')}, B {gb.get('config')}")
    else:
        say(f"flight: 12 tune requests of {rows}x{cols} fp16 over A and B ran one tune "
            f"(A {tunes[0]}, B {tunes[1]}); both exact with {ga['config']} "
            f"({ga.get('median_us', 0):.2f} µs) after {took:.1f} s")


def timed_get(c, rows, cols):
    t = time.perf_counter_ns()
    r = c.call({"op": "get", "rows": rows, "cols": cols, "dtype": "fp16"}, 30)
    return (time.perf_counter_ns() - t) / 1000.0, r


def case_latency(a, b):
    jobs = [a.call({"op": "tune", "rows": r, "cols": c, "dtype": "fp16", "budget": 24,
                    "time_s": 4}) for r, c in LATENCY_SHAPES]
    if not all(j.get("ok") for j in jobs):
        fail(f"latency: tunes not accepted: {[j for j in jobs if not j.get('ok')][:2]}")
        return
    done = wait_for(lambda: all(get(a, r, c).get("source") == "exact" for r, c in LATENCY_SHAPES),
                    300, 0.5)
    if not done:
        fail("latency: A did not finish its tunes")
        return
    c = Client(b.sock)
    first, second, bad = [], [], []
    try:
        for rows, cols in LATENCY_SHAPES:
            us1, r1 = timed_get(c, rows, cols)
            us2, r2 = timed_get(c, rows, cols)
            if r1.get("from") != "remote" or r1.get("source") != "exact":
                bad.append(f"{rows}x{cols} first: {r1.get('source')} from {r1.get('from')}")
            if r2.get("from") is not None or r2.get("source") != "exact":
                bad.append(f"{rows}x{cols} second: {r2.get('source')} from {r2.get('from')}")
            first.append(us1)
            second.append(us2)
    finally:
        c.close()
    if bad:
        fail("latency: " + "; ".join(bad[:4]))
        return

    def row(name, v):
        v = sorted(v)
        return (f"| {name} | {len(v)} | {statistics.median(v):.0f} | "
                f"{v[int(0.9 * (len(v) - 1))]:.0f} | {v[-1]:.0f} |")
    say("")
    say("| get on B | n | p50 µs | p90 µs | max µs |")
    say("|---|---|---|---|---|")
    say(row("read through from Redis (first)", first))
    say(row("local hit (second)", second))


def main():
    if len(sys.argv) != 3:
        print("usage: bench/fleet-gpu.py TUNED OUT", file=sys.stderr)
        return 2
    tuned, out = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.makedirs(out, exist_ok=True)
    if shutil.which("redis-server") is None:
        print("fleet-gpu: needs redis-server on PATH (source tools/device-env.sh)")
        return 1
    tmp = tempfile.mkdtemp(prefix="tuned-fleet-gpu-")
    redis_sock = os.path.join(tmp, "redis.sock")
    redis_log = open(os.path.join(out, "redis.log"), "w")
    redis = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", redis_sock,
                              "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
                              "--dir", tmp], stdout=redis_log, stderr=redis_log)
    daemons = []
    try:
        if not wait_for(lambda: redis_ping(redis_sock), 10):
            fail("redis-server did not start")
            return 1
        remote = "unix://" + redis_sock
        daemons = [Daemon(tuned, tmp, out, n, remote) for n in ("A", "B")]
        for d in daemons:
            if not d.ready():
                fail(f"daemon {d.name} did not start (see daemon-{d.name}.log)")
                return 1
        gpu = daemons[0].call({"op": "stats"})["gpus"][0]
        say("# Two daemons on one GPU sharing a Redis")
        say("")
        say(f"- date: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
        say(f"- GPU: {gpu.get('name')}, hardware class {gpu.get('hwclass')}, "
            f"toolchain {gpu.get('toolchain')}")
        version = subprocess.run(["redis-server", "--version"], capture_output=True,
                                 text=True).stdout.split()[2].removeprefix("v=")
        say(f"- command: bench/fleet-gpu.py build/tuned OUT (redis-server {version} on a "
            "Unix socket)")
        say("")
        case_flight(*daemons)
        case_latency(*daemons)
    finally:
        for d in daemons:
            d.stop()
        redis.terminate()
        redis.wait(30)
        redis_log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    say("")
    say(f"fleet-gpu: {len(failures)} failure(s)")
    with open(os.path.join(out, "fleet-gpu.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
