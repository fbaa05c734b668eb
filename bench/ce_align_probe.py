#!/usr/bin/env python3
"""ce_align_probe.py: the helper of bench/ce-align-probe.sh (read its opening
comment first): why the cross-entropy forward kernels run 1.2x their floor
at 8192x50257 bf16, where every row starts off a 16-byte boundary.

Variants are cross_entropy_kernel.py's (its Config, its source assembly,
its NVRTC options, its Gpu and Ce launchers, its CeParams, its inputs and
its launch of the float64 check), at five cases:
  50257                 the slow shape (row starts step by 2 bytes)
  50256, 50264          aligned neighbours (T_HEAD_FREE 1 code)
  50264/unaligned-code  aligned rows run by the code for unaligned rows
                        (T_HEAD_FREE 0, as codegen's opts->unaligned)
  50257/stride-50264    50257 columns in rows 16-byte aligned (row stride
                        50264): a partial last vector, no partial first one
and five kernels, each with its floor (a D2D copy of a contiguous
rows x cols tensor, timed in the same rounds):
  fused         T_CE_KIND 0 (loss + gradient into a separate buffer)  copy
  loss          T_CE_KIND 1                                           copy / 2
  loss-ignored  T_CE_KIND 1, every label ignore_index: no x_y load, no
                owner (what the kernel costs without its label work)  copy / 2
  bwd           T_CE_KIND 2, from the float64 lse rounded to fp32     copy
  softmax       tuned_softmax_rows at the same config (out of place)  copy
Every variant is checked against its float64 reference kernel first
(cross_entropy_reference.cu's tuned_ce_check, reference.cu's
tuned_check, with src/driver/check.c's bf16 tolerances) and is never
timed if it fails. Timing is cuda_timing.timed (median of CUDA-event times
after warm-up, L2 flushed before each), in interleaved rounds; a variant's
time is the median of its rounds.

The softcap and the argmax stay off (ck.params's softcap 0 and argmax
NULL, and the check's): the variants are built without T_CE_SOFTCAP and
T_CE_ARGMAX.

Modes:
  compile                   no GPU: every source compiled for sm_90 with
                            ptxas -v; registers and spills per variant
  time OUT STATE            GPU: checks, timings; OUT/probe results
                            (results.json, table.md), STATE/best-config
  one CASE KERNEL CONFIG    GPU: three launches of one variant (for ncu)
"""
import collections
import ctypes
import json
import os
import re
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cross_entropy_kernel as ck  # noqa: E402

DTYPE, ROWS, IGNORE = "bf16", 8192, -100
RTOL, ATOL = 8e-3, 1e-36            # src/driver/check.c, bf16
CUBINS = "/tmp/ce_cubins"           # where ck.Gpu.function looks for them
ROUNDS, REPS = 5, 20

# The configs tuned at 8192x50257 (bench/results/2026-11-29-h200-cross-entropy/
# records.jsonl: fused, loss, bwd) and neighbours. w8.c2 at m4 needs about
# 76 registers (the tuner's bound refuses it): at m2 too.
CONFIGS = [
    "w8.r1.c4.m4.v8.ld=def.st=def.reg=pk.red=fused",   # fused kind's winner
    "w4.r1.c2.m4.v8.ld=cs.st=def.reg=pk",              # loss kind's winner
    "w4.r1.c8.m1.v8.ld=def.st=def.reg=pk",             # backward kind's winner
    "w8.r1.c4.m4.v8.ld=def.st=def.reg=pk",
    "w16.r1.c1.m1.v8.ld=def.st=def.reg=pk.red=fused",
    "w8.r1.c2.m4.v8.ld=def.st=def.reg=pk.red=fused",
    "w8.r1.c2.m2.v8.ld=def.st=def.reg=pk.red=fused",
    "w8.r1.c8.m4.v8.ld=def.st=def.reg=pk.red=fused",
    "w8.r1.c4.m4.v4.ld=def.st=def.reg=pk.red=fused",
    "w8.r1.c8.m4.v4.ld=def.st=def.reg=pk.red=fused",
]

Case = collections.namedtuple("Case", "name cols stride unaligned_code")
CASES = [Case("50257", 50257, 50257, False), Case("50256", 50256, 50256, False),
         Case("50264", 50264, 50264, False), Case("50264/unaligned-code", 50264, 50264, True),
         Case("50257/stride-50264", 50257, 50264, False)]

# kernel: (T_CE_KIND, None for the softmax; floor in copies)
KERNELS = {"fused": (0, 1.0), "loss": (1, 0.5), "loss-ignored": (1, 0.5), "bwd": (2, 1.0),
           "softmax": (None, 1.0)}


