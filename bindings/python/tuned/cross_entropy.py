"""tuned.cross_entropy: cross-entropy over the vocabulary (the last
dimension) on libtuned's kernels, with its autograd and torch operators.

This file holds the whole op, side by side: the calls of libtuned's
kernels (tuned_cross_entropy, tuned_cross_entropy_backward,
tuned_cross_entropy_rescale; include/tuned.h gives their math), the torch
formula of the same math (the operators' kernel on every other device, and
the fallback), the custom operators with their fake implementations, the
autograd Function, and the public function.

    tuned::cross_entropy_fused(Tensor logits, Tensor labels, Tensor grad_scale,
        float scale, float smoothing, float z_loss, int ignore_index, float softcap)
        -> (Tensor loss, Tensor lse, Tensor grad)
    tuned::cross_entropy_fused_(Tensor(a!) logits, Tensor labels, Tensor grad_scale,
        float scale, float smoothing, float z_loss, int ignore_index, float softcap)
        -> (Tensor loss, Tensor lse)
    tuned::cross_entropy_loss(Tensor logits, Tensor labels, float scale,
        float smoothing, float z_loss, int ignore_index, float softcap)
        -> (Tensor loss, Tensor lse, Tensor lse_lo)
    tuned::cross_entropy_backward(Tensor logits, Tensor labels, Tensor lse,
        Tensor grad_output, float scale, float smoothing, float z_loss,
        int ignore_index, float softcap, Tensor? lse_lo) -> Tensor
    tuned::cross_entropy_rescale_(Tensor(a!) grad, Tensor factor) -> ()

The operators take rows of logits: (R, V) with one stride between rows, or
(B, T, V) whose batch elements are each such rows (a shifted view
logits[:, :-1, :], one kernel call per batch element); the last dimension
adjacent in memory; labels of the leading shape, int32 or int64,
contiguous. loss and lse (fp32, the labels' shape) are per row; a row
whose label is ignore_index has loss 0. The loss operator's lse_lo (fp32,
per row) is the part of the lse its fp32 rounding drops (zeros where the
torch formula ran); the backward given it takes exp((s x - lse) - lse_lo),
which keeps fp32 gradients as precise as torch's (tuned.h,
tuned_ce_options.lse_lo). grad has the logits' dtype and
strides (the kernels write it at the logits' row stride); the fused
operator's gradient is that of sum(loss) times grad_scale (one fp32
element), the in-place variant writes it over the logits. The backward
takes grad_output per row, or one element for every row. The rescale
multiplies grad by factor (one fp32 element) on the device, and moves
nothing when it is 1. softcap (0: none) caps the logits in the kernel,
softcap * tanh(x / softcap), -inf kept, the gradient chained through it.
A label outside [0, V) that is not ignore_index
gives its row a NaN loss and gradient, and sets bit 1 of the device's
error word (cross_entropy_errors() reads it): nothing waits on the host.

tuned.cross_entropy(input, target, ...) (see its docstring) takes
F.cross_entropy's arguments, the class dimension last. mean and sum run
the fused kernel: the forward writes the gradient of the loss, scaled by
1/n_valid (computed on the device) or 1, and the backward only rescales
it by the upstream gradient. none, and mean and sum with split=True (fp16
with a gradient always), run the loss kernel (one read) and the backward
kernel from the saved lse. libtuned's call writes the reduced loss of a
mean or sum. Every step runs on the device with no
host synchronisation, so a call can be captured in a CUDA graph (after one
call of the shape outside the capture, which compiles the kernel and
makes the error word), and compiled with torch.compile(fullgraph=True).
Class weights run the split path (the kernels' rows times w_y). CPU
tensors, other dtypes, class weights with label smoothing or z-loss, or a
libtuned without the kernels
fall back to torch (a RuntimeWarning once per reason, FallbackError in
strict mode).

The function tuned.cross_entropy shadows this module's name in the
package; the module itself is sys.modules["tuned.cross_entropy"].
"""

import ctypes
import math

import torch

from . import _ce_direct, _dispatch, _lib
from ._ce_direct import _errors
from .errors import LibraryError, TunedError
from .torch_ops import _DTYPES, _contiguous, _library, _on_device, _raw_stream

__all__ = ["cross_entropy", "cross_entropy_errors"]

_REDUCTIONS = ("none", "sum", "mean")
_NAME = "cross_entropy"
_compiling = torch.compiler.is_compiling
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)


# ------------------------------------------------------- torch formula --

def _compute_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _softcap_torch(x, softcap):
    """x capped as the kernels cap it, softcap * tanh(x / softcap) in the
    compute dtype, -inf kept (a masked class takes no probability through
    the cap); x itself when softcap is 0 or None."""
    if not softcap:
        return x
    xc = x.to(_compute_dtype(x))
    return torch.where(xc == -math.inf, xc, softcap * torch.tanh(xc / softcap))


def _label_masks(labels, ignore_index, cols, class_offset=0, classes=None):
    """(valid, bad, here, safe) of rows of cols columns, classes
    [class_offset, class_offset + cols) of rows of `classes` (None: cols,
    the whole row; the backward's slices, include/tuned.h): rows not
    ignored, rows whose label is outside [0, classes), rows whose label is
    one of these columns, and its column there (0 where it is not)."""
    labels = labels.long()
    valid = labels != ignore_index
    bad = valid & ((labels < 0) | (labels >= (cols if classes is None else classes)))
    col = labels - class_offset
    here = valid & ~bad & (col >= 0) & (col < cols)
    safe = torch.where(here, col, torch.zeros_like(col))
    return valid, bad, here, safe


def _loss_rows(lse, picked, mean, smoothing, z_loss, valid, bad):
    """(loss, z) per row from its lse, its label's s x_y (picked) and, with
    smoothing, the mean of its s x: (1 - eps)(lse - s x_y) + eps (lse -
    mean) + z lse^2, 0 where ignored (z too), NaN for a bad label."""
    loss = (1.0 - smoothing) * (lse - picked)
    if smoothing != 0.0:
        loss = loss + smoothing * (lse - mean)
    zero = torch.zeros((), dtype=lse.dtype, device=lse.device)
    z = z_loss * lse.square() if z_loss != 0.0 else torch.zeros_like(lse)
    loss = torch.where(valid, loss + z, zero)
    z = torch.where(valid, z, zero)
    loss = torch.where(bad, torch.full((), math.nan, dtype=lse.dtype, device=lse.device), loss)
    return loss, z


