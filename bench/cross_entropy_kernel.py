#!/usr/bin/env python3
"""cross_entropy_kernel.py: the cross-entropy kernels of
kernels/templates/cross_entropy.cu, compiled, checked and timed outside the
daemon.

A variant's source is assembled as src/codegen/source.c assembles the
rows family's (a block of #defines, then softmax_common.cu,
softmax_rows_common.cu and cross_entropy.cu; source.c also appends
cross_entropy_aux.cu, the upstream gradient's rescale kernel, which this
harness does not use) and compiled by NVRTC with
src/codegen/nvrtc.c's options (--gpu-architecture=sm_XX --std=c++17; CuPy's
own compile path appends -ftz=true and its own -arch, so NVRTC is called
directly, through ctypes, and the cubin loaded with cupy.RawModule). The
CeParams struct is mirrored with ctypes, its size (72), alignment (8) and
offsets asserted; argmax (NULL: not written) and softcap (0: off) are
left at their defaults, so the variants here are built without
T_CE_SOFTCAP and T_CE_ARGMAX. The launch of the float64 check
(tuned_ce_check) passes the 22 arguments of its signature, its softcap 0
and argmax NULL.

Modes:
  --compile-only DIR   no GPU: compile every variant this script uses for
                       sm_90 (and sm_80 where it has no cluster), write the
                       cubins and sources under DIR (the GPU run loads
                       cubins from ./cubins beside this script when present)
  (default)            on a GPU: correctness suite (float64 torch reference,
                       the float64 reference kernels of
                       cross_entropy_reference.cu, ignored rows, label
                       smoothing, z-loss, scale, in-place gradients, a bad
                       label, NaN/+inf/-inf rows, per-row upstream), then the
                       timings with L2 flushed (median of CUDA-event times
                       after warm-up) of a D2D copy of the logits, the fused
                       kernel's configs, torch F.cross_entropy forward +
                       backward and torch.compile of it; a table last.
"""
import argparse
import ctypes
import glob
import hashlib
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def templates_dir():
    # a copy's own templates first: a copy run from a checkout's .ce/ must
    # not pick up the checkout's kernels/templates (the 2026-11-29 speed run did)
    for d in (os.path.join(HERE, "templates"), os.path.join(HERE, "..", "kernels", "templates")):
        if os.path.exists(os.path.join(d, "cross_entropy.cu")):
            return d
    sys.exit("no kernels/templates/cross_entropy.cu beside this script")


TEMPLATES = {}


def template(name):
    if name not in TEMPLATES:
        with open(os.path.join(templates_dir(), name + ".cu")) as f:
            TEMPLATES[name] = f.read()
    return TEMPLATES[name]


# ---- configs and source, as source.c -------------------------------------

DTYPES = {"fp16": (0, 2), "bf16": (1, 2), "fp32": (2, 4)}
LD = {"def": 0, "nc": 1, "cs": 2}
ST = {"def": 0, "cs": 1}
KIND_ENTRY = {0: "tuned_cross_entropy_rows", 1: "tuned_cross_entropy_rows",
              2: "tuned_cross_entropy_bwd"}


class Config:
    """A rows-family config (tuned__config's fields that apply here)."""

    def __init__(self, w, c=1, v=8, r=1, m=1, ld="def", st="def", reg="f32", red="fused"):
        self.w, self.c, self.v, self.r, self.m = w, c, v, r, m
        self.ld, self.st, self.reg, self.red = ld, st, reg, red

    def name(self):
        return (f"w{self.w}.r{self.r}.c{self.c}.m{self.m}.v{self.v}.ld={self.ld}.st={self.st}"
                f".reg={self.reg}" + (".red=fused" if self.red == "fused" else ""))

    def tpr(self):
        return self.w * 32 // self.r


def head_align(cfg, dtype, cols):
    esize = DTYPES[dtype][1]
    # tuned__config_head_align: the 128-byte line's for rows of 16384 bytes or more
    return cfg.v if cols * esize < 16384 else 128 // esize


def iters(cfg, dtype, cols, head_free):
    span = cfg.tpr() * cfg.c * cfg.v
    slots = cols if head_free else cols + head_align(cfg, dtype, cols) - 1
    return (slots + span - 1) // span


def source(cfg, dtype, cols, kind=0, smooth=0, label32=0):
    """The variant's source: the defines block of source.c (plus the
    cross-entropy ones), then the rows family's templates and
    cross_entropy.cu."""
    head_free = cols % cfg.v == 0
    d = DTYPES[dtype][0]
    defines = (
        f"// tuned cross_entropy variant {cfg.name()} for {dtype} x {cols} columns\n"
        f"#define T_DTYPE {d}\n#define T_WARPS {cfg.w}\n#define T_ROWS {cfg.r}\n"
        f"#define T_CLUSTER {cfg.c}\n#define T_MIN_BLOCKS {cfg.m}\n#define T_VEC {cfg.v}\n"
        f"#define T_ITERS {iters(cfg, dtype, cols, head_free)}\n#define T_COLS {cols}\n"
        f"#define T_HEAD_FREE {int(head_free)}\n#define T_LD {LD[cfg.ld]}\n"
        f"#define T_ST {ST[cfg.st]}\n#define T_REG_PACKED {int(cfg.reg != 'f32')}\n"
        f"#define T_EXP16 0\n#define T_FUSED {int(cfg.red == 'fused')}\n#define T_LOG 0\n"
        f"#define T_BWD 0\n#define T_HEAD_ALIGN {head_align(cfg, dtype, cols)}\n"
        f"#define T_CE_KIND {kind}\n#define T_CE_SMOOTH {smooth}\n#define T_CE_LABEL32 {label32}\n")
    return defines + template("softmax_common") + template("softmax_rows_common") + \
        template("cross_entropy")


