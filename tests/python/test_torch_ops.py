"""test_torch_ops.py LIBTUNED SOURCE_ROOT: the torch operators (tuned/torch_ops.py)
on the CPU. Exits 77 (skipped) where torch is not installed (CI installs
none); prints `N passed, N failed, N skipped`, exits 1 on a failure.

  registration  torch.ops.tuned.{softmax, log_softmax, softmax_backward,
                log_softmax_backward} with their schemas; `import tuned`
                after torch registers them at once
  fake          the fake (meta) implementations under FakeTensorMode with
                CUDA fake tensors and on meta tensors: shapes, dtypes and
                the output layout rule (row slices keep their strides,
                everything else contiguous), through tuned.softmax too
  opcheck       torch.library.opcheck of every operator (schema, autograd
                registration, fake against real, AOT dispatch) on the CPU
                kernels, over layouts, dtypes and scales
  gradients     gradcheck and gradgradcheck in float64 of every operator
  fallback      tuned.softmax / log_softmax of CPU tensors: torch's result,
                one warning per reason; strict mode raises FallbackError
  compile       torch.compile(fullgraph=True) through tuned.softmax and
                tuned.log_softmax on meta tensors puts the operators in the
                graph with no break; inductor on the CPU kernels matches
                eager, forward and backward

The CUDA kernels are tested on a GPU by test_torch_ops_gpu.py.
"""

import os
import subprocess
import sys
import textwrap
import unittest

from verdicts import run_suite
import warnings

LIBTUNED = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] else None
ROOT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed (the torch operators' CPU checks need it)")
    sys.exit(77)

if LIBTUNED:
    os.environ["TUNED_LIBRARY"] = LIBTUNED
os.environ["TUNED_POLICY"] = "never"

import tuned  # noqa: E402
from tuned import _dispatch, torch_ops  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

OPS = torch.ops.tuned


def contiguous_strides(shape):
    out, acc = [], 1
    for s in reversed(shape):
        out.insert(0, acc)
        acc *= s
    return tuple(out)


class RegistrationTests(unittest.TestCase):
    def test_schemas(self):
        self.assertEqual(str(OPS.softmax.default._schema),
                         "tuned::softmax(Tensor x, float scale=1.) -> Tensor")
        self.assertEqual(str(OPS.log_softmax.default._schema),
                         "tuned::log_softmax(Tensor x, float scale=1.) -> Tensor")
        self.assertEqual(str(OPS.softmax_backward.default._schema),
                         "tuned::softmax_backward(Tensor y, Tensor dy) -> Tensor")
        self.assertEqual(str(OPS.log_softmax_backward.default._schema),
                         "tuned::log_softmax_backward(Tensor y, Tensor dy) -> Tensor")

    def test_import_after_torch_registers(self):
        code = textwrap.dedent("""
            import torch, tuned
            print("registered", hasattr(torch.ops.tuned, "softmax"),
                  hasattr(torch.ops.tuned, "log_softmax_backward"))
        """)
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "bindings", "python"))
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("registered True True", p.stdout)


