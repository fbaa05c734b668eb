#!/usr/bin/env bash
# bench/router-persist-probe.sh: one config a key timed with the launch's
# grid as it is (one row group's rows a block), capped at the blocks
# resident at once (TUNED_PROBE_PERSIST=4), at half of them (2), and at one
# block (0: every row through the loop, the check's stress); each variant
# checked against float64 first by the tune. Prints a table last.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
out="${OUT:-/tmp/probe}"
mkdir -p "$out"
source tools/device-env.sh >/dev/null 2>&1 || exit 1
tools/setup.sh --no-deps >/tmp/tuned-build.log 2>&1 || { tail -n 30 /tmp/tuned-build.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/device.txt" 2>&1
pairs=(
"16384x128:k=8 w2.r2.c1.m1.v4.ld=cs.st=def.reg=f32.sel=sort"
"16384x128:k=8 w16.r16.c1.m1.v4.ld=def.st=def.reg=f32.sel=short"
"16384x128:k=8 w1.r2.c1.m4.v2.ld=cs.st=def.reg=f32.sel=net"
"16384x128:k=8 w4.r16.c1.m1.v4.ld=def.st=def.reg=f32.sel=net"
"65536x128:k=8 w2.r2.c1.m1.v4.ld=cs.st=def.reg=f32.sel=sort"
"65536x128:k=8 w16.r16.c1.m1.v4.ld=def.st=def.reg=f32.sel=short"
"16384x60:k=4 w2.r8.c1.m4.v1.ld=def.st=def.reg=f32.sel=net"
"16384x160:k=6 w1.r4.c1.m1.v1.ld=cs.st=def.reg=f32.sel=net"
"16384x256:k=8,score=sigmoid,groups=8,topk_group=4,renorm=1,bias=1 w8.r16.c1.m1.v1.ld=cs.st=def.reg=f32.sel=net"
"16384x384:k=8,score=sigmoid,renorm=1,bias=1 w2.r2.c1.m1.v2.ld=cs.st=def.reg=f32.sel=short"
"16384x8:k=2,renorm=1 w1.r32.c1.m1.v2.ld=def.st=def.reg=f32"
)
one() { # one SHAPE CONFIG P -> median or FAIL
    local shape=$1 cfg=$2 p=$3 env=()
    [[ $p != - ]] && env=(TUNED_PROBE_PERSIST=$p)
    env ${env[@]+"${env[@]}"} timeout 120 build/tuned tune --kernel router_topk --shape "$shape" \
        --dtype fp32 --try "$cfg" --budget 1 --population 1 --skip-store --json --progress none \
        >"$out/last.json" 2>>"$out/probe.log"
    python3 - "$out/last.json" "$cfg" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    print(f"{r['median_us']:.2f}" if r.get("config") == sys.argv[2] else "OTHER")
except Exception:
    print("FAIL")
PY
}
printf '%-70s %-52s %7s %7s %7s %7s\n' key config grid cap4 cap2 cap0 >"$out/table.txt"
for pair in "${pairs[@]}"; do
    read -r shape cfg <<<"$pair"
    declare -A t=()
    for round in 1 2; do
        for p in - 4 2; do t[$p]+="$(one "$shape" "$cfg" "$p") "; done
    done
    t[0]=$(one "$shape" "$cfg" 0)
    printf '%-70s %-52s %15s %15s %15s %7s\n' "$shape" "$cfg" "${t[-]}" "${t[4]}" "${t[2]}" "${t[0]}" | tee -a "$out/table.txt"
    unset t
done
echo
cat "$out/table.txt"
