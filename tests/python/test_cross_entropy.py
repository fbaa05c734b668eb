"""test_cross_entropy.py LIBTUNED SOURCE_ROOT: tuned.cross_entropy
(tuned/cross_entropy.py) on the CPU. Exits 77 (skipped) where torch is not
installed; prints `N passed, N failed, N skipped`, exits 1 on a failure.

  registration  torch.ops.tuned.cross_entropy_* with their schemas;
                tuned.kernel_paths() names the cross-entropy path; the
                ctypes tuned_ce_options against the C header
  torch math    the fallback (_cross_entropy_torch, and tuned.cross_entropy
                of CPU tensors) against F.cross_entropy: mean / sum / none,
                ignore_index, label_smoothing, fp32 / fp64, 2-d / 3-d /
                1-d, all rows ignored; its autograd gradient against
                torch's; z_loss, scale and softcap against a float64
                formula written here
  operators     the kernel path (the autograd Function over the custom
                operators, whose CPU kernels run the torch formula) against
                the same references, in place too; torch.library.opcheck of
                every operator; the row layouts the CUDA kernels get
                (shifted 3-d views pass without a copy)
  compile       torch.compile(fullgraph=True) of tuned.cross_entropy on the
                CPU, of the operators' path on the CPU, and on meta tensors
                (the operators in one graph)
  arguments     bad arguments raise ValueError / TypeError; fallback
                warnings once per reason; strict mode raises FallbackError;
                class weights: the split path times w_y (F.cross_entropy's
                values; under strict mode on meta tensors: the operators),
                with label smoothing F.cross_entropy

libtuned's kernels themselves are tested on a GPU by
test_cross_entropy_gpu.py.
"""

import ctypes
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from verdicts import run_suite
import warnings

