#!/usr/bin/env bash
# bench/probe-serial.sh OUT - on the GPU machine: the evaluator's batched
# repeats against serial ones (each repeat enqueued after the last one ran,
# as bench/bench_torch.py does), on the tiny shapes.
#   1. build/bench/probe_settle with "20" (the default: batched, 20 µs pause),
#      "20s" and "100s" (serial) on 256x1024 fp32, 1024x1024 fp16, 32x128 fp16:
#      OUT/serial.txt;
#   2. a second build, in a scratch copy of the tree, whose evaluator
#      defaults to serial repeats and a 100 µs pause, tunes 32x128, 256x1024
#      and 1024x1024 in three dtypes (OUT/traces/, OUT/tune.log), and
#      bench_torch.py times those records against the other methods
#      (OUT/api/).
# This is how bench/results/2026-11-21-h100-serial/ was made (there in three
# device calls; the script runs them in one). Since policy /3 serial repeats
# with a 100 µs pause are the evaluator's default: the patch of step 2 then
# finds nothing to change and the scratch build is the tree as it is.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:?usage: bench/probe-serial.sh OUT}"
mkdir -p "$out/traces" "$out/api"
# shellcheck source=tools/device-env.sh
source tools/device-env.sh >/dev/null || exit 1
tools/setup.sh --no-deps >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
p=build/bench/probe_settle
{
    $p 256x1024 fp32 20,20s,100s w8.r1.c1.m4.v1.ld=cs.st=def.reg=f32 \
        w8.r1.c1.m1.v2.ld=def.st=def.reg=f32 w4.r1.c1.m1.v4.ld=def.st=def.reg=f32 \
        w4.r1.c1.m2.v4.ld=def.st=def.reg=f32
    $p 1024x1024 fp16 20,20s,100s w2.r1.c1.m2.v8.ld=cs.st=def.reg=pk.red=fused \
        w4.r1.c1.m1.v4.ld=cs.st=def.reg=f32 w4.r1.c1.m1.v8.ld=def.st=def.reg=f32
    $p 32x128 fp16 20,20s,100s w2.r2.c1.m2.v4.ld=nc.st=def.reg=ex.red=fused \
        w4.r4.c1.m1.v4.ld=cs.st=cs.reg=ex.red=fused w4.r4.c1.m1.v4.ld=def.st=def.reg=f32 \
        w1.r1.c1.m1.v4.ld=def.st=def.reg=f32
} >"$out/serial.txt" 2>&1
scratch="$(mktemp -d)"
git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$scratch"
sed -i 's/o->settle_us = 20.0;/o->settle_us = 100.0;\n    o->serial = true;/' \
    "$scratch/src/tuner/evaluator.c"
grep -q "o->serial = true;" "$scratch/src/tuner/evaluator.c" ||
    { echo "patch failed: no serial default in src/tuner/evaluator.c"; exit 1; }
(cd "$scratch" && tools/setup.sh --no-deps >"$out/build-serial.log" 2>&1) ||
    { tail -n 30 "$out/build-serial.log"; exit 1; }
state="$(mktemp -d)"
for shape in 32x128 256x1024 1024x1024; do
    for dtype in fp16 bf16 fp32; do
        "$scratch/build/tuned" --shape "$shape" --dtype "$dtype" --db "$state/store" -q \
            --trace "$out/traces/trace-$shape-$dtype.tsv" >>"$out/tune.log" 2>&1
    done
done
PYTHONPATH="$root/bindings/python" TUNED_LIBRARY="$root/build/libtuned.so.0" \
    python3 bench/bench_torch.py --out "$out/api" --state "$state" \
    --tuned-bin "$root/build/tuned" --overhead-bin "$root/build/tests/bench_overhead" \
    --no-tune --shapes 32x128,256x1024,1024x1024 >"$out/api/bench.log" 2>&1
rm -rf "$scratch" "$state"
grep -A3 "fastest on" "$out/api/results.md"
