"""tuned's softmax and log_softmax as torch operators (torch.library).

Importing this module imports torch and registers four custom operators:

    tuned::softmax(Tensor x, float scale=1.0) -> Tensor
        softmax(scale * x) over the last dimension
    tuned::log_softmax(Tensor x, float scale=1.0) -> Tensor
        log_softmax(scale * x) over the last dimension
    tuned::softmax_backward(Tensor y, Tensor dy) -> Tensor
        dx = y * (dy - sum(dy * y)), y the softmax's output
    tuned::log_softmax_backward(Tensor y, Tensor dy) -> Tensor
        dx = dy - exp(y) * sum(dy), y the log_softmax's output

Each has a CUDA kernel, a kernel for every other device (torch's own
formula, so that the ops exist and can be checked anywhere), a fake (meta)
implementation for torch.compile and FakeTensorMode, and an autograd
formula: the forwards' backward is the backward op (times scale), and the
backwards' own (second order) is written in torch.

Which path each CUDA kernel takes (tuned.kernel_paths() says it at run
time, so that a benchmark can report it):

    softmax               libtuned's tuned_softmax; with scale != 1
                          tuned_softmax_scaled (the scale fused), or, from a
                          libtuned without it, x * scale computed by torch
                          into a buffer first.
    log_softmax           tuned_log_softmax when libtuned exports it, else
                          torch.log_softmax (of x * scale).
    softmax_backward      tuned_softmax_backward when exported, else
                          _softmax_backward_torch.
    log_softmax_backward  tuned_log_softmax_backward when exported, else
                          _log_softmax_backward_torch.

The exports are read when libtuned is loaded (_lib.has): the day a kernel
lands in libtuned, its operator runs it, with no change here.

Outputs. The forwards' output has x's strides when x is rows with a stride
between them (row slices: libtuned reads and writes rows at one stride),
else it is contiguous; inputs that are not rows of the last dimension are
made contiguous first. The backwards' output is contiguous. The fake
implementations apply the same rule, so compiled graphs see the real
strides.

tuned.softmax(x, dim=-1, *, scale=1.0, dtype=None) and tuned.log_softmax
take torch.softmax's arguments (dtype: x is cast first, as torch does).
A CUDA tensor of fp16, bf16 or fp32 whose dim has its elements adjacent in
memory (the last, or a transposed view's) goes to the operator; anything
else (a CPU tensor, another dtype, a dim whose elements are apart, an empty
tensor, no usable libtuned, a libtuned call that fails) to torch.softmax /
torch.log_softmax, with a RuntimeWarning the first time for each reason, or
a FallbackError in strict mode (tuned.set_strict(True), or TUNED_STRICT=1).

Host time. An eager call on a plain CUDA tensor, under no dispatch mode,
runs the CUDA kernels without the dispatcher, as tuned.softmax did before
the operators existed (with autograd: through _EagerAutograd, the same
kernels and formula): on the H200, torch.ops.tuned.softmax costs 18 us of
host time a call, 30 us with autograd, against 8 us for the direct call
(8.2 before the operators existed) and 16 us with autograd (15.8 before);
test_torch_ops_gpu.py measures them. Calls under
torch.compile, on fake or meta tensors, or under a dispatch mode go
through torch.ops.tuned.*.
"""

import torch

from . import _dispatch, _lib
from . import handle as _handle
from .errors import LibraryError, TunedError

__all__ = ["log_softmax", "softmax"]

_DTYPES = {torch.float16: _lib.FP16, torch.bfloat16: _lib.BF16, torch.float32: _lib.FP32}
_Tensor = torch.Tensor
_C = torch._C
_grad_enabled = _C.is_grad_enabled
_compiling = torch.compiler.is_compiling
_dispatch_modes = getattr(_C, "_len_torch_dispatch_stack", lambda: 0)
# The calls torch's own generated code uses: torch.cuda.current_stream()
# builds a Stream object each call (5 us of host time on the H100).
_current_device = getattr(_C, "_cuda_getDevice", None) or torch.cuda.current_device
_raw_stream = getattr(_C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)

# (tuned_softmax, the default Handle) once the handle is open: the fast
# paths' whole state. The Handle, not its pointer: a closed handle's
# pointer is None (the call is skipped), never a freed tuned_handle.
_fast = None


def _library():
    """(the library, the default handle's pointer); raises LibraryError,
    TunedError or ValueError when the default handle cannot open. A closed
    default handle is replaced by a new one (default_handle opens it)."""
    global _fast
    h = _handle._default or _handle.default_handle()
    if _fast is None or _fast[1] is not h:
        _fast = (h._lib.tuned_softmax, h)
    return h._lib, h._live()