class FakeTests(unittest.TestCase):
    def test_fake_cuda(self):
        with FakeTensorMode():
            x = torch.empty(6, 10, device="cuda", dtype=torch.float16)
            cases = [
                (lambda: OPS.softmax(x, 1.0), (6, 10), (10, 1)),
                (lambda: OPS.log_softmax(x, 0.5), (6, 10), (10, 1)),
                (lambda: OPS.softmax(x[:, :7]), (6, 7), (10, 1)),          # row slices
                (lambda: OPS.softmax(x.t()), (10, 6), (6, 1)),             # made contiguous
                (lambda: OPS.softmax_backward(x.t(), x.t()), (10, 6), (6, 1)),
                (lambda: OPS.log_softmax_backward(x[:, :7], x[:, :7]), (6, 7), (7, 1)),
                (lambda: tuned.softmax(x), (6, 10), (10, 1)),
                (lambda: tuned.softmax(x.t(), 0), (10, 6), (1, 10)),       # moved by a view
                (lambda: tuned.log_softmax(x[:, :7], scale=2.0), (6, 7), (10, 1)),
            ]
            for i, (f, shape, stride) in enumerate(cases):
                y = f()
                self.assertEqual((tuple(y.shape), y.stride(), y.dtype, y.device.type),
                                 (shape, stride, torch.float16, "cuda"), i)

    def test_meta(self):
        x = torch.empty(3, 5, 40, device="meta", dtype=torch.bfloat16)
        for f in (tuned.softmax, tuned.log_softmax):
            y = f(x, -1, scale=0.25)
            self.assertEqual((y.shape, y.dtype, y.device.type), (x.shape, x.dtype, "meta"))
        y = OPS.softmax_backward(x, x)
        self.assertEqual((y.shape, y.stride()), (x.shape, contiguous_strides(x.shape)))


def samples(dtype):
    g = torch.Generator().manual_seed(1)

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype) * 3

    base = r(12, 40)
    # ... and a size-1 dimension with a stride of its own (contiguous all the same)
    return [r(7, 33), r(2, 3, 17), base[:, :25], base.t(), r(1, 1), r(5, 1),
            r(3, 1, 5).as_strided((3, 1, 5), (5, 7, 1))]


class OpcheckTests(unittest.TestCase):
    def test_forwards(self):
        for dtype in (torch.float32, torch.bfloat16):
            for x in samples(dtype):
                for scale in (1.0, 0.37):
                    for op in (OPS.softmax.default, OPS.log_softmax.default):
                        xs = x.detach().requires_grad_(dtype == torch.float32)
                        r = torch.library.opcheck(op, (xs, scale))
                        self.assertTrue(all(v == "SUCCESS" for v in r.values()),
                                        (op, tuple(x.shape), scale, r))

    def test_backwards(self):
        weird = torch.randn(3, 1, 5).as_strided((3, 1, 5), (5, 7, 1))
        for x in samples(torch.float32) + [weird]:
            y = torch.softmax(x, -1)
            if x is weird:
                y = weird.softmax(-1).as_strided((3, 1, 5), (5, 7, 1))  # y with that stride too
            dy = torch.randn_like(x)
            for op, yy in ((OPS.softmax_backward.default, y),
                           (OPS.log_softmax_backward.default, y.log())):
                for grad in (False, True):
                    r = torch.library.opcheck(op, (yy.detach().requires_grad_(grad),
                                                   dy.detach().requires_grad_(grad)))
                    self.assertTrue(all(v == "SUCCESS" for v in r.values()),
                                    (op, tuple(x.shape), r))

    def test_outputs_match_torch(self):
        for x in samples(torch.float64):
            for scale in (1.0, 3.0):
                torch.testing.assert_close(OPS.softmax(x, scale), torch.softmax(x * scale, -1))
                torch.testing.assert_close(OPS.log_softmax(x, scale),
                                           torch.log_softmax(x * scale, -1))
            y = torch.softmax(x, -1)
            dy = torch.randn_like(x)
            torch.testing.assert_close(OPS.softmax_backward(y, dy),
                                       y * (dy - (dy * y).sum(-1, keepdim=True)))
            torch.testing.assert_close(OPS.log_softmax_backward(y.log(), dy),
                                       dy - y * dy.sum(-1, keepdim=True))