def _rows_torch(x, labels, scale, smoothing, z_loss, ignore_index, softcap=0.0):
    """Per row of x (..., V) and its label: (loss, lse, z) as libtuned's
    kernel computes them (include/tuned.h), differentiable, in fp32 (fp64
    for fp64 x). z is the z-loss term z_loss lse^2 the loss includes;
    ignored rows: loss and z 0 (lse written); a bad label: loss NaN."""
    ct = _compute_dtype(x)
    xs = _softcap_torch(x, softcap).to(ct)
    if scale != 1.0:
        xs = xs * scale
    lse = torch.logsumexp(xs, -1)
    valid, bad, _, safe = _label_masks(labels, ignore_index, x.shape[-1])
    picked = xs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    mean = xs.mean(-1) if smoothing != 0.0 else None
    loss, z = _loss_rows(lse, picked, mean, smoothing, z_loss, valid, bad)
    return loss, lse, z


def _grad_torch(x, labels, lse, g, scale, smoothing, z_loss, ignore_index, softcap=0.0,
                class_offset=0, classes=None, lse_lo=None):
    """The kernels' gradient, g s (p (1 + 2 z lse) - (1 - eps) onehot - eps / V)
    (g one element, or one per row), times 1 - (c / softcap)^2 with a cap
    (0 at -inf), in x's dtype and strides; x may be a slice of the classes
    (class_offset, classes: _label_masks'), lse then the whole rows'; p
    from (s x - lse) - lse_lo where lse_lo (the lse's low part) is given."""
    ct = _compute_dtype(x)
    cols = x.shape[-1]
    vocab = cols if classes is None else classes
    xs = _softcap_torch(x, softcap).to(ct)
    slope = None
    if softcap:
        t = xs / softcap
        slope = torch.where(xs == -math.inf, torch.zeros((), dtype=ct, device=x.device),
                            1.0 - t * t)
    if scale != 1.0:
        xs = xs * scale
    lse = lse.to(ct).unsqueeze(-1)
    d = torch.exp(xs - lse if lse_lo is None else (xs - lse) - lse_lo.to(ct).unsqueeze(-1))
    if z_loss != 0.0:
        d = d * (1.0 + 2.0 * z_loss * lse)
    valid, bad, here, safe = _label_masks(labels, ignore_index, cols, class_offset, classes)
    target = torch.full((), smoothing - 1.0, dtype=ct, device=x.device)
    d = d.scatter_add(-1, safe.unsqueeze(-1),
                      torch.where(here, target, torch.zeros((), dtype=ct, device=x.device))
                      .unsqueeze(-1))
    if smoothing != 0.0:
        d = d - smoothing / vocab
    g = g.to(ct)
    g = g.reshape(()) if g.numel() == 1 else g.reshape(labels.shape).unsqueeze(-1)
    d = d * (g * scale)
    if slope is not None:
        d = d * slope
    d = torch.where(valid.unsqueeze(-1), d, torch.zeros((), dtype=ct, device=x.device))
    d = torch.where(bad.unsqueeze(-1), torch.full((), math.nan, dtype=ct, device=x.device), d)
    out = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    return out.copy_(d)


def _reduce(loss, z, valid, reduction):
    """(loss, z) reduced as F.cross_entropy: a mean over the rows not
    ignored (all ignored: NaN, 0/0, as torch)."""
    if reduction == "none":
        return loss, z
    if reduction == "sum":
        return loss.sum(), z.sum()
    n = valid.sum()
    return loss.sum() / n, z.sum() / n


def _cross_entropy_torch(input, target, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0, z_loss=0.0, scale=1.0, softcap=None):
    """tuned.cross_entropy's math in torch, differentiable, in fp32 (fp64
    for fp64 input): (loss, lse, z) with input (..., V) and target (...).
    The fallback, and the reference the tests hold the kernels to."""
    x = _softcap_torch(input, softcap)
    loss, lse, z = _rows_torch(x, target, scale, label_smoothing, z_loss, ignore_index)
    loss, z = _reduce(loss, z, target != ignore_index, reduction)
    return loss, lse, z


# ------------------------------------------------------ libtuned calls --

def cross_entropy_errors(device=None, clear=False):
    """The error bits tuned's cross-entropy kernels set on device (None:
    the current one) since the last clear: 1 (TUNED_CE_ERR_LABEL) when a
    label was outside [0, V) and not ignore_index. Reading synchronises
    with the device; clear=True zeroes the word after reading."""
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device())
    device = torch.device(device)
    idx = device.index if device.index is not None else torch.cuda.current_device()
    w = _errors.get(idx)
    if w is None:
        return 0
    bits = int(w.item())
    if clear:
        w.zero_()
    return bits


def _kernels():
    """(lib, handle) when libtuned has the cross-entropy kernels and opens,
    else None (the caller runs the torch formula; a handle that does not
    open says why once)."""
    if not all(_lib.has(fn) for fn in _lib.CROSS_ENTROPY_EXPORTS):
        return None
    try:
        return _library()
    except (LibraryError, TunedError, ValueError) as exc:
        _dispatch.fall_back(_NAME, "library", f"libtuned is not usable ({exc})", cause=exc)
        return None


def _blocks(x):
    """The kernel calls over logits x: [(element offset, row offset, rows,
    cols, row_stride)], one for rows with one stride, one per batch element
    of a (B, T, V) tensor whose batch stride is another."""
    lay = _dispatch.rows_layout(tuple(x.shape), x.stride())
    if lay is not None:
        return [(0, 0) + lay]
    if x.dim() == 3:
        lay = _dispatch.rows_layout(tuple(x.shape[1:]), x.stride()[1:])
        if lay is not None:
            t = x.shape[1]
            return [(b * x.stride(0), b * t) + lay for b in range(x.shape[0])]
    raise ValueError(f"tuned::cross_entropy: logits of shape {tuple(x.shape)} and strides "
                     f"{x.stride()} are not rows (R, V) or (B, T, V) of rows")


def _f32(t):
    """t as a contiguous fp32 tensor (no copy when it is one)."""
    return t.to(torch.float32).contiguous()


