"""bench/ce_tunes_table.py FILE: a table of tune records, each kind's time
against its floor. FILE holds the JSON objects `tuned tune --json` printed,
one after another, and {"failed": true, ...} for a tune that did not end.
The floor is the kind's bytes (a record's gbps counts them) at the copy's
rate (the copy moves two matrices), so a kind that reads once has half
the copy's time as its floor."""

import json
import sys

ESIZE = {"fp16": 2, "bf16": 2, "fp32": 4}


def records(text):
    dec, i = json.JSONDecoder(), 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return
        obj, i = dec.raw_decode(text, i)
        yield obj


def main(path):
    print(f"{'kind':20} {'shape':14} {'dtype':5} {'median_us':>10} {'copy_us':>9} "
          f"{'floor_us':>9} {'of floor':>9}  config")
    for r in records(open(path).read()):
        if r.get("failed"):
            what = " ".join(str(v) for k, v in r.items() if k != "failed")
            print(f"{what}: tune failed (see the tunes log)")
            continue
        rec = r.get("record", r)
        rows, cols = rec["rows"], rec["cols"]
        kind_bytes = rec["gbps"] * rec["median_us"] * 1e3
        floor = rec["copy_us"] * kind_bytes / (2 * rows * cols * ESIZE[rec["dtype"]])
        print(f"{rec['kernel']:20} {f'{rows}x{cols}':14} {rec['dtype']:5} "
              f"{rec['median_us']:10.1f} {rec['copy_us']:9.1f} {floor:9.1f} "
              f"{rec['median_us'] / floor:9.3f}  {rec['config']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
