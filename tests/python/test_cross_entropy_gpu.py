"""test_cross_entropy_gpu.py TUNED LIBTUNED SOURCE_ROOT: tuned.cross_entropy
on libtuned's kernels (tuned/cross_entropy.py). Exits 77 (skipped) without
torch or CUDA; prints one line per section and `N passed, N failed`.

  paths      tuned.kernel_paths() says cross_entropy=tuned; no call below
             falls back to torch (a fallback warning is an error)
  accuracy   bf16 / fp16 / fp32 logits of 64x1000, 256x32000, 8x128256 and
             a shifted 3-d view logits[:, :-1, :] (one call per batch
             element): mean / sum / none, and mean and sum split (run twice:
             retain_graph), the loss within 1e-5 relative of
             F.cross_entropy in float64, lse too; the gradient (a random
             upstream for none) no worse than twice torch's own in the
             same dtype, both against float64
  extras     label_smoothing, z_loss, scale, softcap, ignore_index, int32
             labels against a float64 formula, loss and gradient
  weights    class weights (the split path times w_y): F.cross_entropy's
             weighted loss and gradient, bf16 and fp32
  in place   inplace_backward: the same loss and gradient, written over
             the logits (an intermediate's storage)
  peaked     bf16 rows where p_y = 0.999 (one logit far above the rest):
             the loss (about 1e-3) within 1e-5 relative of float64
  errors     a planted out-of-range label: NaN loss for its row only, the
             others right, bit 1 in cross_entropy_errors() after a sync;
             all rows ignored: NaN mean and zero gradient, as torch
  graphs     forward and backward captured in a torch.cuda.CUDAGraph (mean,
             none, mean split), replayed on new logits and labels: the
             eager loss and gradient
  compile    torch.compile(fullgraph=True) of a linear head and
             tuned.cross_entropy (plain, in place, reduction none): loss
             and gradients as eager
  opcheck    torch.library.opcheck of every operator on CUDA tensors

$CE_GPU_SECTIONS (a comma-separated list of the names above) runs those
sections only, the others counted as skipped.
"""

import math
import os
import sys

from gpu_env import Checks, start  # noqa: E402 - exits 77 without torch or CUDA

store = start("tuned-cross-entropy-")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tuned  # noqa: E402

OPS = torch.ops.tuned
DEV = "cuda"
checks = Checks()
expect = checks.expect