def softmax_source(cfg, dtype, cols):
    """tuned_softmax_rows at the same config (the same defines block, then
    softmax_rows.cu): the family's plain softmax, which moves the same
    bytes, timed beside the fused kernel."""
    src = source(cfg, dtype, cols, 0)
    defines = src[:src.index(template("softmax_common"))]
    return defines + template("softmax_common") + template("softmax_rows_common") + \
        template("softmax_rows")


def reference_source(dtype, label32=0):
    defines = (f"// tuned cross_entropy reference kernels for {dtype}\n"
               f"#define T_DTYPE {DTYPES[dtype][0]}\n#define T_CE_LABEL32 {label32}\n")
    return defines + template("softmax_common") + template("reference") + \
        template("cross_entropy_reference")


# ---- NVRTC, with nvrtc.c's options ---------------------------------------

_NVRTC = None


def nvrtc():
    global _NVRTC
    if _NVRTC is None:
        cands = ["/usr/local/cuda/lib64/libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so"]
        for p in sys.path:
            cands += glob.glob(os.path.join(p, "nvidia", "*", "lib", "libnvrtc.so*"))
            cands += glob.glob(os.path.join(p, "nvidia", "*", "*", "lib", "libnvrtc.so*"))
        for c in cands:
            try:
                _NVRTC = ctypes.CDLL(c)
                break
            except OSError:
                continue
        if _NVRTC is None:
            raise RuntimeError("no libnvrtc found")
    return _NVRTC


