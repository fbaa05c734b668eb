#!/usr/bin/env bash
# bench/store-probe.sh OUT: on the GPU machine, how fast 16 to 128 SMs
# write a decode row's bytes, from registers or through the bulk copy
# engine (bench/store_probe.cu, built with nvcc for sm_90).
# OUT/store-probe.txt keeps the table.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out=${1:?usage: bench/store-probe.sh OUT}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/store-probe.txt"
/usr/local/cuda/bin/nvcc -O3 -std=c++17 -arch=sm_90 -I"$root/bench" -o /tmp/store_probe \
    "$root/bench/store_probe.cu"
/tmp/store_probe | tee -a "$out/store-probe.txt"
