#!/usr/bin/env python3
"""test_cli_store.py TUNED SOURCE_ROOT: the store commands of the `tuned`
binary end to end: import into a fresh store, list (table and --json), get
(exact only on a matching GPU), export and re-import, better-only import and
--force, invalid lines named with file and line, forget (by key, by GPU,
dry run), gc, verify without a driver, a store of another schema, a damaged
store, the import's CPU priority (idle unless --priority normal), and the shipped pre-tuned files (cache/pretuned/*.jsonl) importing
cleanly into a fresh store. Runs on machines with and without a GPU."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

TUNED = sys.argv[1]
SRC = sys.argv[2] if len(sys.argv) > 2 else "."
POLICY = "l2flush-settle-events-median/3"
failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL:", msg)


def run(*args, stdin=None):
    p = subprocess.run([TUNED, *args], input=stdin, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def fnv(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def record(gpu_name, rows, cols, dtype="fp16", median=100.0, driver=13000, policy=POLICY,
           config="w8.r1.c1.m1.v8.ld=cs.st=cs.reg=f32"):
    ident = f"{gpu_name}|sm_90|132sm|81079MiB|drv{driver}|nvrtc13.0|tpl0123456789abcdef"
    return {"v": 2, "kernel": "softmax", "dtype": dtype, "rows": rows, "cols": cols, "layout": 0,
            "gpu_fp": "%016x" % fnv(ident), "config": config, "gpu": ident,
            "gpu_name": gpu_name, "cc_major": 9, "cc_minor": 0, "sm_count": 132,
            "mem_mib": 81079, "driver": driver, "nvrtc_major": 13, "nvrtc_minor": 0,
            "template_hash": "0123456789abcdef", "policy": policy, "median_us": median,
            "copy_us": 0.9 * median, "gbps": 2000.0, "evaluations": 50, "cubin": "0" * 16,
            "date": "2026-11-21T10:00:00Z", "tool_version": "0.1.0"}


def export_text(recs, declared=None):
    header = {"tuned_export": 1, "schema": 2, "record_version": 2, "writer": "test",
              "date": "2026-11-21T10:00:00Z",
              "records": len(recs) if declared is None else declared}
    return "".join(json.dumps(x) + "\n" for x in [header, *recs])


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def key_of(r):
    return f"softmax/{r['dtype']}/{r['rows']}x{r['cols']}/dense/{r['gpu_fp']}"


tmp = tempfile.mkdtemp(prefix="test_cli_store.")
try:
    have_gpu = run("devices")[0] == 0
    db = os.path.join(tmp, "fresh", "store")
    h100 = "NVIDIA H100 80GB HBM3"
    recs = [record(h100, 4096, 32000), record("NVIDIA H200", 4096, 32000, median=80.0),
            record(h100, 1024, 1024, "bf16", 6.5), record(h100, 32, 128, "fp32", 4.2)]
    a = os.path.join(tmp, "a.jsonl")
    write(a, export_text(recs))

    # A fresh install: import creates the store.
    rc, out, err = run("import", a, "--db", db)
    if rc != 0 or "4 added" not in err:
        fail(f"import into a fresh store: {rc} {err}")
    print("ok: fresh import:", err.strip())

    # list: a table, and --json with keys; filters.
    rc, out, err = run("list", "--db", db)
    if rc != 0 or len(out.splitlines()) != 5 or "SHAPE" not in out.splitlines()[0]:
        fail(f"list: {rc} {out} {err}")
    rc, out, err = run("list", "--json", "--db", db, "--gpu", "h100")
    listed = json.loads(out) if rc == 0 else []
    if len(listed) != 3 or any(x["gpu_name"] != h100 for x in listed):
        fail(f"list --json --gpu h100: {rc} {out} {err}")
    if sorted(x["key"] for x in listed) != sorted(key_of(r) for r in recs if r["gpu_name"] == h100):
        fail("list --json keys")
    rc, out, err = run("list", "--json", "--db", db, "--shape", "4096x32000", "--dtype", "fp16")
    if rc != 0 or len(json.loads(out)) != 2:
        fail(f"list --shape --dtype: {out}")
    print("ok: list")

    # get: exact only on a matching GPU. These records name made-up
    # identities, so with a GPU nothing is exact; without one, every record
    # of the shape is shown, marked unchecked.
    rc, out, err = run("get", "--shape", "4096x32000", "--db", db)
    if have_gpu:
        if rc != 3 or "not exact" not in err:
            fail(f"get on a GPU with foreign records: {rc} {err}")
    else:
        if rc != 0 or out.count("source       unchecked") != 2:
            fail(f"get without a GPU: {rc} {out} {err}")
    print("ok: get")

    # Another kernel's record: imported, listed and got under its own name,
    # apart from softmax's records of the same shape.
    bwd = record(h100, 4096, 32000, median=260.0, config="w16.r1.c1.m1.v8.ld=nc.st=def.reg=pk")
    bwd["kernel"] = "softmax_bwd"
    kdb = os.path.join(tmp, "kernels")
    kfile = os.path.join(tmp, "k.jsonl")
    write(kfile, export_text([bwd]))
    rc, _, err = run("import", kfile, "--db", kdb)
    if rc != 0 or "1 added" not in err:
        fail(f"import a softmax_bwd record: {rc} {err}")
    rc, out, err = run("list", "--json", "--db", kdb)
    listed = json.loads(out) if rc == 0 else []
    if len(listed) != 1 or not listed[0]["key"].startswith("softmax_bwd/fp16/4096x32000/") or \
            listed[0]["kernel"] != "softmax_bwd":
        fail(f"list of a softmax_bwd record: {rc} {out} {err}")
    rc, out, err = run("get", "--kernel", "softmax_bwd", "--shape", "4096x32000", "--db", kdb)
    if not have_gpu and (rc != 0 or "kernel       softmax_bwd" not in out or
                         "w16.r1.c1.m1.v8.ld=nc.st=def.reg=pk" not in out):
        fail(f"get --kernel softmax_bwd without a GPU: {rc} {out} {err}")
    rc, out, err = run("get", "--shape", "4096x32000", "--db", kdb)
    if rc != 3:
        fail(f"get of softmax found the softmax_bwd record: {rc} {out} {err}")
    rc, out, err = run("get", "--kernel", "log_softmax", "--shape", "4096x32000", "--db", kdb)
    if rc != 3:
        fail(f"get of log_softmax found the softmax_bwd record: {rc} {out} {err}")
    print("ok: a softmax_bwd record apart from softmax's")

    # export, then import into another store: the same records.
    rc, out, err = run("export", "--db", db)
    lines = out.splitlines()
    if rc != 0 or len(lines) != 5 or json.loads(lines[0])["records"] != 4:
        fail(f"export: {rc} {err}")
    exported = os.path.join(tmp, "exported.jsonl")
    write(exported, out)
    db2 = os.path.join(tmp, "second")
    rc, _, err = run("import", exported, "--db", db2)
    l1 = json.loads(run("list", "--json", "--db", db)[1])
    l2 = json.loads(run("list", "--json", "--db", db2)[1])
    if rc != 0 or l1 != l2:
        fail(f"export/import round trip: {rc} {err}")
    rc, out, err = run("export", "--gpu", "H200", "--db", db)
    if rc != 0 or len(out.splitlines()) != 2:
        fail(f"export --gpu: {out}")
    rc, out, err = run("import", "-", "--db", db2, stdin=out)
    if rc != 0 or "1 already stored" not in err:
        fail(f"import from stdin: {rc} {err}")
    print("ok: export / import")

    # Better only, unless --force; the skip is explained.
    slower = dict(recs[0], median_us=150.0, config="w4.r1.c1.m1.v8.ld=cs.st=cs.reg=f32")
    s = os.path.join(tmp, "slower.jsonl")
    write(s, export_text([slower]))
    rc, _, err = run("import", s, "--db", db)
    if rc != 0 or "1 kept" not in err or "slower.jsonl:2: skipped" not in err or "--force" not in err:
        fail(f"import of a slower record: {rc} {err}")
    rc, _, err = run("import", "--force", s, "--db", db)
    if rc != 0 or "1 replaced" not in err:
        fail(f"import --force: {rc} {err}")
    got = [x for x in json.loads(run("list", "--json", "--db", db)[1]) if x["key"] == key_of(recs[0])]
    if not got or got[0]["median_us"] != 150.0:
        fail("--force did not replace")
    print("ok: better-only import, --force")

    # Invalid lines: named with file and line, the rest imported, exit 1.
    # A config this build runs, spelt with a leading zero, is refused as
    # well: its text would stand beside the canonical one for one variant.
    bad = export_text([recs[0], dict(recs[1], rows="many"), dict(recs[2], config="w3.bogus"),
                       dict(recs[3], gpu_fp="0" * 16),
                       dict(recs[3], rows=64, config="w08.r1.c1.m1.v8.ld=cs.st=cs.reg=f32")],
                      declared=7)
    bad += "{\"v\":2,\"v\":2}\n"
    b = os.path.join(tmp, "bad.jsonl")
    write(b, bad)
    rc, _, err = run("import", b, "--db", db2)
    for needle in ["bad.jsonl:3: skipped", "bad.jsonl:4: skipped", "bad.jsonl:5: skipped",
                   "bad.jsonl:6: skipped", "bad.jsonl:7: skipped", "duplicate", "fingerprint",
                   "not in canonical form ('w8.r1.c1.m1.v8.ld=cs.st=cs.reg=f32')", "5 invalid",
                   "file truncated"]:
        if needle not in err:
            fail(f"bad import lacks {needle!r}: {err}")
    if rc != 1:
        fail(f"bad import exited {rc}")
    rc, _, err = run("import", os.path.join(tmp, "missing.jsonl"), "--db", db2)
    if rc != 1 or "No such file" not in err:
        fail(f"import of a missing file: {rc} {err}")
    rc, _, err = run("import", "--db", db2)
    if rc != 2:
        fail(f"import without files: {rc}")
    notjson = os.path.join(tmp, "notes.txt")
    write(notjson, "hello\n")
    rc, _, err = run("import", notjson, "--db", db2)
    if rc != 1 or "not a tuned export" not in err:
        fail(f"import of a text file: {rc} {err}")
    print("ok: invalid lines:", err.strip().splitlines()[-1])

    # forget: needs a selector; by key; by GPU with --dry-run first.
    rc, _, err = run("forget", "--db", db)
    if rc != 2:
        fail(f"forget with nothing: {rc}")
    rc, _, err = run("forget", "softmax/fp16/1x1/dense/xyz", "--db", db)
    if rc != 2 or "fingerprint" not in err:
        fail(f"forget with a bad key: {rc} {err}")
    rc, out, _ = run("forget", key_of(recs[3]), "--db", db)
    if rc != 0 or "forgot" not in out:
        fail(f"forget KEY: {rc} {out}")
    rc, _, err = run("forget", key_of(recs[3]), "--db", db)
    if rc != 3:
        fail(f"forget of a missing key: {rc} {err}")
    rc, out, _ = run("forget", "--gpu", "H200", "--dry-run", "--db", db)
    if rc != 0 or "would forget" not in out:
        fail(f"forget --dry-run: {rc} {out}")
    if len(json.loads(run("list", "--json", "--db", db)[1])) != 3:
        fail("a dry run forgot something")
    rc, out, _ = run("forget", "--gpu", "H200", "--db", db)
    if rc != 0 or len(json.loads(run("list", "--json", "--db", db)[1])) != 2:
        fail(f"forget --gpu: {rc} {out}")
    print("ok: forget")

    # gc runs and reports.
    rc, out, err = run("gc", "--days", "0", "--db", db)
    if rc != 0 or "history:" not in out or "cubins:" not in out:
        fail(f"gc: {rc} {out} {err}")
    rc, _, err = run("gc", "--days", "-1", "--db", db)
    if rc != 2:
        fail(f"gc --days -1: {rc}")
    print("ok: gc")

    # verify: without a driver, one clear line.
    rc, out, err = run("verify", "--db", db)
    if not have_gpu:
        if rc != 1 or "no CUDA driver found" not in err or len(err.splitlines()) != 1:
            fail(f"verify without a driver: {rc} {err}")
        print("ok: verify without a driver:", err.strip()[:100], "...")
    else:
        print("verify on a GPU:", rc, err.strip())

    # A store of another schema: a clear error naming the path, no change.
    if shutil.which("mdb_load"):
        old = os.path.join(tmp, "schema1")
        os.makedirs(old)
        dump = ("VERSION=3\nformat=print\ntype=btree\nmapsize=1048576\nmaxreaders=126\n"
                "db_pagesize=4096\nHEADER=END\n schema\n 1\n writer\n 0.1.0\nDATA=END\n")
        p = subprocess.run(["mdb_load", "-s", "meta", old], input=dump, text=True,
                           capture_output=True)
        if p.returncode != 0:
            fail(f"mdb_load: {p.stderr}")
        before = open(os.path.join(old, "data.mdb"), "rb").read()
        for args in (["list"], ["import", a], ["gc"]):
            rc, _, err = run(*args, "--db", old)
            if rc != 1 or "schema version 1" not in err or old not in err:
                fail(f"{args[0]} on a schema-1 store: {rc} {err}")
        if open(os.path.join(old, "data.mdb"), "rb").read() != before:
            fail("a schema-1 store was modified")
        print("ok: schema 1 store:", err.strip())

    # Times of two measurement policies do not compare: a faster record of
    # another policy does not replace this build's, and this build's, though
    # slower, replaces one of another policy.
    pol = os.path.join(tmp, "policies")
    mine = record("NVIDIA H100 80GB HBM3", 512, 512, median=20.0)
    other = record("NVIDIA H100 80GB HBM3", 512, 512, median=15.0, policy="events-median/1")
    a, b = os.path.join(tmp, "mine.jsonl"), os.path.join(tmp, "other.jsonl")
    write(a, export_text([mine]))
    write(b, export_text([other]))
    run("import", a, "--db", pol)
    rc, _, err = run("import", b, "--db", pol)
    listed = json.loads(run("list", "--json", "--db", pol)[1] or "[]")
    if rc != 0 or "do not compare" not in err or [x["policy"] for x in listed] != [POLICY]:
        fail(f"import of a faster record of another policy: {rc} {listed} {err}")
    forget = os.path.join(tmp, "policies-other")
    run("import", b, "--db", forget)
    rc, _, err = run("import", a, "--db", forget)
    listed = json.loads(run("list", "--json", "--db", forget)[1] or "[]")
    if rc != 0 or [x["policy"] for x in listed] != [POLICY]:
        fail(f"import of this policy's record over another's: {rc} {listed} {err}")
    print("ok: import compares times under one measurement policy")

    # A damaged store: a clear error naming the path.
    dmg = os.path.join(tmp, "damaged")
    os.makedirs(dmg)
    with open(os.path.join(dmg, "data.mdb"), "wb") as f:
        f.write(b"\x5a" * 16384)
    rc, _, err = run("list", "--db", dmg)
    if rc != 1 or dmg not in err or "damaged" not in err:
        fail(f"list on a damaged store: {rc} {err}")
    print("ok: damaged store:", err.strip()[:120], "...")

    # An import runs at idle CPU priority (SCHED_IDLE, policy 5 in
    # /proc/PID/sched) unless --priority normal: read while it waits on stdin.
    def import_policy(*extra):
        p = subprocess.Popen([TUNED, "import", *extra, "-", "--db", os.path.join(tmp, "prio")],
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, text=True)
        policy = None
        try:
            for _ in range(200):  # until it has opened its store: lowered by then
                if os.path.exists(os.path.join(tmp, "prio", "data.mdb")):
                    with open(f"/proc/{p.pid}/sched") as f:
                        for line in f:
                            if line.startswith("policy"):
                                policy = int(line.split(":")[1])
                    break
                time.sleep(0.02)
        finally:
            p.stdin.close()
            p.wait(timeout=60)
        return policy
    if os.path.exists("/proc/self/sched"):
        got, normal = import_policy(), import_policy("--priority", "normal")
        if got != 5 or normal != 0:
            fail(f"import's scheduling policy: {got} by default, {normal} with --priority "
                 "normal (expected 5, SCHED_IDLE, and 0)")
        rc, _, err = run("import", "--priority", "low", "-", "--db", os.path.join(tmp, "prio"))
        if rc != 2 or "expected idle or normal" not in err:
            fail(f"import --priority low: {rc} {err}")
        print("ok: import at idle priority, --priority normal at the caller's")

    # The shipped pre-tuned files import cleanly into a fresh store.
    pre = os.path.join(SRC, "cache", "pretuned")
    files = sorted(os.path.join(pre, f) for f in os.listdir(pre) if f.endswith(".jsonl")) \
        if os.path.isdir(pre) else []
    if files:
        db3 = os.path.join(tmp, "pretuned")
        rc, _, err = run("import", *files, "--db", db3)
        if rc != 0 or " 0 invalid" not in err:
            fail(f"pre-tuned import: {rc} {err}")
        print(f"ok: {len(files)} pre-tuned file(s) import cleanly:",
              err.strip().replace("\n", " | "))
    else:
        print("(no cache/pretuned/*.jsonl yet)")
finally:
    shutil.rmtree(tmp)

print(f"{failures} failures")
sys.exit(1 if failures else 0)
