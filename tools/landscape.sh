#!/usr/bin/env bash
# tools/landscape.sh - records the complete landscape (every valid variant's
# status and median time) of shapes on GPU 0: `tuned --exhaustive --trace`.
# The tables feed the search-quality replay tests (tests/data/) and docs/decisions.md.
#
#   tools/landscape.sh OUTDIR SHAPE:DTYPE...     e.g. 1x262144:fp16
# Writes OUTDIR/landscape-SHAPE-DTYPE.tsv and prints the best five of each.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$1"
shift
tuned="$root/build/tuned"
mkdir -p "$out"
for item in "$@"; do
    shape="${item%%:*}"
    dtype="${item##*:}"
    tsv="$out/landscape-$shape-$dtype.tsv"
    db="$(mktemp -d)/store"
    t0=$(date +%s)
    "$tuned" --shape "$shape" --dtype "$dtype" --exhaustive --trace "$tsv" --db "$db" -q >/dev/null
    t1=$(date +%s)
    ok=$(awk -F'\t' 'NR > 1 && $2 == "ok"' "$tsv" | wc -l)
    all=$(($(wc -l <"$tsv") - 1))
    echo "== $shape $dtype: $all variants, $ok correct, $((t1 - t0)) s; fastest:"
    awk -F'\t' 'NR > 1 && $2 == "ok" { print $3 "\t" $1 }' "$tsv" | sort -g >"$tsv.sorted"
    sed -n 1,5p "$tsv.sorted"
    rm -f "$tsv.sorted"
done
