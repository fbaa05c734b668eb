#!/usr/bin/env python3
"""bench_torch.py: tuned.softmax against the alternatives a PyTorch user has
on the shape tables below.

    bench/bench_torch.py --out DIR [--state DIR] [--tuned-bin build/tuned]
        [--overhead-bin build/tests/bench_overhead] [--dtypes fp16,bf16,fp32]
        [--shapes 32x128,...] [--tune-time S] [--budget-s S] [--no-tune]

For each dtype and shape: tune the shape first (a child `tuned`, through
tuned.tune; a shape already stored is not tuned again), then time, each
with the L2 flushed before every repeat (every line set back to normal
eviction priority, then a memset of twice the L2), the GPU then kept busy
for 100 us (so no method's host time is counted), CUDA events around one
call, the median of 10-200 repeats, in 3 rounds that interleave the
methods (the result: the median of the rounds):

    copy       y.copy_(x): a device-to-device copy of the same bytes (the floor)
    tuned      tuned.softmax(x)
    torch      torch.softmax(x, -1)
    compile    torch.compile(lambda t: torch.softmax(t, -1)), one per shape
    triton     the Triton tutorial's kernel: one row per program, the whole
               row in registers (BLOCK = next power of two of cols)
    quack      QuACK's softmax (quack-kernels, hand-written CuTe DSL kernels);
               it refuses rows whose length is not a multiple of its vector
               width (16 bytes): reported as refused, never as a win
    liger      Liger Kernel's softmax (liger-kernel, Triton); refused above
               65,536 columns

On the decode set, copy, tuned and quack are timed a second time the same
way, each replayed from a CUDA graph that holds its one call (key
SHAPE|DTYPE|METHOD@graph): decode runs in graphs.

A method whose package is missing is reported as not installed. --shapes
takes shapes or the names of sets: mission (the MISSION.md table), decode
(1, 8 and 64 rows of 32768, 65536, 128256 and 262144 columns) and anchors
(the long-row shapes QuACK was measured on).

Every method's output is checked against torch.softmax in fp32 first; a
wrong one is reported, not timed. Then host overhead per call on a tiny
shape: the C tool bench_overhead (tuned_softmax against a raw cuLaunchKernel
of the same cubin, eager and while capturing a CUDA graph), and the same
from Python (tuned.softmax, the ctypes call alone, a raw ctypes
cuLaunchKernel, torch.softmax; eager and inside torch.cuda.graph).

Results accumulate in --state (results.json; the tuned store): a run that
stops at --budget-s (exit status 3) continues where it stopped when run
again. Every run writes results.md, results.json and softmax-gbps.png to
--out.
"""

import argparse
import ctypes
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

SHAPES = ["32x128", "256x1024", "1024x1024", "2048x2048", "4096x4096", "1024x50257",
          "4096x32000", "1x262144", "65536x128", "8192x128256"]
SHAPE_SETS = {
    "mission": SHAPES,
    "decode": [f"{r}x{c}" for r in (1, 8, 64) for c in (32768, 65536, 128256, 262144)],
    "anchors": ["16384x131072", "8192x131072", "32768x4096", "3000x7777"],
}
METHODS = ["copy", "tuned", "torch", "compile", "triton", "quack", "liger"]
# Decode runs inside CUDA graphs: on the decode set these methods are timed
# a second time, replayed from a graph that holds their one call.
GRAPH_METHODS = ["copy", "tuned", "quack"]
LABELS = {"copy": "D2D copy", "tuned": "tuned.softmax", "torch": "torch.softmax",
          "compile": "torch.compile", "triton": "Triton one-row", "quack": "QuACK",
          "liger": "Liger"}
