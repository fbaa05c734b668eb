#!/usr/bin/env bash
# bench/ce-sass-hotspots.sh: where a cross-entropy forward variant's
# instructions go, SASS instruction by instruction, at two row widths
# (default 8192x50257, whose rows start off a vector boundary, and 50264,
# whose do not): ncu's source counters of one launch (the third) of
# bench/ce_align_probe.py's variant, exported to CSV (its source page, SASS),
# then bench/sass_hotspots.py's table of executed instructions by opcode and
# the two shapes' difference.
#
#   OUT=dir [HOT_SHAPES="50257 50264"] [HOT_KERNEL=fused]
#   [HOT_CONFIG=w8.r1.c4.m4.v8.ld=def.st=def.reg=pk.red=fused] bash bench/ce-sass-hotspots.sh
#
# Needs ncu (PATH, /usr/local/cuda/bin or /opt/nvidia/nsight-compute) and a GPU.
set -u
out=${OUT:?OUT: where the CSVs and the table go}
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
[[ -n "$ncu_bin" ]] || { echo "ce-sass-hotspots: no ncu"; exit 1; }
config=${HOT_CONFIG:-w8.r1.c4.m4.v8.ld=def.st=def.reg=pk.red=fused}
kernel=${HOT_KERNEL:-fused}
entry=tuned_cross_entropy_rows
[[ $kernel == softmax ]] && entry=tuned_softmax_rows
tmp=$(mktemp -d /tmp/ce-hot.XXXXXX)
csvs=()
for shape in ${HOT_SHAPES:-50257 50264}; do
    timeout 150 "$ncu_bin" --target-processes all --cache-control all --clock-control none \
        -k "regex:^$entry\$" --launch-skip 2 --launch-count 1 --section SourceCounters \
        -o "$tmp/$shape" python3 bench/ce_align_probe.py one "$shape" "$kernel" "$config" \
        >"$out/ncu-$shape.log" 2>&1
    echo "ncu $shape: rc $?"
    "$ncu_bin" -i "$tmp/$shape.ncu-rep" --page source --print-source sass --csv \
        >"$out/sass-$shape.csv" 2>>"$out/ncu-$shape.log"
    echo "source page $shape: rc $?, $(wc -l <"$out/sass-$shape.csv") lines"
    csvs+=("$out/sass-$shape.csv")
done
python3 bench/sass_hotspots.py "${csvs[@]}" | tee "$out/hotspots.md"
rm -rf "$tmp"