def compile_cubin(src, arch, name="ce.cu"):
    """Compiles src for sm_<arch> with --std=c++17, as nvrtc.c does; returns
    (cubin bytes, log) or raises with the log."""
    lib = nvrtc()
    prog = ctypes.c_void_p()
    r = lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None)
    if r != 0:
        raise RuntimeError(f"nvrtcCreateProgram: {r}")
    opts = [f"--gpu-architecture=sm_{arch}".encode(), b"--std=c++17"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    if rc != 0:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        raise RuntimeError(f"nvrtc sm_{arch}: {log.value.decode(errors='replace')[:3000]}")
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetCUBIN(prog, buf)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return buf.raw, log.value.decode(errors="replace")


def src_key(src, arch):
    return hashlib.sha1((src + f"|sm_{arch}|c++17").encode()).hexdigest()[:20]


# ---- what this script compiles ---------------------------------------------

def bf16_configs(cols):
    """A handful of rows-family configs per bf16/fp16 shape: the softmax's
    tuned config for the shape (cache/pretuned/h200.jsonl) and its
    neighbours at T_MIN_BLOCKS 4 (at most 64 registers at 256 threads, 4
    blocks a SM) or 2, then a few of the earlier T_MIN_BLOCKS 1 ones."""
    F, S = dict(reg="pk", red="fused"), dict(reg="pk", red="split")
    if cols <= 40000:
        return [Config(8, 4, m=2, **F), Config(8, 4, m=2, **S), Config(8, 2, m=4, **F),
                Config(8, 4, v=4, m=4, **S), Config(8, 4, v=4, m=4, **F),
                Config(8, 2, red="split"), Config(8, 1, reg="pk")]
    if cols <= 60000:
        return [Config(8, 4, m=4, **F), Config(8, 4, m=4, **S), Config(8, 8, v=4, m=4, **S),
                Config(8, 8, v=4, m=4, **F), Config(8, 4, v=4, m=2, **S), Config(16, 1, reg="pk"),
                Config(8, 4, red="split")]
    if cols <= 160000:
        return [Config(8, 8, v=4, m=4, **S), Config(8, 8, v=4, m=4, **F),
                Config(8, 8, v=8, m=4, **S), Config(8, 8, v=4, m=4, ld="cs", **S),
                Config(8, 8, v=4, m=4, st="cs", **S), Config(8, 8, v=4, m=4, ld="cs", st="cs", **S),
                Config(8, 16, v=4, m=4, **S), Config(8, 16, v=4, m=4, **F),
                Config(8, 4, m=2, **S), Config(8, 8, red="split")]
    return [Config(8, 16, v=4, m=4, **S), Config(8, 16, v=4, m=4, **F),
            Config(8, 16, v=8, m=4, **F), Config(8, 16, v=4, m=4, st="cs", **S),
            Config(8, 8, v=4, m=2, **S), Config(8, 16, st="cs"), Config(8, 16, red="split")]


def fp32_configs(cols):
    return [Config(4, 16, v=2, m=4, red="fused"), Config(4, 16, v=2, m=4, red="split"),
            Config(8, 16, v=4, m=4, red="fused"), Config(8, 8, v=4, m=2, red="fused"),
            Config(4, 16, v=4, red="split"), Config(8, 8, v=4, red="split")]


SHAPES = [(4096, 32000, "bf16"), (8192, 50257, "bf16"), (8192, 128256, "bf16"),
          (16384, 151936, "bf16"), (4096, 262144, "bf16"), (512, 128256, "bf16"),
          (8192, 128256, "fp32")]


def shape_configs(cols, dtype):
    return fp32_configs(cols) if dtype == "fp32" else bf16_configs(cols)


# The correctness suite: (rows, cols, dtype, config, smooth, label32), each
# run as fused (in place and not), loss only and backward.
CHECKS = [
    (64, 32000, "bf16", Config(8, 1, reg="pk"), 1, 0),
    (48, 128256, "bf16", Config(8, 8), 1, 0),
    (40, 50257, "fp32", Config(8, 4, v=4), 1, 0),
    (24, 262144, "bf16", Config(8, 16), 0, 0),
    (33, 4099, "fp16", Config(4, 1, red="split"), 1, 1),
    (100, 1000, "bf16", Config(4, 1, r=4), 0, 0),
    (20, 128256, "bf16", Config(8, 8, red="split", reg="pk"), 1, 0),
    (40, 128256, "bf16", Config(8, 8, v=4, m=4, red="split", reg="pk"), 0, 0),
    (24, 128256, "bf16", Config(8, 8, v=4, m=4, red="fused", reg="pk"), 1, 1),
    (24, 50261, "bf16", Config(8, 4, m=4, red="fused", reg="pk"), 0, 0),
    (16, 128256, "fp32", Config(4, 16, v=2, m=4, red="fused"), 1, 0),
    (16, 262144, "fp32", Config(8, 16, v=4), 0, 0),
]


def all_variants():
    """(src, entry, arch list) of every variant the GPU run uses."""
    out = []
    for rows, cols, dtype, cfg, smooth, l32 in CHECKS:
        for kind in (0, 1, 2):
            out.append(source(cfg, dtype, cols, kind, smooth, l32))
    for rows, cols, dtype in SHAPES:
        for i, cfg in enumerate(shape_configs(cols, dtype)):
            out.append(source(cfg, dtype, cols, 0))
            out.append(source(cfg, dtype, cols, 1))
            out.append(source(cfg, dtype, cols, 2))
            out.append(softmax_source(cfg, dtype, cols))
    for dtype in ("fp16", "bf16", "fp32"):
        for l32 in (0, 1):
            out.append(reference_source(dtype, l32))
    return list(dict.fromkeys(out))


def compile_only(outdir):
    os.makedirs(outdir, exist_ok=True)
    srcs = all_variants()
    ok = fail = 0
    t0 = time.time()
    from concurrent.futures import ThreadPoolExecutor

    def one(src):
        cluster = "#define T_CLUSTER 1\n" in src or "#define T_CLUSTER" not in src
        res = []
        for arch in ((90, 80) if cluster else (90,)):
            try:
                cubin, log = compile_cubin(src, arch)
                if arch == 90:
                    with open(os.path.join(outdir, src_key(src, arch) + ".cubin"), "wb") as f:
                        f.write(cubin)
                res.append((arch, None, log))
            except RuntimeError as e:
                res.append((arch, str(e), ""))
        return src, res

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as ex:
        for src, res in ex.map(one, srcs):
            head = src.splitlines()[0]
            for arch, err, log in res:
                if err:
                    fail += 1
                    print(f"FAIL sm_{arch} {head}\n{err}")
                else:
                    ok += 1
                    if log.strip():
                        print(f"warn sm_{arch} {head}: {log.strip()[:400]}")
    print(f"compiled {ok} ok, {fail} failed, {len(srcs)} sources, {time.time() - t0:.1f} s")
    return fail == 0


# ---- GPU side ----------------------------------------------------------------

class CeParams(ctypes.Structure):
    """cross_entropy.cu's struct CeParams, field for field (and
    src/codegen/cross_entropy.h's tuned__ce_params)."""
    _fields_ = [("scale", ctypes.c_float), ("smoothing", ctypes.c_float),
                ("z_loss", ctypes.c_float), ("grad_per_row", ctypes.c_int),
                ("ignore_index", ctypes.c_longlong), ("grad_scale", ctypes.c_void_p),
                ("z_out", ctypes.c_void_p), ("error", ctypes.c_void_p),
                ("argmax", ctypes.c_void_p), ("softcap", ctypes.c_float),
                ("classes", ctypes.c_int), ("class_offset", ctypes.c_longlong),
                ("lse_lo", ctypes.c_void_p)]


# the offsets of the template's layout comment, and its static_assert
assert [(n, getattr(CeParams, n).offset) for n, _ in CeParams._fields_] == [
    ("scale", 0), ("smoothing", 4), ("z_loss", 8), ("grad_per_row", 12), ("ignore_index", 16),
    ("grad_scale", 24), ("z_out", 32), ("error", 40), ("argmax", 48), ("softcap", 56),
    ("classes", 60), ("class_offset", 64), ("lse_lo", 72)]
assert ctypes.sizeof(CeParams) == 80 and ctypes.alignment(CeParams) == 8


class Gpu:
    def __init__(self):
        import torch
        self.torch = torch
        torch.cuda.init()
        torch.empty(1, device="cuda")  # the primary context, current
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.modules = {}
        self.cubin_dir = os.path.join(HERE, "cubins")
        self.compiled_here = 0
        try:
            import cupy
            self.cupy = cupy
        except ImportError:
            self.cupy = None

    def function(self, src, entry):
        key = (src, entry)
        if key in self.modules:
            return self.modules[key][1]
        path = os.path.join(self.cubin_dir, src_key(src, 90) + ".cubin")
        if not os.path.exists(path):
            path = os.path.join("/tmp/ce_cubins", src_key(src, 90) + ".cubin")
        if not os.path.exists(path):
            cubin, _ = compile_cubin(src, 90)
            os.makedirs("/tmp/ce_cubins", exist_ok=True)
            path = os.path.join("/tmp/ce_cubins", src_key(src, 90) + ".cubin")
            with open(path, "wb") as f:
                f.write(cubin)
            self.compiled_here += 1
        ptr = None
        if self.cupy is not None:
            try:
                mod = self.cupy.RawModule(path=path)
                fn = mod.get_function(entry)  # a RawKernel; its CUfunction is .kernel.ptr
                ptr = fn.kernel.ptr
            except Exception as e:
                print(f"cupy.RawModule: {type(e).__name__}: {e}; loading with the driver API")
        if ptr is None:
            mod = ctypes.c_void_p()
            data = open(path, "rb").read()
            assert self.cu.cuModuleLoadData(ctypes.byref(mod), data) == 0
            f = ctypes.c_void_p()
            assert self.cu.cuModuleGetFunction(ctypes.byref(f), mod, entry.encode()) == 0
            fn, ptr = f, f.value
        # clusters of more than 8 blocks are non-portable: allowed per function
        if "#define T_CLUSTER 16\n" in src:
            r = self.cu.cuFuncSetAttribute(ctypes.c_void_p(ptr), 14, 1)
            if r != 0:
                print(f"cuFuncSetAttribute(non-portable cluster size) {entry}: {r}")
        self.modules[key] = (mod, ptr, fn)
        return ptr

    def precompile(self):
        """Compiles, in parallel, every variant whose cubin did not travel."""
        from concurrent.futures import ThreadPoolExecutor
        todo = [src for src in all_variants()
                if not os.path.exists(os.path.join(self.cubin_dir, src_key(src, 90) + ".cubin"))]
        os.makedirs("/tmp/ce_cubins", exist_ok=True)

        def one(src):
            cubin, _ = compile_cubin(src, 90)
            with open(os.path.join("/tmp/ce_cubins", src_key(src, 90) + ".cubin"), "wb") as f:
                f.write(cubin)
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as ex:
            list(ex.map(one, todo))
        self.compiled_here += len(todo)

    def launch(self, ptr, grid, block, args):
        # kernelParams: an array of pointers to each argument's bytes
        params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        stream = self.torch.cuda.current_stream().cuda_stream
        r = self.cu.cuLaunchKernel(ctypes.c_void_p(ptr), grid, 1, 1, block, 1, 1, 0,
                                   ctypes.c_void_p(stream), params, None)
        if r != 0:
            raise RuntimeError(f"cuLaunchKernel: {r}")


def P(t):
    return ctypes.c_void_p(0 if t is None else t.data_ptr())


TDT = None


def tdtype(dtype):
    import torch
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype]


