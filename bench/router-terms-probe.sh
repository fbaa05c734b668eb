#!/usr/bin/env bash
# bench/router-terms-probe.sh: a renormalising router key's configs timed
# with the weights' terms in the rounds (the default) and in the lanes
# (terms=lanes), the same config otherwise, alternating over ROUNDS rounds
# (3): each a `tuned tune --try CONFIG --budget 1`, so each variant is
# checked against float64 before it is timed (median, L2 flushed). For the
# keys whose tunes are too short to take a step of the pattern search at
# many rows (a first generation of 40 variants takes 20 s there). Prints a
# table last: both times of each round, and the medians' difference.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
out="${OUT:-/tmp/probe}"
mkdir -p "$out"
# shellcheck source=bench/probe-env.sh
source bench/probe-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/device.txt" 2>&1
ds="k=8,score=sigmoid,groups=8,topk_group=4,renorm=1,bias=1"
kimi="k=8,score=sigmoid,renorm=1,bias=1"
pairs=(
"16384x384:$kimi w2.r2.c1.m1.v2.ld=def.st=def.reg=f32.sel=short"
"16384x384:$kimi w4.r4.c1.m2.v4.ld=cs.st=def.reg=f32.sel=short"
"16384x384:$kimi w4.r4.c1.m1.v4.ld=def.st=def.reg=f32.sel=short"
"65536x384:$kimi w2.r2.c1.m1.v2.ld=def.st=def.reg=f32.sel=short"
"4096x384:$kimi w2.r2.c1.m1.v2.ld=def.st=def.reg=f32.sel=short"
"1x384:$kimi w4.r4.c1.m1.v2.ld=cs.st=def.reg=f32.sel=short"
"16384x256:$ds w4.r8.c1.m2.v2.ld=nc.st=def.reg=f32.sel=net"
"16384x256:$ds w2.r4.c1.m1.v2.ld=nc.st=def.reg=f32.sel=short"
"1x256:$ds w2.r2.c1.m1.v1.ld=def.st=def.reg=f32.sel=net"
"16384x128:k=8,renorm=1 w2.r2.c1.m1.v4.ld=cs.st=def.reg=f32.sel=short"
"1x128:k=8,renorm=1 w8.r8.c1.m1.v1.ld=cs.st=def.reg=f32.sel=sort"
)
one() { # one SHAPE CONFIG -> median, or FAIL
    timeout 120 build/tuned tune --kernel router_topk --shape "$1" --dtype fp32 --try "$2" \
        --budget 1 --population 1 --skip-store --json --progress none \
        >"$out/last.json" 2>>"$out/probe.log"
    python3 - "$out/last.json" "$2" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    print(f"{r['median_us']:.2f}" if r.get("config") == sys.argv[2] else "OTHER")
except Exception:
    print("FAIL")
PY
}
med() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{a[NR]=$1} END {print NR ? a[int((NR+1)/2)] : "-"}'; }
printf '%-58s %-48s %-20s %-20s %7s\n' key config rounds lanes lanes-rounds >"$out/table.txt"
for pair in "${pairs[@]}"; do
    read -r shape cfg <<<"$pair"
    r="" l=""
    for round in $(seq "${ROUNDS:-3}"); do
        if ((round % 2)); then
            r+="$(one "$shape" "$cfg") "; l+="$(one "$shape" "$cfg.terms=lanes") "
        else
            l+="$(one "$shape" "$cfg.terms=lanes") "; r+="$(one "$shape" "$cfg") "
        fi
    done
    mr=$(med <<<"$r") ml=$(med <<<"$l")
    d=$(awk -v a="$mr" -v b="$ml" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%+.2f", b - a; else print "-"}')
    printf '%-58s %-48s %-20s %-20s %7s\n' "$shape" "$cfg" "$r" "$l" "$d" | tee -a "$out/table.txt"
done
echo
cat "$out/table.txt"
