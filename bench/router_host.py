"""bench/router_host.py: where an eager tuned.router_topk call's host time
goes, piece by piece, beside torch's router and single torch operations,
on one GPU. Every figure is cuda_timing.host_us: the host's microseconds a
call, calls back to back with the GPU never waited on (what a call costs a
decode step, whose kernels take less than their launches).

    python3 bench/router_host.py [--rows 1,64] [--calls 2000] [--rounds 5]

Pieces (Mixtral's router: 128 experts... here E128k8 renormalised, fp32):
    torch.neg            one torch operation: the dispatcher and a launch
    torch.empty          one output tensor
    ctypes floor         a ctypes call of libtuned's that does nothing
                         (tuned_router_options_init)
    libtuned call        tuned_router_topk through ctypes, outputs given
    router_topk          tuned.router_topk, the eager path whole
    router_topk grad     the same on logits that require a gradient
                         (the autograd Function's forward)
    torch router         softmax, topk, renormalise (transformers' way)
    torch router grad    the same with a gradient recorded
Medians over rounds. Prints a table last."""

import argparse
import ctypes
import statistics
import sys

import torch

import tuned
import tuned.router as R
from cuda_timing import host_us


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="1,64")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("router_host: no CUDA GPU")
        return 77
    e, k = 128, 8
    table = {}
    for rows in (int(r) for r in args.rows.split(",")):
        x = torch.randn(rows, e, device="cuda")
        xg = x.clone().requires_grad_(True)
        tuned.router_topk(x, k, renorm=True)  # the handle, the key's kernel
        st = R._state(x)
        if st is None:
            print("router_host: libtuned does not serve this GPU")
            return 1
        f, _, lib, h, dt, stream = st
        w = torch.empty(rows, k, device="cuda")
        ids = torch.empty(rows, k, dtype=torch.int64, device="cuda")
        opts = R._options_of(k, 0, 1, 1, True, 1.0, False)
        init = lib.tuned_router_options_init
        buf = ctypes.create_string_buffer(ctypes.sizeof(R._Options))
        byref = ctypes.byref

        def libtuned_call():
            f(h, x.data_ptr(), None, w.data_ptr(), ids.data_ptr(), None, rows, e, e, dt,
              byref(opts), stream)

        def torch_router(t):
            p = torch.softmax(t, -1)
            v, i = torch.topk(p, k, -1)
            return v / v.sum(-1, keepdim=True), i

        pieces = {
            "torch.neg": lambda: torch.neg(x),
            "torch.empty": lambda: torch.empty(rows, k, device="cuda"),
            "ctypes floor": lambda: init(buf),
            "libtuned call": libtuned_call,
            "router_topk": lambda: tuned.router_topk(x, k, renorm=True),
            "router_topk grad": lambda: tuned.router_topk(xg, k, renorm=True),
            "torch router": lambda: torch_router(x),
            "torch router grad": lambda: torch_router(xg),
        }
        runs = {name: [] for name in pieces}
        for _ in range(args.rounds):
            for name, fn in pieces.items():
                runs[name].append(host_us(fn, args.calls, warm=50))
        for name, ts in runs.items():
            table[(name, rows)] = statistics.median(ts)
            print(f"{name} rows {rows}: {['%.2f' % t for t in ts]}", flush=True)
    rows_list = sorted({r for _, r in table})
    print("\nrouter host time, us a call (E128k8 renormalised, fp32; medians of "
          f"{args.rounds} rounds of {args.calls} calls)")
    print(f"{'piece':20}" + "".join(f"{'rows ' + str(r):>10}" for r in rows_list))
    for name in dict.fromkeys(n for n, _ in table):
        print(f"{name:20}" + "".join(f"{table[(name, r)]:10.2f}" for r in rows_list))
    return 0


if __name__ == "__main__":
    sys.exit(main())
