#!/usr/bin/env bash
# bench/probe-space.sh OUT SET - on the GPU machine: does the variant space
# hold a kernel that the tuner's search misses? Times a sweep of the space's
# dimensions for a few shapes with build/bench/probe_settle at the
# evaluator's own 100 µs pause, the copy timed by the same evaluator. SET:
#   decode  four fp16 decode shapes where QuACK led
#           (2026-11-24-h100-decode-quack): clusters, grid splits, warps,
#           blocks per SM, register modes, tma staged rows
#   bwd     1024x50257 fp16 backward (softmax_bwd, log_softmax_bwd), whose
#           rows start off a vector boundary: warps, clusters, blocks per
#           SM, register modes, load hints
# Writes OUT/SET-probe.txt and prints, per shape, the copy (and for a
# backward its floor, 1.5 copies) and the ten fastest variants (median of
# the 3 rounds' medians).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
out="${1:?usage: bench/probe-space.sh OUT decode|bwd}"
set="${2:?usage: bench/probe-space.sh OUT decode|bwd}"
case "$set" in
decode | bwd) ;;
*) echo "probe-space: unknown set '$set' (decode, bwd)" >&2; exit 2 ;;
esac
mkdir -p "$out"
# shellcheck source=bench/probe-env.sh
source bench/probe-env.sh
probe=build/bench/probe_settle

# Register rows split over a cluster: W warps, C blocks, M blocks per SM, reg R.
clusters() {
    local w c m r
    for c in $1; do for w in $2; do for m in 1 2 4; do for r in $3; do
        ((w * 32 * m <= 2048)) || continue # the blocks must fit an SM
        echo "w$w.r1.c$c.m$m.v8.ld=def.st=def.reg=$r.red=fused"
    done; done; done; done
}
# Backward register rows: W warps, C blocks, M blocks per SM, reg R, load hint L.
bwd_rows() {
    local w c m r l
    for c in 1 2 4 8; do for w in 4 8 16 32; do for m in 1 2; do for r in f32 pk; do
        for l in def cs; do
            ((w * 32 * m <= 2048)) || continue
            echo "w$w.r1.c$c.m$m.v8.ld=$l.st=def.reg=$r"
        done
    done; done; done; done
}
# Register rows split over the grid: G blocks a row.
grids() {
    local w g m
    for g in $1; do for w in $2; do for m in 1 2; do
        ((w * 32 * m <= 2048)) || continue
        echo "w$w.r1.c1.m$m.v8.ld=def.st=def.reg=f32.red=fused.g$g"
    done; done; done
}
# Rows staged in shared memory by the bulk copy engine.
tmas() {
    local w c s
    for c in $1; do for w in 4 8 16 32; do for s in 1 2 4; do
        echo "tma.w$w.c$c.s$s.st=def"
    done; done; done
}

# shellcheck disable=SC2046 # the config lists are words
case "$set" in
decode)
    $probe 64x262144 fp16 100 $(clusters "8 16" "4 8 16" "pk ex f32") $(tmas "8 16")
    $probe 64x65536 fp16 100 $(clusters "2 4 8" "4 8 16" "pk ex") $(tmas "2 4 8") \
        $(grids "4 8" "8 16")
    $probe 8x128256 fp16 100 $(clusters "8 16" "4 8 16 32" "pk f32") $(grids "8 16 32" "8 16 32")
    $probe 1x262144 fp16 100 $(clusters "16" "8 16 32" "pk f32") $(grids "16 32 64" "4 8 16 32")
    ;;
bwd)
    $probe softmax_bwd:1024x50257 fp16 100 $(bwd_rows)
    $probe log_softmax_bwd:1024x50257 fp16 100 $(bwd_rows)
    ;;
esac >"$out/$set-probe.txt" 2>&1
status=$?
# Per shape: the copy, then the ten fastest variants by the median of rounds.
python3 - "$out/$set-probe.txt" <<'PY'
import re, statistics, sys
shape, copy, times, bad = None, None, {}, 0
def flush():
    if shape is None:
        return
    best = sorted((statistics.median(v), k) for k, v in times.items() if len(v) == 3)
    floor, what = (1.5 * copy, "floor") if "_bwd" in shape else (copy, "copy")
    print(f"{shape}  copy {copy:.2f} µs, {what} {floor:.2f}; {len(best)} variants timed, "
          f"{bad} refused or failed")
    for t, k in best[:10]:
        print(f"  {t:8.2f}  {t / floor:5.3f}x {what}  {k}")
for line in open(sys.argv[1]):
    if line.startswith("# "):
        flush()
        shape, copy, times, bad = line[2:].split(";")[0], None, {}, 0
    elif "copy (at open)" in line:
        copy = float(line.split()[-1])
    else:
        m = re.match(r"\S+\s+(\S+)\s+([0-9.]+) \(round", line)
        if m:
            times.setdefault(m.group(1), []).append(float(m.group(2)))
        elif line[:1].isdigit() and "round" not in line:
            bad += 1
flush()
PY
exit $status
