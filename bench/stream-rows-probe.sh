#!/usr/bin/env bash
# bench/stream-rows-probe.sh OUT [SHAPE...]: builds bench/stream_rows_probe.cu
# (a persistent streaming softmax prototype, fp16) with nvcc for sm_90 and
# runs it on the GPU machine on the given shapes (default: the many-row,
# long-row shapes where the register rows sit furthest under the copy).
# Prints the table; OUT/stream-rows-probe.txt keeps it.
set -euo pipefail
out=${1:?usage: bench/stream-rows-probe.sh OUT [SHAPE...]}
shift
[[ $# -gt 0 ]] || set -- 64x262144 32x262144 128x131072 64x128256 4096x32000 8192x128256
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/stream-rows-probe.txt"
/usr/local/cuda/bin/nvcc -O3 -std=c++17 -arch=sm_90 -use_fast_math -o /tmp/stream_rows_probe \
    bench/stream_rows_probe.cu
/tmp/stream_rows_probe "$@" | tee -a "$out/stream-rows-probe.txt"
