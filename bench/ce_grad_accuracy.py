"""bench/ce_grad_accuracy.py: how tuned.cross_entropy's gradients compare
with torch's own against float64, over many random cases, per dtype and
path.

The GPU test (tests/python/test_cross_entropy_gpu.py) holds each case's
largest gradient error to twice torch's; the largest error of one tensor
is one unlucky rounding, so its ratio moves from run to run. This script
draws --cases random logits per (dtype, shape) and prints, for the fused
path (mean: the gradient written in the forward) and the split path
(none, upstream gradient per row: the backward kernel from the saved
lse), the distribution of the ratio of tuned's largest error to torch's
(median, 90th percentile, largest) and the ratio of the root-mean-square
errors over all cases (every element's error, not only the largest).

    python3 bench/ce_grad_accuracy.py [--cases 40] [--dtypes fp32,bf16] [--worst N]

--worst N also prints the N cases of the largest ratio: shape, seed, and
where tuned's largest error sits (row, column, the label's column or
not, the float64 gradient there, both errors there).

Needs a CUDA GPU, torch, tuned on PYTHONPATH (TUNED_LIBRARY; a store in
TUNED_DB, else each shape runs its default config)."""

import argparse
import statistics

import torch
import torch.nn.functional as F

import tuned

SHAPES = [(64, 1000), (256, 32000), (8, 128256), (512, 50257)]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def case(rows, cols, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(rows, cols, device="cuda", generator=g) * 4.0).to(dtype)
    t = torch.randint(0, cols, (rows,), device="cuda", generator=g)
    t[::7] = -100
    w = torch.randn(rows, device="cuda", generator=g)
    return x, t, w


def grads(x, t, w, red):
    """(tuned's, torch's, float64's) gradient of (loss * w).sum() (w: None
    for mean)."""
    out = []
    for fn, dt in ((tuned.cross_entropy, x.dtype), (F.cross_entropy, x.dtype),
                   (F.cross_entropy, torch.float64)):
        xi = x.detach().to(dt).requires_grad_()
        loss = fn(xi, t, reduction=red)
        (loss if w is None else loss * w.to(loss.dtype)).sum().backward()
        out.append(xi.grad.double())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=40)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--worst", type=int, default=0)
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}; {args.cases} random cases per shape; "
          f"shapes {SHAPES}")
    print(f"{'dtype':5} {'path':6} {'max-err ratio: median':>22} {'p90':>6} {'largest':>8} "
          f"{'rms ratio':>10}")
    for name in args.dtypes.split(","):
        dtype = DTYPES[name]
        for path, red in (("fused", "mean"), ("split", "none")):
            ratios, sq_ours, sq_torch, where = [], 0.0, 0.0, []
            for rows, cols in SHAPES:
                for seed in range(args.cases):
                    x, t, w = case(rows, cols, dtype, seed)
                    ours, theirs, ref = grads(x, t, None if red == "mean" else w, red)
                    e_ours, e_torch = (ours - ref).abs(), (theirs - ref).abs()
                    if e_torch.max().item() > 0:
                        ratio = e_ours.max().item() / e_torch.max().item()
                        ratios.append(ratio)
                        at = int(e_ours.argmax())
                        r, c = divmod(at, cols)
                        where.append((ratio, rows, cols, seed, r, c, int(t[r]) == c,
                                      ref[r, c].item(), e_ours[r, c].item(),
                                      e_torch[r, c].item(), e_torch.max().item()))
                    sq_ours += e_ours.square().sum().item()
                    sq_torch += e_torch.square().sum().item()
            ratios.sort()
            p90 = ratios[int(0.9 * (len(ratios) - 1))]
            rms = (sq_ours / sq_torch) ** 0.5 if sq_torch > 0 else float("nan")
            print(f"{name:5} {path:6} {statistics.median(ratios):22.3f} {p90:6.3f} "
                  f"{ratios[-1]:8.3f} {rms:10.3f}")
            for w_ in sorted(where, reverse=True)[:args.worst]:
                print("   ratio %.2f %dx%d seed %d: at (%d, %d) label %s, grad %.4g, "
                      "ours %.3g, torch's there %.3g, torch's largest %.3g" % w_)


if __name__ == "__main__":
    main()
