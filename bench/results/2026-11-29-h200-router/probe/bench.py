"""bench.py: times router_topk.cu variants (forward and backward) on the GPU.

Each variant runs 256 times in one CUDA graph, over 32 copies of the input
(more bytes than L2 holds, so every launch reads DRAM), timed with events;
the figure is the graph's time over 256. An empty kernel's figure (the
graph's per-node cost) and a copy kernel's moving the same bytes are printed
for comparison.

usage: python3 bench.py TEMPLATES_DIR
"""
import itertools, os, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import cupy as cp

TPL = sys.argv[1]
NVCC = os.environ.get("NVCC", "nvcc")
WORK = os.environ.get("WORK", "/tmp/rt_bench")
os.makedirs(WORK, exist_ok=True)
ESIZE = {0: 2, 1: 2, 2: 4}


def text(name):
    with open(os.path.join(TPL, name)) as f:
        return f.read()


def build(name, src):
    cu = os.path.join(WORK, name + ".cu")
    out = os.path.join(WORK, name + ".cubin")
    with open(cu, "w") as f:
        f.write(src)
    r = subprocess.run([NVCC, "-arch=sm_90", "-std=c++17", "-cubin", "-Xptxas", "-v", "-o", out, cu],
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr[:2000])
    regs = [l.split("Used ")[1].split(" registers")[0] for l in r.stderr.splitlines() if "Used " in l]
    spill = [l for l in r.stderr.splitlines() if "spill" in l and not " 0 bytes spill stores" in l]
    return out, regs, spill


def router_src(c):
    d = {"T_DTYPE": c["dtype"], "T_WARPS": c["warps"], "T_ROWS": c["warps"] * 32 // c["tpr"],
         "T_MIN_BLOCKS": c.get("minb", 1), "T_VEC": c["vec"], "T_COLS": c["cols"], "T_LD": c["ld"],
         "T_ST": c.get("st", 0), "T_SEL": c["sel"], "T_TOPK": c["k"], "T_SCORE": c["score"],
         "T_GROUPS": c["groups"], "T_TOPK_GROUP": c["tg"], "T_RENORM": c["renorm"], "T_IDS64": 0}
    return "".join("#define %s %s\n" % kv for kv in d.items()) + text("softmax_common.cu") + text("router_topk.cu")


AUX = r"""
extern "C" __global__ void empty_kernel() {}
extern "C" __global__ void copy_kernel(const float4 *a, float4 *b, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        b[i] = a[i];
}
"""

NB = 32
REPS = 256


def time_graph(launch):
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        for i in range(NB):
            launch(i)
        s.synchronize()
        s.begin_capture()
        for i in range(REPS):
            launch(i % NB)
        g = s.end_capture()
        g.launch(s)
        s.synchronize()
        best = 1e9
        for _ in range(5):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(s)
            g.launch(s)
            e1.record(s)
            e1.synchronize()
            best = min(best, cp.cuda.get_elapsed_time(e0, e1) * 1e3 / REPS)
    return best


