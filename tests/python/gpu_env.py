"""gpu_env.py: how the Python GPU tests start (test_torch_gpu.py,
test_torch_ops_gpu.py, each run as `TEST TUNED LIBTUNED SOURCE_ROOT`):
bindings/python on sys.path, exit 77 (skipped) without torch or a CUDA
device torch can see, and the environment that makes `import tuned` use
the build's libtuned and tuned with a fresh store and no tunes of its own."""
import os
import sys
import tempfile


def start(store_prefix):
    """The fresh store's directory, after the checks above (or exit 77)."""
    tuned_exe, libtuned, root = [os.path.abspath(a) if a else None
                                 for a in (sys.argv[1:4] + [None, None, None])[:3]]
    root = root or os.path.join(os.path.dirname(__file__), "..", "..")
    sys.path.insert(0, os.path.join(root, "bindings", "python"))
    try:
        import torch
    except ImportError:
        print("SKIP: no torch")
        sys.exit(77)
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        sys.exit(77)
    if libtuned:
        os.environ["TUNED_LIBRARY"] = libtuned
    if tuned_exe:
        os.environ["TUNED_BIN"] = tuned_exe
    store = tempfile.mkdtemp(prefix=store_prefix)
    os.environ["TUNED_DB"] = store
    os.environ["TUNED_POLICY"] = "never"
    return store


class Checks:
    """A GPU test's verdicts: expect() prints a FAIL line and counts it;
    section() runs one part, a crash in it a failure that lets the rest run,
    and prints one line for it (warnings_as_errors: tuned's fallback
    RuntimeWarning fails the part too); sections_passed/failed count them."""

    def __init__(self):
        self.failures = 0
        self.sections_passed = self.sections_failed = 0

    def expect(self, cond, what):
        if not cond:
            self.failures += 1
            print("FAIL:", what)
        return cond

    def section(self, name, fn, warnings_as_errors=False):
        import time
        import traceback
        import warnings
        start, before = time.monotonic(), self.failures
        try:
            with warnings.catch_warnings():
                if warnings_as_errors:
                    warnings.filterwarnings("error", message=r"tuned\.", category=RuntimeWarning)
                fn()
        except Exception as exc:  # a crash in one section is a failure, the rest still run
            traceback.print_exc()
            self.expect(False, f"{name}: {type(exc).__name__}: {exc}")
        ok = self.failures == before
        self.sections_passed += ok
        self.sections_failed += not ok
        print(f"{name}: {'ok' if ok else 'FAILED'} ({time.monotonic() - start:.1f} s)")
