#!/usr/bin/env python3
"""bar.py EXPORT.jsonl: issue 3's bar for each (shape, dtype) of a
tools/bench.sh run's export (median_us and copy_us of each record, both
measured by the evaluator in the same tune): a copy of 20 µs or more must
be within 10% (softmax time <= 1.1 x copy), a shorter one within 2 µs.
Prints a markdown table and how many pairs miss."""
import json
import sys

SHAPES = ["32x128", "256x1024", "1024x1024", "2048x2048", "4096x4096", "1024x50257",
          "4096x32000", "1x262144", "65536x128", "8192x128256", "32x128256"]
DTYPES = ["fp16", "bf16", "fp32"]


def verdict(dtype, t, copy):
    """(meets the bar, the cell's text)."""
    if copy >= 20:
        return t <= 1.1 * copy, f"{dtype} {100 * copy / t:.1f}%"
    return t <= copy + 2, f"{dtype} {t - copy:+.2f} µs"


def main():
    with open(sys.argv[1]) as f:
        records = [json.loads(line) for line in f][1:]  # the first line is the header
    by_key = {(f"{r['rows']}x{r['cols']}", r["dtype"]): r for r in records}
    print("| shape | " + " | ".join(f"{d} µs (copy)" for d in DTYPES)
          + " | bar (copy >= 20 µs: within 10%; else within 2 µs) |")
    print("|---|---|---|---|---|")
    misses = 0
    for shape in SHAPES:
        cells, verdicts = [], []
        for dtype in DTYPES:
            r = by_key.get((shape, dtype))
            if r is None:
                cells.append("-")
                continue
            ok, text = verdict(dtype, r["median_us"], r["copy_us"])
            misses += not ok
            cells.append(f"{r['median_us']:.2f} ({r['copy_us']:.2f})")
            verdicts.append(("" if ok else "MISS ") + text)
        if verdicts:
            print(f"| {shape} | " + " | ".join(cells) + " | " + ", ".join(verdicts) + " |")
    print(f"\n{misses} of {len(records)} (shape, dtype) pairs miss the bar.")


if __name__ == "__main__":
    main()