def _softmax_rows(x, dt):
    """tuned_softmax of a contiguous CUDA tensor of a supported dtype on the
    current device, or None where this quick path does not apply (the
    handle not open yet, another device, limits) or the call failed (the
    general path then calls again, and says why or raises in strict mode)."""
    fast = _fast
    n = x.numel()
    if fast is None or n == 0 or x.dim() == 0:
        return None
    h = fast[1]._h
    if not h:
        return None  # closed: the general path opens the default handle again
    cols = x.shape[-1]
    rows = n // cols
    dev = x.get_device()
    if rows > _dispatch.MAX_ROWS or cols > _dispatch.MAX_COLS or dev != _current_device():
        return None
    y = torch.empty_like(x)
    rc = fast[0](h, x.data_ptr(), y.data_ptr(), rows, cols, cols, dt, _raw_stream(dev) or None)
    return y if rc == 0 else None


# ------------------------------------------------------------ layouts --

def _layout(x):
    return _dispatch.rows_layout(x.shape, x.stride())


def _forward_out(x, layout):
    """An empty forward output for x: x's strides where x is rows (libtuned
    writes y at x's row stride; contiguous x: empty_like's strides), else
    contiguous. The fake implementations' rule too."""
    if layout is not None:
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _as_forward_out(x, r):
    """r (computed by torch from x) in the forward output's layout."""
    if x.is_contiguous() and r.stride() == x.stride():
        return r
    layout = _layout(x) if x.dim() else None
    if layout is not None:
        if r.stride() == x.stride():
            return r
        return _forward_out(x, layout).copy_(r)
    return _contiguous(r)


def _contiguous(r):
    """r with contiguous strides, those of torch.empty(r.shape) (a size-1
    dimension's stride too, which r.contiguous() leaves as it is)."""
    want, acc = [], 1
    for n in reversed(r.shape):
        want.append(acc)
        acc *= max(n, 1)
    if r.stride() == tuple(reversed(want)):
        return r
    return torch.empty(r.shape, dtype=r.dtype, device=r.device).copy_(r)


def _scaled(x, scale):
    return x if scale == 1.0 else x * scale


# ------------------------------------------------------ torch formulas --

def _softmax_torch(x, scale):
    return torch.softmax(_scaled(x, scale), -1)


def _log_softmax_torch(x, scale):
    return torch.log_softmax(_scaled(x, scale), -1)


def _softmax_backward_torch(y, dy):
    """dx = y * (dy - (dy * y).sum(-1, keepdim=True)), by torch's own kernel
    of that formula (aten::_softmax_backward_data: one pass, fp32 sums), the
    one torch.softmax's autograd runs: the CUDA path until libtuned exports
    tuned_softmax_backward, and the path on other devices."""
    return _contiguous(torch._softmax_backward_data(dy.to(y.dtype), y, -1, y.dtype))


def _log_softmax_backward_torch(y, dy):
    """dx = dy - exp(y) * dy.sum(-1, keepdim=True), by torch's own kernel
    (aten::_log_softmax_backward_data), as _softmax_backward_torch."""
    return _contiguous(torch._log_softmax_backward_data(dy.to(y.dtype), y, -1, y.dtype))


# --------------------------------------------------------- CUDA kernels --

class _Spec:
    """One forward operator: its names, libtuned's kernels, torch's formula."""

    def __init__(self, name, kernel, scaled, torch_op, torch_formula, backward_name):
        self.name = name                    # "softmax"
        self.kernel = kernel                # libtuned's unscaled kernel, or None
        self.scaled = scaled                # libtuned's kernel with a scale
        self.torch_op = torch_op            # torch.softmax: the fallback of tuned.<name>
        self.torch_formula = torch_formula  # (x, scale) -> the last dimension's result
        self.backward_name = backward_name  # libtuned's backward kernel
        self.op = None                      # torch.ops.tuned.<name>.default, once registered
        self.backward_op = None             # torch.ops.tuned.<name>_backward.default
        self.backward_cuda = None           # its CUDA kernel


_SOFTMAX = _Spec("softmax", "tuned_softmax", "tuned_softmax_scaled", torch.softmax,
                 _softmax_torch, "tuned_softmax_backward")
_LOG_SOFTMAX = _Spec("log_softmax", None, "tuned_log_softmax", torch.log_softmax,
                     _log_softmax_torch, "tuned_log_softmax_backward")