def bench_shape(title, rows, base, variants, rng, bwd_variants=()):
    E, k, dtype = base["cols"], base["k"], base["dtype"]
    print("== %s: %d x %d %s, k %d" % (title, rows, E, {0: "fp16", 1: "bf16", 2: "fp32"}[dtype], k), flush=True)
    x32 = rng.uniform(-8, 8, size=(rows, E)).astype(np.float32)
    if dtype == 2:
        xb = x32
    elif dtype == 0:
        xb = x32.astype(np.float16).view(np.uint16)
    else:
        xb = (x32.view(np.uint32) >> 16).astype(np.uint16)
    ins = [cp.asarray(xb) for _ in range(NB)]
    bias = cp.asarray(rng.uniform(-0.05, 0.05, size=E).astype(np.float32)) if base.get("bias") else np.uint64(0)
    w = [cp.zeros(rows * k, dtype=cp.float32) for _ in range(NB)]
    ids = [cp.zeros(rows * k, dtype=cp.int32) for _ in range(NB)]
    dw = [cp.asarray(rng.uniform(-1, 1, size=rows * k).astype(np.float32)) for _ in range(NB)]
    dx = [cp.zeros_like(ins[0]) for _ in range(NB)]
    fwd_bytes = rows * E * ESIZE[dtype] + rows * k * 8
    bwd_bytes = 2 * rows * E * ESIZE[dtype] + rows * k * 8
    aux = cp.RawModule(code=AUX)
    empty = aux.get_function("empty_kernel")
    copyk = aux.get_function("copy_kernel")
    t_empty = time_graph(lambda i: empty((1,), (32,), ()))
    n4 = fwd_bytes // 2 // 16
    src = [cp.zeros(n4 * 4, dtype=cp.float32) for _ in range(NB)]
    dst = [cp.zeros(n4 * 4, dtype=cp.float32) for _ in range(NB)]
    t_copy = time_graph(lambda i: copyk((132 * 8,), (256,), (src[i], dst[i], np.int64(n4))))
    print("empty kernel %.2f us/launch; copy of the forward's bytes (%.2f MB each way... %.2f MB in all) %.2f us; "
          "bytes at 4.3 TB/s: fwd %.2f us, bwd %.2f us" % (t_empty, fwd_bytes / 2e6, fwd_bytes / 1e6, t_copy,
                                                          fwd_bytes / 4.3e6, bwd_bytes / 4.3e6), flush=True)
    cfgs = [dict(base, **v) for v in variants]
    with ThreadPoolExecutor(os.cpu_count()) as ex:
        futs = [ex.submit(build, "b%d_%s" % (i, title.replace(" ", "_")), router_src(c)) for i, c in enumerate(cfgs)]
        built = [f.result() for f in futs]
    results = []
    for c, (path, regs, spill) in zip(cfgs, built):
        m = cp.RawModule(path=path)
        fk = m.get_function("tuned_router_topk")
        bk = m.get_function("tuned_router_topk_bwd")
        trows = c["warps"] * 32 // c["tpr"]
        grid = (rows + trows - 1) // trows
        opt = np.float32(1.0)
        tf = time_graph(lambda i: fk((grid,), (c["warps"] * 32,), (ins[i], bias, w[i], ids[i], np.uint64(0),
                                                                    np.int64(rows), np.int32(E), np.int64(E), opt)))
        tb = time_graph(lambda i: bk((grid,), (c["warps"] * 32,), (ins[i], ids[i], dw[i], dx[i],
                                                                    np.int64(rows), np.int32(E), np.int64(E), opt)))
        label = "tpr %2d warps %d vec %d sel %d ld %d minb %d" % (c["tpr"], c["warps"], c["vec"], c["sel"], c["ld"], c.get("minb", 1))
        results.append((tf, tb, label, regs, spill))
        print("%-48s fwd %6.2f us  bwd %6.2f us  regs(bwd,fwd) %s%s" % (label, tf, tb, regs, " SPILL" if spill else ""), flush=True)
    best = min(results)
    print("best fwd: %.2f us (%s); floor %.2f us (bytes/4.3TB/s), copy kernel %.2f us, empty %.2f us" % (
        best[0], best[2], fwd_bytes / 4.3e6, t_copy, t_empty))
    bb = min(results, key=lambda r: r[1])
    print("best bwd: %.2f us (%s); floor %.2f us" % (bb[1], bb[2], bwd_bytes / 4.3e6), flush=True)


def main():
    rng = np.random.default_rng(7)
    variants = []
    for tpr, warps, vec, sel, ld in itertools.product([4, 8, 16, 32], [2, 4, 8], [4], [0, 1], [1, 2]):
        if warps * 32 >= tpr:
            variants.append(dict(tpr=tpr, warps=warps, vec=vec, sel=sel, ld=ld))
    variants += [dict(tpr=32, warps=4, vec=2, sel=0, ld=1), dict(tpr=8, warps=4, vec=2, sel=1, ld=1),
                 dict(tpr=16, warps=4, vec=2, sel=0, ld=1), dict(tpr=32, warps=1, vec=4, sel=0, ld=1),
                 dict(tpr=2, warps=4, vec=4, sel=1, ld=1)]
    if len(sys.argv) < 3 or sys.argv[2] != "groups":
        bench_shape("softmax top8", 16384, dict(dtype=2, cols=128, k=8, score=0, groups=1, tg=1, renorm=0), variants, rng)
    v2 = []
    for tpr, warps, sel in itertools.product([8, 16, 32], [2, 4], [0, 1]):
        v2.append(dict(tpr=tpr, warps=warps, vec=8, sel=sel, ld=1))
    bench_shape("sigmoid bias groups", 16384, dict(dtype=1, cols=256, k=8, score=1, groups=8, tg=4, renorm=1, bias=True), v2, rng)


if __name__ == "__main__":
    main()