TOL = {"fp16": 4e-3, "bf16": 3e-2, "fp32": 1e-4}
# Below its smallest normal (2^-14) fp16 has a fixed step of 2^-24, so a
# correctly rounded 3e-6 is off by up to 1% relatively: relative errors are
# taken against |ref| + this floor (the first run on the H100 failed torch
# itself, 2.9%, with a floor of 1e-6).
FLOOR = {"fp16": 2.0 ** -14, "bf16": 1e-6, "fp32": 1e-6}
# Rounds of timings per shape, every method once a round (see measure).
ROUNDS = 3


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="where results.md, results.json and the plot go")
    p.add_argument("--state", default=os.path.join(ROOT, "build", "api-bench-state"),
                   help="results so far and the tuned store (kept between runs)")
    p.add_argument("--tuned-bin", default=os.path.join(ROOT, "build", "tuned"))
    p.add_argument("--overhead-bin", default=os.path.join(ROOT, "build", "tests", "bench_overhead"))
    p.add_argument("--dtypes", default="fp16,bf16,fp32")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--tune-time", type=float, default=20.0, help="tuned --time per shape")
    p.add_argument("--budget-s", type=float, default=0, help="stop after this long (0: never)")
    p.add_argument("--no-tune", action="store_true", help="use the store as it is")
    p.add_argument("--redo", action="store_true", help="forget earlier results")
    return p.parse_args()


class Budget(Exception):
    pass


class Resumable:
    """A benchmark's results, kept in STATE/results.json so that a run
    stopped by its time budget (Budget) goes on where it stopped: res holds
    a dict per name in sections; save() writes it whole (atomically);
    check_budget() raises Budget once budget_s (0: none) has passed."""

    def __init__(self, state_dir, budget_s, sections, redo=False):
        os.makedirs(state_dir, exist_ok=True)
        self.path = os.path.join(state_dir, "results.json")
        self.budget_s = budget_s
        self.start = time.monotonic()
        self.res = {}
        if not redo and os.path.exists(self.path):
            with open(self.path) as f:
                self.res = json.load(f)
        for name in sections:
            self.res.setdefault(name, {})

    def save(self):
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.res, f, indent=1, sort_keys=True)
        os.replace(self.path + ".tmp", self.path)

    def check_budget(self):
        if self.budget_s and time.monotonic() - self.start > self.budget_s:
            raise Budget()


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    run = Resumable(args.state, args.budget_s, ("times", "tunes", "choices"), args.redo)
    res, save, check_budget = run.res, run.save, run.check_budget

    import torch

    import tuned

    store = os.path.join(args.state, "store")
    # tuned.softmax (the torch operator) calls through the module's handle,
    # opened from the environment on first use: this store, never tuning.
    os.environ["TUNED_DB"] = store
    os.environ["TUNED_POLICY"] = "never"
    os.environ.setdefault("TUNED_BIN", args.tuned_bin)
    h = tuned.default_handle()
    dev = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 0) or (64 << 20)
    flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
    res["env"] = {
        "gpu": props.name, "torch": torch.__version__, "cuda": torch.version.cuda,
        "triton": triton_version(), "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "l2_bytes": l2, "command": " ".join(sys.argv),
        "driver": nvidia_smi("driver_version"),
    }
    dtypes = [d for d in args.dtypes.split(",") if d]
    shapes = []
    for s in args.shapes.split(","):
        for shape in SHAPE_SETS.get(s, [s] if s else []):
            if shape not in shapes:
                shapes.append(shape)
    methods = [m for m in args.methods.split(",") if m]
    tdt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    complete = True
    try:
        for dtype in dtypes:
            for shape in shapes:
                rows, cols = map(int, shape.split("x"))
                key = f"{shape}|{dtype}"
                # 1. Tune (the child writes the store this handle reads).
                if not args.no_tune and key not in res["tunes"]:
                    check_budget()
                    t0 = time.monotonic()
                    try:
                        h.tune(rows, cols, dtype, time_s=args.tune_time)
                        res["tunes"][key] = {"s": round(time.monotonic() - t0, 2)}
                    except tuned.TunedError as exc:
                        res["tunes"][key] = {"s": round(time.monotonic() - t0, 2),
                                             "error": exc.message}
                    save()
                    print(f"tune {key}: {res['tunes'][key]}", flush=True)
                # A pair is timed whole, in one sitting: when a method is
                # missing or failed for a reason other than its own limits
                # (an earlier run stopped, or broke), every method is timed
                # again.
                if all(done(res["times"].get(f"{key}|{m}")) for m in methods):
                    continue
                todo = methods
                check_budget()
                x = torch.randn(rows, cols, device="cuda", dtype=tdt[dtype]) * 3
                ref = torch.softmax(x.float(), -1)
                fns = {}
                for m in todo:
                    check_budget()
                    fn, err = prepare(m, x, ref, dtype, h)
                    if err is not None:
                        res["times"][f"{key}|{m}"] = err
                        print(f"{key} {m}: {err}", flush=True)
                    else:
                        fns[m] = fn
                    if m == "tuned":
                        c = h.last_choice()
                        if c is not None:
                            res["choices"][key] = {"config": c.config, "source": c.source,
                                                   "stored_us": c.median_us}
                check_budget()
                for m, r in measure(fns, x, flush).items():
                    res["times"][f"{key}|{m}"] = r
                    print(f"{key} {m}: {r}", flush=True)
                if shape in SHAPE_SETS["decode"]:
                    check_budget()
                    graphs = {}
                    for m in GRAPH_METHODS:
                        if m in fns:
                            graphs[f"{m}@graph"], err = graph_replay(fns[m])
                            if err is not None:
                                del graphs[f"{m}@graph"]
                                res["times"][f"{key}|{m}@graph"] = err
                    for m, r in measure(graphs, x, flush).items():
                        res["times"][f"{key}|{m}"] = r
                        print(f"{key} {m}: {r}", flush=True)
                    del graphs
                save()
                del fns
                del x, ref
                torch.cuda.empty_cache()
        if "overhead" not in res:
            check_budget()
            res["overhead"] = overhead(args, h, flush)
            save()
    except Budget:
        complete = False
        print(f"budget of {args.budget_s:.0f} s used up: run the same command again to go on",
              flush=True)
    write_report(args, res, dtypes, shapes, methods)
    return 0 if complete else 3


