"""test_linear_cross_entropy.py LIBTUNED SOURCE_ROOT: tuned.linear_cross_entropy
(tuned/linear_cross_entropy.py) against tuned.cross_entropy of the whole
logits in float64. On the CPU the chunks run tuned.cross_entropy's torch
path; on a CUDA GPU (when there is one, bf16) tuned's kernels.

  math      fp32, every reduction, with and without a bias, with label
            smoothing, z-loss, scale and softcap, chunks of 8 rows (and
            one chunk): the loss and the gradients to hidden, weight and
            bias within 1e-5 of float64, for a random upstream gradient
  splits    vocab_splits 2 and 3 (the chunk's logits a vocabulary block
            at a time): every reduction and option, labels on the blocks'
            edges, as above; a label outside [0, V) gives a NaN loss
  shapes    (B, T, H) hidden, int32 labels, every row ignored (mean: NaN
            as torch, zero gradients), no rows
  options   num_items divides a sum; accumulate_fp32 gives the same
  autograd  no_grad gives the loss alone; a second backward of mean is
            refused with a reason; no rows; autocast (bf16 GEMMs, fp32
            parameters)
  chunking  the default rule: as many rows as fit max_chunk_bytes of
            logits, in multiples of 64, at least 64
  errors    bad shapes, dtypes, options: ValueError or TypeError naming
            the argument
  compile   torch.compile (aot_eager) of the loss and its backward: as
            eager
Exits 77 without torch. Ends with 'N passed, N failed'."""

import math
import os
import sys
import warnings

LIB = sys.argv[1] if len(sys.argv) > 1 else ""
ROOT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
if LIB:
    os.environ["TUNED_LIBRARY"] = LIB
os.environ.setdefault("TUNED_POLICY", "never")

try:
    import torch
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)

import tuned  # noqa: E402
from verdicts import Verdicts  # noqa: E402

warnings.simplefilter("ignore")
verdicts = Verdicts()
expect = verdicts.expect


def inputs(n, h, v, dtype, device, seed, bias=False):
    g = torch.Generator().manual_seed(seed)
    hid = torch.randn(n, h, generator=g).to(device=device, dtype=dtype).requires_grad_()
    w = (torch.randn(v, h, generator=g) * 0.5).to(device=device, dtype=dtype).requires_grad_()
    b = (torch.randn(v, generator=g).to(device=device, dtype=dtype).requires_grad_()
         if bias else None)
    y = torch.randint(0, v, (n,), generator=g).to(device)
    y[::5] = -100
    return hid, w, b, y


def reference(hid, w, b, y, up, **kw):
    """(loss, [d hidden, d weight, d bias]) in float64 through
    tuned.cross_entropy of the whole logits."""
    h2 = hid.detach().double().requires_grad_()
    w2 = w.detach().double().requires_grad_()
    b2 = b.detach().double().requires_grad_() if b is not None else None
    z = h2 @ w2.t() + (b2 if b2 is not None else 0.0)
    loss = tuned.cross_entropy(z, y, **kw)
    (loss * up).sum().backward()
    return loss.detach(), [t.grad for t in (h2, w2, b2) if t is not None]


def close(got, want, tol):
    err = (got.double() - want).abs().max().item()
    return err <= tol * max(1.0, want.abs().max().item()), err


def math_cases(device, dtype, tol):
    n, h, v = 37, 16, 50
    extras = ({}, {"label_smoothing": 0.1}, {"z_loss": 1e-3}, {"scale": 0.7}, {"softcap": 3.0})
    seed = 0
    for red in ("mean", "sum", "none"):
        for kw in extras:
            for bias in (False, True):
                for chunk in (8, None):
                    seed += 1
                    hid, w, b, y = inputs(n, h, v, dtype, device, seed, bias)
                    check_against_reference(f"{device} {dtype} {red} {kw} bias={bias} "
                                            f"chunk={chunk}", hid, w, b, y, red, tol,
                                            dict(kw, chunk_rows=chunk))


