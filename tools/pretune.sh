#!/usr/bin/env bash
# tools/pretune.sh NAME [tuned options...]: on a GPU machine, tune the mission
# shape table in three dtypes into a fresh store, export it to
# cache/pretuned/NAME.jsonl, and check the export: it imports cleanly into
# another fresh store, `tuned get` serves it there as exact on this GPU, and
# `tuned verify` re-measures every winner. Extra options go to each tune
# (e.g. --time 20 --budget 120).
#
#   tools/pretune.sh h100        # on the H100 machine
#   tools/pretune.sh h200        # on the H200 machine
#
#   tools/pretune.sh h200 --from OUT/shapes.jsonl
#                                # the export of a run of tools/bench.sh on
#                                # this GPU (same tunes): checked and copied,
#                                # not tuned again
#
# Exit status 1 when any step failed; a shape with no valid variant for a
# dtype is reported and skipped.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="${1:?usage: tools/pretune.sh NAME [--from EXPORT.jsonl | tuned options...]}"
shift
from=""
if [[ "${1:-}" == "--from" ]]; then
    from="${2:?pretune: --from needs an export file}"
    [[ -s "$from" ]] || { echo "pretune: $from is missing or empty"; exit 1; }
    shift 2
fi
tuned="$ROOT/build/tuned"
[[ -x "$tuned" ]] || { echo "pretune: build first (tools/setup.sh)"; exit 1; }
"$tuned" devices || exit 1
work="$(mktemp -d)"
db="$work/store"
out="$ROOT/cache/pretuned/$name.jsonl"
shapes="32x128 256x1024 1024x1024 2048x2048 4096x4096 1024x50257 4096x32000 1x262144 65536x128 8192x128256 32x128256"
fails=0
[[ -n "$from" ]] || for dt in fp16 bf16 fp32; do
    for s in $shapes; do
        t0=$SECONDS
        if "$tuned" --shape "$s" --dtype "$dt" --db "$db" -q "$@" >"$work/tune.out" 2>"$work/tune.err"; then
            printf 'pretune: %-12s %s %-40s %8s us  %3ds\n' "$s" "$dt" \
                "$(awk '$1 == "config" { print $2 }' "$work/tune.out")" \
                "$(awk '$1 == "median_us" { print $2 }' "$work/tune.out")" $((SECONDS - t0))
        else
            echo "pretune: $s $dt: not tuned: $(tail -n 1 "$work/tune.err")"
            grep -q "no valid variant" "$work/tune.err" || fails=$((fails + 1))
        fi
    done
done
mkdir -p "$(dirname "$out")"
if [[ -n "$from" ]]; then
    cp "$from" "$out" || fails=$((fails + 1))
else
    "$tuned" export --db "$db" >"$out" || fails=$((fails + 1))
fi
echo "pretune: wrote $out ($(($(wc -l <"$out") - 1)) records)"
# The export as a user gets it: a fresh store, import, get exact, verify.
"$tuned" import "$out" --db "$work/fresh" || fails=$((fails + 1))
"$tuned" get --shape 4096x32000 --dtype fp16 --db "$work/fresh" >"$work/get.out" || fails=$((fails + 1))
grep -q '^source       exact' "$work/get.out" || { echo "pretune: get is not exact"; cat "$work/get.out"; fails=$((fails + 1)); }
"$tuned" verify --db "$work/fresh" || fails=$((fails + 1))
rm -rf "$work"
echo "pretune: $fails failure(s)"
[[ $fails -eq 0 ]]