def done(r):
    """Whether a method's recorded result stands: a time, or a refusal by
    the method's own limits."""
    return r is not None and ("us" in r or r.get("error", "").startswith("refused"))


def triton_version():
    try:
        import triton

        return triton.__version__
    except Exception:  # noqa: BLE001 - any import failure means "no Triton"
        return None


def nvidia_smi(field):
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


# ---- the methods ----

_triton_kernel = None
_compiled = {}


def triton_softmax(x, out=None):
    """Triton's one-row-per-program softmax of x, into out when given."""
    global _triton_kernel
    import torch
    import triton
    import triton.language as tl

    if _triton_kernel is None:
        @triton.jit
        def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols,
                           BLOCK: tl.constexpr):
            row = tl.program_id(0)
            offs = tl.arange(0, BLOCK)
            mask = offs < n_cols
            v = tl.load(in_ptr + row * in_stride + offs, mask=mask,
                        other=-float("inf")).to(tl.float32)
            v = v - tl.max(v, axis=0)
            num = tl.exp(v)
            den = tl.sum(num, axis=0)
            tl.store(out_ptr + row * out_stride + offs, (num / den).to(out_ptr.dtype.element_ty),
                     mask=mask)

        _triton_kernel = softmax_kernel
    rows, cols = x.shape
    block = triton.next_power_of_2(cols)
    warps = 4 if block < 2048 else 8 if block < 4096 else 16 if block < 16384 else 32
    y = torch.empty_like(x) if out is None else out
    _triton_kernel[(rows,)](y, x, x.stride(0), y.stride(0), cols, BLOCK=block, num_warps=warps)
    return y


def method_fn(m, x, h):
    import torch

    import tuned

    if m == "copy":
        y = torch.empty_like(x)
        return lambda: y.copy_(x)
    if m == "tuned":
        return lambda: tuned.softmax(x)
    if m == "torch":
        return lambda: torch.softmax(x, -1)
    if m == "compile":
        fn = torch.compile(lambda t: torch.softmax(t, -1), dynamic=False)
        return lambda: fn(x)
    if m == "triton":
        return lambda: triton_softmax(x)
    if m == "quack":
        from quack.softmax import softmax_fwd

        return lambda: softmax_fwd(x)
    if m == "liger":
        from liger_kernel.ops.softmax import LigerSoftmaxFunction

        return lambda: LigerSoftmaxFunction.apply(x)
    raise ValueError(m)


def refusal(m, x):
    """Why method m does not take x by its own documented limits, or None."""
    cols = x.shape[-1]
    if m == "quack" and cols % (16 // x.element_size()) != 0:
        return f"refused: QuACK needs a multiple of {16 // x.element_size()} columns"
    if m == "liger" and cols > 65536:
        return "refused: Liger takes at most 65,536 columns"
    return None


_cycles_per_us = None


def gpu_cover(us):
    """Keep the GPU busy for about us microseconds (torch.cuda._sleep)."""
    global _cycles_per_us
    import torch

    if _cycles_per_us is None:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1000)
        a.record()
        torch.cuda._sleep(1_000_000)
        b.record()
        torch.cuda.synchronize()
        _cycles_per_us = 1e6 / max(a.elapsed_time(b) * 1e3, 1.0)
    torch.cuda._sleep(int(us * _cycles_per_us))


