"""bench/cross_entropy_bench.py: cross-entropy over the vocabulary, forward +
backward, as a user calls it, against the anchors in the same run.

For each shape: the device-to-device copy of the logits (the fused kind's
floor: one read of the logits and one write of the gradient), tuned's
cross-entropy fused (tuned.cross_entropy, mean: the gradient written in the
forward, into a new buffer and in place), split (split=True, mean: the loss
kernel reads once and saves the lse, the backward kernel reads once and
writes once, PyTorch's semantics for any upstream gradient; the same call
as QuACK's) and none (reduction none, then the mean in torch: split with
the caller's own reduction), torch's F.cross_entropy, torch.compile of it (one
compiled function for every shape: it recompiles once with dynamic shapes),
Liger's fused cross-entropy and QuACK's (each when it imports). The
gradient is taken with torch.autograd.grad(loss, logits), as a model's
logits (an intermediate) receive it: no AccumulateGrad copy into a leaf's
.grad. Each time is the median of CUDA-event timings after warm-up with L2
flushed between runs, taken twice: as called (the host's time to issue the
work included, which sets the short rows' figures) and with the host ahead
(cuda_timing.timed's host_ahead: the GPU's time for the work, as in a
model's step, where the host runs ahead); each method's extra peak memory
is what it allocates beyond the logits and labels
(torch.cuda.max_memory_allocated), the gradient included unless it is
written over the logits. Every method's
loss is compared with a float64 reference first. Two short tables come last.

    python3 bench/cross_entropy_bench.py [--shapes 8192x128256:bf16,...] [--reps N]

Needs a CUDA GPU, torch, and the tuned package on PYTHONPATH with libtuned
(TUNED_LIBRARY) and a store holding the shapes' tuned records (TUNED_DB)."""

import argparse
import sys

import torch
import torch.nn.functional as F

import tuned
from cuda_timing import peak_extra, timed

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
ROWS = ["4096x32000:bf16", "8192x50257:bf16", "8192x128256:bf16", "16384x151936:bf16",
        "4096x262144:bf16", "512x128256:bf16", "8192x128256:fp32"]
METHODS = ["tuned", "tuned_inplace", "tuned_split", "tuned_none", "torch", "compile", "liger",
           "quack"]


