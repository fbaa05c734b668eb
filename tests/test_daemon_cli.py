#!/usr/bin/env python3
"""test_daemon_cli.py TUNED: what the daemon answers for kernels other than
softmax, the `tuned` CLI through a daemon against the same CLI on the
store, and the daemon's table of finished jobs, with the real binary, real daemons on Unix sockets in a temporary
directory and the test-only fake GPU (TUNED_TEST_FAKE_GPU).

The store: softmax 8x1024, tuned on the fake GPU, and log_softmax 8x1536,
the same record imported under that kernel and shape, with the daemon's
default config of log_softmax 8x2048.

  nearest    `get` of log_softmax 8x2048 answers nearest from the
             log_softmax record, never from the softmax one; a kernel
             with no record answers default
  list       `list` without "kernel" lists every kernel's records, and
             `tuned list --socket` the same keys as `tuned list --db`
  get-compatible  `tuned get` through a daemon prints a compatible answer
             (another driver) with what differs and exits 0, as on the
             store; a nearest answer exits 3
  effort     `tuned tune --effort quick` through a daemon runs quick's
             first population and finalist rounds; a --seed above 2^63-1
             is refused (exit 2), not dropped
  history    with a history of 4 finished jobs, a job that finishes after 6
             jobs submitted later is kept (finished jobs are dropped in the
             order they finished)
  sockets    `serve --group G` makes a missing socket directory 0750 of
             group G (members reach the socket); `serve` without --socket
             listens in $XDG_RUNTIME_DIR when it is set
Exit 0 when every case passed, 77 in a build without the test hooks."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from daemon_client import (FAKE_GPU_ENV, Client, FakeGpuServe, Tally, call_once, run_tuned,
                           stop_process, wait_job)

TUNED = os.path.abspath(sys.argv[1])
tmp = tempfile.mkdtemp(prefix="test_daemon_cli.")
DAEMONS = []


tally = Tally()
fail, ok = tally.fail, tally.ok


def run(*args, env=None, timeout=60):
    return run_tuned(TUNED, *args, env=env, timeout=timeout)


def Daemon(name, db=None, env=None, args=()):
    """tuned serve on the fake GPU in a folder of its own."""
    return FakeGpuServe(TUNED, os.path.join(tmp, name), DAEMONS, db=db, env=env, args=args)


def seed_store(db):
    """softmax 8x1024 tuned on the fake GPU, then log_softmax 8x1536 (its
    record under another kernel and shape) imported; True when both are
    stored."""
    d = Daemon("seed", db=db)
    if not d.start():
        fail("seed: daemon did not start: " + d.logtext())
        return False
    # A config valid for log_softmax 8x2048 (the softmax winner is not),
    # so that the record can serve that shape as nearest: the default, asked
    # while the store is empty.
    config = d.call({"op": "get", "rows": 8, "cols": 2048, "kernel": "log_softmax"})["config"]
    rc, _, err = run("tune", "--socket", d.sock, "--shape", "8x1024", "--budget", "8", "-q")
    d.stop()
    if rc != 0:
        fail(f"seed: tune exited {rc}: {err}")
        return False
    rc, out, err = run("export", "--db", db)
    if rc != 0:
        fail(f"seed: export exited {rc}: {err}")
        return False
    header, line = out.splitlines()[:2]
    rec = dict(json.loads(line), kernel="log_softmax", cols=1536, config=config)
    path = os.path.join(tmp, "log_softmax.jsonl")
    with open(path, "w") as f:
        f.write(header + "\n" + json.dumps(rec) + "\n")
    rc, _, err = run("import", "--db", db, path)
    if rc != 0:
        fail(f"seed: import exited {rc}: {err}")
        return False
    return True


def record_of(reply):
    r = (reply or {}).get("record") or {}
    return r.get("kernel"), r.get("rows"), r.get("cols")


# ---- cases ----

def case_nearest(db):
    d = Daemon("nearest", db=db)
    if not d.start():
        return fail("nearest: daemon did not start: " + d.logtext())
    log = d.call({"op": "get", "rows": 8, "cols": 2048, "kernel": "log_softmax"})
    soft = d.call({"op": "get", "rows": 8, "cols": 2048})
    bwd = d.call({"op": "get", "rows": 8, "cols": 2048, "kernel": "softmax_bwd"})
    d.stop()
    if log.get("source") != "nearest" or record_of(log) != ("log_softmax", 8, 1536):
        fail(f"nearest: log_softmax 8x2048 is not answered from the log_softmax record: {log}")
    elif soft.get("source") != "nearest" or record_of(soft) != ("softmax", 8, 1024):
        fail(f"nearest: softmax 8x2048 is not answered from the softmax record: {soft}")
    elif bwd.get("source") != "default" or "record" in bwd:
        fail(f"nearest: softmax_bwd (no record of it) is answered from another kernel: {bwd}")
    else:
        ok("nearest: each kernel's nearest record is its own (log_softmax 8x1536, softmax "
           "8x1024); softmax_bwd, with none, gets the default")


def keys_listed(text):
    """The KEY column of `tuned list`'s table."""
    return sorted(line.split()[-1] for line in text.splitlines()[1:] if line.strip())