_cuda_driver = None


def cuda_driver():
    """libcuda, loaded once (ctypes; every function returns a CUresult)."""
    global _cuda_driver
    if _cuda_driver is None:
        _cuda_driver = ctypes.CDLL("libcuda.so.1")
    return _cuda_driver


def check_cu(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what}: CUDA error {rc}")


def reset_l2_priority():
    """Every L2 line back to normal eviction priority, after the GPU is idle.

    A kernel that loads with an evict_last policy (Triton and PyTorch can, and
    tuned did until 2026-11-21) leaves its input in L2 through a memset of
    twice the L2: on the H200 the repeats of a 4 MB softmax then read their
    input from L2, 15% faster, and so did every method timed after it on the
    same input (bench/results/2026-11-21-h200-evict/)."""
    import torch

    torch.cuda.synchronize()
    check_cu(cuda_driver().cuCtxResetPersistingL2Cache(), "cuCtxResetPersistingL2Cache")


class HostGate:
    """Holds the current stream at a point until the host opens the gate
    (cuStreamWaitValue32 on a word of mapped host memory), as nvbench's
    blocking kernel does, so that everything the host enqueues before it
    opens (start event, call, end event) runs back to back on the GPU
    however long the host took to enqueue it.

    A call that waits for the GPU itself would wait for ever behind a closed
    gate: a watchdog thread opens any gate left closed for WATCHDOG_S and
    counts it in `forced`, and time_us then times that method ungated."""

    WATCHDOG_S = 1.0

    def __init__(self):
        import threading

        drv = cuda_driver()
        host = ctypes.c_void_p()
        check_cu(drv.cuMemHostAlloc(ctypes.byref(host), ctypes.c_size_t(4), 0x02),
                 "cuMemHostAlloc (device-mapped)")
        dev = ctypes.c_uint64()
        check_cu(drv.cuMemHostGetDevicePointer_v2(ctypes.byref(dev), host, 0),
                 "cuMemHostGetDevicePointer")
        self._word = ctypes.c_uint32.from_address(host.value)
        self._word.value = 0
        self._dev = dev.value
        self._wait = getattr(drv, "cuStreamWaitValue32_v2", None) or drv.cuStreamWaitValue32
        self._wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        self._value = 0
        self._closed_at = None
        self._lock = threading.Lock()
        self.forced = 0
        threading.Thread(target=self._watch, daemon=True).start()

    def close(self):
        """Enqueues, on the current stream, a wait for the gate's next value
        (CU_STREAM_WAIT_VALUE_GEQ)."""
        import torch

        with self._lock:
            self._value = (self._value + 1) & 0xFFFFFFFF
            self._closed_at = time.monotonic()
        check_cu(self._wait(torch.cuda.current_stream().cuda_stream, self._dev, self._value, 0),
                 "cuStreamWaitValue32")

    def open(self):
        with self._lock:
            self._word.value = self._value
            self._closed_at = None

    def _watch(self):
        while True:
            time.sleep(self.WATCHDOG_S / 4)
            with self._lock:
                if self._closed_at is not None and \
                        time.monotonic() - self._closed_at > self.WATCHDOG_S:
                    self._word.value = self._value
                    self._closed_at = None
                    self.forced += 1


_gate = None


def host_gate():
    global _gate
    if _gate is None:
        _gate = HostGate()
    return _gate