def _launch(fn, lib, h, x, labels, rows_f32, row_out, extra, opts, per_row, lse_lo=None):
    """fn over x's blocks. rows_f32: fp32 tensors of one float per row
    (loss, lse; grad_output where per_row); row_out: a tensor of x's
    strides (grad) or None. extra(ptrs) gives the call's argument list.
    lse_lo: the options' per-row lse low parts (fp32), or None."""
    dev = x.get_device()
    stream = _raw_stream(dev) or None
    xs, ls = x.element_size(), labels.element_size()
    xp, lp = x.data_ptr(), labels.data_ptr()
    gp = row_out.data_ptr() if row_out is not None else None
    fp = [t.data_ptr() for t in rows_f32]
    go = opts.grad_output
    for k, (xo, ro, rows, cols, rs) in enumerate(_blocks(x)):
        if per_row is not None:
            opts.grad_output = per_row.data_ptr() + 4 * ro
        else:
            opts.grad_output = go
        if lse_lo is not None:
            opts.lse_lo = lse_lo.data_ptr() + 4 * ro
        args = extra(xp + xo * xs, lp + ro * ls, None if gp is None else gp + xo * xs,
                     [p + 4 * ro for p in fp])
        rc = fn(h, *args, rows, cols, rs, _DTYPES[x.dtype], ctypes.byref(opts), stream)
        if rc != 0:
            try:
                _lib.check(lib, rc, h, fn.__name__)
            except TunedError as exc:
                exc.blocks_done = k
                raise


def _cuda_call(x, what, run, formula, inplace=False):
    """run() with x's device current, or formula() when libtuned has no
    kernels or the call fails (a warning, or FallbackError in strict mode).
    A failure after part of an in-place gradient was written raises."""
    if x.dtype not in _DTYPES or x.numel() == 0:
        return formula()
    k = _kernels()
    if k is None:
        return formula()
    try:
        return _on_device(x, run, *k)
    except TunedError as exc:
        if inplace and getattr(exc, "blocks_done", 0) > 0:
            raise
        _dispatch.fall_back(_NAME, ("error", exc.code), f"libtuned failed in {what}: {exc}",
                            cause=exc)
        return formula()


def _row_outputs(logits, labels, n=2):
    f = dict(dtype=torch.float32, device=logits.device)
    return tuple(torch.empty(labels.shape, **f) for _ in range(n))


def _grad_like(logits):
    return torch.empty_strided(logits.shape, logits.stride(), dtype=logits.dtype,
                               device=logits.device)


# --------------------------------------------------- operator kernels --

def _fused_any(logits, labels, grad_scale, scale, smoothing, z_loss, ignore_index, softcap=0.0):
    loss, lse, _ = _rows_torch(logits, labels, scale, smoothing, z_loss, ignore_index, softcap)
    grad = _grad_torch(logits, labels, lse, grad_scale, scale, smoothing, z_loss, ignore_index,
                       softcap)
    return _contiguous(loss.float()), _contiguous(lse.float()), grad


def _fused_cuda(logits, labels, grad_scale, scale, smoothing, z_loss, ignore_index, softcap=0.0):
    return _fused(logits, labels, grad_scale, scale, smoothing, z_loss, ignore_index, softcap,
                  False)


def _fused_inplace_any(logits, labels, grad_scale, scale, smoothing, z_loss, ignore_index,
                      softcap=0.0):
    loss, lse, grad = _fused_any(logits, labels, grad_scale, scale, smoothing, z_loss,
                                 ignore_index, softcap)
    logits.copy_(grad)
    return loss, lse


def _fused_inplace_cuda(logits, labels, grad_scale, scale, smoothing, z_loss, ignore_index,
                        softcap=0.0):
    loss, lse, _ = _fused(logits, labels, grad_scale, scale, smoothing, z_loss, ignore_index,
                          softcap, True)
    return loss, lse


def _fused(logits, labels, grad_scale, scale, smoothing, z_loss, ignore_index, softcap, inplace):
    """tuned_cross_entropy with the gradient: (loss, lse, grad); grad is
    logits when inplace; grad_scale (one fp32 element) scales it."""
    loss, lse = _row_outputs(logits, labels)
    grad = logits if inplace else _grad_like(logits)
    gs = _f32(grad_scale)

    def run(lib, h):
        o = _ce_direct.options(labels, scale, smoothing, z_loss, ignore_index,
                               _lib.REDUCTION_SUM, logits, softcap)
        o.grad_output = gs.data_ptr()
        _launch(lib.tuned_cross_entropy, lib, h, logits, labels, [loss, lse], grad,
                lambda x, lab, g, f: (x, lab, g, f[0], f[1]), o, None)
        return loss, lse, grad

    def formula():
        lo, ls, g = _fused_any(logits, labels, gs, scale, smoothing, z_loss, ignore_index, softcap)
        return loss.copy_(lo), lse.copy_(ls), grad.copy_(g)

    return _cuda_call(logits, "tuned_cross_entropy", run, formula, inplace)


def _loss_any(logits, labels, scale, smoothing, z_loss, ignore_index, softcap=0.0):
    """loss, lse and lse_lo (zeros: the formula's lse is fp32 whole)."""
    loss, lse, _ = _rows_torch(logits, labels, scale, smoothing, z_loss, ignore_index, softcap)
    lse = _contiguous(lse.float())
    return _contiguous(loss.float()), lse, torch.zeros_like(lse)


def _loss_cuda(logits, labels, scale, smoothing, z_loss, ignore_index, softcap=0.0):
    """tuned_cross_entropy without a gradient: loss, lse and the lse's low
    part, one read."""
    loss, lse, lse_lo = _row_outputs(logits, labels, 3)

    def run(lib, h):
        o = _ce_direct.options(labels, scale, smoothing, z_loss, ignore_index,
                               _lib.REDUCTION_NONE, logits, softcap)
        _launch(lib.tuned_cross_entropy, lib, h, logits, labels, [loss, lse], None,
                lambda x, lab, g, f: (x, lab, None, f[0], f[1]), o, None, lse_lo)
        return loss, lse, lse_lo

    def formula():
        lo, ls, ll = _loss_any(logits, labels, scale, smoothing, z_loss, ignore_index, softcap)
        return loss.copy_(lo), lse.copy_(ls), lse_lo.copy_(ll)

    return _cuda_call(logits, "tuned_cross_entropy", run, formula)


