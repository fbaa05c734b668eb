"""What goes to libtuned and what falls back to torch, without torch.

tuned.softmax and tuned.log_softmax (torch_ops.py) ask plan() whether a
tensor can go to the custom operators: a CUDA (or meta, or fake) tensor of
fp16, bf16 or fp32, not empty, whose softmax dimension has its elements
adjacent in memory (the last dimension, or another one when the tensor is
a transposed view of rows), in libtuned's size limits. Everything else is
computed by torch, with a warning the first time for each reason, or a
FallbackError in strict mode.

The decisions read only a tensor's shape, strides, dtype and device, so
they are plain Python over sequences: the tests check them on CI, where
torch is not installed, with stand-in tensors.
"""

import warnings

from . import _environ
from .errors import FallbackError

# libtuned's limits (include/tuned.h, tuned_softmax).
MAX_ROWS = 2147483647
MAX_COLS = 2147483392

_strict = _environ.flag("TUNED_STRICT")
_warned = set()


def set_strict(on=True):
    """Strict mode on (or off): a call that would fall back to torch raises
    FallbackError instead. Starts as $TUNED_STRICT says (1, yes, true, on;
    unset or empty: off)."""
    global _strict
    _strict = bool(on)


def strict():
    """Whether strict mode is on."""
    return _strict


def fall_back(op, key, text, quiet=False, cause=None):
    """Says that tuned.<op> runs torch.<op> for this call: a RuntimeWarning
    the first time for each (op, key) (none when quiet: under torch.compile,
    where a warning would break the graph), FallbackError in strict mode."""
    if _strict:
        raise FallbackError(f"tuned.{op}: {text} (strict mode: no fallback to torch.{op})") from cause
    if not quiet and (op, key) not in _warned:
        _warned.add((op, key))
        warnings.warn(f"tuned.{op}: {text}; using torch.{op} instead", RuntimeWarning, stacklevel=4)


def rows_layout(sizes, strides):
    """(rows, cols, row_stride) when a tensor of these sizes and strides is
    rows of its last dimension with one stride between rows (what libtuned
    takes, in place); None otherwise."""
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


def plan(x, dim, dtypes):
    """How tuned.<op>(x, dim) runs: (None, moved) to call the operator on x
    with dimension moved (None: dim is the last one) moved last, or
    ((key, text), None) to fall back to torch for that reason. dtypes: the
    supported torch dtypes. IndexError for a dim out of range, as torch."""
    nd = x.dim()
    if x.device.type not in ("cuda", "meta"):
        return (("device", f"a {x.device.type} tensor"), None)
    if x.dtype not in dtypes:
        return (("dtype", f"dtype {x.dtype}"), None)
    if nd == 0 or x.numel() == 0:
        return (("empty", "an empty or 0-d tensor"), None)
    if not -nd <= dim < nd:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], "
                         f"but got {dim})")
    d = dim + nd if dim < 0 else dim
    sizes, strides = list(x.shape), list(x.stride())
    moved = None
    if d != nd - 1:
        # Another dimension goes last by a view (no copy) when its elements
        # are adjacent and the rest are rows: a transposed tensor.
        sizes.append(sizes.pop(d))
        strides.append(strides.pop(d))
        if (strides[-1] != 1 and sizes[-1] != 1) or rows_layout(sizes, strides) is None:
            return (("dim", f"softmax over dim {dim} of a {nd}-d tensor whose elements along "
                            "it are not adjacent in memory"), None)
        moved = d
    cols = sizes[-1]
    if x.numel() // cols > MAX_ROWS or cols > MAX_COLS:
        return (("size", f"{x.numel() // cols} rows of {cols} elements exceed tuned's limits"), None)
    return (None, moved)
