"""test_torch_ops_gpu.py TUNED LIBTUNED SOURCE_ROOT: the torch operators
(tuned/torch_ops.py) on a GPU. Exits 77 (skipped) without torch or CUDA.

  paths      tuned.kernel_paths(): which operators run libtuned's kernels
             (printed: a benchmark reports the same); a CUDA call of
             tuned::softmax runs libtuned (last_choice names its config)
  opcheck    torch.library.opcheck of every operator on CUDA tensors:
             fp16 / bf16 / fp32, contiguous, row slices, transposed, 3-d,
             scale 1 and not
  compile    torch.compile(fullgraph=True) of linear -> tuned.softmax ->
             linear -> tuned.log_softmax: one graph, the operators in it,
             output and gradients as eager; the same with CUDA graphs
             (mode="reduce-overhead")
  graphs     every operator captured in a torch.cuda.CUDAGraph and
             replayed on new inputs
  gradients  the gradients of tuned.softmax and tuned.log_softmax (scale,
             dim, dtypes) against torch's in float64
  host time  host microseconds a call: the tuned.softmax path as it was
             before the operators (a copy of it below), today's fast path,
             the operator through the dispatcher, with autograd; the fast
             path must stay within 1 us of the old one
"""

import sys
import time
import warnings

from gpu_env import Checks, start  # noqa: E402 - exits 77 without torch or CUDA

store = start("tuned-torch-ops-")

import torch  # noqa: E402

import tuned  # noqa: E402
from tuned import _lib, torch_ops  # noqa: E402

OPS = torch.ops.tuned
checks = Checks()
expect = checks.expect
section = checks.section


class no_fallback(warnings.catch_warnings):
    """A block in which a fallback to torch (tuned's RuntimeWarning) is an error."""

    def __enter__(self):
        super().__enter__()
        warnings.filterwarnings("error", message=r"tuned\.", category=RuntimeWarning)


DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# Tolerances against float64 (as test_torch_gpu.py): a rounding or two of
# the output type.
RTOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-5}


def close(a, ref, dtype, what, scale=1.0):
    """a (any dtype) against ref (float64): |a - ref| <= atol + rtol |ref|,
    atol relative to the largest |ref| of a row (absolute errors of
    log_softmax and gradients are in the row's units)."""
    err = (a.double() - ref).abs()
    bound = RTOL[dtype] * (ref.abs() + ref.abs().amax(-1, keepdim=True) * 0.05 + 1e-6)
    ok = bool((err <= bound).all())
    return expect(ok, f"{what}: max error {err.max().item():.3g}, "
                      f"worst ratio {(err / bound).max().item():.3g}")


# ------------------------------------------------------------------ paths --

def paths():
    kp = tuned.kernel_paths()
    print("kernel paths:", ", ".join(f"{k}={v}" for k, v in kp.items()))
    expect(kp["softmax"] == "tuned", f"softmax runs {kp['softmax']}")
    x = torch.randn(64, 1000, device="cuda", dtype=torch.float16)
    with no_fallback():
        y = OPS.softmax(x)
    c = tuned.last_choice()
    expect(c is not None and bool(c.config), f"tuned::softmax ran libtuned: last_choice {c}")
    close(y, torch.softmax(x.double(), -1), torch.float16, "tuned::softmax 64x1000 fp16")


# ---------------------------------------------------------------- opcheck --

def cuda_samples(dtype):
    g = torch.Generator(device="cuda").manual_seed(5)

    def r(*shape):
        return torch.randn(*shape, device="cuda", dtype=dtype, generator=g) * 3

    base = r(48, 1100)
    return [r(16, 1000), r(2, 8, 257), base[:, :1000], r(300, 40).t(), r(7, 1), r(1, 4097),
            r(3, 1, 500).as_strided((3, 1, 500), (500, 7, 1))]


