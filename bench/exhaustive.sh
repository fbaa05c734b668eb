#!/usr/bin/env bash
# bench/exhaustive.sh OUT SHAPE DTYPE... - on the GPU machine: the whole
# variant space of one shape, every valid variant checked against the
# float64 reference and timed (`tuned --exhaustive --skip-store`, the
# evaluator's policy), one dtype after another, each within 170 s. Writes
# OUT/trace-SHAPE-DTYPE.tsv (every variant) and OUT/exhaustive-DTYPE.txt
# (the tune's output, whose last lines give the evaluator's copy), and
# prints per dtype the eight fastest variants and the failures by status.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
out="${1:?usage: bench/exhaustive.sh OUT SHAPE DTYPE...}"
shape="${2:?usage: bench/exhaustive.sh OUT SHAPE DTYPE...}"
shift 2
mkdir -p "$out"
# shellcheck source=bench/probe-env.sh
source bench/probe-env.sh >/dev/null
for dtype in "$@"; do
    trace="$out/trace-$shape-$dtype.tsv"
    timeout 175 build/tuned --shape "$shape" --dtype "$dtype" --exhaustive --budget 20000 \
        --time 170 --skip-store --trace "$trace" >"$out/exhaustive-$dtype.txt" 2>&1
    echo "== $shape $dtype: exit $?, $(($(wc -l <"$trace") - 1)) variants"
    tail -n 3 "$out/exhaustive-$dtype.txt"
    awk -F'\t' 'NR > 1 && $2 == "ok"' "$trace" | sort -t$'\t' -k3,3g | head -n 8 | cut -f1,3,4
    awk -F'\t' 'NR > 1 && $2 != "ok" { print $2 }' "$trace" | sort | uniq -c
done
