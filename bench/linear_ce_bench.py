"""bench/linear_ce_bench.py: the loss block of a language model (final
hidden states through the output head into cross-entropy), forward +
backward, against the anchors in the same run.

Shape: tokens x hidden @ (vocabulary x hidden).T, bf16 (default the
8B-scale block: 8192 tokens, hidden 4096, vocabulary 128256). Methods:
  torch          F.cross_entropy(hidden @ W.T) in fp32, as transformers'
                 own loss does (logits upcast)
  tuned_ce       tuned.cross_entropy(hidden @ W.T, in place): the logits held
  tuned_linear   tuned.linear_cross_entropy as a user calls it: the chunk
                 the store holds for the key (the kind linear_cross_entropy,
                 tuned by `tuned tune`), else the size rule; printed
  tuned_linear_BMiB  the same within a budget of B MiB of chunk logits
                 (--budgets B,...; 64): the store's winner for that key,
                 whole rows or vocabulary blocks ("chunk1024.v5"); printed
  tuned_linear_64MiB_vS  a budget of 64 MiB with vocab_splits S (--splits):
                 each chunk's logits in S blocks of the vocabulary, so that
                 a chunk holds S times the rows in the same memory
  tuned_linear_N the same with chunks of N rows given (several N: what
                 the tuner chooses among, measured here by hand)
  tuned_linear_R/S  chunks of R rows, each in S vocabulary blocks (--blocks
                 R/S,...): R x V/S logits held, d weight summed over R rows
  liger_flce     Liger's LigerFusedLinearCrossEntropyFunction
  cce            Apple's Cut Cross-Entropy (cut_cross_entropy)
Each: the median time (us) of CUDA events after warm-up with L2 flushed,
the host's time to issue the same work (host_us: near the first, the
method waits on Python and launches),
the extra peak memory beyond the inputs (GB), and the loss against a
float64-accumulated reference (the logits in fp32 from the same bf16
GEMM). A short table comes last.

    python3 bench/linear_ce_bench.py [--tokens 8192 --hidden 4096 --vocab 128256] [--reps 10]
                                     [--chunks N,...] [--splits S,...] [--blocks R/S,...]
                                     [--budgets MiB,...]

Needs a CUDA GPU, torch, tuned on PYTHONPATH (TUNED_LIBRARY, and TUNED_DB
with cross_entropy's record for the chunk shapes, else the default
config); liger_kernel and cut_cross_entropy for their columns."""

import argparse
import importlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import tuned
from cuda_timing import peak_extra, timed


def host_us(fn, reps=5):
    """The host's time to issue fn's work (us, median), the GPU idle at
    each start: where it nears the GPU's time, the method is bound by the
    host (Python and launches), not by its kernels."""
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--chunks", default="256,512,1024,4096")
    ap.add_argument("--splits", default="2,4")
    ap.add_argument("--blocks", default="")
    ap.add_argument("--budgets", default="64")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    n, h, v = args.tokens, args.hidden, args.vocab
    g = torch.Generator(device="cuda").manual_seed(0)
    x0 = (torch.randn(n, h, device="cuda", generator=g)).to(torch.bfloat16)
    w0 = (torch.randn(v, h, device="cuda", generator=g) * h ** -0.5).to(torch.bfloat16)
    y = torch.randint(0, v, (n,), device="cuda", generator=g)
    y[::13] = -100
    with torch.no_grad():
        ref = F.cross_entropy((x0 @ w0.t()).double(), y).item()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    methods = {
        "torch": lambda x, w: F.cross_entropy((x @ w.t()).float(), y),
        "tuned_ce": lambda x, w: tuned.cross_entropy(x @ w.t(), y, inplace_backward=True),
    }
    lce_module = importlib.import_module("tuned.linear_cross_entropy")  # the module, not its function
    auto = lce_module._tuned_chunk(x0, w0, 256 << 20)
    print(f"tuned_linear: (rows, blocks) {auto} from the store"
          if auto is not None else "tuned_linear: no stored chunk (the size rule)")
    methods["tuned_linear"] = lambda x, w: tuned.linear_cross_entropy(x, w, y)
    # budgets of chunk logits (64 MiB: about Liger's chunk's memory at the
    # 8B shape, 256 rows), at the chunk the store holds for each
    for mib in (int(b) for b in args.budgets.split(",") if b):
        got = lce_module._tuned_chunk(x0, w0, mib << 20)
        print(f"tuned_linear_{mib}MiB: (rows, blocks) {got} from the store"
              if got is not None else f"tuned_linear_{mib}MiB: no stored chunk (the size rule)")
        methods[f"tuned_linear_{mib}MiB"] = (
            lambda x, w, mib=mib: tuned.linear_cross_entropy(x, w, y, max_chunk_bytes=mib << 20))
    for sp in (int(s) for s in args.splits.split(",") if s):
        methods[f"tuned_linear_64MiB_v{sp}"] = (
            lambda x, w, sp=sp: tuned.linear_cross_entropy(x, w, y, max_chunk_bytes=64 << 20,
                                                           vocab_splits=sp))
    for c in (int(s) for s in args.chunks.split(",") if s):
        methods[f"tuned_linear_{c}"] = (
            lambda x, w, c=c: tuned.linear_cross_entropy(x, w, y, chunk_rows=c))
    for r, sp in (tuple(int(v) for v in b.split("/")) for b in args.blocks.split(",") if b):
        methods[f"tuned_linear_{r}/{sp}"] = (
            lambda x, w, r=r, sp=sp: tuned.linear_cross_entropy(x, w, y, chunk_rows=r,
                                                                vocab_splits=sp))
    try:
        from liger_kernel.ops.fused_linear_cross_entropy import (
            LigerFusedLinearCrossEntropyFunction as Flce)
        methods["liger_flce"] = lambda x, w: Flce.apply(x, w, y)[0]
    except Exception as exc:  # noqa: BLE001 - an anchor that does not import is reported
        print(f"liger: not available ({type(exc).__name__}: {exc})")
    try:
        from cut_cross_entropy import linear_cross_entropy as cce
        methods["cce"] = lambda x, w: cce(x, w, y)
    except Exception as exc:  # noqa: BLE001
        print(f"cce: not available ({type(exc).__name__}: {exc})")
    rows = []
    for name, fn in methods.items():
        def run():
            x = x0.detach().requires_grad_()
            w = w0.detach().requires_grad_()
            loss = fn(x, w)
            torch.autograd.grad(loss, (x, w))
            return loss
        try:
            err = abs(run().item() - ref) / abs(ref)
            rows.append((name, timed(run, flush, args.reps), host_us(run), peak_extra(run) / 1e9,
                         f"{err:.1e}"))
        except Exception as exc:  # noqa: BLE001 - reported in the table
            rows.append((name, float("nan"), float("nan"), float("nan"),
                         f"{type(exc).__name__}: {exc}"[:70]))
        print(rows[-1], flush=True)
        torch.cuda.empty_cache()
    print(f"\nloss block {n} tokens x hidden {h} x vocabulary {v}, bf16, forward + backward")
    print(f"{'method':18} {'time_us':>10} {'host_us':>10} {'extra_GB':>9}  loss rel. err")
    for name, t, host, gb, err in rows:
        print(f"{name:18} {t:10.1f} {host:10.1f} {gb:9.3f}  {err}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