def opcheck():
    for dtype in DTYPES:
        for x in cuda_samples(dtype):
            for scale in (1.0, 0.5):
                for op in (OPS.softmax.default, OPS.log_softmax.default):
                    xs = x.detach().requires_grad_(dtype == torch.float32)
                    r = torch.library.opcheck(op, (xs, scale))
                    expect(all(v == "SUCCESS" for v in r.values()),
                           f"opcheck {op} {tuple(x.shape)} {x.stride()} {dtype} scale {scale}: {r}")
            y = torch.softmax(x.float(), -1).to(dtype)
            dy = torch.randn_like(y)
            for op, yy in ((OPS.softmax_backward.default, y),
                           (OPS.log_softmax_backward.default, torch.log_softmax(x.float(), -1).to(dtype))):
                grad = dtype == torch.float32
                r = torch.library.opcheck(op, (yy.detach().requires_grad_(grad),
                                               dy.detach().requires_grad_(grad)))
                expect(all(v == "SUCCESS" for v in r.values()),
                       f"opcheck {op} {tuple(x.shape)} {dtype}: {r}")


# ---------------------------------------------------------------- compile --

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(256, 1024)
        self.b = torch.nn.Linear(1024, 512)

    def forward(self, x):
        h = tuned.softmax(self.a(x), -1, scale=0.125)
        return tuned.log_softmax(self.b(h), dim=-1)


def compile_():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch.manual_seed(0)
    for mode in (None, "reduce-overhead"):
        torch._dynamo.reset()
        model = Model().cuda()
        x = torch.randn(64, 256, device="cuda")
        counter = CompileCounterWithBackend("inductor")
        compiled = torch.compile(model, fullgraph=True, backend=counter) if mode is None else \
            torch.compile(model, fullgraph=True, mode=mode)
        with no_fallback():
            ye = model(x)
            for _ in range(3):  # reduce-overhead: warm-up, record, replay
                yc = compiled(x)
        what = f"torch.compile(fullgraph=True, mode={mode})"
        if mode is None:
            expect(counter.frame_count == 1, f"{what}: {counter.frame_count} frames")
            targets = [str(n.target) for gm in counter.graphs for n in gm.graph.nodes
                       if n.op == "call_function" and str(n.target).startswith("tuned.")]
            expect(targets == ["tuned.softmax.default", "tuned.log_softmax.default"],
                   f"{what}: tuned operators in the graph: {targets}")
        expect(torch.allclose(yc, ye, rtol=1e-4, atol=1e-5),
               f"{what}: output differs from eager by {(yc - ye).abs().max().item():.3g}")
        ge = torch.autograd.grad(ye.square().mean(), model.a.weight)[0]
        yc = compiled(x)
        gc = torch.autograd.grad(yc.square().mean(), model.a.weight)[0]
        expect(torch.allclose(gc, ge, rtol=1e-3, atol=1e-6),
               f"{what}: gradient differs from eager by {(gc - ge).abs().max().item():.3g}")


# ----------------------------------------------------------------- graphs --

def graphs():
    for dtype in DTYPES:
        x = torch.randn(256, 1024, device="cuda", dtype=dtype)
        dy = torch.randn_like(x)
        calls = {
            "softmax": lambda: tuned.softmax(x),
            "softmax scale": lambda: tuned.softmax(x, scale=0.3),
            "log_softmax": lambda: tuned.log_softmax(x),
            "softmax dim 0 of a transposed view": lambda: tuned.softmax(x.t(), 0),
            "softmax_backward": lambda: OPS.softmax_backward(x.softmax(-1), dy),
            "log_softmax_backward": lambda: OPS.log_softmax_backward(x.log_softmax(-1), dy),
        }
        refs = {
            "softmax": lambda: torch.softmax(x.double(), -1),
            "softmax scale": lambda: torch.softmax(x.double() * 0.3, -1),
            "log_softmax": lambda: torch.log_softmax(x.double(), -1),
            "softmax dim 0 of a transposed view": lambda: torch.softmax(x.double().t(), 0),
            "softmax_backward": lambda: (lambda y: y * (dy.double() - (dy.double() * y).sum(-1, keepdim=True)))(
                torch.softmax(x.float(), -1).to(dtype).double()),
            "log_softmax_backward": lambda: (lambda y: dy.double() - y.exp() * dy.double().sum(-1, keepdim=True))(
                torch.log_softmax(x.float(), -1).to(dtype).double()),
        }
        for name, call in calls.items():
            call()  # the first call of a shape loads its kernel: before the capture
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = call()
            x.copy_(torch.randn_like(x))
            dy.copy_(torch.randn_like(dy))
            g.replay()
            torch.cuda.synchronize()
            close(out, refs[name](), dtype, f"CUDA graph replay of {name} {dtype}")