def _on_device(x, fn, *args):
    """fn(*args) with x's device current (libtuned runs in the current context)."""
    if x.get_device() != _current_device():
        with torch.cuda.device(x.device):
            return fn(*args)
    return fn(*args)


def _forward_cuda(spec, x, scale):
    """The CUDA kernel of tuned::<spec.name>."""
    dt = _DTYPES.get(x.dtype)
    if spec is _SOFTMAX and scale == 1.0 and dt is not None and x.is_contiguous():
        y = _softmax_rows(x, dt)
        if y is not None:
            return y
    if dt is None or x.dim() == 0:
        _dispatch.fall_back(spec.name, "dtype", f"dtype {x.dtype}" if dt is None else "a 0-d tensor")
        return _as_forward_out(x, spec.torch_formula(x, scale))
    fused = _lib.has(spec.scaled)
    if spec.kernel is None and not fused:
        # libtuned has no kernel of this operator yet: torch's.
        return _as_forward_out(x, spec.torch_formula(x, scale))
    layout = _layout(x)
    y = _forward_out(x, layout)
    if x.numel() == 0:
        return y
    if layout is None:
        x = x.contiguous()
        layout = _layout(x)
    try:
        lib, h = _library()
    except (LibraryError, TunedError, ValueError) as exc:
        _dispatch.fall_back(spec.name, "library", f"libtuned is not usable ({exc})", cause=exc)
        return _as_forward_out(x, spec.torch_formula(x, scale))
    try:
        _on_device(x, _launch_forward, spec, lib, h, x, y, layout, dt, scale, fused)
    except TunedError as exc:
        _dispatch.fall_back(spec.name, ("error", exc.code), f"libtuned failed: {exc}", cause=exc)
        return _as_forward_out(x, spec.torch_formula(x, scale))
    return y


def _launch_forward(spec, lib, h, x, y, layout, dt, scale, fused):
    rows, cols, stride = layout
    stream = _raw_stream(x.get_device()) or None
    if scale == 1.0 and spec.kernel is not None:
        name, rc = spec.kernel, getattr(lib, spec.kernel)(h, x.data_ptr(), y.data_ptr(), rows,
                                                          cols, stride, dt, stream)
    elif fused:
        name, rc = spec.scaled, getattr(lib, spec.scaled)(h, x.data_ptr(), y.data_ptr(), rows,
                                                          cols, stride, dt, scale, stream)
    else:
        # Interim: the scale in torch, into a buffer of y's layout, then the
        # unscaled kernel. The fused scale comes with the new kernels.
        xs = torch.mul(x, scale, out=torch.empty_like(y))
        name, rc = spec.kernel, getattr(lib, spec.kernel)(h, xs.data_ptr(), y.data_ptr(), rows,
                                                          cols, stride, dt, stream)
    if rc != 0:
        _lib.check(lib, rc, h, name)


