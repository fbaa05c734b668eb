"""bench/ce_overhead.py: where the host time of tuned.cross_entropy goes.

At a shape whose kernels take little GPU time (4096x32000 bf16), the
host's time to issue one forward + backward (torch.autograd.grad of the
mean loss) decides the call's time. Prints the host microseconds an
iteration for tuned (fused, in place, split), torch and Liger (issued
back to back, no synchronisation: the GPU work is shorter than the
host's), then cProfile's top functions (by own time) over the fused
iterations.

    python3 bench/ce_overhead.py [--iters 300]

Needs what bench/cross_entropy_bench.py needs."""

import argparse
import cProfile
import pstats
import sys
import time

import torch
import torch.nn.functional as F

import tuned


def host_us(fn, iters):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    host = (time.perf_counter() - t) / iters * 1e6
    torch.cuda.synchronize()
    return host


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--shape", default="4096x32000")
    args = ap.parse_args()
    rows, cols = (int(v) for v in args.shape.split("x"))
    x0 = (torch.randn(rows, cols, device="cuda") * 3).to(torch.bfloat16)
    t = torch.randint(0, cols, (rows,), device="cuda")

    def step(f):
        def run():
            x = x0.detach().requires_grad_()
            torch.autograd.grad(f(x), x)
        return run

    methods = {
        "tuned": step(lambda x: tuned.cross_entropy(x, t)),
        "tuned_inplace": step(lambda x: tuned.cross_entropy(x.view(x.shape), t,
                                                            inplace_backward=True)),
        "tuned_split": step(lambda x: tuned.cross_entropy(x, t, reduction="none").mean()),
        "torch": step(lambda x: F.cross_entropy(x, t)),
    }
    try:
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
        methods["liger"] = step(lambda x: LigerCrossEntropyFunction.apply(x, t, None)[0])
    except Exception as exc:  # noqa: BLE001
        print(f"liger: not available ({exc})")
    for name, fn in methods.items():
        print(f"{name:14} host {host_us(fn, args.iters):8.1f} us an iteration", flush=True)
    prof = cProfile.Profile()
    fn = methods["tuned"]
    prof.enable()
    for _ in range(args.iters):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    pstats.Stats(prof).sort_stats("cumtime").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