class Ce:
    """The kernels of one (shape, dtype, config) and their launches."""

    def __init__(self, gpu, cfg, dtype, cols, smooth=0, label32=0):
        self.gpu, self.cfg, self.dtype, self.cols = gpu, cfg, dtype, cols
        self.srcs = {k: source(cfg, dtype, cols, k, smooth, label32) for k in (0, 1, 2)}
        self.fn = {}

    def f(self, kind):
        if kind not in self.fn:
            self.fn[kind] = self.gpu.function(self.srcs[kind], KIND_ENTRY[kind])
        return self.fn[kind]

    def grid(self, rows):
        return (rows + self.cfg.r - 1) // self.cfg.r * self.cfg.c

    def count(self, labels, ignore_index, upstream, gscale, valid):
        # the count kernel is in every variant's module
        ptr = self.gpu.function(self.srcs[0], "tuned_cross_entropy_count")
        self.gpu.launch(ptr, 1, 1024, [P(labels), ctypes.c_longlong(labels.shape[0]),
                                       ctypes.c_longlong(ignore_index), P(upstream), P(gscale),
                                       P(valid)])

    def fused(self, x, labels, grad, loss, lse, prm, kind=0):
        rows = x.shape[0]
        self.gpu.launch(self.f(kind), self.grid(rows), self.cfg.w * 32,
                        [P(x), P(labels), P(grad), P(loss), P(lse),
                         ctypes.c_longlong(rows), ctypes.c_int(self.cols),
                         ctypes.c_longlong(x.stride(0)), prm])

    def backward(self, x, labels, lse, grad, prm):
        rows = x.shape[0]
        self.gpu.launch(self.f(2), self.grid(rows), self.cfg.w * 32,
                        [P(x), P(labels), P(lse), P(grad), ctypes.c_longlong(rows),
                         ctypes.c_int(self.cols), ctypes.c_longlong(x.stride(0)), prm])


def params(scale=1.0, eps=0.0, z=0.0, ignore=-100, gscale=None, per_row=0, z_out=None,
           error=None, argmax=None, softcap=0.0):
    """A CeParams; tensors (or None: NULL) for the pointers. By default
    argmax None and softcap 0, neither asked for, as the variants here
    (built without T_CE_ARGMAX and T_CE_SOFTCAP) need: a cap given to them
    makes every row NaN and sets bit 2 of the error word."""
    return CeParams(scale=scale, smoothing=eps, z_loss=z, grad_per_row=per_row,
                    ignore_index=ignore, grad_scale=P(gscale).value, z_out=P(z_out).value,
                    error=P(error).value, argmax=P(argmax).value, softcap=softcap, classes=0,
                    class_offset=0)


