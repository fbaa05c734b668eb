"""test_router.py LIBTUNED SOURCE_ROOT: tuned.router_topk (tuned/router.py).
Runs every case on the CPU (the operators' torch formula) and, where a
CUDA GPU and libtuned are present, on the GPU (libtuned's kernels) too.
Exits 77 (skipped) without torch; prints `N passed, N failed, N skipped`,
exits 1 on a failure.

  transformers  the same ids and weights as transformers' own routers on
                random logits: DeepseekV3TopkRouter (sigmoid, bias, 8
                groups keep 4, renorm, scaling 2.5; its ids unsorted, so
                compared as sets), Qwen3-MoE's (softmax, with and without
                norm_topk_prob) and Mixtral's (softmax, renormalised)
  rules         ties to the lower index, NaN first, a NaN softmax row,
                counts, int32 ids, bf16 weights (the fp32 ones rounded),
                source rows, 3-d logits, fp16 / bf16 logits against
                their fp32 values; any expert count (60, 160, 384, 2048)
  gradients     d logits against autograd through transformers' formula
                (Mixtral's, Qwen's, DeepSeek's) with the ids held
  operators     torch.library.opcheck of both operators; torch.compile
                (fullgraph) of a call and its backward; on a GPU, a CUDA
                graph's replay equal to the eager call
  arguments     k, experts, groups, topk_group, scaling, score, bias shape
                refused with ValueError
  direct        the eager path's calls of libtuned (pointers, strides, the
                options struct, counts, int32 ids, bf16 weights, source
                rows, its autograd Function)
                on the CPU, with the two entry points replaced by a torch
                stand-in that reads and writes the memory it is given:
                the same answers and gradients as the operators, and the
                operator's CUDA body's outputs, none aliasing another
"""

import ctypes
import os
import sys
import unittest

from verdicts import run_suite

LIBTUNED = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] else None
ROOT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: torch is not installed")
    sys.exit(77)
if LIBTUNED:
    os.environ.setdefault("TUNED_LIBRARY", LIBTUNED)
os.environ.setdefault("TUNED_POLICY", "never")
import tuned  # noqa: E402
from host_memory import read, write  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and LIBTUNED else [])
if os.environ.get("TUNED_TEST_NEEDS_GPU") and "cuda" not in DEVICES:
    print("SKIP: no CUDA GPU with libtuned")
    sys.exit(77)


def mixtral(logits, k):
    p = F.softmax(logits.float(), dim=-1)
    v, i = torch.topk(p, k, dim=-1)
    return v / v.sum(-1, keepdim=True), i


def qwen(logits, k, norm):
    p = F.softmax(logits, dtype=torch.float, dim=-1)
    v, i = torch.topk(p, k, dim=-1)
    if norm:
        v = v / v.sum(-1, keepdim=True)
    return v, i


