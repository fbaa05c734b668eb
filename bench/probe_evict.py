#!/usr/bin/env python3
"""probe_evict.py: does a variant that loads with the L2 evict_last policy
(ld=el) leave its input in L2 through the evaluator's flush (a memset of
twice the L2), so that every later timing of the same input reads it from
L2? That would explain `tuned verify` finding few-µs winners 12-31% slower
than the tune stored (docs/decisions.md, the evict_last artefact), and the tune ranking tiny shapes'
variants on an L2-hot input.

    bench/probe_evict.py SRCDIR [SHAPE] [DTYPE]

SRCDIR holds <dtype>-<shape>-def.cu and <dtype>-<shape>-el.cu (the same
rows-family config with ld=def and ld=el). Times, each with probe_small's
method (flush, GPU busy 100 us, events around one call, median):
  1. def, fresh;            2. el, 20 launches, then def again;
  3. def after cuCtxResetPersistingL2Cache;
  4. el again, then def with every line of x and y given evict_normal
     priority (applypriority) before each flush; then the copy likewise."""
import ctypes
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch as bt  # noqa: E402
import probe_small as ps  # noqa: E402

warnings.filterwarnings("ignore", category=DeprecationWarning)

DEMOTE = r'''
extern "C" __global__ void demote(const unsigned char *p, long long bytes)
{
    for (long long i = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * 128; i < bytes;
         i += (long long)gridDim.x * blockDim.x * 128)
        asm volatile("applypriority.global.L2::evict_normal [%0], 128;" :: "l"(p + i) : "memory");
}
'''


def main():
    import cupy
    import torch

    srcdir = sys.argv[1]
    shape = sys.argv[2] if len(sys.argv) > 2 else "1024x1024"
    dtype = sys.argv[3] if len(sys.argv) > 3 else "fp32"
    rows, cols = (int(v) for v in shape.split("x"))
    tdt = getattr(torch, ps.TORCH_DTYPES[dtype])
    props = torch.cuda.get_device_properties(0)
    flush = torch.empty(2 * props.L2_cache_size, dtype=torch.uint8, device="cuda")
    x = torch.randn(rows, cols, device="cuda", dtype=torch.float32).mul_(3).to(tdt)
    y = torch.empty_like(x)
    ydef = ps.source_fn(os.path.join(srcdir, f"{dtype}-{shape}-def.cu"), x, y)
    el = ps.source_fn(os.path.join(srcdir, f"{dtype}-{shape}-el.cu"), x, torch.empty_like(x))
    yc = torch.empty_like(x)
    copy = lambda: yc.copy_(x)  # noqa: E731
    ref = torch.softmax(x.float(), -1)
    for name, fn in (("def", ydef), ("el", el)):
        err = ((fn().float() - ref).abs() / (ref.abs() + bt.FLOOR[dtype])).max().item()
        assert err <= bt.TOL[dtype], f"{name} wrong: {err}"
    # reference.cu's tuned_l2_normal, compiled here so that the probe needs
    # no libtuned.
    demote_k = cupy.RawModule(code=DEMOTE, options=("--gpu-architecture=sm_90",)).get_function(
        "demote")
    cx = cupy.asarray(x.view(torch.uint8).reshape(-1))
    cy = cupy.asarray(y.view(torch.uint8).reshape(-1))
    nbytes = x.numel() * x.element_size()

    def demote():
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        for buf in (cx, cy):
            demote_k((264,), (256,), (buf, cupy.int64(nbytes)), stream=stream)

    class DemotingFlush:
        """Stands in for the flush tensor: zero_() demotes first."""
        def zero_(self):
            demote()
            flush.zero_()

    cuda = ctypes.CDLL("libcuda.so.1")
    # Without bench_torch's own reset of the L2 priorities: that is what is
    # shown here.
    t = lambda fn, fl=flush: bt.time_us(fn, fl, reset_l2=False)[0]  # noqa: E731
    print(f"# {props.name}, {dtype} {shape}: median µs (L2 flushed, GPU busy 100 µs, events)")
    print(f"1. def fresh: {t(ydef):.2f}; copy fresh: {t(copy):.2f}")
    for _ in range(20):
        el()
    torch.cuda.synchronize()
    print(f"2. after 20 el launches: def {t(ydef):.2f}; copy {t(copy):.2f}; el {t(el):.2f}; "
          f"def again {t(ydef):.2f}")
    rc = cuda.cuCtxResetPersistingL2Cache()
    print(f"3. cuCtxResetPersistingL2Cache (rc {rc}): def {t(ydef):.2f}; copy {t(copy):.2f}")
    for _ in range(20):
        el()
    torch.cuda.synchronize()
    d = DemotingFlush()
    print(f"4. el again, then demote before each flush: def {t(ydef, d):.2f}; "
          f"copy {t(copy, d):.2f}; el {t(el, d):.2f}; def {t(ydef, d):.2f}")
    print(f"5. and without the demotion again: def {t(ydef):.2f}; el {t(el):.2f}; "
          f"def {t(ydef):.2f}")


if __name__ == "__main__":
    main()
