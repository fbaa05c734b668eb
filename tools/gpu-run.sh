#!/usr/bin/env bash
# tools/gpu-run.sh - the one command for a GPU host without internet: installs
# the build dependencies from the Debian packages in .debs/ (fetched here with
# tools/fetch-debs.sh) into a prefix, builds, runs the GPU test suite, then the
# benchmark (tools/bench.sh), and prints a short table last. Results go to
# $OUT (the device tool's folder) when set, else bench/results/.
#
#   tools/gpu-run.sh [NAME [SHAPE...]]    (NAME defaults to "shapes")
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/bench/results}"
mkdir -p "$out"
# shellcheck source=tools/device-env.sh
source tools/device-env.sh || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv \
    >"$out/nvidia-smi.txt" 2>&1 || true
tools/setup.sh --no-deps >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
echo "== GPU test suite"
meson test -C build --suite gpu --print-errorlogs 2>&1 | tee "$out/gpu-tests.log" | tail -n 15
cp build/meson-logs/testlog.txt "$out/gpu-testlog.txt" 2>/dev/null || true
echo "== benchmark"
name="${1:-shapes}"
shift || true
tools/bench.sh "$out" "$name" "$@"
