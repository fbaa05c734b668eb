#!/usr/bin/env bash
# bench/ncu-configs.sh OUT [KERNEL:]SHAPE DTYPE CONFIG... - on the GPU
# machine: one launch of each variant under Nsight Compute (speed of light,
# occupancy, launch statistics, warp states, memory and compute workload).
# The softmax kinds launch through build/bench/probe_settle, other kinds
# (router_topk:16384x128:k=8) through `tuned tune --skip-store --try
# CONFIG`, their launches matched by NCU_KERNEL_REGEX (default
# ^tuned_KERNEL$, the router's entry); both check the variant before
# timing it. Appends each variant's report to OUT/ncu-configs.txt and
# prints its key lines: duration, DRAM throughput, occupancy and the most
# clusters resident at once, issue slots busy, warp instructions executed,
# the six largest warp stall reasons (warps stalled per issued
# instruction).
# NCU_SOURCE=1 also samples warp stalls instruction by instruction (a second
# launch under ncu's SourceCounters at its shortest sampling interval), the
# source page exported as OUT/sass-SHAPE-DTYPE-CONFIG.csv and summarised by
# bench/sass_stalls.py: where a warp's time goes along its path.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
out="${1:?usage: bench/ncu-configs.sh OUT [KERNEL:]SHAPE DTYPE CONFIG...}"
shape="${2:?usage}"
dtype="${3:?usage}"
shift 3
mkdir -p "$out"
# shellcheck source=bench/probe-env.sh
source bench/probe-env.sh
ncu_bin="$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)"
[[ -n "$ncu_bin" ]] || { echo "ncu-configs: no ncu on this machine" >&2; exit 1; }
kernel=softmax spec="$shape"
if [[ "$shape" =~ ^[a-z_]+: ]]; then
    kernel="${shape%%:*}" spec="${shape#*:}"
fi
case "$kernel" in
softmax | softmax_bwd | log_softmax | log_softmax_bwd) probe=1 ;;
*) probe=0 ;;
esac
for config in "$@"; do
    if ((probe)); then
        match=(regex:tuned_softmax --launch-skip 2)
        launch=(build/bench/probe_settle "$shape" "$dtype" 100 "$config")
    else # the tune's check and warm-up launches skipped
        match=("regex:${NCU_KERNEL_REGEX:-^tuned_$kernel\$}" --launch-skip 6)
        launch=(build/tuned tune --kernel "$kernel" --shape "$spec" --dtype "$dtype" --skip-store
                --try "$config" --budget 1 --time 3)
    fi
    report="$out/ncu-$shape-$dtype-$config.txt"
    report="${report//[:=]/_}"
    "$ncu_bin" --cache-control all --clock-control none -k "${match[@]}" \
        --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --page details \
        --metrics smsp__inst_executed.sum,'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
        "${launch[@]}" >"$report" 2>&1
    {
        echo "== $shape $dtype $config"
        grep -E "^\s+(Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Waves Per SM|Block Limit Registers|Cluster Size|Warp Cycles Per Issued Instruction|Max Active Clusters|Issue Slots Busy|SM Busy|Executed Ipc Active|smsp__inst_executed.sum)\b" "$report"
        grep -E "smsp__average_warps_issue_stalled_" "$report" | sort -k3 -g -r | head -n 6
        grep -E "round 1" "$report" | head -n 1
    } | tee -a "$out/ncu-configs.txt"
    if [[ "${NCU_SOURCE:-0}" == 1 ]]; then
        rep=$(mktemp -d /tmp/ncu-source.XXXXXX)
        "$ncu_bin" --cache-control all --clock-control none -k "${match[@]}" --launch-count 1 \
            --section SourceCounters --section WarpStateStats --warp-sampling-interval 0 \
            -o "$rep/one" "${launch[@]}" >>"$report" 2>&1
        csv="${report%.txt}.csv"
        csv="${csv/\/ncu-/\/sass-}"
        "$ncu_bin" -i "$rep/one.ncu-rep" --page source --print-source sass --csv >"$csv" 2>>"$report"
        python3 bench/sass_stalls.py "$csv" | tee -a "$out/ncu-configs.txt"
        rm -rf "$rep"
    fi
done
