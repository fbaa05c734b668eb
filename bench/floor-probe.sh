#!/usr/bin/env bash
# bench/floor-probe.sh OUT [tiers]: on the GPU machine, what the few-row, long-row
# (decode) shapes can reach at all. Builds bench/floor_probe.cu with nvcc
# for sm_90 and runs the bare skeletons of a one-launch softmax (load,
# exchange across the row's blocks, store; no arithmetic) against a copy of
# the same bytes; then times the tuner's own variants of 1x262144 fp16 (its
# cluster and grid-split winners, grid splits of 16 to 128 blocks) and of
# 8x262144 fp16 (clusters of 8 and 16 blocks a row) with
# build/bench/probe_settle at the evaluator's 100 µs pause, beside that
# evaluator's copy. OUT/floor-probe.txt keeps both tables.
# With `tiers`, only the skeletons of a row over one cluster against a row
# over K clusters (floor_probe.cu's `tiers` mode), into OUT/tiers-probe.txt.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out=${1:?usage: bench/floor-probe.sh OUT [tiers]}
mode=${2:-}
mkdir -p "$out"
log="$out/floor-probe.txt"
[[ $mode == tiers ]] && log="$out/tiers-probe.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$log"
/usr/local/cuda/bin/nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/floor_probe bench/floor_probe.cu
/tmp/floor_probe $mode | tee -a "$log"
[[ $mode == tiers ]] && exit 0

# shellcheck source=bench/probe-env.sh
source bench/probe-env.sh
# The tuner's variants of SHAPE fp16 (the rest of the arguments) with the
# evaluator's own 100 µs settle.
tuner_variants() {
    local shape=$1
    shift
    echo "# the tuner's variants, build/bench/probe_settle $shape fp16 100" | tee -a "$log"
    build/bench/probe_settle "$shape" fp16 100 "$@" 2>&1 | tee -a "$log"
}
one_row=(w16.r1.c16.m2.v8.ld=def.st=def.reg=f32.red=fused
    w8.r1.c16.m1.v8.ld=def.st=def.reg=f32.red=fused)
for g in 16 32 64 128; do
    for w in 4 8 16; do one_row+=("w$w.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g$g"); done
done
tuner_variants 1x262144 "${one_row[@]}"
eight_rows=()
for c in 8 16; do
    for w in 8 16 32; do eight_rows+=("w$w.r1.c$c.m1.v8.ld=def.st=def.reg=f32.red=fused"); done
done
tuner_variants 8x262144 "${eight_rows[@]}"