LIBTUNED = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] else None
ROOT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: torch is not installed (tuned.cross_entropy's CPU checks need it)")
    sys.exit(77)

if LIBTUNED:
    os.environ["TUNED_LIBRARY"] = LIBTUNED
os.environ["TUNED_POLICY"] = "never"

import tuned  # noqa: E402
from tuned import _dispatch, _lib  # noqa: E402

CE = sys.modules["tuned.cross_entropy"]
OPS = torch.ops.tuned


def quiet(fn, *args, **kw):
    """fn(*args, **kw) with tuned's fallback warnings silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"tuned\.", category=RuntimeWarning)
        return fn(*args, **kw)


def make(shape, cols, dtype=torch.float32, seed=0, ignore=-100, spread=3.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, cols, generator=g, dtype=torch.float64) * spread
    t = torch.randint(0, cols, shape, generator=g)
    flat = t.view(-1)
    flat[:: 5] = ignore  # every fifth row ignored
    return x.to(dtype), t


def reference(x, t, ignore_index=-100, reduction="mean", eps=0.0, z=0.0, scale=1.0,
              softcap=None):
    """The loss in float64, from the formula (not torch's cross_entropy)."""
    x = x.double()
    if softcap is not None:
        x = softcap * torch.tanh(x / softcap)
    x = x * scale
    lse = torch.logsumexp(x, -1)
    valid = t != ignore_index
    safe = torch.where(valid, t, 0)
    nll = lse - x.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    smooth = lse - x.mean(-1)
    rows = torch.where(valid, (1 - eps) * nll + eps * smooth + z * lse ** 2, 0.0)
    if reduction == "none":
        return rows, lse
    if reduction == "sum":
        return rows.sum(), lse
    return rows.sum() / valid.sum(), lse


def torch_reference(x, t, **kw):
    """F.cross_entropy with the classes last."""
    cols = x.shape[-1]
    out = F.cross_entropy(x.reshape(-1, cols), t.reshape(-1).long(), **kw)
    return out.view(t.shape) if kw.get("reduction") == "none" else out


def kernel_path(x, t, ignore_index=-100, reduction="mean", eps=0.0, z=0.0, scale=1.0,
                inplace=False):
    return CE._kernel_path(x, t, ignore_index, reduction, eps, z, scale, inplace)


# ------------------------------------------------------------ registration --

class RegistrationTests(unittest.TestCase):
    def test_schemas(self):
        p = "float scale, float smoothing, float z_loss, int ignore_index, float softcap=0."
        want = {
            "cross_entropy_fused": f"tuned::cross_entropy_fused(Tensor logits, Tensor labels, "
                                   f"Tensor grad_scale, {p}) -> (Tensor loss, Tensor lse, "
                                   "Tensor grad)",
            "cross_entropy_fused_": f"tuned::cross_entropy_fused_(Tensor(a!) logits, Tensor "
                                    f"labels, Tensor grad_scale, {p}) -> (Tensor loss, Tensor lse)",
            "cross_entropy_loss": f"tuned::cross_entropy_loss(Tensor logits, Tensor labels, {p}) "
                                  "-> (Tensor loss, Tensor lse, Tensor lse_lo)",
            "cross_entropy_backward": f"tuned::cross_entropy_backward(Tensor logits, Tensor "
                                      f"labels, Tensor lse, Tensor grad_output, {p}, "
                                      "Tensor? lse_lo=None) -> Tensor",
            "cross_entropy_rescale_": "tuned::cross_entropy_rescale_(Tensor(a!) grad, Tensor "
                                      "factor) -> ()",
        }
        for name, schema in want.items():
            self.assertEqual(str(getattr(OPS, name).default._schema), schema)

    def test_exports(self):
        self.assertTrue(callable(tuned.cross_entropy))
        self.assertTrue(callable(tuned.cross_entropy_errors))
        self.assertIn("cross_entropy", tuned.__all__)
        kp = tuned.kernel_paths()
        self.assertIn(kp["cross_entropy"], ("tuned", "torch"))
        if LIBTUNED:
            self.assertEqual(kp["cross_entropy"], "tuned",
                             "the build's libtuned exports tuned_cross_entropy")

    def test_lazy_import_binds_the_function(self):
        code = ("import tuned, sys; f = tuned.cross_entropy; "
                "print(type(f).__name__, type(tuned.cross_entropy).__name__, "
                "type(sys.modules['tuned.cross_entropy']).__name__)")
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "bindings", "python"))
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.split(), ["function", "function", "module"])

    def test_options_layout(self):
        cc = os.environ.get("CC", "cc")
        if shutil.which(cc) is None:
            self.skipTest(f"no C compiler ({cc})")
        fields = [f for f, _ in _lib.CeOptions._fields_]
        lines = [f'printf("{f} %zu\\n", offsetof(tuned_ce_options, {f}));' for f in fields]
        src = ("#include <stddef.h>\n#include <stdio.h>\n#include \"tuned.h\"\nint main(void)"
               "{" + "".join(lines) + 'printf("size %zu\\n", sizeof(tuned_ce_options));'
               "return 0;}\n")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "o.c"), "w") as f:
                f.write(src)
            r = subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), "-o",
                                os.path.join(d, "o"), os.path.join(d, "o.c")],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            out = subprocess.run([os.path.join(d, "o")], capture_output=True, text=True).stdout
        got = dict(line.split() for line in out.splitlines())
        for f in fields:
            self.assertEqual(int(got[f]), getattr(_lib.CeOptions, f).offset, f)
        self.assertEqual(int(got["size"]), ctypes.sizeof(_lib.CeOptions))


# -------------------------------------------------------------- torch math --

