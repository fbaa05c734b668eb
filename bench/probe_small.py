#!/usr/bin/env python3
"""probe_small.py: why Triton's one-row kernel beats tuned.softmax by
0.3-0.9 us on the tiny shapes of bench_torch.py (H100, 2026-11-21): the
wrapper or the kernel. Times, with bench_torch.py's method (L2 flushed,
CUDA events around one call, median), on each shape:

    copy        y.copy_(x)
    tuned       tuned.softmax(x): the torch wrapper, a new output each call
    tuned_ptr   tuned_softmax through ctypes on a preallocated output
    triton      the Triton one-row kernel of bench_torch.py

    PYTHONPATH=bindings/python TUNED_LIBRARY=build/libtuned.so.0 \\
        bench/probe_small.py STORE [SHAPE...]     (fp16; default 32x128 256x1024 1024x1024)

STORE holds the shapes' winners (e.g. `tuned import cache/pretuned/h100.jsonl`)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch as bt  # noqa: E402


def main():
    import torch

    import tuned

    store = sys.argv[1]
    shapes = sys.argv[2:] or ["32x128", "256x1024", "1024x1024"]
    h = tuned.Handle(store=store, policy="never")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    flush = torch.empty(2 * (getattr(props, "L2_cache_size", 0) or (64 << 20)),
                        dtype=torch.uint8, device="cuda")
    print(f"# {props.name}, fp16, median us (L2 flushed, events around one call)")
    print("| shape | copy | tuned | tuned_ptr | triton | config |")
    print("|---|---|---|---|---|---|")
    for shape in shapes:
        rows, cols = (int(v) for v in shape.split("x"))
        x = torch.randn(rows, cols, device="cuda", dtype=torch.float16) * 3
        y = torch.empty_like(x)
        stream = torch.cuda.current_stream().cuda_stream
        fns = {
            "copy": bt.method_fn("copy", x, h),
            "tuned": bt.method_fn("tuned", x, h),
            "tuned_ptr": lambda: h.softmax_ptr(x.data_ptr(), y.data_ptr(), rows, cols,
                                               dtype="fp16", stream=stream),
            "triton": bt.method_fn("triton", x, h),
        }
        ref = torch.softmax(x.float(), -1)
        fns["tuned_ptr"]()
        torch.cuda.synchronize()
        err = ((y.float() - ref).abs() / (ref.abs() + bt.FLOOR["fp16"])).max().item()
        if not err <= bt.TOL["fp16"]:
            print(f"{shape}: tuned_ptr wrong, max relative error {err:.3g}")
            continue
        us = {m: bt.time_us(fn, flush)[0] for m, fn in fns.items()}
        choice = h.last_choice()
        print(f"| {shape} | {us['copy']:.2f} | {us['tuned']:.2f} | {us['tuned_ptr']:.2f} | "
              f"{us['triton']:.2f} | {choice.config if choice else '?'} ({choice.source if choice else '?'}) |")


if __name__ == "__main__":
    main()
