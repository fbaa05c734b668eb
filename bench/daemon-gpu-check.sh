#!/usr/bin/env bash
# bench/daemon-gpu-check.sh: one device call that checks a change of the
# daemon, the client or the config text on a real GPU, without the kernels'
# own checks (gpu-correctness, 300 s, which only a change of the templates,
# the check or the evaluator needs). It builds (dependencies from .debs/
# through tools/device-env.sh), runs the GPU tests named in GPU_TESTS, then
# a cold tune of SHAPE (4096x32000) through a real daemon with the client's
# progress lines on, and prints a short table last. Results go to $OUT
# (the device tool's folder), else /tmp/daemon-gpu-check; testlog.txt there holds
# every test's own output.
#
#   bench/daemon-gpu-check.sh
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
out="${OUT:-/tmp/daemon-gpu-check}"
shape="${SHAPE:-4096x32000}"
tests="${GPU_TESTS:-gpu-fault cli-gpu daemon-gpu-fault daemon-two-gpus api-gpu example-run python-gpu python-torch-ops-gpu api-overhead}"
mkdir -p "$out"

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/nvidia-smi.txt" 2>&1
# shellcheck source=/dev/null
source tools/device-env.sh > "$out/setup.log" 2>&1
tools/setup.sh --no-deps >> "$out/setup.log" 2>&1 || { tail -20 "$out/setup.log"; exit 1; }

# shellcheck disable=SC2086
meson test -C build $tests --print-errorlogs > "$out/gpu-tests.log" 2>&1
tests_rc=$?
cp build/meson-logs/testlog.txt "$out/testlog.txt" # every test's own output, passed ones too

tmp="$(mktemp -d /tmp/tuned-daemon-check-XXXXXX)"
build/tuned serve --socket "$tmp/s.sock" --db "$tmp/db" > "$out/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do [[ -S "$tmp/s.sock" ]] && break; sleep 0.1; done
start=$(date +%s.%N)
build/tuned tune --socket "$tmp/s.sock" --shape "$shape" > "$out/daemon-tune.out" 2> "$out/daemon-tune.err"
tune_rc=$?
end=$(date +%s.%N)
build/tuned list --socket "$tmp/s.sock" > "$out/daemon-list.txt" 2>&1
kill -TERM "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
rm -rf "$tmp"

gen_dash=$(grep -c ': gen -  tried ' "$out/daemon-tune.err")
gen_num=$(grep -cE ': gen [0-9]+  tried ' "$out/daemon-tune.err")
echo "device: $(cat "$out/nvidia-smi.txt")"
echo "| check | result |"
echo "|---|---|"
echo "| GPU tests ($(echo "$tests" | wc -w) named) | rc $tests_rc: $(grep -E '^(Ok|Fail|Skipped):' "$out/gpu-tests.log" | tr -s ' ' | tr '\n' ' ') |"
echo "| daemon tune of $shape | rc $tune_rc in $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }') s; progress lines 'gen -' $gen_dash, 'gen N' $gen_num |"
echo "| its record | $(grep -m1 -E 'softmax' "$out/daemon-tune.out" "$out/daemon-list.txt" | head -1 | cut -c1-160) |"
