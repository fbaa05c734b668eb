#!/usr/bin/env bash
# test_cli_gpu.sh TUNED: on a GPU, a small tune stores a winner that `tuned
# get` in a second process prints; `tuned verify --fix` of a record stored
# too fast, with a copy time over the kernel's real time (as from another
# machine), stores it as measured now, with the copy timed now, and the
# result exports and imports cleanly; every linear_cross_entropy config of
# a small key, in whole rows and in vocabulary blocks, passes its float64
# check in every dtype. Exit 77 (skipped) without a driver.
set -u
tuned="$1"
if ! "$tuned" devices >/dev/null 2>&1; then
    echo "SKIP: $("$tuned" devices 2>&1 | head -n 1)"
    exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$tuned" --shape 512x1000 --dtype bf16 --budget 12 --db "$tmp/db" -q >"$tmp/tune.out" || exit 1
config="$(awk '$1 == "config" { print $2 }' "$tmp/tune.out")"
[[ -n "$config" ]] || { echo "FAIL: no config printed"; cat "$tmp/tune.out"; exit 1; }
"$tuned" get --shape 512x1000 --dtype bf16 --db "$tmp/db" >"$tmp/get.out" || exit 1
got="$(awk '$1 == "config" { print $2 }' "$tmp/get.out")"
[[ "$got" == "$config" ]] || { echo "FAIL: get says '$got', tune stored '$config'"; exit 1; }
"$tuned" get --shape 512x1000 --dtype fp16 --db "$tmp/db" >/dev/null 2>&1
[[ $? -eq 3 ]] || { echo "FAIL: a record for a dtype never tuned"; exit 1; }
echo "ok: tuned and read back $config"

# A stored record 15% too fast whose copy time is over the kernel's real
# time (as from another machine): verify --fix must store what it
# measures, copy included, and the record must stay importable (a copy_us
# of 0 is refused as no measurement).
"$tuned" export --db "$tmp/db" >"$tmp/real.jsonl" || exit 1
python3 - "$tmp/real.jsonl" "$tmp/slow.jsonl" <<'PY' || exit 1
import json, sys
lines = open(sys.argv[1]).read().splitlines()
out = [lines[0]]
for line in lines[1:]:
    r = json.loads(line)
    real = r["median_us"]
    r["median_us"] = 0.85 * real
    r["copy_us"] = 1.05 * real
    r["gbps"] /= 0.85
    out.append(json.dumps(r))
open(sys.argv[2], "w").write("\n".join(out) + "\n")
PY
"$tuned" import --force "$tmp/slow.jsonl" --db "$tmp/db" -q || { echo "FAIL: import of the slow record"; exit 1; }
"$tuned" verify --fix --db "$tmp/db" >"$tmp/verify.out" 2>&1 || { echo "FAIL: verify --fix"; cat "$tmp/verify.out"; exit 1; }
grep -q FIXED "$tmp/verify.out" || { echo "FAIL: verify --fix fixed nothing"; cat "$tmp/verify.out"; exit 1; }
"$tuned" export --db "$tmp/db" >"$tmp/fixed.jsonl" || exit 1
python3 - "$tmp/slow.jsonl" "$tmp/fixed.jsonl" <<'PY' || exit 1
import json, sys
slow = json.loads(open(sys.argv[1]).read().splitlines()[1])
r = json.loads(open(sys.argv[2]).read().splitlines()[1])
bytes_moved = 2 * r["rows"] * r["cols"] * 2
ok = (r["copy_us"] > 0 and r["copy_us"] != slow["copy_us"] and r["median_us"] > slow["median_us"]
      and abs(r["gbps"] - bytes_moved / (r["median_us"] * 1e3)) < 1e-6 * r["gbps"])
if not ok:
    sys.exit(f"FAIL: the fixed record: median {r['median_us']} copy {r['copy_us']} "
             f"gbps {r['gbps']} (stored: {slow['median_us']}, {slow['copy_us']})")
PY
"$tuned" import "$tmp/fixed.jsonl" --db "$tmp/db2" 2>"$tmp/import2.err" || { echo "FAIL: the fixed record does not import"; cat "$tmp/import2.err"; exit 1; }
echo "ok: verify --fix stored the time and copy measured now; the record imports"

# The linear cross-entropy's whole space at a small key whose 16 MiB budget
# holds 1024 bf16 rows whole (512 fp32): every chunk config, in whole rows
# and in vocabulary blocks (chunk2048.v2, chunk4096.v4 ...), checked
# against float64 on the small instance, in every dtype; none may be wrong.
for dt in fp32 bf16 fp16; do
    "$tuned" tune --kernel linear_cross_entropy --shape 4096x8000:hidden=256,budget=16 \
        --dtype "$dt" --exhaustive --skip-store --time 60 -q --trace "$tmp/lce.$dt.tsv" \
        >"$tmp/lce.$dt.out" 2>&1 || { echo "FAIL: linear_cross_entropy $dt"; cat "$tmp/lce.$dt.out"; exit 1; }
    python3 - "$tmp/lce.$dt.tsv" "$dt" <<'PY' || exit 1
import sys
rows = [line.split("\t") for line in open(sys.argv[1]).read().splitlines()[1:]]
bad = [r for r in rows if r[1] != "ok"]
blocks = [r[0] for r in rows if ".v" in r[0]]
whole = [r[0] for r in rows if ".v" not in r[0]]
if bad or len(blocks) < 2 or not whole:
    sys.exit(f"FAIL: linear_cross_entropy {sys.argv[2]}: {len(rows)} configs, "
             f"{len(blocks)} in blocks, not ok: {bad}")
print(f"ok: linear_cross_entropy {sys.argv[2]}: {len(whole)} whole, blocks {blocks}, all ok")
PY
done