class GradientTests(unittest.TestCase):
    def test_gradcheck(self):
        g = torch.Generator().manual_seed(2)
        x = torch.randn(4, 9, dtype=torch.float64, generator=g, requires_grad=True)
        for f in (lambda a: OPS.softmax(a, 0.7), lambda a: OPS.log_softmax(a, 1.3),
                  lambda a: tuned.softmax(a, 0), lambda a: tuned.log_softmax(a[:, :5])):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.assertTrue(torch.autograd.gradcheck(f, (x,)))
                self.assertTrue(torch.autograd.gradgradcheck(f, (x,)))
        y = torch.softmax(torch.randn(4, 9, dtype=torch.float64, generator=g), -1)
        dy = torch.randn(4, 9, dtype=torch.float64, generator=g)
        for op, yy in ((OPS.softmax_backward, y), (OPS.log_softmax_backward, y.log())):
            args = (yy.requires_grad_(), dy.clone().requires_grad_())
            self.assertTrue(torch.autograd.gradcheck(op, args))
            self.assertTrue(torch.autograd.gradgradcheck(op, args))


class FallbackTests(unittest.TestCase):
    def setUp(self):
        _dispatch._warned.clear()
        _dispatch.set_strict(False)

    def tearDown(self):
        _dispatch.set_strict(False)

    def test_cpu_falls_back_once(self):
        x = torch.randn(5, 11)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(2):
                torch.testing.assert_close(tuned.softmax(x), torch.softmax(x, -1))
                torch.testing.assert_close(tuned.softmax(x, 0, scale=2.0), torch.softmax(2 * x, 0))
                torch.testing.assert_close(tuned.log_softmax(x, dtype=torch.float64),
                                           torch.log_softmax(x, -1, dtype=torch.float64))
        texts = sorted(str(i.message) for i in w)
        self.assertEqual(texts, ["tuned.log_softmax: a cpu tensor; using torch.log_softmax instead",
                                 "tuned.softmax: a cpu tensor; using torch.softmax instead"])
        self.assertEqual(w[0].filename, __file__, "the warning points at the caller")

    def test_strict(self):
        tuned.set_strict(True)
        with self.assertRaises(tuned.FallbackError):
            tuned.softmax(torch.randn(3, 4))
        with self.assertRaises(tuned.FallbackError):
            tuned.log_softmax(torch.randn(3, 4, device="meta"), 0)
        with self.assertRaises(IndexError):
            tuned.softmax(torch.randn(3, 4, device="meta"), 2)
        # What the operators take still runs in strict mode.
        self.assertEqual(tuned.softmax(torch.randn(3, 4, device="meta")).shape, (3, 4))


class CompileTests(unittest.TestCase):
    def test_fullgraph_meta(self):
        graphs = []

        def backend(gm, inputs):
            graphs.append(gm)
            return gm.forward

        def f(x, w):
            h = tuned.softmax(x @ w, scale=0.5)
            h = tuned.softmax(h.t(), 0).t()
            return tuned.log_softmax(h @ w.t(), -1)

        x = torch.empty(8, 16, device="meta")
        w = torch.empty(16, 16, device="meta")
        y = torch.compile(f, backend=backend, fullgraph=True)(x, w)
        self.assertEqual((y.shape, y.device.type), ((8, 16), "meta"))
        self.assertEqual(len(graphs), 1)
        targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
        self.assertEqual([t for t in targets if t.startswith("tuned.")],
                         ["tuned.softmax.default", "tuned.softmax.default",
                          "tuned.log_softmax.default"], targets)

    def test_inductor_cpu(self):
        torch.manual_seed(3)
        lin1, lin2 = torch.nn.Linear(32, 48).double(), torch.nn.Linear(48, 24).double()

        def model(x):
            h = OPS.softmax(lin1(x), 0.5)
            return OPS.log_softmax(lin2(h))

        x = torch.randn(16, 32, dtype=torch.float64)
        compiled = torch.compile(model, fullgraph=True)
        ye = model(x)
        yc = compiled(x)
        torch.testing.assert_close(yc, ye)
        ge = torch.autograd.grad(ye.square().sum(), lin1.weight)[0]
        gc = torch.autograd.grad(compiled(x).square().sum(), lin1.weight)[0]
        torch.testing.assert_close(gc, ge)


def main():
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    return run_suite(suite)


if __name__ == "__main__":
    sys.exit(main())