def quack_call(quack_ce, x, t, own_mean):
    """QuACK's mean. Its own (reduction "mean": the rows' sum over the
    count) hands its backward the sum's expanded upstream gradient, whose
    zero stride quack-kernels 0.2.4 refuses (0.6.5 took it; this package
    index's nvidia-cutlass-dsl 4.6-4.8 wheels hold no cutlass Python
    package, so 0.2.4 on 4.3.5 is the QuACK that runs here): without
    own_mean, the rows' losses times the count's inverse, then summed, one
    torch operation more than its own mean."""
    if own_mean:
        return quack_ce(x, t)
    rows = quack_ce(x, t, reduction="none")
    return (rows * (t != -100).sum().float().reciprocal()).sum()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=",".join(ROWS))
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--compile-shapes", type=int, default=99,
                    help="torch.compile on the first N shapes")
    args = ap.parse_args()
    try:
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
    except Exception as exc:  # noqa: BLE001 - an anchor that does not import is reported
        print(f"liger: not available ({type(exc).__name__}: {exc})")
        LigerCrossEntropyFunction = None
    try:
        import quack
        from quack.cross_entropy import cross_entropy as quack_ce
        version = tuple(int(v) for v in quack.__version__.split(".")[:2])
        quack_own_mean = version >= (0, 3)
        print(f"quack {quack.__version__}: "
              f"{'its own mean' if quack_own_mean else 'reduction none, times 1/count, summed'}")
    except Exception as exc:  # noqa: BLE001
        print(f"quack: not available ({type(exc).__name__}: {exc})")
        quack_ce = None
    cf = torch.compile(F.cross_entropy)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    rows_out = []
    for n, spec in enumerate(args.shapes.split(",")):
        shape, dt = spec.split(":")
        rows, cols = (int(v) for v in shape.split("x"))
        dtype = DT[dt]
        g = torch.Generator(device="cuda").manual_seed(1)
        x0 = (torch.randn(rows, cols, device="cuda", generator=g) * 3).to(dtype)
        t = torch.randint(0, cols, (rows,), device="cuda", generator=g)
        t[::13] = -100
        ref = F.cross_entropy(x0.double(), t).item()
        work = x0.clone()
        res = {"shape": shape, "dtype": dt}

        def copy():
            work.copy_(x0)
        res["copy"] = timed(copy, flush, args.reps)
        res["copy_gpu"] = timed(copy, flush, args.reps, host_ahead=True)

        def method(name, fwd_bwd):
            # fwd_bwd(x) -> loss; x is a fresh leaf, its gradient taken
            # as an intermediate's (autograd.grad: no copy into .grad)
            def run():
                x = work.detach().requires_grad_()
                loss = fwd_bwd(x)
                torch.autograd.grad(loss, x)
                return loss
            try:
                work.copy_(x0)
                loss = run().item()
                err = abs(loss - ref) / abs(ref)
                res[name] = (timed(run, flush, args.reps), peak_extra(run) / 1e9, err,
                             timed(run, flush, args.reps, host_ahead=True))
            except Exception as exc:  # noqa: BLE001 - reported in the table
                res[name] = (float("nan"), float("nan"), f"{type(exc).__name__}: {exc}"[:60],
                             float("nan"))

        method("tuned", lambda x: tuned.cross_entropy(x, t))
        # in place needs logits that are not a leaf (a model's are an
        # intermediate): a view stands for them
        method("tuned_inplace", lambda x: tuned.cross_entropy(x.view(x.shape), t,
                                                              inplace_backward=True))
        method("tuned_split", lambda x: tuned.cross_entropy(x, t, split=True))
        n_valid = (t != -100).sum()
        method("tuned_none", lambda x: tuned.cross_entropy(x, t, reduction="none").sum() / n_valid)
        method("torch", lambda x: F.cross_entropy(x, t))
        if n < args.compile_shapes:
            method("compile", lambda x: cf(x, t))
        if LigerCrossEntropyFunction is not None:
            method("liger", lambda x: LigerCrossEntropyFunction.apply(x, t, None)[0])
        if quack_ce is not None:
            method("quack", lambda x: quack_call(quack_ce, x, t, quack_own_mean))
        rows_out.append(res)
        del x0, work
        torch.cuda.empty_cache()
        print(res, flush=True)
    names = METHODS
    print("\nGPU time (host ahead: the work queued behind a spin kernel), us; fused/anch:"
          " tuned's faster fused call over the fastest anchor (torch, compile, liger, quack);"
          " split/q,c: the split call over the faster of QuACK and torch.compile:")
    print(f"{'shape':12} {'dt':4} {'copy':>8} " + " ".join(f"{m[:11]:>11}" for m in names) +
          f" {'fused/anch':>10} {'split/q,c':>9}")
    nan = float("nan")
    for r in rows_out:
        gpu = {m: r[m][3] for m in names if m in r and r[m][3] == r[m][3]}
        anchors = [v for m, v in gpu.items() if not m.startswith("tuned")]
        fused = min((gpu[m] for m in ("tuned", "tuned_inplace") if m in gpu), default=nan)
        split_vs = [gpu[m] for m in ("quack", "compile") if m in gpu]
        fused_ratio = fused / min(anchors) if anchors else nan
        split_ratio = gpu.get("tuned_split", nan) / min(split_vs) if split_vs else nan
        print(f"{r['shape']:12} {r['dtype']:4} {r['copy_gpu']:8.1f} " +
              " ".join(f"{gpu[m]:11.1f}" if m in gpu else f"{'-':>11}" for m in names) +
              f" {fused_ratio:10.3f} {split_ratio:9.3f}")
    print("\nAs called (host time included: the timing the issue's tables use), us and"
          " extra peak GB; split/q,c as above, as called:")
    print(f"{'shape':12} {'dt':4} {'copy_us':>8} " +
          " ".join(f"{m[:8] + '_us':>11} {m[:6] + '_GB':>9}" for m in names) +
          f" {'split/q,c':>9}  (loss rel. err vs f64)")
    for r in rows_out:
        cells = []
        for m in names:
            v = r.get(m)
            cells.append(f"{'-':>11} {'-':>9}" if v is None else f"{v[0]:11.1f} {v[1]:9.2f}")
        called = {m: r[m][0] for m in names if m in r and r[m][0] == r[m][0]}
        split_vs = [called[m] for m in ("quack", "compile") if m in called]
        cells.append(f"{called.get('tuned_split', nan) / min(split_vs):9.3f}" if split_vs
                     else f"{'-':>9}")
        errs = " ".join(f"{m}={r[m][2]:.1e}" if isinstance(r.get(m, (0, 0, ''))[2], float) else
                        f"{m}={r.get(m, (0, 0, '-'))[2]}" for m in names if m in r)
        print(f"{r['shape']:12} {r['dtype']:4} {r['copy']:8.1f} " + " ".join(cells) + "  " + errs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