def _backward_any(logits, labels, lse, grad_output, scale, smoothing, z_loss, ignore_index,
                  softcap=0.0, lse_lo=None):
    return _grad_torch(logits, labels, lse, grad_output, scale, smoothing, z_loss, ignore_index,
                       softcap, lse_lo=lse_lo)


def _backward_cuda(logits, labels, lse, grad_output, scale, smoothing, z_loss, ignore_index,
                   softcap=0.0, lse_lo=None):
    """tuned_cross_entropy_backward: grad_output one per row (reduction
    none) or one for all (sum); lse_lo the forward's low parts, or None."""
    grad = _grad_like(logits)
    go = _f32(grad_output)
    lse = _f32(lse)
    lse_lo = _f32(lse_lo) if lse_lo is not None else None
    per_row = go.numel() != 1

    def run(lib, h):
        red = _lib.REDUCTION_NONE if per_row else _lib.REDUCTION_SUM
        o = _ce_direct.options(labels, scale, smoothing, z_loss, ignore_index, red, logits,
                               softcap)
        o.grad_output = go.data_ptr()
        _launch(lib.tuned_cross_entropy_backward, lib, h, logits, labels, [lse], grad,
                lambda x, lab, g, f: (x, lab, f[0], g), o, go if per_row else None, lse_lo)
        return grad

    def formula():
        return grad.copy_(_backward_any(logits, labels, lse, go, scale, smoothing, z_loss,
                                        ignore_index, softcap, lse_lo))

    return _cuda_call(logits, "tuned_cross_entropy_backward", run, formula)


def _rescale_any(grad, factor):
    grad.mul_(factor.to(torch.float32).reshape(()))


_rescale_warned = []


def _warn_rescale_fallback():
    """Once: the rescale ran as torch's mul_, a full pass over the gradient."""
    if not _rescale_warned:
        _rescale_warned.append(True)
        import warnings
        warnings.warn("tuned.cross_entropy: the gradient's rescale found no fused call of its "
                      "layout on this handle and ran as torch's mul_ (a pass over the "
                      "gradient); said once", RuntimeWarning, stacklevel=3)


def _rescale_cuda(grad, factor):
    """tuned_cross_entropy_rescale over grad's blocks (the shapes a fused
    call ran on this handle). A layout no fused call has run (EINVAL: a
    copy of the gradient, as torch.compile may hand the backward) is
    scaled by torch's mul_, quietly: the same result, no host sync."""
    f = _f32(factor)

    def run(lib, h):
        stream = _raw_stream(grad.get_device()) or None
        es, gp = grad.element_size(), grad.data_ptr()
        for k, (xo, _, rows, cols, rs) in enumerate(_blocks(grad)):
            rc = lib.tuned_cross_entropy_rescale(h, gp + xo * es, rows, cols, rs,
                                                 _DTYPES[grad.dtype], f.data_ptr(), stream)
            if rc == _lib.EINVAL and k == 0:
                _warn_rescale_fallback()
                _rescale_any(grad, f)
                return
            if rc != 0:
                # Before the first block nothing is scaled (the fallback
                # redoes it all); after, the blocks share one key, and a
                # failure there is not recoverable.
                try:
                    _lib.check(lib, rc, h, "tuned_cross_entropy_rescale")
                except TunedError as exc:
                    exc.blocks_done = k
                    raise

    _cuda_call(grad, "tuned_cross_entropy_rescale", run, lambda: _rescale_any(grad, f),
               inplace=True)


# ------------------------------------------------------ fake, autograd --

def _fused_fake(logits, labels, grad_scale, scale, smoothing, z_loss, ignore_index, softcap=0.0):
    loss, lse = _row_outputs(logits, labels)
    return loss, lse, _grad_like(logits)


def _fused_inplace_fake(logits, labels, grad_scale, scale, smoothing, z_loss, ignore_index,
                        softcap=0.0):
    return _row_outputs(logits, labels)


def _loss_fake(logits, labels, scale, smoothing, z_loss, ignore_index, softcap=0.0):
    return _row_outputs(logits, labels, 3)


def _backward_fake(logits, labels, lse, grad_output, scale, smoothing, z_loss, ignore_index,
                   softcap=0.0, lse_lo=None):
    return _grad_like(logits)


def _rescale_fake(grad, factor):
    return None


def _save_rows(ctx, inputs, output):
    # The operators' own autograd (a call of the operator with inputs that
    # need gradients): the per-row loss's gradient by the backward
    # operator; lse (and the fused gradient) are not differentiable.
    logits, labels = inputs[0], inputs[1]
    # softcap has a default: a call that leaves it out has none
    ctx.params = tuple(inputs[2 + ctx.extra:]) + (0.0,) * (7 + ctx.extra - len(inputs))
    ctx.mark_non_differentiable(*output[1:])
    # the loss operator's third output is the lse's low part (the fused
    # one's is its gradient)
    ctx.save_for_backward(logits, labels, output[1], output[2] if ctx.extra == 0 else None)


def _rows_grad(ctx, dloss, *unused):
    logits, labels, lse, lse_lo = ctx.saved_tensors
    grad = _BACKWARD(logits, labels, lse, dloss, *ctx.params, lse_lo=lse_lo)
    return (grad, None) + (None,) * (len(ctx.params) + ctx.extra)


def _save_fused(ctx, inputs, output):
    ctx.extra = 1  # grad_scale
    _save_rows(ctx, inputs, output)


def _save_loss(ctx, inputs, output):
    ctx.extra = 0
    _save_rows(ctx, inputs, output)


def _define(name, schema, any_impl, cuda_impl, fake, mutates=(), grad=None, setup=None):
    """Registers tuned::<name> once per process (a second copy of this
    package uses the first's); its OpOverload."""
    try:
        return getattr(torch.ops.tuned, name).default
    except (AttributeError, RuntimeError):
        pass
    op = torch.library.custom_op(f"tuned::{name}", any_impl, mutates_args=mutates, schema=schema)
    op.register_kernel("cuda")(cuda_impl)
    op.register_fake(fake)
    if grad is not None:
        op.register_autograd(grad, setup_context=setup)
    return getattr(torch.ops.tuned, name).default


