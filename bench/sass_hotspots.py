#!/usr/bin/env python3
"""sass_hotspots.py A.csv [B.csv]: executed SASS instructions by opcode, from
ncu's source page (`ncu -i REPORT --page source --print-source sass --csv`,
the SourceCounters section): per file the total of the column of executed
warp instructions, and per opcode (its first word, predicate dropped) the
count and share; with two files, the opcodes side by side and B - A, the
largest differences first. Then A's 25 most executed instructions with
their addresses (what to read in the SASS). The column is found by name
("Instructions Executed", else "Warp Instructions Executed")."""
import collections
import csv
import re
import sys


def load(path):
    with open(path, newline="") as f:
        text = f.read()
    # ncu prints notes before the table: start at the header line
    at = text.find('"Address"')
    if at < 0:
        at = text.find("Address")
    rows = list(csv.reader(text[at:].splitlines()))
    head = rows[0]
    src = head.index("Source")
    col = next((i for i, h in enumerate(head)
                if h in ("Instructions Executed", "Warp Instructions Executed")), None)
    if col is None:
        sys.exit(f"{path}: no executed-instructions column in {head}")
    addr = head.index("Address") if "Address" in head else 0
    out = []
    for r in rows[1:]:
        if len(r) <= max(src, col):
            continue
        try:
            n = float(r[col].replace(",", "") or 0)
        except ValueError:
            continue
        out.append((r[addr], r[src].strip(), n))
    return out


def opcode(sass):
    s = re.sub(r"^@!?U?P[T0-9]+\s+", "", sass)
    return s.split()[0] if s else "?"


def by_opcode(rows):
    c = collections.Counter()
    for _, s, n in rows:
        c[opcode(s)] += n
    return c


def main():
    files = sys.argv[1:]
    data = [load(p) for p in files]
    ops = [by_opcode(d) for d in data]
    totals = [sum(o.values()) for o in ops]
    for p, t in zip(files, totals):
        print(f"{p}: {t / 1e6:.1f} M warp instructions executed")
    print()
    if len(ops) == 2:
        a, b = ops
        keys = sorted(set(a) | set(b), key=lambda k: -abs(b[k] - a[k]))
        print("| opcode | A (M) | B (M) | B - A (M) |\n|---|---|---|---|")
        for k in keys[:30]:
            print(f"| {k} | {a[k] / 1e6:.2f} | {b[k] / 1e6:.2f} | {(b[k] - a[k]) / 1e6:+.2f} |")
    else:
        print("| opcode | M | share |\n|---|---|---|")
        for k, n in ops[0].most_common(30):
            print(f"| {k} | {n / 1e6:.2f} | {n / totals[0]:.1%} |")
    print(f"\n{files[0]}: most executed instructions\n")
    for a, s, n in sorted(data[0], key=lambda r: -r[2])[:25]:
        print(f"{a}  {n / 1e6:8.3f} M  {s}")


if __name__ == "__main__":
    main()