def check_against_reference(what, hid, w, b, y, red, tol, kw):
    """One call of tuned.linear_cross_entropy (kw: its options) and its
    backward for a random upstream gradient, against reference()."""
    n, device = hid.shape[0], hid.device
    up = (torch.randn(n, device=device, dtype=torch.float64) if red == "none"
          else torch.tensor(1.7, device=device, dtype=torch.float64))
    loss = tuned.linear_cross_entropy(hid, w, y, bias=b, reduction=red, **kw)
    (loss.double() * up).sum().backward()
    options = {k: x for k, x in kw.items() if k not in ("chunk_rows", "vocab_splits")}
    ref, grads = reference(hid, w, b, y, up, reduction=red, **options)
    ok, err = close(loss, ref, tol)
    expect(ok and loss.dtype == torch.float32, f"{what}: loss error {err:.3g}")
    for name, t, g in zip(("hidden", "weight", "bias"), (hid, w, b), grads):
        ok, err = close(t.grad, g, tol * 10)
        expect(ok and t.grad.dtype == t.dtype, f"{what}: d {name} error {err:.3g}")


def split_cases(device, dtype, tol):
    """vocab_splits: the chunk's logits in blocks of the vocabulary (300
    columns: 2 blocks of 192 + 108, 3 of 128 + 128 + 44), labels on every
    block's first and last column, every option; and a label outside
    [0, V): a NaN loss."""
    n, h, v = 37, 16, 300
    extras = ({}, {"label_smoothing": 0.1}, {"z_loss": 1e-3}, {"scale": 0.7},
              {"softcap": 3.0}, {"label_smoothing": 0.2, "z_loss": 1e-3, "softcap": 5.0})
    seed = 100
    for splits in (2, 3):
        for red in ("mean", "sum", "none"):
            for kw in extras:
                seed += 1
                hid, w, b, y = inputs(n, h, v, dtype, device, seed, bias=seed % 2 == 0)
                y[1:9] = torch.tensor([0, 127, 128, 191, 192, 255, 256, 299])
                check_against_reference(
                    f"{device} {dtype} vocab_splits={splits} {red} {kw} bias={b is not None}",
                    hid, w, b, y, red, tol, dict(kw, chunk_rows=8, vocab_splits=splits))
    hid, w, _, y = inputs(n, h, v, dtype, device, 7)
    y[3] = v
    loss = tuned.linear_cross_entropy(hid, w, y, reduction="sum", chunk_rows=8, vocab_splits=2)
    expect(math.isnan(loss.item()), f"{device} vocab_splits=2, a label of {v}: loss {loss.item()}")


def shape_cases(device, dtype, tol):
    g = torch.Generator().manual_seed(7)
    hid = torch.randn(2, 9, 16, generator=g).to(device=device, dtype=dtype).requires_grad_()
    w = torch.randn(40, 16, generator=g).to(device=device, dtype=dtype).requires_grad_()
    y = torch.randint(0, 40, (2, 9), generator=g).to(device)
    loss = tuned.linear_cross_entropy(hid, w, y.int(), reduction="none", chunk_rows=4)
    expect(loss.shape == (2, 9), f"(B, T, H) none: loss shape {tuple(loss.shape)}")
    loss.sum().backward()
    ref, grads = reference(hid, w, None, y, torch.ones((), dtype=torch.float64, device=device),
                           reduction="none")
    ok, err = close(loss, ref, tol)
    expect(ok, f"(B, T, H) int32 labels: loss error {err:.3g}")
    ok, err = close(hid.grad, grads[0], tol * 10)
    expect(ok and hid.grad.shape == hid.shape, f"(B, T, H): d hidden error {err:.3g}")

    hid, w, _, y = inputs(10, 8, 12, dtype, device, 3)
    y.fill_(-100)
    loss = tuned.linear_cross_entropy(hid, w, y)
    loss.backward()
    expect(math.isnan(loss.item()) and bool((hid.grad == 0).all()) and
           bool((w.grad == 0).all()), f"every row ignored: loss {loss.item()}, zero gradients")

    hid, w, _, y = inputs(0, 8, 12, dtype, device, 4)
    loss = tuned.linear_cross_entropy(hid, w, y, reduction="sum")
    loss.backward()
    expect(loss.item() == 0.0 and w.grad is not None and bool((w.grad == 0).all()),
           f"no rows: sum {loss.item()}")


