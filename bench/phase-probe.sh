#!/usr/bin/env bash
# bench/phase-probe.sh: where the forward kernel's time goes on the decode
# shapes, stage by stage (bench/phase_probe.cu says how). Steps:
#
#   bench/phase-probe.sh prepare DIR [LIST]   here (needs build/, no GPU):
#       writes DIR/NAME.cu, the tuner's source of each variant of LIST
#       (default bench/phase-probe.list: SHAPE DTYPE CONFIG a line) with the
#       probe's hooks after each stage, and DIR/cases (NAME ROWS BLOCKS
#       THREADS DTYPE CONFIG); EMIT_SOURCE names the emitter (default
#       build/bench/emit_source, built first with ninja)
#   bench/phase-probe.sh build DIR            builds each with nvcc for
#       sm_90 (as NVRTC does) into DIR/bin/ (no GPU needed)
#   bench/phase-probe.sh run DIR OUT          on the GPU machine (carry DIR):
#       build, then runs each; OUT/phase-probe.txt
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mode=${1:?usage: bench/phase-probe.sh prepare DIR [LIST] | build DIR | run DIR OUT}
dir=${2:?usage: bench/phase-probe.sh prepare DIR [LIST] | build DIR | run DIR OUT}

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

# Every variant of DIR/cases built with nvcc into DIR/bin/, in parallel;
# fails if any build fails.
build_all() {
    local d=$1 name pids=() failed=0
    mkdir -p "$d/bin"
    while read -r name _; do
        /usr/local/cuda/bin/nvcc -O3 -std=c++17 -arch=sm_90 -diag-suppress 128,177,550 \
            -I"$root/bench" -DPROBE_KERNEL="\"$(cd "$d" && pwd)/$name.cu\"" -o "$d/bin/$name" \
            "$root/bench/phase_probe.cu" &
        pids+=($!)
    done < "$d/cases"
    for pid in "${pids[@]}"; do
        wait "$pid" || failed=1
    done
    return $failed
}

case $mode in
prepare)
    list=${3:-bench/phase-probe.list}
    mkdir -p "$dir"
    emit=${EMIT_SOURCE:-}
    if [ -z "$emit" ]; then
        ninja -C build bench/emit_source > /dev/null
        emit=build/bench/emit_source
    fi
    : > "$dir/cases"
    grep -v '^#' "$list" | while read -r shape dtype config; do
        [ -n "$shape" ] || continue
        name="$shape-$dtype-$(echo "$config" | tr '.=' '_-')"
        geometry=$("$emit" "$shape" "$dtype" "$config" 2>&1 > "$dir/$name.cu") || {
            echo "$geometry" >&2
            exit 1
        }
        add_hooks "$dir/$name.cu"
        read -r _ blocks _ threads <<< "$geometry"
        echo "$name ${shape%%x*} $blocks $threads $dtype $config" >> "$dir/cases"
    done
    echo "prepared $(wc -l < "$dir/cases") variants in $dir"
    ;;
build)
    build_all "$dir"
    ;;
run)
    out=${3:?usage: bench/phase-probe.sh run DIR OUT}
    mkdir -p "$out"
    log="$out/phase-probe.txt"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$log"
    build_all "$dir"
    while read -r name rows blocks threads dtype config; do
        echo "# $rows rows, $dtype, $config: $blocks blocks of $threads threads" | tee -a "$log"
        "$dir/bin/$name" "$rows" "$blocks" "$threads" "$name" 2>&1 | tee -a "$log"
    done < "$dir/cases"
    ;;
*)
    echo "bench/phase-probe.sh: unknown step '$mode' (prepare, build or run)" >&2
    exit 2
    ;;
esac
