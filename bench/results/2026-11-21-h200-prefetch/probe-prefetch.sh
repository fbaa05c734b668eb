#!/usr/bin/env bash
# bench/probe-prefetch.sh OUT - on the GPU machine: does asking the L2 for
# the next wave's rows (ld=pf) make the register-row kernels faster on the
# long-row shapes where one block a SM holds a row?
#   1. build/bench/probe_settle (the evaluator's default timing: serial
#      repeats, 100 µs pause) on the stored winners of 4096x32000 fp32/fp16
#      and 1024x50257 fp32/fp16 and the same configs with ld=pf, plus the
#      32-warp fp32 variant (Triton's block shape): OUT/prefetch.txt;
#   2. tunes 4096x32000 fp32 with the space as it is (OUT/trace.tsv,
#      OUT/tune.log), and bench_torch.py times that record against Triton,
#      torch and the copy (OUT/api/).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:?usage: bench/probe-prefetch.sh OUT}"
mkdir -p "$out/api"
# shellcheck source=tools/device-env.sh
source tools/device-env.sh >/dev/null || exit 1
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
tools/setup.sh --no-deps >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
p=build/bench/probe_settle
{
    $p 4096x32000 fp32 100s \
        w16.r1.c1.m1.v4.ld=def.st=def.reg=f32.red=fused w16.r1.c1.m1.v4.ld=pf.st=def.reg=f32.red=fused \
        w32.r1.c1.m1.v4.ld=def.st=def.reg=f32.red=fused w32.r1.c1.m1.v4.ld=pf.st=def.reg=f32.red=fused \
        w32.r1.c1.m1.v4.ld=pf.st=cs.reg=f32.red=fused w32.r1.c1.m1.v4.ld=pf.st=def.reg=f32
    $p 4096x32000 fp16 100s \
        w16.r1.c1.m2.v8.ld=def.st=def.reg=pk.red=fused w16.r1.c1.m2.v8.ld=pf.st=def.reg=pk.red=fused \
        w16.r1.c1.m1.v8.ld=pf.st=def.reg=pk.red=fused
    $p 1024x50257 fp32 100s \
        w16.r1.c1.m1.v4.ld=def.st=def.reg=f32.red=fused w16.r1.c1.m1.v4.ld=pf.st=def.reg=f32.red=fused \
        w32.r1.c1.m1.v4.ld=pf.st=def.reg=f32.red=fused
    $p 1024x50257 fp16 100s \
        w8.r1.c1.m2.v8.ld=def.st=def.reg=ex w8.r1.c1.m2.v8.ld=pf.st=def.reg=ex \
        w16.r1.c1.m1.v8.ld=pf.st=def.reg=ex
} >"$out/prefetch.txt" 2>&1
state="$(mktemp -d)"
build/tuned --shape 4096x32000 --dtype fp32 --db "$state/store" -q \
    --trace "$out/trace.tsv" >"$out/tune.log" 2>&1
PYTHONPATH="$root/bindings/python" TUNED_LIBRARY="$root/build/libtuned.so.0" \
    python3 bench/bench_torch.py --out "$out/api" --state "$state" \
    --tuned-bin "$root/build/tuned" --overhead-bin "$root/build/tests/bench_overhead" \
    --no-tune --shapes 4096x32000 --dtypes fp32 --methods copy,tuned,triton >"$out/api/bench.log" 2>&1
rm -rf "$state"
cat "$out/prefetch.txt" "$out/tune.log"
grep -B2 -A6 "4096x32000" "$out/api/results.md" | head -20
