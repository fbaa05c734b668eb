#!/usr/bin/env bash
# bench/stream-probe.sh OUT [fwd]: builds bench/stream_probe.cu with nvcc
# for sm_90 and runs it on the GPU machine: two-pass cluster kernels (a row
# part kept in shared memory, or read again from L2) against a copy, on the
# backward at 1024x50257 and 4096x32000 and the forward decode shapes.
# Prints the table; OUT/stream-probe.txt keeps it.
set -euo pipefail
out=${1:?usage: bench/stream-probe.sh OUT [fwd]}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/stream-probe.txt"
/usr/local/cuda/bin/nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/stream_probe bench/stream_probe.cu
/tmp/stream_probe "${2:-all}" | tee -a "$out/stream-probe.txt"
