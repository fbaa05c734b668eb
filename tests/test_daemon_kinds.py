#!/usr/bin/env python3
"""test_daemon_kinds.py TUNED: the daemon tunes every kind of the registry
(tuned.h's TUNED_KERNEL_MAP), and everything that names a tune carries
its kind: the real binary, real daemons on Unix sockets in a temporary
directory and the test-only fake GPU (TUNED_TEST_FAKE_GPU).

  tune       `tune` of each kind runs a job that stores a record of that
             kind; `get` with tune_if_missing queues one; the job's view
             names its kind
  unknown    an unknown kind is bad_value listing the kinds; the CLI's
             --kernel bogus exits 2 with a message listing them; --help
             lists every kind
  cli        `tuned tune --kernel K --socket S` tunes through the daemon
  flight     a softmax and a softmax_bwd tune of one shape are two jobs
             (single flight joins a job of the same kind only)
  retune     --retune-compatible queues one quick tune per key, the kind
             part of the key
  cap        the size caps count the tensors the kind moves: a backward
             kind moves three (1 TiB cap, the GPU's memory)
  params     a router's key parameters ("params") travel through tune,
             the job and get; other parameters are another key (no exact
             answer, a job of their own); bad ones are bad_value naming
             the rule; the CLI's --shape 64x128:P tunes and gets the same
             key, and `tuned list` names it
Exit 0 when every case passed, 77 in a build without the test hooks."""
import json
import os
import shutil
import sys
import tempfile

from daemon_client import FakeGpuServe, Tally, run_tuned, wait_job

TUNED = os.path.abspath(sys.argv[1])
KINDS = ["softmax", "softmax_bwd", "log_softmax", "log_softmax_bwd"]
tmp = tempfile.mkdtemp(prefix="test_daemon_kinds.")
DAEMONS = []

tally = Tally()
fail, ok = tally.fail, tally.ok


def run(*args, env=None, timeout=120):
    return run_tuned(TUNED, *args, env=env, timeout=timeout)


def Daemon(name, db=None, env=None, args=()):
    """tuned serve on the fake GPU in a folder of its own."""
    return FakeGpuServe(TUNED, os.path.join(tmp, name), DAEMONS, db=db, env=env, args=args)


def lists_kinds(text):
    return all(k in (text or "") for k in KINDS)


# ---- cases ----

def case_tune():
    d = Daemon("tune")
    if not d.start():
        return fail("tune: daemon did not start: " + d.logtext())
    bad = []
    for i, kind in enumerate(KINDS):
        cols = 1024 + 64 * i
        r = d.call({"op": "tune", "kernel": kind, "rows": 8, "cols": cols, "budget": 4})
        v = wait_job(d, r.get("job")) if r.get("ok") else None
        g = d.call({"op": "get", "kernel": kind, "rows": 8, "cols": cols})
        rec = g.get("record") or {}
        if not r.get("ok") or v is None or v.get("state") != "done" or v.get("kernel") != kind \
                or g.get("source") != "exact" or rec.get("kernel") != kind:
            bad.append((kind, r, v, g))
    miss = d.call({"op": "get", "kernel": "log_softmax_bwd", "rows": 8, "cols": 4096,
                   "tune_if_missing": True})
    v = wait_job(d, miss.get("job")) if miss.get("job") else None
    after = d.call({"op": "get", "kernel": "log_softmax_bwd", "rows": 8, "cols": 4096})
    d.stop()
    if bad:
        fail(f"tune: a kind's tune did not store its own record: {bad[0]}")
    elif not miss.get("ok") or v is None or v.get("kernel") != "log_softmax_bwd" or \
            after.get("source") != "exact":
        fail(f"tune: get tune_if_missing of log_softmax_bwd: {miss} {v} {after}")
    else:
        ok("tune: every kind tunes in the daemon and stores its own record; tune_if_missing too")