class TorchMathTests(unittest.TestCase):
    def test_matches_f_cross_entropy(self):
        n = 0
        for dtype in (torch.float32, torch.float64):
            tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else {}
            for shape in ((37,), (3, 11)):
                for ignore in (-100, 2):
                    x, t = make(shape, 50, dtype, seed=len(shape), ignore=ignore)
                    for red in ("mean", "sum", "none"):
                        for eps in (0.0, 0.1, 1.0):
                            xa = x.clone().requires_grad_()
                            xb = x.clone().requires_grad_()
                            a = CE._cross_entropy_torch(xa, t, ignore, red, eps)[0]
                            b = torch_reference(xb, t, ignore_index=ignore, reduction=red,
                                                label_smoothing=eps)
                            torch.testing.assert_close(a.to(dtype), b, **tol)
                            w = torch.randn(b.shape, dtype=dtype)
                            (a * w).sum().backward()
                            (b * w).sum().backward()
                            torch.testing.assert_close(xa.grad, xb.grad, **tol)
                            n += 1
        self.assertEqual(n, 2 * 2 * 2 * 3 * 3)

    def test_public_cpu_matches_torch(self):
        x, t = make((4, 9), 33, torch.float64)
        for red in ("mean", "sum", "none"):
            a = quiet(tuned.cross_entropy, x, t, reduction=red, label_smoothing=0.2)
            torch.testing.assert_close(a, torch_reference(x, t, reduction=red,
                                                          label_smoothing=0.2))
        # Unbatched (C,) input with a 0-d target, as F.cross_entropy.
        a = quiet(tuned.cross_entropy, x[0, 1], t[0, 1], reduction="none")
        self.assertEqual(a.shape, ())
        torch.testing.assert_close(a, F.cross_entropy(x[0, 1], t[0, 1], reduction="none"))

    def test_all_ignored(self):
        x = torch.randn(4, 7, dtype=torch.float64)
        t = torch.full((4,), -100)
        for red in ("mean", "sum", "none"):
            xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
            a = quiet(tuned.cross_entropy, xa, t, reduction=red, label_smoothing=0.1)
            b = F.cross_entropy(xb, t, reduction=red, label_smoothing=0.1)
            torch.testing.assert_close(a, b, equal_nan=True)
            a.sum().backward()
            b.sum().backward()
            torch.testing.assert_close(xa.grad, xb.grad, equal_nan=True)
            if red == "mean":
                self.assertTrue(math.isnan(a.item()), "all ignored, mean: NaN as torch")

    def test_extras_against_float64(self):
        x, t = make((5, 6), 40, torch.float64, seed=4)
        for red in ("mean", "sum", "none"):
            for kw in (dict(z=1e-3), dict(scale=0.3), dict(z=0.01, scale=2.5, eps=0.1),
                       dict(softcap=4.0), dict(softcap=2.0, z=1e-2, scale=0.7)):
                want, lse = reference(x, t, reduction=red, **kw)
                loss, got_lse, z = quiet(
                    tuned.cross_entropy, x, t, reduction=red, label_smoothing=kw.get("eps", 0.0),
                    z_loss=kw.get("z", 0.0), scale=kw.get("scale", 1.0),
                    softcap=kw.get("softcap"), return_lse=True, return_z_loss=True)
                torch.testing.assert_close(loss, want)
                torch.testing.assert_close(got_lse, lse)
                zr = torch.where(t != -100, kw.get("z", 0.0) * lse ** 2, 0.0)
                zr = {"none": zr, "sum": zr.sum(), "mean": zr.sum() / (t != -100).sum()}[red]
                torch.testing.assert_close(z, zr)
                # Its gradient against the float64 formula's.
                xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
                w = torch.randn(want.shape, dtype=torch.float64)
                (quiet(tuned.cross_entropy, xa, t, reduction=red,
                       label_smoothing=kw.get("eps", 0.0), z_loss=kw.get("z", 0.0),
                       scale=kw.get("scale", 1.0), softcap=kw.get("softcap")) * w).sum().backward()
                (reference(xb, t, reduction=red, **kw)[0] * w).sum().backward()
                torch.testing.assert_close(xa.grad, xb.grad)

    def test_softcap_masked_and_argmax(self):
        """The cap keeps -inf (a masked class takes no mass, its gradient
        is 0), as the kernels; return_argmax gives the lowest column of the
        largest capped logit, a NaN first, int64, the target's shape."""
        x = torch.randn(4, 9, dtype=torch.float64) * 6
        x[0, 2] = -math.inf
        x[1, 3] = math.nan
        x[2, 4] = x[2, 7] = 100.0
        t = torch.tensor([1, 0, 4, 8])
        xa = x.clone().requires_grad_()
        loss, am = quiet(tuned.cross_entropy, xa, t, reduction="none", softcap=5.0,
                         return_argmax=True)
        c = torch.where(x == -math.inf, x, 5.0 * torch.tanh(x / 5.0))
        torch.testing.assert_close(loss[[0, 2, 3]],
                                   F.cross_entropy(c, t, reduction="none")[[0, 2, 3]])
        self.assertTrue(math.isnan(loss[1].item()))
        loss[[0, 2, 3]].sum().backward()
        self.assertEqual(xa.grad[0, 2].item(), 0.0)
        self.assertEqual(am.dtype, torch.int64)
        self.assertEqual(am.tolist(), [c[0].argmax().item(), 3, 4, c[3].argmax().item()])
        one = quiet(tuned.cross_entropy, x[0], t[0], softcap=5.0, return_lse=True,
                    return_argmax=True)
        self.assertEqual(len(one), 3)
        self.assertEqual(one[2].shape, ())

    def test_bad_label_is_nan(self):
        x = torch.randn(3, 5)
        t = torch.tensor([1, 7, -100])
        loss = CE._cross_entropy_torch(x, t, reduction="none")[0]
        self.assertTrue(math.isnan(loss[1].item()))
        self.assertFalse(math.isnan(loss[0].item()))
        self.assertEqual(loss[2].item(), 0.0)


