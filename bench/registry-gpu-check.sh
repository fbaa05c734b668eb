#!/usr/bin/env bash
# bench/registry-gpu-check.sh: one device call that checks the kernel
# registry on a real GPU. It builds (dependencies from .debs/ through
# tools/device-env.sh), runs the GPU test suite (gpu-correctness covers
# every kind of the registry, cross-entropy's three included), imports the
# shipped records of this GPU (cache/pretuned/NAME.jsonl, NAME h200 or h100
# from the GPU's name) into a fresh store with this build and counts how
# many `tuned list` calls exact, then tunes each cross-entropy kind cold on
# SHAPES, and prints a short table last. Results go to $OUT (the device
# tool's folder), else /tmp/registry-gpu-check.
#
#   bench/registry-gpu-check.sh
#   SUITE=0 bench/registry-gpu-check.sh     # without the GPU suite
#   KINDS=cross_entropy_bwd bench/...      # gpu-correctness over those kinds only
#   PYTHON=0: without the Python package's cross-entropy tests
#   SHAPES="8192x128256" DTYPES="bf16" TUNE_TIME=20 ...
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
out="${OUT:-/tmp/registry-gpu-check}"
shapes="${SHAPES:-8192x128256 4096x32000}"
dtypes="${DTYPES:-bf16}"
tune_time="${TUNE_TIME:-20}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/device.txt" 2>&1
gpu_line="$(head -1 "$out/device.txt")"
git log -1 --format='%H %s' >> "$out/device.txt" 2>/dev/null || true
# shellcheck source=/dev/null
source tools/device-env.sh > "$out/setup.log" 2>&1
tools/setup.sh --no-deps >> "$out/setup.log" 2>&1 || { tail -30 "$out/setup.log"; exit 1; }

suite="not run"
if [[ -n "${KINDS:-}" ]]; then
    # Only gpu-correctness, over these kinds (GPU_CORRECTNESS_KINDS).
    GPU_CORRECTNESS_KINDS="$KINDS" timeout 300 meson test -C build gpu-correctness \
        --print-errorlogs > "$out/gpu-suite.log" 2>&1
    suite="gpu-correctness over $KINDS: exit $? ($(grep -E '^(Ok|Fail|Skipped|Timeout): ' "$out/gpu-suite.log" | tr -s ' ' | tr '\n' ' '))"
elif [[ "${SUITE:-1}" != 0 ]]; then
    timeout "${SUITE_TIMEOUT:-420}" meson test -C build --suite gpu --print-errorlogs \
        > "$out/gpu-suite.log" 2>&1
    suite="exit $? ($(grep -E '^(Ok|Fail|Skipped|Timeout): ' "$out/gpu-suite.log" | tr -s ' ' | tr '\n' ' '))"
fi

# The shipped records of this GPU model, served by this build.
tmp="$(mktemp -d /tmp/tuned-registry-XXXXXX)"
# KEEP_DB=DIR: the store goes there and stays (for a benchmark after)
if [[ -n "${KEEP_DB:-}" ]]; then mkdir -p "$KEEP_DB"; ln -s "$KEEP_DB" "$tmp/db"; fi
name=h200
grep -qi h100 "$out/device.txt" && name=h100
build/tuned import "cache/pretuned/$name.jsonl" --db "$tmp/db" > "$out/import.log" 2>&1
build/tuned list --db "$tmp/db" > "$out/list.txt" 2>&1
shipped=$(($(wc -l < "$out/list.txt") - 1))
exact=$(awk 'NR > 1 && $0 ~ / exact / { n++ } END { print n + 0 }' "$out/list.txt")

# Each cross-entropy kind tuned cold, the record as JSON.
: > "$out/tunes.jsonl"
for shape in $shapes; do
    for dt in $dtypes; do
        for kind in ${TUNE_KINDS:-cross_entropy cross_entropy_loss cross_entropy_bwd}; do
            if timeout $((tune_time * 3 + 60)) build/tuned tune --kernel "$kind" --shape "$shape" \
                   --dtype "$dt" --time "$tune_time" --db "$tmp/db" --json \
                   > "$tmp/one.json" 2>> "$out/tunes.log"; then
                python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps(r))' \
                    "$tmp/one.json" >> "$out/tunes.jsonl"
            else
                echo "{\"kernel\": \"$kind\", \"shape\": \"$shape\", \"dtype\": \"$dt\", \"failed\": true}" \
                    >> "$out/tunes.jsonl"
            fi
        done
    done
done
build/tuned list --db "$tmp/db" >> "$out/tunes.log" 2>&1

# The Python package's cross-entropy on the GPU (its own summary line).
if [[ "${PYTHON:-1}" != 0 ]]; then
    timeout 240 meson test -C build python-cross-entropy-gpu python-cross-entropy --print-errorlogs \
        > "$out/python.log" 2>&1
    py="exit $? ($(grep -E '^(Ok|Fail|Skipped|Timeout): ' "$out/python.log" | tr -s ' ' | tr '\n' ' '))"
fi

echo
echo "registry GPU check on $gpu_line at $(sed -n 2p "$out/device.txt" | cut -c1-12)"
echo "GPU suite: $suite"
echo "Python cross-entropy: ${py:-not run}"
echo "shipped $name records imported and served exact by this build: $exact of $shipped"
python3 bench/ce_tunes_table.py "$out/tunes.jsonl"
rm -rf "$tmp"
