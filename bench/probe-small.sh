#!/usr/bin/env bash
# bench/probe-small.sh [SRCDIR [DTYPES [SHAPES]]]: one GPU call that takes apart tuned.softmax's
# loss to Triton on the tiny shapes (issue 6). Builds, imports the
# pre-tuned records (cache/pretuned/*.jsonl) into a scratch store, then
#   0. tuned verify: the evaluator's own timing of the stored winners,
#   1. bench/probe_small.py: event timings (L2 flushed, median, 3 interleaved
#      rounds) of copy / tuned / tuned_ptr / triton / SRCDIR's sources,
#   2. the same calls under ncu (--cache-control all --clock-control none):
#      each kernel's own duration, instructions, registers, DRAM bytes,
#   3. Triton's cubins and PTX, for cuobjdump here.
# Writes probe.md, ncu-summary.md, verify.log and triton/ to $OUT (else bench/results/DATE-probe).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/bench/results/$(date -u +%F)-probe}"
srcdir="${1:-}"
dtypes="${2:-fp16,bf16}"
shapes="${3:-32x128,256x1024,1024x1024}"
mkdir -p "$out"
if [[ -d .debs ]]; then
    # shellcheck source=tools/device-env.sh
    source tools/device-env.sh >/dev/null 2>&1 || exit 1
fi
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
tools/setup.sh --no-deps >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
store="$(mktemp -d)/store"
build/tuned import cache/pretuned/*.jsonl --db "$store" >"$out/import.log" 2>&1 ||
    { cat "$out/import.log"; exit 1; }
export TRITON_CACHE_DIR="$(mktemp -d)"
export PYTHONPATH="$root/bindings/python" TUNED_LIBRARY="$root/build/libtuned.so.0"
probe=(python3 bench/probe_small.py "$store" --dtypes "$dtypes" --shapes "$shapes"
       ${srcdir:+--srcdir "$srcdir"})
for d in ${dtypes//,/ }; do
    for s in ${shapes//,/ }; do
        build/tuned verify --db "$store" --dtype "$d" --shape "$s" 2>&1 | tail -n 3
    done
done | tee "$out/verify.log"
{
    echo "- date: $(date -u +%F), device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
    echo "- command: \`bench/probe-small.sh ${srcdir:+SRCDIR} $dtypes $shapes\` (${probe[*]/#$store/STORE})"
    echo
    "${probe[@]}" 2>&1
} | tee "$out/probe.md"
ncu_bin="$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)"
if [[ -n "$ncu_bin" ]]; then
    "$ncu_bin" --cache-control all --clock-control none --nvtx --print-nvtx-rename kernel \
        --metrics gpu__time_duration.sum,sm__cycles_elapsed.max,smsp__inst_executed.sum,launch__registers_per_thread,launch__shared_mem_per_block_static,launch__grid_size,launch__block_size,dram__bytes_read.sum,dram__bytes_write.sum \
        --csv "${probe[@]}" --ncu >"$out/ncu.csv" 2>"$out/ncu.err" || tail -n 5 "$out/ncu.err"
    python3 bench/ncu_summary.py "$out/ncu.csv" >"$out/ncu-summary.md" && rm -f "$out/ncu.csv"
else
    echo "no ncu here" >"$out/ncu.err"
fi
mkdir -p "$out/triton"
find "$TRITON_CACHE_DIR" \( -name '*.cubin' -o -name '*.ptx' \) -exec cp {} "$out/triton/" \;
echo "== done: $out"
