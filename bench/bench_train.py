#!/usr/bin/env python3
"""bench_train.py: a training step's softmax and log_softmax, tuned's
kernels against torch, torch.compile, QuACK and Liger, with the floors.

    bench/bench_train.py --out DIR [--state DIR] [--tuned-bin build/tuned]
        [--dtypes fp16,bf16,fp32] [--shapes 4096x32000,...] [--tune-time S]
        [--budget-s S]
    bench/bench_train.py --out DIR --plot-from DIR/train.json

For each dtype and shape, the shape's four kernels are tuned first
(`tuned --kernel K`, into the store the torch operators read; a stored
one is not tuned again), then, with bench_torch.py's timing (L2 flushed
and its priorities reset before every repeat, the GPU kept busy so host
time is not counted, CUDA events around one call, the median of 3
interleaved rounds):

    backward alone, from y = softmax(x) and a gradient dy:
      copy      a device-to-device copy of one tensor; the backward's floor
                is 1.5x it (it reads y and dy and writes dx)
      tuned     torch.ops.tuned.softmax_backward(y, dy)
      torch     torch._softmax_backward_data (what autograd runs)
      compile   torch.compile of y * (dy - sum(dy * y))
      quack     quack.softmax.softmax_bwd(dy, y)
    a step, forward then backward of dy through autograd:
      tuned.softmax, torch.softmax, torch.compile, QuACK's softmax,
      Liger's softmax
    and the same for log_softmax (backward: dx = dy - exp(y) sum(dy)),
    against torch and torch.compile (QuACK and Liger have none).

Every output is checked against float64 first; a wrong one is reported,
never timed. Which tuned operators run tuned's kernels and which torch's
formulas is read from tuned.kernel_paths() and printed with the results.
Results accumulate in --state; a run stopped by --budget-s (exit 3) goes
on where it stopped.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

import bench_torch  # noqa: E402 - the shared timing, refusals and state (no torch at import)

SHAPES = ["256x1024", "4096x4096", "1024x50257", "4096x32000", "32768x4096", "8192x128256",
          "1x262144"]
KERNELS = ["softmax", "softmax_bwd", "log_softmax", "log_softmax_bwd"]
TOL = {"fp16": 5e-3, "bf16": 4e-2, "fp32": 1e-4}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--state", default=os.path.join(ROOT, "build", "train-bench-state"))
    p.add_argument("--tuned-bin", default=os.path.join(ROOT, "build", "tuned"))
    p.add_argument("--dtypes", default="fp16,bf16,fp32")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--tune-time", type=float, default=15.0)
    p.add_argument("--budget-s", type=float, default=0)
    p.add_argument("--plot-from", metavar="TRAIN_JSON",
                   help="only draw train-bwd.png into --out from a run's train.json")
    return p.parse_args()


def close(out, ref, dtype):
    """Largest error of out against a float64 ref, relative to the row's
    largest magnitude (gradients cross zero, so a pointwise relative error
    means nothing)."""
    err = (out.double() - ref).abs().amax(-1) / ref.abs().amax(-1).clamp_min(1e-30)
    return float(err.max())


def backward_methods(kind, y, dy):
    import torch

    import tuned  # noqa: F401 - registers torch.ops.tuned

    ops = torch.ops.tuned
    log = kind == "log_softmax"
    dt = y.dtype

    def compiled():
        if log:
            f = torch.compile(lambda a, g: g - torch.exp(a) * g.sum(-1, keepdim=True), dynamic=False)
        else:
            f = torch.compile(lambda a, g: a * (g - (g * a).sum(-1, keepdim=True)), dynamic=False)
        return lambda: f(y, dy)

    # Each entry makes the call to time (compiling, importing) when asked.
    copy_out = torch.empty_like(y)
    m = {"copy": lambda: lambda: copy_out.copy_(y)}
    if log:
        m["tuned"] = lambda: lambda: ops.log_softmax_backward(y, dy)
        m["torch"] = lambda: lambda: torch._log_softmax_backward_data(dy, y, -1, dt)
    else:
        m["tuned"] = lambda: lambda: ops.softmax_backward(y, dy)
        m["torch"] = lambda: lambda: torch._softmax_backward_data(dy, y, -1, dt)
    m["compile"] = compiled
    if not log:
        def quack():
            from quack.softmax import softmax_bwd

            return lambda: softmax_bwd(dy, y)
        m["quack"] = quack
    return m


def step_methods(kind, x, dy):
    import torch

    import tuned

    log = kind == "log_softmax"

    def step(f):
        def run():
            xx = x.detach().requires_grad_(True)
            out = f(xx)
            (g,) = torch.autograd.grad(out, xx, dy)
            return g
        return run

    m = {}
    if log:
        m["tuned"] = lambda: step(lambda t: tuned.log_softmax(t))
        m["torch"] = lambda: step(lambda t: torch.log_softmax(t, -1))
        m["compile"] = lambda: step(torch.compile(lambda t: torch.log_softmax(t, -1), dynamic=False))
    else:
        m["tuned"] = lambda: step(lambda t: tuned.softmax(t))
        m["torch"] = lambda: step(lambda t: torch.softmax(t, -1))
        m["compile"] = lambda: step(torch.compile(lambda t: torch.softmax(t, -1), dynamic=False))

        def quack():
            from quack.softmax import softmax as qs

            return step(qs)
        m["quack"] = quack

        def liger():
            from liger_kernel.ops.softmax import LigerSoftmaxFunction

            return step(LigerSoftmaxFunction.apply)
        m["liger"] = liger
    return m


def prepare(m, make, x, ref, dtype):
    """(fn, None) or (None, {"error": why}); wrong results are never timed."""
    import torch

    why = bench_torch.refusal(m, x)
    if why:
        return None, {"error": why}
    try:
        fn = make()
        out = fn()
        torch.cuda.synchronize()
        if m != "copy":
            err = close(out, ref, dtype)
            if not err <= TOL[dtype]:
                return None, {"error": f"wrong result: error {err:.3g}"}
        return fn, None
    except ImportError as exc:
        return None, {"error": f"not installed: {exc.name or exc}"}
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        text = str(exc).strip().splitlines()
        return None, {"error": f"{type(exc).__name__}: {text[0][:160] if text else ''}"}


def tune(args, key_shape, dtype, kernel, store):
    rows, cols = key_shape.split("x")
    cmd = [args.tuned_bin, "--kernel", kernel, "--shape", key_shape, "--dtype", dtype, "--db",
           store, "-q", "--time", str(args.tune_time)]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    res = {"s": round(time.monotonic() - t0, 2)}
    if r.returncode != 0:
        res["error"] = (r.stderr.strip().splitlines() or ["failed"])[-1][:200]
    return res


def main():
    args = parse_args()
    if args.plot_from:
        with open(args.plot_from) as f:
            res = json.load(f)
        os.makedirs(args.out, exist_ok=True)
        return 0 if plot(args, res, [d for d in args.dtypes.split(",") if d],
                         [s for s in args.shapes.split(",") if s]) else 1
    os.makedirs(args.out, exist_ok=True)
    run = bench_torch.Resumable(args.state, args.budget_s, ("times", "tunes"))
    res, save, check_budget = run.res, run.save, run.check_budget
    store = os.path.join(args.state, "store")
    os.environ["TUNED_DB"] = store
    os.environ["TUNED_POLICY"] = "never"
    os.environ.setdefault("TUNED_BIN", args.tuned_bin)

    # Inductor's pool of compile workers, started by the first torch.compile,
    # takes the CPU from the host side of the timings that follow it.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import torch

    import tuned

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = getattr(props, "L2_cache_size", 0) or (64 << 20)
    flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
    res["env"] = {"gpu": props.name, "torch": torch.__version__,
                  "driver": bench_torch.nvidia_smi("driver_version"),
                  "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "command": " ".join(sys.argv), "kernel_paths": tuned.kernel_paths()}
    tdt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    dtypes = [d for d in args.dtypes.split(",") if d]
    shapes = [s for s in args.shapes.split(",") if s]
    complete = True
    try:
        for dtype in dtypes:
            for shape in shapes:
                rows, cols = map(int, shape.split("x"))
                for kernel in KERNELS:
                    tk = f"{shape}|{dtype}|{kernel}"
                    if tk not in res["tunes"]:
                        check_budget()
                        res["tunes"][tk] = tune(args, shape, dtype, kernel, store)
                        save()
                        print(f"tune {tk}: {res['tunes'][tk]}", flush=True)
                for kind in ("softmax", "log_softmax"):
                    base = f"{shape}|{dtype}|{kind}"
                    if f"{base}|bwd|copy" in res["times"] and f"{base}|step|torch" in res["times"]:
                        continue
                    check_budget()
                    x = torch.randn(rows, cols, device="cuda", dtype=tdt[dtype]) * 3
                    dy = torch.randn_like(x)
                    xd = x.double()
                    yd = torch.softmax(xd, -1) if kind == "softmax" else torch.log_softmax(xd, -1)
                    y = yd.to(tdt[dtype])
                    # The backward's reference from y rounded to the dtype: the y it
                    # is given, and the y every step computes before its backward
                    # (against the exact y's gradient torch's own step misses the
                    # fp16 tolerance by 2x at 4096 columns).
                    if kind == "softmax":
                        bref = y.double() * (dy.double() - (dy.double() * y.double()).sum(-1, keepdim=True))
                    else:
                        bref = dy.double() - torch.exp(y.double()) * dy.double().sum(-1, keepdim=True)
                    for phase, methods, ref in (("bwd", backward_methods(kind, y, dy), bref),
                                                ("step", step_methods(kind, x, dy), bref)):
                        fns = {}
                        for m, make in methods.items():
                            fn, err = prepare(m, make, x, ref, dtype)
                            if err is not None:
                                res["times"][f"{base}|{phase}|{m}"] = err
                            else:
                                fns[m] = fn
                        check_budget()
                        for m, r in bench_torch.measure(fns, x, flush).items():
                            r.pop("gbps", None)
                            res["times"][f"{base}|{phase}|{m}"] = r
                        save()
                        print(f"{base} {phase}: " + ", ".join(
                            f"{m} {res['times'][f'{base}|{phase}|{m}'].get('us', 'err')}"
                            for m in methods), flush=True)
                    del x, dy, y, xd, yd, bref
                    torch.cuda.empty_cache()
    except bench_torch.Budget:
        complete = False
        print(f"budget of {args.budget_s:.0f} s used up: run again to go on", flush=True)
    report(args, res, dtypes, shapes)
    return 0 if complete else 3


def cell(r):
    if r is None:
        return "—"
    if "error" in r:
        e = r["error"]
        return "refused" if e.startswith("refused") else "n/a" if e.startswith("not installed") else "err"
    return f"{r['us']:.2f}"


def report(args, res, dtypes, shapes):
    env = res.get("env", {})
    lines = ["# A training step's softmax and log_softmax", "",
             f"GPU: {env.get('gpu')}, driver {env.get('driver')}; torch {env.get('torch')}; "
             f"{env.get('date')}. Median µs with the L2 flushed before each repeat (the median "
             "of 3 interleaved rounds). Command: `" + str(env.get("command")) + "`.", "",
             f"Kernel paths of the tuned operators: `{json.dumps(env.get('kernel_paths'))}`.", ""]
    bars_floor = bars_quack = n_floor = n_quack = 0
    misses = []
    for kind in ("softmax", "log_softmax"):
        bwd_m = ["copy", "tuned", "torch", "compile"] + (["quack"] if kind == "softmax" else [])
        step_m = ["tuned", "torch", "compile"] + (["quack", "liger"] if kind == "softmax" else [])
        for dtype in dtypes:
            lines += [f"## {kind} {dtype}", "",
                      "| shape | floor (1.5x copy) | " + " | ".join(f"bwd {m}" for m in bwd_m[1:]) +
                      " | tuned bwd / floor | " + " | ".join(f"step {m}" for m in step_m) + " |",
                      "|---" * (3 + len(bwd_m) - 1 + len(step_m)) + "|"]
            for shape in shapes:
                base = f"{shape}|{dtype}|{kind}"
                b = {m: res["times"].get(f"{base}|bwd|{m}") for m in bwd_m}
                s = {m: res["times"].get(f"{base}|step|{m}") for m in step_m}
                copy = b.get("copy")
                floor = 1.5 * copy["us"] if copy and "us" in copy else None
                t = b.get("tuned")
                ratio = "—"
                if floor and t and "us" in t:
                    ratio = f"{t['us'] / floor:.3f}"
                    if floor >= 20:
                        n_floor += 1
                        if t["us"] <= 1.05 * floor:
                            bars_floor += 1
                        else:
                            misses.append(f"{kind} {shape} {dtype}: bwd {t['us']:.2f} > 1.05 x floor {floor:.2f}")
                q = b.get("quack")
                if q and "us" in q and t and "us" in t:
                    n_quack += 1
                    if t["us"] <= q["us"]:
                        bars_quack += 1
                    else:
                        misses.append(f"{kind} {shape} {dtype}: bwd {t['us']:.2f} > QuACK {q['us']:.2f}")
                lines.append(f"| {shape} | {f'{floor:.2f}' if floor else '—'} | " +
                             " | ".join(cell(b[m]) for m in bwd_m[1:]) + f" | {ratio} | " +
                             " | ".join(cell(s[m]) for m in step_m) + " |")
            lines.append("")
    lines += [f"Backward within 5% of its floor (floor 20 µs or more): {bars_floor} of {n_floor}. "
              f"Backward no slower than QuACK's: {bars_quack} of {n_quack}."]
    if misses:
        lines += ["", "Misses: " + "; ".join(misses) + "."]
    errors = [f"{k}: {v['error']}" for k, v in sorted(res["times"].items()) if "error" in v]
    terrs = [f"{k}: {v['error']}" for k, v in sorted(res["tunes"].items()) if "error" in v]
    if errors or terrs:
        lines += ["", "Not timed or not tuned:", ""] + [f"- {e}" for e in terrs + errors]
    if plot(args, res, dtypes, shapes):
        lines += ["", "Plot: `train-bwd.png` (backward time over its floor, per shape)."]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "train.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "train.json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    print(text)


def plot(args, res, dtypes, shapes):
    """train-bwd.png: each method's backward time over its floor (1.5x the
    copy), per shape, a panel per kernel and dtype; False without
    matplotlib or anything measured."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FormatStrFormatter, NullFormatter
    except ImportError:
        print("no matplotlib: no plot")
        return False
    panels = []
    for kind in ("softmax", "log_softmax"):
        for dtype in dtypes:
            rows = []
            for shape in shapes:
                base = f"{shape}|{dtype}|{kind}"
                copy = res["times"].get(f"{base}|bwd|copy") or {}
                if "us" in copy:
                    rows.append((shape, 1.5 * copy["us"], base))
            if rows:
                panels.append((kind, dtype, rows))
    if not panels:
        return False
    methods = ["tuned", "quack", "compile", "torch"]
    colours = {"tuned": "tab:green", "quack": "tab:blue", "compile": "tab:orange",
               "torch": "tab:red"}
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 2.6 * len(panels)), squeeze=False)
    for ax, (kind, dtype, rows) in zip(axes[:, 0], panels):
        width = 0.8 / len(methods)
        for i, m in enumerate(methods):
            xs, ys = [], []
            for shape, floor, base in rows:
                t = res["times"].get(f"{base}|bwd|{m}") or {}
                if "us" in t:
                    xs.append(shapes.index(shape) + (i - (len(methods) - 1) / 2) * width)
                    ys.append(t["us"] / floor)
            if xs:
                ax.bar(xs, ys, width, label=m, color=colours[m])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(1.05, color="black", linewidth=0.6, linestyle="--")
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes)
        ax.set_xlim(-0.5, len(shapes) - 0.5)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel("time / floor")
        ax.set_title(f"{kind} backward, {dtype}", fontsize=10)
        ax.legend(fontsize=8, ncol=len(methods))
    env = res.get("env", {})
    fig.suptitle(f"Backward over its floor (1.5x a copy; dashed: +5%), {env.get('gpu')}, "
                 f"{env.get('date')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "train-bwd.png"), dpi=100)
    plt.close(fig)
    return True


if __name__ == "__main__":
    sys.exit(main())
