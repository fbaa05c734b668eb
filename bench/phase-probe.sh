#!/usr/bin/env bash
# bench/phase-probe.sh: where the forward kernel's time goes on the decode
# shapes, stage by stage (bench/phase_probe.cu says how). Two steps:
#
#   bench/phase-probe.sh prepare DIR [LIST]   here (needs build/, no GPU):
#       writes DIR/NAME.cu, the tuner's source of each variant of LIST
#       (default bench/phase-probe.list: SHAPE DTYPE CONFIG a line) with the
#       probe's hooks after each stage, and DIR/cases (NAME ROWS BLOCKS THREADS)
#   bench/phase-probe.sh run DIR OUT          on the GPU machine (carry DIR):
#       builds each with nvcc for sm_90 (as NVRTC does) and runs it; OUT/phase-probe.txt
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mode=${1:?usage: bench/phase-probe.sh prepare DIR [LIST] | run DIR OUT}
dir=${2:?usage: bench/phase-probe.sh prepare DIR [LIST] | run DIR OUT}

# The kernel body's stage calls and the cluster reduction's steps, each
# followed by its hook (the text is softmax_rows.cu's and
# softmax_rows_common.cu's; a hook that finds no line fails the step).
add_hooks() {
    python3 - "$1" <<'EOF'
import re, sys
path = sys.argv[1]
text = open(path).read()
edits = [
    (r"(\n(\s*)open_mailboxes\(box_max, box_sum, box_pairs\);)", r"\n\2PHASE_START();\1"),
    (r"const float max = reduce_max\(thread_max\(h\), partial_max, box_max\);",
     "const float probe_tmax = thread_max(h);\n    PHASE(1, probe_tmax);\n"
     "    const float max = reduce_max(probe_tmax, partial_max, box_max);"),
    (r"(float sum = exp_and_sum\(h, max, ks\);)", r"\1\n    PHASE(2, sum);"),
    (r"(reduce_row\(row_max, sum, [^;]*\);)", r"\1\n    PHASE(6, sum);"),
    (r"(\n(\s*)lanes_combine<\(TPR < 32 \? TPR : 32\)>\(m, s, ks\);)", r"\1\n\2PHASE(3, s);"),
    (r"(\n(\s*)lanes_combine<TPR / 32, true>\(m, s, ks\);)", r"\1\n\2PHASE(4, s);"),
    (r"(\n(\s*)pair_mailbox_exchange\(box, m, s\);)", r"\1\n\2PHASE(5, box.pair[0][0]);"),
    (r"(return forward_value\(h, it, k, o\); \}\);)", r"\1\n    PHASE_END(o.mul);"),
]
for pattern, repl in edits:
    text, n = re.subn(pattern, repl, text, count=1)
    if n != 1:
        sys.exit(f"{path}: no line for hook /{pattern}/")
open(path, "w").write(text)
EOF
}

case $mode in
prepare)
    list=${3:-bench/phase-probe.list}
    mkdir -p "$dir"
    ninja -C build bench/emit_source > /dev/null
    : > "$dir/cases"
    grep -v '^#' "$list" | while read -r shape dtype config; do
        [ -n "$shape" ] || continue
        name="$shape-$dtype-$(echo "$config" | tr '.=' '_-')"
        geometry=$(build/bench/emit_source "$shape" "$dtype" "$config" 2>&1 > "$dir/$name.cu") || {
            echo "$geometry" >&2
            exit 1
        }
        add_hooks "$dir/$name.cu"
        read -r _ blocks _ threads <<< "$geometry"
        echo "$name ${shape%%x*} $blocks $threads $dtype $config" >> "$dir/cases"
    done
    echo "prepared $(wc -l < "$dir/cases") variants in $dir"
    ;;
run)
    out=${3:?usage: bench/phase-probe.sh run DIR OUT}
    mkdir -p "$out"
    log="$out/phase-probe.txt"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$log"
    # Builds in parallel, runs one at a time.
    while read -r name _; do
        /usr/local/cuda/bin/nvcc -O3 -std=c++17 -arch=sm_90 -diag-suppress 128 -Ibench \
            -DPROBE_KERNEL="\"$root/$dir/$name.cu\"" -o "/tmp/phase-$name" bench/phase_probe.cu &
    done < "$dir/cases"
    wait
    while read -r name rows blocks threads dtype config; do
        echo "# $rows rows, $dtype, $config: $blocks blocks of $threads threads" | tee -a "$log"
        "/tmp/phase-$name" "$rows" "$blocks" "$threads" "$name" 2>&1 | tee -a "$log"
    done < "$dir/cases"
    ;;
*)
    echo "bench/phase-probe.sh: unknown step '$mode' (prepare or run)" >&2
    exit 2
    ;;
esac
