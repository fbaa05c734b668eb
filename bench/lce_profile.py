"""bench/lce_profile.py: where tuned.linear_cross_entropy's time goes, kernel
by kernel (torch.profiler), at the 8B-scale loss block (8192 tokens, hidden
4096, vocabulary 128256, bf16), forward + backward, for a few chunk sizes;
the composite evaluator's C loop runs the same GEMMs and kernel a chunk at
a time, and this says what the Python loop adds. Prints, per chunk size,
the kernels by total CUDA time (name, calls, total ms) and the wall time of
one block.

    python3 bench/lce_profile.py [--chunks 256,1024]"""

import argparse
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

import tuned


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", default="256,1024")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=128256)
    args = ap.parse_args()
    n, h, v = args.tokens, args.hidden, args.vocab
    g = torch.Generator(device="cuda").manual_seed(0)
    x0 = torch.randn(n, h, device="cuda", generator=g).to(torch.bfloat16)
    w0 = (torch.randn(v, h, device="cuda", generator=g) * h ** -0.5).to(torch.bfloat16)
    y = torch.randint(0, v, (n,), device="cuda", generator=g)

    def block(c):
        x = x0.detach().requires_grad_()
        w = w0.detach().requires_grad_()
        loss = tuned.linear_cross_entropy(x, w, y, chunk_rows=c)
        torch.autograd.grad(loss, (x, w))

    # First, the gradients under an upstream gradient other than 1 (the
    # backward's scaling) against torch's over fp32 logits, on 1024 tokens.
    for c in (int(s) for s in args.chunks.split(",")):
        xs = x0[:1024].detach().requires_grad_()
        ws = w0.detach().requires_grad_()
        gx, gw = torch.autograd.grad(2.5 * tuned.linear_cross_entropy(xs, ws, y[:1024],
                                                                       chunk_rows=c), (xs, ws))
        rx, rw = torch.autograd.grad(
            2.5 * torch.nn.functional.cross_entropy((xs @ ws.t()).float(), y[:1024]), (xs, ws))
        ex = ((gx.float() - rx.float()).abs().max() / rx.float().abs().max()).item()
        ew = ((gw.float() - rw.float()).abs().max() / rw.float().abs().max()).item()
        ok = ex < 2e-2 and ew < 2e-2
        print(f"check chunk {c}: 2.5 x loss: d hidden max err {ex:.1e}, d weight {ew:.1e} "
              f"(of the largest): {'ok' if ok else 'WRONG'}")
    for c in (int(s) for s in args.chunks.split(",")):
        for _ in range(3):
            block(c)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        block(c)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) * 1e3
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            block(c)
            torch.cuda.synchronize()
        print(f"\n== chunk {c}: one block {wall:.1f} ms wall")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14,
                                        max_name_column_width=70))
    return 0


if __name__ == "__main__":
    sys.exit(main())
