"""tuned.router_topk: a mixture-of-experts router's softmax (or sigmoid, or
sqrt-softplus) and top-k in one kernel, with its backward, as torch
operators.

    weights, ids = tuned.router_topk(logits, k)              # Mixtral, Qwen
    weights, ids = tuned.router_topk(logits, 8, score="sigmoid", bias=b,
                                     num_groups=8, topk_group=4, renorm=True,
                                     scaling=2.5)              # DeepSeek-V3

logits (..., E) fp32, bf16 or fp16, E from 2 to 2048 experts; per row:
score s (softmax over the row, sigmoid, or sqrt(softplus)); the k best
experts by s + bias (bias: E fp32 values, or None; it moves the choice,
never the weight), optionally only among the topk_group best of num_groups
consecutive groups (a group scored by the sum of its two best); ids in
descending order, ties to the lower index, NaN above everything (as
torch.topk orders it; a softmax row whose scores are NaN chooses experts
0 .. k-1); weights = scaling * s of the chosen, divided by their sum with
renorm (softmax with renorm: the softmax over the chosen logits, as
Mixtral computes it). Returns (weights fp32 or bf16, ids int64 or int32) of
shape (..., k); with return_counts also the number of rows that chose each
expert (int32, E); with return_source_rows also each output's row in the
k-major expanded token list a MoE dispatch permutes (int32, (..., k):
i * rows + r for output i of row r, rows the tokens in all), in that
order.

Operators (torch.library; fake implementations for torch.compile, CUDA
graphs, opcheck):

    tuned::router_topk(Tensor logits, Tensor? bias, int k, int score,
        int num_groups, int topk_group, bool renorm, float scaling,
        bool ids_int32, bool counts, bool weights_bf16, bool source_rows)
        -> (Tensor weights, Tensor ids, Tensor counts, Tensor source_rows)
    tuned::router_topk_backward(Tensor logits, Tensor ids, Tensor dweights,
        int k, int score, bool renorm, float scaling) -> Tensor dlogits

On CUDA they run libtuned's tuned_router_topk and
tuned_router_topk_backward (one kernel each, tuned per key: experts, k,
score, groups, renorm); elsewhere, torch's formula of the same rules.
Eager calls on plain CUDA tensors (not compiling, no dispatch mode) skip
the operators: one libtuned call forward (with a gradient, inside an
autograd Function) and one backward; the operators' dispatch cost about
50 us of host time a call on the H200, several times the kernel. An
eager call's arguments are checked once a combination (a _Plan), and the
call costs about 21 us of the H200's host (bench/router_host.py: its two
output tensors 8, the libtuned call with its launch 8.6); torch's
softmax, top-k and renormalisation cost 61. The gradient reaches the
logits only through the weights (the ids are not differentiable; the
direct backward is once_differentiable); the bias gets none, as in the
models that use one (it is updated by the load balance, not by the
loss)."""

import ctypes

import torch

from . import _lib
from . import handle as _handle
from .cross_entropy import _define
from .torch_ops import (_DTYPES, _Tensor, _compiling, _current_device, _dispatch_modes,
                        _grad_enabled, _library, _raw_stream)

__all__ = ["router_topk"]

# torch's marker of a backward with no gradient of its own (a stand-in
# torch without it: the backward as it is)
once_differentiable = getattr(getattr(torch.autograd, "function", None), "once_differentiable",
                              lambda f: f)

_byref = ctypes.byref

SCORES = {"softmax": 0, "sigmoid": 1, "sqrt_softplus": 2}

# Calls that ran libtuned's kernels (benchmarks and tests read it to know
# which path a call took).
libtuned_calls = 0


class _Options(ctypes.Structure):
    """struct tuned_router_options."""

    _fields_ = [
        ("k", ctypes.c_int),
        ("score", ctypes.c_int),
        ("num_groups", ctypes.c_int),
        ("topk_group", ctypes.c_int),
        ("renorm", ctypes.c_int),
        ("scaling", ctypes.c_float),
        ("ids_int32", ctypes.c_int),
        ("weights_bf16", ctypes.c_int),
        ("source_rows", ctypes.c_void_p),
    ]


