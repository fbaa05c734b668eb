"""bench/ce_overhead.py: where the host time of tuned.cross_entropy goes.

At a shape whose kernels take little GPU time (4096x32000 bf16), the
host's time to issue one forward + backward (torch.autograd.grad of the
mean loss) decides the call's time. Prints the host microseconds an
iteration for tuned (fused, in place, split, none), torch, Liger and
QuACK (issued back to back, no synchronisation: the GPU work is shorter
than the host's), then cProfile's top functions (by own time) over the fused
and the split (the benchmark's call) iterations.

    python3 bench/ce_overhead.py [--iters 300] [--shapes 4096x32000,512x128256]

Needs what bench/cross_entropy_bench.py needs."""

import argparse
import cProfile
import pstats
import sys

import torch
import torch.nn.functional as F

import tuned
from cuda_timing import host_us


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--shapes", default="4096x32000,512x128256")
    args = ap.parse_args()
    for n, shape in enumerate(args.shapes.split(",")):
        rows, cols = (int(v) for v in shape.split("x"))
        print(f"== {shape} bf16")
        one_shape(rows, cols, args, profile=n == 0)
    return 0


def c_call_us(x, t, iters):
    """Host microseconds of libtuned's tuned_cross_entropy alone (ctypes,
    prebuilt arguments, reduction sum): the C side's share."""
    import ctypes

    from tuned import _lib
    from tuned.torch_ops import _DTYPES, _library, _raw_stream
    lib, h = _library()
    rows, cols = x.shape
    loss = torch.empty(rows, dtype=torch.float32, device="cuda")
    lse = torch.empty_like(loss)
    grad = torch.empty_like(x)
    one = torch.ones(1, dtype=torch.float32, device="cuda")
    o = _lib.CeOptions()
    lib.tuned_ce_options_init(ctypes.byref(o))
    o.reduction = _lib.REDUCTION_SUM
    o.grad_output = one.data_ptr()
    stream = _raw_stream(x.get_device()) or None
    args = (h, x.data_ptr(), t.data_ptr(), grad.data_ptr(), loss.data_ptr(), lse.data_ptr(),
            rows, cols, cols, _DTYPES[x.dtype], ctypes.byref(o), stream)

    def call():
        rc = lib.tuned_cross_entropy(*args)
        if rc != 0:
            raise RuntimeError(f"tuned_cross_entropy: {rc}")
    return host_us(call, iters, warm=20)


def one_shape(rows, cols, args, profile):
    x0 = (torch.randn(rows, cols, device="cuda") * 3).to(torch.bfloat16)
    t = torch.randint(0, cols, (rows,), device="cuda")
    n_valid = (t != -100).sum()

    def step(f):
        def run():
            x = x0.detach().requires_grad_()
            torch.autograd.grad(f(x), x)
        return run

    methods = {
        "tuned": step(lambda x: tuned.cross_entropy(x, t)),
        "tuned_inplace": step(lambda x: tuned.cross_entropy(x.view(x.shape), t,
                                                            inplace_backward=True)),
        # the benchmark's split call (as QuACK's: mean)
        "tuned_split": step(lambda x: tuned.cross_entropy(x, t, split=True)),
        # reduction none and the caller's own mean: the sum over a count on
        # the device (the benchmark's tuned_none)
        "tuned_none": step(lambda x: tuned.cross_entropy(x, t, reduction="none").sum()
                           / n_valid),
        "torch": step(lambda x: F.cross_entropy(x, t)),
    }
    try:
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
        methods["liger"] = step(lambda x: LigerCrossEntropyFunction.apply(x, t, None)[0])
    except Exception as exc:  # noqa: BLE001
        print(f"liger: not available ({exc})")
    try:
        import quack
        from cross_entropy_bench import quack_call
        from quack.cross_entropy import cross_entropy as quack_ce
        own = tuple(int(v) for v in quack.__version__.split(".")[:2]) >= (0, 3)
        methods["quack"] = step(lambda x: quack_call(quack_ce, x, t, own))
    except Exception as exc:  # noqa: BLE001
        print(f"quack: not available ({type(exc).__name__}: {exc})")
    for name, fn in methods.items():
        print(f"{name:14} host {host_us(fn, args.iters, warm=20):8.1f} us an iteration", flush=True)
    fwd = host_us(lambda: tuned.cross_entropy(x0.detach().requires_grad_(), t), args.iters,
                  warm=20)
    print(f"{'tuned forward':14} host {fwd:8.1f} us an iteration")
    print(f"{'C call':14} host {c_call_us(x0, t, args.iters):8.1f} us an iteration", flush=True)
    if not profile:
        return
    for name in ("tuned", "tuned_split"):
        print(f"== cProfile of {name}")
        prof = cProfile.Profile()
        fn = methods[name]
        prof.enable()
        for _ in range(args.iters):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        pstats.Stats(prof).sort_stats("cumtime").print_stats(25)


if __name__ == "__main__":
    sys.exit(main())
