#!/usr/bin/env bash
# effort.sh [SHAPES...]: what each --effort preset costs and finds, on a GPU.
# For every shape (default: four of the benchmark table) and dtype fp16, it
# tunes at quick, default and full, each into its own fresh store (so no
# history, cubin or neighbour is shared and every run starts cold), and
# prints one table row per run: the wall-clock seconds the whole tune took,
# the variants evaluated, the winner's median and its share of the copy's
# speed, and the winner relative to the full preset's (1.000 = as fast).
# The rows are also written as TSV to $TUNED_EFFORT_OUT (default
# bench/results/effort-DATE.tsv). Run it where tools/bench.sh runs:
#     source tools/device-env.sh && ninja -C build && tools/effort.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tuned="${TUNED:-build/tuned}"
[[ -x "$tuned" ]] || { echo "effort: $tuned not built (ninja -C build)" >&2; exit 1; }
"$tuned" devices >/dev/null 2>&1 || { echo "effort: no GPU here ($("$tuned" devices 2>&1 | tail -n 1))" >&2; exit 77; }
shapes=("$@")
[[ ${#shapes[@]} -gt 0 ]] || shapes=(4096x32000 1x262144 32x128256 8192x4096)
gpu="$("$tuned" devices --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["devices"][0]["name"])')"
out="${TUNED_EFFORT_OUT:-bench/results/effort-$(date -u +%Y%m%dT%H%M%SZ).tsv}"
mkdir -p "$(dirname "$out")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
printf 'gpu\tshape\tdtype\teffort\twall_s\tevaluations\tmedian_us\tof_copy\tvs_full\tconfig\n' >"$out"
printf '%-12s %-7s %8s %6s %10s %8s %8s  %s\n' SHAPE EFFORT WALL_S EVALS MEDIAN_US OF_COPY VS_FULL CONFIG
for shape in "${shapes[@]}"; do
    declare -A us=() line=()
    for effort in full quick default; do # full first: the others are compared with it
        db="$work/$shape-$effort"
        start=$(date +%s.%N)
        TUNED_LOG=warn "$tuned" tune --shape "$shape" --dtype fp16 --effort "$effort" --db "$db" --json \
            >"$work/out.json" 2>"$work/err" || { echo "effort: $shape $effort failed: $(tail -n 2 "$work/err")" >&2; continue; }
        end=$(date +%s.%N)
        read -r median copy evals config < <(python3 -c '
import json,sys
a = json.load(open(sys.argv[1])); r = a["record"]
print(r["median_us"], r["copy_us"], r["evaluations"], r["config"])' "$work/out.json")
        us[$effort]=$median
        line[$effort]="$(python3 -c "print(f'{$end - $start:.1f}')") $evals $median $(python3 -c "print(f'{100 * $copy / $median:.1f}')") $config"
    done
    for effort in quick default full; do
        [[ -n "${line[$effort]:-}" ]] || continue
        read -r wall evals median ofcopy config <<<"${line[$effort]}"
        vs="$(python3 -c "print(f'{${us[full]:-$median} / $median:.3f}')")"
        printf '%-12s %-7s %8s %6s %10s %7s%% %8s  %s\n' "$shape" "$effort" "$wall" "$evals" "$median" "$ofcopy" "$vs" "$config"
        printf '%s\t%s\tfp16\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$gpu" "$shape" "$effort" "$wall" "$evals" "$median" "$ofcopy" "$vs" "$config" >>"$out"
    done
    unset us line
done
echo "effort: rows in $out" >&2
