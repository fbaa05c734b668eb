#!/usr/bin/env bash
# bench/api-bench.sh [OUT]: issue 6 on a GPU host, in one command.
#
#   1. builds (tools/setup.sh; on the GPU host without internet the build
#      dependencies come from .debs/ through tools/device-env.sh),
#   2. runs the embedding API's GPU tests: api-gpu (C API), example-run (the
#      installed example), python-gpu (tuned.softmax against torch.softmax,
#      when torch is there), api-overhead (bench_overhead's 1 us check),
#   3. imports cache/pretuned/*.jsonl into its store, then runs
#      bench/bench_torch.py: tune (shapes not stored) + time tuned.softmax, torch.softmax,
#      torch.compile, Triton and a D2D copy on the mission table shapes in fp16,
#      bf16 and fp32, then host overhead per call (C and Python).
#
# BENCH_SHAPES (shapes or sets: mission, anchors, decode) picks the shapes;
# the default is the mission table.
#
# Results go to OUT (default $OUT, else bench/results/DATE-api): results.md,
# results.json, softmax-gbps.png, the test logs, nvidia-smi.txt.
#
# It stops itself after about 9 minutes (the device tool's 10-minute limit)
# and says so; run the same command again and it goes on where it stopped
# (tests that passed and shapes measured are kept under build/api-bench-state/,
# which survives between calls while the machine stays up).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
start=$SECONDS
out="${1:-${OUT:-$root/bench/results/$(date -u +%F)-api}}"
mkdir -p "$out"
state="$root/build/api-bench-state"
if [[ -d .debs ]]; then
    # shellcheck source=tools/device-env.sh
    source tools/device-env.sh || exit 1
fi
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv \
    >"$out/nvidia-smi.txt" 2>&1 || true
echo "== build"
tools/setup.sh --no-deps >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
mkdir -p "$state"
# The shipped pre-tuned records (tuned on these GPUs by tools/pretune.sh):
# shapes they hold are not tuned again; records of other GPUs are kept apart.
build/tuned import cache/pretuned/*.jsonl --db "$state/store" >"$out/import.log" 2>&1 ||
    { cat "$out/import.log"; exit 1; }

echo "== GPU tests of the embedding API"
if [[ -f "$state/tests.ok" ]]; then
    echo "(passed in an earlier run: $(cat "$state/tests.ok"))"
    cp "$state/api-tests.log" "$out/" 2>/dev/null || true
else
    meson test -C build --print-errorlogs api-gpu example-run python-gpu api-overhead \
        >"$state/api-tests.log" 2>&1
    rc=$?
    cp "$state/api-tests.log" "$out/"
    grep -E '^ *[0-9]+/[0-9]+ ' "$state/api-tests.log" || tail -n 40 "$state/api-tests.log"
    cp build/meson-logs/testlog.txt "$out/api-testlog.txt" 2>/dev/null || true
    if [[ $rc -eq 0 ]]; then
        date -u +%FT%TZ >"$state/tests.ok"
    else
        echo "== some tests FAILED (exit $rc): see $out/api-testlog.txt; benchmarking anyway"
    fi
fi
build/tests/bench_overhead 2>&1 | tee "$out/overhead-c.txt"

echo "== benchmark"
left=$(( 540 - (SECONDS - start) ))
(( left < 60 )) && left=60
PYTHONPATH="$root/bindings/python${PYTHONPATH:+:$PYTHONPATH}" TUNED_LIBRARY="$root/build/libtuned.so.0" \
TUNED_BIN="$root/build/tuned" TUNED_POLICY=never \
    python3 bench/bench_torch.py --out "$out" --state "$state" --tuned-bin "$root/build/tuned" \
        --overhead-bin "$root/build/tests/bench_overhead" --budget-s "$left" \
        ${BENCH_SHAPES:+--shapes "$BENCH_SHAPES"} 2>&1 |
    tee "$out/bench.log" | grep -vE '^(tune|[0-9]+x[0-9]+\|)'
status=("${PIPESTATUS[@]}")
rc=${status[0]}
if [[ $rc -eq 3 ]]; then
    echo "== INCOMPLETE: run the same command again to continue (state in $state)"
elif [[ $rc -ne 0 ]]; then
    echo "== bench_torch.py failed (exit $rc); last lines of $out/bench.log:"
    tail -n 20 "$out/bench.log"
fi
exit "$rc"
