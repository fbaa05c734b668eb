"""tuned._ce_direct: the eager fast path of tuned.cross_entropy for plain
CUDA tensors: the fused loss + gradient (reduction mean or sum) as one
libtuned call, which also writes the reduced loss, and the backward's
rescale as another, with no operator dispatch and no torch operation
besides the outputs' allocations; and the split path (reduction none, or
mean and sum with split=True): the loss kernel as one call (the reduced
loss in it for mean and sum), the backward kernel as one call.

Why: at the shapes where the kernel is short (130 us at 4096 x 32000 bf16
on the H200), the host's work is the call's time, and before the kernel
starts it is idle GPU time at every shape. Through the operators a call
took about 830 us of host time there, through their implementations
about 390 us (each torch operation costs 10 to 40 us on that machine's
host; libtuned's own call 9 us).

A call this path does not take (another layout than rows (R, V) with
unit column stride, another device than the current one, a libtuned
error) returns None, and the caller takes the general path, which
reports; an in-place call that libtuned refuses raises instead (the
logits may hold the gradient already). The error word of each device (the label
errors' bits, tuned.cross_entropy_errors) lives here, shared with the
general path."""

import ctypes

import torch

from . import _lib
from .torch_ops import _DTYPES, _current_device, _library, _raw_stream

_errors = {}  # device index -> its error word (int32, one element)


def error_word(x):
    """The error word of x's device (made on first use, never while a CUDA
    graph is being captured: then the call reports no errors)."""
    idx = x.get_device()
    w = _errors.get(idx)
    if w is None:
        if torch.cuda.is_current_stream_capturing():
            return None
        w = torch.zeros(1, dtype=torch.int32, device=x.device)
        _errors[idx] = w
    return w


def options(labels, scale, smoothing, z_loss, ignore_index, reduction, x, softcap=0.0):
    """The tuned_ce_options of a call on logits x (the error word of x's
    device), every pointer but the error word NULL; softcap 0: none."""
    o = _lib.CeOptions()
    o.scale, o.label_smoothing, o.z_loss = scale, smoothing, z_loss
    o.softcap = softcap
    o.ignore_index = ignore_index
    o.reduction = reduction
    o.labels_int32 = int(labels.dtype == torch.int32)
    err = error_word(x)
    o.error = err.data_ptr() if err is not None else None
    return o


def _call_state(x):
    """(lib, handle pointer, dtype code, stream) for a call on x, or None."""
    dt = _DTYPES.get(x.dtype)
    if dt is None or x.dim() != 2 or x.stride(1) != 1 or x.stride(0) < x.shape[1]:
        return None
    dev = x.get_device()
    if dev != _current_device():
        return None
    try:
        lib, h = _library()
    except Exception:  # noqa: BLE001 - the general path says why
        return None
    return lib, h, dt, _raw_stream(dev) or None


def fused(x, labels, scale, smoothing, z_loss, ignore_index, mean, grad_scale, inplace,
          softcap=0.0, argmax=None):
    """tuned_cross_entropy with the gradient over rows x (R, V): (the
    reduced loss, lse per row, the gradient), or None. mean: libtuned
    counts the rows not ignored (the workspace) and the gradient carries
    1/count; else the sum's, times grad_scale (a one-element fp32 device
    tensor) when not None. inplace: the gradient is written over x.
    softcap: the kernel's tanh cap (0: none); argmax: a tensor of the
    labels' dtype, one per row, that the kernel writes (None: none)."""
    st = _call_state(x)
    if st is None:
        return None
    lib, h, dt, stream = st
    rows, cols = x.shape
    # loss rows | workspace (4 floats) in one allocation; the lse and the
    # reduced loss apart (they are returned, and a view returned by a
    # Function may not be changed in place)
    buf = torch.empty(rows + 4, dtype=torch.float32, device=x.device)
    lse = torch.empty(rows, dtype=torch.float32, device=x.device)
    total = torch.empty((), dtype=torch.float32, device=x.device)
    grad = x if inplace else torch.empty_strided(x.shape, x.stride(), dtype=x.dtype,
                                                 device=x.device)
    o = options(labels, scale, smoothing, z_loss, ignore_index,
                 _lib.REDUCTION_MEAN if mean else _lib.REDUCTION_SUM, x, softcap)
    if argmax is not None:
        o.argmax = argmax.data_ptr()
    bp = buf.data_ptr()
    if mean:
        o.workspace = bp + 4 * rows
    elif grad_scale is not None:
        o.grad_output = grad_scale.data_ptr()
    o.total = total.data_ptr()
    rc = lib.tuned_cross_entropy(h, x.data_ptr(), labels.data_ptr(), grad.data_ptr(), bp,
                                 lse.data_ptr(), rows, cols, x.stride(0), dt, ctypes.byref(o),
                                 stream)
    if rc != 0 and inplace:
        # the gradient may be written over x already (a launch after the
        # loss kernel's failed): no fallback can read the logits again
        _lib.check(lib, rc, h, "tuned_cross_entropy (in place)")
    return (total, lse, grad) if rc == 0 else None


