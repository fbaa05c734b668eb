"""bench/router_bench.py: the MoE router (scores + top-k) against the
anchors in the same run, eager and under CUDA graph replay.

Rows: tokens 1, 8, 64, 512, 4096, 16384, 65536 for each router:
  E8k2      8 experts, softmax top-2 renormalised (Mixtral)
  E60k4     60 experts, softmax top-4 (Qwen1.5-MoE)
  E128k8    128 experts, softmax top-8 (Qwen3-MoE, the issue's 16384 row)
  E160k6    160 experts, softmax top-6 (DeepSeek-V2)
  E256g8k8  256 experts, sigmoid + bias, 8 groups keep 4, top-8,
            renormalised, scaling 2.5 (DeepSeek-V3)
  E384k8    384 experts, sigmoid + bias top-8 renormalised (Kimi K2)
Columns (median us with L2 flushed, after warm-up; CUDA events around one
call, so an eager call's host time shows where it exceeds the GPU's; a
row's methods timed in turn, rep by rep, in a turning order):
  floor     a device copy of the bytes the kind moves (logits read, weights
            and ids written), timed here: torch's copy_ of bytes, a
            cudaMemcpyAsync, which no kernel's launch is part of
  kfloor    the same bytes moved by a kernel (torch.neg over fp32 words):
            what any kernel's launch and trip to memory cost here
  torch     transformers' formula in eager torch (softmax/sigmoid, topk, ...)
  compile   torch.compile of that formula
  quack     QuACK's topk(softmax=True) (power-of-two experts, renormalised
            softmax routers only)
  tuned     tuned.router_topk
  opts      tuned.router_topk writing bf16 weights and the source rows too
  *_graph   the same call captured in a CUDA graph, one replay timed
            (floor_graph: the copy's, the graph columns' floor;
            kfloor_graph: the kernel's)
  host      an eager call's host time, 100 calls back to back (tuned's, and
            in brackets torch's formula's): what a decode step pays where
            the GPU's time is less
Then the backward of E128k8 and E256g8k8 at 16384 tokens against its floor
(logits read, dlogits written) and torch's autograd of the formula.

The flush zeroes a buffer larger than the L2 (--flush memset, the
default), which leaves the L2 full of dirty lines: a timed call's misses
write those back while it runs. --flush both also times every column after
cuda_timing.clean_flush (the zeroing, then a read of another such buffer,
so no line is dirty; Nsight Compute's cache control is of that kind), the
two interleaved rep by rep, and prints a second table of the clean times.

    python3 bench/router_bench.py [--tokens 1,8,...] [--routers E128k8,...] [--reps 30]
                                  [--flush memset|both]
Needs a CUDA GPU, torch, tuned on PYTHONPATH (TUNED_LIBRARY, TUNED_DB with
the tuned winners); QuACK for its column."""

import argparse
import sys

import torch

import tuned
import tuned.router as tuned_router_module
from cuda_timing import clean_flush, host_us, timed, timed_interleaved

ROUTERS = {
    "E8k2": dict(e=8, k=2, score="softmax", renorm=True),
    "E60k4": dict(e=60, k=4, score="softmax", renorm=False),
    "E128k8": dict(e=128, k=8, score="softmax", renorm=False),
    "E160k6": dict(e=160, k=6, score="softmax", renorm=False),
    "E256g8k8": dict(e=256, k=8, score="sigmoid", renorm=True, groups=8, kept=4, scaling=2.5,
                     bias=True),
    "E384k8": dict(e=384, k=8, score="sigmoid", renorm=True, scaling=2.827, bias=True),
}


