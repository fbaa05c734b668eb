#!/usr/bin/env bash
# bench/ce-align-probe.sh - on the GPU machine: why the cross-entropy forward
# kernels (fused 1.198x its copy, loss only 1.193x half a copy) are slow at
# 8192x50257 bf16, where every row starts off a 16-byte boundary, while
# softmax forward (1.025x) and the cross-entropy backward (1.013x) are not.
#
# Run from the repository root, with $OUT set (the device tool sets it;
# nothing to carry, no build: python3 with torch, NVRTC from the toolkit):
#     bash bench/ce-align-probe.sh
# Dry check with no GPU (every variant compiled by NVRTC for sm_90, with
# ptxas's registers and spills; exit 1 if any source fails):
#     bash bench/ce-align-probe.sh --compile-only
#
# 1. bench/ce_align_probe.py time (at most 200 s; its opening comment says
#    what it runs): copy, CE fused, loss, loss with every label ignored,
#    backward and softmax forward at 8192 x 50257, 50256, 50264, 50264 with
#    the unaligned rows' code, and 50257 columns at row stride 50264, for
#    ten configs (the three tuned at 50257 and neighbours); each variant
#    checked against its float64 reference first, never timed if it fails.
# 2. If ncu is there: the loss and softmax kernels at 50257 and 50264, at the
#    loss kernel's best config at 50257, one launch each (the third; a
#    kernel-name filter), sections SpeedOfLight, MemoryWorkloadAnalysis,
#    WarpStateStats, LaunchStats, Occupancy and a few metrics; 150 s for all.
#    NCU_SHAPES (columns, default "50257 50264"), NCU_KERNELS (default
#    "loss softmax"; also fused, bwd) and NCU_CONFIG (default the loss
#    kernel's best at 50257) choose what ncu profiles.
# 3. The ncu summary, then the table (shape x kernel: us, ratio to floor).
# Writes to $OUT: probe.log (every variant: ptxas registers and spills,
# check, us, ratio), results.json, table.md, ncu-summary.txt,
# ncu-details.txt (ncu's details pages; no .ncu-rep files).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
if [[ "${1:-}" == --compile-only ]]; then
    exec python3 bench/ce_align_probe.py compile
fi
out=${OUT:?run on the GPU machine with OUT set, or with --compile-only}
state=$(mktemp -d /tmp/ce-align-probe.XXXXXX)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/probe.log" 2>&1
PYTHONUNBUFFERED=1 timeout 200 python3 bench/ce_align_probe.py time "$out" "$state" 2>&1 |
    tee -a "$out/probe.log"

ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
best=${NCU_CONFIG:-$(cat "$state/best-config" 2>/dev/null)}
summary=$out/ncu-summary.txt
stalls='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
metrics=dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
metrics+=,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
metrics+=,l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum,lts__t_sectors_srcunit_tex_op_read.sum,$stalls
# profile SHAPE KERNEL REPORT SECONDS: one launch (the third) of the variant
profile() {
    local entry=tuned_cross_entropy_rows
    [[ $2 == softmax ]] && entry=tuned_softmax_rows
    timeout "$4" "$ncu_bin" --target-processes all --cache-control all --clock-control none \
        -k "regex:^$entry\$" --launch-skip 2 --launch-count 1 --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
        --section Occupancy --metrics "$metrics" --page details \
        python3 bench/ce_align_probe.py one "$1" "$2" "$best" >"$3" 2>&1
}
if [[ -z "$ncu_bin" || -z "$best" ]]; then
    echo "ncu: not run (ncu: '${ncu_bin}', best loss config at 50257: '${best}')" >"$summary"
else
    echo "ncu ($ncu_bin) at $best" >"$summary"
    deadline=$((SECONDS + 150))
    for shape in ${NCU_SHAPES:-50257 50264}; do
        for kernel in ${NCU_KERNELS:-loss softmax}; do
            report=$state/ncu-$shape-$kernel.txt
            if ((deadline - SECONDS < 20)); then
                echo "== 8192x$shape $kernel: skipped, the ncu part's 150 s spent" >>"$summary"
                continue
            fi
            profile "$shape" "$kernel" "$report" $((deadline - SECONDS))
            rc=$?
            if ((rc != 0)) && [[ $metrics != "$stalls" ]] && grep -q "==ERROR==" "$report" &&
                ((deadline - SECONDS >= 20)); then
                # a metric this ncu refuses: the stall reasons alone (bench/ncu-configs.sh's)
                echo "== metrics list refused (rc $rc), stall reasons only from here" >>"$summary"
                metrics=$stalls
                profile "$shape" "$kernel" "$report" $((deadline - SECONDS))
                rc=$?
            fi
            { echo "==== 8192x$shape $kernel (rc $rc)"; cat "$report"; } >>"$out/ncu-details.txt"
            {
                echo "== 8192x$shape $kernel (ncu rc $rc)"
                grep -E "^\s+(Duration|Elapsed Cycles|DRAM Throughput|Memory Throughput|L1/TEX Hit Rate|L2 Hit Rate|Mem Busy|Max Bandwidth|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Waves Per SM|Cluster Size|Max Active Clusters|Warp Cycles Per Issued Instruction|Issue Slots Busy|Executed Ipc Active)\b" "$report"
                grep -E "^\s+(dram__bytes|smsp__inst_executed|l1tex__t_|lts__t_sectors)" "$report"
                grep -E "smsp__average_warps_issue_stalled_" "$report" | sort -k3 -g -r | head -n 6
                grep -E "==(ERROR|WARNING)==" "$report" | head -n 3
            } >>"$summary"
        done
    done
fi
echo
cat "$summary"
echo
cat "$out/table.md" 2>/dev/null || echo "no table: the timing step did not finish (probe.log)"
