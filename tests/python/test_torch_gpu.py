"""test_torch_gpu.py TUNED LIBTUNED SOURCE_ROOT: tuned.softmax against
torch.softmax on a GPU (issue 6). Exits 77 (skipped) without torch or CUDA.

  shapes     the mission shape table (the largest scaled down) and odd
             sizes, fp16 / bf16 / fp32, 2-d and 3-d, against torch.softmax
             in fp32 (fp16 and bf16 within a rounding or two)
  layouts    row slices (a stride between rows), a misaligned view (offset
             one element), a transposed tensor (made contiguous; over dim 0
             moved last by a view), dim 0 of rows (falls back, warns once)
  streams    a side stream: the result is ordered on it
  autograd   the gradient equals torch.softmax's
  graphs     tuned.softmax captured in a torch.cuda.CUDAGraph and replayed
  choice     last_choice names the config and its source; after tuned.tune
             (a child `tuned`) the source is exact
  progress   Handle(progress=f).tune calls f with the tune's progress
"""

import sys
import warnings

from gpu_env import start  # noqa: E402 - exits 77 without torch or CUDA

store = start("tuned-torch-")

import torch  # noqa: E402

import tuned  # noqa: E402

failures = 0


def expect(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-5}
# Absolute slack: half the spacing of fp16's subnormals (outputs under 6e-5
# are stored with a fixed step of 6e-8, so their relative error is large);
# bf16 and fp32 have fp32's range.
ATOL = {torch.float16: 3e-8, torch.bfloat16: 1e-37, torch.float32: 1e-37}


def compare(x, what, dim=-1):
    y = tuned.softmax(x, dim)
    ref = torch.softmax(x.double(), dim)
    # |y - ref| <= atol + rtol |ref|, reported as the worst relative excess
    # over atol: torch.softmax itself passes it (the fallback case).
    excess = ((y.double() - ref).abs() - ATOL[x.dtype]).clamp(min=0)
    err = (excess / ref.abs().clamp(min=1e-300)).max().item()
    ok = err <= TOL[x.dtype] and y.shape == x.shape and y.dtype == x.dtype
    expect(ok, f"{what}: max relative error {err:.3g}")
    return y


shapes = [(32, 128), (256, 1024), (1024, 1024), (2048, 2048), (4096, 4096), (1024, 50257),
          (4096, 32000), (1, 262144), (65536, 128), (512, 128256), (7, 1), (3, 4097)]
for dtype in (torch.float16, torch.bfloat16, torch.float32):
    for rows, cols in shapes:
        x = torch.randn(rows, cols, device="cuda", dtype=dtype) * 4
        compare(x, f"{rows}x{cols} {dtype}")
        c = tuned.last_choice()
        expect(c is not None and c.source in ("exact", "nearest", "default") and c.config,
               f"last_choice after {rows}x{cols} {dtype}: {c}")
    x = torch.randn(4, 9, 1000, device="cuda", dtype=dtype)
    compare(x, f"3-d {dtype}")
    base = torch.randn(64, 1500, device="cuda", dtype=dtype)
    compare(base[:, :1000], f"row slices {dtype}")
    flat = torch.randn(64 * 1000 + 1, device="cuda", dtype=dtype)
    compare(flat[1:].view(64, 1000), f"misaligned view {dtype}")
    expect(not tuned.last_choice().aligned, "a misaligned view ran an aligned kernel")

with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    t = torch.randn(1000, 64, device="cuda", dtype=torch.float16).t()
    compare(t, "transposed (made contiguous)")
    compare(t, "transposed, dim 0 (moved last by a view)", dim=0)
    expect(not w, f"warnings for a transposed tensor: {[str(i.message) for i in w]}")
    compare(torch.randn(64, 1000, device="cuda", dtype=torch.float16), "dim 0 (fallback)", dim=0)
    expect(any("not adjacent" in str(i.message) for i in w), "no warning for dim 0's fallback")

side = torch.cuda.Stream()
with torch.cuda.stream(side):
    x = torch.randn(512, 4096, device="cuda", dtype=torch.float16)
    y = tuned.softmax(x)
side.synchronize()
expect(torch.allclose(y.float(), torch.softmax(x.float(), -1), rtol=2e-3, atol=1e-6), "side stream")

x = torch.randn(64, 1000, device="cuda", dtype=torch.float32, requires_grad=True)
g = torch.randn(64, 1000, device="cuda")
(tuned.softmax(x) * g).sum().backward()
gx = x.grad.clone()
x.grad = None
(torch.softmax(x, -1) * g).sum().backward()
expect(torch.allclose(gx, x.grad, rtol=1e-4, atol=1e-6), "autograd")

x = torch.randn(256, 1024, device="cuda", dtype=torch.float16)
tuned.softmax(x)  # the first call of a shape loads its kernel: before the capture
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    y = tuned.softmax(x)
x.copy_(torch.randn_like(x))
graph.replay()
torch.cuda.synchronize()
expect(torch.allclose(y.float(), torch.softmax(x.float(), -1), rtol=2e-3, atol=1e-6),
       "CUDA graph replay")

before = tuned.lookup(128, 3000, "fp16")
expect(before.source != "exact", f"128x3000 stored before any tune: {before}")
tuned.tune(128, 3000, "fp16", time_s=3)
x = torch.randn(128, 3000, device="cuda", dtype=torch.float16)
compare(x, "after tune")
c = tuned.last_choice()
expect(c.source == "exact", f"after tuned.tune the call used {c.source} {c.config}")
print(f"tuned 128x3000 fp16: {c.config} ({c.source}, {c.median_us:.2f} us)")

# A handle's progress reaches Python: tune() calls back on this thread.
reports = []
with tuned.Handle(store=store, progress=reports.append) as h:
    h.tune(96, 2000, "fp32", time_s=2)
expect(reports, "Handle(progress=...).tune reported no progress")
if reports:
    last = reports[-1]
    expect((last["rows"], last["cols"], last["dtype"]) == (96, 2000, "fp32"),
           f"progress names another shape: {last}")
    expect(last["evaluated"] > 0 and last["best_config"] and last["best_us"] > 0,
           f"the last progress report has no measured variant: {last}")
    print(f"progress: {len(reports)} reports, last {last['state']} {last['evaluated']} "
          f"variants, best {last['best_config']}")

import shutil  # noqa: E402

shutil.rmtree(store, ignore_errors=True)
print(f"python-gpu: {failures} failure(s)")
sys.exit(1 if failures else 0)
