#!/usr/bin/env python3
"""test_hooks.py TUNED LIBTUNED present|absent: whether a build holds the
test hooks (the fake GPU, the planted fault, the store's commit hook).

They belong in a build configured with -Dtest_hooks=true and nowhere else.
`absent` checks a default build, the one that is installed: with
TUNED_TEST_FAKE_GPU=1 in its environment `tuned devices` finds no fake GPU
(and, on a machine without a driver, says there is no CUDA driver), `tuned
serve` starts no fake worker (its stats list no test-only GPU), and neither
the executable nor libtuned has a fake-GPU, planted-fault or test-hook
symbol, or the name of a TUNED_TEST_* variable among its strings. `present`
checks a hooks build the same way and expects the opposite, so the checks
are seen to tell the two apart. Exit 0 when the build is as expected."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HOOK_SYMBOLS = ("fake", "plant_fault", "planted_fault", "test_hook")
HOOK_VARIABLES = (b"TUNED_TEST_FAKE_GPU", b"TUNED_TEST_FAKE_MS", b"TUNED_TEST_FAKE_FAULT",
                  b"TUNED_TEST_FAKE_HANG", b"TUNED_TEST_PLANT_FAULT", b"TUNED_TEST_JOB_HISTORY")
failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL:", msg)


def hook_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNED_")}
    env.update({"TUNED_TEST_FAKE_GPU": "1", "TUNED_TEST_FAKE_MS": "1"})
    return env


def hook_symbols(path):
    """The symbols of path (symbol table and dynamic table) that name a hook."""
    found = set()
    for args in (["nm"], ["nm", "-D"]):
        p = subprocess.run(args + [path], capture_output=True, text=True)
        if p.returncode != 0 and "no symbols" not in p.stderr:
            fail(f"nm {path}: {p.stderr.strip()}")
        for line in p.stdout.splitlines():
            name = line.split()[-1] if line.split() else ""
            if any(h in name for h in HOOK_SYMBOLS):
                found.add(name)
    return sorted(found)


def hook_strings(path):
    with open(path, "rb") as f:
        data = f.read()
    return [v.decode() for v in HOOK_VARIABLES if v in data]


def daemon_stats(tuned, tmp):
    """Starts `tuned serve` with the fake GPU asked for; its stats reply
    and its log."""
    sock = os.path.join(tmp, "s.sock")
    log_path = os.path.join(tmp, "log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([tuned, "serve", "--socket", sock, "--db",
                                 os.path.join(tmp, "db")], env=hook_env(),
                                stdout=log, stderr=subprocess.STDOUT)
    stats = None
    try:
        deadline = time.monotonic() + 30
        while stats is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(10)
                    s.connect(sock)
                    s.sendall(b'{"op":"stats"}\n')
                    reply = b""
                    while not reply.endswith(b"\n"):
                        chunk = s.recv(65536)
                        if not chunk:
                            break
                        reply += chunk
                    stats = json.loads(reply)
            except (FileNotFoundError, ConnectionRefusedError):
                time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    with open(log_path, errors="replace") as f:
        log_text = f.read()
    if stats is None:
        fail(f"no stats from the daemon (exit {proc.returncode}); log:\n{log_text}")
    elif proc.returncode != 0:
        fail(f"the daemon exited {proc.returncode} after SIGTERM; log:\n{log_text}")
    return stats or {}, log_text


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in ("present", "absent"):
        print("usage: test_hooks.py TUNED LIBTUNED present|absent", file=sys.stderr)
        return 2
    tuned, libtuned, want = sys.argv[1], sys.argv[2], sys.argv[3]
    present = want == "present"
    if shutil.which("nm") is None:
        fail("nm (binutils) is not on PATH: the symbols cannot be checked")
        return 1

    # `tuned devices` never used the fake GPU; it must not start to.
    p = subprocess.run([tuned, "devices"], env=hook_env(), capture_output=True, text=True,
                       timeout=120)
    out = p.stdout + p.stderr
    if "fake" in out.lower():
        fail(f"tuned devices reports a fake GPU:\n{out}")
    if p.returncode != 0 and "no CUDA driver" not in out:
        fail(f"tuned devices failed (exit {p.returncode}) without saying there is no driver:\n{out}")
    print(f"devices with TUNED_TEST_FAKE_GPU=1: {out.strip().splitlines()[0] if out.strip() else ''}")

    tmp = tempfile.mkdtemp(prefix="tuned-hooks-")
    try:
        stats, log_text = daemon_stats(tuned, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    gpus = stats.get("gpus", [])
    fake = [g for g in gpus if g.get("test_only_fake")]
    print(f"serve with TUNED_TEST_FAKE_GPU=1: {len(gpus)} GPU(s), {len(fake)} fake; "
          f"no_gpu: {stats.get('no_gpu')}")
    if present and (len(fake) != 1 or "TEST ONLY" not in log_text):
        fail(f"a hooks build runs no fake worker: stats {json.dumps(stats)}\nlog:\n{log_text}")
    if not present and (fake or "TEST ONLY" in log_text or "fake" in json.dumps(gpus).lower()):
        fail(f"a build without hooks runs a fake worker: stats {json.dumps(stats)}\n"
             f"log:\n{log_text}")

    for path in (tuned, libtuned):
        symbols = hook_symbols(path)
        strings = hook_strings(path)
        print(f"{os.path.basename(path)}: hook symbols {symbols or 'none'}, "
              f"hook variables {strings or 'none'}")
        if not present and (symbols or strings):
            fail(f"{path} holds test hooks: {symbols + strings}")
    # The hooks build's executable holds them all: the checks above can see them.
    if present:
        symbols = hook_symbols(tuned)
        for name in ("tuned__fake_gpu_enabled", "tuned__store_set_test_hook"):
            if not any(s == name or s.startswith(name + ".") for s in symbols):
                fail(f"a hooks build's {tuned} lacks {name}: {symbols}")
        if b"TUNED_TEST_PLANT_FAULT".decode() not in hook_strings(tuned):
            fail(f"a hooks build's {tuned} does not read TUNED_TEST_PLANT_FAULT")

    print(f"test hooks {want}: {'ok' if failures == 0 else f'{failures} failure(s)'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