# --------------------------------------------------------------- operators --

class OperatorTests(unittest.TestCase):
    def check_path(self, x, t, dtype, **kw):
        """The operators' path against F.cross_entropy in float64 (loss
        and gradient), for each reduction (and in place)."""
        tol = dict(rtol=2e-5, atol=2e-6) if dtype == torch.float32 else dict(rtol=1e-5, atol=1e-6)
        ignore = kw.get("ignore_index", -100)
        for red in ("mean", "sum", "none"):
            for inplace in ((False, True) if red != "none" else (False,)):
                leaf = x.detach().clone().requires_grad_()
                xi = leaf * 1.0  # in place: an intermediate, as an LM head's logits
                loss, lse, _ = kernel_path(xi, t, ignore, red, kw.get("eps", 0.0),
                                           inplace=inplace)
                self.assertEqual(loss.dtype, torch.float32)
                xd = x.detach().double().requires_grad_()
                want = torch_reference(xd, t, reduction=red, ignore_index=ignore,
                                       label_smoothing=kw.get("eps", 0.0))
                torch.testing.assert_close(loss.double(), want.detach(), **tol)
                torch.testing.assert_close(lse.double(), torch.logsumexp(xd.detach(), -1), **tol)
                w = torch.randn(want.shape, dtype=torch.float64)
                (loss * w.float()).sum().backward()
                (want * w).sum().backward()
                self.assertEqual(leaf.grad.dtype, dtype)
                torch.testing.assert_close(leaf.grad.double(), xd.grad, **tol)

    def test_path_matches_torch(self):
        for dtype in (torch.float32, torch.float64):
            x, t = make((6,), 70, dtype)
            self.check_path(x, t, dtype)
            self.check_path(x, t, dtype, eps=0.1)
            x, t = make((6,), 70, dtype, ignore=3)
            self.check_path(x, t.int(), dtype, ignore_index=3)
            x, t = make((2, 5), 30, dtype, seed=1)
            self.check_path(x, t, dtype, eps=0.05)

    def test_shifted_view_keeps_rows(self):
        x, t = make((3, 8), 20, torch.float64, seed=2)
        shifted = x[:, :-1, :]
        rows = CE._rows(shifted)
        self.assertEqual(rows.data_ptr(), x.data_ptr(), "a shifted view is not copied")
        self.assertEqual(rows.shape, (3, 7, 20))
        self.assertEqual(CE._blocks(rows), [(b * 160, b * 7, 7, 20, 20) for b in range(3)])
        full = x.view(-1, 20)
        self.assertEqual(CE._blocks(CE._rows(x)), [(0, 0, 24, 20, 20)])
        sliced = torch.randn(5, 40)[:, :30]
        self.assertEqual(CE._blocks(CE._rows(sliced)), [(0, 0, 5, 30, 40)])
        self.assertIs(CE._rows(full), full)
        # Batch elements out of order (a transposed (T, B, V)): a copy.
        tb = x.transpose(0, 1)
        self.assertNotEqual(CE._rows(tb).data_ptr(), x.data_ptr())
        self.check_path(shifted, t[:, 1:], torch.float64)

    def test_opcheck(self):
        g = torch.Generator().manual_seed(7)
        base = torch.randn(3, 9, 41, generator=g)
        cases = [(torch.randn(6, 40, generator=g), torch.randint(0, 40, (6,), generator=g)),
                 (base[:, :-1, :], torch.randint(0, 41, (3, 8), generator=g)),   # shifted
                 (base[0, :, :30], torch.randint(0, 30, (9,), generator=g).int()),  # sliced
                 (torch.randn(4, 33, generator=g).bfloat16(),
                  torch.tensor([1, -100, 5, 32]))]
        for x, t in cases:
            t = t.clone()
            t.view(-1)[0] = -100
            lse = torch.logsumexp(x.float() * 0.5, -1)
            params = (0.5, 0.1, 1e-3, -100)
            for grad in (False, True):
                need = grad and x.dtype == torch.float32
                runs = [
                    (OPS.cross_entropy_fused.default,
                     (x.clone().requires_grad_(need), t, torch.tensor(0.25)) + params),
                    (OPS.cross_entropy_fused_.default, (x.clone(), t, torch.tensor(1.0)) + params),
                    (OPS.cross_entropy_loss.default,
                     (x.clone().requires_grad_(need), t) + params),
                    (OPS.cross_entropy_backward.default,
                     (x, t, lse, torch.randn(t.shape, generator=g)) + params),
                    (OPS.cross_entropy_backward.default, (x, t, lse, torch.tensor(0.5)) + params),
                    (OPS.cross_entropy_backward.default,
                     (x, t, lse, torch.tensor(0.5)) + params + (0.0, torch.zeros_like(lse))),
                    (OPS.cross_entropy_rescale_.default, (x.clone(), torch.tensor([3.0]))),
                ]
                for op, args in runs:
                    r = torch.library.opcheck(op, args)
                    self.assertTrue(all(v == "SUCCESS" for v in r.values()),
                                    (op, tuple(x.shape), r))

    def test_operator_values(self):
        x, t = make((5,), 30, torch.float64, seed=9)
        t[1] = 31  # out of range: NaN
        params = (0.5, 0.1, 1e-2, -100)
        loss, lse, grad = OPS.cross_entropy_fused(x, t, torch.tensor(0.5), *params)
        xd = x.clone().requires_grad_()
        want = torch.where(t == 31, 0.0, reference(xd, torch.where(t == 31, -100, t),
                                                   reduction="none", eps=0.1, z=1e-2,
                                                   scale=0.5)[0])
        self.assertTrue(math.isnan(loss[1].item()) and bool(grad[1].isnan().all()))
        ok = torch.tensor([0, 2, 3, 4])
        torch.testing.assert_close(loss[ok].double(), want[ok].detach())
        (want[ok].sum() * 0.5).backward()
        torch.testing.assert_close(grad[ok], xd.grad[ok])
        g2 = OPS.cross_entropy_backward(x, t, lse, torch.full((5,), 0.5), *params)
        torch.testing.assert_close(g2[ok], grad[ok])
        g3 = grad.clone()
        OPS.cross_entropy_rescale_(g3, torch.tensor([2.0]))
        torch.testing.assert_close(g3[ok], 2 * grad[ok])


