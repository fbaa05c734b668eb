"""bench/lce_gemm_probe.py: the GEMMs of an 8B-scale linear cross-entropy
(8192 tokens, hidden 4096, vocabulary 128256, bf16) one at a time, to
choose how the loss block spends its time at Liger's memory (a 256-row
chunk of logits, 64 MiB). Two orders are costed:

  rows   (today's) per chunk of R rows: logits = h_c W^T (R x V), the
         fused kernel in place, dh_c = g W, dW += g^T h_c (K = R: d weight
         read and written every chunk)
  vocab  a forward of row chunks (logits GEMM + the loss-only kernel,
         keeping each row's lse), then per block of B vocabulary rows:
         logits_b = h W_b^T (N x B), the gradient from the saved lse, dW_b
         = g_b^T h (K = N, written once), dh += g_b W_b

Each GEMM is timed with torch (cuBLAS; then with cuBLASLt preferred) as
the median of CUDA-event times after warm-up with L2 flushed
(cuda_timing.timed). The elementwise kernels are not timed here: the
fused kernel over the whole logits is about 1 ms, the loss-only about
0.5 ms (bench/results/2026-11-29-h200-cross-entropy/). A table last:
each GEMM's time and TFLOP/s, and each order's GEMM total.

    python3 bench/lce_gemm_probe.py [--reps 10]"""
import argparse

import torch

from cuda_timing import timed

N, H, V = 8192, 4096, 128256


def tflops(m, n, k, us):
    return 2.0 * m * n * k / (us * 1e-6) / 1e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    dev = "cuda"
    bf = torch.bfloat16
    h = torch.randn(N, H, device=dev, dtype=bf)
    w = torch.randn(V, H, device=dev, dtype=bf) * H ** -0.5
    dw = torch.zeros(V, H, device=dev, dtype=bf)
    dh = torch.zeros(N, H, device=dev, dtype=bf)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    rows = []

    def probe(name, m, n, k, fn):
        us = timed(fn, flush, args.reps)
        rows.append((name, m, n, k, us, tflops(m, n, k, us)))
        print(f"{name:44s} {us:9.1f} us {tflops(m, n, k, us):6.0f} TFLOP/s", flush=True)
        return us

    totals = {}
    for lib in ("cublas", "cublaslt"):
        torch.backends.cuda.preferred_blas_library(lib)
        for r in (256, 512, 1024):
            g = torch.randn(r, V, device=dev, dtype=bf) * 1e-3
            hc = h[:r]
            t_log = probe(f"{lib} rows R={r}: logits h_c W^T", r, V, H,
                          lambda: torch.mm(hc, w.t()))
            t_dh = probe(f"{lib} rows R={r}: dh_c = g W", r, H, V,
                         lambda: torch.mm(g, w, out=dh[:r]))
            t_dw = probe(f"{lib} rows R={r}: dW += g^T h_c", V, H, r,
                         lambda: dw.addmm_(g.t(), hc))
            totals[f"{lib} rows R={r}"] = (t_log + t_dh + t_dw) * N / r
            del g
        for b in (4096, 8192):
            wb = w[:b]
            g = torch.randn(N, b, device=dev, dtype=bf) * 1e-3
            t_fwd = probe(f"{lib} vocab: fwd logits R=256", 256, V, H,
                          lambda: torch.mm(h[:256], w.t())) * N / 256
            t_log = probe(f"{lib} vocab B={b}: logits_b h W_b^T", N, b, H,
                          lambda: torch.mm(h, wb.t()))
            t_dw = probe(f"{lib} vocab B={b}: dW_b = g_b^T h", b, H, N,
                         lambda: torch.mm(g.t(), h, out=dw[:b]))
            t_dh = probe(f"{lib} vocab B={b}: dh += g_b W_b", N, H, b,
                         lambda: dh.addmm_(g, wb))
            totals[f"{lib} vocab B={b}"] = t_fwd + (t_log + t_dw + t_dh) * V / b
            del g
    print("\n| order | GEMMs of the block (ms) |\n|---|---|")
    for k, v in totals.items():
        print(f"| {k} | {v / 1000:.1f} |")


if __name__ == "__main__":
    main()
