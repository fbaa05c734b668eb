#!/usr/bin/env python3
"""bench/gate_check.py: on the GPU machine, checks bench_torch.time_us's host
gate. A 2 MiB device copy is timed four ways: plain, with a 300 us host
stall inside the call (gated: the copy's time; ungated: the stall's), and
with a call that waits for the GPU itself (the gate's watchdog must open it
and time_us fall back to the ungated timing, within seconds). Prints a
table; exits 1 if the gate did not hide the stall, the plain timings differ
by more than 10%, or the waiting call was not caught."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch as bt  # noqa: E402


def main():
    import torch

    x = torch.randn(1 << 19, device="cuda")
    y = torch.empty_like(x)
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or (64 << 20)
    flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")

    def stall(us):
        end = time.perf_counter() + us * 1e-6
        while time.perf_counter() < end:
            pass

    def plain():
        y.copy_(x)

    def stalled():
        stall(300)
        y.copy_(x)

    def waits():
        y.copy_(x)
        torch.cuda.synchronize()

    rows = []
    for name, fn, gated in (("plain, ungated", plain, False), ("plain, gated", plain, True),
                            ("300 us host stall, ungated", stalled, False),
                            ("300 us host stall, gated", stalled, True)):
        us, reps = bt.time_us(fn, flush, gated=gated)
        rows.append((name, us, reps))
    forced = bt.host_gate().forced
    t0 = time.perf_counter()
    us, reps = bt.time_us(waits, flush, gated=True)
    took = time.perf_counter() - t0
    rows.append(("call that waits for the GPU, gated", us, reps))
    print(f"# {torch.cuda.get_device_name(0)}: a 2 MiB copy (y.copy_(x)), median us")
    print("| call | us | reps |\n|---|---|---|")
    for name, t, n in rows:
        print(f"| {name} | {t:.2f} | {n} |")
    caught = bt.host_gate().forced - forced
    print(f"watchdog openings for the waiting call: {caught}; its time_us took {took:.1f} s")
    plain_u, plain_g, stall_u, stall_g = (r[1] for r in rows[:4])
    bad = []
    if abs(plain_g - plain_u) > 0.1 * plain_u:
        bad.append("gated and ungated plain copies differ by more than 10%")
    if stall_g > 1.5 * plain_g:
        bad.append("the gate did not hide the host stall")
    if stall_u < 250:
        bad.append("the ungated stall was not seen (the check is not checking)")
    if caught < 1 or took > 10:
        bad.append("the waiting call was not caught by the watchdog")
    for b in bad:
        print("FAIL:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
