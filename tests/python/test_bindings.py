"""test_bindings.py TUNED LIBTUNED SOURCE_ROOT [--asan] [--daemon [--test-hooks]]:
the Python package (bindings/python) without a GPU (issue 6). Plain unittest
(pytest is not needed); prints `N passed, N failed, N skipped` and exits 1
on a failure.

  Client      against a fake daemon on a Unix socket (framing, pipelining,
              error replies, a daemon that closes or stalls, no daemon,
              job polling, None fields left out)
  daemon      (--daemon, a test of its own) the client against the real
              `tuned serve` with the test-only fake GPU (get default, tune,
              wait, get exact, list, stats, error codes); the fake GPU is a
              test hook, so without --test-hooks (the build's
              -Dtest_hooks=true) it exits 77, skipped
  library     loading errors name what was tried; the real libtuned loads,
              its version, a handle without a CUDA driver fails with
              TunedError(ENODRIVER) and the library's message
  softmax     the dispatch (which tensors go to libtuned, which fall back to
              torch.softmax, one warning per reason) with a stand-in torch
              module, since torch is not installed here

Checks that load libtuned run in child interpreters: the library stays
unloaded in this one, and in an ASan build (--asan) the children get the
sanitizer runtime preloaded.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

TUNED = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] else None
LIBTUNED = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else None
ROOT = sys.argv[3] if len(sys.argv) > 3 else os.path.join(os.path.dirname(__file__), "..", "..")
ASAN = "--asan" in sys.argv
DAEMON = "--daemon" in sys.argv
TEST_HOOKS = "--test-hooks" in sys.argv
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

import tuned  # noqa: E402
from tuned import client as tuned_client  # noqa: E402


def child_env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "bindings", "python")
    if ASAN:
        cc = os.environ.get("CC", "cc")
        runtime = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True,
                                 text=True).stdout.strip()
        env["LD_PRELOAD"] = runtime
        env["ASAN_OPTIONS"] = "detect_leaks=0:protect_shadow_gap=0"
    env.update(extra or {})
    return env


def run_child(code, extra_env=None, timeout=60):
    """Runs code in a fresh interpreter; (returncode, stdout, stderr)."""
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=child_env(extra_env),
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


# ---------------------------------------------------------------- client --

class FakeDaemon:
    """Answers each request line with replies(request) (a str, None to close,
    or ("stall", seconds))."""

    def __init__(self, path, replies):
        self.path = path
        self.replies = replies
        self.requests = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(4)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self.converse(conn)

    def converse(self, conn):
        buf = b""
        while True:
            try:
                chunk = conn.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, _, buf = buf.partition(b"\n")
                req = json.loads(line)
                self.requests.append(req)
                reply = self.replies(req)
                if reply is None:
                    return
                if isinstance(reply, tuple):
                    time.sleep(reply[1])
                    continue
                conn.sendall(reply.encode() + b"\n")

    def close(self):
        self.sock.close()


class ClientTests(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tuned-py-")
        self.path = os.path.join(self.dir, "d.sock")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_requests_and_replies(self):
        jobs = {"n": 0}

        def replies(req):
            if req["op"] == "ping":
                return '{"ok":true,"pong":true,"version":"0.1.0"}'
            if req["op"] == "get":
                return json.dumps({"id": req.get("id"), "ok": True, "source": "default",
                                   "config": "w4.r1.c1.m1.v8.ld=def.st=def.reg=f32",
                                   "median_us": None})
            if req["op"] == "tune":
                return '{"ok":true,"job":3,"joined":false,"state":"queued"}'
            if req["op"] == "job":
                jobs["n"] += 1
                state = "running" if jobs["n"] < 3 else "done"
                return json.dumps({"ok": True, "job": {"id": req["job"], "state": state}})
            return '{"ok":false,"error":{"code":"unknown_op","message":"no such op"}}'

        d = FakeDaemon(self.path, replies)
        try:
            with tuned.Client(self.path, timeout=5) as c:
                self.assertEqual(c.ping()["pong"], True)
                r = c.get(4096, 32000, dtype="bf16", id=7)
                self.assertEqual((r["source"], r["id"]), ("default", 7))
                self.assertEqual(d.requests[-1], {"op": "get", "rows": 4096, "cols": 32000,
                                                  "dtype": "bf16", "id": 7})
                self.assertEqual(c.tune(64, 1000, time_s=2.5)["job"], 3)
                self.assertEqual(d.requests[-1], {"op": "tune", "rows": 64, "cols": 1000,
                                                  "time_s": 2.5})
                self.assertEqual(c.wait(3, poll=0.01)["state"], "done")
                with self.assertRaises(tuned.DaemonError) as cm:
                    c.request("frobnicate")
                self.assertEqual(cm.exception.code, "unknown_op")
                self.assertEqual(cm.exception.message, "no such op")
                # Pipelining: all sent, then all read, in order.
                replies_ = c.pipeline([{"op": "ping"}, {"op": "nope"}, {"op": "ping"}])
                self.assertEqual([r["ok"] for r in replies_], [True, False, True])
        finally:
            d.close()

    def test_closed_stalled_and_absent(self):
        d = FakeDaemon(self.path, lambda req: None)
        try:
            with self.assertRaises(ConnectionError) as cm:
                tuned.Client(self.path, timeout=5).ping()
            self.assertIn("closed the connection", str(cm.exception))
        finally:
            d.close()
        os.unlink(self.path)
        d = FakeDaemon(self.path, lambda req: ("stall", 1.0))
        try:
            with self.assertRaises(TimeoutError):
                tuned.Client(self.path, timeout=0.2).ping()
        finally:
            d.close()
        os.unlink(self.path)
        d = FakeDaemon(self.path, lambda req: "this is not json")
        try:
            with self.assertRaises(ConnectionError) as cm:
                tuned.Client(self.path, timeout=5).ping()
            self.assertIn("not JSON", str(cm.exception))
        finally:
            d.close()
        os.unlink(self.path)
        with self.assertRaises(ConnectionError) as cm:
            tuned.Client(self.path).ping()
        self.assertIn("tuned serve", str(cm.exception))

    def test_default_socket(self):
        saved = {k: os.environ.get(k) for k in ("TUNED_SOCKET", "XDG_RUNTIME_DIR")}
        try:
            os.environ["TUNED_SOCKET"] = "/x/t.sock"
            self.assertEqual(tuned.default_socket(), "/x/t.sock")
            del os.environ["TUNED_SOCKET"]
            os.environ["XDG_RUNTIME_DIR"] = "/run/user/5"
            self.assertEqual(tuned.default_socket(), "/run/user/5/tuned/tuned.sock")
            del os.environ["XDG_RUNTIME_DIR"]
            self.assertEqual(tuned.default_socket(), "/run/tuned/tuned.sock")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@unittest.skipUnless(TUNED and os.access(TUNED, os.X_OK), "no tuned executable given")
class RealDaemonTests(unittest.TestCase):
    """The client against `tuned serve` with the test-only fake GPU."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tuned-py-daemon-")
        self.sock = os.path.join(self.dir, "s.sock")
        env = {k: v for k, v in os.environ.items() if not k.startswith("TUNED_")}
        env.update({"TUNED_TEST_FAKE_GPU": "1", "TUNED_TEST_FAKE_MS": "1"})
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen([TUNED, "serve", "--socket", self.sock, "--db",
                                      os.path.join(self.dir, "db")], env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(300):
            if os.path.exists(self.sock):
                try:
                    tuned.Client(self.sock, timeout=2).ping()
                    return
                except (ConnectionError, OSError):
                    pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.tearDown()
        self.fail("the daemon did not start: " + open(os.path.join(self.dir, "log")).read())

    def tearDown(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_get_tune_wait_get(self):
        with tuned.Client(self.sock, timeout=10) as c:
            self.assertEqual(c.ping()["version"], "0.1.0")
            first = c.get(256, 1000, dtype="fp16")
            self.assertEqual(first["source"], "default")
            job = c.tune(256, 1000, dtype="fp16", budget=12)
            self.assertIn(job["state"], ("queued", "running"))
            final = c.wait(job["job"], poll=0.05, timeout=120)
            self.assertEqual(final["state"], "done", final)
            got = c.get(256, 1000, dtype="fp16")
            self.assertEqual(got["source"], "exact")
            self.assertEqual(got["config"], final["best_config"])
            listed = c.list(dtype="fp16")
            self.assertEqual(listed["count"], 1)
            self.assertGreaterEqual(c.stats()["requests"]["get"], 2)
            for bad, code in (({"rows": 0, "cols": 5}, "bad_value"),
                              ({"rows": "5", "cols": 5}, "bad_type"),
                              ({"cols": 5}, "missing_field")):
                with self.assertRaises(tuned.DaemonError) as cm:
                    c.request("get", **bad)
                self.assertEqual(cm.exception.code, code)
            with self.assertRaises(tuned.DaemonError) as cm:
                c.request("get", rows=5, cols=5, colour="blue")
            self.assertEqual(cm.exception.code, "unknown_field")
            # The connection survives errors.
            self.assertTrue(c.ping()["ok"])


# --------------------------------------------------------------- library --

class LibraryTests(unittest.TestCase):
    def version_error(self, library):
        """What tuned.version() raises in a child with TUNED_LIBRARY=library."""
        rc, out, err = run_child("""
            import tuned
            try:
                tuned.version()
            except tuned.LibraryError as e:
                print("ERR", e)
        """, {"TUNED_LIBRARY": library})
        self.assertEqual(rc, 0, err)
        return out

    def test_missing_library(self):
        out = self.version_error("/nonexistent/libtuned.so.0")
        self.assertIn("ERR libtuned not found", out)
        self.assertIn("/nonexistent/libtuned.so.0", out)
        self.assertIn("TUNED_LIBRARY", out)

    def test_not_libtuned(self):
        out = self.version_error("libc.so.6")
        self.assertIn("not this version of libtuned", out)

    def test_client_needs_no_library(self):
        rc, out, err = run_child("""
            import sys, tuned
            c = tuned.Client("/nonexistent/sock")
            print("ok", "tuned._lib" in sys.modules and tuned._lib._lib is None)
        """, {"TUNED_LIBRARY": "/nonexistent/libtuned.so.0"})
        self.assertEqual(rc, 0, err)
        self.assertIn("ok True", out)

    @unittest.skipUnless(LIBTUNED and os.path.exists(LIBTUNED), "no libtuned given")
    def test_real_library(self):
        store = tempfile.mkdtemp(prefix="tuned-py-store-")
        try:
            rc, out, err = run_child(f"""
                import tuned
                print("version", tuned.version())
                try:
                    h = tuned.Handle(store={store!r})
                    print("opened")
                    h.close()
                except tuned.TunedError as e:
                    print("code", e.code, e.name)
                    print("message", e.message)
                try:
                    tuned.Handle(policy="sometimes")
                except ValueError as e:
                    print("policy", e)
                from tuned import _lib
                print("strerror", _lib.strerror(_lib.ETUNE))
            """, {"TUNED_LIBRARY": LIBTUNED})
            self.assertEqual(rc, 0, err)
            self.assertIn("version 0.1.0", out)
            self.assertIn("unknown policy 'sometimes'", out)
            self.assertIn("strerror tune failed", out)
            if "opened" not in out:
                # No GPU here: the library says which part is missing.
                self.assertRegex(out, r"code -(3|4|5) ")
                self.assertIn("message tuned_open: ", out)
        finally:
            shutil.rmtree(store, ignore_errors=True)


# --------------------------------------------------------------- softmax --

FAKE_TORCH = '''
import sys, types

torch = types.ModuleType("torch")
class dtype:
    def __init__(self, name): self.name = name
    def __repr__(self): return "torch." + self.name
torch.float16, torch.bfloat16, torch.float32, torch.float64 = (
    dtype("float16"), dtype("bfloat16"), dtype("float32"), dtype("float64"))

class Device:
    def __init__(self, type, index=None): self.type, self.index = type, index

class Tensor:
    def __init__(self, shape, stride=None, dtype=None, device="cuda", requires_grad=False):
        self.shape = tuple(shape)
        if stride is None:
            stride, acc = [], 1
            for s in reversed(self.shape):
                stride.insert(0, acc)
                acc *= s
        self._stride = tuple(stride)
        self.dtype = dtype or torch.float16
        self.device = Device(device, 0 if device == "cuda" else None)
        self.is_cuda = device == "cuda"
        self.requires_grad = requires_grad
    def dim(self): return len(self.shape)
    def stride(self): return self._stride
    def numel(self):
        n = 1
        for s in self.shape: n *= s
        return n
    def data_ptr(self): return 1 << 20
    def get_device(self): return self.device.index if self.is_cuda else -1
    def is_contiguous(self):
        acc = 1
        for s, st in reversed(list(zip(self.shape, self._stride))):
            if s != 1 and st != acc:
                return False
            acc *= s
        return True
torch.Tensor = Tensor

calls = []
def softmax(x, dim):
    calls.append(("torch", dim))
    return "torch-result"
torch.softmax = softmax
torch.is_grad_enabled = lambda: True

class Function:
    @classmethod
    def apply(cls, *args): return cls.forward(None, *args)
autograd = types.ModuleType("torch.autograd")
autograd.Function = Function
torch.autograd = autograd

class Stream:
    cuda_stream = 0
cuda = types.ModuleType("torch.cuda")
cuda.current_stream = lambda device=None: Stream()
cuda.current_device = lambda: 0
torch.cuda = cuda
def empty_strided(shape, stride, dtype=None, device=None):
    return Tensor(shape, stride, dtype)
torch.empty_strided = empty_strided
torch.empty_like = lambda x: Tensor(x.shape, None, x.dtype)
C = types.ModuleType("torch._C")
C._cuda_getDevice = lambda: 0
C._cuda_getCurrentRawStream = lambda index: 0
torch._C = C
sys.modules["torch"] = torch
sys.modules["torch.cuda"] = cuda
sys.modules["torch.autograd"] = autograd
'''


class SoftmaxTests(unittest.TestCase):
    def test_dispatch_and_fallbacks(self):
        code = FAKE_TORCH + textwrap.dedent('''
            import warnings
            import tuned
            from tuned import torch_ops
            T = torch.Tensor
            caught = []
            def run(x, dim=-1):
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    before = len(calls)
                    r = tuned.softmax(x, dim)
                    caught.extend(str(i.message) for i in w)
                    return r, len(calls) > before, [str(i.message) for i in w]
            # Each unsupported input goes to torch.softmax, warned once per reason.
            cases = [
                ("cpu", T((4, 8), device="cpu"), -1),
                ("float64", T((4, 8), dtype=torch.float64), -1),
                ("dim0", T((4, 8)), 0),
                ("strides", T((8, 4), stride=(1, 8)), -1),
                ("empty", T((0, 8)), -1),
            ]
            for name, x, dim in cases:
                r, fell, w = run(x, dim)
                print(name, fell, len(w), w[0] if w else "")
                r, fell, w = run(x, dim)
                print(name + "-again", fell, len(w))
            # Supported layouts.
            L = torch_ops._rows_layout
            print("layout contiguous", L(T((2, 3, 5))))
            print("layout 1d", L(T((7,))))
            print("layout sliced rows", L(T((4, 5), stride=(8, 1))))
            print("layout size-1 dims", L(T((1, 4, 1, 5), stride=(999, 5, 77, 1))))
            print("layout broadcast", L(T((4, 5), stride=(0, 1))))
            print("layout gap between outer dims", L(T((2, 3, 5), stride=(40, 5, 1))))
            # A supported tensor, with no usable library: falls back, says why.
            r, fell, w = run(T((64, 1000)))
            print("library", fell, w[0] if w else "")
        ''')
        rc, out, err = run_child(code, {"TUNED_LIBRARY": "/nonexistent/libtuned.so.0",
                                        "TUNED_POLICY": "never"})
        self.assertEqual(rc, 0, err)
        lines = dict(l.split(" ", 1) for l in out.splitlines() if " " in l)
        for name, text in (("cpu", "a cpu tensor"), ("float64", "dtype torch.float64"),
                           ("dim0", "softmax over dim 0"), ("strides", "not rows"),
                           ("empty", "empty")):
            self.assertTrue(lines[name].startswith("True 1 "), f"{name}: {lines[name]}")
            self.assertIn(text, lines[name])
            self.assertIn("using torch.softmax instead", lines[name])
        for name in ("cpu", "float64", "dim0", "strides", "empty"):
            self.assertEqual(lines[name + "-again"], "True 0", name)
        self.assertIn("layout contiguous (6, 5, 5)", out)
        self.assertIn("layout 1d (1, 7, 7)", out)
        self.assertIn("layout sliced rows (4, 5, 8)", out)
        self.assertIn("layout size-1 dims (4, 5, 5)", out)
        self.assertIn("layout broadcast None", out)
        self.assertIn("layout gap between outer dims None", out)
        self.assertIn("library True tuned.softmax: libtuned is not usable", out)

    @unittest.skipUnless(LIBTUNED and os.path.exists(LIBTUNED), "no libtuned given")
    def test_no_driver_falls_back(self):
        code = FAKE_TORCH + textwrap.dedent('''
            import warnings, tempfile
            import tuned
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                r = tuned.softmax(torch.Tensor((64, 1000)))
            print("result", r)
            print("warning", str(w[0].message) if w else "none")
        ''')
        store = tempfile.mkdtemp(prefix="tuned-py-store-")
        try:
            rc, out, err = run_child(code, {"TUNED_LIBRARY": LIBTUNED, "TUNED_DB": store,
                                            "TUNED_POLICY": "never"})
        finally:
            shutil.rmtree(store, ignore_errors=True)
        self.assertEqual(rc, 0, err)
        if "result torch-result" in out:
            self.assertIn("libtuned is not usable", out)
            self.assertIn("tuned_open", out)


def main():
    loader = unittest.defaultTestLoader
    if DAEMON:
        if not TEST_HOOKS:
            print("the fake GPU needs a build with test hooks (-Dtest_hooks=true): skipped")
            return 77
        suite = loader.loadTestsFromTestCase(RealDaemonTests)
    else:
        cases = [c for c in globals().values() if isinstance(c, type) and
                 issubclass(c, unittest.TestCase) and c is not RealDaemonTests]
        suite = unittest.TestSuite(loader.loadTestsFromTestCase(c) for c in cases)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    skipped = len(result.skipped)
    failed = len(result.failures) + len(result.errors)
    passed = result.testsRun - failed - skipped
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
