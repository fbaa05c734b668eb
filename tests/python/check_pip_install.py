"""check_pip_install.py TUNED SOURCE_ROOT VERSION VENV [--test-hooks]: the package that
`pip install .` put into the virtual environment VENV, run by VENV's python
with no TUNED_* variable set (tests/test_pip_install.sh). Prints one line
per check and `N passed, N failed`; exits 1 on a failure.

  package     `import tuned` is VENV's copy, with every module of
              bindings/python/tuned, libtuned.so.0 and bin/tuned inside it
  library     tuned.version() is VERSION and the header's version, from
              the copy inside the package
  executable  the `tuned` command and `python -m tuned` run the packaged
              tuned, which a Handle passes to libtuned for child tunes
  client      tuned.Client against TUNED serve (the test build's, with its
              test-only fake GPU) on a temporary socket: ping, get, tune,
              wait, get exact (without --test-hooks, the build's
              -Dtest_hooks=true, and without a GPU: ping only, the rest
              skipped, said so)
  no GPU      where there is no CUDA driver: a Handle raises TunedError
              saying which part is missing (and the process lives on);
              tuned.softmax without torch raises ImportError saying so
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

TUNED, ROOT, VERSION, VENV = (os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]),
                              sys.argv[3], os.path.abspath(sys.argv[4]))
TEST_HOOKS = "--test-hooks" in sys.argv[5:]

passed = failed = 0


def check(cond, what, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok    {what}")
    else:
        failed += 1
        print(f"FAIL  {what}" + (f": {detail}" if detail else ""))


assert not any(k.startswith("TUNED_") for k in os.environ), "run with no TUNED_* variables"

import tuned  # noqa: E402
from tuned import _lib  # noqa: E402

# ---- package
pkg = os.path.dirname(os.path.abspath(tuned.__file__))
check(pkg.startswith(VENV + os.sep), "tuned is imported from the venv", pkg)
source_modules = sorted(f for f in os.listdir(os.path.join(ROOT, "bindings", "python", "tuned"))
                        if f.endswith(".py"))
installed_modules = sorted(f for f in os.listdir(pkg) if f.endswith(".py"))
check(installed_modules == source_modules, "every module of bindings/python/tuned is installed",
      f"installed {installed_modules}, source {source_modules}")
check(os.path.isfile(os.path.join(pkg, "libtuned.so.0")), "libtuned.so.0 inside the package")

# ---- library
header = open(os.path.join(ROOT, "include", "tuned.h")).read()
header_version = re.search(r'#define TUNED_VERSION_STRING "([^"]+)"', header).group(1)
v = tuned.version()
check(v == VERSION == header_version, "tuned.version() is the project's and the header's",
      f"library {v}, meson {VERSION}, header {header_version}")
check(_lib.loaded_path() == os.path.join(pkg, "libtuned.so.0"),
      "the library loaded is the package's copy", str(_lib.loaded_path()))
check(_lib.has("tuned_softmax_backward") == hasattr(_lib.load(), "tuned_softmax_backward"),
      "the optional kernels are found by their exports")

# ---- executable
exe = _lib.bundled_executable()
check(exe == os.path.join(pkg, "bin", "tuned"), "the tuned executable inside the package", str(exe))
for cmd in ([os.path.join(VENV, "bin", "tuned"), "--help"], [sys.executable, "-m", "tuned", "--help"]):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and "usage: tuned" in p.stdout + p.stderr, f"{' '.join(cmd[-3:])} runs",
          f"rc {p.returncode}: {(p.stdout + p.stderr)[:300]}")

# ---- client against the real daemon
tmp = tempfile.mkdtemp(prefix="tuned-pip-")
sock = os.path.join(tmp, "s.sock")
env = dict(os.environ, TUNED_TEST_FAKE_GPU="1", TUNED_TEST_FAKE_MS="1")
log = open(os.path.join(tmp, "daemon.log"), "w")
daemon = subprocess.Popen([TUNED, "serve", "--socket", sock, "--db", os.path.join(tmp, "db")],
                          env=env, stdout=log, stderr=subprocess.STDOUT)
try:
    up = False
    for _ in range(300):
        if os.path.exists(sock):
            try:
                tuned.Client(sock, timeout=2).ping()
                up = True
                break
            except (ConnectionError, OSError):
                pass
        if daemon.poll() is not None:
            break
        time.sleep(0.05)
    check(up, "the daemon answers", open(os.path.join(tmp, "daemon.log")).read()[-500:])
    if up:
        with tuned.Client(sock, timeout=10) as c:
            check(c.ping()["version"] == VERSION, "ping names the version")
            try:
                c.request("get", rows=0, cols=5)
                check(False, "a bad request raises DaemonError")
            except tuned.DaemonError as exc:
                check(exc.code == "bad_value", "a bad request raises DaemonError", exc.code)
            gpus = c.stats().get("gpus") or []
        if not TEST_HOOKS and not gpus:
            print("skip  get, tune, wait, get exact: the daemon has no GPU (the test-only fake "
                  "GPU needs a build with -Dtest_hooks=true)")
            up = False
    if up:
        with tuned.Client(sock, timeout=10) as c:
            first = c.get(256, 1000, dtype="fp16")
            check(first["source"] == "default", "get before a tune: default", str(first))
            job = c.tune(256, 1000, dtype="fp16", budget=12)
            final = c.wait(job["job"], poll=0.05, timeout=120)
            check(final["state"] == "done", "tune and wait", str(final))
            got = c.get(256, 1000, dtype="fp16")
            check(got["source"] == "exact" and got["config"] == final.get("best_config"),
                  "get after the tune: the winner, exact", str(got))
finally:
    if daemon.poll() is None:
        daemon.terminate()
        try:
            daemon.wait(20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    log.close()

# ---- CUDA work without a GPU
try:
    h = tuned.Handle(store=os.path.join(tmp, "store"))
    print("note  a handle opened: this machine has a CUDA driver and a GPU")
    h.close()
except tuned.TunedError as exc:
    check(exc.code in (_lib.ENODRIVER, _lib.ENONVRTC, _lib.ENODEV) and "tuned_open" in exc.message,
          "a handle without a GPU raises TunedError saying what is missing", str(exc))
    print(f"      ({exc})")
try:
    tuned.lookup(4096, 32000)
    print("note  lookup answered: this machine has a GPU")
except tuned.TunedError as exc:
    check(exc.code in (_lib.ENODRIVER, _lib.ENONVRTC, _lib.ENODEV), "tuned.lookup raises TunedError",
          str(exc))
try:
    import torch  # noqa: F401
    print("note  torch is installed in the venv: tuned.softmax not checked for its absence")
except ImportError:
    try:
        tuned.softmax
        check(False, "tuned.softmax without torch raises ImportError")
    except ImportError as exc:
        check("needs torch" in str(exc), "tuned.softmax without torch raises ImportError", str(exc))
shutil.rmtree(tmp, ignore_errors=True)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