# -------------------------------------------------------------- gradients --

def gradients():
    """Against float64: tuned's gradient in fp16 / bf16 / fp32 may be off
    by no more than torch's own in the same dtype (twice its largest error,
    plus a rounding of the gradient's scale)."""
    torch.manual_seed(1)
    for dtype in DTYPES:
        for shape, dim, scale in (((64, 1000), -1, 1.0), ((64, 1000), -1, 0.7), ((4, 9, 4097), 2, 2.0),
                                  ((1000, 64), 0, 1.0)):
            x64 = torch.randn(*shape, device="cuda", dtype=torch.float64) * 2
            if dim == 0:
                x64 = x64.t().contiguous().t()  # dim 0 adjacent: the transposed path
            g = torch.randn_like(x64).to(dtype)
            for name, f, ref in (("softmax", tuned.softmax, torch.softmax),
                                 ("log_softmax", tuned.log_softmax, torch.log_softmax)):
                x = x64.to(dtype).requires_grad_()
                with no_fallback():  # all of these run the operators
                    (f(x, dim, scale=scale) * g).sum().backward()
                xt = x64.to(dtype).requires_grad_()
                (ref(xt * scale, dim) * g).sum().backward()
                xr = x64.to(dtype).double().requires_grad_()
                (ref(xr * scale, dim) * g.double()).sum().backward()
                err = (x.grad.double() - xr.grad).abs().max().item()
                err_torch = (xt.grad.double() - xr.grad).abs().max().item()
                slack = RTOL[dtype] * xr.grad.abs().max().item() * 1e-2
                expect(err <= 2 * err_torch + slack,
                       f"gradient of {name} {shape} dim {dim} scale {scale} {dtype}: error {err:.3g} "
                       f"against float64, torch's {err_torch:.3g}")


# -------------------------------------------------------------- host time --