_P = ctypes.c_void_p
_PROTOTYPES = {
    # h, logits, bias, weights, ids, counts, rows, experts, row_stride, dtype, options, stream
    "tuned_router_topk": (ctypes.c_int, [_P, _P, _P, _P, _P, _P, ctypes.c_int64, ctypes.c_int64,
                                         ctypes.c_int64, ctypes.c_int, ctypes.POINTER(_Options),
                                         _P]),
    # h, logits, ids, dweights, dlogits, rows, experts, row_stride, dtype, options, stream
    "tuned_router_topk_backward": (ctypes.c_int, [_P, _P, _P, _P, _P, ctypes.c_int64,
                                                  ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
                                                  ctypes.POINTER(_Options), _P]),
}


def _bound(lib, name):
    """lib's function name with its prototype, or None when lib lacks it."""
    fn = getattr(lib, name, None)
    if fn is not None and fn.argtypes is None:
        fn.restype, fn.argtypes = _PROTOTYPES[name]
    return fn


def _options(k, score, num_groups, topk_group, renorm, scaling, ids_int32, weights_bf16=False,
             source_rows=None):
    return _Options(k, score, num_groups, topk_group, int(renorm), scaling, int(ids_int32),
                    int(weights_bf16), source_rows)


def _check_options(shape, dtype, k, num_groups, topk_group, scaling):
    """ValueError or TypeError for options that do not fit logits of this
    shape and dtype."""
    e = shape[-1] if len(shape) > 0 else 0
    if not 2 <= e <= 2048:
        raise ValueError(f"tuned.router_topk: logits of shape {tuple(shape)}: the last "
                         "dimension holds the experts, 2 to 2048")
    if not dtype.is_floating_point:
        raise TypeError(f"tuned.router_topk: logits of dtype {dtype} (a float dtype)")
    if not 1 <= k <= min(e, 64):
        raise ValueError(f"tuned.router_topk: k {k} (1 to min(experts, 64) = {min(e, 64)})")
    if not 1 <= num_groups <= 32 or e % num_groups != 0:
        raise ValueError(f"tuned.router_topk: num_groups {num_groups} (1 to 32, dividing the "
                         f"{e} experts)")
    if not 1 <= topk_group <= num_groups:
        raise ValueError(f"tuned.router_topk: topk_group {topk_group} (1 to num_groups "
                         f"{num_groups})")
    if k > topk_group * (e // num_groups):
        raise ValueError(f"tuned.router_topk: k {k} is more than the {topk_group} kept groups "
                         f"of {e // num_groups} experts hold")
    if not (scaling > 0 and scaling < float("inf")):
        raise ValueError(f"tuned.router_topk: scaling {scaling} (positive and finite)")


def _check_bias(logits, bias, e):
    if bias is not None and (bias.shape != (e,) or bias.device != logits.device):
        raise ValueError(f"tuned.router_topk: bias of shape {tuple(bias.shape)} on "
                         f"{bias.device}: ({e},) on {logits.device}")


# ---- torch's formula (every device but CUDA, and the tests' reference) ----

def _scores(x, score):
    F = torch.nn.functional
    if score == 0:
        return torch.softmax(x, -1)
    if score == 1:
        return torch.sigmoid(x)
    return torch.sqrt(F.softplus(x))


def _choose(x, bias, k, score, num_groups, topk_group):
    """ids (rows, k) int64 by the rules, from rows x (fp32)."""
    s = _scores(x, score)
    v = s + bias if bias is not None else s
    if score == 0:
        nan_rows = s.isnan().any(-1, keepdim=True)
        v = torch.where(nan_rows, torch.full_like(v, float("nan")), v)
        order = v if bias is not None else torch.where(nan_rows, v, x)
    else:
        order = v if bias is not None else x
    rows, e = x.shape
    if num_groups > 1:
        size = e // num_groups
        gv = v.reshape(rows, num_groups, size)
        top2 = torch.sort(gv, dim=-1, descending=True, stable=True).values[..., :min(2, size)]
        gscore = top2.sum(-1)
        keep = torch.sort(gscore, dim=-1, descending=True, stable=True).indices[:, :topk_group]
        mask = torch.zeros(rows, num_groups, dtype=torch.bool, device=x.device)
        mask.scatter_(1, keep, True)
        mask = mask.repeat_interleave(size, dim=1)
        # dropped experts order below everything, NaN included
        order = torch.where(mask, order, torch.full_like(order, float("-inf")))
        rank = torch.sort(order, dim=-1, descending=True, stable=True).indices
        # a kept expert before every dropped one, whatever its value
        kept_first = torch.sort((~mask).gather(1, rank).to(torch.int8), dim=-1,
                                stable=True).indices
        return rank.gather(1, kept_first)[:, :k]
    return torch.sort(order, dim=-1, descending=True, stable=True).indices[:, :k]


def _log_scores(x, score):
    """log score up to a constant of the row (softmax: x): renormalised
    weights are the softmax of the chosen ones (s_i / sum s, with no 0 / 0
    where the scores underflow)."""
    if score == 0:
        return x
    if score == 1:
        return torch.nn.functional.logsigmoid(x)
    return torch.where(x < -30, 0.5 * x, 0.5 * torch.log(torch.nn.functional.softplus(x)))


def _weights(x, ids, score, renorm, scaling):
    if not renorm:
        return _scores(x, score).gather(1, ids) * scaling
    w = torch.softmax(_log_scores(x.gather(1, ids), score), -1)
    if score == 0:
        # a row whose softmax is NaN keeps NaN weights
        w = torch.where(torch.softmax(x, -1).isnan().any(-1, keepdim=True),
                        torch.full_like(w, float("nan")), w)
    return w * scaling


def _backward_torch(x, ids, g, score, renorm, scaling):
    """d logits of sum(g * weights) for the chosen ids, from fp32 rows x."""
    xs = x.gather(1, ids)
    if score == 0 and not renorm:
        p = torch.softmax(x, -1)
        s = (g * p.gather(1, ids)).sum(-1, keepdim=True)
        full = torch.zeros_like(x).scatter_add_(1, ids, g)
        return scaling * p * (full - s)
    if score == 0:
        q = torch.softmax(xs, -1)
        d = scaling * q * (g - (g * q).sum(-1, keepdim=True))
    elif renorm:
        # q the shares s_i / sum s (from the log scores), f'/f the log
        # score's slope: dx_m = c q_m (g_m - sum g q) f'/f(x_m)
        q = torch.softmax(_log_scores(xs, score), -1)
        if score == 1:
            slope = torch.sigmoid(-xs)
        else:
            slope = torch.where(xs < -30, torch.full_like(xs, 0.5),
                                torch.sigmoid(xs) / (2 * torch.nn.functional.softplus(xs)))
        d = scaling * q * (g - (g * q).sum(-1, keepdim=True)) * slope
    else:
        sig = torch.sigmoid(xs)
        slope = sig * (1 - sig) if score == 1 else sig / (2 * _scores(xs, score))
        d = scaling * g * slope
    return torch.zeros_like(x).scatter_add_(1, ids, d)


def _router_torch(x, bias, k, score, num_groups, topk_group, renorm, scaling):
    xf = x.float()
    ids = _choose(xf, None if bias is None else bias.float(), k, score, num_groups, topk_group)
    return _weights(xf, ids, score, renorm, scaling), ids


# ---- the operators ----

def _rows(logits):
    x = logits.reshape(-1, logits.shape[-1])
    if x.stride(-1) != 1 or (x.shape[0] > 1 and x.stride(0) < x.shape[1]):
        x = x.contiguous()
    return x


def _source_rows_fit(rows, k):
    """ValueError where source rows of rows x k would pass int32."""
    if rows * k > 2 ** 31:
        raise ValueError(f"tuned.router_topk: source rows of {rows} rows x k {k} are past "
                         "int32's rows")


def _asked(cnt, src, device):
    """counts and source rows with each output not asked for (None) an
    empty tensor of its own (no output of an operator may alias another)."""
    if cnt is None:
        cnt = torch.zeros(0, dtype=torch.int32, device=device)
    if src is None:
        src = torch.zeros(0, dtype=torch.int32, device=device)
    return cnt, src


def _source_rows(rows, k, device):
    """i * rows + r for output i of row r: (rows, k) int32."""
    i = torch.arange(k, dtype=torch.int32, device=device)
    r = torch.arange(rows, dtype=torch.int32, device=device)
    return (i.unsqueeze(0) * rows + r.unsqueeze(1)).contiguous()


def _forward_any(logits, bias, k, score, num_groups, topk_group, renorm, scaling, ids_int32,
                 counts, weights_bf16, source_rows):
    """tuned::router_topk by torch's formula (every device but CUDA)."""
    x = _rows(logits)
    if source_rows:
        _source_rows_fit(x.shape[0], k)
    w, ids = _router_torch(x, bias, k, score, num_groups, topk_group, renorm, scaling)
    cnt = (torch.bincount(ids.reshape(-1), minlength=x.shape[1]).to(torch.int32) if counts
           else None)
    src = _source_rows(x.shape[0], k, x.device) if source_rows else None
    return ((w.to(torch.bfloat16 if weights_bf16 else torch.float32).contiguous(),
             ids.to(torch.int32 if ids_int32 else torch.int64).contiguous()) +
            _asked(cnt, src, x.device))


def _forward_cuda(logits, bias, *args):
    """tuned::router_topk on CUDA: libtuned's kernel (its error raised), or
    torch's formula where no libtuned serves the device."""
    x = _rows(logits)
    if x.shape[0] > 0:
        b = None if bias is None else bias.float().contiguous()
        out = _direct_forward(x, b, *args, strict=True)
        if out is not None:
            w, ids, cnt, src = out
            return (w, ids) + _asked(cnt, src, x.device)
    return _forward_any(logits, bias, *args)


def _forward_fake(logits, bias, k, score, num_groups, topk_group, renorm, scaling, ids_int32,
                  counts, weights_bf16, source_rows):
    rows = logits.numel() // logits.shape[-1]
    e = logits.shape[-1]
    return (logits.new_empty((rows, k), dtype=torch.bfloat16 if weights_bf16 else torch.float32),
            logits.new_empty((rows, k), dtype=torch.int32 if ids_int32 else torch.int64),
            logits.new_empty((e if counts else 0,), dtype=torch.int32),
            logits.new_empty((rows, k) if source_rows else (0,), dtype=torch.int32))


def _backward_rows(logits, ids, dweights, k):
    x = _rows(logits).contiguous()
    rows = x.shape[0]
    return x, ids.reshape(rows, k).contiguous(), dweights.reshape(rows, k).float().contiguous()


def _backward_any(logits, ids, dweights, k, score, renorm, scaling):
    """tuned::router_topk_backward by torch's formula."""
    x, idx, dw = _backward_rows(logits, ids, dweights, k)
    return _backward_torch(x.float(), idx.long(), dw, score, renorm, scaling).to(x.dtype)


def _backward_cuda(logits, ids, dweights, k, score, renorm, scaling):
    """On CUDA: libtuned's kernel (the key's groups are the forward's
    concern: the gradient of the chosen weights does not depend on how they
    were chosen), or torch's formula where no libtuned serves."""
    x, idx, dw = _backward_rows(logits, ids, dweights, k)
    if x.shape[0] > 0:
        dx = _direct_backward(x, idx, dw,
                              _backward_options(k, score, renorm, scaling,
                                                idx.dtype == torch.int32), strict=True)
        if dx is not None:
            return dx
    return _backward_any(logits, ids, dweights, k, score, renorm, scaling)


def _backward_fake(logits, ids, dweights, k, score, renorm, scaling):
    rows = logits.numel() // logits.shape[-1]
    return logits.new_empty((rows, logits.shape[-1]))


def _setup(ctx, inputs, output):
    logits, _bias, k, score, _groups, _kept, renorm, scaling = inputs[:8]
    ctx.save_for_backward(logits, output[1])
    ctx.args = (k, score, renorm, scaling)


def _backward(ctx, dweights, _dids, _dcounts, _dsource):
    logits, ids = ctx.saved_tensors
    if dweights is None:
        return (None,) * 12
    dx = _router_backward_op(logits, ids, dweights, *ctx.args)
    return (dx.reshape(logits.shape),) + (None,) * 11


_router_backward_op = _define(
    "router_topk_backward",
    "(Tensor logits, Tensor ids, Tensor dweights, int k, int score, bool renorm, "
    "float scaling) -> Tensor",
    _backward_any, _backward_cuda, _backward_fake)
_router_op = _define(
    "router_topk",
    "(Tensor logits, Tensor? bias, int k, int score, int num_groups, int topk_group, "
    "bool renorm, float scaling, bool ids_int32, bool counts, bool weights_bf16, "
    "bool source_rows) -> (Tensor weights, Tensor ids, Tensor counts, Tensor source_rows)",
    _forward_any, _forward_cuda, _forward_fake, grad=_backward, setup=_setup)


# ---- the eager path: libtuned called directly ----

def _direct_ok(x):
    """Whether rows x may take the direct path (tests widen it to the CPU,
    with a stand-in of libtuned)."""
    return x.is_cuda


# (the default Handle, tuned_router_topk, tuned_router_topk_backward, the
# library) once bound: what a repeated call's _state reuses
_bound_handle = None


def _state(x):
    """(forward, backward, library, handle, dtype code, stream) for a call
    of libtuned on rows x, or None (no library, or not a device it serves:
    the operators then run torch's formula, or say what is wrong)."""
    global _bound_handle
    dt = _DTYPES.get(x.dtype)
    dev = x.get_device()
    if dt is None or dev != _current_device():
        return None
    bound = _bound_handle
    h = bound[0]._h if bound is not None and bound[0] is _handle._default else None
    if not h:
        try:
            lib, _ = _library()
        except Exception:  # noqa: BLE001 - the operators report it
            return None
        f, b = _bound(lib, "tuned_router_topk"), _bound(lib, "tuned_router_topk_backward")
        if f is None or b is None:
            return None
        bound = _bound_handle = (_handle._default, f, b, lib)
        h = bound[0]._h  # read once: a handle closed after this is the call's to report
        if not h:
            return None
    return bound[1], bound[2], bound[3], h, dt, _raw_stream(dev) or None


_options_made = {}


def _options_of(k, score, num_groups, topk_group, renorm, scaling, ids_int32,
                weights_bf16=False):
    """The options struct of a call without source rows, made once per
    combination."""
    key = (k, score, num_groups, topk_group, renorm, scaling, ids_int32, weights_bf16)
    o = _options_made.get(key)
    if o is None:
        if len(_options_made) > 256:
            _options_made.clear()
        o = _options_made[key] = _options(*key)
    return o


class _Plan:
    """One combination of the operators' arguments (k, score, num_groups,
    topk_group, renorm, scaling, ids_int32, counts, weights_bf16,
    source_rows), with what a direct call needs of it made once: the
    outputs' dtypes and, without source rows (a pointer of each call's),
    the options struct libtuned reads."""

    __slots__ = ("args", "k", "weights_dtype", "ids_dtype", "counts", "source_rows", "newer",
                 "options", "backward_args", "backward_options")

    def __init__(self, args):
        k, score, num_groups, topk_group, renorm, scaling, ids_int32, counts, bf16, src = args
        self.args, self.k, self.counts, self.source_rows = args, k, counts, src
        self.weights_dtype = torch.bfloat16 if bf16 else torch.float32
        self.ids_dtype = torch.int32 if ids_int32 else torch.int64
        self.newer = bf16 or src  # what only a libtuned of 2026-11-30 or later reads
        self.options = (None if src else
                        _options_of(k, score, num_groups, topk_group, renorm, scaling, ids_int32,
                                    bf16))
        self.backward_args = (k, score, renorm, scaling)
        self.backward_options = _backward_options(k, score, renorm, scaling, ids_int32)


_plans = {}


def _plan_of(args):
    """The _Plan of the operators' arguments args."""
    p = _plans.get(args)
    if p is None:
        if len(_plans) > 256:
            _plans.clear()
        p = _plans[args] = _Plan(args)
    return p


def _reads_options(lib):
    """Whether lib reads this module's whole struct tuned_router_options
    (weights_bf16 and source_rows came on 2026-11-30): its init clears the
    struct it is given, where an older one clears its own 28 bytes only.
    An older library given bf16 weights or source rows would write fp32
    weights into half the room and leave the source rows unwritten."""
    read = getattr(lib, "_tuned_router_options_read", None)
    if read is None:
        init = getattr(lib, "tuned_router_options_init", None)
        size = ctypes.sizeof(_Options)
        buf = ctypes.create_string_buffer(b"\xff" * size, size)
        if init is not None:
            if getattr(init, "argtypes", 0) is None:  # a ctypes function not yet typed
                init.restype, init.argtypes = None, [ctypes.c_void_p]
            init(buf)
        read = init is not None and not any(buf.raw[_Options.weights_bf16.offset:])
        lib._tuned_router_options_read = read
    return read


def _succeeded(rc, lib, h, name, strict):
    """Whether libtuned's call name returned 0; strict: its error raised
    instead of False."""
    if rc != 0 and strict:
        _lib.check(lib, rc, h, name)
    return rc == 0


def _direct_forward(x, bias, *args, strict=False):
    """(weights, ids, counts, source_rows) of rows x (bias fp32, contiguous)
    by one libtuned call (counts and source_rows None unless asked for),
    or None; strict: libtuned's error raised, not None."""
    return _direct_forward_plan(x, bias, _plan_of(args), strict)


def _direct_forward_plan(x, bias, plan, strict=False, row_stride=None):
    """_direct_forward of plan's arguments (row_stride: x.stride(0), where
    the caller has it)."""
    global libtuned_calls
    st = _state(x)
    if st is None:
        return None
    f, _, lib, h, dt, stream = st
    if plan.newer and not _reads_options(lib):
        return None  # an older libtuned: torch's formula
    rows, e = x.shape
    dev, k = x.device, plan.k
    w = torch.empty(rows, k, dtype=plan.weights_dtype, device=dev)
    ids = torch.empty(rows, k, dtype=plan.ids_dtype, device=dev)
    # no counts or source rows asked: none made (a tensor a call is a few
    # us of host time, what a router of a few tokens takes on the GPU)
    cnt = torch.zeros(e, dtype=torch.int32, device=dev) if plan.counts else None
    src, o = None, plan.options
    if plan.source_rows:  # a pointer of this call's: options of its own
        src = torch.empty(rows, k, dtype=torch.int32, device=dev)
        a = plan.args
        o = _options(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[8], src.data_ptr())
    rc = f(h, x.data_ptr(), None if bias is None else bias.data_ptr(), w.data_ptr(),
           ids.data_ptr(), None if cnt is None else cnt.data_ptr(), rows, e,
           x.stride(0) if row_stride is None else row_stride, dt, _byref(o), stream)
    if not _succeeded(rc, lib, h, "tuned_router_topk", strict):
        return None
    libtuned_calls += 1
    return w, ids, cnt, src


def _backward_options(k, score, renorm, scaling, ids_int32):
    """The options struct of a backward call (its key has no groups: the
    gradient of the chosen weights does not depend on how they were
    chosen)."""
    return _options_of(k, score, 1, 1, renorm, scaling, ids_int32)


def _direct_backward(x, ids, dw, options, strict=False):
    """dlogits of rows x (contiguous) by one libtuned call with options
    (_backward_options), or None; strict: libtuned's error raised, not
    None."""
    st = _state(x)
    if st is None:
        return None
    _, b, lib, h, dt, stream = st
    rows, e = x.shape
    dx = torch.empty(rows, e, dtype=x.dtype, device=x.device)
    rc = b(h, x.data_ptr(), ids.data_ptr(), dw.data_ptr(), dx.data_ptr(), rows, e, e, dt,
           _byref(options), stream)
    if not _succeeded(rc, lib, h, "tuned_router_topk_backward", strict):
        return None
    return dx


class _DirectRouter(torch.autograd.Function):
    """The router with its backward, both by direct libtuned calls (the
    operators where a call does not go)."""

    @staticmethod
    def forward(ctx, x, bias, plan):
        out = _direct_forward_plan(x, bias, plan)
        if out is None:
            out = _router_op(x, bias, *plan.args)
        # the outputs not asked for stay None: an empty tensor each is a
        # few us of host time, the kernel's at a few tokens
        w, ids = out[0], out[1]
        cnt = out[2] if plan.counts else None
        src = out[3] if plan.source_rows else None
        ctx.save_for_backward(x, ids)
        ctx.plan = plan
        ctx.mark_non_differentiable(ids, *(t for t in (cnt, src) if t is not None))
        return w, ids, cnt, src

    @staticmethod
    @once_differentiable  # the backward kernel has no gradient of its own
    def backward(ctx, dw, _dids, _dcounts, _dsource):
        x, ids = ctx.saved_tensors
        plan = ctx.plan
        if dw.dtype != torch.float32:
            dw = dw.float()
        if not dw.is_contiguous():
            dw = dw.contiguous()
        x = x.contiguous()  # rows a stride apart (a slice's) read as contiguous rows
        dx = _direct_backward(x, ids, dw, plan.backward_options)
        if dx is None:
            dx = _router_backward_op(x, ids, dw, *plan.backward_args)
        return dx, None, None


# the public call's arguments (and the logits' experts and dtype) ->
# their _Plan, checked
_call_plans = {}


def _call_plan(logits, key):
    """The _Plan of router_topk's arguments key (as _call_plans holds
    them), each checked: ValueError or TypeError for one that is not
    valid."""
    (_e, dtype, k, score, num_groups, topk_group, renorm, scaling, ids_dtype, weights_dtype,
     counts, source_rows) = key
    if score not in SCORES:
        raise ValueError(f"tuned.router_topk: score {score!r} (one of {', '.join(SCORES)})")
    if ids_dtype is None:
        ids_dtype = torch.int64
    if ids_dtype not in (torch.int64, torch.int32):
        raise ValueError(f"tuned.router_topk: ids_dtype {ids_dtype} (torch.int64 or int32)")
    if weights_dtype is None:
        weights_dtype = torch.float32
    if weights_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"tuned.router_topk: weights_dtype {weights_dtype} (torch.float32 or "
                         "bfloat16)")
    k, num_groups, topk_group, scaling = int(k), int(num_groups), int(topk_group), float(scaling)
    _check_options(logits.shape, dtype, k, num_groups, topk_group, scaling)
    return _plan_of((k, SCORES[score], num_groups, topk_group, bool(renorm), scaling,
                     ids_dtype == torch.int32, bool(counts), weights_dtype == torch.bfloat16,
                     bool(source_rows)))


