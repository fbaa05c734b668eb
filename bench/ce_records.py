"""bench/ce_records.py TUNES OUT: the records of a file of `tuned tune --json`
objects (as bench/gpu-session.sh's cross-entropy tune step writes them) as
an export file that `tuned import` reads, so that a later call on a fresh
machine serves the same winners without tuning again (while the kinds'
templates are unchanged: records of other templates are not exact)."""

import datetime
import json
import sys

from ce_tunes_table import records


def main(src, dst):
    recs = [r.get("record", r) for r in records(open(src).read()) if not r.get("failed")]
    head = {"tuned_export": 1, "schema": 2, "record_version": 2, "writer": "0.1.0",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "records": len(recs)}
    with open(dst, "w") as f:
        f.write(json.dumps(head, separators=(",", ":")) + "\n")
        for r in recs:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
    print(f"{len(recs)} records written to {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