def time_us(fn, flush, reset_l2=True, gated=True):
    """Median microseconds of fn with the L2 flushed before each repeat
    (reset_l2: every line's eviction priority reset first, see
    reset_l2_priority; bench/probe_evict.py, in git history at 1148dcc,
    turned it off to show why).

    The GPU spins for 100 us between the flush and the start event (the
    pause after a flush that the evaluator makes too), then waits at a
    closed HostGate that the host opens only after it has enqueued the start
    event, the call and the end event: the events then time the GPU's work
    alone. Without the spin a call whose host side outlasts the flush
    (Python launchers take 5 to 25 us) had its host time counted: the H100
    probe of 2026-11-21 timed Triton's kernel at 9.1 us and tuned's at 3.9 us
    on 32x128, where ncu gives both 3.1 us. Without the gate a host stall
    of more than the spin did the same: a whole round of 200 repeats of a
    6 us backward timed at 134 us on the H100 on 2026-11-24, torch.compile's
    rounds too, each slot at a time. gated=False (or a call that waits for
    the GPU, found by the gate's watchdog) times with the spin alone."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    guess = max(time.perf_counter() - t0, 1e-6)
    reps = int(min(200, max(10, 0.4 / (guess + 50e-6))))
    gate = host_gate() if gated else None
    forced = gate.forced if gate else 0
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if reset_l2:
            reset_l2_priority()
        flush.zero_()
        gpu_cover(100)
        if gate:
            gate.close()
        starts[i].record()
        fn()
        ends[i].record()
        if gate:
            gate.open()
            if gate.forced != forced:
                break
    torch.cuda.synchronize()
    if gate and gate.forced != forced:
        print(f"time_us: {getattr(fn, '__name__', 'a call')} waited for the GPU behind the "
              "host gate; timed without it", file=sys.stderr, flush=True)
        return time_us(fn, flush, reset_l2, gated=False)
    times = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
    return statistics.median(times), reps


def prepare(m, x, ref, dtype, h):
    """(the method's call, None), or (None, {"error": why}) when it cannot run
    or its output is wrong: a wrong method is never timed."""
    import torch

    why = refusal(m, x)
    if why is not None:
        return None, {"error": why}
    try:
        fn = method_fn(m, x, h)
        out = fn()
        torch.cuda.synchronize()
        if m != "copy":
            err = ((out.float() - ref).abs() / (ref.abs() + FLOOR[dtype])).max().item()
            if not (err <= TOL[dtype]):
                return None, {"error": f"wrong result: max relative error {err:.3g}"}
        del out
        return fn, None
    except ImportError as exc:
        return None, {"error": f"not installed: {exc.name or exc}"}
    except Exception as exc:  # noqa: BLE001 - a method that cannot run is reported, not fatal
        text = str(exc).strip().splitlines()
        return None, {"error": f"{type(exc).__name__}: {text[0][:200] if text else ''}"}
    finally:
        torch.cuda.synchronize()


def graph_replay(fn):
    """(the replay of a CUDA graph holding one call of fn, None), or (None,
    {"error": why}) when the call cannot be captured."""
    import torch

    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capturing stream
            fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        g.replay()
        torch.cuda.synchronize()
        return g.replay, None
    except Exception as exc:  # noqa: BLE001 - a call that cannot be captured is reported
        text = str(exc).strip().splitlines()
        torch.cuda.synchronize()
        return None, {"error": f"graph: {type(exc).__name__}: {text[0][:200] if text else ''}"}


def measure(fns, x, flush, rounds=ROUNDS):
    """{method: result}: every method timed once per round, the rounds
    interleaved so that a drift of the GPU's clocks or memory reaches all
    methods alike; the result is the median of the rounds' medians."""
    import torch

    nbytes = 2 * x.numel() * x.element_size()
    times = {m: [] for m in fns}
    reps = {}
    for _ in range(rounds):
        for m, fn in fns.items():
            try:
                us, reps[m] = time_us(fn, flush)
                times[m].append(us)
            except Exception as exc:  # noqa: BLE001
                times[m] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            finally:
                torch.cuda.synchronize()
    out = {}
    for m, ts in times.items():
        if isinstance(ts, dict):
            out[m] = ts
            continue
        us = statistics.median(ts)
        out[m] = {"us": round(us, 3), "gbps": round(nbytes / (us * 1e3), 1), "reps": reps[m],
                  "rounds": [round(t, 3) for t in ts]}
    return out


# ---- host overhead ----

def host_us_per_call(fn, batch=200, reps=31):
    import torch

    per = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        per.append((time.perf_counter() - t0) / batch * 1e6)
    torch.cuda.synchronize()
    return round(statistics.median(per), 3)


def graph_us(fn, calls=100):
    """(host us per call while capturing, GPU us per kernel on replay)."""
    import torch

    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()  # warm on the capture stream
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        host = (time.perf_counter() - t0) / calls * 1e6
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    g.replay()
    b.record()
    torch.cuda.synchronize()
    return round(host, 3), round(a.elapsed_time(b) * 1e3 / calls, 3)


def overhead(args, h, flush):
    import torch

    import tuned
    from tuned import _lib

    out = {}
    if os.access(args.overhead_bin, os.X_OK):
        p = subprocess.run([args.overhead_bin, "--json", "--store",
                            os.path.join(args.state, "store")], capture_output=True, text=True)
        try:
            out["c"] = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            out["c"] = {"error": (p.stdout + p.stderr)[-400:]}
    rows, cols = 32, 128
    x = torch.randn(rows, cols, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    tuned.softmax(x)
    c = h.last_choice()
    lib = h._lib
    hp = h._h
    xp, yp = x.data_ptr(), y.data_ptr()

    def ctypes_call():
        lib.tuned_softmax(hp, xp, yp, rows, cols, cols, _lib.FP16,
                          torch.cuda.current_stream().cuda_stream or None)

    cuda = ctypes.CDLL("libcuda.so.1")
    launch = cuda.cuLaunchKernel
    launch.restype = ctypes.c_int
    launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p,
                                                                 ctypes.POINTER(ctypes.c_void_p),
                                                                 ctypes.c_void_p]
    vals = [ctypes.c_uint64(xp), ctypes.c_uint64(yp), ctypes.c_longlong(rows),
            ctypes.c_int(cols), ctypes.c_longlong(cols), ctypes.c_float(1.0)]
    params = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p)
                                             for v in vals])

    def raw_call():
        if c.cooperative:  # a grid split's workspace is tuned_softmax's own
            raise RuntimeError(f"{c.config} is a cooperative grid split: no raw launch")
        rc = launch(c.function, c.grid, 1, 1, c.block, 1, 1, c.smem,
                    torch.cuda.current_stream().cuda_stream or None, params, None)
        if rc != 0:
            raise RuntimeError(f"cuLaunchKernel: CUDA error {rc}")

    calls = {
        "tuned.softmax": lambda: tuned.softmax(x),
        "tuned_softmax via ctypes": ctypes_call,
        "cuLaunchKernel via ctypes (same kernel)": raw_call,
        "torch.softmax": lambda: torch.softmax(x, -1),
    }
    py = {"shape": f"{rows}x{cols}", "dtype": "fp16", "config": c.config, "source": c.source}
    for name, fn in calls.items():
        try:
            eager = host_us_per_call(fn)
            cap_host, cap_gpu = graph_us(fn)
            py[name] = {"eager_host_us": eager, "capture_host_us": cap_host,
                        "graph_gpu_us_per_kernel": cap_gpu}
        except Exception as exc:  # noqa: BLE001
            py[name] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    out["python"] = py
    return out


