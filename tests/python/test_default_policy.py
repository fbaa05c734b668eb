"""test_default_policy.py TUNED LIBTUNED STUB_CUDA_DIR SOURCE_ROOT: who tunes
for the Python default handle when $TUNED_POLICY is unset, on the test
stand-in driver (tests/stub_cuda: tuned_open succeeds without a GPU) with a
fake `tuned` ($TUNED_BIN) that notes its arguments and reports one
generation.

  no daemon   the default handle takes the process policy: a lookup of a
              shape with no record starts one child tune into the user's
              store ($TUNED_DB), and one line on stderr says so and where
              the winner goes (once, though the shape is asked for twice)
  failing     a child tune that fails: one line on stderr says why, and the
              shape's choice says the tune failed
  never       TUNED_POLICY=never: no child, no line
  daemon      where a daemon answers on the socket (TUNED's serve), the
              policy is "daemon"; TUNED_POLICY=daemon keeps it without one

Exit 77 where NVRTC cannot be loaded (tuned_open needs it)."""
import os
import socket
import subprocess
import sys
import tempfile
import time

TUNED, LIB, STUB, ROOT = (os.path.abspath(a) for a in sys.argv[1:5])
failed = 0


def check(cond, what, detail=""):
    global failed
    print(("ok    " if cond else "FAIL  ") + what + ("" if cond else f": {detail}"))
    failed += not cond


tmp = tempfile.mkdtemp(prefix="tuned-policy-")
ran = os.path.join(tmp, "ran")
fake = os.path.join(tmp, "fake-tuned")
with open(fake, "w") as f:
    f.write("#!/bin/sh\n"
            f"echo \"$@\" >> '{ran}'\n"
            "echo '{\"progress\":{\"state\":\"running\",\"generation\":0,\"evaluated\":1,"
            "\"failed\":0,\"budget\":60,\"best_config\":null,\"best_us\":null,\"copy_us\":1.0,"
            "\"elapsed_s\":0.1,\"device\":0}}' >&2\n")
os.chmod(fake, 0o755)
env = {k: v for k, v in os.environ.items() if not k.startswith("TUNED_")}
env.update(PYTHONPATH=os.path.join(ROOT, "bindings", "python"), TUNED_LIBRARY=LIB,
           TUNED_BIN=fake, TUNED_DB=os.path.join(tmp, "store"),
           TUNED_SOCKET=os.path.join(tmp, "none.sock"),
           LD_LIBRARY_PATH=STUB + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else ""))

CODE = """
import sys, time, tuned
from tuned import handle
try:
    h = handle.default_handle()
except tuned.TunedError as exc:
    print("OPEN FAILED", exc); sys.exit(77 if exc.code == -4 else 1)
print("policy", h.policy)
for _ in range(2):
    tuned.lookup(128, 4096)
    time.sleep(0.3)
deadline = time.time() + 20
while time.time() < deadline and handle.default_handle().lookup(128, 4096).tune in ("queued",):
    time.sleep(0.1)
print("tune", handle.default_handle().lookup(128, 4096).tune)
"""


def run(extra):
    if os.path.exists(ran):
        os.remove(ran)
    p = subprocess.run([sys.executable, "-c", CODE], env=dict(env, **extra), capture_output=True,
                       text=True, timeout=120, cwd=tmp)
    if p.returncode == 77:
        print("SKIP: " + p.stdout.strip())
        sys.exit(77)
    return p


p = run({})
lines = [l for l in p.stderr.splitlines() if l.startswith("tuned: tuning")]
check(p.returncode == 0 and "policy process" in p.stdout, "no daemon: the process policy",
      p.stdout + p.stderr)
args = open(ran).read() if os.path.exists(ran) else ""
check(args.count("tune ") == 1 and "--shape 128x4096" in args and
      f"--db {os.path.join(tmp, 'store')}" in args, "one child tune into $TUNED_DB", args)
check(len(lines) == 1 and "128x4096 fp16 on GPU 0" in lines[0] and os.path.join(tmp, "store") in lines[0],
      "one line on stderr, with the store", p.stderr)

fail_fake = os.path.join(tmp, "failing-tuned")
with open(fail_fake, "w") as f:
    f.write("#!/bin/sh\necho 'nvrtc: a planted failure' >&2\nexit 1\n")
os.chmod(fail_fake, 0o755)
p = run({"TUNED_BIN": fail_fake})
failures = [l for l in p.stderr.splitlines() if l.startswith("tuned: the background tune")]
check(p.returncode == 0 and "tune failed" in p.stdout and len(failures) == 1 and
      "128x4096 fp16 on GPU 0 failed" in failures[0] and "a planted failure" in failures[0] and
      "default config keeps serving" in failures[0],
      "a failed child tune: one line on stderr, saying why", p.stdout + p.stderr)

p = run({"TUNED_POLICY": "never"})
check(p.returncode == 0 and "policy never" in p.stdout and not os.path.exists(ran) and
      "tuned: tuning" not in p.stderr, "TUNED_POLICY=never: no child, no line", p.stdout + p.stderr)

p = run({"TUNED_POLICY": "daemon"})
check("policy daemon" in p.stdout and not os.path.exists(ran), "TUNED_POLICY=daemon kept",
      p.stdout + p.stderr)

sock = os.path.join(tmp, "d.sock")
log = open(os.path.join(tmp, "daemon.log"), "w")
daemon = subprocess.Popen([TUNED, "serve", "--socket", sock, "--db", os.path.join(tmp, "ddb")],
                          env=dict(env, TUNED_TEST_FAKE_GPU="1", TUNED_TEST_FAKE_MS="1"),
                          stdout=log, stderr=subprocess.STDOUT)
try:
    for _ in range(200):  # started once it accepts (the file comes a moment before)
        try:
            with socket.socket(socket.AF_UNIX) as probe:
                probe.connect(sock)
            break
        except OSError:
            time.sleep(0.05)
    p = run({"TUNED_SOCKET": sock})
    check("policy daemon" in p.stdout and not os.path.exists(ran),
          "a daemon answers: the daemon policy", p.stdout + p.stderr)
finally:
    daemon.terminate()
    daemon.wait(20)
    log.close()
if not failed:
    subprocess.run(["rm", "-rf", tmp])
print(f"default policy: {failed} failed")
sys.exit(1 if failed else 0)
