#!/usr/bin/env python3
"""sass_stalls.py FILE.csv: where a kernel's warps wait, SASS instruction by
instruction, from ncu's source page (`ncu -i REPORT --page source
--print-source sass --csv` of a SourceCounters launch). A warp stall sample
lands on the instruction the warp waits to issue, so on a latency-bound
path (a lone warp a row, a few rows) the samples follow the path's
dependences: a long wait on the first use of a load is the memory trip, a
wait after a shuffle or a redux.sync is that instruction's latency.

Prints the total samples, the share of each opcode's samples, then the path
in address order with every instruction holding at least 0.7% of the
samples (address, share, running share, executed warp instructions, SASS),
then the 20 instructions with the most. Columns are found by name: "Warp
Stall Sampling (All Samples)" and "Instructions Executed"."""
import collections
import csv
import sys

from sass_hotspots import opcode


def column(head, *names):
    for name in names:
        for i, h in enumerate(head):
            if h.strip().lower().startswith(name.lower()):
                return i
    return None


def load(path):
    with open(path, newline="") as f:
        text = f.read()
    at = text.find('"Address"')  # ncu prints notes before the table
    rows = list(csv.reader(text[max(at, 0):].splitlines()))
    head = rows[0]
    src = column(head, "Source")
    addr = column(head, "Address")
    samples = column(head, "Warp Stall Sampling (All")
    executed = column(head, "Instructions Executed", "Warp Instructions Executed")
    if None in (src, addr, samples):
        sys.exit(f"{path}: want Address, Source and Warp Stall Sampling columns, have {head}")

    def num(r, i):
        if i is None or i >= len(r):
            return 0.0
        try:
            return float(r[i].replace(",", "") or 0)
        except ValueError:
            return 0.0

    return [(r[addr], r[src].strip(), num(r, samples), num(r, executed))
            for r in rows[1:] if len(r) > max(src, addr, samples)]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: sass_stalls.py FILE.csv")
    rows = load(sys.argv[1])
    total = sum(r[2] for r in rows)
    if total == 0:
        sys.exit(f"{sys.argv[1]}: no stall samples")
    print(f"{sys.argv[1]}: {total:.0f} warp stall samples, {len(rows)} instructions")
    ops = collections.Counter()
    for _, s, n, _ in rows:
        ops[opcode(s)] += n
    print("by opcode: " + ", ".join(f"{k} {n / total:.1%}" for k, n in ops.most_common(12)))
    print("\npath (instructions with >= 0.7% of the samples):")
    run = 0.0
    for a, s, n, e in rows:
        run += n
        if n / total >= 0.007:
            print(f"  {a:>6} {n / total:6.1%} {run / total:6.1%} {e:9.0f}  {s}")
    print("\nmost samples:")
    for a, s, n, e in sorted(rows, key=lambda r: -r[2])[:20]:
        print(f"  {a:>6} {n / total:6.1%} {e:9.0f}  {s}")


if __name__ == "__main__":
    main()