def torch_reference(x, labels, scale, eps, z, ignore, gs_row):
    """float64: per-row loss, lse, z term and the gradient, the kernels'
    definition (max ignoring NaN, NaN through the sum; a bad label NaN)."""
    import torch
    xd = x.double() * scale
    V = xd.shape[1]
    m = torch.where(torch.isnan(xd), torch.full_like(xd, -float("inf")), xd).amax(1)
    s = torch.exp(xd - m[:, None]).sum(1)
    lse = torch.where(m == -float("inf"), m, m + torch.log(s))  # log 0, as logsumexp
    ignored = labels == ignore
    bad = ~ignored & ((labels < 0) | (labels >= V))
    valid = ~ignored & ~bad
    yl = torch.where(valid, labels, torch.zeros_like(labels))
    xy = xd.gather(1, yl[:, None])[:, 0]
    nll = (m - xy) + torch.log(s)
    smooth = (m - xd.mean(1)) + torch.log(s)
    zterm = z * lse * lse
    # terms of a zero eps or z left out (0 * inf is NaN: masked logits)
    loss = (1 - eps) * nll + (eps * smooth if eps else 0) + (zterm if z else 0)
    nan = torch.full_like(loss, float("nan"))
    loss = torch.where(ignored, torch.zeros_like(loss), torch.where(bad, nan, loss))
    p = torch.exp(xd - lse[:, None])
    target = torch.full_like(xd, eps / V)
    target.scatter_add_(1, yl[:, None], torch.full_like(xd[:, :1], 1 - eps))
    gs = gs_row.double() * scale
    g = gs[:, None] * (p * (1 + 2 * z * lse)[:, None] - target)
    g = torch.where(ignored[:, None], torch.zeros_like(g), g)
    g = torch.where(bad[:, None], torch.full_like(g, float("nan")), g)
    slack = gs.abs()[:, None] * (2e-5 * (p * (1 + 2 * z * lse).abs()[:, None] + target) + 1e-37)
    return dict(loss=loss, lse=lse, z=torch.where(ignored, torch.zeros_like(zterm), zterm),
                grad=g, slack=slack, m=m, s=s, xy=xy, valid=valid, bad=bad, ignored=ignored,
                mabs=xd.abs().mean(1))


RTOL = {"fp16": 2 ** -10, "bf16": 2 ** -8, "fp32": 0.0}
ATOL = {"fp16": 6e-8, "bf16": 1e-38, "fp32": 1e-38}


def same(got, ref, tol):
    """Elementwise: NaN only for NaN, infinities equal, else within tol."""
    import torch
    got = got.double()
    nan_ok = torch.isnan(ref) == torch.isnan(got)
    inf = torch.isinf(ref)
    inf_ok = torch.where(inf, got == ref, torch.ones_like(inf))
    fin = ~torch.isnan(ref) & ~inf
    close = torch.where(fin, (got - ref).abs() <= tol, torch.ones_like(fin))
    return nan_ok & inf_ok & close


class Checker:
    def __init__(self, gpu):
        self.gpu = gpu
        self.failed = []
        self.passed = 0

    def ok(self, what, cond, detail=""):
        if cond:
            self.passed += 1
        else:
            self.failed.append(what)
            print(f"  CHECK FAIL {what} {detail}")


# cross_entropy_reference.cu's CE_CHECKS: its counts of bad gradient
# elements, loss rows, lse rows and argmax rows
CE_CHECKS = 4


def ref_kernel_check(gpu, x, labels, grad, loss, lse, dtype, scale, eps, z, ignore, gscale,
                     per_row, label32, lse_in=None, softcap=0.0, argmax=None, rtol=None,
                     atol=None):
    """tuned_ce_check on a variant's outputs: (bad[4], first[4], row_ref),
    bad and first as CE_CHECKS counts them. grad, loss, lse, argmax None:
    not checked; lse_in: the backward's saved lse (the gradient's reference
    formed from it); rtol, atol: the dtype's RTOL, ATOL unless given."""
    import torch
    src = reference_source(dtype, label32)
    fn = gpu.function(src, "tuned_ce_check")
    bad = torch.zeros(CE_CHECKS, dtype=torch.int64, device="cuda")
    first = torch.full((CE_CHECKS,), -1, dtype=torch.int64, device="cuda")
    row_ref = torch.empty(2 * x.shape[0], dtype=torch.float64, device="cuda")
    gpu.launch(fn, min(x.shape[0], 4096), 256,
               [P(x), P(labels), P(grad), P(loss), P(lse), ctypes.c_longlong(x.shape[0]),
                ctypes.c_int(x.shape[1]), ctypes.c_longlong(x.stride(0)),
                ctypes.c_double(scale), ctypes.c_double(eps), ctypes.c_double(z),
                ctypes.c_longlong(ignore), P(gscale), ctypes.c_int(per_row),
                ctypes.c_double(RTOL[dtype] if rtol is None else rtol),
                ctypes.c_double(ATOL[dtype] if atol is None else atol), P(bad), P(first),
                P(row_ref), P(lse_in), ctypes.c_double(softcap), P(argmax)])
    torch.cuda.synchronize()
    return bad.tolist(), first.tolist(), row_ref.view(-1, 2)


