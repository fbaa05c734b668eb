#!/usr/bin/env bash
# test_probes_build.sh SOURCE_DIR: the standalone nvcc probes under bench/
# (floor_probe.cu, stream_probe.cu, stream_rows_probe.cu, which the GPU
# machine builds and runs through bench/floor-probe.sh,
# bench/stream-probe.sh and bench/stream-rows-probe.sh) still compile for
# sm_90, so that a change to what they share (bench/probe_common.cuh) is
# caught here and not on a lent GPU. Skipped (77) without nvcc.
set -euo pipefail
src="${1:?usage: test_probes_build.sh SOURCE_DIR}"
nvcc="${NVCC:-/usr/local/cuda/bin/nvcc}"
[[ -x "$nvcc" ]] || { echo "no nvcc at $nvcc: skipped"; exit 77; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for probe in floor_probe stream_probe stream_rows_probe; do
    "$nvcc" -O3 -std=c++17 -arch=sm_90 -o "$tmp/$probe" "$src/bench/$probe.cu"
    echo "$probe: compiled"
done
