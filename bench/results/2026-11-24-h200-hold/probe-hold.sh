#!/usr/bin/env bash
# bench/probe-hold.sh OUT - on the GPU machine: tma variants that hold a
# row in registers (.hold: the stage refilled as soon as the row lands)
# against the register-row winners on the long-row shapes.
#   1. build/bench/probe_settle (the evaluator's default timing) on
#      4096x32000 fp32/fp16, 1024x50257 fp32/fp16 and 8192x128256 fp16:
#      OUT/hold.txt;
#   2. tunes 4096x32000 fp32 (OUT/trace.tsv, OUT/tune.log), and
#      bench_torch.py times that record against Triton and the copy (OUT/api/).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:?usage: bench/probe-hold.sh OUT}"
mkdir -p "$out/api"
# shellcheck source=tools/device-env.sh
source tools/device-env.sh >/dev/null || exit 1
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
tools/setup.sh --no-deps >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
p=build/bench/probe_settle
{
    $p 4096x32000 fp32 100s \
        w16.r1.c1.m1.v4.ld=def.st=def.reg=f32.red=fused w32.r1.c1.m1.v4.ld=def.st=def.reg=f32.red=fused \
        tma.w16.c1.s1.st=def tma.w32.c1.s1.st=def.hold tma.w32.c1.s1.st=cs.hold \
        tma.w16.c1.s1.st=def.hold tma.w16.c2.s3.st=def.hold
    $p 4096x32000 fp16 100s \
        w16.r1.c1.m2.v8.ld=def.st=def.reg=pk.red=fused tma.w32.c1.s1.st=def.hold \
        tma.w32.c1.s2.st=def.hold tma.w32.c1.s3.st=def.hold tma.w16.c1.s2.st=def.hold
    $p 1024x50257 fp32 100s \
        w16.r1.c1.m1.v4.ld=def.st=def.reg=f32.red=fused tma.w16.c1.s1.st=def.hold \
        tma.w32.c2.s1.st=def.hold tma.w32.c2.s2.st=def.hold
    $p 1024x50257 fp16 100s \
        w8.r1.c1.m2.v8.ld=def.st=def.reg=ex tma.w32.c1.s1.st=def.hold tma.w32.c1.s2.st=def.hold \
        tma.w16.c1.s2.st=def.hold
    $p 8192x128256 fp16 100s \
        w32.r1.c2.m1.v8.ld=def.st=def.reg=ex.red=fused tma.w32.c2.s1.st=def.hold \
        tma.w16.c4.s2.st=def.hold
} >"$out/hold.txt" 2>&1
state="$(mktemp -d)"
build/tuned --shape 4096x32000 --dtype fp32 --db "$state/store" -q \
    --trace "$out/trace.tsv" >"$out/tune.log" 2>&1
PYTHONPATH="$root/bindings/python" TUNED_LIBRARY="$root/build/libtuned.so.0" \
    python3 bench/bench_torch.py --out "$out/api" --state "$state" \
    --tuned-bin "$root/build/tuned" --overhead-bin "$root/build/tests/bench_overhead" \
    --no-tune --shapes 4096x32000 --dtypes fp32 --methods copy,tuned,triton \
    >"$out/api/bench.log" 2>&1
rm -rf "$state"
grep -v "round [23]" "$out/hold.txt"
cat "$out/tune.log"
grep -A4 "^| shape" "$out/api/results.md" | head -6
