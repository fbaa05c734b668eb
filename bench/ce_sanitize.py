"""bench/ce_sanitize.py: tuned.cross_entropy with planted bad labels, to be
run under compute-sanitizer's memcheck (bench/gpu-session.sh does):

    compute-sanitizer --tool memcheck --error-exitcode 3 python3 bench/ce_sanitize.py

For each shape (a default-config one, and the shapes whose tuned records
TUNED_DB holds: cluster-resident rows among them), labels int64 and int32,
and each mode (fused mean, fused in place, split: reduction none and its
backward, loss only under no_grad), the labels hold, besides good ones and
ignore_index, -1, -101, V, V + 7 and the type's largest value. The
sanitizer says whether any kernel touched memory out of bounds; this
script checks what the user sees: a NaN loss in exactly the planted rows
(reduction none), a NaN mean, the error bit set (cross_entropy_errors(),
which synchronises), and the good rows' losses equal to float64's. Prints
one line a case and `N passed, N failed`."""

import math
import sys

import torch
import torch.nn.functional as F

import tuned

SHAPES = [(64, 1000), (4096, 32000), (512, 128256), (1024, 262144)]


def planted(rows, cols, dtype):
    g = torch.Generator(device="cuda").manual_seed(rows + cols)
    t = torch.randint(0, cols, (rows,), device="cuda", generator=g)
    t[1::11] = -100
    big = (1 << 31) - 1 if dtype == torch.int32 else (1 << 40)
    bad_rows = [0, 5, rows // 2, rows - 3, rows - 1]
    for r, v in zip(bad_rows, [-1, -101, cols, cols + 7, big]):
        t[r] = v
    return t.to(dtype), bad_rows


def main():
    ok = bad = 0

    def case(name, cond, detail=""):
        nonlocal ok, bad
        print(f"{'ok  ' if cond else 'FAIL'} {name} {detail}", flush=True)
        ok, bad = ok + bool(cond), bad + (not cond)

    for rows, cols in SHAPES:
        x0 = (torch.randn(rows, cols, device="cuda") * 3).to(torch.bfloat16)
        for ldt in (torch.int64, torch.int32):
            t, bad_rows = planted(rows, cols, ldt)
            good = torch.ones(rows, dtype=torch.bool, device="cuda")
            good[bad_rows] = False
            tl = t.long()
            ref = F.cross_entropy(x0.double()[good], tl[good], reduction="none")
            ref_full = torch.zeros(rows, dtype=torch.float64, device="cuda")
            ref_full[good] = ref
            name = f"{rows}x{cols} {str(ldt)[6:]}"
            for mode in ("fused", "inplace", "split", "loss"):
                tuned.cross_entropy_errors(clear=True)
                x = x0.clone().requires_grad_(mode != "loss")
                if mode == "fused":
                    loss = tuned.cross_entropy(x, t)
                    g, = torch.autograd.grad(loss, x)
                elif mode == "inplace":
                    loss = tuned.cross_entropy(x.view(x.shape), t, inplace_backward=True)
                    g, = torch.autograd.grad(loss, x)
                elif mode == "split":
                    per = tuned.cross_entropy(x, t, reduction="none")
                    g, = torch.autograd.grad(per.sum(), x)
                else:
                    with torch.no_grad():
                        per = tuned.cross_entropy(x, t, reduction="none")
                        loss = tuned.cross_entropy(x, t)
                    g = None
                errs = tuned.cross_entropy_errors(clear=True)
                if mode in ("split", "loss"):
                    nan_rows = torch.isnan(per)
                    right = torch.allclose(per[good].double(), ref_full[good], rtol=1e-5,
                                           atol=1e-6)
                    case(f"{name} {mode}", bool(nan_rows.eq(~good).all()) and right and errs & 1,
                         f"(NaN rows {int(nan_rows.sum())} of {len(bad_rows)} planted, "
                         f"good rows as float64 {right}, error bits {errs})")
                else:
                    case(f"{name} {mode}", math.isnan(loss.item()) and errs & 1,
                         f"(loss {loss.item()}, error bits {errs})")
                if g is not None and mode == "split":
                    gnan = torch.isnan(g.float()).any(-1)
                    case(f"{name} {mode} gradient", bool(gnan.eq(~good).all()),
                         f"(NaN gradient rows {int(gnan.sum())})")
                del x, g
    print(f"{ok} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
