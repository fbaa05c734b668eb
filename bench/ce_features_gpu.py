"""bench/ce_features_gpu.py: the fused cross-entropy's in-kernel softcap
and argmax on the GPU, 8192 x 128256 bf16 (an LM head's logits), timed
and checked.

Times (median of CUDA events, L2 flushed before each; bench/cuda_timing.py):
  copy             a device-to-device copy of the logits (the floor: read
                   them once, write the gradient once)
  fused            tuned_cross_entropy, loss + gradient, one call
  fused+softcap    the same with the cap in the kernel (T_CE_SOFTCAP)
  fused+argmax     the same writing each row's argmax (T_CE_ARGMAX)
  fused+both
  torch softcap    softcap * tanh(x / softcap), then F.cross_entropy,
                   forward and backward (what tuned.cross_entropy did
                   before the cap was in the kernel, and what a model does)
  tuned softcap    tuned.cross_entropy(x, y, softcap=30), forward and
                   backward (the kernel's cap, the backward's rescale)
Checks, before any timing, on ROWS_CHECKED rows: the kernel's loss
(relative), gradient (against the dtype's rounding) and argmax against a
float64 torch reference of the same math (cap with -inf kept); a row with
masked (-inf) classes and a row with a NaN among them.

Run on the GPU machine from the repository root, after a build:
    TUNED_LIBRARY=$PWD/build/libtuned.so.0 PYTHONPATH=bindings/python \\
        python3 bench/ce_features_gpu.py [--rows 8192] [--cols 128256] [--reps 20]
Prints one line per measurement and a final JSON line."""

import argparse
import json
import math
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, "bench")
from cuda_timing import timed  # noqa: E402

import tuned  # noqa: E402
from tuned import _ce_direct  # noqa: E402

SOFTCAP = 30.0
ROWS_CHECKED = 8


def reference(x, y, softcap):
    """float64 (loss, grad, argmax) per row, as the kernel defines them."""
    xd = x.double()
    if softcap:
        c = torch.where(xd == -math.inf, xd, softcap * torch.tanh(xd / softcap))
    else:
        c = xd
    cd = c.detach().requires_grad_()
    loss = F.cross_entropy(cd, y, reduction="none")
    loss.sum().backward()
    g = cd.grad
    if softcap:
        t = torch.tanh(xd / softcap)
        g = g * torch.where(xd == -math.inf, torch.zeros_like(t), 1.0 - t * t)
    return loss.detach(), g, c.argmax(-1)


def check(x, y, softcap):
    rows = ROWS_CHECKED
    xs = x[:rows].clone()
    xs[1, ::7] = -math.inf  # masked classes: no mass through the cap
    xs[2, 100] = math.nan   # NaN: loss NaN, argmax its column
    ys = y[:rows].clone()
    ys[1] = 3 * 7 + 1 if ys[1] % 7 == 0 else ys[1]
    am = torch.empty(rows, dtype=torch.int64, device=x.device)
    r = _ce_direct.fused(xs, ys, 1.0, 0.0, 0.0, -100, False, None, False,
                         softcap or 0.0, am)
    if r is None:
        return [f"the fused call did not run (softcap {softcap})"]
    grad = r[2]
    # the per-row loss: the loss kernel (the same arithmetic, one read)
    lr = _ce_direct.loss(xs, ys, 1.0, 0.0, 0.0, -100, softcap or 0.0)
    loss = lr[0]
    want_loss, want_grad, want_am = reference(xs, ys, softcap)
    bad = []
    ok = torch.isfinite(want_loss)
    rel = ((loss.double() - want_loss).abs() / want_loss.abs().clamp_min(1e-30))[ok]
    if rel.numel() and rel.max() > 1e-5:
        bad.append(f"softcap {softcap}: loss off by {rel.max():.2e} relative")
    if not torch.equal(torch.isnan(loss[~ok]), torch.isnan(want_loss[~ok])):
        bad.append(f"softcap {softcap}: NaN rows differ")
    fin = torch.isfinite(want_grad)
    err = (grad.double() - want_grad).abs()[fin]
    tol = (want_grad.abs()[fin] * 2.0 ** -8 + 1e-7)
    if (err > tol).any():
        bad.append(f"softcap {softcap}: gradient off by {err.max():.3g} (bf16 rounding allows "
                   f"{tol.max():.3g})")
    if not torch.equal(am.cpu(), want_am.cpu()):
        bad.append(f"softcap {softcap}: argmax {am.tolist()} vs {want_am.tolist()}")
    print(f"check softcap={softcap}: loss max rel err {rel.max():.2e}, grad max err "
          f"{err.max():.3g}, argmax {'equal' if torch.equal(am.cpu(), want_am.cpu()) else 'DIFF'}")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--cols", type=int, default=128256)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    x = (torch.randn(a.rows, a.cols, device=dev) * 8).to(torch.bfloat16)
    y = torch.randint(0, a.cols, (a.rows,), device=dev)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)

    bad = check(x, y, None) + check(x, y, SOFTCAP)
    for b in bad:
        print("WRONG:", b)

    out = torch.empty_like(x)
    am = torch.empty(a.rows, dtype=torch.int64, device=dev)
    res = {"shape": f"{a.rows}x{a.cols}", "dtype": "bf16", "softcap": SOFTCAP}

    def fused(cap, arg):
        return lambda: _ce_direct.fused(x, y, 1.0, 0.0, 0.0, -100, True, None, False,
                                        cap, am if arg else None)

    res["copy_us"] = timed(lambda: out.copy_(x), flush, a.reps)
    for name, cap, arg in (("fused", 0.0, False), ("fused_softcap", SOFTCAP, False),
                           ("fused_argmax", 0.0, True), ("fused_softcap_argmax", SOFTCAP, True)):
        if fused(cap, arg)() is None:
            print(f"{name}: the direct call did not run")
            continue
        res[name + "_us"] = timed(fused(cap, arg), flush, a.reps)

    def torch_softcap():
        xr = x.detach().requires_grad_()
        c = SOFTCAP * torch.tanh(xr.float() / SOFTCAP)
        F.cross_entropy(c, y).backward()

    def tuned_softcap():
        xr = (x.detach() * 1.0).requires_grad_()
        tuned.cross_entropy(xr, y, softcap=SOFTCAP).backward()

    res["torch_softcap_fwd_bwd_us"] = timed(torch_softcap, flush, a.reps)
    res["tuned_softcap_fwd_bwd_us"] = timed(tuned_softcap, flush, a.reps)
    for k, v in res.items():
        if k.endswith("_us"):
            print(f"{k[:-3]:28s} {v:10.1f} us  ({v / res['copy_us']:.2f}x copy)")
    res["wrong"] = bad
    print(json.dumps(res))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
