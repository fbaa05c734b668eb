#!/usr/bin/env bash
# bench/probe-settle.sh OUT - on the GPU machine: how long the evaluator
# should pause between its L2 flush and each timed launch. Builds, then runs
# build/bench/probe_settle over a few tiny shapes (where the flush's dirty
# lines matter) with pauses from 0 to 100 µs, and over 4096x32000 fp32 with
# and without the pause (where it should not matter). Each shape's configs
# are winners of earlier tunes on the H100 and H200. Writes OUT/settle.txt.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:?usage: bench/probe-settle.sh OUT}"
mkdir -p "$out"
# shellcheck source=bench/probe-env.sh
source bench/probe-env.sh
probe=build/bench/probe_settle
tiny=0,2,5,10,20,50,100
{
    $probe 32x128 fp16 $tiny \
        w16.r16.c1.m1.v2.ld=def.st=cs.reg=f32.red=fused \
        w16.r16.c1.m1.v4.ld=def.st=def.reg=f32 \
        w4.r2.c1.m1.v2.ld=cs.st=def.reg=f32 \
        w4.r4.c1.m1.v8.ld=def.st=def.reg=f32
    $probe 256x1024 bf16 $tiny \
        w4.r1.c1.m2.v8.ld=def.st=def.reg=f32 \
        w4.r1.c1.m2.v4.ld=def.st=def.reg=f32
    $probe 1024x1024 fp32 $tiny \
        w4.r1.c1.m4.v4.ld=def.st=cs.reg=f32 \
        w8.r1.c1.m4.v4.ld=def.st=def.reg=f32
    $probe 4096x32000 fp32 0,20 \
        w16.r1.c1.m1.v4.ld=def.st=def.reg=f32.red=fused \
        w32.r1.c1.m1.v4.ld=def.st=def.reg=f32.red=fused \
        w32.r1.c1.m1.v4.ld=def.st=def.reg=f32 \
        w16.r1.c1.m1.v2.ld=nc.st=def.reg=f32.red=fused
} >"$out/settle.txt" 2>&1
status=$?
tail -n 40 "$out/settle.txt"
exit $status
