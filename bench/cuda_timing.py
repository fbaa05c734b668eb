"""bench/cuda_timing.py: the Python benchmarks' timing rule in one place.

timed(fn, flush, reps): the median of reps CUDA-event timings of fn (us),
after warm calls, the L2 flushed before each (flush: a device buffer
larger than the L2, zeroed). With host_ahead, a spin kernel of about 2 ms
is queued after the flush and before the start event, so the host has
issued all of fn's work before the GPU reaches it: the time is then the
GPU's for that work, as in a model's step where the host runs ahead of
the GPU, not the host's time to issue it (which, for work of under
about 200 us through Python, is what the plain timing measures). peak_extra(fn): the bytes fn allocates at
its peak beyond what was allocated before it (torch's caching allocator's
count). host_us(fn, calls, warm): an eager call's host time, calls back to
back with the GPU never waited on. timed_interleaved(fns, flush, reps):
timed for several methods, their reps interleaved in a turning order.

A flush is the zeroed buffer, or a callable that flushes. clean_flush(buf,
other) zeroes buf and then reads other (each larger than the L2): the
zeroing leaves the L2 full of dirty lines, which the next kernel's misses
write back to memory while it runs, so a kernel timed after it pays for
the flush's writes too; after the read the lines are clean and the kernel
pays for its own bytes only (as Nsight Compute's cache control, which
writes the L2 back before a kernel, does)."""

import statistics
import time

import torch


# about 2 ms at the H200's 1.98 GHz: longer than any method's host time
HOST_AHEAD_CYCLES = 4_000_000


def flush_l2(flush):
    if callable(flush):
        flush()
    else:
        flush.zero_()


def clean_flush(buf, other):
    """A flush that leaves no dirty line in the L2 (see the opening)."""
    words = other.view(torch.int32)

    def run():
        buf.zero_()
        torch.amax(words)
    return run


def time_once(fn, flush, host_ahead=False):
    """One timing of fn (us): the L2 flushed, then CUDA events around it."""
    flush_l2(flush)
    if host_ahead:
        torch.cuda._sleep(HOST_AHEAD_CYCLES)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0


def timed(fn, flush, reps, warm=3, host_ahead=False):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    return statistics.median(time_once(fn, flush, host_ahead) for _ in range(reps))


def timed_interleaved(fns, flush, reps, warm=3, flushes=None):
    """timed's rule for several methods of one row at once ({name: fn}):
    each rep times every method once, the L2 flushed before each, in an
    order that turns by one each rep, so that a drift of the GPU over the
    run (its clocks after idle, its power) falls on every method alike, not
    on whichever came first. flushes: {name: flush} for the names timed
    after another flush than flush. {name: median us}."""
    flushes = flushes or {}
    names = list(fns)
    for fn in fns.values():
        for _ in range(warm):
            fn()
    torch.cuda.synchronize()
    times = {n: [] for n in names}
    for rep in range(reps):
        for j in range(len(names)):
            n = names[(rep + j) % len(names)]
            times[n].append(time_once(fns[n], flushes.get(n, flush)))
    return {n: statistics.median(t) for n, t in times.items()}


def peak_extra(fn):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def host_us(fn, calls, warm=0):
    """The host's microseconds a call of fn: warm calls, then calls back to
    back, the GPU never waited on (where the GPU's time is less, as at a
    decode step, this is what a call costs)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t = (time.perf_counter() - t0) * 1e6 / calls
    torch.cuda.synchronize()
    return t