def case_list(db):
    d = Daemon("list", db=db)
    if not d.start():
        return fail("list: daemon did not start: " + d.logtext())
    every = d.call({"op": "list"})
    log = d.call({"op": "list", "kernel": "log_softmax"})
    soft = d.call({"op": "list", "kernel": "softmax"})
    rc_d, out_d, err_d = run("list", "--socket", d.sock)
    d.stop()
    rc_s, out_s, err_s = run("list", "--db", db)
    if every.get("count") != 2 or log.get("count") != 1 or soft.get("count") != 1:
        fail(f"list: counts without a kernel, of log_softmax, of softmax: {every.get('count')}, "
             f"{log.get('count')}, {soft.get('count')} (want 2, 1, 1)")
    elif rc_d != 0 or rc_s != 0 or keys_listed(out_d) != keys_listed(out_s):
        fail(f"list: the daemon lists {keys_listed(out_d)} (exit {rc_d}, {err_d.strip()}), the "
             f"store {keys_listed(out_s)} (exit {rc_s}, {err_s.strip()})")
    else:
        ok(f"list: without a kernel every kernel's record, as the store lists them "
           f"({', '.join(keys_listed(out_d))})")


def case_get_compatible(db):
    """A daemon whose fake GPU has another driver than the record's: `tuned
    get` through it prints the compatible answer and exits 0, as the store's
    get does; only a nearest answer is "no record" (exit 3)."""
    d = Daemon("compatible", db=db, env={"TUNED_TEST_FAKE_DRIVER": "1"})
    if not d.start():
        return fail("get-compatible: daemon did not start: " + d.logtext())
    raw = d.call({"op": "get", "rows": 8, "cols": 1024})
    rc, out, err = run("get", "--socket", d.sock, "--shape", "8x1024")
    rc_j, out_j, _ = run("get", "--socket", d.sock, "--shape", "8x1024", "--json")
    rc_n, _, err_n = run("get", "--socket", d.sock, "--shape", "8x2048")
    d.stop()
    answer = json.loads(out_j) if rc_j == 0 else {}
    if raw.get("source") != "compatible":
        fail(f"get-compatible: the daemon's answer is not compatible: {raw}")
    elif rc != 0 or "source       compatible" not in out or "differs      driver" not in out:
        fail(f"get-compatible: tuned get exited {rc}: {out} {err}")
    elif answer.get("source") != "compatible" or "driver" not in answer.get("differs", ""):
        fail(f"get-compatible: tuned get --json exited {rc_j}: {out_j}")
    elif rc_n != 3 or "nearest stored shape 8x1024" not in err_n:
        fail(f"get-compatible: a nearest answer: exit {rc_n}: {err_n}")
    else:
        ok(f"get-compatible: printed with exit 0 ({answer['differs']}); a nearest one exit 3")