def router_topk(logits, k, *, score="softmax", bias=None, num_groups=1, topk_group=1,
                renorm=False, scaling=1.0, ids_dtype=None, weights_dtype=None,
                return_counts=False, return_source_rows=False):
    """The MoE router's choice: (weights, ids) of shape (..., k), then with
    return_counts the rows that chose each expert and with
    return_source_rows each output's row in the k-major expanded token
    list (the module says the rules)."""
    # The arguments are checked once for each combination (an eager call of
    # a few tokens is host-bound: every us here is the caller's).
    shape = logits.shape
    e = shape[-1] if shape else 0
    key = (e, logits.dtype, k, score, num_groups, topk_group, renorm, scaling, ids_dtype,
           weights_dtype, return_counts, return_source_rows)
    try:
        plan = _call_plans.get(key)
    except TypeError:  # an argument that is no dict key: checked each call
        plan = _call_plan(logits, key)
    else:
        if plan is None:
            plan = _call_plan(logits, key)
            if len(_call_plans) > 256:
                _call_plans.clear()
            _call_plans[key] = plan
    _check_bias(logits, bias, e)
    if return_source_rows:
        _source_rows_fit(logits.numel() // e, plan.k)
    # a 2-D call (the usual: tokens x experts) takes no reshape, in or out
    flat = len(shape) == 2
    x = logits if flat else logits.reshape(-1, e)
    out = None
    if type(x) is _Tensor and _direct_ok(x) and not _compiling() and not _dispatch_modes():
        rs = x.stride()
        if (rs[1] == 1 and rs[0] >= e and x.shape[0] > 0 and
                (bias is None or (bias.dtype == torch.float32 and bias.is_contiguous()))):
            if x.requires_grad and _grad_enabled():
                out = _DirectRouter.apply(x, bias, plan)
            else:
                out = _direct_forward_plan(x, bias, plan, row_stride=rs[0])
    if out is None:
        out = _router_op(logits, bias, *plan.args)
    w, ids, counts, src = out
    if not flat:
        lead = tuple(shape[:-1]) + (plan.k,)
        w, ids = w.reshape(lead), ids.reshape(lead)
        if return_source_rows:
            src = src.reshape(lead)
    return ((w, ids) + ((counts,) if return_counts else ()) +
            ((src,) if return_source_rows else ()))
