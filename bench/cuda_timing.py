"""bench/cuda_timing.py: the Python benchmarks' timing rule in one place.

timed(fn, flush, reps): the median of reps CUDA-event timings of fn (us),
after warm calls, the L2 flushed before each (flush: a device buffer
larger than the L2, zeroed). peak_extra(fn): the bytes fn allocates at
its peak beyond what was allocated before it (torch's caching allocator's
count)."""

import statistics

import torch


def timed(fn, flush, reps, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        flush.zero_()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def peak_extra(fn):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base
