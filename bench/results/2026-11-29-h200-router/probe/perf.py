"""perf.py: where the forward's time goes (16384 x 128 fp32, softmax): variants
that change one thing (k, score, T_SEL, TPR) timed as bench.py does, and the
SASS of one variant (instruction mix of the no-bias path)."""
import os, subprocess, sys
import numpy as np, cupy as cp
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench
TPL = sys.argv[1]
OUT = os.environ.get("OUT", "/tmp")
rng = np.random.default_rng(3)
rows, E = 16384, 128
base = dict(dtype=2, cols=E, k=8, score=0, groups=1, tg=1, renorm=0, tpr=32, warps=4, vec=4, sel=1, ld=1)
variants = []
for tpr in (32, 16):
    for sel in (0, 1):
        for k in (1, 2, 8):
            for score in (0, 1):
                variants.append(dict(base, tpr=tpr, sel=sel, k=k, score=score))
x = [cp.asarray(rng.uniform(-8, 8, size=(rows, E)).astype(np.float32)) for _ in range(bench.NB)]
w = [cp.zeros(rows * 8, cp.float32) for _ in range(bench.NB)]
ids = [cp.zeros(rows * 8, cp.int32) for _ in range(bench.NB)]
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(16) as ex:
    built = list(ex.map(lambda ic: bench.build("p%d" % ic[0], bench.router_src(ic[1])), enumerate(variants)))
for c, (path, regs, spill) in zip(variants, built):
    m = cp.RawModule(path=path)
    f = m.get_function("tuned_router_topk")
    tr = c["warps"] * 32 // c["tpr"]
    grid = (rows + tr - 1) // tr
    t = bench.time_graph(lambda i: f((grid,), (c["warps"] * 32,), (x[i], np.uint64(0), w[i], ids[i], np.uint64(0), np.int64(rows), np.int32(E), np.int64(E), np.float32(1))))
    print("tpr %2d sel %d k %d score %d: %.2f us regs %s" % (c["tpr"], c["sel"], c["k"], c["score"], t, regs), flush=True)
for i, c in enumerate(variants):
    if c["tpr"] == 32 and c["k"] == 8 and c["score"] == 0:
        sass = subprocess.run(["cuobjdump", "-sass", built[i][0]], capture_output=True, text=True).stdout
        open(os.path.join(OUT, "sass_tpr32_sel%d.txt" % c["sel"]), "w").write(sass)