# ------------------------------------------------------------------ compile --

class CompileTests(unittest.TestCase):
    def test_inductor_public_cpu(self):
        x, t = make((4, 6), 64, torch.float32, seed=11)

        def f(x, t):
            return tuned.cross_entropy(x, t, label_smoothing=0.1, z_loss=1e-3,
                                       return_lse=True)

        try:
            compiled = torch.compile(f, fullgraph=True)
            xa = x.clone().requires_grad_()
            la, lsea = quiet(compiled, xa, t)
        except Exception as exc:  # noqa: BLE001
            if "inductor" in repr(exc).lower() or "compiler" in repr(exc).lower():
                self.skipTest(f"inductor is not usable here: {exc!r:.200}")
            raise
        xb = x.clone().requires_grad_()
        lb, lseb = quiet(f, xb, t)
        torch.testing.assert_close(la, lb)
        torch.testing.assert_close(lsea, lseb)
        la.backward()
        lb.backward()
        torch.testing.assert_close(xa.grad, xb.grad)

    def test_inductor_operators_cpu(self):
        x, t = make((3, 5), 48, torch.float32, seed=12)

        def f(x, t, red, inplace, split):
            return CE._kernel_path(x * 1.0, t, -100, red, 0.1, 1e-3, 0.8, inplace,
                                   split=split)[0]

        for red, inplace, split in (("mean", False, False), ("mean", True, False),
                                    ("sum", False, False), ("none", False, False),
                                    ("mean", False, True), ("sum", False, True)):
            compiled = torch.compile(f, fullgraph=True)
            xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
            la, lb = compiled(xa, t, red, inplace, split), f(xb, t, red, inplace, split)
            torch.testing.assert_close(la, lb)
            w = torch.randn(lb.shape)
            (la * w).sum().backward()
            (lb * w).sum().backward()
            torch.testing.assert_close(xa.grad, xb.grad,
                                       msg=f"{red} inplace={inplace} split={split}")

    def test_fullgraph_meta_has_operators(self):
        for red, want in (("mean", "tuned.cross_entropy_fused.default"),
                          ("none", "tuned.cross_entropy_loss.default")):
            graphs = []

            def backend(gm, inputs):
                graphs.append(gm)
                return gm.forward

            def f(h, w, t):
                return tuned.cross_entropy((h @ w)[:, :-1, :], t, reduction=red, softcap=30.0)

            h = torch.empty(2, 9, 16, device="meta")
            w = torch.empty(16, 100, device="meta")
            t = torch.empty(2, 8, dtype=torch.long, device="meta")
            y = torch.compile(f, backend=backend, fullgraph=True)(h, w, t)
            self.assertEqual(y.shape, () if red == "mean" else (2, 8))
            self.assertEqual((y.dtype, y.device.type), (torch.float32, "meta"))
            self.assertEqual(len(graphs), 1)
            graph = str(graphs[0].graph)
            self.assertIn("cross_entropy", graph)


