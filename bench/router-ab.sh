#!/usr/bin/env bash
# bench/router-ab.sh OLD OUT: the router of this tree (B) against an older
# one (A), in one run on one GPU. OLD is a folder holding router_topk.cu
# (the kernel template) and/or router.py (the Python module, whose eager
# path is host time) as an older commit had them: a copy of the tree is
# built with them, then bench/router_bench.py --tuned-only runs on each
# library and module in turn, A B B A A B .... A record is found only
# by the code that made it (the template's hash is in the key), so each
# router_topk winner in OUT/tunes.jsonl (the tune step's, made by B) is
# first measured by A alone (tuned tune --try CONFIG --budget 1) into the
# same store (TUNED_DB): both sides then run the same configs, each
# compiled from its own source. The last lines: a table of each row's
# tuned time under graph replay, A's and B's medians over their runs.
#
# Environment: AB_BENCH_ARGS (router_bench's --tokens, --routers, --reps),
# AB_ROUNDS (4). Needs what bench/gpu-session.sh's router phase set up
# (the build, TUNED_DB, PYTHONPATH).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
old="${1:?usage: bench/router-ab.sh OLD_TEMPLATES OUT}"
out="${2:?usage: bench/router-ab.sh OLD_TEMPLATES OUT}"
copy=/tmp/tuned-ab-tree
rm -rf "$copy" && mkdir -p "$copy" || exit 1
tar -C "$root" --exclude=./build --exclude='./.whl*' --exclude=./.debs -cf - . | tar -C "$copy" -xf - ||
    exit 1
[[ -f "$old/router_topk.cu" || -f "$old/router.py" ]] || {
    echo "ab: $old holds neither router_topk.cu nor router.py"
    exit 1
}
if [[ -f "$old/router_topk.cu" ]]; then
    cp "$old/router_topk.cu" "$copy/kernels/templates/router_topk.cu" || exit 1
fi
if [[ -f "$old/router.py" ]]; then
    cp "$old/router.py" "$copy/bindings/python/tuned/router.py" || exit 1
fi
(cd "$copy" && tools/setup.sh --no-deps) >"$out/ab-build.log" 2>&1 || {
    tail -n 20 "$out/ab-build.log"
    exit 1
}
# B's winners measured by A into A's own records (a key's text prints
# default parameters as a number: "1x128:" asks for the same key)
python3 - "$out/tunes.jsonl" <<'PY' >"$out/ab-seeds.txt" || exit 1
import json, sys
text = open(sys.argv[1]).read()
dec, i = json.JSONDecoder(), 0
while i < len(text):
    if text[i].isspace():
        i += 1
        continue
    obj, i = dec.raw_decode(text, i)
    rec = obj.get("record") or {}
    if rec.get("kernel") != "router_topk":
        continue
    spec = rec["key"].split("/")[2]
    rows, rest = spec.split(":", 1)
    print(f"{rows}:{'' if rest.startswith('0x') else rest} {rec['dtype']} {rec['config']}")
PY
while read -r spec dtype config; do
    "$copy/build/tuned" tune --kernel router_topk --shape "$spec" --dtype "$dtype" \
        --try "$config" --budget 1 --population 1 --retune --db "$TUNED_DB" --progress none \
        >>"$out/ab-seed.log" 2>&1 || echo "ab: A could not measure $spec $config"
done <"$out/ab-seeds.txt"
for round in $(seq "${AB_ROUNDS:-4}"); do
    # A B, then B A: a drift of the machine over the run (the first runs
    # after a build are the slowest) falls on both sides alike
    order="A B"
    (( round % 2 == 0 )) && order="B A"
    for side in $order; do
        tree="$root"
        [[ $side == A ]] && tree="$copy"
        TUNED_LIBRARY="$tree/build/libtuned.so.0" PYTHONPATH="$tree/bindings/python:${PYTHONPATH:-}" \
            timeout 240 python3 "$root/bench/router_bench.py" --tuned-only \
            ${AB_BENCH_ARGS:-} >"$out/ab-$side$round.log" 2>&1 || echo "ab: $side$round failed"
    done
done
python3 - "$out" <<'PY'
import ast, glob, statistics, sys
out = sys.argv[1]
rows = {}
for side in "AB":
    for f in sorted(glob.glob(f"{out}/ab-{side}[0-9]*.log")):
        for line in open(f):
            if line.startswith("{'router'"):
                r = ast.literal_eval(line)
                k = (r["router"], r["tokens"])
                rows.setdefault(k, {"A": [], "B": [], "Ae": [], "Be": [], "Ah": [], "Bh": [],
                                    "floor": []})
                rows[k][side].append(r["tuned_graph"])
                rows[k][side + "e"].append(r["tuned"])
                rows[k][side + "h"].append(r["host_us"])
                rows[k]["floor"].append(r["floor_graph"])
print("router A/B (A: the old template or module, B: this tree), tuned, us, medians over rounds "
      "(host: an eager call's host time, calls back to back)")
print(f"{'router':9} {'tokens':>6} {'floor_graph':>11} {'A graph':>8} {'B graph':>8} "
      f"{'B-A':>6} {'A eager':>8} {'B eager':>8} {'A host':>7} {'B host':>7}")
for (name, t), v in rows.items():
    m = {c: statistics.median(v[c]) if v[c] else float("nan") for c in v}
    print(f"{name:9} {t:>6} {m['floor']:11.2f} {m['A']:8.2f} {m['B']:8.2f} {m['B'] - m['A']:6.2f} "
          f"{m['Ae']:8.2f} {m['Be']:8.2f} {m['Ah']:7.2f} {m['Bh']:7.2f}")
PY