def case_unknown():
    d = Daemon("unknown")
    if not d.start():
        return fail("unknown: daemon did not start: " + d.logtext())
    r = d.call({"op": "tune", "kernel": "bogus", "rows": 8, "cols": 1024})
    g = d.call({"op": "get", "kernel": "bogus", "rows": 8, "cols": 1024})
    rc, _, err = run("tune", "--socket", d.sock, "--kernel", "bogus", "--shape", "8x1024")
    d.stop()
    rc_h, out_h, _ = run("--help")
    rc_t, out_t, _ = run("tune", "--help")
    e = r.get("error") or {}
    eg = g.get("error") or {}
    if e.get("code") != "bad_value" or not lists_kinds(e.get("message")) or \
            eg.get("code") != "bad_value" or not lists_kinds(eg.get("message")):
        fail(f"unknown: the replies to kernel bogus: {r} {g}")
    elif rc != 2 or "bogus" not in err or not lists_kinds(err):
        fail(f"unknown: tuned --kernel bogus: exit {rc}: {err}")
    elif rc_h != 0 or not lists_kinds(out_h) or rc_t != 0 or not lists_kinds(out_t):
        fail(f"unknown: --help does not list the kinds: {out_h} {out_t}")
    else:
        ok(f"unknown: bad_value listing the kinds ({e['message']}); the CLI exits 2")


def case_cli():
    d = Daemon("cli")
    if not d.start():
        return fail("cli: daemon did not start: " + d.logtext())
    rc, out, err = run("tune", "--socket", d.sock, "--kernel", "softmax_bwd", "--shape", "8x1024",
                       "--budget", "4", "-q")
    jobs = d.call({"op": "stats"})["jobs"]
    g = d.call({"op": "get", "kernel": "softmax_bwd", "rows": 8, "cols": 1024})
    d.stop()
    if rc != 0 or jobs.get("submitted") != 1 or g.get("source") != "exact":
        fail(f"cli: tuned tune --kernel softmax_bwd --socket: exit {rc} {err}, jobs {jobs}, {g}")
    else:
        ok("cli: tuned tune --kernel softmax_bwd through the daemon ran one job there")


def case_flight():
    d = Daemon("flight", env={"TUNED_TEST_FAKE_MS": "30"})
    if not d.start():
        return fail("flight: daemon did not start: " + d.logtext())
    a = d.call({"op": "tune", "rows": 64, "cols": 8192, "budget": 20})
    b = d.call({"op": "tune", "kernel": "softmax_bwd", "rows": 64, "cols": 8192, "budget": 20})
    c = d.call({"op": "tune", "kernel": "softmax_bwd", "rows": 64, "cols": 8192, "budget": 20})
    vb = wait_job(d, b.get("job"), 120) if b.get("ok") else None
    va = wait_job(d, a.get("job"), 120) if a.get("ok") else None
    d.stop()
    if not a.get("ok") or not b.get("ok") or b.get("joined") or a.get("job") == b.get("job"):
        fail(f"flight: softmax_bwd joined the softmax job: {a} {b}")
    elif not c.get("joined") or c.get("job") != b.get("job"):
        fail(f"flight: a second softmax_bwd tune did not join the first: {b} {c}")
    elif (va or {}).get("kernel") != "softmax" or (vb or {}).get("kernel") != "softmax_bwd":
        fail(f"flight: the jobs' kinds: {va} {vb}")
    else:
        ok("flight: softmax and softmax_bwd of one shape ran as two jobs; a repeat joined")


def case_retune():
    """Records of softmax and softmax_bwd 8x1024 measured under another
    driver: each kind's first compatible answer queues its own quick tune,
    a second one none."""
    db = os.path.join(tmp, "retune-store")
    seed = Daemon("retune-seed", db=db, env={"TUNED_TEST_FAKE_DRIVER": "1"})
    if not seed.start():
        return fail("retune: seed daemon did not start: " + seed.logtext())
    jobs = [seed.call({"op": "tune", "kernel": k, "rows": 8, "cols": 1024, "budget": 4})
            for k in ("softmax", "softmax_bwd")]
    done = [wait_job(seed, j.get("job")) if j.get("ok") else None for j in jobs]
    seed.stop()
    if any((v or {}).get("state") != "done" for v in done):
        return fail(f"retune: seeding: {jobs} {done}")
    d = Daemon("retune", db=db, args=("--retune-compatible",))
    if not d.start():
        return fail("retune: daemon did not start: " + d.logtext())
    first = {k: d.call({"op": "get", "kernel": k, "rows": 8, "cols": 1024})
             for k in ("softmax", "softmax_bwd")}
    second = {k: d.call({"op": "get", "kernel": k, "rows": 8, "cols": 1024})
              for k in ("softmax", "softmax_bwd")}
    d.stop()
    if any(r.get("source") != "compatible" for r in first.values()):
        fail(f"retune: not compatible answers: {first}")
    elif any(r.get("job") is None for r in first.values()) or \
            first["softmax"]["job"] == first["softmax_bwd"]["job"]:
        fail(f"retune: each kind's first compatible answer did not queue its own tune: {first}")
    elif any("job" in r and r.get("source") == "compatible" for r in second.values()):
        fail(f"retune: a second compatible answer queued again: {second}")
    else:
        ok("retune: one quick tune queued per kind of the key")


