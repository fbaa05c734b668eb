#!/usr/bin/env bash
# tools/bench.sh - tunes shapes on GPU 0 from an empty store, in fp16, bf16
# and fp32, and prints a table (shape, dtype, winner, µs, GB/s, copy µs, % of
# copy, variants, wall time), each winner read back by `tuned get` in a second
# process. Needs a built build/tuned and a GPU.
#
#   tools/bench.sh OUTDIR NAME [SHAPE|SET...]
# Writes OUTDIR/NAME.md (the table), OUTDIR/NAME.log and OUTDIR/NAME.jsonl
# (the store's export, when `tuned export` exists) and OUTDIR/traces/ (every
# variant each tune measured). A SET is a name for shapes: `mission` (the
# mission table plus 32x128256, the default) or `decode` (rows 1, 8 and 64
# by columns 32768, 65536, 128256 and 262144).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/bench/results}"
name="${2:-bench}"
shift 2 || shift $#
mission=(32x128 256x1024 1024x1024 2048x2048 4096x4096 1024x50257 4096x32000 1x262144
    65536x128 8192x128256 32x128256)
decode=()
for r in 1 8 64; do
    for c in 32768 65536 128256 262144; do decode+=("${r}x$c"); done
done
shapes=()
for a in "${@:-mission}"; do
    case "$a" in
    mission) shapes+=("${mission[@]}") ;;
    decode) shapes+=("${decode[@]}") ;;
    [0-9]*x[0-9]*) shapes+=("$a") ;;
    *) echo "bench: '$a' is neither a shape (RxC) nor a set (mission, decode)" >&2; exit 2 ;;
    esac
done
tuned="$root/build/tuned"
[[ -x "$tuned" ]] || { echo "bench: $tuned is not built (run tools/setup.sh)" >&2; exit 1; }
mkdir -p "$out/traces"
db="$(mktemp -d)/store"
log="$out/$name.log"
table="$out/$name.md"
: >"$log"
device="$("$tuned" devices | head -n 1)"
{
    echo "# $name: tuned softmax vs a device-to-device copy"
    echo
    echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "- device: $device"
    echo "- command: tools/bench.sh OUT $name ${shapes[*]} (tuned --shape S --dtype D, fresh store, then tuned get)"
    echo "- timing: median of CUDA-event times, L2 flushed (memset of 2x L2, then a 100 µs pause) before every launch, each repeat run alone"
    echo
    echo "| shape | dtype | winner | µs | GB/s | copy µs | % of copy | variants | tune s |"
    echo "|---|---|---|---|---|---|---|---|---|"
} >"$table"
for shape in "${shapes[@]}"; do
    for dtype in fp16 bf16 fp32; do
        echo "== tuned --shape $shape --dtype $dtype" | tee -a "$log" >&2
        t0=$(date +%s.%N)
        if ! "$tuned" --shape "$shape" --dtype "$dtype" --db "$db" \
            --trace "$out/traces/$shape-$dtype.tsv" >>"$log" 2>&1; then
            echo "| $shape | $dtype | FAILED (see $name.log) | | | | | | |" >>"$table"
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
if "$tuned" export --db "$db" >"$out/$name.jsonl" 2>/dev/null; then :; else rm -f "$out/$name.jsonl"; fi
cat "$table"