def parse(text):
    """A config from cross_entropy_kernel.Config.name()'s text (no red=: split)."""
    kw = dict(red="split")
    for tok in text.split("."):
        if "=" in tok:
            key, value = tok.split("=")
            kw[key] = value
        else:
            kw[tok[0]] = int(tok[1:])
    return ck.Config(**kw)


def entry(kernel):
    kind = KERNELS[kernel][0]
    return "tuned_softmax_rows" if kind is None else ck.KIND_ENTRY[kind]


def source(kernel, cfg, case):
    kind = KERNELS[kernel][0]
    src = (ck.softmax_source(cfg, DTYPE, case.cols) if kind is None
           else ck.source(cfg, DTYPE, case.cols, kind))
    if case.unaligned_code:
        free = f"#define T_ITERS {ck.iters(cfg, DTYPE, case.cols, True)}\n"
        assert "#define T_HEAD_FREE 1\n" in src and free in src
        src = src.replace("#define T_HEAD_FREE 1\n", "#define T_HEAD_FREE 0\n").replace(
            free, f"#define T_ITERS {ck.iters(cfg, DTYPE, case.cols, False)}\n", 1)
    return src


def variants(configs):
    return [(case, kernel, cfg) for case in CASES for cfg in configs for kernel in KERNELS]


# ---- NVRTC with ptxas -v ------------------------------------------------------

def compile_verbose(src):
    """(cubin, log): ck.compile_cubin's options for sm_90 plus --ptxas-options=-v
    (its log then holds registers and spills); raises with the log."""
    lib = ck.nvrtc()
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"ce.cu", 0, None, None) != 0:
        raise RuntimeError("nvrtcCreateProgram failed")
    opts = [b"--gpu-architecture=sm_90", b"--std=c++17", b"--ptxas-options=-v"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    log = log.value.decode(errors="replace")
    cubin = b""
    if rc == 0:
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetCUBIN(prog, buf)
        cubin = buf.raw
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    if rc != 0:
        raise RuntimeError(f"nvrtc sm_90: {log[:3000]}")
    return cubin, log


def usage(log, fn):
    """'R regs, S/L B spill' of entry fn from a ptxas -v log."""
    at = log.find(f"Function properties for {fn}\n")
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads.*?Used (\d+) registers",
                  log[at:], re.S) if at >= 0 else None
    return f"{m.group(3)} regs, {m.group(1)}/{m.group(2)} B spill" if m else "?"


def compile_all(srcs, save):
    """{src: log or an exception}, compiled in parallel; cubins saved to CUBINS."""
    def one(src):
        try:
            cubin, log = compile_verbose(src)
        except RuntimeError as e:
            return e
        if save:
            os.makedirs(CUBINS, exist_ok=True)
            with open(os.path.join(CUBINS, ck.src_key(src, 90) + ".cubin"), "wb") as f:
                f.write(cubin)
        return log
    srcs = list(dict.fromkeys(srcs))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as ex:
        return dict(zip(srcs, ex.map(one, srcs)))


def compile_only():
    vs = variants([parse(c) for c in CONFIGS])
    ref = ck.reference_source(DTYPE)
    t0 = time.time()
    logs = compile_all([source(k, cfg, case) for case, k, cfg in vs] + [ref], save=False)
    failed = [src for src, log in logs.items() if isinstance(log, Exception)]
    for case, kernel, cfg in vs:
        log = logs[source(kernel, cfg, case)]
        what = "FAILED" if isinstance(log, Exception) else usage(log, entry(kernel))
        print(f"{case.name:<20} {kernel:<12} {cfg.name():<48} {what}")
    for src in failed:
        print(f"FAIL {src.splitlines()[0]}\n{logs[src]}")
    print(f"compiled {len(logs) - len(failed)} of {len(logs)} sources for sm_90 "
          f"({len(vs)} variants and the reference), {len(failed)} failed, "
          f"{time.time() - t0:.0f} s")
    return not failed


# ---- GPU side ---------------------------------------------------------------------

def params(gscale=None):
    return ck.params(1.0, 0.0, 0.0, IGNORE, gscale)


