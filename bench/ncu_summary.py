#!/usr/bin/env python3
"""ncu_summary.py NCU_CSV: one line per kernel (NVTX-renamed: "dtype shape
method/kernel") from an `ncu --csv --metrics ...` log of probe_small.py
--ncu: median gpu__time_duration (ns) of its launches, instructions,
registers, grid, block and DRAM bytes, as a markdown table."""
import collections
import csv
import statistics
import sys


def main():
    lines = [l for l in open(sys.argv[1]) if not l.startswith("==")]
    kernels = collections.defaultdict(dict)
    for r in csv.DictReader(lines):
        k = kernels[(r["Kernel Name"], r["ID"])]
        k["name"] = r["Kernel Name"]
        k[r["Metric Name"]] = r["Metric Value"].replace(",", "")
    by_name = collections.OrderedDict()
    for k in kernels.values():
        by_name.setdefault(k["name"], []).append(k)
    print("| kernel (NVTX range/name) | launches | median ns | instructions | regs | grid | block "
          "| DRAM read B |")
    print("|---|---|---|---|---|---|---|---|")
    for name, ks in by_name.items():
        if "/" not in name:  # torch's own kernels (inputs, references)
            continue
        t = statistics.median(float(k.get("gpu__time_duration.sum", "nan")) for k in ks)
        k = ks[-1]
        print(f"| {name} | {len(ks)} | {t:.0f} | {k.get('smsp__inst_executed.sum')} | "
              f"{k.get('launch__registers_per_thread')} | {k.get('launch__grid_size')} | "
              f"{k.get('launch__block_size')} | {k.get('dram__bytes_read.sum')} |")


if __name__ == "__main__":
    main()