_PARAMS = "float scale, float smoothing, float z_loss, int ignore_index, float softcap=0."
_BACKWARD = _define(
    "cross_entropy_backward",
    f"(Tensor logits, Tensor labels, Tensor lse, Tensor grad_output, {_PARAMS}, "
    "Tensor? lse_lo=None) -> Tensor",
    _backward_any, _backward_cuda, _backward_fake)
_FUSED = _define(
    "cross_entropy_fused",
    f"(Tensor logits, Tensor labels, Tensor grad_scale, {_PARAMS}) "
    "-> (Tensor loss, Tensor lse, Tensor grad)",
    _fused_any, _fused_cuda, _fused_fake, grad=_rows_grad, setup=_save_fused)
_FUSED_INPLACE = _define(
    "cross_entropy_fused_",
    f"(Tensor(a!) logits, Tensor labels, Tensor grad_scale, {_PARAMS}) -> (Tensor loss, Tensor lse)",
    _fused_inplace_any, _fused_inplace_cuda, _fused_inplace_fake, mutates=("logits",))
_LOSS = _define(
    "cross_entropy_loss",
    f"(Tensor logits, Tensor labels, {_PARAMS}) -> (Tensor loss, Tensor lse, Tensor lse_lo)",
    _loss_any, _loss_cuda, _loss_fake, grad=_rows_grad, setup=_save_loss)
_RESCALE = _define("cross_entropy_rescale_", "(Tensor(a!) grad, Tensor factor) -> ()",
                   _rescale_any, _rescale_cuda, _rescale_fake, mutates=("grad",))


class _Ops:
    """The kernels' calls the autograd Function makes: the operators (what
    torch.compile, dispatch modes and tensor subclasses see), or, for
    plain CUDA tensors in eager mode, their CUDA implementations called
    directly. The operators' dispatch costs more host time than the
    kernels take at small shapes (measured on the H200 at 4096 x 32000
    bf16: about 500 us of the call's 830 us), and the direct calls do the
    same work with the same fallbacks."""

    def __init__(self, fused, fused_inplace, loss, backward, rescale):
        self.fused, self.fused_inplace, self.loss = fused, fused_inplace, loss
        self.backward, self.rescale = backward, rescale


def _direct_outputs(ctx, loss, lse, argmax):
    """A direct call's (loss, lse, z: None[, argmax as int64]), the last
    two not differentiable."""
    ctx.mark_non_differentiable(lse)
    if argmax is None:
        return loss, lse, None
    argmax = argmax.long()
    ctx.mark_non_differentiable(argmax)
    return loss, lse, None, argmax


class _CrossEntropyFn(torch.autograd.Function):
    """The kernel path's autograd: mean and sum run the fused operator and
    rescale its gradient in the backward; none, and mean and sum with
    split, run the loss operator and the backward operator from the saved
    lse. Returns (loss, lse, z, argmax); lse, z and argmax are not
    differentiable (the loss includes the z term); z is None unless
    want_z; argmax (int64) only with want_argmax: the kernel's on the
    direct path, else torch.argmax of the capped logits (one more read)."""

    @staticmethod
    def forward(ctx, x, labels, scale, smoothing, z_loss, ignore_index, reduction, inplace,
                divisor, need_grad, ops, want_z, softcap=0.0, want_argmax=False, split=False):
        ctx.reduction = reduction
        ctx.params = (scale, smoothing, z_loss, ignore_index, softcap)
        ctx.backward_done = False
        ctx.ops = ops
        ctx.direct = False
        # the backward reads the logits again from the saved lse (split):
        # reduction none, or mean and sum asked so
        ctx.split = need_grad and (split or reduction == "none")
        # a sum over a count the caller gives (accumulated batches): carried
        # by the kernel's gradient, so that the upstream gradient stays 1 and
        # the backward moves nothing
        per_count = (torch.as_tensor(divisor, dtype=torch.float32,
                                     device=x.device).reshape(()).reciprocal()
                     if reduction == "sum" and divisor is not None else None)
        argmax = (torch.empty(labels.shape, dtype=labels.dtype, device=x.device)
                  if want_argmax and ops is _DIRECT and x.dim() == 2 else None)
        if (ops is _DIRECT and need_grad and not ctx.split and not want_z
                and x.dim() == 2):
            r = _ce_direct.fused(x, labels, scale, smoothing, z_loss, ignore_index,
                                 reduction == "mean", per_count, inplace, softcap, argmax)
            if r is not None:
                loss, lse, grad = r
                ctx.direct = True
                ctx.save_for_backward(grad)
                return _direct_outputs(ctx, loss, lse, argmax)
        if (ops is _DIRECT and reduction != "none" and (ctx.split or not need_grad)
                and not want_z and x.dim() == 2):
            # the loss kernel with the reduction in libtuned's call: a split
            # mean or sum, or no gradient wanted now (evaluation, no_grad)
            mean = reduction == "mean"
            r = _ce_direct.loss(x, labels, scale, smoothing, z_loss, ignore_index, softcap,
                                argmax, lse_lo=ctx.split,
                                reduction=_lib.REDUCTION_MEAN if mean else _lib.REDUCTION_SUM,
                                grad_scale=per_count)
            if r is not None:
                loss, lse, lse_lo, work = r
                ctx.direct = True
                if ctx.split:
                    # the mean's count is made again in the backward's call
                    # (its workspace: work's last floats); a sum's divisor
                    # is one factor of the upstream gradient
                    ctx.save_for_backward(x, labels, lse, lse_lo, work, per_count)
                return _direct_outputs(ctx, loss, lse, argmax)
        gs = None
        if reduction == "mean":
            # 1/n_valid on the device: no host sync (n_valid 0: inf, and
            # the loss 0 * inf = NaN, as torch's 0/0)
            gs = (labels != ignore_index).sum().to(torch.float32).reciprocal()
        elif reduction == "sum":
            gs = (per_count if per_count is not None
                  else torch.ones((), dtype=torch.float32, device=x.device))
        if ctx.split or not need_grad:
            # the loss kernel, one read: a split backward's forward, or no
            # gradient wanted now (evaluation, no_grad)
            r = (_ce_direct.loss(x, labels, scale, smoothing, z_loss, ignore_index, softcap,
                                 argmax, lse_lo=ctx.split)
                 if ops is _DIRECT and x.dim() == 2 else None)
            if r is not None:
                ctx.direct = True
                loss, lse, lse_lo = r[:3]
            else:
                argmax = None
                loss, lse, lse_lo = ops.loss(x, labels, scale, smoothing, z_loss, ignore_index,
                                             softcap)
            if ctx.split:
                # mean and sum: the upstream gradient times gs, per call
                ctx.save_for_backward(x, labels, lse, lse_lo, None, gs)
        else:
            if want_argmax:
                # the in-place gradient replaces the logits: their argmax first
                argmax = None
                if inplace:
                    argmax = _argmax_torch(x, softcap)
            if inplace:
                loss, lse = ops.fused_inplace(x, labels, gs, scale, smoothing, z_loss,
                                              ignore_index, softcap)
                grad = x
            else:
                loss, lse, grad = ops.fused(x, labels, gs, scale, smoothing, z_loss,
                                            ignore_index, softcap)
            ctx.save_for_backward(grad)
        z = None
        if want_z:
            if z_loss != 0.0:
                zero = torch.zeros((), dtype=torch.float32, device=x.device)
                z = torch.where(labels != ignore_index, z_loss * lse.square(), zero)
            else:
                z = torch.zeros_like(lse)
        if gs is not None:
            loss = loss.sum() * gs
            if z is not None:
                z = z.sum() * gs
        if want_argmax and argmax is None:
            argmax = _argmax_torch(x, softcap)
        elif argmax is not None:
            argmax = argmax.long()
        ctx.mark_non_differentiable(lse)
        if z is not None:
            ctx.mark_non_differentiable(z)
        if argmax is None:
            return loss, lse, z
        ctx.mark_non_differentiable(argmax)
        return loss, lse, z, argmax

    @staticmethod
    def backward(ctx, dloss, dlse, dz, *dargmax):
        if ctx.backward_done and not ctx.split:
            raise RuntimeError("tuned.cross_entropy: the backward of reduction 'mean' or 'sum' "
                               "runs once (its gradient, computed in the forward, is rescaled "
                               "in place); for a second backward pass split=True")
        ctx.backward_done = True
        if ctx.split:
            # work: a direct mean's buffer (its count made again there);
            # factor: the reduction's scale of the upstream gradient
            x, labels, lse, lse_lo, work, factor = ctx.saved_tensors
            go = dloss if factor is None else _f32(dloss) * factor
            grad = (_ce_direct.backward(x, labels, lse, go, *ctx.params, lse_lo=lse_lo,
                                        mean_work=work)
                    if ctx.direct else None)
            if grad is None:
                if work is not None:
                    # the mean's count made again, in torch
                    ignore_index = ctx.params[3]
                    go = _f32(dloss) * (labels != ignore_index).sum().to(
                        torch.float32).reciprocal()
                go = _f32(go)
                if ctx.reduction != "none":
                    go = go.reshape(1)
                grad = ctx.ops.backward(x, labels, lse, go, *ctx.params, lse_lo=lse_lo)
        else:
            # The forward's gradient assumed an upstream gradient of 1:
            # times the real one on the device (nothing moved when it is 1).
            # Its buffer is reused, so this backward runs once.
            (grad,) = ctx.saved_tensors
            if not (ctx.direct and _ce_direct.rescale(grad, dloss)):
                ctx.ops.rescale(grad, _f32(dloss).reshape(1))
        return (grad,) + (None,) * 14