def option_cases(device, dtype, tol):
    hid, w, b, y = inputs(33, 16, 40, dtype, device, 11, bias=True)
    n = torch.tensor(50.0, device=device)
    loss = tuned.linear_cross_entropy(hid, w, y, bias=b, reduction="sum", num_items=n,
                                      chunk_rows=10)
    loss.backward()
    ref, grads = reference(hid, w, b, y, torch.ones((), dtype=torch.float64, device=device),
                           reduction="sum")
    ok, err = close(loss, ref / 50.0, tol)
    expect(ok, f"num_items: loss error {err:.3g}")
    ok, err = close(w.grad, grads[1] / 50.0, tol * 10)
    expect(ok, f"num_items: d weight error {err:.3g}")
    w_grad = w.grad.clone()
    hid.grad = w.grad = b.grad = None
    tuned.linear_cross_entropy(hid, w, y, bias=b, reduction="sum", num_items=n, chunk_rows=10,
                               accumulate_fp32=True).backward()
    ok, err = close(w.grad, w_grad.double(), tol * 10)
    expect(ok and w.grad.dtype == w.dtype, f"accumulate_fp32: d weight differs by {err:.3g}")


def autograd_cases():
    # no gradient wanted: the loss alone (the same value)
    hid, w, _, y = inputs(20, 8, 30, torch.float32, "cpu", 31)
    with torch.no_grad():
        a = tuned.linear_cross_entropy(hid, w, y, chunk_rows=6)
    b = tuned.linear_cross_entropy(hid, w, y, chunk_rows=6)
    expect(abs(a.item() - b.item()) <= 1e-6 * abs(b.item()) and not a.requires_grad,
           f"no_grad: {a.item()} against {b.item()}")
    # a second backward of mean says why
    b.backward(retain_graph=True)
    try:
        b.backward()
        expect(False, "a second backward of mean is refused")
    except RuntimeError as exc:
        expect("runs once" in str(exc), f"second backward: {exc}")
    # no rows, mean: NaN loss, zero gradients
    hid, w, _, y = inputs(0, 8, 12, torch.float32, "cpu", 32)
    loss = tuned.linear_cross_entropy(hid, w, y)
    loss.backward()
    expect(math.isnan(loss.item()) and bool((w.grad == 0).all()),
           f"no rows, mean: loss {loss.item()}, d weight finite zeros")
    # autocast (fp32 parameters, bf16 GEMMs): runs, and the gradients
    # reach the fp32 parameters
    hid, w, _, y = inputs(16, 8, 30, torch.float32, "cpu", 33)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = tuned.linear_cross_entropy(hid, w, y, chunk_rows=5)
    loss.backward()
    ref, grads = reference(hid, w, None, y, torch.ones((), dtype=torch.float64))
    ok, err = close(w.grad, grads[1], 5e-2)
    expect(ok and w.grad.dtype == torch.float32 and abs(loss.item() - ref.item()) < 5e-2 *
           abs(ref.item()), f"autocast bf16: loss {loss.item()} against {ref.item()}, "
                            f"d weight error {err:.3g}")


def fp16_case():
    # fp16 mean with a gradient: per-row losses reduced after (the backward
    # forms the gradients with the upstream one); fp16's rounding
    hid, w, _, y = inputs(20, 8, 30, torch.float16, "cpu", 41)
    loss = tuned.linear_cross_entropy(hid, w, y, chunk_rows=7)
    loss.backward(torch.tensor(4.0))
    ref, grads = reference(hid, w, None, y, torch.tensor(4.0, dtype=torch.float64))
    ok_h, err_h = close(hid.grad, grads[0], 2e-3)
    ok_w, err_w = close(w.grad, grads[1], 2e-3)
    expect(abs(loss.item() - ref.item()) <= 1e-3 * abs(ref.item()) and ok_h and ok_w,
           f"fp16 mean: loss {loss.item()} against {ref.item()}, d hidden {err_h:.3g}, "
           f"d weight {err_w:.3g}")