# ---- the report ----

def fmt(r, key="us"):
    if r is None:
        return "—"
    if "error" in r:
        return ("refused" if r["error"].startswith("refused") else
                "n/a" if r["error"].startswith("not installed") else "err")
    return f"{r[key]:.1f}" if key == "gbps" else f"{r[key]:.2f}"


def rounds_text(r):
    ts = r.get("rounds") or []
    return f", rounds {' / '.join(f'{t:.2f}' for t in ts)}" if len(ts) > 1 else ""


def write_report(args, res, dtypes, shapes, methods):
    env = res.get("env", {})
    lines = [
        "# tuned.softmax against the alternatives", "",
        f"GPU: {env.get('gpu')}, driver {env.get('driver')}; torch {env.get('torch')} "
        f"(CUDA {env.get('cuda')}), Triton {env.get('triton')}; {env.get('date')}.",
        "Median µs per call with the L2 flushed before each repeat (CUDA events around one "
        "call, 10-200 repeats, the median of 3 interleaved rounds; every L2 line's priority "
        "reset before the flush; the GPU spins 100 µs before each start event so that no "
        "method's host time is counted); GB/s = bytes read + written / time. "
        "Every shape tuned first "
        f"(`tuned --time {args.tune_time:g}`, skipped when already stored).",
        f"Command: `{env.get('command')}`", "",
    ]
    wins = total = 0
    losses, ties = [], []
    for dtype in dtypes:
        lines += [f"## {dtype}", "",
                  "| shape | " + " | ".join(f"{LABELS[m]} µs" for m in methods) +
                  " | tuned GB/s | tuned vs copy | config (source) | tune s | tuned fastest |",
                  "|---" * (len(methods) + 6) + "|"]
        for shape in shapes:
            key = f"{shape}|{dtype}"
            row = {m: res["times"].get(f"{key}|{m}") for m in methods}
            t = row.get("tuned")
            ch = res["choices"].get(key, {})
            tune = res["tunes"].get(key, {})
            others = [r["us"] for m, r in row.items() if m not in ("tuned", "copy") and r
                      and "us" in r]
            fastest = ""
            if t and "us" in t and others:
                total += 1
                ok = all(t["us"] < o for o in others)
                wins += ok
                tie = not ok and all(t["us"] <= o for o in others)
                fastest = "yes" if ok else "**tie**" if tie else "**no**"
                if not ok:
                    best = min((r["us"], m) for m, r in row.items()
                               if m not in ("tuned", "copy") and r and "us" in r)
                    (ties if tie else losses).append(
                        f"{shape} {dtype} ({t['us']:.2f} µs{rounds_text(t)} vs "
                        f"{LABELS[best[1]]} {best[0]:.2f}{rounds_text(row[best[1]])})")
            vs_copy = (f"{100 * row['copy']['us'] / t['us']:.0f}%"
                       if t and "us" in t and row.get("copy") and "us" in row["copy"] else "—")
            tune_s = (f"{tune['s']:.1f}" + (" (failed)" if "error" in tune else "")) if tune else "—"
            lines.append(f"| {shape} | " + " | ".join(fmt(row[m]) for m in methods) +
                         f" | {fmt(t, 'gbps')} | {vs_copy} | "
                         f"{ch.get('config', '—')} ({ch.get('source', '—')}) | {tune_s} | "
                         f"{fastest} |")
        lines.append("")
    lines += [f"**tuned.softmax fastest on {wins} of {total} measured (shape, dtype) pairs.**"]
    lines += graph_table(res, dtypes, shapes)
    lines += [""] + bars(res, dtypes, shapes)
    if ties:
        lines += ["", "As fast as another method (equal medians): " + "; ".join(ties) + "."]
    if losses:
        lines += ["", "Slower than another method: " + "; ".join(losses) + "."]
    errors = [f"{k}: {v['error']}" for k, v in sorted(res["times"].items()) if "error" in v]
    if errors:
        lines += ["", "Methods that could not run or were wrong:", ""] + [f"- {e}" for e in errors]
    ov = res.get("overhead")
    if ov:
        lines += ["", "## Host overhead per call", ""]
        c = ov.get("c", {})
        if "eager_tuned_us" in c:
            lines += [
                f"C (`bench_overhead`, {c['shape']} {c['dtype']}, {c['config']}, {c['source']}; "
                f"median of {c['reps']} batches of {c['batch']} launches):", "",
                "| | tuned_softmax µs | raw cuLaunchKernel µs | difference |", "|---|---|---|---|",
                f"| eager, host per launch | {c['eager_tuned_us']:.3f} | {c['eager_raw_us']:.3f} | "
                f"{c['eager_tuned_us'] - c['eager_raw_us']:+.3f} |",
                f"| capturing a CUDA graph, host per launch | {c['capture_tuned_us']:.3f} | "
                f"{c['capture_raw_us']:.3f} | {c['capture_tuned_us'] - c['capture_raw_us']:+.3f} |",
                f"| graph replay, GPU per kernel | {c['graph_kernel_tuned_us']:.3f} | "
                f"{c['graph_kernel_raw_us']:.3f} | "
                f"{c['graph_kernel_tuned_us'] - c['graph_kernel_raw_us']:+.3f} |", "",
                f"Within 1 µs of a raw launch: **{'yes' if c.get('within_1us') else 'no'}**.", ""]
        elif c:
            lines += [f"C tool failed: {c.get('error')}", ""]
        py = ov.get("python", {})
        if py:
            lines += [f"Python ({py.get('shape')} {py.get('dtype')}, {py.get('config')}):", "",
                      "| call | eager host µs | host µs while capturing | graph replay GPU µs/kernel |",
                      "|---|---|---|---|"]
            for name, r in py.items():
                if isinstance(r, dict):
                    if "error" in r:
                        lines.append(f"| {name} | {r['error']} | | |")
                    else:
                        lines.append(f"| {name} | {r['eager_host_us']:.2f} | "
                                     f"{r['capture_host_us']:.2f} | "
                                     f"{r['graph_gpu_us_per_kernel']:.2f} |")
            lines.append("")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    plot(args, res, dtypes, shapes, methods)
    print(text)