def old_softmax_path():
    """tuned.softmax as it was before the torch operators (the commit before
    them), its eager path for rows copied: the baseline of the host-time
    bound."""
    from tuned.handle import default_handle
    dtypes = {torch.float16: _lib.FP16, torch.bfloat16: _lib.BF16, torch.float32: _lib.FP32}
    c = torch._C
    current_device = c._cuda_getDevice
    raw_stream = c._cuda_getCurrentRawStream

    class TunedSoftmax(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, handle, rows, cols, stride, dt):
            y = launch(x, handle, rows, cols, stride, dt)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            gx = y * (g - (g * y).sum(dim=-1, keepdim=True))
            return gx, None, None, None, None, None

    def launch(x, h, rows, cols, stride, dt):
        y = torch.empty_like(x) if stride == cols else torch.empty_strided(
            x.shape, x.stride(), dtype=x.dtype, device=x.device)
        stream = raw_stream(x.get_device())
        lib = h._lib
        rc = lib.tuned_softmax(h._h, x.data_ptr(), y.data_ptr(), rows, cols, stride, dt, stream or None)
        if rc != 0:
            _lib.check(lib, rc, h._h, "tuned_softmax")
        return y

    def call(x, h, rows, cols, stride, dt):
        if x.requires_grad and torch.is_grad_enabled():
            return TunedSoftmax.apply(x, h, rows, cols, stride, dt)
        return launch(x, h, rows, cols, stride, dt)

    def softmax(x, dim=-1, *, handle=None):
        if not isinstance(x, torch.Tensor):
            return torch.softmax(x, dim)
        dt = dtypes.get(x.dtype)
        nd = x.dim()
        reason = layout = None
        if not x.is_cuda:
            reason = "device"
        elif dt is None:
            reason = "dtype"
        elif nd == 0 or x.numel() == 0:
            reason = "empty"
        elif dim != -1 and (dim if dim >= 0 else dim + nd) != nd - 1:
            reason = "dim"
        else:
            if x.is_contiguous():
                cols = x.shape[-1]
                layout = (x.numel() // cols, cols, cols)
            if layout is None:
                reason = "layout"
            elif layout[0] > 2147483647 or layout[1] > 2147483392:
                reason = "size"
        if reason is None:
            h = handle if handle is not None else default_handle()
        if reason is not None:
            return torch.softmax(x, dim)
        rows, cols, stride = layout
        try:
            if x.get_device() != current_device():
                with torch.cuda.device(x.device):
                    return call(x, h, rows, cols, stride, dt)
            return call(x, h, rows, cols, stride, dt)
        except _lib.TunedError:
            return torch.softmax(x, dim)

    return softmax


def per_call_us(fn, x, n=5000):
    """Host microseconds per call of fn(x), n calls (the kernels are tiny:
    the GPU keeps up, the host is timed)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn(x)
    us = (time.perf_counter() - start) / n * 1e6
    torch.cuda.synchronize()
    return us


def host_time():
    old = old_softmax_path()
    x = torch.randn(32, 128, device="cuda", dtype=torch.float16)
    xg = x.clone().requires_grad_()
    op = OPS.softmax.default
    rows = [
        ("tuned.softmax before the operators", old, x),
        ("tuned.softmax (fast path)", tuned.softmax, x),
        ("tuned.log_softmax (torch's kernel in the operator)", tuned.log_softmax, x),
        ("torch.ops.tuned.softmax (the dispatcher)", lambda t: op(t, 1.0), x),
        ("tuned.softmax before the operators, autograd", old, xg),
        ("tuned.softmax with autograd", tuned.softmax, xg),
        ("torch.ops.tuned.softmax with autograd (the dispatcher)", lambda t: op(t, 1.0), xg),
        ("torch.softmax", lambda t: torch.softmax(t, -1), x),
        ("torch.softmax, autograd", lambda t: torch.softmax(t, -1), xg),
    ]
    for _, fn, t in rows:  # warm-up
        per_call_us(fn, t, 200)
    # Round-robin repeats, the minimum of each: the host time without the
    # machine's noise, which only ever adds.
    times = {name: [] for name, _, _ in rows}
    for _ in range(15):
        for name, fn, t in rows:
            times[name].append(per_call_us(fn, t))
    print(f"host time per call, {tuple(x.shape)} fp16, 15 x 5000 calls round-robin (min, median):")
    for name, _, _ in rows:
        v = sorted(times[name])
        print(f"  {v[0]:7.2f} {v[len(v) // 2]:7.2f} us  {name}")
    # Over by more than 1 us in the minimum and in the median both: one
    # lucky round of the older path alone (its minimum 10.95 us against
    # 15.2-15.7 in the next two runs on one H200, with the medians in the
    # fast path's favour) is noise, not a slower path.
    for before, now in ((rows[0][0], rows[1][0]), (rows[4][0], rows[5][0])):
        old_v, new_v = sorted(times[before]), sorted(times[now])
        old_us, new_us = old_v[0], new_v[0]
        old_med, new_med = old_v[len(old_v) // 2], new_v[len(new_v) // 2]
        print(f"  {now}: {new_us:.2f} us against {old_us:.2f} us before: {new_us - old_us:+.2f} us "
              f"(medians {new_med - old_med:+.2f} us)")
        expect(new_us <= old_us + 1.0 or new_med <= old_med + 1.0,
               f"{now}: {new_us:.2f} us a call (median {new_med:.2f}), more than 1 us over the "
               f"{old_us:.2f} us (median {old_med:.2f}) of the path before the operators")


section("paths", paths)
section("opcheck", opcheck)
section("compile", compile_)
section("graphs", graphs)
section("gradients", gradients)
section("host time", host_time)

import shutil  # noqa: E402

shutil.rmtree(store, ignore_errors=True)
print(f"python-torch-ops-gpu: {checks.failures} failure(s)")
sys.exit(1 if checks.failures else 0)