def _backward_cuda(name, kernel, formula, y, dy):
    """The CUDA kernel of tuned::<name>: libtuned's kernel where exported,
    else torch's formula."""
    dt = _DTYPES.get(y.dtype)
    if dt is None or y.dim() == 0 or y.numel() == 0 or not _lib.has(kernel) \
            or tuple(dy.shape) != tuple(y.shape):
        return formula(y, dy)
    y = y.contiguous()
    dy = dy.to(y.dtype).contiguous()
    dx = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    cols = y.shape[-1]
    try:
        lib, h = _library()
    except (LibraryError, TunedError, ValueError) as exc:
        _dispatch.fall_back(name, "library", f"libtuned is not usable ({exc})", cause=exc)
        return formula(y, dy)
    try:
        _on_device(y, _launch_backward, lib, h, kernel, y, dy, dx, y.numel() // cols, cols, dt)
    except TunedError as exc:
        _dispatch.fall_back(name, ("error", exc.code), f"libtuned failed: {exc}", cause=exc)
        return formula(y, dy)
    return dx


def _launch_backward(lib, h, kernel, y, dy, dx, rows, cols, dt):
    stream = _raw_stream(y.get_device()) or None
    rc = getattr(lib, kernel)(h, y.data_ptr(), dy.data_ptr(), dx.data_ptr(), rows, cols, cols, dt,
                              stream)
    if rc != 0:
        _lib.check(lib, rc, h, kernel)


def _softmax_cuda(x, scale=1.0):
    return _forward_cuda(_SOFTMAX, x, scale)


def _log_softmax_cuda(x, scale=1.0):
    return _forward_cuda(_LOG_SOFTMAX, x, scale)


def _softmax_backward_cuda(y, dy):
    return _backward_cuda("softmax_backward", "tuned_softmax_backward", _softmax_backward_torch,
                          y, dy)


def _log_softmax_backward_cuda(y, dy):
    return _backward_cuda("log_softmax_backward", "tuned_log_softmax_backward",
                          _log_softmax_backward_torch, y, dy)


# -------------------------------------------------- other devices, fake --

def _softmax_any(x, scale=1.0):
    return _as_forward_out(x, _softmax_torch(x, scale))


def _log_softmax_any(x, scale=1.0):
    return _as_forward_out(x, _log_softmax_torch(x, scale))


def _forward_fake(x, scale=1.0):
    return _forward_out(x, _layout(x) if x.dim() else None)


def _backward_fake(y, dy):
    return torch.empty(y.shape, dtype=y.dtype, device=y.device)


# ------------------------------------------------------------ autograd --

def _save_output(ctx, inputs, output):
    ctx.scale = inputs[1]
    ctx.save_for_backward(output)


def _softmax_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    dx = _SOFTMAX_BACKWARD(y, dy)
    return (dx if ctx.scale == 1.0 else dx * ctx.scale), None


def _log_softmax_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    dx = _LOG_SOFTMAX_BACKWARD(y, dy)
    return (dx if ctx.scale == 1.0 else dx * ctx.scale), None


def _save_inputs(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _softmax_backward_grad(ctx, g):
    # dx = y (dy - s), s = sum(dy y): d/d dy = y (g - sum(g y)), a softmax
    # backward of g; d/dy = g (dy - s) - dy sum(g y).
    y, dy = ctx.saved_tensors
    gy = gdy = None
    if ctx.needs_input_grad[0]:
        gy = g * (dy - (dy * y).sum(-1, keepdim=True)) - dy * (g * y).sum(-1, keepdim=True)
    if ctx.needs_input_grad[1]:
        gdy = _SOFTMAX_BACKWARD(y, g)
    return gy, gdy


def _log_softmax_backward_grad(ctx, g):
    # dx = dy - exp(y) sum(dy): d/d dy = g - sum(g exp(y)); d/dy = -g exp(y) sum(dy).
    y, dy = ctx.saved_tensors
    e = y.exp()
    gy = gdy = None
    if ctx.needs_input_grad[0]:
        gy = -g * e * dy.sum(-1, keepdim=True)
    if ctx.needs_input_grad[1]:
        gdy = g - (g * e).sum(-1, keepdim=True)
    return gy, gdy


# ---------------------------------------------------------- registration --

def _define(name, schema, any_impl, cuda_impl, fake, grad, setup):
    """Registers tuned::<name> (once per process: a second copy of this
    package finds it registered and uses it); its OpOverload."""
    try:
        return getattr(torch.ops.tuned, name).default
    except (AttributeError, RuntimeError):
        pass
    op = torch.library.custom_op(f"tuned::{name}", any_impl, mutates_args=(), schema=schema)
    op.register_kernel("cuda")(cuda_impl)
    op.register_fake(fake)
    op.register_autograd(grad, setup_context=setup)
    return getattr(torch.ops.tuned, name).default


_SOFTMAX_BACKWARD = _define("softmax_backward", "(Tensor y, Tensor dy) -> Tensor",
                            _softmax_backward_torch, _softmax_backward_cuda, _backward_fake,
                            _softmax_backward_grad, _save_inputs)
_LOG_SOFTMAX_BACKWARD = _define("log_softmax_backward", "(Tensor y, Tensor dy) -> Tensor",
                                _log_softmax_backward_torch, _log_softmax_backward_cuda,
                                _backward_fake, _log_softmax_backward_grad, _save_inputs)
_SOFTMAX.op = _define("softmax", "(Tensor x, float scale=1.0) -> Tensor", _softmax_any,
                      _softmax_cuda, _forward_fake, _softmax_grad, _save_output)
_SOFTMAX.backward_op, _SOFTMAX.backward_cuda = _SOFTMAX_BACKWARD, _softmax_backward_cuda
_LOG_SOFTMAX.backward_op, _LOG_SOFTMAX.backward_cuda = (_LOG_SOFTMAX_BACKWARD,
                                                        _log_softmax_backward_cuda)
_LOG_SOFTMAX.op = _define("log_softmax", "(Tensor x, float scale=1.0) -> Tensor",
                          _log_softmax_any, _log_softmax_cuda, _forward_fake, _log_softmax_grad,
                          _save_output)


# ------------------------------------------------------------ the calls --

class _EagerAutograd(torch.autograd.Function):
    """Eager calls that need autograd: the operators' CUDA kernels and
    autograd formula without the dispatcher's Python layers (tuned::softmax
    with autograd through the dispatcher costs twice the host time).
    Under torch.compile the operators' own registration is used."""

    @staticmethod
    def forward(ctx, x, spec, scale):
        y = _forward_cuda(spec, x, scale)
        ctx.save_for_backward(y)
        ctx.spec = spec
        ctx.scale = scale
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        spec = ctx.spec
        # Grad mode in a backward: create_graph, so the differentiable operator.
        dx = spec.backward_op(y, dy) if _grad_enabled() else spec.backward_cuda(y, dy)
        return (dx if ctx.scale == 1.0 else dx * ctx.scale), None, None


def softmax(x, dim=-1, *, scale=1.0, dtype=None):
    """Softmax of x * scale over dim, as torch.softmax(x * scale, dim,
    dtype=dtype): libtuned's kernels where they apply (see the module)."""
    if dtype is not None:
        x = x.to(dtype)
    # The eager fast path, written out (each call here is host time): one
    # check of each condition, a cached handle and function, the output the
    # only allocation.
    if (type(x) is _Tensor and x.is_cuda and (dim == -1 or dim == x.dim() - 1)
            and x.is_contiguous() and _fast is not None and not _compiling()
            and not _dispatch_modes()):
        dt = _DTYPES.get(x.dtype)
        if dt is not None:
            if x.requires_grad and _grad_enabled():
                if _in_limits(x):
                    return _EagerAutograd.apply(x, _SOFTMAX, scale)
            elif scale == 1.0:
                y = _softmax_rows(x, dt)
                if y is not None:
                    return y
            elif _in_limits(x):
                return _forward_cuda(_SOFTMAX, x, scale)
    return _forward(_SOFTMAX, x, dim, scale)


def log_softmax(x, dim=-1, *, scale=1.0, dtype=None):
    """Log-softmax of x * scale over dim, as torch.log_softmax(x * scale,
    dim, dtype=dtype): libtuned's kernels where they apply (see the module)."""
    if dtype is not None:
        x = x.to(dtype)
    if (type(x) is _Tensor and x.is_cuda and (dim == -1 or dim == x.dim() - 1)
            and x.is_contiguous() and _fast is not None and not _compiling()
            and not _dispatch_modes() and x.dtype in _DTYPES and _in_limits(x)):
        if x.requires_grad and _grad_enabled():
            return _EagerAutograd.apply(x, _LOG_SOFTMAX, scale)
        return _forward_cuda(_LOG_SOFTMAX, x, scale)
    return _forward(_LOG_SOFTMAX, x, dim, scale)


def _in_limits(x):
    """x is rows of its last dimension that libtuned takes: not 0-d, not
    empty, within its limits."""
    n = x.numel()
    if n == 0 or x.dim() == 0:
        return False
    cols = x.shape[-1]
    return n // cols <= _dispatch.MAX_ROWS and cols <= _dispatch.MAX_COLS


def _fallback(spec, x, dim, scale):
    return spec.torch_op(_scaled(x, scale), dim)


def _forward(spec, x, dim, scale):
    """Every call but the eager fast path: plan, then the operator (or its
    CUDA kernel directly), or torch."""
    compiling = _compiling()
    if not isinstance(x, _Tensor):
        return _fallback(spec, x, dim, scale)  # torch says what is wrong
    reason, moved = _dispatch.plan(x, dim, _DTYPES)
    direct = not compiling and type(x) is _Tensor and x.is_cuda and not _dispatch_modes()
    if reason is None and direct:
        try:
            _library()
        except (LibraryError, TunedError, ValueError) as exc:
            reason = ("library", f"libtuned is not usable ({exc})")
    if reason is not None:
        _dispatch.fall_back(spec.name, *reason, quiet=compiling)
        return _fallback(spec, x, dim, scale)
    xm = x if moved is None else x.movedim(moved, -1)
    if not direct:
        y = spec.op(xm, scale)
    elif x.requires_grad and _grad_enabled():
        y = _EagerAutograd.apply(xm, spec, scale)
    else:
        y = _forward_cuda(spec, xm, scale)
    return y if moved is None else y.movedim(-1, moved)