# ---------------------------------------------------------------- arguments --

class ArgumentTests(unittest.TestCase):
    def setUp(self):
        _dispatch._warned.clear()
        _dispatch.set_strict(False)

    def tearDown(self):
        _dispatch.set_strict(False)

    def test_bad_arguments(self):
        x, t = torch.randn(4, 10), torch.randint(0, 10, (4,))
        bad = [dict(reduction="avg"), dict(reduction=None), dict(label_smoothing=-0.1),
               dict(label_smoothing=1.5), dict(label_smoothing=math.nan), dict(z_loss=-1.0),
               dict(scale=0.0), dict(scale=math.inf), dict(softcap=0.0),
               dict(reduction="none", inplace_backward=True),
               dict(split=True, inplace_backward=True)]
        for kw in bad:
            with self.assertRaises(ValueError, msg=str(kw)):
                tuned.cross_entropy(x, t, **kw)
        with self.assertRaisesRegex(ValueError, "target of shape"):
            tuned.cross_entropy(x, t[:3])
        with self.assertRaisesRegex(ValueError, "class indices"):
            tuned.cross_entropy(x, torch.rand(4, 10))
        with self.assertRaisesRegex(ValueError, "floating logits"):
            tuned.cross_entropy(torch.ones(4, 10, dtype=torch.long), t)
        with self.assertRaises(TypeError):
            tuned.cross_entropy([1.0, 2.0], t)

    def test_num_items_leaf_and_second_backward(self):
        # num_items: a sum divided by it, as transformers' accumulation; the
        # kernel path and the torch path agree with F.cross_entropy's sum
        x, t = make((6,), 70, torch.float64)
        ref = F.cross_entropy(x, t, reduction="sum") / 11
        for run in (lambda: tuned.cross_entropy(x, t, reduction="sum", num_items=11),
                    lambda: CE._kernel_path(x, t, -100, "sum", 0.0, 0.0, 1.0, False, 11)[0]):
            self.assertTrue(torch.allclose(run().double(), ref, rtol=1e-6))
        with self.assertRaisesRegex(ValueError, "num_items"):
            tuned.cross_entropy(x, t, num_items=3)
        # in place over a leaf that requires grad is refused
        leaf = torch.randn(4, 10, requires_grad=True)
        with self.assertRaisesRegex(ValueError, "leaf"):
            tuned.cross_entropy(leaf, torch.randint(0, 10, (4,)), inplace_backward=True)
        # the fused path's backward runs once: a second one says so
        leaf = torch.randn(4, 10, dtype=torch.float64, requires_grad=True)
        loss = CE._kernel_path(leaf * 1.0, torch.randint(0, 10, (4,)), -100, "mean", 0.0, 0.0,
                               1.0, False)[0]
        loss.backward(retain_graph=True)
        with self.assertRaisesRegex(RuntimeError, "runs once"):
            loss.backward()
        # without a gradient to compute, nothing is written over the logits
        h = torch.randn(4, 10, dtype=torch.float64, requires_grad=True) * 1.0
        before = h.detach().clone()
        with torch.no_grad():
            CE._kernel_path(h, torch.randint(0, 10, (4,)), -100, "mean", 0.0, 0.0, 1.0, True)
        self.assertTrue(torch.equal(h.detach(), before))

    def test_split_mean_and_sum(self):
        # split=True through the operators: the loss operator, then the
        # backward operator with the upstream gradient times the reduction's
        # scale; the backward may run again (retain_graph)
        for red, items in (("mean", None), ("sum", None), ("sum", 11)):
            x, t = make((6,), 70, torch.float64, ignore=3)
            leaf = x.detach().clone().requires_grad_()
            loss = CE._kernel_path(leaf * 1.0, t, 3, red, 0.0, 0.0, 1.0, False, items,
                                   split=True)[0]
            xd = x.detach().clone().requires_grad_()
            want = F.cross_entropy(xd, t, ignore_index=3, reduction=red) / (items or 1)
            tol = dict(rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(loss.double(), want.detach(), **tol)
            loss.backward(torch.tensor(3.0, dtype=loss.dtype), retain_graph=True)
            (3 * want).backward()
            torch.testing.assert_close(leaf.grad, xd.grad, msg=f"{red} / {items}", **tol)
            loss.backward(torch.tensor(3.0, dtype=loss.dtype))
            torch.testing.assert_close(leaf.grad, 2 * xd.grad, msg=f"{red} / {items}: twice",
                                       **tol)

    def test_fallback_warns_once(self):
        x, t = torch.randn(4, 10), torch.randint(0, 10, (4,))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(3):
                tuned.cross_entropy(x, t)
        texts = [str(i.message) for i in w]
        self.assertEqual(len(texts), 1, texts)
        self.assertIn("tuned.cross_entropy: a cpu tensor", texts[0])

    def test_strict(self):
        tuned.set_strict(True)
        with self.assertRaises(tuned.FallbackError):
            tuned.cross_entropy(torch.randn(3, 4), torch.tensor([0, 1, 2]))
        with self.assertRaises(tuned.FallbackError):
            tuned.cross_entropy(torch.randn(3, 4, device="meta"),
                                torch.zeros(3, dtype=torch.long, device="meta"),
                                weight=torch.ones(4, device="meta"), label_smoothing=0.1)
        # What the operators take still runs (meta: their fake kernels),
        # class weights without smoothing included.
        y = tuned.cross_entropy(torch.randn(3, 4, device="meta"),
                                torch.zeros(3, dtype=torch.long, device="meta"),
                                weight=torch.ones(4, device="meta"))
        self.assertEqual((y.shape, y.dtype), ((), torch.float32))
        y = tuned.cross_entropy(torch.randn(3, 4, device="meta"),
                                torch.zeros(3, dtype=torch.long, device="meta"), reduction="none")
        self.assertEqual((y.shape, y.dtype), ((3,), torch.float32))

    def test_weight_runs_torch(self):
        x, t = make((7,), 12, torch.float64, seed=5)
        wt = torch.rand(12, dtype=torch.float64)
        for red in ("mean", "sum", "none"):
            xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
            a = quiet(tuned.cross_entropy, xa, t, wt, reduction=red, label_smoothing=0.1)
            b = F.cross_entropy(xb, t, wt, reduction=red, label_smoothing=0.1)
            torch.testing.assert_close(a, b)
            a.sum().backward()
            b.sum().backward()
            torch.testing.assert_close(xa.grad, xb.grad)
        with self.assertRaises(ValueError):
            quiet(tuned.cross_entropy, x, t, wt, z_loss=1e-4)

    def test_weight_split_path(self):
        x, t = make((9,), 12, torch.float32, seed=6)
        t[3] = -100
        wt = torch.rand(12) + 0.5
        for red in ("mean", "sum", "none"):
            xa = x.clone().requires_grad_()
            xb = x.double().requires_grad_()
            a = quiet(tuned.cross_entropy, xa, t, wt, reduction=red)
            b = F.cross_entropy(xb, t, wt.double(), reduction=red)
            torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-6)
            up = torch.randn(a.shape, dtype=torch.float64)
            (a.double() * up).sum().backward()
            (b * up).sum().backward()
            torch.testing.assert_close(xa.grad.double(), xb.grad, rtol=1e-5, atol=1e-6)
        # every row ignored: 0/0, as torch
        m = quiet(tuned.cross_entropy, x, torch.full((9,), -100), wt)
        self.assertTrue(torch.isnan(m))
        with self.assertRaises(ValueError):
            quiet(tuned.cross_entropy, x, t, torch.ones(11))

    def test_fp16_with_gradient_runs_split(self):
        # fp16 logits wanting a gradient: the loss operator and the backward
        # operator (the fused one would round the gradient to fp16 before a
        # loss scaler's factor reaches it); bf16 keeps the fused operator
        from torch.utils._python_dispatch import TorchDispatchMode

        class Seen(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.ops = []

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                self.ops.append(str(func))
                return func(*args, **(kwargs or {}))

        for dtype, want in ((torch.float16, "tuned.cross_entropy_loss"),
                            (torch.bfloat16, "tuned.cross_entropy_fused")):
            x = torch.randn(6, 9, device="meta", dtype=dtype, requires_grad=True)
            t = torch.zeros(6, dtype=torch.long, device="meta")
            with Seen() as seen:
                loss = tuned.cross_entropy(x, t, inplace_backward=False)
                loss.backward()
            names = " ".join(seen.ops)
            self.assertIn(want, names, f"{dtype}: {names}")
            if dtype == torch.float16:
                self.assertNotIn("tuned.cross_entropy_fused", names)
                self.assertIn("tuned.cross_entropy_backward", names)

    def test_return_tuple(self):
        x, t = make((3,), 5, torch.float32)
        r = quiet(tuned.cross_entropy, x, t, return_lse=True)
        self.assertEqual((len(r), r[1].shape), (2, (3,)))
        r = quiet(tuned.cross_entropy, x, t, return_z_loss=True)
        self.assertEqual((len(r), r[1].shape), (2, ()))
        r = quiet(tuned.cross_entropy, x, t, reduction="none", return_lse=True, return_z_loss=True)
        self.assertEqual([v.shape for v in r], [(3,), (3,), (3,)])
        self.assertIsInstance(quiet(tuned.cross_entropy, x, t), torch.Tensor)


def main():
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    return run_suite(suite)


if __name__ == "__main__":
    sys.exit(main())