_OPERATORS = _Ops(_FUSED, _FUSED_INPLACE, _LOSS, _BACKWARD, _RESCALE)
_DIRECT = _Ops(_fused_cuda, _fused_inplace_cuda, _loss_cuda, _backward_cuda, _rescale_cuda)


# ------------------------------------------------------------ the call --

def _check_args(input, target, reduction, label_smoothing, z_loss, scale, softcap,
                inplace_backward, split=False):
    if not isinstance(input, torch.Tensor) or not isinstance(target, torch.Tensor):
        raise TypeError("tuned.cross_entropy: input and target must be tensors")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"tuned.cross_entropy: reduction {reduction!r} (none, sum or mean)")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"tuned.cross_entropy: label_smoothing {label_smoothing} "
                         "(it must be in [0, 1])")
    if not (z_loss >= 0.0 and math.isfinite(z_loss)):
        raise ValueError(f"tuned.cross_entropy: z_loss {z_loss} (it must be >= 0 and finite)")
    if not (scale > 0.0 and math.isfinite(scale)):
        raise ValueError(f"tuned.cross_entropy: scale {scale} (it must be positive and finite)")
    if softcap is not None and not (softcap > 0.0 and math.isfinite(softcap)):
        raise ValueError(f"tuned.cross_entropy: softcap {softcap} "
                         "(None, or positive and finite)")
    if inplace_backward and split:
        raise ValueError("tuned.cross_entropy: inplace_backward writes the fused kernel's "
                         "gradient over the logits; split=True has none to write")
    if inplace_backward and reduction == "none":
        raise ValueError("tuned.cross_entropy: inplace_backward needs reduction 'mean' or "
                         "'sum' (the gradient is written in the forward)")
    if not input.dtype.is_floating_point or input.dim() == 0:
        raise ValueError(f"tuned.cross_entropy: input must be floating logits (..., C), not a "
                         f"{input.dim()}-d {input.dtype} tensor")
    if target.dtype.is_floating_point or target.dtype.is_complex or target.dtype == torch.bool:
        raise ValueError(f"tuned.cross_entropy: target must hold class indices (an integer "
                         f"tensor), not {target.dtype} (class probabilities are not supported)")
    if target.device != input.device:
        raise ValueError(f"tuned.cross_entropy: target on {target.device}, input on "
                         f"{input.device} (they must be on one device)")
    if tuple(target.shape) != tuple(input.shape[:-1]):
        raise ValueError(f"tuned.cross_entropy: target of shape {tuple(target.shape)} for input "
                         f"of shape {tuple(input.shape)} (expected {tuple(input.shape[:-1])}: "
                         "the classes are input's last dimension)")


def _argmax_torch(x, softcap):
    """Per row, the lowest column of the largest capped logit (a NaN the
    largest), as the kernels write it; int64."""
    return _softcap_torch(x, softcap).argmax(-1)