def graph_table(res, dtypes, shapes):
    """The decode shapes replayed from CUDA graphs, against the copy's bar
    (+1 µs, or 3% at 20 µs and over) and QuACK."""
    rows = []
    for dtype in dtypes:
        for shape in shapes:
            key = f"{shape}|{dtype}"
            r = {m: res["times"].get(f"{key}|{m}@graph") for m in GRAPH_METHODS}
            t, c, q = r["tuned"], r["copy"], r["quack"]
            if not t:
                continue
            timed = "us" in t
            met = over = quack = "—"
            if timed and c and "us" in c:
                bound = c["us"] * 1.03 if c["us"] >= 20 else c["us"] + 1.0
                met = "yes" if t["us"] <= bound else "**no**"
                over = f"{t['us'] - c['us']:+.2f}"
            if timed and q and "us" in q:
                quack = "yes" if t["us"] <= q["us"] else "**no**"
            rows.append(f"| {shape} | {dtype} | {fmt(c)} | {fmt(t)} | {fmt(q)} | {over} | "
                        f"{met} | {quack} |")
    if not rows:
        return []
    return ["", "## Replayed from a CUDA graph (decode shapes)", "",
            "Each method's one call captured in a CUDA graph, the replay timed as above.", "",
            "| shape | dtype | copy µs | tuned µs | QuACK µs | tuned − copy | within the "
            "copy's bar | no slower than QuACK |", "|---|---|---|---|---|---|---|---|"] + rows


