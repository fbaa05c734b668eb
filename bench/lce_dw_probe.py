"""bench/lce_dw_probe.py: ways to add one chunk's d weight, dW += g^T h_c,
at the 8B-scale loss block within Liger's memory (vocabulary 128256,
hidden 4096, bf16, a chunk of R = 256 rows: K = 256). There the GEMM took
808 us a chunk (bench/results/2026-11-29-h200-linear-ce/call5/
lce_profile.log: 25 of the block's 51 ms), where its bytes (d weight read
and written, 2.1 GB) take about 0.55 ms at the copy's rate and its flops
0.4 ms: whether another form of the same sum gets nearer.

Forms, each checked against the first (max |diff| over max |dW|, in bf16
rounding) before it is timed:
  addmm       torch.addmm(dW, g.t(), h, out=dW)            (today's)
  transposed  the sum kept as dW^T (H x V): addmm(dWt, h.t(), g)
  halves      two addmm over the vocabulary's halves (rows of dW)
  streams     four vocabulary quarters, on two streams
  lt          addmm with torch's cuBLASLt backend preferred
  triton      a Triton kernel: each program one BM x BN tile of dW,
              its old values loaded before the K loop (their read
              overlapping the products), BK = 64, grouped tile order
The median of CUDA-event times after warm-up with L2 flushed
(cuda_timing.timed); R = 512 for comparison (K = 512: half the chunks).

    python3 bench/lce_dw_probe.py [--reps 20]"""
import argparse

import torch

from cuda_timing import timed

V, H = 128256, 4096

try:
    import triton
    import triton.language as tl

    @triton.jit
    def _dw_add(g_ptr, h_ptr, c_ptr, V, H, R, BM: tl.constexpr, BN: tl.constexpr,
                BK: tl.constexpr, GROUP: tl.constexpr):
        """c[V, H] += g[R, V]^T @ h[R, H], one BM x BN tile of c a program."""
        pid = tl.program_id(0)
        num_m = tl.cdiv(V, BM)
        num_n = tl.cdiv(H, BN)
        in_group = GROUP * num_n
        first_m = (pid // in_group) * GROUP
        size_m = min(num_m - first_m, GROUP)
        pid_m = first_m + (pid % in_group) % size_m
        pid_n = (pid % in_group) // size_m
        m = pid_m * BM + tl.arange(0, BM)
        n = pid_n * BN + tl.arange(0, BN)
        c_at = c_ptr + m[:, None] * H + n[None, :]
        c_ok = (m[:, None] < V) & (n[None, :] < H)
        old = tl.load(c_at, mask=c_ok, other=0.0)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, R, BK):
            k = k0 + tl.arange(0, BK)
            a = tl.load(g_ptr + k[None, :] * V + m[:, None],
                        mask=(k[None, :] < R) & (m[:, None] < V), other=0.0)
            b = tl.load(h_ptr + k[:, None] * H + n[None, :],
                        mask=(k[:, None] < R) & (n[None, :] < H), other=0.0)
            acc = tl.dot(a, b, acc)
        acc += old.to(tl.float32)
        tl.store(c_at, acc.to(c_ptr.dtype.element_ty), mask=c_ok)

    def triton_add(bm, bn, warps, stages):
        def run(dw, g, h):
            r = g.shape[0]
            grid = (triton.cdiv(V, bm) * triton.cdiv(H, bn),)
            _dw_add[grid](g, h, dw, V, H, r, BM=bm, BN=bn, BK=64, GROUP=8,
                          num_warps=warps, num_stages=stages)
        return run
except ImportError:  # the table says so
    triton = None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    dev, bf = "cuda", torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(0)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    dw0 = (torch.randn(V, H, device=dev, generator=gen) * 1e-2).to(bf)
    side = torch.cuda.Stream()

    def addmm(dw, g, h):
        torch.addmm(dw, g.t(), h, out=dw)

    def transposed(dwt, g, h):
        torch.addmm(dwt, h.t(), g, out=dwt)

    def halves(dw, g, h):
        for v0, v1 in ((0, V // 2), (V // 2, V)):
            torch.addmm(dw[v0:v1], g[:, v0:v1].t(), h, out=dw[v0:v1])

    def streams(dw, g, h):
        q = [0, V // 4, V // 2, 3 * V // 4, V]
        side.wait_stream(torch.cuda.current_stream())
        for i in range(4):
            with torch.cuda.stream(side if i % 2 else torch.cuda.current_stream()):
                v0, v1 = q[i], q[i + 1]
                torch.addmm(dw[v0:v1], g[:, v0:v1].t(), h, out=dw[v0:v1])
        torch.cuda.current_stream().wait_stream(side)

    def lt(dw, g, h):
        old = torch.backends.cuda.preferred_blas_library()
        torch.backends.cuda.preferred_blas_library("cublaslt")
        try:
            torch.addmm(dw, g.t(), h, out=dw)
        finally:
            torch.backends.cuda.preferred_blas_library(old)

    forms = [("addmm", addmm, False), ("transposed", transposed, True), ("halves", halves, False),
             ("streams", streams, False), ("lt", lt, False)]
    if triton is not None:
        for bm, bn, warps, stages in ((128, 256, 8, 3), (128, 128, 4, 3), (256, 128, 8, 3),
                                      (128, 256, 8, 2)):
            forms.append((f"triton {bm}x{bn} w{warps} s{stages}", triton_add(bm, bn, warps, stages),
                          False))
    rows = []
    for r in (256, 512):
        g = (torch.randn(r, V, device=dev, generator=gen) * 1e-3).to(bf)
        h = torch.randn(r, H, device=dev, generator=gen).to(bf)
        want = torch.addmm(dw0.float(), g.float().t(), h.float())
        scale = want.abs().max().item()
        for name, fn, trans in forms:
            if r == 512 and name not in ("addmm", "transposed"):
                continue
            start = dw0.t().contiguous() if trans else dw0.clone()
            got = start.clone()
            try:
                fn(got, g, h)
            except Exception as e:  # noqa: BLE001 - a form that does not run is a row
                rows.append((r, name, f"error: {type(e).__name__}: {str(e)[:80]}", "", ""))
                continue
            torch.cuda.synchronize()
            err = ((got.t() if trans else got).float() - want).abs().max().item() / scale
            if err > 1e-2:
                rows.append((r, name, f"wrong ({err:.1e})", "", ""))
                continue
            work = start.clone()
            us = timed(lambda: fn(work, g, h), flush, args.reps)
            tflops = 2.0 * V * H * r / (us * 1e-6) / 1e12
            rows.append((r, name, f"{us:.1f}", f"{tflops:.0f}", f"{err:.1e}"))
            print(f"R={r} {name}: {us:.1f} us, {tflops:.0f} TFLOP/s, err {err:.1e}", flush=True)
    print("\n| R | form | us | TFLOP/s | err |\n|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(x) for x in row) + " |")


if __name__ == "__main__":
    main()
