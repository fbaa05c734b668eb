#!/usr/bin/env python3
"""router_sel_traces.py TRACE.tsv...: the selection methods of a router tune
side by side. Each file is `tuned tune --trace` output (config, status,
median us, p20, p80, reps, compile ms, registers, local bytes, detail); for
every file, the best median of each (sel, threads a row) among the variants
that passed their check, and how many of each were timed and failed.
The threads a row of wN.rM are 32 N / M; sel is scan where the text names
none."""
import collections
import re
import sys


def sel_of(name):
    m = re.search(r"\.sel=(\w+)", name)
    return m.group(1) if m else "scan"


def tpr_of(name):
    m = re.match(r"w(\d+)\.r(\d+)\.", name)
    return 32 * int(m.group(1)) // int(m.group(2)) if m else 0


def main():
    for path in sys.argv[1:]:
        best = {}
        count = collections.Counter()
        bad = collections.Counter()
        for line in open(path):
            f = line.rstrip("\n").split("\t")
            if len(f) < 3 or f[0] == "config":  # the header
                continue
            key = (sel_of(f[0]), tpr_of(f[0]))
            if f[1] != "ok":
                bad[key] += 1
                continue
            count[key] += 1
            us = float(f[2])
            if key not in best or us < best[key][0]:
                best[key] = (us, f[0])
        print(f"== {path}")
        print(f"{'sel':5} {'tpr':>3} {'timed':>5} {'failed':>6} {'best us':>8}  config")
        for key in sorted(set(best) | set(bad)):
            us, name = best.get(key, (float("nan"), "-"))
            print(f"{key[0]:5} {key[1]:>3} {count[key]:>5} {bad[key]:>6} {us:>8.2f}  {name}")


if __name__ == "__main__":
    main()