def case_cap():
    # fp32 1048576 x 104858: 0.4 TiB a tensor: two under 1 TiB, three over.
    big = {"rows": 1048576, "cols": 104858, "dtype": "fp32"}
    # fp32 1048576 x 7152: 30 GB a tensor: two fit the fake GPU's 80 GiB, three do not.
    mem = {"rows": 1048576, "cols": 7152, "dtype": "fp32"}
    d = Daemon("cap")
    if not d.start():
        return fail("cap: daemon did not start: " + d.logtext())
    fwd_big = d.call({"op": "tune", "kernel": "softmax", **big})
    bwd_big = d.call({"op": "tune", "kernel": "softmax_bwd", **big})
    get_bwd_big = d.call({"op": "get", "kernel": "log_softmax_bwd", **big})
    fwd_mem = d.call({"op": "get", "kernel": "softmax", **mem})
    bwd_mem = d.call({"op": "get", "kernel": "softmax_bwd", **mem})
    d.stop()
    err = lambda r: (r.get("error") or {})  # noqa: E731
    if err(bwd_big).get("code") != "too_big" or "1 TiB" not in err(bwd_big).get("message", "") or \
            err(get_bwd_big).get("code") != "too_big" or \
            "1 TiB" not in err(get_bwd_big).get("message", ""):
        fail(f"cap: a backward kind 0.4 TiB a tensor is not over the 1 TiB cap: {bwd_big} "
             f"{get_bwd_big}")
    elif "1 TiB" in err(fwd_big).get("message", ""):
        fail(f"cap: softmax 0.4 TiB a tensor is over the 1 TiB cap: {fwd_big}")
    elif not fwd_mem.get("ok") or err(bwd_mem).get("code") != "too_big":
        fail(f"cap: the GPU memory cap: softmax {fwd_mem}, softmax_bwd {bwd_mem}")
    else:
        ok("cap: a backward kind's three tensors count against the 1 TiB and memory caps")