class Bench:
    """One case's tensors on the GPU, its variants' launches and checks."""

    def __init__(self, gpu, case):
        import torch
        self.gpu, self.case = gpu, case
        x, labels = ck.make_inputs(ROWS, case.stride, DTYPE, 5, IGNORE, special=False,
                                   bad_label=False)
        if case.stride != case.cols:
            x = x[:, :case.cols]
            labels = torch.where(labels == IGNORE, labels, labels % case.cols)
            labels[0] = case.cols - 1
        self.x, self.labels = x, labels
        self.ignored = torch.full_like(labels, IGNORE)
        self.y = torch.empty(ROWS, case.stride, dtype=x.dtype, device="cuda")[:, :case.cols]
        self.loss = torch.empty(ROWS, device="cuda")
        self.lse = torch.empty(ROWS, device="cuda")
        self.lse_ref = torch.empty(ROWS, device="cuda")
        self.gsc = torch.empty(1, device="cuda")
        ref = ck.reference_source(DTYPE)
        self.ref = {n: gpu.function(ref, n) for n in ("tuned_check", "tuned_ce_gen_lse")}
        gpu.launch(self.ref["tuned_ce_gen_lse"], ROWS, 256,
                   [ck.P(x), ck.P(self.lse_ref), *self.shape(), ctypes.c_double(1.0),
                    ctypes.c_double(0.0)])
        # gscale for reduction "mean": the count kernel, in any variant's module
        ck.Ce(gpu, parse(CONFIGS[0]), DTYPE, case.cols).count(labels, IGNORE, None, self.gsc, None)
        torch.cuda.synchronize()

    def shape(self):
        return [ctypes.c_longlong(ROWS), ctypes.c_int(self.case.cols),
                ctypes.c_longlong(self.x.stride(0))]

    def launcher(self, kernel, cfg):
        """A function that launches the variant once."""
        kind = KERNELS[kernel][0]
        fn = self.gpu.function(source(kernel, cfg, self.case), entry(kernel))
        ce = ck.Ce(self.gpu, cfg, DTYPE, self.case.cols)
        x, y, P = self.x, self.y, ck.P
        if kind is None:
            args = [P(x), P(y), *self.shape(), ctypes.c_float(1.0)]
            return lambda: self.gpu.launch(fn, ce.grid(ROWS), cfg.w * 32, args)
        ce.fn[kind] = fn  # Ce's launches, this case's source
        plain, scaled = params(), params(self.gsc)
        return {"fused": lambda: ce.fused(x, self.labels, y, self.loss, self.lse, scaled),
                "loss": lambda: ce.fused(x, self.labels, None, self.loss, self.lse, plain, 1),
                "loss-ignored": lambda: ce.fused(x, self.ignored, None, self.loss, self.lse, plain, 1),
                "bwd": lambda: ce.backward(x, self.labels, self.lse_ref, y, scaled)}[kernel]

    def check(self, kernel, run):
        """(failures, first failing index) against the float64 reference:
        reference.cu's tuned_check for the softmax, else
        ck.ref_kernel_check (tuned_ce_check) at check.c's tolerances."""
        import torch
        P = ck.P
        self.y.fill_(float("nan"))
        self.loss.fill_(7.0)
        self.lse.fill_(7.0)
        run()
        if kernel == "softmax":
            bad = torch.zeros(1, dtype=torch.int64, device="cuda")
            first = torch.full((1,), -1, dtype=torch.int64, device="cuda")
            args = [P(self.x), P(self.y), *self.shape(), ctypes.c_double(RTOL),
                    ctypes.c_double(ATOL), P(bad), P(first), P(None), ctypes.c_double(1.0),
                    ctypes.c_int(0)]
            self.gpu.launch(self.ref["tuned_check"], ROWS, 256, args)
            torch.cuda.synchronize()
            bad, first = bad.tolist(), first.tolist()
        else:
            fwd, grad = kernel != "bwd", kernel in ("fused", "bwd")
            labels = self.ignored if kernel == "loss-ignored" else self.labels
            bad, first, _ = ck.ref_kernel_check(
                self.gpu, self.x, labels, self.y if grad else None, self.loss if fwd else None,
                self.lse if fwd else None, DTYPE, 1.0, 0.0, 0.0, IGNORE,
                self.gsc if grad else None, 0, 0, lse_in=None if fwd else self.lse_ref,
                rtol=RTOL, atol=ATOL)
        return sum(bad), [i for i in first if i >= 0][:1]


