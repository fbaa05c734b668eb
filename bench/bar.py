#!/usr/bin/env python3
"""bar.py EXPORT.jsonl: issue 3's bar for each (shape, dtype) of a
tools/bench.sh run's export (median_us and copy_us of each record, both
measured by the evaluator in the same tune): a copy of 20 µs or more must
be within 10% (softmax time <= 1.1 x copy), a shorter one within 2 µs.
Prints a markdown table and how many pairs miss."""
import json, sys
order=["32x128","256x1024","1024x1024","2048x2048","4096x4096","1024x50257","4096x32000","1x262144","65536x128","8192x128256","32x128256"]
rows=[json.loads(l) for l in open(sys.argv[1])][1:]
d={(f"{r['rows']}x{r['cols']}",r['dtype']):r for r in rows}
print("| shape | fp16 µs (copy) | bf16 µs (copy) | fp32 µs (copy) | bar (copy >= 20 µs: within 10%; else within 2 µs) |")
print("|---|---|---|---|---|")
miss=0
for s in order:
    cells=[];verd=[]
    for dt in ["fp16","bf16","fp32"]:
        r=d.get((s,dt))
        if not r: cells.append("-"); continue
        t,c=r['median_us'],r['copy_us']
        ok=(t<=1.1*c) if c>=20 else (t<=c+2)
        miss+= not ok
        cells.append(f"{t:.2f} ({c:.2f})")
        verd.append(("" if ok else "MISS ")+dt+(f" {100*c/t:.1f}%" if c>=20 else f" {t-c:+.2f} µs"))
    print(f"| {s} | "+" | ".join(cells)+" | "+", ".join(verd)+" |")
print(f"\n{miss} of {len(rows)} (shape, dtype) pairs miss the bar.")
