"""test_ce_direct.py LIBTUNED SOURCE_ROOT: tuned/_ce_direct.py's calls of
libtuned (pointers, offsets, the mean's workspace, the reduced loss, the in-place
gradient, the rescale, the split path) on the CPU, with libtuned's four
cross-entropy entry points replaced by a float64 torch stand-in that
reads and writes the same memory (ctypes.memmove at the pointers it is
given): the marshalling, not the kernels (test_cross_entropy_gpu.py runs
those). Also through the autograd Function with the direct calls: the
gradient for an upstream other than 1, and a reduction-none loss the
caller changes in place. Exits 77 without torch."""

import ctypes
import importlib
import os
import sys

LIB = sys.argv[1] if len(sys.argv) > 1 else ""
ROOT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
if LIB:
    os.environ["TUNED_LIBRARY"] = LIB
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)

from tuned import _ce_direct as D  # noqa: E402
from tuned import _lib  # noqa: E402
from host_memory import read, write  # noqa: E402
from verdicts import Verdicts  # noqa: E402

ce = importlib.import_module("tuned.cross_entropy")
verdicts = Verdicts()
expect = verdicts.expect


class StandIn:
    """libtuned's cross-entropy entry points in float64 torch, fp32 logits."""

    def tuned_cross_entropy(self, h, xp, lp, gp, lossp, lsep, rows, cols, stride, dt, opts,
                            stream):
        o = opts._obj
        if o.total and o.reduction == _lib.REDUCTION_NONE:
            return _lib.EINVAL
        x = read(xp, rows * stride, torch.float32).view(rows, stride)[:, :cols].double()
        lab = read(lp, rows, torch.int32 if o.labels_int32 else torch.int64).long()
        valid = lab != o.ignore_index
        xs = x * o.scale
        lse = torch.logsumexp(xs, -1)
        xy = xs.gather(1, torch.where(valid, lab, 0)[:, None])[:, 0]
        rows_loss = torch.where(valid, lse - xy, 0.0)
        write(lossp, rows_loss.float())
        write(lsep, lse.float())
        gs = self.grad_scale(o, valid)
        if o.total:
            write(o.total, torch.tensor([rows_loss.sum().item() * gs], dtype=torch.float32))
        if gp:
            oh = F.one_hot(torch.where(valid, lab, 0), cols).double()
            g = (torch.softmax(xs, -1) - oh) * (o.scale * gs) * valid[:, None]
            full = read(gp, rows * stride, torch.float32).view(rows, stride)
            full[:, :cols] = g.float()
            write(gp, full)
        return 0

    @staticmethod
    def grad_scale(o, valid):
        """g of a sum or mean call (the mean's written to the workspace)."""
        up = read(o.grad_output, 1, torch.float32).item() if o.grad_output else 1.0
        if o.reduction != _lib.REDUCTION_MEAN:
            return up
        gs = torch.tensor([up], dtype=torch.float32) / valid.sum()  # none valid: inf
        write(o.workspace, gs)
        return gs.item()

    def tuned_cross_entropy_rescale(self, h, gp, rows, cols, stride, dt, fp, stream):
        write(gp, read(gp, rows * stride, torch.float32) * read(fp, 1, torch.float32))
        return 0

    def tuned_cross_entropy_backward(self, h, xp, lp, lsep, gp, rows, cols, stride, dt, opts,
                                     stream):
        o = opts._obj
        x = read(xp, rows * stride, torch.float32).view(rows, stride)[:, :cols].double()
        lab = read(lp, rows, torch.int64)
        lse = read(lsep, rows, torch.float32).double()
        valid = lab != o.ignore_index
        if o.total:
            return _lib.EINVAL
        if o.reduction == _lib.REDUCTION_NONE:
            go = read(o.grad_output, rows, torch.float32).double()
        else:
            go = torch.full((rows,), self.grad_scale(o, valid), dtype=torch.float64)
        oh = F.one_hot(torch.where(valid, lab, 0), cols).double()
        g = (torch.exp(x * o.scale - lse[:, None]) - oh) * o.scale * go[:, None] * valid[:, None]
        write(gp, g.float())
        return 0


D._call_state = lambda x: (StandIn(), None, 2, None)
D.error_word = lambda x: None
x = torch.randn(9, 7)
t = torch.randint(0, 7, (9,))
t[2] = -100
for red in ("mean", "sum"):
    for inplace in (False, True):
        xx = x.clone()
        total, lse, grad = D.fused(xx, t, 1.0, 0.0, 0.0, -100, red == "mean", None, inplace)
        xr = x.clone().requires_grad_()
        ref = F.cross_entropy(xr, t, reduction=red)
        ref.backward()
        what = f"fused {red} inplace={inplace}"
        expect(abs(total.item() - ref.item()) < 1e-5, f"{what}: loss {total.item()} against "
                                                      f"{ref.item()}")
        expect(torch.allclose(grad, xr.grad, atol=1e-6), f"{what}: gradient")
        expect(torch.allclose(lse, torch.logsumexp(x, -1)), f"{what}: lse")
        expect((grad is xx) == inplace, f"{what}: the gradient's buffer")
        expect(D.rescale(grad, torch.tensor(2.0)) and
               torch.allclose(grad, 2 * xr.grad, atol=1e-6), f"{what}: rescale by 2")
