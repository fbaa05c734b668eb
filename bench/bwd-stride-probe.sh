#!/usr/bin/env bash
# bench/bwd-stride-probe.sh - on the GPU machine (run by the device tool,
# which sets $OUT): the fp16 backward over 1024 rows whose length puts
# their starts 2, 4, 8 and 16 bytes apart from a 16-byte boundary
# (50257, 50258, 50260 columns; 50256 and 50264 on it), each with three
# variants timed by build/bench/probe_settle (checked first, 3 interleaved
# rounds, the evaluator's copy): 8-element vectors (c4 and c8 clusters)
# and 2-element vectors, which need only 4-byte rows to assume no partial
# head. Then the 16-byte rows again with PROBE_UNALIGNED_CODE=1: the code
# for rows off a boundary, on rows that are on one (backward and forward).
# Writes OUT/stride.txt; prints each variant's last round.
set -u
out=${OUT:?run on the GPU machine, with OUT set}
# shellcheck source=bench/probe-env.sh
source bench/probe-env.sh >/dev/null
for c in 50257 50258 50260 50256 50264; do
    build/bench/probe_settle "softmax_bwd:1024x$c" fp16 100 w8.r1.c4.m2.v8.ld=def.st=def.reg=pk \
        w4.r1.c8.m4.v2.ld=def.st=def.reg=f32 w8.r1.c8.m4.v8.ld=nc.st=cs.reg=pk
done >"$out/stride.txt" 2>&1
for c in 50256 50264; do
    echo "# PROBE_UNALIGNED_CODE=1"
    PROBE_UNALIGNED_CODE=1 build/bench/probe_settle "softmax_bwd:1024x$c" fp16 100 \
        w8.r1.c4.m2.v8.ld=def.st=def.reg=pk w4.r1.c8.m4.v2.ld=def.st=def.reg=f32 \
        w8.r1.c8.m4.v8.ld=nc.st=cs.reg=pk
done >>"$out/stride.txt" 2>&1
for code in 0 1; do
    echo "# PROBE_UNALIGNED_CODE=$code"
    PROBE_UNALIGNED_CODE=$code build/bench/probe_settle 1024x50264 fp16 100 \
        w8.r1.c4.m4.v8.ld=def.st=def.reg=ex.red=fused w4.r1.c2.m4.v8.ld=def.st=def.reg=ex
done >>"$out/stride.txt" 2>&1
grep -E "^#|copy|round 3" "$out/stride.txt" | cut -c1-100