def deepseek(logits, bias, k, groups, kept, scaling):
    scores = logits.sigmoid()
    choice = scores + bias
    e = logits.shape[-1]
    gs = choice.view(-1, groups, e // groups).topk(2, dim=-1)[0].sum(-1)
    gi = torch.topk(gs, k=kept, dim=-1, sorted=False)[1]
    mask = torch.zeros_like(gs).scatter_(1, gi, 1)
    mask = mask.unsqueeze(-1).expand(-1, groups, e // groups).reshape(-1, e)
    choice = choice.masked_fill(~mask.bool(), float("-inf"))
    idx = torch.topk(choice, k=k, dim=-1, sorted=False)[1]
    w = scores.gather(1, idx)
    w = w / (w.sum(-1, keepdim=True) + 1e-20)
    return w * scaling, idx


def by_id(w, ids):
    order = ids.argsort(-1)
    return w.gather(-1, order), ids.gather(-1, order)


class Transformers(unittest.TestCase):
    def test_mixtral_qwen(self):
        g = torch.Generator().manual_seed(1)
        for dev in DEVICES:
            for e, k in ((8, 2), (60, 4), (128, 8)):
                x = torch.randn(333, e, generator=g).to(dev)
                w, i = tuned.router_topk(x, k, renorm=True)
                rw, ri = mixtral(x, k)
                self.assertTrue(torch.equal(i, ri), f"{dev} {e}: mixtral ids")
                torch.testing.assert_close(w, rw, rtol=2e-5, atol=1e-7)
                for norm in (False, True):
                    w, i = tuned.router_topk(x, k, renorm=norm)
                    rw, ri = qwen(x, k, norm)
                    self.assertTrue(torch.equal(i, ri), f"{dev} {e} {norm}: qwen ids")
                    torch.testing.assert_close(w, rw, rtol=2e-5, atol=1e-7)

    def test_deepseek_v3(self):
        g = torch.Generator().manual_seed(2)
        for dev in DEVICES:
            x = torch.randn(517, 256, generator=g).to(dev)
            bias = (torch.rand(256, generator=g) * 0.1 - 0.05).to(dev)
            w, i = tuned.router_topk(x, 8, score="sigmoid", bias=bias, num_groups=8,
                                     topk_group=4, renorm=True, scaling=2.5)
            rw, ri = deepseek(x, bias, 8, 8, 4, 2.5)
            w, i = by_id(w, i)
            rw, ri = by_id(rw, ri)
            self.assertTrue(torch.equal(i, ri), f"{dev}: deepseek ids")
            torch.testing.assert_close(w, rw, rtol=2e-5, atol=1e-6)


class Rules(unittest.TestCase):
    def test_ties_nan(self):
        for dev in DEVICES:
            x = torch.tensor([[1.0, 3.0, 2.0, 3.0], [0.0, float("nan"), 5.0, float("nan")],
                              [0.0, 1.0, float("inf"), 2.0]], device=dev)
            _, i = tuned.router_topk(x, 3, score="sigmoid")
            self.assertEqual(i.tolist()[:2], [[1, 3, 2], [1, 3, 2]], dev)
            w, i = tuned.router_topk(x, 2)
            self.assertEqual(i[2].tolist(), [0, 1], f"{dev}: a NaN softmax row")
            self.assertTrue(bool(w[2].isnan().all()), dev)
            # renormalised sigmoids that underflow share the weight
            w, i = tuned.router_topk(torch.tensor([[-1e30, -1e30, -3e30]], device=dev), 2,
                                     score="sigmoid", renorm=True)
            self.assertEqual(w.tolist(), [[0.5, 0.5]], dev)

    def test_counts_ids_layout(self):
        g = torch.Generator().manual_seed(3)
        for dev in DEVICES:
            x = torch.randn(4, 37, 160, generator=g).to(dev)
            w, i, c = tuned.router_topk(x, 6, ids_dtype=torch.int32, return_counts=True)
            self.assertEqual(tuple(w.shape), (4, 37, 6))
            self.assertEqual(i.dtype, torch.int32)
            self.assertEqual(c.tolist(), torch.bincount(i.reshape(-1).long(),
                                                        minlength=160).tolist())
            ref = torch.topk(torch.softmax(x.float(), -1), 6)
            self.assertTrue(torch.equal(i.long(), ref.indices), dev)

    def test_weights_bf16_source_rows(self):
        g = torch.Generator().manual_seed(8)
        for dev in DEVICES:
            x = torch.randn(5, 23, 128, generator=g).to(dev)
            w32, i32 = tuned.router_topk(x, 8, renorm=True, scaling=2.5)
            w, i, c, src = tuned.router_topk(x, 8, renorm=True, scaling=2.5,
                                             weights_dtype=torch.bfloat16, return_counts=True,
                                             return_source_rows=True)
            self.assertEqual(w.dtype, torch.bfloat16, dev)
            self.assertTrue(torch.equal(i, i32), dev)
            # the fp32 weights rounded: within half a bf16 ulp (one where
            # the two fp32 weights round apart)
            torch.testing.assert_close(w.float(), w32, rtol=2 ** -8, atol=0,
                                       msg=lambda m: f"{dev}: {m}")
            self.assertEqual(tuple(src.shape), (5, 23, 8), dev)
            rows = torch.arange(5 * 23, device=dev).view(5, 23, 1)
            want = torch.arange(8, device=dev).view(1, 1, 8) * (5 * 23) + rows
            self.assertEqual(src.dtype, torch.int32, dev)
            self.assertTrue(torch.equal(src.long(), want), dev)
            # a dispatch's gather through them: token src % rows, choice src // rows
            flat_ids = i.reshape(-1, 8)
            tok, choice = src.reshape(-1) % (5 * 23), src.reshape(-1) // (5 * 23)
            self.assertTrue(torch.equal(flat_ids[tok, choice], flat_ids.reshape(-1)), dev)
            self.assertEqual(c.tolist(), torch.bincount(i.reshape(-1), minlength=128).tolist())
            # the gradient reaches the logits through bf16 weights too
            xg = x.clone().requires_grad_(True)
            wg, _ = tuned.router_topk(xg, 8, renorm=True, weights_dtype=torch.bfloat16)
            (dx,) = torch.autograd.grad(wg.float().sum(), xg)
            self.assertTrue(bool(dx.isfinite().all()), dev)
        with self.assertRaises(ValueError):
            tuned.router_topk(torch.randn(4, 64), 4, weights_dtype=torch.float16)

    def test_dtypes_and_sizes(self):
        g = torch.Generator().manual_seed(4)
        for dev in DEVICES:
            for e, k in ((60, 4), (384, 8), (2048, 64)):
                x32 = torch.randn(129, e, generator=g)
                for dt in (torch.float16, torch.bfloat16):
                    x = x32.to(dt).to(dev)
                    w, i = tuned.router_topk(x, k, score="sqrt_softplus", renorm=True)
                    rw, ri = tuned.router_topk(x.float().cpu(), k, score="sqrt_softplus",
                                               renorm=True)
                    self.assertTrue(torch.equal(i.cpu(), ri), f"{dev} {dt} {e}")
                    torch.testing.assert_close(w.cpu(), rw, rtol=2e-5, atol=1e-7)


class Gradients(unittest.TestCase):
    def test_against_autograd(self):
        g = torch.Generator().manual_seed(5)
        cases = [("mixtral", dict(renorm=True)), ("qwen", dict(renorm=False)),
                 ("deepseek", dict(score="sigmoid", renorm=True, scaling=2.5))]
        for dev in DEVICES:
            for name, kw in cases:
                x0 = torch.randn(65, 64, generator=g).to(dev)
                x = x0.clone().requires_grad_(True)
                w, i = tuned.router_topk(x, 4, **kw)
                up = torch.randn(w.shape, generator=g).to(dev)
                (dx,) = torch.autograd.grad(w, x, up)
                xr = x0.clone().requires_grad_(True)
                if name == "deepseek":
                    s = xr.sigmoid().gather(1, i)
                    rw = s / s.sum(-1, keepdim=True) * 2.5
                else:
                    p = F.softmax(xr, -1).gather(1, i)
                    rw = p / p.sum(-1, keepdim=True) if kw["renorm"] else p
                (rdx,) = torch.autograd.grad(rw, xr, up)
                torch.testing.assert_close(dx, rdx, rtol=1e-4, atol=1e-6,
                                           msg=lambda m: f"{dev} {name}: {m}")


class Operators(unittest.TestCase):
    def test_opcheck(self):
        for dev in DEVICES:
            x = torch.randn(17, 32, device=dev, requires_grad=True)
            b = torch.randn(32, device=dev) * 0.01
            torch.library.opcheck(torch.ops.tuned.router_topk.default,
                                  (x, b, 4, 1, 4, 2, True, 1.5, False, True, False, False))
            torch.library.opcheck(torch.ops.tuned.router_topk.default,
                                  (x, None, 4, 0, 1, 1, True, 1.0, True, False, True, True))
            ids = torch.topk(x.detach(), 4).indices
            torch.library.opcheck(torch.ops.tuned.router_topk_backward.default,
                                  (x.detach(), ids, torch.randn(17, 4, device=dev), 4, 0, False,
                                   1.0))

    def test_compile(self):
        for dev in DEVICES:
            def f(x):
                w, i = tuned.router_topk(x, 4, renorm=True)
                return (w * w).sum(), i

            x = torch.randn(40, 64, device=dev, requires_grad=True)
            fc = torch.compile(f, fullgraph=True, backend="aot_eager")
            (lc, ic), (le, ie) = fc(x), f(x)
            self.assertTrue(torch.equal(ic, ie))
            (gc,) = torch.autograd.grad(lc, x)
            (ge,) = torch.autograd.grad(le, x)
            torch.testing.assert_close(gc, ge)

    @unittest.skipUnless("cuda" in DEVICES, "no CUDA GPU with libtuned")
    def test_cuda_graph(self):
        x = torch.randn(512, 128, device="cuda")
        w0, i0 = tuned.router_topk(x, 8)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            w, i = tuned.router_topk(x, 8)
        x.copy_(torch.randn(512, 128, device="cuda"))
        graph.replay()
        rw, ri = tuned.router_topk(x, 8)
        self.assertTrue(torch.equal(i, ri) and torch.equal(w, rw))
        self.assertFalse(torch.equal(i, i0))


class StandIn:
    """libtuned's two router entry points in torch (fp32 logits), on the
    memory at the pointers they are given; counts its calls."""

    def __init__(self, options_bytes=None):
        self.calls = 0
        # what its tuned_router_options_init clears: the whole struct, or
        # an older library's first bytes
        self.options_bytes = options_bytes

    def tuned_router_options_init(self, buf):
        ctypes.memset(buf, 0, self.options_bytes or ctypes.sizeof(buf))

    def forward(self, h, xp, bp, wp, ip, cp, rows, e, stride, dt, opts, stream):
        self.calls += 1
        o = opts._obj
        x = read(xp, (rows - 1) * stride + e, torch.float32)
        x = torch.as_strided(x, (rows, e), (stride, 1))
        bias = read(bp, e, torch.float32) if bp else None
        w, ids = tuned.router._router_torch(x, bias, o.k, o.score, o.num_groups, o.topk_group,
                                            bool(o.renorm), o.scaling)
        write(wp, w.to(torch.bfloat16 if o.weights_bf16 else torch.float32))
        write(ip, ids.to(torch.int32 if o.ids_int32 else torch.int64))
        if cp:
            write(cp, torch.bincount(ids.reshape(-1), minlength=e).to(torch.int32))
        if o.source_rows:
            i = torch.arange(o.k, dtype=torch.int32)
            write(o.source_rows, i.unsqueeze(0) * rows + torch.arange(rows, dtype=torch.int32)
                  .unsqueeze(1))
        return 0

    def backward(self, h, xp, ip, dwp, dxp, rows, e, stride, dt, opts, stream):
        self.calls += 1
        o = opts._obj
        x = read(xp, rows * e, torch.float32).view(rows, e)
        ids = read(ip, rows * o.k, torch.int32 if o.ids_int32 else torch.int64).view(rows, o.k)
        dw = read(dwp, rows * o.k, torch.float32).view(rows, o.k)
        write(dxp, tuned.router._backward_torch(x, ids.long(), dw, o.score, bool(o.renorm),
                                                 o.scaling))
        return 0


class Direct(unittest.TestCase):
    def setUp(self):
        R = tuned.router
        self.saved = (R._direct_ok, R._state)
        self.lib = StandIn()
        R._direct_ok = lambda x: True
        R._state = lambda x: (self.lib.forward, self.lib.backward, self.lib, None, 2, None)

    def tearDown(self):
        tuned.router._direct_ok, tuned.router._state = self.saved

    def both(self, x, k, **kw):
        """(the direct path's answer, the operators') of one call."""
        before = self.lib.calls
        d = tuned.router_topk(x, k, **kw)
        self.assertEqual(self.lib.calls, before + 1, "the call did not go direct")
        tuned.router._direct_ok = lambda x: False
        try:
            o = tuned.router_topk(x, k, **kw)
        finally:
            tuned.router._direct_ok = lambda x: True
        return d, o

    def test_answers(self):
        g = torch.Generator().manual_seed(6)
        wide = torch.randn(50, 200, generator=g)
        cases = [(torch.randn(33, 64, generator=g), 4, dict(renorm=True, scaling=2.0)),
                 (torch.randn(2, 17, 256, generator=g), 8,
                  dict(score="sigmoid", bias=torch.rand(256, generator=g) * 0.1, num_groups=8,
                       topk_group=4, renorm=True, ids_dtype=torch.int32, return_counts=True)),
                 (wide[:, :160], 6, dict(score="sqrt_softplus")),  # rows 200 apart
                 (torch.randn(3, 11, 60, generator=g), 4,
                  dict(renorm=True, weights_dtype=torch.bfloat16, return_source_rows=True))]
        for x, k, kw in cases:
            d, o = self.both(x, k, **kw)
            for a, b in zip(d, o):
                self.assertEqual(a.shape, b.shape)
                self.assertEqual(a.dtype, b.dtype)
                torch.testing.assert_close(a, b)

    def test_older_library(self):
        """A libtuned from before bf16 weights and source rows (its options
        28 bytes): calls asking for them take torch's formula, the others
        still go direct."""
        self.lib = StandIn(options_bytes=28)
        x = torch.randn(9, 64, generator=torch.Generator().manual_seed(10))
        before = self.lib.calls
        w, i, src = tuned.router_topk(x, 4, weights_dtype=torch.bfloat16, return_source_rows=True)
        self.assertEqual(self.lib.calls, before, "an older library asked for bf16 weights")
        self.assertEqual((w.dtype, src.dtype), (torch.bfloat16, torch.int32))
        d, o = self.both(x, 4)
        for a, b in zip(d, o):
            torch.testing.assert_close(a, b)

    def test_operator_body(self):
        """The CUDA implementation of tuned::router_topk, run here on the
        stand-in: the torch formula's outputs, none aliasing another."""
        g = torch.Generator().manual_seed(9)
        x = torch.randn(21, 96, generator=g)
        for counts in (False, True):
            for bf16, src in ((False, False), (True, True)):
                args = (4, 0, 1, 1, True, 1.0, False, counts, bf16, src)
                d = tuned.router._forward_cuda(x, None, *args)
                o = tuned.router._forward_any(x, None, *args)
                ptrs = [t.data_ptr() for t in d if t.numel() > 0]
                self.assertEqual(len({id(t) for t in d}), 4, "an output returned twice")
                self.assertEqual(len(set(ptrs)), len(ptrs), "outputs share memory")
                for a, b in zip(d, o):
                    self.assertEqual((a.shape, a.dtype), (b.shape, b.dtype))
                    torch.testing.assert_close(a, b)

    def test_gradients(self):
        g = torch.Generator().manual_seed(7)
        for kw in (dict(renorm=True), dict(), dict(score="sigmoid", renorm=True, scaling=2.5),
                   dict(renorm=True, weights_dtype=torch.bfloat16)):
            x0 = torch.randn(40, 96, generator=g)
            up = torch.randn(40, 4, generator=g)
            x = x0.clone().requires_grad_(True)
            before = self.lib.calls
            w, _ = tuned.router_topk(x, 4, **kw)
            (dx,) = torch.autograd.grad(w, x, up)
            self.assertEqual(self.lib.calls, before + 2, "forward and backward direct")
            tuned.router._direct_ok = lambda x: False
            xr = x0.clone().requires_grad_(True)
            wr, _ = tuned.router_topk(xr, 4, **kw)
            (dxr,) = torch.autograd.grad(wr, xr, up)
            tuned.router._direct_ok = lambda x: True
            torch.testing.assert_close(w, wr)
            torch.testing.assert_close(dx, dxr)


    def test_gradient_with_counts_and_source_rows(self):
        """The autograd Function's outputs asked for are tensors (those not
        asked for are never made), equal to the operators', and the
        gradient flows through the weights alone."""
        g = torch.Generator().manual_seed(8)
        x0 = torch.randn(12, 64, generator=g)
        up = torch.randn(12, 4, generator=g)
        outs, grads = [], []
        for direct in (True, False):
            tuned.router._direct_ok = lambda x, d=direct: d
            x = x0.clone().requires_grad_(True)
            before = self.lib.calls
            w, ids, cnt, src = tuned.router_topk(x, 4, renorm=True, return_counts=True,
                                                 return_source_rows=True)
            self.assertEqual(self.lib.calls, before + direct, "the call's path")
            for t in (ids, cnt, src):
                self.assertFalse(t.requires_grad)
            (dx,) = torch.autograd.grad(w, x, up)
            outs.append((w, ids, cnt, src))
            grads.append(dx)
        tuned.router._direct_ok = lambda x: True
        for a, b in zip(*outs):
            torch.testing.assert_close(a, b)
        torch.testing.assert_close(grads[0], grads[1])


class Arguments(unittest.TestCase):
    def test_refused(self):
        x = torch.randn(4, 64)
        # valid calls first: a combination of options is checked once, the
        # bias and the logits' dtype on every call
        tuned.router_topk(x, 4)
        tuned.router_topk(torch.randn(4, 8), 2)
        bad = [dict(k=0), dict(k=65), dict(k=4, num_groups=7), dict(k=4, num_groups=4, topk_group=5),
               dict(k=40, num_groups=8, topk_group=4), dict(k=4, scaling=0.0),
               dict(k=4, score="relu"), dict(k=4, bias=torch.zeros(63))]
        for kw in bad:
            with self.assertRaises(ValueError, msg=str(kw)):
                tuned.router_topk(x, **kw)
        with self.assertRaises(ValueError):
            tuned.router_topk(torch.randn(4, 4096), 4)
        with self.assertRaises(ValueError):
            tuned.router_topk(torch.randn(4, 1), 1)
        with self.assertRaises(TypeError):
            tuned.router_topk(torch.ones(4, 8, dtype=torch.int64), 2)


if __name__ == "__main__":
    sys.exit(run_suite(unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])))
