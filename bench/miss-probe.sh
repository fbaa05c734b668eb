#!/usr/bin/env bash
# bench/miss-probe.sh OUT [LIST] - on the GPU machine: where the H200's
# table misses its bar. LIST (default bench/miss-probe.list) has lines
# "SHAPE DTYPE CONFIG..." (SHAPE as probe_settle takes it); each line's
# configs are timed by build/bench/probe_settle (each checked first; 3
# interleaved rounds at the evaluator's pause, with its copy), twice, so
# that a shape's rows on a vector boundary can be set beside the same
# variants on rows off it. Then Nsight Compute on the lines marked "ncu"
# after the dtype (bench/ncu-configs.sh: DRAM throughput, occupancy, warp
# stalls). Writes OUT/miss-probe.txt, OUT/ncu-configs.txt and one report a
# profiled variant.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
out="${1:?usage: bench/miss-probe.sh OUT [LIST]}"
list="${2:-bench/miss-probe.list}"
mkdir -p "$out"
# shellcheck source=bench/probe-env.sh
source bench/probe-env.sh >/dev/null
while read -r shape dtype configs; do
    configs=${configs#ncu }
    for round in 1 2; do
        echo "== $round $shape $dtype"
        # shellcheck disable=SC2086 # configs are words
        build/bench/probe_settle "$shape" "$dtype" 100 $configs 2>&1
    done
done < <(list_lines "$list") >"$out/miss-probe.txt"
while read -r shape dtype mark configs; do
    [[ "$mark" == ncu ]] || continue
    # shellcheck disable=SC2086 # configs are words
    bash bench/ncu-configs.sh "$out" "$shape" "$dtype" ${configs%% *} >/dev/null 2>&1
done <"$list"
grep -E "^==|copy|^[0-9]" "$out/miss-probe.txt" | tail -n 80
grep -E "^==|Duration|DRAM Throughput|stalled" "$out/ncu-configs.txt" 2>/dev/null | head -n 60