def first_generation(d, job, timeout=60):
    """Variants job had evaluated when its generation 0 (its first
    population) ended, polled every 10 ms; None if that went unseen. The
    job reports generation -1 until then, however many it evaluated."""
    c = Client(d.sock)
    try:
        deadline = time.time() + timeout
        while time.time() < deadline:
            r = c.call({"op": "job", "job": job})
            v = r.get("job") or {}
            if not r.get("ok"):  # not submitted yet
                time.sleep(0.01)
                continue
            if v.get("generation") == 0:
                return v["evaluated"]
            if v.get("generation", -1) > 0:  # generation 0 ended unseen
                return None
            if v.get("state") not in ("queued", "running"):
                return None
            time.sleep(0.01)
        return None
    finally:
        c.close()


def case_effort(db):
    """`tuned tune --effort quick` through a daemon runs quick's search
    (its first population 16, 2 finalist rounds), not the default one (40,
    3), and its progress says "gen -" until the first generation ends; a
    seed the protocol cannot carry is refused, not dropped."""
    del db  # a store of its own
    d = Daemon("effort", env={"TUNED_TEST_FAKE_MS": "30"})
    if not d.start():
        return fail("effort: daemon did not start: " + d.logtext())
    cli = subprocess.Popen([TUNED, "tune", "--socket", d.sock, "--shape", "64x8192", "--effort",
                            "quick"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    first = first_generation(d, 1)
    _, err = cli.communicate(timeout=120)
    rc_seed, out_seed, err_seed = run("tune", "--socket", d.sock, "--shape", "64x4096",
                                      "--seed", "18446744073709551615")
    jobs = d.call({"op": "stats"})["jobs"]
    d.stop()
    log = d.logtext()
    if cli.returncode != 0:
        fail(f"effort: tuned tune --effort quick exited {cli.returncode}: {err}")
    elif first != 16:
        fail(f"effort: quick's first generation evaluated {first} variants, not its population 16")
    elif ": gen -  tried " not in err or "gen -1" in err:
        fail(f"effort: the progress before the first generation ends is not 'gen -': {err}")
    elif "population 16, 2 finalist rounds" not in log:
        fail(f"effort: the job's log line does not say quick's search: {log}")
    elif rc_seed != 2 or len(err_seed.splitlines()) != 1 or "--seed" not in err_seed or \
            jobs["submitted"] != 1:
        fail(f"effort: a seed above 2^63-1: exit {rc_seed}, {err_seed!r}, jobs {jobs}")
    else:
        ok(f"effort: quick through the daemon: first generation {first} variants, 2 finalist "
           f"rounds; a seed above 2^63-1 refused: {err_seed.strip()}")


def case_history(db):
    """With a history of 4 finished jobs: job 1 hangs on a planted variant
    on one GPU while the other finishes 6 jobs submitted after it; when job
    1 finishes, it is the newest finished job and is kept (jobs were
    dropped in submission order: job 1 was forgotten the moment it
    finished)."""
    del db  # stores of their own
    probe = Daemon("history-probe")
    if not probe.start():
        return fail("history: probe daemon did not start: " + probe.logtext())
    hang = probe.call({"op": "get", "rows": 64, "cols": 8192})["config"]
    small = [(8, c) for c in range(256, 4096, 64)
             if probe.call({"op": "get", "rows": 8, "cols": c})["config"] != hang][:6]
    probe.stop()
    d = Daemon("history", env={"TUNED_TEST_FAKE_GPU": "2", "TUNED_TEST_FAKE_HANG": hang,
                               "TUNED_TEST_JOB_HISTORY": "4"},
               args=("--limit", "variant-timeout=2"))
    if not d.start():
        return fail("history: daemon did not start: " + d.logtext())
    long = d.call({"op": "tune", "rows": 64, "cols": 8192, "budget": 20})
    ends = []
    for rows, cols in small:
        r = d.call({"op": "tune", "rows": rows, "cols": cols, "budget": 1})
        ends.append(wait_job(d, r.get("job")) if r.get("ok") else r)
    first = wait_job(d, long.get("job"), 60)
    again = d.call({"op": "job", "job": long.get("job")})
    d.stop()
    if not long.get("ok") or len(small) != 6 or \
            any((v or {}).get("state") != "done" for v in ends):
        fail(f"history: the jobs did not run: {long}, {small}, {ends}")
    elif first is None or first.get("state") != "done" or first.get("crashes") != 1:
        fail(f"history: job 1 (a planted hang, then resumed) did not end done: {first}")
    elif not again.get("ok") or again["job"].get("state") != "done":
        fail(f"history: job 1, just finished, was forgotten: {again}")
    else:
        ok("history: the job that finished last is kept, although 6 jobs submitted after it "
           "finished before it (history 4)")


def other_group():
    """A group this process may give a file: another of its own, or any
    other as root; None when there is none."""
    import grp
    if os.geteuid() == 0:
        mine = {os.getegid()}
        return next((g.gr_name for g in grp.getgrall() if g.gr_gid not in mine), None)
    gids = [g for g in os.getgroups() if g != os.getegid()]
    return grp.getgrgid(gids[0]).gr_name if gids else None


def case_sockets(db):
    import grp
    import stat
    group = other_group()
    if group is None:
        print("sockets: --group part skipped (this process has no second group)")
    else:
        d = Daemon("group", db=db, args=("--group", group))
        d.sock = os.path.join(tmp, "group", "made", "s.sock")
        started = d.start()
        st = os.stat(os.path.dirname(d.sock)) if started else None
        d.stop()
        want = grp.getgrnam(group).gr_gid
        if not started:
            fail("sockets: serve --group did not start: " + d.logtext())
        elif st.st_gid != want or stat.S_IMODE(st.st_mode) != 0o750:
            fail(f"sockets: the socket directory serve made for --group {group} is mode "
                 f"{stat.S_IMODE(st.st_mode):o}, group {st.st_gid} (want 750, group {want})")
        else:
            ok(f"sockets: serve --group {group} made the socket's directory 0750 of group {group}")
    # The default path: $XDG_RUNTIME_DIR's when it is set (that a daemon at
    # the service's path does not change it is test_client's: this suite
    # runs beside others that look there).
    xdg = os.path.join(tmp, "xdg")
    os.makedirs(xdg, mode=0o700)
    env = {k: v for k, v in os.environ.items() if k != "TUNED_SOCKET"}
    env.update(FAKE_GPU_ENV, XDG_RUNTIME_DIR=xdg)
    log = open(os.path.join(tmp, "xdg.log"), "w+")
    p = subprocess.Popen([TUNED, "serve", "--db", os.path.join(tmp, "xdg-db")], stdout=log,
                         stderr=log, env=env)
    sock = os.path.join(xdg, "tuned", "tuned.sock")
    deadline = time.time() + 30
    while time.time() < deadline and p.poll() is None and not os.path.exists(sock):
        time.sleep(0.05)
    listening = p.poll() is None and os.path.exists(sock)
    stop_process(p)
    log.seek(0)
    if not listening:
        fail(f"sockets: serve without --socket did not listen at {sock}: " + log.read())
    else:
        ok("sockets: serve without --socket listens at $XDG_RUNTIME_DIR/tuned")


CASES = [case_nearest, case_list, case_get_compatible, case_effort, case_history, case_sockets]


def main():
    db = os.path.join(tmp, "store")
    probe = Daemon("probe")
    if not probe.start():
        fail("probe: daemon did not start: " + probe.logtext())
        return 1
    fake = (probe.call({"op": "stats"}).get("gpus") or [{}])[0].get("test_only_fake")
    probe.stop()
    if fake is not True:
        print("no test-only fake GPU (a build without test hooks): skipped")
        return 77
    if not seed_store(db):
        return 1
    only = sys.argv[2:]
    for case in CASES:
        if only and case.__name__[5:] not in only:
            continue
        try:
            case(db)
        except Exception as e:  # a case that crashed is a failed case, not a stopped suite
            fail(f"{case.__name__}: {type(e).__name__}: {e}")
    return 1 if tally.failures else 0


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    finally:
        for d in DAEMONS:  # a case that failed half way leaves none running
            if d.p is not None and d.p.poll() is None:
                d.p.kill()
                d.p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{tally.failures} failures")
    sys.exit(rc)