def case_params():
    d = Daemon("params", env={"TUNED_TEST_FAKE_MS": "30"})
    if not d.start():
        return fail("params: daemon did not start: " + d.logtext())
    key = {"kernel": "router_topk", "rows": 64, "cols": 128}
    p = "k=4,score=sigmoid"
    a = d.call({"op": "tune", **key, "params": p, "budget": 4})
    b = d.call({"op": "tune", **key, "params": "k=6", "budget": 4})
    c = d.call({"op": "tune", **key, "params": "score=sigmoid,k=4", "budget": 4})
    va = wait_job(d, a.get("job"), 120) if a.get("ok") else None
    vb = wait_job(d, b.get("job"), 120) if b.get("ok") else None
    g = d.call({"op": "get", **key, "params": p})
    other = d.call({"op": "get", **key, "params": "k=5"})
    bad = {q: d.call({"op": "get", **key, "params": q})
           for q in ("k=100", "k=200", "groups=7", "k=4,color=red", "k=x")}
    soft = d.call({"op": "get", "rows": 64, "cols": 128, "params": "k=4"})
    rc, out, err = run("tune", "--socket", d.sock, "--kernel", "router_topk", "--shape",
                       "64x128:k=6", "--budget", "4", "-q")
    rc_g, out_g, _ = run("get", "--socket", d.sock, "--kernel", "router_topk", "--shape",
                         "64x128:k=6", "--json")
    rc_bad, _, err_bad = run("get", "--socket", d.sock, "--kernel", "router_topk", "--shape",
                             "64x128:k=999")
    jobs = d.call({"op": "stats"})["jobs"]
    d.stop()
    rc_l, out_l, _ = run("list", "--db", d.db)
    # an export and its import into a fresh store keep the parameters
    exported = os.path.join(tmp, "params.jsonl")
    rc_e, out_e, err_e = run("export", "--db", d.db)
    with open(exported, "w") as f:
        f.write(out_e or "")
    rc_i, _, err_i = run("import", exported, "--db", os.path.join(tmp, "params-imported"))
    rc_l2, out_l2, _ = run("list", "--db", os.path.join(tmp, "params-imported"))
    rec = g.get("record") or {}
    err = lambda r: (r.get("error") or {})  # noqa: E731
    if not a.get("ok") or (va or {}).get("state") != "done" or (va or {}).get("params") != p:
        fail(f"params: the tune of {p}: {a} {va}")
    elif not b.get("ok") or b.get("joined") or b.get("job") == a.get("job") or \
            (vb or {}).get("params") != "k=6":
        fail(f"params: k=6 joined the k=4 job or lost its parameters: {a} {b} {vb}")
    elif not c.get("joined") or c.get("job") != a.get("job"):
        fail(f"params: the same parameters written in another order did not join: {a} {c}")
    elif g.get("source") != "exact" or rec.get("params") != p or rec.get("cols") != 128:
        fail(f"params: get of {p}: {g}")
    elif other.get("source") == "exact" or (other.get("record") or {}).get("params") == p:
        fail(f"params: k=5 was answered with another key's record: {other}")
    elif any(err(r).get("code") != "bad_value" for r in bad.values()) or \
            "k 100 out of range (1 to 64)" not in err(bad["k=100"]).get("message", "") or \
            "1 to 64" not in err(bad["k=200"]).get("message", "") or \
            "divide" not in err(bad["groups=7"]).get("message", "") or \
            err(soft).get("code") != "bad_value":
        fail(f"params: bad parameters: {bad} softmax: {soft}")
    elif rc != 0 or rc_g != 0 or json.loads(out_g or "{}").get("source") != "exact":
        fail(f"params: the CLI's --shape 64x128:k=6: tune exit {rc} {err}, get {rc_g} {out_g}")
    elif rc_bad != 2 or "k=999" not in err_bad or "1 to 64" not in err_bad:
        fail(f"params: --shape 64x128:k=999: exit {rc_bad}: {err_bad}")
    elif rc_e != 0 or rc_i != 0 or rc_l2 != 0 or "64x128:k=4,score=sigmoid" not in out_l2:
        fail(f"params: export {rc_e} {err_e}, import {rc_i} {err_i}: {out_l2}")
    elif jobs.get("submitted") != 2 or rc_l != 0 or "64x128:k=4,score=sigmoid" not in out_l or \
            "64x128:k=6/" not in out_l:
        fail(f"params: jobs {jobs}; tuned list: {out_l}")
    else:
        ok("params: key parameters travel through tune, jobs, get, the CLI and list; other "
           "parameters are another key; bad ones are refused by name")


CASES = [case_tune, case_unknown, case_cli, case_flight, case_retune, case_cap, case_params]


def main():
    probe = Daemon("probe")
    if not probe.start():
        fail("probe: daemon did not start: " + probe.logtext())
        return 1
    fake = (probe.call({"op": "stats"}).get("gpus") or [{}])[0].get("test_only_fake")
    probe.stop()
    if fake is not True:
        print("no test-only fake GPU (a build without test hooks): skipped")
        return 77
    only = sys.argv[2:]
    for case in CASES:
        if only and case.__name__[5:] not in only:
            continue
        try:
            case()
        except Exception as e:  # a case that crashed is a failed case, not a stopped suite
            fail(f"{case.__name__}: {type(e).__name__}: {e}")
    return 1 if tally.failures else 0


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    finally:
        for d in DAEMONS:
            if d.p is not None and d.p.poll() is None:
                d.p.kill()
                d.p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{tally.failures} failures")
    sys.exit(rc)