def _plan(x):
    """None when x goes to the kernels, else (key, reason)."""
    if x.device.type not in ("cuda", "meta"):
        return "device", f"a {x.device.type} tensor"
    if x.dtype not in _DTYPES:
        return "dtype", f"dtype {x.dtype}"
    if x.numel() == 0:
        return "empty", "an empty tensor"
    cols = x.shape[-1]
    if cols > _dispatch.MAX_COLS or x.numel() // cols > _dispatch.MAX_ROWS:
        return "size", f"{x.numel() // cols} rows of {cols} classes exceed tuned's limits"
    if (x.is_cuda and type(x) is torch.Tensor and not _compiling()
            and not _dispatch_modes()):
        if not all(_lib.has(fn) for fn in _lib.CROSS_ENTROPY_EXPORTS):
            return "library", "libtuned has no cross-entropy kernels (tuned_cross_entropy)"
        try:
            _library()
        except (LibraryError, TunedError, ValueError) as exc:
            return "library", f"libtuned is not usable ({exc})"
    return None


def _rows(x):
    """x as the operators take it: (R, V) rows with one stride (a view),
    (B, T, V) whose batch elements are such rows, ordered and apart (a
    view: one kernel call per batch element), else a contiguous copy."""
    if x.stride(-1) != 1 and x.shape[-1] > 1:
        return x.contiguous().view(-1, x.shape[-1])
    if _dispatch.rows_layout(tuple(x.shape), x.stride()) is not None:
        return x if x.dim() == 2 else x.view(-1, x.shape[-1])
    if (x.dim() == 3 and _dispatch.rows_layout(tuple(x.shape[1:]), x.stride()[1:]) is not None
            and x.stride(0) >= x.stride(1) * (x.shape[1] - 1) + x.shape[2]):
        return x
    return x.contiguous().view(-1, x.shape[-1])


def _labels(target, shape):
    """target as the kernels read it: int32 or int64, contiguous."""
    t = target.reshape(shape)
    if t.dtype not in (torch.int32, torch.int64):
        t = t.long()
    return t.contiguous()


def _kernel_path(x, target, ignore_index, reduction, label_smoothing, z_loss, scale,
                 inplace_backward, num_items=None, want_z=True, softcap=None,
                 want_argmax=False, split=False):
    """(loss, lse, z) by the kernels, and argmax after them with
    want_argmax: through the operators, or for plain CUDA tensors in eager
    mode their implementations directly (_Ops); any device (the CPU's run
    the torch formula). z is None unless want_z. split: mean and sum by
    the loss kernel, then the backward kernel (reduction none always)."""
    lead = tuple(x.shape[:-1])
    x2 = _rows(x)
    labels = _labels(target, x2.shape[:-1])
    need_grad = torch.is_grad_enabled() and x.requires_grad
    direct = (x2.is_cuda and type(x2) is torch.Tensor and type(labels) is torch.Tensor
              and not _compiling() and not _dispatch_modes())
    r = _CrossEntropyFn.apply(x2, labels, float(scale), float(label_smoothing), float(z_loss),
                              int(ignore_index), reduction,
                              bool(inplace_backward) and need_grad, num_items, need_grad,
                              _DIRECT if direct else _OPERATORS, want_z,
                              float(softcap or 0.0), bool(want_argmax), bool(split))
    loss, lse, z = r[:3]
    argmax = r[3] if want_argmax else None
    if reduction == "none":
        loss = loss.view(lead)
        if z is not None:
            z = z.view(lead)
    if not want_argmax:
        return loss, lse.view(lead), z
    return loss, lse.view(lead), z, argmax.view(lead)


def _check_weight(weight, x):
    if not isinstance(weight, torch.Tensor) or tuple(weight.shape) != (x.shape[-1],):
        raise ValueError(f"tuned.cross_entropy: weight must be a tensor of shape "
                         f"({x.shape[-1]},), one weight a class")
    if weight.device != x.device:
        raise ValueError(f"tuned.cross_entropy: weight on {weight.device}, input on {x.device}")


def _class_weighted(x, target, weight, ignore_index, reduction, scale, softcap):
    """Class weights by the kernels: each row's unweighted loss (the split
    path, reduction none) times its label's weight, w_y; mean divides by
    the weights' sum over the rows not ignored, as torch. The backward
    kernel then takes the upstream gradient times w_y per row, which is the
    weighted loss's gradient (without label smoothing the weight is one
    factor of the row). A label out of range keeps weight 1 (its loss is
    NaN). Two reads and a write of the logits, not the fused kernel's one
    and one; inplace_backward does not apply (nothing is written in the
    forward)."""
    per, lse = cross_entropy(x, target, ignore_index=ignore_index, reduction="none",
                             scale=scale, softcap=softcap, return_lse=True)
    cols = x.shape[-1]
    labels = target.long()
    valid = labels != ignore_index
    inside = valid & (labels >= 0) & (labels < cols)
    safe = torch.where(inside, labels, torch.zeros_like(labels))
    w = weight.to(per.dtype)[safe]
    one = torch.ones((), dtype=per.dtype, device=per.device)
    w = torch.where(inside, w, torch.where(valid, one, torch.zeros_like(one)))
    rows = per * w
    if reduction == "none":
        loss = rows
    elif reduction == "sum":
        loss = rows.sum()
    else:
        loss = rows.sum() / w.sum()
    return loss, lse, torch.zeros_like(lse if reduction == "none" else loss).detach()