def chunk_rule():
    from tuned.linear_cross_entropy import _chunk_rows
    expect(_chunk_rows(4096, 128256, 2, None, 256 << 20) == 1024,
           f"4096 rows of 128256 bf16 in 256 MiB: {_chunk_rows(4096, 128256, 2, None, 256 << 20)}")
    expect(_chunk_rows(100, 128256, 2, None, 1 << 20) == 64, "at least 64 rows a chunk")
    expect(_chunk_rows(30, 1000, 4, None, 256 << 20) == 30, "no more rows than there are")
    expect(_chunk_rows(4096, 1000, 4, 100, 256 << 20) == 100, "chunk_rows is taken")
    # a stored winner's text, and the blocks it names: the widths are the
    # registry's (tuned__kind_block_cols; tests/test_space.c holds the same)
    from tuned.linear_cross_entropy import _parse_chunk, _split_bounds
    for text, want in (("chunk1024", (1024, 1)), ("chunk2048.v17", (2048, 17)),
                       ("chunk64.v1", None), ("chunk64.v", None), ("chunk0", None),
                       ("chunkx", None), ("w8.r1", None), ("chunk64.x8", None),
                       ("chunk\u00b2", None), ("chunk64.v\u00b2", None)):
        expect(_parse_chunk(text) == want, f"{text}: {_parse_chunk(text)}, want {want}")
    for cols, splits, width in ((128256, 17, 7552), (128256, 2, 64128), (1000000, 62, 16192),
                                (32000, 2, 16000), (1003, 17, 64), (60, 4, 60)):
        got = _split_bounds(cols, splits)
        expect(got[1] == width and got[-1] == cols and all(
            b - a == width for a, b in zip(got[:-2], got[1:-1])),
               f"{cols} columns in {splits} blocks: {got[:3]}..., want {width} wide")


def error_cases():
    hid = torch.randn(4, 8)
    w = torch.randn(10, 8)
    y = torch.randint(0, 10, (4,))
    bad = [
        ("weight 1-d", lambda: tuned.linear_cross_entropy(hid, w[0], y)),
        ("H mismatch", lambda: tuned.linear_cross_entropy(hid, torch.randn(10, 7), y)),
        ("labels shape", lambda: tuned.linear_cross_entropy(hid, w, y[:3])),
        ("float labels", lambda: tuned.linear_cross_entropy(hid, w, y.float())),
        ("dtypes differ", lambda: tuned.linear_cross_entropy(hid, w.double(), y)),
        ("bias shape", lambda: tuned.linear_cross_entropy(hid, w, y, bias=torch.randn(9))),
        ("reduction", lambda: tuned.linear_cross_entropy(hid, w, y, reduction="avg")),
        ("num_items with mean", lambda: tuned.linear_cross_entropy(hid, w, y, num_items=3)),
        ("smoothing", lambda: tuned.linear_cross_entropy(hid, w, y, label_smoothing=1.5)),
        ("z_loss", lambda: tuned.linear_cross_entropy(hid, w, y, z_loss=-1.0)),
        ("scale", lambda: tuned.linear_cross_entropy(hid, w, y, scale=0.0)),
        ("softcap", lambda: tuned.linear_cross_entropy(hid, w, y, softcap=float("inf"))),
        ("chunk_rows", lambda: tuned.linear_cross_entropy(hid, w, y, chunk_rows=0)),
        ("max_chunk_bytes", lambda: tuned.linear_cross_entropy(hid, w, y, max_chunk_bytes=0)),
        ("not a tensor", lambda: tuned.linear_cross_entropy([1.0], w, y)),
    ]
    for what, fn in bad:
        try:
            fn()
            expect(False, f"{what}: accepted")
        except (ValueError, TypeError) as exc:
            expect("linear_cross_entropy" in str(exc), f"{what}: message {exc}")


def compile_case(device, dtype, tol):
    hid, w, b, y = inputs(24, 16, 30, dtype, device, 21, bias=True)

    def f(hh, ww, bb):
        return tuned.linear_cross_entropy(hh, ww, y, bias=bb, chunk_rows=8, label_smoothing=0.1)

    eager = f(hid, w, b)
    eager.backward()
    want = [t.grad.clone() for t in (hid, w, b)]
    hid.grad = w.grad = b.grad = None
    got = torch.compile(f, backend="aot_eager")(hid, w, b)
    got.backward()
    ok = abs(got.item() - eager.item()) <= tol * abs(eager.item()) and all(
        bool(torch.allclose(t.grad, g, rtol=tol, atol=tol)) for t, g in zip((hid, w, b), want))
    expect(ok, f"{device} torch.compile: loss {got.item()} against {eager.item()}")


math_cases("cpu", torch.float32, 1e-5)
split_cases("cpu", torch.float32, 1e-5)
shape_cases("cpu", torch.float32, 1e-5)
option_cases("cpu", torch.float32, 1e-5)
autograd_cases()
fp16_case()
chunk_rule()
error_cases()
compile_case("cpu", torch.float32, 1e-5)
if torch.cuda.is_available():
    math_cases("cuda", torch.float32, 1e-4)
    split_cases("cuda", torch.float32, 1e-4)
    shape_cases("cuda", torch.float32, 1e-4)
    option_cases("cuda", torch.float32, 1e-4)
verdicts.finish()