def torch_router(x, r, bias):
    """transformers' formula for router r (DeepseekV3TopkRouter's, or the
    softmax routers')."""
    xf = x.float()
    if r["score"] == "softmax":
        p = torch.softmax(xf, -1)
        w, i = torch.topk(p, r["k"], -1)
        if r["renorm"]:
            w = w / w.sum(-1, keepdim=True)
        return w, i
    s = xf.sigmoid()
    choice = s + bias
    g = r.get("groups", 1)
    if g > 1:
        e = x.shape[-1]
        gs = choice.view(-1, g, e // g).topk(2, dim=-1)[0].sum(-1)
        gi = torch.topk(gs, k=r["kept"], dim=-1, sorted=False)[1]
        mask = torch.zeros_like(gs).scatter_(1, gi, 1)
        mask = mask.unsqueeze(-1).expand(-1, g, e // g).reshape(-1, e)
        choice = choice.masked_fill(~mask.bool(), float("-inf"))
    i = torch.topk(choice, k=r["k"], dim=-1, sorted=False)[1]
    w = s.gather(1, i)
    if r["renorm"]:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    return w * r.get("scaling", 1.0), i


def tuned_router(x, r, bias, **extra):
    return tuned.router_topk(x, r["k"], score=r["score"], bias=bias,
                             num_groups=r.get("groups", 1), topk_group=r.get("kept", 1),
                             renorm=r["renorm"], scaling=r.get("scaling", 1.0), **extra)


def verdict(ours, anchors):
    """tuned against the best anchor: a strict win, a tie (the same event
    time, whose steps are 32 ns at these sizes) or a loss."""
    best = min(anchors)
    return "win" if ours < best else "tie" if ours == best else "LOSE"


def graphed(fn):
    """fn captured in a CUDA graph: its replay."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def copy_of(nbytes):
    """A device copy of nbytes (half read, half written): the floor, timed
    as a call is (and replayed from a graph, the graph columns' floor: a
    replay carries its own launch cost)."""
    half = max(1, nbytes // 2)
    a = torch.empty(half, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    return lambda: b.copy_(a)


def kernel_copy_of(nbytes):
    """The same bytes moved by one elementwise kernel (fp32 words negated):
    a kernel's launch, code and parameters as well as the memory trip,
    which copy_of's memcpy is spared."""
    words = max(1, nbytes // 8)
    a = torch.zeros(words, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    return lambda: torch.neg(a, out=b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1,8,64,512,4096,16384,65536")
    ap.add_argument("--routers", default=",".join(ROUTERS))
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--flush", choices=("memset", "both"), default="memset",
                    help="both: every column timed after a clean flush too (second table)")
    ap.add_argument("--tuned-only", action="store_true",
                    help="time tuned's columns alone (an A/B of two libraries), no anchors")
    args = ap.parse_args()
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    clean = (clean_flush(flush, torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
             if args.flush == "both" else None)
    try:
        from quack.topk import topk as quack_topk
    except Exception as exc:  # noqa: BLE001 - the column is left out, said once
        print(f"quack: not available ({exc})", file=sys.stderr)
        quack_topk = None
    compiled = torch.compile(torch_router, dynamic=True)
    rows_out = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for name in args.routers.split(","):
        r = ROUTERS[name]
        e = r["e"]
        bias = (torch.rand(e, device="cuda", generator=g) * 0.1 - 0.05) if r.get("bias") else None
        for t in (int(s) for s in args.tokens.split(",")):
            x = torch.randn(t, e, device="cuda", generator=g).to(dt)
            # the ids agree with transformers' (as sets: DeepSeek's are unsorted)
            tw, ti = tuned_router(x, r, bias)
            rw, ri = torch_router(x, r, bias)
            same = torch.equal(ti.sort(-1).values, ri.sort(-1).values)
            nbytes = t * e * x.element_size() + t * r["k"] * 12
            copy = copy_of(nbytes)
            kcopy = kernel_copy_of(nbytes)
            row = {"router": name, "tokens": t, "ids_match": same}
            fns = {} if args.tuned_only else {"torch": lambda: torch_router(x, r, bias),
                                              "compile": lambda: compiled(x, r, bias)}
            fns["tuned"] = lambda: tuned_router(x, r, bias)
            fns["opts"] = lambda: tuned_router(x, r, bias, weights_dtype=torch.bfloat16,
                                               return_source_rows=True)
            if (not args.tuned_only and quack_topk is not None and r["score"] == "softmax"
                    and r["renorm"] and e & (e - 1) == 0):
                fns["quack"] = lambda: quack_topk(x, r["k"], softmax=True)
            # every method of the row, eager and replayed, timed in turn
            # (cuda_timing.timed_interleaved); one that fails to run, or to
            # be captured, is a column of nan
            runs = {"floor": copy, "floor_graph": graphed(copy), "kfloor": kcopy,
                    "kfloor_graph": graphed(kcopy)}
            for m, fn in fns.items():
                try:
                    fn()
                    runs[m] = fn
                except Exception as exc:  # noqa: BLE001 - a failed column is shown as such
                    row[m] = row[m + "_graph"] = float("nan")
                    print(f"{name} {t} {m}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
                    continue
                try:
                    replay = graphed(fn)
                    replay()
                    runs[m + "_graph"] = replay
                except Exception as exc:  # noqa: BLE001
                    row[m + "_graph"] = float("nan")
                    print(f"{name} {t} {m}_graph: {type(exc).__name__}: {exc}"[:300],
                          file=sys.stderr)
            flushes = {}
            if clean is not None:
                for m in list(runs):
                    runs[m + "@clean"] = runs[m]
                    flushes[m + "@clean"] = clean
            row.update(timed_interleaved(runs, flush, args.reps, flushes=flushes))
            # what the tuned call ran (libtuned's choice), and its host time
            before = tuned_router_module.libtuned_calls
            tuned_router(x, r, bias)
            ch = tuned.last_choice()
            row["choice"] = (f"{ch.config} ({ch.source})" if ch is not None
                             and tuned_router_module.libtuned_calls > before else "torch formula")
            row["host_us"] = host_us(lambda: tuned_router(x, r, bias), 100)
            if not args.tuned_only:
                row["torch_host_us"] = host_us(lambda: torch_router(x, r, bias), 100)
            rows_out.append(row)
            print(row, flush=True)
    # the backward at 16384 tokens
    back = []
    for name in () if args.tuned_only else ("E128k8", "E256g8k8"):
        r = ROUTERS[name]
        e = r["e"]
        bias = (torch.rand(e, device="cuda", generator=g) * 0.1 - 0.05) if r.get("bias") else None
        x = torch.randn(16384, e, device="cuda", generator=g).to(dt).requires_grad_(True)
        up = torch.randn(16384, r["k"], device="cuda", generator=g)
        tw, ti = tuned_router(x, r, bias)
        rw, ri = torch_router(x, r, bias)

        def tuned_bwd():
            return torch.autograd.grad(tw, x, up, retain_graph=True)

        def torch_bwd():
            return torch.autograd.grad(rw, x, up, retain_graph=True)

        # the same upstream gradient for the same expert: DeepSeek's ids
        # are unsorted, so torch's gradient is taken with up permuted to them
        order_t, order_r = ti.argsort(-1), ri.argsort(-1)
        up_r = torch.empty_like(up).scatter_(1, order_r, up.gather(1, order_t))

        def torch_bwd():  # noqa: F811 - with the upstream gradient in torch's order
            return torch.autograd.grad(rw, x, up_r, retain_graph=True)

        (dt_,), (dr_,) = tuned_bwd(), torch_bwd()
        # tuned's ids equal torch's on these random logits; the gradients then agree
        err = ((dt_.float() - dr_.float()).abs().max() /
               dr_.float().abs().max().clamp_min(1e-30)).item()
        nbytes = 2 * 16384 * e * x.element_size() + 16384 * r["k"] * 12
        back.append({"router": name, "floor": timed(copy_of(nbytes), flush, args.reps),
                     "tuned": timed(tuned_bwd, flush, args.reps),
                     "torch": timed(torch_bwd, flush, args.reps),
                     "tuned_gpu": timed(tuned_bwd, flush, args.reps, host_ahead=True),
                     "torch_gpu": timed(torch_bwd, flush, args.reps, host_ahead=True),
                     "rel_err": err})
        print(back[-1], flush=True)

    cols = ["floor", "kfloor", "torch", "compile", "quack", "tuned", "floor_graph",
            "kfloor_graph", "torch_graph", "compile_graph", "quack_graph", "tuned_graph", "opts",
            "opts_graph"]
    print(f"\nrouter forward, {args.dtype} logits, us (median, L2 flushed)")
    print(f"{'router':9} {'tokens':>6} " + " ".join(f"{c:>13}" for c in cols) + "  ids  best")
    for row in rows_out:
        vals = " ".join(f"{row[c]:13.1f}" if c in row else f"{'-':>13}" for c in cols)
        anchors = [row[c] for c in cols if c in row and row[c] == row[c]
                   and not c.startswith(("tuned", "floor", "kfloor", "opts"))]
        eager = [row[c] for c in ("torch", "compile", "quack") if c in row and row[c] == row[c]]
        graph = [row[c] for c in ("torch_graph", "compile_graph", "quack_graph")
                 if c in row and row[c] == row[c]]
        best = (f"eager {verdict(row['tuned'], eager)}, graph {verdict(row['tuned_graph'], graph)}"
                if anchors else "")
        torch_host = (f" (torch {row['torch_host_us']:.1f})" if "torch_host_us" in row else "")
        print(f"{row['router']:9} {row['tokens']:>6} {vals}  {'ok' if row['ids_match'] else 'DIFF'}"
              f"  {best}  host {row['host_us']:.1f} us{torch_host}  {row['choice']}")
    if clean is not None:
        ccols = ["floor", "kfloor", "torch", "quack", "tuned", "floor_graph", "kfloor_graph",
                 "torch_graph", "quack_graph", "tuned_graph"]
        print(f"\nrouter forward after a clean flush (no dirty line in the L2), {args.dtype}"
              " logits, us (median), the same reps as above, interleaved with them")
        print(f"{'router':9} {'tokens':>6} " + " ".join(f"{c:>13}" for c in ccols)
              + "   tuned/floor  tuned_graph/floor_graph")
        for row in rows_out:
            vals = " ".join(f"{row[c + '@clean']:13.1f}" if c + "@clean" in row
                            else f"{'-':>13}" for c in ccols)
            print(f"{row['router']:9} {row['tokens']:>6} {vals}"
                  f"   {row['tuned@clean'] / row['floor@clean']:10.2f}x"
                  f"  {row['tuned_graph@clean'] / row['floor_graph@clean']:10.2f}x")
    print("\nrouter backward at 16384 tokens through autograd, us: as called, and the"
          " GPU's time with the host ahead (cuda_timing.timed's host_ahead)")
    for b in back:
        print(f"{b['router']:9} floor {b['floor']:8.1f}  tuned {b['tuned']:8.1f} "
              f"({b['tuned'] / b['floor']:.2f}x floor)  torch autograd {b['torch']:8.1f}  "
              f"GPU: tuned {b['tuned_gpu']:8.1f} ({b['tuned_gpu'] / b['floor']:.2f}x floor)  "
              f"torch {b['torch_gpu']:8.1f}  rel err {b['rel_err']:.1e}")


if __name__ == "__main__":
    main()
