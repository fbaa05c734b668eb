"""tuned.softmax for torch tensors.

A CUDA tensor of fp16, bf16 or fp32 whose softmax dimension is the last one,
with unit stride, and whose other dimensions collapse into rows of one
stride, goes to tuned_softmax on the current torch stream of its device.
Anything else (a CPU tensor, another dtype, another dim, a layout that is
not rows, no libtuned, a failing call) goes to torch.softmax, with a
warning the first time for each reason. Gradients flow: the backward pass
is y * (g - sum(g * y)), in torch.
"""

import os
import threading
import warnings

from . import _lib
from .errors import LibraryError, TunedError
from .handle import Handle

_default = None
_default_error = None
_default_lock = threading.Lock()
_warned = set()
_torch = None
_dtypes = None
_function = None
_current_device = None
_raw_stream = None

MAX_ROWS = 2147483647
MAX_COLS = 2147483392


def default_handle():
    """The module's handle, opened on first use: the store and socket from
    the environment, policy $TUNED_POLICY (default "daemon": shapes without
    an exact record are sent to a running daemon to tune; without a daemon
    nothing happens). Raises LibraryError or TunedError when it cannot open."""
    global _default, _default_error
    if _default is not None:
        return _default
    with _default_lock:
        if _default is None:
            if _default_error is not None:
                raise _default_error
            try:
                _default = Handle(policy=os.environ.get("TUNED_POLICY", "daemon"),
                                  tune_time_s=float(os.environ.get("TUNED_TUNE_TIME", "0")))
            except (LibraryError, TunedError, ValueError) as exc:
                _default_error = exc
                raise
    return _default


def _warn_once(key, text):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"tuned.softmax: {text}; using torch.softmax instead", RuntimeWarning,
                      stacklevel=3)


def _setup():
    global _torch, _dtypes, _function, _current_device, _raw_stream
    import torch

    _torch = torch
    _dtypes = {torch.float16: _lib.FP16, torch.bfloat16: _lib.BF16, torch.float32: _lib.FP32}
    # The calls torch's own generated code uses, where
    # torch.cuda.current_stream(device).cuda_stream builds a Stream object
    # each call (on the H100 tuned.softmax cost 14 us of host time a call,
    # 5 us more than the bare ctypes call; with these, 6.6 on the H200).
    c = getattr(torch, "_C", None)
    _current_device = getattr(c, "_cuda_getDevice", None) or torch.cuda.current_device
    _raw_stream = getattr(c, "_cuda_getCurrentRawStream", None) or (
        lambda index: torch.cuda.current_stream(index).cuda_stream)

    class TunedSoftmax(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, handle, rows, cols, stride, dt):
            y = _launch(x, handle, rows, cols, stride, dt)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            gx = y * (g - (g * y).sum(dim=-1, keepdim=True))
            return gx, None, None, None, None, None

    _function = TunedSoftmax


def _rows_layout(x):
    """(rows, cols, row_stride) when x is rows of its last dimension with
    one stride between rows; None otherwise."""
    sizes, strides = x.shape, x.stride()
    cols = sizes[-1]
    if strides[-1] != 1 and cols > 1:
        return None
    outer = [(s, st) for s, st in zip(sizes[:-1], strides[:-1]) if s != 1]
    if not outer:
        return 1, cols, cols
    row_stride = outer[-1][1]
    for (s0, st0), (s1, st1) in zip(outer[:-1], outer[1:]):
        if st0 != st1 * s1:
            return None
    if row_stride < cols:
        return None
    rows = 1
    for s, _ in outer:
        rows *= s
    return rows, cols, row_stride


def _launch(x, handle, rows, cols, stride, dt):
    torch = _torch
    if stride == cols:
        y = torch.empty_like(x)
    else:
        y = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    stream = _raw_stream(x.get_device())
    lib = handle._lib
    rc = lib.tuned_softmax(handle._h, x.data_ptr(), y.data_ptr(), rows, cols, stride, dt,
                           stream or None)
    if rc != 0:
        _lib.check(lib, rc, handle._h, "tuned_softmax")
    return y


def softmax(x, dim=-1, *, handle=None):
    """Softmax of a torch tensor over dim, as torch.softmax(x, dim)."""
    if _torch is None:
        _setup()
    torch = _torch
    if not isinstance(x, torch.Tensor):
        return torch.softmax(x, dim)
    dt = _dtypes.get(x.dtype)
    nd = x.dim()
    reason = layout = None
    if not x.is_cuda:
        reason = ("device", f"a {x.device.type} tensor")
    elif dt is None:
        reason = ("dtype", f"dtype {x.dtype}")
    elif nd == 0 or x.numel() == 0:
        reason = ("empty", "an empty or 0-d tensor")
    elif dim != -1 and (dim if dim >= 0 else dim + nd) != nd - 1:
        reason = ("dim", f"softmax over dim {dim} of a {nd}-d tensor (only the last)")
    else:
        if x.is_contiguous():
            cols = x.shape[-1]
            layout = (x.numel() // cols, cols, cols)
        else:
            layout = _rows_layout(x)
        if layout is None:
            reason = ("layout", "a layout that is not rows of the last dimension "
                                "(call .contiguous() first)")
        elif layout[0] > MAX_ROWS or layout[1] > MAX_COLS:
            reason = ("size", f"{layout[0]} rows of {layout[1]} elements exceed tuned's limits")
    if reason is None:
        try:
            h = handle if handle is not None else (_default or default_handle())
        except (LibraryError, TunedError, ValueError) as exc:
            reason = ("library", f"libtuned is not usable ({exc})")
    if reason is not None:
        _warn_once(reason[0], reason[1])
        return torch.softmax(x, dim)
    rows, cols, stride = layout
    try:
        if x.get_device() != _current_device():
            with torch.cuda.device(x.device):
                return _call(x, h, rows, cols, stride, dt)
        return _call(x, h, rows, cols, stride, dt)
    except TunedError as exc:
        _warn_once(("error", exc.code), f"libtuned failed: {exc}")
        return torch.softmax(x, dim)


def _call(x, h, rows, cols, stride, dt):
    if x.requires_grad and _torch.is_grad_enabled():
        return _function.apply(x, h, rows, cols, stride, dt)
    return _launch(x, h, rows, cols, stride, dt)
