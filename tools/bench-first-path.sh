#!/usr/bin/env bash
# tools/bench-first-path.sh - tunes the first-path shapes on GPU 0 from an
# empty store and prints a table (shape, dtype, winner, µs, GB/s, % of copy,
# variants, wall time), each winner read back by `tuned get` in a second
# process. Needs a built build/tuned and a GPU.
#
#   tools/bench-first-path.sh [OUTDIR] [SHAPE...]
# Writes OUTDIR/first-path.md (the table) and OUTDIR/first-path.log.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/bench/results}"
shift || true
shapes=("$@")
[[ ${#shapes[@]} -gt 0 ]] || shapes=(4096x4096 1024x50257 4096x32000)
tuned="$root/build/tuned"
[[ -x "$tuned" ]] || { echo "bench: $tuned is not built (run tools/setup.sh)" >&2; exit 1; }
mkdir -p "$out"
db="$(mktemp -d)/store"
log="$out/first-path.log"
table="$out/first-path.md"
: >"$log"
device="$("$tuned" devices | head -n 1)"
{
    echo "# First path: tuned softmax vs a device-to-device copy"
    echo
    echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "- device: $device"
    echo "- command: tools/bench-first-path.sh (tuned --shape S --dtype D, fresh store, then tuned get)"
    echo "- timing: median of CUDA-event times, L2 flushed (memset of 2x L2) before every launch"
    echo
    echo "| shape | dtype | winner | µs | GB/s | copy µs | % of copy | variants | tune s |"
    echo "|---|---|---|---|---|---|---|---|---|"
} >"$table"
for shape in "${shapes[@]}"; do
    for dtype in fp16 bf16 fp32; do
        echo "== tuned --shape $shape --dtype $dtype" | tee -a "$log" >&2
        t0=$(date +%s.%N)
        if ! "$tuned" --shape "$shape" --dtype "$dtype" --db "$db" >>"$log" 2>&1; then
            echo "| $shape | $dtype | FAILED (see first-path.log) | | | | | | |" >>"$table"
            tail -n 3 "$log" >&2
            continue
        fi
        t1=$(date +%s.%N)
        rec="$("$tuned" get --shape "$shape" --dtype "$dtype" --db "$db")"
        field() { awk -v k="$1" '$1 == k { print $2 }' <<<"$rec"; }
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %.1f |\n' "$shape" "$dtype" \
            "$(field config)" "$(field median_us)" "$(field gbps)" "$(field copy_us)" \
            "$(field of_copy)" "$(field evaluations)" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" >>"$table"
    done
done
cat "$table"