gs = torch.tensor(0.25)
total, _, grad = D.fused(x.clone(), t, 1.0, 0.0, 0.0, -100, False, gs, False)
xr = x.clone().requires_grad_()
(F.cross_entropy(xr, t, reduction="sum") * 0.25).backward()
expect(torch.allclose(grad, xr.grad, atol=1e-6) and
       abs(total.item() - 0.25 * F.cross_entropy(x, t, reduction="sum").item()) < 1e-5,
       "fused sum with a gradient scale")
loss, lse, _, work = D.loss(x, t, 1.0, 0.0, 0.0, -100)
expect(torch.allclose(loss, F.cross_entropy(x, t, reduction="none"), atol=1e-6) and
       loss.data_ptr() != lse.data_ptr() and work is None, "loss: per row, loss and lse apart")
for red, code, gscale in (("mean", _lib.REDUCTION_MEAN, None), ("sum", _lib.REDUCTION_SUM, None),
                          ("sum", _lib.REDUCTION_SUM, torch.tensor(0.25))):
    total, lse2, _, work = D.loss(x, t, 1.0, 0.0, 0.0, -100, reduction=code, grad_scale=gscale)
    want_total = F.cross_entropy(x, t, reduction=red) * (1 if gscale is None else 0.25)
    expect(total.dim() == 0 and abs(total.item() - want_total.item()) < 1e-5 and
           (work is not None) == (red == "mean") and torch.equal(lse2, lse),
           f"loss {red} (scale {gscale}): the reduced loss {total.item()} against "
           f"{want_total.item()}")
    if red == "mean":
        g = D.backward(x, t, lse2, torch.tensor(3.0), 1.0, 0.0, 0.0, -100, mean_work=work)
        xr = x.clone().requires_grad_()
        (3 * F.cross_entropy(xr, t)).backward()
        expect(g is not None and torch.allclose(g, xr.grad, atol=1e-6),
               "backward of a mean: the count made again in the workspace")
go = torch.randn(9)
g = D.backward(x, t, lse, go, 1.0, 0.0, 0.0, -100)
xr = x.clone().requires_grad_()
(F.cross_entropy(xr, t, reduction="none") * go).sum().backward()
expect(torch.allclose(g, xr.grad, atol=1e-5), "backward from the saved lse, per-row upstream")
want = xr.grad.clone()

# Through the autograd Function with the direct calls.
xr = x.clone().requires_grad_()
loss, lse, z = ce._CrossEntropyFn.apply(xr, t, 1.0, 0.0, 0.0, -100, "mean", False, None, True,
                                        ce._DIRECT, False)
loss.backward(torch.tensor(3.0))
xr2 = x.clone().requires_grad_()
(3 * F.cross_entropy(xr2, t)).backward()
expect(torch.allclose(xr.grad, xr2.grad, atol=1e-5) and z is None,
       "Function, mean, upstream 3: the gradient")
xr = x.clone().requires_grad_()
loss, lse, z = ce._CrossEntropyFn.apply(xr, t, 1.0, 0.0, 0.0, -100, "none", False, None, True,
                                        ce._DIRECT, False)
try:
    loss.mul_(1.0)  # a caller's in-place change of the per-row loss
    (loss * go).sum().backward()
    expect(torch.allclose(xr.grad, want, atol=1e-5), "Function, none: the gradient")
except RuntimeError as exc:
    expect(False, f"Function, none: an in-place change of the loss raised {exc}")
# Split mean and sum: the reduced loss from the call, the backward kernel
# with the upstream gradient, twice (retain_graph).
for red, divisor in (("mean", None), ("sum", None), ("sum", 4.0)):
    xr = x.clone().requires_grad_()
    loss, lse, z = ce._CrossEntropyFn.apply(xr, t, 1.0, 0.0, 0.0, -100, red, False, divisor, True,
                                            ce._DIRECT, False, 0.0, False, True)
    want_loss = F.cross_entropy(x, t, reduction=red) / (divisor or 1.0)
    loss.backward(torch.tensor(3.0), retain_graph=True)
    first = xr.grad.clone()
    loss.backward(torch.tensor(3.0))
    xr2 = x.clone().requires_grad_()
    (3 * F.cross_entropy(xr2, t, reduction=red) / (divisor or 1.0)).backward()
    expect(abs(loss.item() - want_loss.item()) < 1e-5 and
           torch.allclose(first, xr2.grad, atol=1e-5) and torch.allclose(xr.grad, 2 * xr2.grad, atol=1e-5),
           f"Function, split {red} / {divisor}: the loss, and the gradient twice")
verdicts.finish()