def make_inputs(rows, cols, dtype, seed, ignore, special=True, bad_label=True):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(rows, cols, device="cuda", generator=g) * 3).to(tdtype(dtype))
    labels = torch.randint(0, cols, (rows,), device="cuda", generator=g)
    labels[::7] = ignore
    if rows >= 8 and special:
        x[1, 5] = float("nan")
        x[2, 7] = float("inf")
        x[3, :] = -float("inf")
        x[4, ::3] = -float("inf")          # masked logits, label on a finite one
        labels[4] = 1
        x[6, :] = x[6, :] * 4            # peaked row
    if bad_label and rows >= 8:
        labels[5] = cols + 3
    labels[0] = cols - 1                 # the last column
    if rows > 9:
        labels[9] = 0
    return x, labels


def correctness(gpu):
    import torch
    ck = Checker(gpu)
    ignore = -100
    for case, (rows, cols, dtype, cfg, smooth, l32) in enumerate(CHECKS):
        ce = Ce(gpu, cfg, dtype, cols, smooth, l32)
        for opt, (scale, eps, z) in enumerate([(1.0, 0.0, 0.0), (0.5, 0.1 if smooth else 0.0, 1e-4)]):
            x0, labels = make_inputs(rows, cols, dtype, 1000 * case + opt, ignore)
            lab = labels.to(torch.int32) if l32 else labels
            tag = f"{rows}x{cols} {dtype} {cfg.name()} s={scale} eps={eps} z={z}"
            # mean reduction through the count kernel, upstream 2.0
            up = torch.tensor([2.0], device="cuda")
            gsc = torch.empty(1, device="cuda")
            nvalid = torch.empty(1, dtype=torch.int64, device="cuda")
            ce.count(lab, ignore, up, gsc, nvalid)
            torch.cuda.synchronize()
            nv = int((labels != ignore).sum())
            ck.ok(f"count {tag}", int(nvalid) == nv and abs(float(gsc) - 2.0 / nv) < 1e-6 / nv,
                  f"{int(nvalid)} vs {nv}")
            ref = torch_reference(x0, labels, scale, eps, z, ignore,
                                  torch.full((rows,), 2.0 / nv, device="cuda"))
            # the float64 reference is torch's cross_entropy on valid rows
            xd = x0.double() * scale
            v = ref["valid"]
            tl = torch.nn.functional.cross_entropy(xd[v], labels[v], reduction="none",
                                                   label_smoothing=eps) + z * ref["lse"][v] ** 2
            ck.ok(f"torch-agrees {tag}", bool(same(tl, ref["loss"][v], 1e-9 * (1 + ref["loss"][v].abs())).all()),
                  f"{tl[:4].tolist()} {ref['loss'][v][:4].tolist()}")
            for inplace in (False, True):
                x = x0.clone()
                grad = x if inplace else torch.full_like(x0, float("nan"))
                loss = torch.full((rows,), 7.0, device="cuda")
                lse = torch.full((rows,), 7.0, device="cuda")
                zo = torch.full((rows,), 7.0, device="cuda")
                err = torch.zeros(1, dtype=torch.int32, device="cuda")
                prm = params(scale, eps, z, ignore, gsc, 0, zo, err)
                ce.fused(x, lab, grad, loss, lse, prm)
                torch.cuda.synchronize()
                t = f"fused{' in-place' if inplace else ''} {tag}"
                gt = grad.double()
                tol = RTOL[dtype] * ref["grad"].abs() + ATOL[dtype] + ref["slack"]
                okg = same(gt, ref["grad"], tol)
                ck.ok(f"grad {t}", bool(okg.all()),
                      f"{int((~okg).sum())} bad; first {torch.nonzero(~okg)[:3].tolist()}")
                ltol = 2e-5 * ((ref["m"] - ref["xy"]).abs() + ref["s"].log().abs() +
                               (eps * (ref["m"].abs() + ref["mabs"]) if eps else 0) +
                               (2 * z * ref["lse"].abs() * (ref["m"].abs() + ref["s"].log().abs())
                                if z else 0)) + 1e-6
                okl = same(loss, ref["loss"], ltol)
                ck.ok(f"loss {t}", bool(okl.all()),
                      f"rows {torch.nonzero(~okl)[:5, 0].tolist()} got {loss[~okl][:3].tolist()} "
                      f"ref {ref['loss'][~okl][:3].tolist()}")
                lt = 2e-5 * (ref["m"].abs() + ref["s"].log().abs()) + 1e-6
                ck.ok(f"lse {t}", bool(same(lse, ref["lse"], lt).all()))
                ck.ok(f"z_out {t}", bool(same(zo, ref["z"], lt * 2 * z * ref["lse"].abs() + 1e-6).all()))
                ck.ok(f"error word {t}", int(err) == 1, f"{int(err)}")
                bad, first, row_ref = ref_kernel_check(gpu, x0, lab, grad, loss, lse, dtype,
                                                       scale, eps, z, ignore, gsc, 0, l32)
                ck.ok(f"reference kernel {t}", bad == [0] * CE_CHECKS, f"bad {bad} first {first}")
                rr = same(row_ref[:, 0], ref["loss"], 1e-9 * (1 + ref["loss"].abs())) & \
                    same(row_ref[:, 1], ref["lse"], 1e-9 * (1 + ref["lse"].abs()))
                ck.ok(f"reference kernel vs torch {t}", bool(rr.all()))
                if not inplace and opt == 0:
                    # the check must catch a wrong gradient element and a wrong loss
                    g2 = grad.clone()
                    g2[rows // 2, cols // 3] += 0.25 * float(gsc)
                    l2 = loss.clone()
                    l2[8] += 1e-3
                    bad2, _, _ = ref_kernel_check(gpu, x0, lab, g2, l2, lse, dtype, scale,
                                                  eps, z, ignore, gsc, 0, l32)
                    ck.ok(f"reference kernel catches planted errors {tag}",
                          bad2[0] >= 1 and bad2[1] >= 1, f"{bad2}")
            # loss only
            x = x0.clone()
            loss = torch.full((rows,), 7.0, device="cuda")
            lse = torch.full((rows,), 7.0, device="cuda")
            err = torch.zeros(1, dtype=torch.int32, device="cuda")
            ce.fused(x, lab, None, loss, lse, params(scale, eps, z, ignore, None, 0, None, err), 1)
            torch.cuda.synchronize()
            ck.ok(f"loss-only {tag}", bool(same(loss, ref["loss"], ltol).all()) and
                  bool(torch.equal(x.view(torch.int8), x0.view(torch.int8))) and int(err) == 1)
            # split backward: per-row upstream (reduction none), from the saved lse
            upr = torch.rand(rows, device="cuda") + 0.5
            ref2 = torch_reference(x0, labels, scale, eps, z, ignore, upr)
            grad = torch.full_like(x0, float("nan"))
            err = torch.zeros(1, dtype=torch.int32, device="cuda")
            ce.backward(x0, lab, lse, grad, params(scale, eps, z, ignore, upr, 1, None, err))
            torch.cuda.synchronize()
            tol = RTOL[dtype] * ref2["grad"].abs() + ATOL[dtype] + ref2["slack"] * 2
            okb = same(grad.double(), ref2["grad"], tol)
            ck.ok(f"backward {tag}", bool(okb.all()) and int(err) == 1,
                  f"{int((~okb).sum())} bad; first {torch.nonzero(~okb)[:3].tolist()}")
        # a build without T_CE_SMOOTH refuses eps != 0 loudly
        if not smooth:
            x0, labels = make_inputs(rows, cols, dtype, 77, ignore, special=False, bad_label=False)
            lab = labels.to(torch.int32) if l32 else labels
            loss = torch.zeros(rows, device="cuda")
            err = torch.zeros(1, dtype=torch.int32, device="cuda")
            ce.fused(x0.clone(), lab, None, loss, None, params(1.0, 0.1, 0.0, ignore, None, 0, None, err), 1)
            torch.cuda.synchronize()
            valid = labels != ignore
            ck.ok(f"eps without T_CE_SMOOTH {rows}x{cols}", int(err) == 2 and
                  bool(torch.isnan(loss[valid]).all()))
    return ck


def timings(gpu, ck, deadline, log, shapes=None):
    import torch
    import torch.nn.functional as F
    from cuda_timing import peak_extra
    from cuda_timing import timed as bench
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    rows_out = []
    compiled = {}
    ignore = -100
    for rows, cols, dtype in SHAPES:
        if shapes and f"{rows}x{cols}-{dtype}" not in shapes:
            continue
        x0, labels = make_inputs(rows, cols, dtype, 5, ignore, special=False, bad_label=False)
        nbytes = x0.numel() * x0.element_size()
        reps = 20 if nbytes < 4e9 else 10
        dst = torch.empty_like(x0)
        t_copy = bench(lambda: dst.copy_(x0), flush, reps)
        copy_extra = peak_extra(lambda: torch.empty_like(x0).copy_(x0))
        del dst
        x = x0.clone()
        best = None
        for cfg in shape_configs(cols, dtype):
            ce = Ce(gpu, cfg, dtype, cols)

            def run(ce=ce):
                gsc = torch.empty(1, device="cuda")
                loss = torch.empty(rows, device="cuda")
                lse = torch.empty(rows, device="cuda")
                ce.count(labels, ignore, None, gsc, None)
                ce.fused(x, labels, x, loss, lse, params(1.0, 0.0, 0.0, ignore, gsc))
                return loss.sum()
            try:
                t = bench(run, flush, reps)
            except RuntimeError as e:
                print(f"  {rows}x{cols} {dtype} {cfg.name()}: {e}")
                continue
            print(f"  {rows}x{cols} {dtype} {cfg.name()}: {t:.1f} us ({t / t_copy:.3f} x copy)",
                  file=log, flush=True)
            if best is None or t < best[0]:
                best = (t, ce, run)
        t_best, ce, run = best
        fused_extra = peak_extra(run)
        # the best config again, on fresh logits, in place, checked in float64
        xw = x0.clone()
        gsc = torch.empty(1, device="cuda")
        loss = torch.empty(rows, device="cuda")
        lse = torch.empty(rows, device="cuda")
        ce.count(labels, ignore, None, gsc, None)
        ce.fused(xw, labels, xw, loss, lse, params(1.0, 0.0, 0.0, ignore, gsc))
        bad, first, _ = ref_kernel_check(gpu, x0, labels, xw, loss, lse, dtype, 1.0, 0.0, 0.0,
                                         ignore, gsc, 0, 0)
        ck.ok(f"best {rows}x{cols} {dtype} {ce.cfg.name()} vs float64", bad == [0] * CE_CHECKS,
              f"bad {bad} first {first}")
        # the plain softmax at the same config, in place: what the family does
        # with the same bytes and no cross-entropy work
        t_soft = None
        try:
            sfn = gpu.function(softmax_source(ce.cfg, dtype, cols), "tuned_softmax_rows")
            t_soft = bench(lambda: gpu.launch(sfn, ce.grid(rows), ce.cfg.w * 32,
                                              [P(x), P(x), ctypes.c_longlong(rows),
                                               ctypes.c_int(cols), ctypes.c_longlong(x.stride(0)),
                                               ctypes.c_float(1.0)]), flush, reps)
        except RuntimeError as e:
            print(f"  softmax {ce.cfg.name()}: {e}"[:300])
        # loss only and the split backward, same config
        t_fwd = bench(lambda: ce.fused(x, labels, None, loss, lse,
                                       params(1.0, 0.0, 0.0, ignore, None), 1), flush, reps)
        t_bwd = bench(lambda: ce.backward(x0, labels, lse, x, params(1.0, 0.0, 0.0, ignore, gsc)),
                      flush, reps)
        del xw, x
        xg = x0.clone().requires_grad_()

        def torch_run():
            xg.grad = None
            F.cross_entropy(xg, labels, ignore_index=ignore).backward()
        t_torch = bench(torch_run, flush, reps)
        torch_extra = peak_extra(torch_run)
        t_comp = comp_extra = None
        if time.time() < deadline:
            key = dtype
            if key not in compiled:
                compiled[key] = torch.compile(lambda a, b: F.cross_entropy(a, b, ignore_index=ignore),
                                              dynamic=True)
            cf = compiled[key]

            def comp_run():
                xg.grad = None
                cf(xg, labels).backward()
            try:
                comp_run()
                t_comp = bench(comp_run, flush, reps)
                comp_extra = peak_extra(comp_run)
            except Exception as e:  # report, keep going
                print(f"  torch.compile {rows}x{cols}: {type(e).__name__}: {e}"[:300])
        xg.grad = None
        del xg
        rows_out.append((f"{rows}x{cols}", dtype, t_copy, t_best, ce.cfg.name(), t_soft, t_fwd,
                         t_bwd, t_torch, t_comp, copy_extra, fused_extra, torch_extra, comp_extra))
        print(f"{rows}x{cols} {dtype}: copy {t_copy:.1f} fused {t_best:.1f} ({ce.cfg.name()}) "
              f"{t_best / t_copy:.3f}x softmax {us(t_soft)} fwd {t_fwd:.1f} bwd {t_bwd:.1f} "
              f"torch {t_torch:.1f} "
              f"compile {t_comp}", flush=True)
        del x0, labels
        torch.cuda.empty_cache()
    return rows_out


def gb(b):
    return "-" if b is None else f"{b / 1e9:.2f}"


def us(t):
    return "skipped" if t is None else f"{t:.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile-only", metavar="DIR")
    ap.add_argument("--log", default=os.environ.get("OUT", "/tmp") + "/ce_configs.log")
    ap.add_argument("--shapes", default="",
                    help="comma-separated ROWSxCOLS-DTYPE (e.g. 8192x128256-bf16); default all")
    ap.add_argument("--budget-s", type=float, default=330.0,
                    help="after this many seconds torch.compile is skipped")
    a = ap.parse_args()
    if a.compile_only:
        sys.exit(0 if compile_only(a.compile_only) else 1)
    t0 = time.time()
    gpu = Gpu()
    import torch
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cupy {gpu.cupy.__version__ if gpu.cupy else 'absent'}", flush=True)
    gpu.precompile()
    print(f"compiled here: {gpu.compiled_here} ({time.time() - t0:.0f} s)", flush=True)
    ck = correctness(gpu)
    print(f"correctness: {ck.passed} passed, {len(ck.failed)} failed "
          f"({time.time() - t0:.0f} s)", flush=True)
    with open(a.log, "w") as log:
        rows = timings(gpu, ck, t0 + a.budget_s, log,
                       set(a.shapes.split(",")) if a.shapes else None)
    print(f"\nvariants compiled on the GPU machine: {gpu.compiled_here}; "
          f"checks {ck.passed} passed, {len(ck.failed)} failed: {ck.failed[:10]}")
    print("\n| shape | dtype | copy us | fused us (config) | fused/copy | softmax us (same config) "
          "| loss-only us | bwd us "
          "| torch fwd+bwd us | compile fwd+bwd us | extra GB copy / fused / torch / compile |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (shape, dt, tc, tb, name, ts, tf, tbw, tt, tcomp, ec, ef, et, ecp) in rows:
        print(f"| {shape} | {dt} | {tc:.1f} | {tb:.1f} ({name}) | {tb / tc:.3f} | {us(ts)} | {tf:.1f} | "
              f"{tbw:.1f} | {tt:.1f} | {us(tcomp)} | {gb(ec)} / {gb(ef)} / {gb(et)} / {gb(ecp)} |")
    print(f"total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
