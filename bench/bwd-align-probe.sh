#!/usr/bin/env bash
# bench/bwd-align-probe.sh - on the GPU machine (run by the device tool,
# which sets $OUT): why the 1024x50257 fp16 backward sits over its floor.
# Separates the two suspects by shape: 1024x50257 (rows off a vector
# boundary, 1024 rows over 132 SMs), 1024x50264 (the same rows on a
# boundary) and 1056x50264 (a whole number of rows per SM). For each: a
# cold tune (tuned --kernel softmax_bwd, 15 s), then the same six variants
# timed by build/bench/probe_settle (checked first, 3 interleaved rounds,
# the evaluator's copy), then Nsight Compute of the H100's winner on the
# two 1024-row shapes; then the forward softmax of the two 1024-row
# shapes (tune, three variants). Writes OUT/bwd-align-probe.txt, OUT/tunes.jsonl and
# OUT/ncu/; prints a short table last.
set -u
out=${OUT:?run on the GPU machine, with OUT set}
# shellcheck source=bench/probe-env.sh
source bench/probe-env.sh >/dev/null
db="$(mktemp -d)/db"
shapes=(1024x50257 1024x50264 1056x50264)
configs=(w8.r1.c4.m2.v8.ld=def.st=def.reg=pk w16.r1.c2.m1.v8.ld=def.st=def.reg=pk
         w32.r1.c1.m1.v8.ld=def.st=def.reg=pk w4.r1.c4.m4.v8.ld=def.st=def.reg=pk
         w8.r1.c2.m2.v8.ld=def.st=def.reg=pk w16.r1.c4.m1.v8.ld=def.st=def.reg=pk)
for s in "${shapes[@]}"; do
    build/tuned --kernel softmax_bwd --shape "$s" --dtype fp16 --time 15 --db "$db" --json \
        >>"$out/tunes.jsonl" 2>>"$out/tunes.log"
done
for s in "${shapes[@]}"; do
    build/bench/probe_settle "softmax_bwd:$s" fp16 100 "${configs[@]}"
done >"$out/bwd-align-probe.txt" 2>&1
fwd_configs=(w8.r1.c4.m4.v8.ld=def.st=def.reg=ex.red=fused w8.r1.c4.m4.v8.ld=def.st=def.reg=pk.red=fused
             w8.r1.c8.m1.v8.ld=def.st=def.reg=f32.red=fused)
for s in 1024x50257 1024x50264; do
    build/tuned --shape "$s" --dtype fp16 --time 15 --db "$db" --json >>"$out/tunes.jsonl" 2>>"$out/tunes.log"
    build/bench/probe_settle "$s" fp16 100 "${fwd_configs[@]}"
done >>"$out/bwd-align-probe.txt" 2>&1
for s in 1024x50257 1024x50264; do
    bash bench/ncu-configs.sh "$out/ncu" "softmax_bwd:$s" fp16 "${configs[0]}" >/dev/null 2>&1
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]


def record(o):  # the object holding the winner's config, wherever the answer nests it
    if isinstance(o, dict):
        if "config" in o and "median_us" in o:
            return o
        for v in o.values():
            r = record(v)
            if r is not None:
                return r
    return None


print("cold tunes (15 s):")
text, at, dec = open(out + "/tunes.jsonl").read(), 0, json.JSONDecoder()
while True:  # the answers are pretty-printed, one after another
    while at < len(text) and text[at].isspace():
        at += 1
    if at >= len(text):
        break
    try:
        answer, at = dec.raw_decode(text, at)
    except ValueError:
        break
    r = record(answer.get("record", answer))
    if r is not None:
        print("  %s %sx%s %-40s %8.2f us  copy %8.2f us  %.3fx the floor" % (
            r.get("kernel", "softmax"), r.get("rows"), r.get("cols"), r["config"], r["median_us"], r.get("copy_us", 0),
            r["median_us"] / ((1.5 if r.get("kernel", "").endswith("_bwd") else 1.0) * r["copy_us"])
            if r.get("copy_us") else 0))
PY
grep -E "^#|copy|round 3|error|FAIL|wrong" "$out/bwd-align-probe.txt" | cut -c1-100
grep -E "==|Duration|DRAM Throughput|Achieved Occupancy|Max Active Clusters" "$out/ncu/ncu-configs.txt" 2>/dev/null