def _weighted(x, target, weight, ignore_index, reduction, label_smoothing, z_loss, scale):
    """Class weights: F.cross_entropy on x * scale (no z-loss)."""
    if z_loss != 0.0:
        raise ValueError("tuned.cross_entropy: z_loss with class weights is not supported")
    xs = x if scale == 1.0 else x * scale
    cols = x.shape[-1]
    loss = torch.nn.functional.cross_entropy(xs.reshape(-1, cols), target.reshape(-1).long(), weight,
                           ignore_index=ignore_index, reduction=reduction,
                           label_smoothing=label_smoothing)
    lse = torch.logsumexp(xs.detach().to(_compute_dtype(x)), -1)
    if reduction == "none":
        loss = loss.view(target.shape)
    return loss, lse, torch.zeros_like(loss).detach()


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean",
                  label_smoothing=0.0, *, z_loss=0.0, scale=1.0, softcap=None,
                  inplace_backward=False, return_lse=False, return_z_loss=False,
                  num_items=None, return_argmax=False, split=False):
    """Cross-entropy of logits input (..., C) against class indices target
    (...), as torch.nn.functional.cross_entropy where they overlap, with
    the classes in the LAST dimension (the vocabulary of an LM's logits
    (B, T, V)): F.cross_entropy wants them in dimension 1 for inputs of
    more than 2 dimensions; (N, C) and (C,) inputs mean the same in both.

    Per row, with x = scale * c, c = input or its softcap:
        loss = (1 - eps) (lse - x_y) + eps (lse - mean_j x_j) + z_loss lse^2
    eps = label_smoothing, lse = logsumexp(x); rows whose target is
    ignore_index count for nothing; reduction "mean" divides by the count
    of the others (all ignored: NaN, as torch), "sum" adds, "none" gives
    one loss per row (target's shape). The loss is fp32 (fp64 for fp64
    input on the fallback), whatever the logits' dtype.

    z_loss: PaLM's z-loss coefficient (included in the loss). scale:
    the logits' multiplier (a temperature's inverse), fused in the kernel.
    softcap: c = softcap * tanh(input / softcap) (Gemma 2), in the kernel
    on CUDA (no capped copy of the logits; the gradient chained through
    the cap), in torch elsewhere; a logit of -inf (a masked class) stays
    -inf, taking no probability through the cap. inplace_backward
    (mean and sum): the gradient is written over the logits in the
    forward (no extra memory; Liger's trick): the logits are OVERWRITTEN
    and must not be used after the call; the backward runs once.
    return_lse / return_z_loss / return_argmax: return (loss, lse per row,
    z-loss reduced as the loss, argmax per row) with those asked for, in
    that order, none differentiable; argmax (int64, the target's shape) is
    the lowest class of the largest c (a NaN the largest, as
    torch.argmax), for token accuracy: written by the same kernel pass on
    CUDA eager calls, torch.argmax of c otherwise. num_items (reduction "sum"): the loss is
    the sum divided by it (a number or a device tensor: transformers'
    num_items_in_batch under gradient accumulation), the division carried
    by the kernel's gradient, so the backward still moves nothing. Without
    a gradient to compute (torch.no_grad, or logits that do not require
    one), mean and sum run the loss kernel alone: one read, nothing
    written over the logits.

    split (mean and sum; none is always split): PyTorch's way instead of
    the fused kernel: the forward reads the logits once and saves the
    fp32 lse, the backward reads them again and writes the gradient with
    the upstream gradient. One more read of the logits; in exchange no
    logits-sized gradient is held from the forward to the backward, and
    the backward may run more than once (retain_graph).
    inplace_backward does not apply. fp16 logits, mean or sum with a
    gradient, always run split: the fused kernel would round the gradient
    to fp16 at the scale 1/count before a loss scaler's factor reaches it
    (entries under fp16's smallest vanish).

    CUDA fp16/bf16/fp32 logits run libtuned's kernels (the module says
    how), with no host synchronisation: a label out of range gives its
    row a NaN loss and sets a bit that cross_entropy_errors() reads.
    weight (class weights, (C,)): each row's loss times its label's weight,
    the mean over the weights' sum, as torch; by the kernels' split path
    (reduction none, then w_y per row: two reads of the logits), except
    with label smoothing or z-loss, which run F.cross_entropy. CPU
    tensors, other dtypes or no usable libtuned run the same math in torch
    (fp32): with a RuntimeWarning once per reason, or FallbackError in
    strict mode.
    """
    _check_args(input, target, reduction, label_smoothing, z_loss, scale, softcap,
                inplace_backward, split)
    if num_items is not None and reduction != "sum":
        raise ValueError("tuned.cross_entropy: num_items divides a reduction 'sum'")
    if inplace_backward and input.is_leaf and input.requires_grad:
        raise ValueError("tuned.cross_entropy: inplace_backward would write the gradient over a "
                         "leaf tensor that requires grad (its own .grad would alias it): pass "
                         "the logits of a computation, or inplace_backward=False")
    x, t = input, target
    if x.dim() == 1:
        x, t = x.unsqueeze(0), t.unsqueeze(0)
    compiling = _compiling()
    argmax = None
    if weight is not None:
        _check_weight(weight, x)
    if weight is not None and label_smoothing == 0.0 and z_loss == 0.0:
        if return_argmax:
            argmax = _argmax_torch(x.detach(), softcap)
        loss, lse, z = _class_weighted(x, t, weight, ignore_index, reduction, scale, softcap)
        if num_items is not None:
            loss = loss / num_items
    elif weight is not None:
        _dispatch.fall_back(_NAME, "weight", "class weights with label smoothing or z-loss "
                            "are not supported by tuned's kernels", quiet=compiling)
        x = _softcap_torch(x, softcap)
        if return_argmax:
            argmax = _argmax_torch(x.detach(), None)
        loss, lse, z = _weighted(x, t, weight, ignore_index, reduction, label_smoothing,
                                 z_loss, scale)
        if num_items is not None:
            loss, z = loss / num_items, z / num_items
    else:
        reason = _plan(x)
        if reason is not None:
            _dispatch.fall_back(_NAME, *reason, quiet=compiling)
            if return_argmax:
                argmax = _argmax_torch(x.detach(), softcap)
            loss, lse, z = _cross_entropy_torch(x, t, ignore_index, reduction, label_smoothing,
                                                z_loss, scale, softcap)
            if num_items is not None:
                loss, z = loss / num_items, z / num_items
        else:
            # fp16 logits with a gradient run split (the docstring says why)
            r = _kernel_path(x, t, ignore_index, reduction, label_smoothing, z_loss, scale,
                             inplace_backward, num_items, return_z_loss, softcap, return_argmax,
                             split or x.dtype == torch.float16)
            loss, lse, z = r[:3]
            argmax = r[3] if return_argmax else None
    if input.dim() == 1:
        lse = lse.view(())
        if reduction == "none":
            loss = loss.view(())
            z = z.view(()) if z is not None else None
        argmax = argmax.view(()) if argmax is not None else None
    if not (return_lse or return_z_loss or return_argmax):
        return loss
    out = (loss,)
    if return_lse:
        out += (lse,)
    if return_z_loss:
        out += (z,)
    if return_argmax:
        out += (argmax,)
    return out
