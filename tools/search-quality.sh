#!/usr/bin/env bash
# tools/search-quality.sh - how good and how fast the search is, per shape,
# all in one run on GPU 0:
#   1. the exhaustive landscape (every valid variant; its trace is kept as
#      OUTDIR/landscape-SHAPE-DTYPE.tsv for the replay tests),
#   2. a cold tune from an empty store (no compile cache, no history),
#   3. a --retune of the same store (compile cache warm),
# and prints a table: cold and retune wall time, variants, the winner's time
# against the exhaustive best. Two gaps: the tune's own measurement of its
# winner against the landscape's best (two measurement passes: on shapes of
# a few microseconds their run-to-run spread, 3-4%, is larger than any
# search error), and the winner's time in the landscape against the
# landscape's best (one pass: the search's error alone).
#
#   tools/search-quality.sh OUTDIR SHAPE:DTYPE...     e.g. 4096x32000:fp16
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$1"
shift
tuned="$root/build/tuned"
mkdir -p "$out"
table="$out/search-quality.md"
{
    echo "# Search quality: cold tune and --retune against the exhaustive best"
    echo
    echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "- device: $("$tuned" devices | head -n 1)"
    echo "- command: tools/search-quality.sh OUT $*"
    echo
    echo "| shape | dtype | space | exhaustive best µs | cold s | cold variants | winner | winner µs | gap | winner in landscape µs | landscape gap | retune s | retune winner µs |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} >"$table"
field() { awk -v k="$1" '$1 == k { print $2 }' "$2"; }
for item in "$@"; do
    shape="${item%%:*}"
    dtype="${item##*:}"
    tsv="$out/landscape-$shape-$dtype.tsv"
    tmp="$(mktemp -d)"
    "$tuned" --shape "$shape" --dtype "$dtype" --exhaustive --trace "$tsv" --db "$tmp/x" -q \
        >/dev/null 2>"$tmp/x.err" || { cat "$tmp/x.err"; continue; }
    space=$(($(wc -l <"$tsv") - 1))
    best=$(awk -F'\t' 'NR > 1 && $2 == "ok" && (b == "" || $3 + 0 < b + 0) { b = $3 } END { print b }' "$tsv")
    t0=$(date +%s.%N)
    "$tuned" --shape "$shape" --dtype "$dtype" --db "$tmp/y" -q >"$tmp/cold.out" 2>"$tmp/cold.err" ||
        { cat "$tmp/cold.err"; continue; }
    t1=$(date +%s.%N)
    "$tuned" --shape "$shape" --dtype "$dtype" --db "$tmp/y" --retune -q >"$tmp/re.out" 2>"$tmp/re.err" ||
        { cat "$tmp/re.err"; continue; }
    t2=$(date +%s.%N)
    cat "$tmp/cold.err" "$tmp/re.err" >>"$out/search-quality.log"
    win=$(field median_us "$tmp/cold.out")
    cfg=$(field config "$tmp/cold.out")
    inland=$(awk -F'\t' -v c="$cfg" '$1 == c && $2 == "ok" { print $3 }' "$tsv")
    printf '| %s | %s | %s | %s | %.1f | %s | %s | %s | %+.1f%% | %s | %s | %.1f | %s |\n' "$shape" \
        "$dtype" "$space" "$best" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
        "$(field evaluations "$tmp/cold.out")" "$cfg" "$win" \
        "$(awk -v w="$win" -v b="$best" 'BEGIN { print 100 * (w - b) / b }')" "${inland:--}" \
        "$(awk -v w="$inland" -v b="$best" 'BEGIN { if (w == "") print "-"; else printf "%+.1f%%", 100 * (w - b) / b }')" \
        "$(awk -v a="$t1" -v b="$t2" 'BEGIN { print b - a }')" "$(field median_us "$tmp/re.out")" \
        >>"$table"
    rm -rf "$tmp"
done
cat "$table"
