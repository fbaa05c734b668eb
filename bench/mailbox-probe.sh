#!/usr/bin/env bash
# bench/mailbox-probe.sh - on the GPU machine (run by the device tool, which
# sets $OUT): the cluster variants that lost to the copy and to QuACK, timed
# by build/bench/probe_settle (each variant checked before it is timed; 3
# interleaved rounds, the evaluator's copy), on 64x262144, 64x65536,
# 8x128256 fp16 and the 1024x50257 fp16 backward, then the GPU tests
# gpu-correctness and api-gpu. Writes OUT/mailbox-probe.txt and
# OUT/gpu-tests.log; prints each variant's first round.
set -u
out=${OUT:?run on the GPU machine, with OUT set}
# shellcheck source=bench/probe-env.sh
source bench/probe-env.sh >/dev/null
p=build/bench/probe_settle
{
$p 64x262144 fp16 100 w8.r1.c16.m1.v8.ld=def.st=def.reg=pk.red=fused w8.r1.c16.m4.v8.ld=def.st=def.reg=ex.red=fused w8.r1.c8.m2.v8.ld=def.st=def.reg=ex.red=fused w4.r1.c16.m4.v8.ld=def.st=def.reg=ex.red=fused w8.r1.c16.m2.v8.ld=def.st=def.reg=ex.red=fused
$p 64x65536 fp16 100 w8.r1.c4.m2.v8.ld=def.st=def.reg=ex.red=fused w8.r1.c1.m2.v8.ld=def.st=def.reg=f32.red=fused.g8 w8.r1.c8.m2.v8.ld=def.st=def.reg=ex.red=fused
$p 8x128256 fp16 100 w16.r1.c16.m1.v8.ld=def.st=def.reg=f32.red=fused w8.r1.c16.m2.v8.ld=def.st=def.reg=pk.red=fused w16.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g16
$p softmax_bwd:1024x50257 fp16 100 w8.r1.c4.m2.v8.ld=def.st=def.reg=pk w8.r1.c8.m2.v8.ld=def.st=def.reg=pk w4.r1.c8.m2.v8.ld=def.st=def.reg=pk w16.r1.c2.m1.v8.ld=def.st=def.reg=pk
} >"$out/mailbox-probe.txt" 2>&1
grep -E "copy|round 1|error|FAIL|wrong" "$out/mailbox-probe.txt" | cut -c1-120
timeout 400 meson test -C build gpu-correctness api-gpu 2>&1 | tail -5
cp build/meson-logs/testlog.txt "$out/gpu-tests.log"
