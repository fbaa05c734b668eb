#!/usr/bin/env python3
"""probe_small.py: where tuned.softmax loses to Triton's one-row kernel on
the tiny shapes of bench_torch.py (issue 6): the wrapper, the kernel's code,
or noise. Times, with bench_torch.py's method (L2 flushed, CUDA events
around one call, median), in ROUNDS interleaved rounds:

    copy        y.copy_(x)
    tuned       tuned.softmax(x): the torch wrapper, a new output each call
    tuned_ptr   tuned_softmax through ctypes on a preallocated output
    triton      the Triton one-row kernel of bench_torch.py, a new output each call
    triton_ptr  the same kernel into a preallocated output
    tuned_after_triton  tuned.softmax again, timed after Triton in each round
    src:NAME    each CUDA source SRCDIR/<dtype>-<shape>-NAME.cu (a rows-family
                kernel, tuned_softmax_rows; its T_WARPS / T_ROWS defines give
                the launch), compiled by NVRTC through CuPy with tuned's options

    PYTHONPATH=bindings/python TUNED_LIBRARY=build/libtuned.so.0 \\
        bench/probe_small.py STORE [--dtypes fp16,bf16] [--shapes 32x128,...]
            [--rounds 3] [--srcdir DIR] [--ncu]

STORE holds the shapes' winners (e.g. `tuned import cache/pretuned/h100.jsonl`).
--ncu: no flush, no timing, every method called 3 times: run it under
`ncu --cache-control all --clock-control none` for the kernels' own durations."""
import argparse
import warnings
import glob
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch as bt  # noqa: E402

warnings.filterwarnings("ignore", category=DeprecationWarning)
TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def source_fn(path, x, y):
    """A launcher of the rows-family kernel in path on x's rows."""
    import cupy
    import torch

    src = open(path).read()
    warps = int(re.search(r"#define T_WARPS (\d+)", src).group(1))
    rows_per_block = int(re.search(r"#define T_ROWS (\d+)", src).group(1))
    mod = cupy.RawModule(code=src, options=("--std=c++17", "--gpu-architecture=sm_90"))
    kern = mod.get_function("tuned_softmax_rows")
    rows, cols = x.shape
    cx = cupy.asarray(x.view(torch.int16) if x.element_size() == 2 else x)
    cy = cupy.asarray(y.view(torch.int16) if y.element_size() == 2 else y)
    grid = (rows + rows_per_block - 1) // rows_per_block
    args = (cx, cy, cupy.int64(rows), cupy.int32(cols), cupy.int64(x.stride(0)))

    def call():
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        kern((grid,), (warps * 32,), args, stream=stream)
        return y
    return call


def main():
    import torch

    import tuned

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("store")
    p.add_argument("--dtypes", default="fp16")
    p.add_argument("--shapes", default="32x128,256x1024,1024x1024")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--srcdir")
    p.add_argument("--ncu", action="store_true")
    args = p.parse_args()

    h = tuned.Handle(store=args.store, policy="never")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    flush = torch.empty(2 * (getattr(props, "L2_cache_size", 0) or (64 << 20)),
                        dtype=torch.uint8, device="cuda")
    if not args.ncu:
        print(f"# {props.name}: median µs of each round (L2 flushed, events around one call)")
    for dtype in args.dtypes.split(","):
        tdt = getattr(torch, TORCH_DTYPES[dtype])
        for shape in args.shapes.split(","):
            rows, cols = (int(v) for v in shape.split("x"))
            x = torch.randn(rows, cols, device="cuda", dtype=torch.float32).mul_(3).to(tdt)
            y = torch.empty_like(x)
            y2 = torch.empty_like(x)
            stream = torch.cuda.current_stream().cuda_stream
            fns = {
                "copy": bt.method_fn("copy", x, h),
                "tuned": bt.method_fn("tuned", x, h),
                "tuned_ptr": lambda: h.softmax_ptr(x.data_ptr(), y.data_ptr(), rows, cols,
                                                   dtype=dtype, stream=stream) or y,
                "triton": bt.method_fn("triton", x, h),
                "triton_ptr": lambda: bt.triton_softmax(x, out=y2),
                "tuned_after_triton": bt.method_fn("tuned", x, h),
            }
            if args.srcdir:
                for path in sorted(glob.glob(os.path.join(args.srcdir, f"{dtype}-{shape}-*.cu"))):
                    name = os.path.basename(path)[len(f"{dtype}-{shape}-"):-3]
                    fns["src:" + name] = source_fn(path, x, torch.empty_like(x))
            ref = torch.softmax(x.float(), -1)
            bad = []
            for m, fn in fns.items():
                out = fn()
                torch.cuda.synchronize()
                if m != "copy":
                    err = ((out.float() - ref).abs() / (ref.abs() + bt.FLOOR[dtype])).max().item()
                    if not err <= bt.TOL[dtype]:
                        print(f"{dtype} {shape} {m}: wrong, max relative error {err:.3g}")
                        bad.append(m)
            for m in bad:
                del fns[m]
            if args.ncu:
                for m, fn in fns.items():
                    torch.cuda.nvtx.range_push(f"{dtype} {shape} {m}")
                    for _ in range(3):
                        fn()
                    torch.cuda.synchronize()
                    torch.cuda.nvtx.range_pop()
                continue
            rounds = {m: [] for m in fns}
            for _ in range(args.rounds):
                for m, fn in fns.items():
                    rounds[m].append(bt.time_us(fn, flush)[0])
            choice = h.last_choice()
            print(f"\n## {dtype} {shape}: tuned's config {choice.config if choice else '?'} "
                  f"({choice.source if choice else '?'}, "
                  f"{'aligned' if choice and choice.aligned else 'UNALIGNED'}; stored median "
                  f"{choice.median_us if choice else 0:.2f} µs)")
            print("| method | " + " | ".join(f"round {i + 1}" for i in range(args.rounds))
                  + " | median |")
            print("|---|" + "---|" * (args.rounds + 1))
            for m, ts in rounds.items():
                print(f"| {m} | " + " | ".join(f"{t:.2f}" for t in ts)
                      + f" | {statistics.median(ts):.2f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
