#!/usr/bin/env bash
# bench/attrs-probe.sh OUT [LIST] - on the GPU machine: do the launch
# attributes the templates leave alone (the L1/shared split, a cluster's
# placement) move the variants' times? LIST (default bench/attrs-probe.list)
# has lines "SHAPE DTYPE CONFIG..."; each line's configs are timed by
# build/bench/probe_attrs under every setting, interleaved over 3 rounds
# (each config checked first; the evaluator's flush, pause and copy).
# Writes OUT/attrs-probe.txt and prints, per line and config, the median
# of the 3 rounds under each setting.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
out="${1:?usage: bench/attrs-probe.sh OUT [LIST]}"
list="${2:-bench/attrs-probe.list}"
mkdir -p "$out"
# shellcheck source=bench/probe-env.sh
source bench/probe-env.sh >/dev/null
while read -r shape dtype configs; do
    echo "== $shape $dtype"
    # shellcheck disable=SC2086 # configs are words
    build/bench/probe_attrs "$shape" "$dtype" $configs 2>&1
done < <(list_lines "$list") >"$out/attrs-probe.txt"
python3 - "$out/attrs-probe.txt" <<'PY'
import collections, statistics, sys
rows, copy, head = collections.OrderedDict(), {}, None
for line in open(sys.argv[1]):
    w = line.split()
    if line.startswith("== "):
        head = " ".join(w[1:3])
    elif len(w) >= 3 and w[1:3] == ["copy", "(at"]:
        copy[head] = float(w[4])
    elif len(w) >= 3 and head and not line.startswith("#") and w[0] != "setting":
        try:
            rows.setdefault((head, w[1]), collections.defaultdict(list))[w[0]].append(float(w[2]))
        except ValueError:
            print(line.rstrip())
names = ["default", "carve0", "carve100", "spread", "balance"]
print("%-18s %-8s %s  %s" % ("shape", "copy", " ".join("%9s" % n for n in names), "config"))
for (head, cfg), by in rows.items():
    cells = " ".join("%9.3f" % statistics.median(by[n]) if by[n] else "%9s" % "-" for n in names)
    print("%-18s %-8.3f %s  %s" % (head, copy.get(head, 0.0), cells, cfg))
PY