def logits(shape, cols, dtype, seed, spread=4.0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = (torch.randn(*shape, cols, device=DEV, generator=g) * spread).to(dtype)
    t = torch.randint(0, cols, shape, device=DEV, generator=g)
    t.view(-1)[::7] = -100
    return x, t


def ref_f64(x, t, **kw):
    """F.cross_entropy in float64 of x (classes last): (loss, grad of
    (loss * w).sum()) with w the upstream gradient (None: 1)."""
    w = kw.pop("w", None)
    xd = x.detach().double().requires_grad_()
    cols = x.shape[-1]
    loss = F.cross_entropy(xd.reshape(-1, cols), t.reshape(-1).long(), **kw)
    if kw.get("reduction") == "none":
        loss = loss.view(t.shape)
    (loss if w is None else loss * w.double()).sum().backward()
    return loss.detach(), xd.grad


def torch_own(x, t, **kw):
    """torch's F.cross_entropy in x's dtype: its gradient."""
    w = kw.pop("w", None)
    xt = x.detach().clone().requires_grad_()
    cols = x.shape[-1]
    loss = F.cross_entropy(xt.reshape(-1, cols), t.reshape(-1).long(), **kw)
    if kw.get("reduction") == "none":
        loss = loss.view(t.shape)
    (loss if w is None else loss * w.to(loss.dtype)).sum().backward()
    return xt.grad


def rel(a, ref):
    return ((a.double() - ref).abs() / ref.abs().clamp_min(1e-30)).max().item()


def check_loss(loss, ref, lse, what, tol=1e-5):
    """mean / sum: relative; none: per row, relative to the row's loss and
    its lse (a row's loss is lse - x_y: its error is the lse's)."""
    if loss.dim() == 0:
        return expect(rel(loss, ref) <= tol, f"{what}: loss {loss.item()!r} against "
                                             f"{ref.item()!r} (relative {rel(loss, ref):.3g})")
    err = (loss.double() - ref).abs()
    bound = tol * (ref.abs() + lse.abs() + 1e-6)
    return expect(bool((err <= bound).all()), f"{what}: per-row loss error {err.max().item():.3g}, "
                                              f"worst ratio {(err / bound).max().item():.3g}")


# (dtype, path) -> the largest ratio of tuned's gradient error to torch's,
# over the accuracy cases (printed: the figure the "no worse than torch's"
# claim reads); path "fused" (mean, sum) or "split" (none: the backward
# kernel from the saved lse and its low part)
grad_error_ratio = {}


def check_grad(g, ref, own, what, path):
    """g against float64 no worse than twice torch's own (or a rounding of
    the dtype of the row's largest gradient: 2 ulp of bf16 and fp16, 4 of
    fp32)."""
    e = (g.double() - ref).abs().max().item()
    e_torch = (own.double() - ref).abs().max().item()
    ratio = e / e_torch if e_torch > 0 else (0.0 if e == 0 else math.inf)
    if ratio > grad_error_ratio.get((g.dtype, path), (-1.0, ""))[0]:
        grad_error_ratio[(g.dtype, path)] = (ratio, what)
    ulp = {torch.bfloat16: 2 * 2 ** -8, torch.float16: 2 * 2 ** -11,
           torch.float32: 4 * 2 ** -24}[g.dtype]
    bound = max(2 * e_torch, ulp * ref.abs().max().item())
    return expect(e <= bound, f"{what}: gradient error {e:.3g}, torch's {e_torch:.3g}")


# ---------------------------------------------------------------- sections --

def paths():
    kp = tuned.kernel_paths()
    print("kernel paths:", ", ".join(f"{k}={v}" for k, v in kp.items()))
    expect(kp["cross_entropy"] == "tuned", f"cross_entropy runs {kp['cross_entropy']}")


SHAPES = [((64,), 1000), ((256,), 32000), ((8,), 128256)]
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def accuracy():
    n = 0
    cases = [(s, c, dt) for s, c in SHAPES for dt in DTYPES]
    cases += [("shifted", 32000, dt) for dt in DTYPES]
    for shape, cols, dtype in cases:
        if shape == "shifted":
            full, t = logits((4, 65), cols, dtype, seed=n)
            x, t = full[:, :-1, :], t[:, 1:]
        else:
            x, t = logits(shape, cols, dtype, seed=n)
        for red, split in (("mean", False), ("sum", False), ("none", False), ("mean", True),
                           ("sum", True)):
            what = f"{tuple(x.shape)} {dtype} {red}{' split' if split else ''}"
            w = torch.randn(t.shape, device=DEV) if red == "none" else None
            if shape == "shifted":
                leaf = full.detach().clone().requires_grad_()
                xi = leaf[:, :-1, :]  # not copied: one kernel call per batch element
            else:
                leaf = xi = x.detach().clone().requires_grad_()
            loss, lse = tuned.cross_entropy(xi, t, reduction=red, return_lse=True, split=split)
            ref, gref = ref_f64(x, t, reduction=red, w=w)
            lref = torch.logsumexp(x.double(), -1)
            check_loss(loss, ref, lref, what)
            expect(bool(((lse.double() - lref).abs() <= 1e-5 * lref.abs() + 1e-6).all()),
                   f"{what}: lse")
            (loss if w is None else loss * w).sum().backward(retain_graph=split)
            g = leaf.grad[:, :-1, :] if shape == "shifted" else leaf.grad
            check_grad(g, gref, torch_own(x, t, reduction=red, w=w), what,
                       "split" if red == "none" or split else "fused")
            if split:
                # the split backward runs again from the saved lse: the same bits
                once = leaf.grad.clone()
                loss.backward()
                expect(torch.equal(leaf.grad, 2 * once), f"{what}: a second backward")
            if shape == "shifted":
                expect(bool((leaf.grad[:, -1, :] == 0).all()), f"{what}: the cut row's gradient")
        n += 1
    print(f"  {n} shapes x dtypes, 3 reductions each, mean and sum split too")
    for (dtype, path), (ratio, what) in sorted(grad_error_ratio.items(), key=str):
        print(f"  {dtype} {path}: gradient error at most {ratio:.2f}x torch's ({what})")


def reference(x, t, ignore=-100, eps=0.0, z=0.0, scale=1.0, softcap=None, reduction="mean"):
    x = x.double()
    if softcap is not None:
        x = softcap * torch.tanh(x / softcap)
    x = x * scale
    lse = torch.logsumexp(x, -1)
    valid = t != ignore
    nll = lse - x.gather(-1, torch.where(valid, t, 0).long().unsqueeze(-1)).squeeze(-1)
    rows = torch.where(valid, (1 - eps) * nll + eps * (lse - x.mean(-1)) + z * lse ** 2, 0.0)
    return {"none": rows, "sum": rows.sum(), "mean": rows.sum() / valid.sum()}[reduction], lse


def extras():
    x, t = logits((300,), 5000, torch.float32, seed=40)
    t[t == -100] = 17
    t[::5] = 3
    for kw in (dict(eps=0.1), dict(z=1e-4), dict(scale=0.5), dict(softcap=15.0),
               dict(eps=0.05, z=1e-3, scale=1.7, ignore=3), dict(softcap=30.0, z=1e-4)):
        for red in ("mean", "none"):
            for labels in (t, t.int()):
                what = f"extras {kw} {red} {labels.dtype}"
                leaf = x.detach().clone().requires_grad_()
                loss = tuned.cross_entropy(leaf, labels, ignore_index=kw.get("ignore", -100),
                                           reduction=red, label_smoothing=kw.get("eps", 0.0),
                                           z_loss=kw.get("z", 0.0), scale=kw.get("scale", 1.0),
                                           softcap=kw.get("softcap"))
                xd = x.detach().double().requires_grad_()
                ref, lse = reference(xd, t, reduction=red, **kw)
                check_loss(loss, ref.detach(), lse.detach(), what)
                loss.sum().backward()
                ref.sum().backward()
                e = (leaf.grad.double() - xd.grad).abs().max().item()
                # fp32 logits: the fp32 lse's rounding (2^-24 |lse| relative,
                # twice for margin) and a few ulp more, of the largest
                # gradient (see check_grad)
                rel_bound = 2 ** -23 * lse.abs().max().item() + 8 * 2 ** -24
                expect(e <= rel_bound * xd.grad.abs().max().item() + 1e-9,
                       f"{what}: gradient error {e:.3g} (bound {rel_bound:.3g} relative)")


def softcap_argmax():
    """The kernel's cap and argmax against float64: masked (-inf) classes
    take no mass through the cap and get gradient 0, a NaN row's argmax is
    its NaN, ties go to the lowest column; rows in one block and rows on a
    cluster (128256 columns), every dtype, each reduction."""
    for cols in (5000, 128256):
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            x, t = logits((64,), cols, dtype, seed=70)
            x = x * 4  # well into the cap's bend at 15
            x[1, ::9] = -math.inf
            t[1] = 1  # a label not masked (every ninth column is)
            x[2, 11] = math.nan
            x[3, 5] = x[3, 40] = x[3].max() + 1  # a tie: column 5
            for red in ("mean", "none"):
                what = f"softcap+argmax {cols} {dtype} {red}"
                leaf = x.detach().clone().requires_grad_()
                loss, am = tuned.cross_entropy(leaf, t, reduction=red, softcap=15.0,
                                               return_argmax=True)
                xd = x.detach().double()
                c = torch.where(xd == -math.inf, xd, 15.0 * torch.tanh(xd / 15.0))
                cd = c.clone().requires_grad_()
                rows = F.cross_entropy(cd, t, reduction="none")
                ref = rows.mean() if red == "mean" else rows
                ok = ~torch.isnan(rows)
                got = loss if red == "none" else loss.reshape(1)
                want = ref if red == "none" else ref.reshape(1)
                if red == "none":
                    got, want = got[ok], want[ok]
                    expect(bool(torch.isnan(loss[~ok]).all()), f"{what}: NaN rows")
                    err = ((got.double() - want).abs() / want.abs().clamp_min(1e-30)).max()
                    expect(err.item() <= 1e-5, f"{what}: loss relative error {err.item():.3g}")
                    up = torch.rand(loss.shape, device=DEV)
                    (loss * up).nansum().backward()
                    (rows * up.double()).nansum().backward()
                    tt = torch.tanh(xd / 15.0)
                    gref = cd.grad * torch.where(xd == -math.inf, torch.zeros_like(tt), 1 - tt * tt)
                    sel = ok.unsqueeze(-1).expand_as(gref)
                    e = (leaf.grad.double() - gref)[sel].abs().max().item()
                    bound = 2.0 ** -(8 if dtype == torch.bfloat16 else 11 if dtype == torch.float16
                                     else 20) * gref[sel].abs().max().item()
                    expect(e <= bound + 1e-9, f"{what}: gradient error {e:.3g} (bound {bound:.3g})")
                    expect(bool((leaf.grad[1, ::9] == 0).all()), f"{what}: masked gradient 0")
                # argmax: a NaN's column, else a column of the largest capped
                # value (within fp32 rounding), no later than its first
                expect(am.dtype == torch.int64 and am[2].item() == 11, f"{what}: NaN argmax")
                expect(am[3].item() == 5, f"{what}: a tie goes to the lowest column")
                cv = c.clone()
                cv[2] = 0
                best = cv.max(-1).values
                at = cv.gather(-1, am.unsqueeze(-1)).squeeze(-1)
                first = (cv == best.unsqueeze(-1)).int().argmax(-1)
                good = (at >= best - 1e-6 * best.abs()) & (am <= first)
                good[2] = True
                expect(bool(good.all()), f"{what}: argmax rows {torch.nonzero(~good).flatten()}")


def in_place():
    for dtype in (torch.bfloat16, torch.float32):
        x, t = logits((512,), 32000, dtype, seed=50)
        for red in ("mean", "sum"):
            res = []
            for inplace in (False, True):
                leaf = x.detach().clone().requires_grad_()
                h = leaf * 1.0  # the logits: an intermediate, as an LM head's output
                loss = tuned.cross_entropy(h, t, reduction=red, inplace_backward=inplace,
                                           label_smoothing=0.1)
                if inplace:
                    # The forward wrote the gradient over the logits.
                    expect(not torch.equal(h.detach(), x), f"in place {dtype} {red}: overwritten")
                (loss * 3.0).backward()
                res.append((loss.detach(), leaf.grad))
            expect(torch.equal(res[0][0], res[1][0]), f"in place {dtype} {red}: the same loss")
            expect(torch.equal(res[0][1], res[1][1]), f"in place {dtype} {red}: the same gradient")


def peaked():
    cols = 32000
    x = torch.zeros(64, cols, device=DEV)
    t = torch.randint(0, cols, (64,), device=DEV)
    # p_y = e^a / (e^a + V - 1) = 0.999
    a = torch.log(torch.tensor(0.999 * (cols - 1) / 0.001)).item()
    x[torch.arange(64), t] = a
    x = x.bfloat16()
    for red in ("none", "mean"):
        leaf = x.clone().requires_grad_()
        loss = tuned.cross_entropy(leaf, t, reduction=red)
        ref, gref = ref_f64(x, t, reduction=red)
        py = torch.softmax(x.double(), -1).gather(-1, t.unsqueeze(-1))
        expect(abs(py.mean().item() - 0.999) < 1e-3, f"peaked: p_y {py.mean().item()}")
        expect(rel(loss, ref) <= 1e-5, f"peaked {red}: loss relative error {rel(loss, ref):.3g}")
        loss.sum().backward()
        check_grad(leaf.grad, gref, torch_own(x, t, reduction=red), f"peaked {red}",
                   "split" if red == "none" else "fused")


def errors():
    tuned.cross_entropy_errors(clear=True)
    x, t = logits((40,), 1000, torch.bfloat16, seed=60)
    t[3] = 1000  # out of range
    loss = tuned.cross_entropy(x, t, reduction="none")
    torch.cuda.synchronize()
    ok = torch.ones(40, dtype=torch.bool, device=DEV)
    ok[3] = False
    expect(bool(loss[3].isnan()), f"bad label: row 3's loss {loss[3].item()}")
    expect(bool(loss[ok].isfinite().all()), "bad label: the other rows are finite")
    t2 = t.clone()
    t2[3] = -100
    ref = ref_f64(x, t2, reduction="none")[0]
    check_loss(loss[ok], ref[ok], torch.logsumexp(x.double(), -1)[ok], "bad label: other rows")
    bits = tuned.cross_entropy_errors(clear=True)
    expect(bits & 1, f"bad label: error bits {bits}")
    tuned.cross_entropy(x, t2)
    expect(tuned.cross_entropy_errors() == 0, "no bad label: no error bit")
    # All rows ignored: NaN mean, zero gradient, as torch.
    leaf = x.detach().clone().requires_grad_()
    loss = tuned.cross_entropy(leaf, torch.full_like(t, -100))
    loss.backward()
    ref = F.cross_entropy(x.float(), torch.full_like(t, -100))
    expect(bool(loss.isnan()) and bool(ref.isnan()), f"all ignored: {loss.item()}, torch {ref}")
    expect(bool((leaf.grad == 0).all()), "all ignored: zero gradient")


def graphs():
    for red, split in (("mean", False), ("none", False), ("mean", True)):
        x, t = logits((128,), 32000, torch.bfloat16, seed=70)
        w = torch.randn(128, device=DEV)
        xs = x.clone().requires_grad_()
        ts = t.clone()

        def step():
            loss = tuned.cross_entropy(xs, ts, reduction=red, label_smoothing=0.1, split=split)
            if red == "none":
                loss = (loss * w).sum()
            return loss.detach(), torch.autograd.grad(loss, xs)[0]

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            loss_s, grad_s = step()
        for seed in (71, 72):
            x2, t2 = logits((128,), 32000, torch.bfloat16, seed=seed)
            with torch.no_grad():
                xs.copy_(x2)
            ts.copy_(t2)
            g.replay()
            torch.cuda.synchronize()
            loss_e, grad_e = step()
            what = f"graph {red}{' split' if split else ''}"
            expect(torch.equal(loss_s, loss_e), f"{what}: loss {loss_s} eager {loss_e}")
            expect(torch.equal(grad_s, grad_e), f"{what}: gradient as eager")


def compiled():
    torch.manual_seed(80)
    head = torch.nn.Linear(256, 8000, bias=False, device=DEV, dtype=torch.bfloat16)
    h = torch.randn(4, 33, 256, device=DEV, dtype=torch.bfloat16)
    t = torch.randint(0, 8000, (4, 32), device=DEV)

    for kw in (dict(), dict(inplace_backward=True), dict(reduction="none"),
               dict(z_loss=1e-4, label_smoothing=0.1)):
        def f(h, t):
            loss = tuned.cross_entropy(head(h)[:, :-1, :], t, **kw)
            return loss.sum() if kw.get("reduction") == "none" else loss

        torch._dynamo.reset()
        cf = torch.compile(f, fullgraph=True)
        le = f(h, t)
        ge = torch.autograd.grad(le, head.weight)[0]
        lc = cf(h, t)
        gc = torch.autograd.grad(lc, head.weight)[0]
        expect(rel(lc, le.double()) <= 1e-5, f"compile {kw}: loss {lc.item()} eager {le.item()}")
        e = (gc.float() - ge.float()).abs().max().item()
        expect(e <= 2 ** -7 * ge.float().abs().max().item(), f"compile {kw}: weight grad {e:.3g}")


def opcheck():
    for dtype in (torch.bfloat16, torch.float32):
        g = torch.Generator(device=DEV).manual_seed(90)
        base = torch.randn(3, 9, 1000, device=DEV, generator=g).to(dtype)
        cases = [(torch.randn(16, 1000, device=DEV, generator=g).to(dtype),
                  torch.randint(0, 1000, (16,), device=DEV, generator=g)),
                 (base[:, :-1, :], torch.randint(0, 1000, (3, 8), device=DEV, generator=g)),
                 (base[0, :, :777], torch.randint(0, 777, (9,), device=DEV, generator=g).int())]
        for x, t in cases:
            t = t.clone()
            t.view(-1)[0] = -100
            lse = torch.logsumexp(x.float() * 0.5, -1)
            p = (0.5, 0.1, 1e-3, -100)
            need = dtype == torch.float32
            runs = [(OPS.cross_entropy_fused.default,
                     (x.clone().requires_grad_(need), t, torch.tensor(0.25, device=DEV)) + p),
                    (OPS.cross_entropy_fused_.default,
                     (x.clone(), t, torch.tensor(1.0, device=DEV)) + p),
                    (OPS.cross_entropy_loss.default, (x.clone().requires_grad_(need), t) + p),
                    (OPS.cross_entropy_backward.default,
                     (x, t, lse, torch.randn(t.shape, device=DEV, generator=g)) + p),
                    (OPS.cross_entropy_backward.default,
                     (x, t, lse, torch.randn(t.shape, device=DEV, generator=g)) + p +
                     (0.0, torch.zeros_like(lse))),
                    (OPS.cross_entropy_rescale_.default,
                     (x.clone(), torch.tensor([2.0], device=DEV)))]
            for op, args in runs:
                if op is OPS.cross_entropy_rescale_.default:
                    # rescale needs a fused call of the shape on the handle first.
                    OPS.cross_entropy_fused(args[0], t, torch.tensor(1.0, device=DEV), *p)
                r = torch.library.opcheck(op, args)
                expect(all(v == "SUCCESS" for v in r.values()), f"opcheck {op} {dtype} "
                                                                f"{tuple(x.shape)}: {r}")


def weights():
    """Class weights (the split path times w_y): F.cross_entropy's weighted
    loss in float64, and its gradient for a random upstream."""
    for dtype in (torch.bfloat16, torch.float32):
        x, t = logits((300,), 5000, dtype, seed=60)
        wt = torch.rand(5000, device=DEV) + 0.5
        for red in ("mean", "sum", "none"):
            leaf = x.detach().clone().requires_grad_()
            loss = tuned.cross_entropy(leaf, t, wt, reduction=red)
            xd = x.detach().double().requires_grad_()
            ref = F.cross_entropy(xd, t, wt.double(), reduction=red)
            what = f"weights {dtype} {red}"
            err = ((loss.double() - ref).abs() / ref.abs().clamp_min(1e-12)).max().item()
            expect(err <= 1e-5, f"{what}: loss relative error {err:.3g}")
            up = torch.randn(loss.shape, device=DEV, dtype=torch.float64)
            (loss.double() * up).sum().backward()
            (ref * up).sum().backward()
            own = x.detach().clone().requires_grad_()
            (F.cross_entropy(own, t, wt.to(dtype), reduction=red).double() * up).sum().backward()
            check_grad(leaf.grad, xd.grad, own.grad, what, "split")


skipped = 0
for name, fn in (("paths", paths), ("accuracy", accuracy), ("extras", extras),
                 ("softcap and argmax", softcap_argmax), ("weights", weights),
                 ("in place", in_place), ("peaked", peaked), ("errors", errors),
                 ("graphs", graphs), ("compile", compiled), ("opcheck", opcheck)):
    only = os.environ.get("CE_GPU_SECTIONS", "")
    if only and name not in [n.strip() for n in only.split(",")]:
        skipped += 1
        continue
    checks.section(name, fn, warnings_as_errors=True)
print(f"{checks.sections_passed} passed, {checks.sections_failed} failed"
      + (f", {skipped} skipped" if skipped else ""))
sys.exit(1 if checks.sections_failed else 0)