def time_all(out, state):
    import torch
    from cuda_timing import timed
    t0 = time.time()
    gpu = ck.Gpu()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    configs = [parse(c) for c in CONFIGS]
    vs = variants(configs)
    logs = compile_all([source(k, cfg, case) for case, k, cfg in vs] +
                       [ck.reference_source(DTYPE)], save=True)
    print(f"compiled {len(logs)} sources ({time.time() - t0:.0f} s)", flush=True)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    results = []
    for case in CASES:
        b = Bench(gpu, case)
        xc = b.x if b.x.is_contiguous() else b.x.contiguous()
        dst = torch.empty_like(xc)
        runs = {("copy", ""): lambda: dst.copy_(xc)}
        rec = {}
        for cfg in configs:
            for kernel in KERNELS:
                log = logs[source(kernel, cfg, case)]
                r = rec[(kernel, cfg.name())] = dict(
                    case=case.name, kernel=kernel, config=cfg.name(),
                    ptxas=usage(log, entry(kernel)) if isinstance(log, str) else "compile failed")
                if not isinstance(log, str):
                    r["check"] = "not compiled"
                    continue
                try:
                    run = b.launcher(kernel, cfg)
                    bad, first = b.check(kernel, run)
                except RuntimeError as e:
                    r["check"] = f"error: {e}"[:200]
                    continue
                r["check"] = "ok" if bad == 0 else f"FAIL {bad} bad, first {first}"
                if bad == 0:
                    runs[(kernel, cfg.name())] = run
        times = collections.defaultdict(list)
        for _ in range(ROUNDS):  # interleaved: a drift of the clocks hits every variant alike
            for key, run in runs.items():
                times[key].append(timed(run, flush, REPS))
        copy_us = statistics.median(times[("copy", "")])
        print(f"\n== {ROWS}x{case.name} bf16: copy {copy_us:.1f} us "
              f"(rounds {' '.join(f'{t:.1f}' for t in times[('copy', '')])})", flush=True)
        for (kernel, name), r in rec.items():
            if (kernel, name) in times:
                r["us"] = statistics.median(times[(kernel, name)])
                r["rounds"] = times[(kernel, name)]
                r["ratio"] = r["us"] / (copy_us * KERNELS[kernel][1])
            r["copy_us"] = copy_us
            print(f"{kernel:<12} {name:<48} {r['ptxas']:<24} {r['check']:<6} "
                  + (f"{r['us']:8.1f} us {r['ratio']:.3f}x" if "us" in r else "not timed"),
                  flush=True)
            results.append(r)
        del b, xc, dst, runs
        torch.cuda.empty_cache()
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    loss = [r for r in results if r["case"] == "50257" and r["kernel"] == "loss" and "us" in r]
    best = min(loss, key=lambda r: r["us"])["config"] if loss else None
    if best:
        with open(os.path.join(state, "best-config"), "w") as f:
            f.write(best + "\n")
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(table(results, best))
    print(f"\n{len(results)} variants: {sum('us' in r for r in results)} checked and timed, "
          f"{sum(r['check'] != 'ok' for r in results)} not; {time.time() - t0:.0f} s")


def table(results, ref):
    """Shape x kernel: the best config's time and ratio, and the profiled
    config's (the loss kernel's best at 50257)."""
    lines = [f"Floor: a D2D copy (loss, loss-ignored: half a copy). At = {ref}.\n",
             "| shape | kernel | copy us | best us | /floor | best config | at us | /floor |",
             "|---|---|---|---|---|---|---|---|"]
    for case in CASES:
        for kernel in KERNELS:
            rs = [r for r in results if r["case"] == case.name and r["kernel"] == kernel]
            timed_ = [r for r in rs if "us" in r]
            if not timed_:
                lines.append(f"| {ROWS}x{case.name} | {kernel} | | none timed | | | | |")
                continue
            b = min(timed_, key=lambda r: r["us"])
            at = next((r for r in timed_ if r["config"] == ref), None)
            lines.append(f"| {ROWS}x{case.name} | {kernel} | {b['copy_us']:.1f} | {b['us']:.1f} | "
                         f"{b['ratio']:.3f} | {b['config']} | "
                         + (f"{at['us']:.1f} | {at['ratio']:.3f} |" if at else "- | - |"))
    return "\n".join(lines) + "\n"


def one(case_name, kernel, config):
    import torch
    gpu = ck.Gpu()
    b = Bench(gpu, next(c for c in CASES if c.name == case_name))
    run = b.launcher(kernel, parse(config))
    for _ in range(3):
        run()
    torch.cuda.synchronize()


def main():
    a = sys.argv[1:]
    if a[:1] == ["compile"]:
        sys.exit(0 if compile_only() else 1)
    if a[:1] == ["time"] and len(a) == 3:
        return time_all(a[1], a[2])
    if a[:1] == ["one"] and len(a) == 4:
        return one(*a[1:])
    sys.exit(__doc__)


if __name__ == "__main__":
    main()