def bars(res, dtypes, shapes):
    """The bars tuned is held to, each pair checked: no slower than QuACK
    where QuACK runs; within 3% of the copy where the copy takes 20 µs or
    more; within the copy + 1 µs below that."""
    quack_total = quack_ok = copy_total = copy_ok = 0
    misses = []
    for dtype in dtypes:
        for shape in shapes:
            key = f"{shape}|{dtype}"
            t = res["times"].get(f"{key}|tuned")
            c = res["times"].get(f"{key}|copy")
            q = res["times"].get(f"{key}|quack")
            if not t or "us" not in t:
                continue
            if q and "us" in q:
                quack_total += 1
                if t["us"] <= q["us"]:
                    quack_ok += 1
                else:
                    misses.append(f"{shape} {dtype}: tuned {t['us']:.2f} > QuACK {q['us']:.2f}")
            if c and "us" in c:
                copy_total += 1
                bound = c["us"] * 1.03 if c["us"] >= 20 else c["us"] + 1.0
                if t["us"] <= bound:
                    copy_ok += 1
                else:
                    misses.append(f"{shape} {dtype}: tuned {t['us']:.2f} over the copy's bar "
                                  f"{bound:.2f} (copy {c['us']:.2f})")
    lines = [f"No slower than QuACK: {quack_ok} of {quack_total} pairs where QuACK runs. "
             f"Within the copy's bar (3% at 20 µs and over, else +1 µs): {copy_ok} of "
             f"{copy_total}."]
    if misses:
        lines += ["", "Misses: " + "; ".join(misses) + "."]
    return lines


def plot(args, res, dtypes, shapes, methods):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot")
        return
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(14, 4.2 * len(dtypes)), squeeze=False)
    width = 0.8 / len(methods)
    for ax, dtype in zip(axes[:, 0], dtypes):
        for i, m in enumerate(methods):
            vals = []
            for shape in shapes:
                r = res["times"].get(f"{shape}|{dtype}|{m}")
                vals.append(r["gbps"] if r and "gbps" in r else 0)
            xs = [j + (i - (len(methods) - 1) / 2) * width for j in range(len(shapes))]
            ax.bar(xs, vals, width, label=LABELS[m])
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes, rotation=20)
        ax.set_ylabel("GB/s (read + write)")
        ax.set_title(f"softmax {dtype}, {res.get('env', {}).get('gpu', '')}")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, ncol=len(methods))
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "softmax-gbps.png"), dpi=110)


if __name__ == "__main__":
    sys.exit(main())