def rescale(grad, factor):
    """grad *= factor (one element) by tuned_cross_entropy_rescale: True
    when libtuned did it (nothing moved when factor is 1)."""
    st = _call_state(grad)
    if st is None:
        return False
    lib, h, dt, stream = st
    if factor.dtype != torch.float32 or factor.numel() != 1:
        factor = factor.to(torch.float32).reshape(())
    rows, cols = grad.shape
    return lib.tuned_cross_entropy_rescale(h, grad.data_ptr(), rows, cols, grad.stride(0), dt,
                                           factor.data_ptr(), stream) == 0


def loss(x, labels, scale, smoothing, z_loss, ignore_index, softcap=0.0, argmax=None,
         lse_lo=False, reduction=_lib.REDUCTION_NONE, grad_scale=None):
    """tuned_cross_entropy without a gradient over rows x (R, V): (loss,
    lse, the lse's low part, work), or None. loss: fp32 per row with
    reduction none, else the reduced loss (one element: the sum, times
    grad_scale when not None (sum), or the mean); the lse's low part None
    unless lse_lo (a backward's); work: with reduction mean, the buffer
    whose last 4 floats are the count's workspace (a split backward's,
    mean_work), else None. Allocations apart, not views of one: the loss
    is returned to the user, who may change it in place (autograd refuses
    that on a view a Function returned), and the others are saved."""
    st = _call_state(x)
    if st is None:
        return None
    lib, h, dt, stream = st
    rows, cols = x.shape
    mean = reduction == _lib.REDUCTION_MEAN
    # per row (none), or the rows' losses | the mean's workspace (scratch)
    loss_rows = torch.empty(rows + 4 * mean, dtype=torch.float32, device=x.device)
    lse = torch.empty(rows, dtype=torch.float32, device=x.device)
    lo = torch.empty(rows, dtype=torch.float32, device=x.device) if lse_lo else None
    o = options(labels, scale, smoothing, z_loss, ignore_index, reduction, x, softcap)
    total = None
    if reduction != _lib.REDUCTION_NONE:
        total = torch.empty((), dtype=torch.float32, device=x.device)
        o.total = total.data_ptr()
    if mean:
        o.workspace = loss_rows.data_ptr() + 4 * rows
    elif grad_scale is not None:
        o.grad_output = grad_scale.data_ptr()
    if argmax is not None:
        o.argmax = argmax.data_ptr()
    if lo is not None:
        o.lse_lo = lo.data_ptr()
    rc = lib.tuned_cross_entropy(h, x.data_ptr(), labels.data_ptr(), None, loss_rows.data_ptr(),
                                 lse.data_ptr(), rows, cols, x.stride(0), dt, ctypes.byref(o),
                                 stream)
    if rc != 0:
        return None
    if total is None:
        return loss_rows, lse, lo, None
    return total, lse, lo, loss_rows if mean else None


def backward(x, labels, lse, grad_output, scale, smoothing, z_loss, ignore_index, softcap=0.0,
             out=None, class_offset=0, classes=0, lse_lo=None, mean_work=None):
    """tuned_cross_entropy_backward over rows x (R, V) from the saved lse
    (fp32, contiguous) and grad_output (fp32: one a row, or one for every
    row): the gradient, into out (x itself: in place; default a new tensor
    of x's dtype and strides), or None. class_offset and classes: x is a
    slice of rows of `classes` classes (tuned_ce_options'; a linear
    cross-entropy's block of the vocabulary), labels and lse the whole
    rows'. lse_lo: the forward's low parts of the lse (fp32, contiguous),
    or None. mean_work: the gradient of a mean (grad_output one value,
    over the count of rows not ignored, which libtuned counts into this
    buffer's last 4 floats: loss's work), or None."""
    st = _call_state(x)
    if st is None:
        return None
    lib, h, dt, stream = st
    rows, cols = x.shape
    if mean_work is not None and grad_output.numel() != 1:
        return None
    if grad_output.dim() == 1 and grad_output.numel() == rows and rows > 1 and \
            grad_output.stride(0) == 0:
        # one value for every row (the expanded gradient of a sum): that
        # value, not a rows-long copy (a kernel and an allocation)
        grad_output = grad_output[:1]
    if grad_output.dtype != torch.float32 or not grad_output.is_contiguous():
        grad_output = grad_output.to(torch.float32).contiguous()
    if grad_output.numel() not in (1, rows) or lse.dtype != torch.float32 or \
            not lse.is_contiguous():
        return None
    if lse_lo is not None and (lse_lo.dtype != torch.float32 or not lse_lo.is_contiguous()):
        return None
    per_row = grad_output.numel() == rows and mean_work is None
    grad = out if out is not None else torch.empty_strided(x.shape, x.stride(), dtype=x.dtype,
                                                           device=x.device)
    red = (_lib.REDUCTION_MEAN if mean_work is not None
           else _lib.REDUCTION_NONE if per_row else _lib.REDUCTION_SUM)
    o = options(labels, scale, smoothing, z_loss, ignore_index, red, x, softcap)
    o.grad_output = grad_output.data_ptr()
    if mean_work is not None:
        o.workspace = mean_work.data_ptr() + 4 * (mean_work.numel() - 4)
    o.class_offset, o.classes = class_offset, classes
    if lse_lo is not None:
        o.lse_lo = lse_lo.data_ptr()
    rc = lib.tuned_cross_entropy_backward(h, x.data_ptr(), labels.data_ptr(), lse.data_ptr(),
                                          grad.data_ptr(), rows, cols, x.stride(0), dt,
                                          ctypes.byref(o), stream)
    return grad if rc == 0 else None
