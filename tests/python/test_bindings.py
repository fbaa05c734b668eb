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
  dispatch    which tensors go to the torch operators and which fall back
              to torch (one warning per reason, FallbackError in strict
              mode), on stand-in tensors, since torch is not installed here
              (tests/python/test_torch_ops.py runs the operators where it is)
  default     closing the default handle: the torch fast path never calls
              libtuned with it again, the next call opens a new one (a
              stand-in libtuned and torch)
  kernels     which kernels libtuned exports decides each operator's path
              (kernel_paths), with today's library and with a stand-in one
              that exports two of the coming kernels
  layout      the ctypes structures against the compiled header: every
              field's offset and each struct's size (a field the Python side
              lacks shows in the size)

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

from verdicts import run_suite

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
            self.assertEqual(tuned.default_socket(), "/run/tuned-softmax/tuned.sock")
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


class LayoutTests(unittest.TestCase):
    """The ctypes structures have the compiled header's layout: a field
    missing on the Python side makes tuned_options_init write past the
    buffer Python allocated."""

    def test_structs_match_the_header(self):
        from tuned import _lib
        cc = os.environ.get("CC", "cc")
        if shutil.which(cc) is None:
            self.skipTest(f"no C compiler ({cc})")
        structs = {"tuned_options": _lib.Options, "tuned_choice": _lib.Choice,
                   "tuned_progress": _lib.Progress, "tuned_ce_options": _lib.CeOptions}
        lines = []
        for cname, py in structs.items():
            lines.append(f'printf("{cname} size %zu\\n", sizeof(struct {cname}));')
            for field, _ in py._fields_:
                lines.append(f'printf("{cname} {field} %zu\\n", offsetof(struct {cname}, {field}));')
        src = ("#include <stddef.h>\n#include <stdio.h>\n#include \"tuned.h\"\n"
               "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
        with tempfile.TemporaryDirectory(prefix="tuned-layout-") as d:
            with open(os.path.join(d, "layout.c"), "w") as f:
                f.write(src)
            exe = os.path.join(d, "layout")
            r = subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"),
                                os.path.join(d, "layout.c"), "-o", exe],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
        import ctypes
        for line in out.splitlines():
            cname, field, value = line.split()
            py = structs[cname]
            got = ctypes.sizeof(py) if field == "size" else getattr(py, field).offset
            self.assertEqual(got, int(value), f"{cname}.{field}: Python {got}, C {value}")


# --------------------------------------------------------------- softmax --

class Dtype:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "torch." + self.name


FP16, BF16, FP32, FP64 = Dtype("float16"), Dtype("bfloat16"), Dtype("float32"), Dtype("float64")
SUPPORTED = {FP16: 0, BF16: 1, FP32: 2}


class Device:
    def __init__(self, type):
        self.type = type


class StandIn:
    """A tensor's metadata (what the dispatch decisions read), for CI
    without torch: shape, strides, dtype, device."""

    def __init__(self, shape, stride=None, dtype=FP16, device="cuda"):
        self.shape = tuple(shape)
        if stride is None:
            stride, acc = [], 1
            for s in reversed(self.shape):
                stride.insert(0, acc)
                acc *= s
        self._stride = tuple(stride)
        self.dtype = dtype
        self.device = Device(device)

    def dim(self):
        return len(self.shape)

    def stride(self):
        return self._stride

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n


class DispatchTests(unittest.TestCase):
    """tuned/_dispatch.py: which calls go to the operators, which fall back
    to torch and why, warned once per reason or raised in strict mode."""

    def setUp(self):
        from tuned import _dispatch
        self.d = _dispatch
        self.d._warned.clear()
        self.saved_strict = self.d.strict()
        self.d.set_strict(False)

    def tearDown(self):
        self.d.set_strict(self.saved_strict)
        self.d._warned.clear()

    def test_plan(self):
        T, plan = StandIn, self.d.plan
        # To the operator: the last dimension in any layout (rows in place,
        # anything else made contiguous by the operator), a transposed view
        # over its adjacent dimension (moved last by a view), meta tensors.
        self.assertEqual(plan(T((4, 8)), -1, SUPPORTED), (None, None))
        self.assertEqual(plan(T((4, 8)), 1, SUPPORTED), (None, None))
        self.assertEqual(plan(T((8, 4), stride=(1, 8)), -1, SUPPORTED), (None, None))
        self.assertEqual(plan(T((8, 4), stride=(1, 8)), 0, SUPPORTED), (None, 0))
        self.assertEqual(plan(T((2, 8, 4), stride=(32, 1, 8)), 1, SUPPORTED), (None, 1))
        self.assertEqual(plan(T((4, 8), device="meta"), -1, SUPPORTED), (None, None))
        self.assertEqual(plan(T((4, 8), dtype=BF16), -1, SUPPORTED), (None, None))
        # To torch, with the reason.
        cases = [
            (T((4, 8), device="cpu"), -1, "device", "a cpu tensor"),
            (T((4, 8), dtype=FP64), -1, "dtype", "dtype torch.float64"),
            (T((4, 8)), 0, "dim", "softmax over dim 0 of a 2-d tensor"),
            (T((2, 3, 5)), -2, "dim", "not adjacent"),
            (T((0, 8)), -1, "empty", "empty"),
            (T(()), -1, "empty", "0-d"),
            (T((2 ** 31, 1)), -1, "size", "exceed tuned's limits"),
            (T((1, 2 ** 31)), -1, "size", "exceed tuned's limits"),
        ]
        for x, dim, key, text in cases:
            reason, moved = plan(x, dim, SUPPORTED)
            self.assertIsNotNone(reason, (x.shape, dim))
            self.assertEqual(reason[0], key, (x.shape, dim))
            self.assertIn(text, reason[1])
        with self.assertRaises(IndexError):
            plan(T((4, 8)), 2, SUPPORTED)
        with self.assertRaises(IndexError):
            plan(T((4, 8)), -3, SUPPORTED)

    def test_rows_layout(self):
        L = self.d.rows_layout
        self.assertEqual(L((2, 3, 5), (15, 5, 1)), (6, 5, 5))
        self.assertEqual(L((7,), (1,)), (1, 7, 7))
        self.assertEqual(L((4, 5), (8, 1)), (4, 5, 8))             # row slices
        self.assertEqual(L((1, 4, 1, 5), (999, 5, 77, 1)), (4, 5, 5))  # size-1 dims
        self.assertEqual(L((4, 1), (1, 9)), (4, 1, 1))             # one column
        self.assertIsNone(L((4, 5), (0, 1)))                      # broadcast rows
        self.assertIsNone(L((2, 3, 5), (40, 5, 1)))               # a gap between outer dims
        self.assertIsNone(L((8, 4), (1, 8)))                      # transposed

    def test_warn_once_and_strict(self):
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(3):
                self.d.fall_back("softmax", "device", "a cpu tensor")
                self.d.fall_back("log_softmax", "device", "a cpu tensor")
                self.d.fall_back("softmax", "quiet", "under torch.compile", quiet=True)
        texts = [str(i.message) for i in w]
        self.assertEqual(texts, ["tuned.softmax: a cpu tensor; using torch.softmax instead",
                                 "tuned.log_softmax: a cpu tensor; using torch.log_softmax instead"])
        self.assertTrue(all(i.category is RuntimeWarning for i in w))
        self.d.set_strict(True)
        with self.assertRaises(tuned.FallbackError) as cm:
            self.d.fall_back("softmax", "device", "a cpu tensor")
        self.assertIn("tuned.softmax: a cpu tensor (strict mode", str(cm.exception))
        with self.assertRaises(tuned.FallbackError):
            self.d.fall_back("softmax", "quiet", "under torch.compile", quiet=True)

    def test_strict_from_environment(self):
        for value, want in (("1", "True"), ("0", "False"), ("", "False"), ("yes", "True"),
                            ("false", "False"), ("OFF", "False")):
            rc, out, err = run_child("""
                import tuned
                print("strict", tuned.strict())
            """, {"TUNED_STRICT": value})
            self.assertEqual(rc, 0, err)
            self.assertIn("strict " + want, out, value)
        rc, out, err = run_child("import tuned", {"TUNED_STRICT": "maybe"})
        self.assertNotEqual(rc, 0, "TUNED_STRICT=maybe was accepted")
        self.assertIn("TUNED_STRICT='maybe'", err)

    def test_empty_variables_count_as_unset(self):
        # docs/environment.md: set but empty is unset; bad values refused.
        code = """
            import tuned
            from tuned import _environ
            print("policy", _environ.text("TUNED_POLICY", "daemon"))
            print("time", _environ.seconds("TUNED_TUNE_TIME", 0.0))
        """
        rc, out, err = run_child(code, {"TUNED_POLICY": "", "TUNED_TUNE_TIME": ""})
        self.assertEqual(rc, 0, err)
        self.assertIn("policy daemon", out)
        self.assertIn("time 0.0", out)
        for bad in ("soon", "-1", "nan"):
            rc, out, err = run_child(code, {"TUNED_TUNE_TIME": bad})
            self.assertNotEqual(rc, 0, f"TUNED_TUNE_TIME={bad} accepted")
            self.assertIn("TUNED_TUNE_TIME", err)

    def test_torch_names_need_torch(self):
        try:
            import torch  # noqa: F401
            self.skipTest("torch is installed here")
        except ImportError:
            pass
        rc, out, err = run_child("""
            import tuned
            print("paths", tuned.kernel_paths()["softmax"])
            for name in ("softmax", "log_softmax"):
                try:
                    getattr(tuned, name)
                except ImportError as e:
                    print(name, e)
        """, {"TUNED_LIBRARY": "/nonexistent/libtuned.so.0"})
        self.assertEqual(rc, 0, err)
        self.assertIn("paths torch", out)
        self.assertIn("softmax tuned.softmax needs torch", out)
        self.assertIn("log_softmax tuned.log_softmax needs torch", out)

    @unittest.skipUnless(LIBTUNED and os.path.exists(LIBTUNED), "no libtuned given")
    def test_default_handle_without_driver(self):
        store = tempfile.mkdtemp(prefix="tuned-py-store-")
        try:
            rc, out, err = run_child("""
                import tuned
                for _ in range(2):
                    try:
                        tuned.default_handle()
                        print("opened")
                    except tuned.TunedError as e:
                        print("error", id(e), e.code, e.message)
            """, {"TUNED_LIBRARY": LIBTUNED, "TUNED_DB": store, "TUNED_POLICY": "never"})
        finally:
            shutil.rmtree(store, ignore_errors=True)
        self.assertEqual(rc, 0, err)
        if "opened" not in out:
            lines = [l.split(" ", 3) for l in out.splitlines() if l.startswith("error")]
            self.assertEqual(len(lines), 2, out)
            self.assertEqual(lines[0][1], lines[1][1], "the open error is kept, not retried")
            self.assertIn("tuned_open", lines[0][3])


# A stand-in torch: what tuned.torch_ops touches at import and on its
# eager fast path (_library, _softmax_rows), with host memory as tensors.
STAND_IN_TORCH = """
import ctypes, types

float16, bfloat16, float32 = "torch.float16", "torch.bfloat16", "torch.float32"


class Tensor:
    def __init__(self, shape, dtype=float32, device=0):
        self.shape, self.dtype, self._dev = tuple(shape), dtype, device
        self._n = 1
        for s in self.shape:
            self._n *= s
        self._buf = ctypes.create_string_buffer(self._n * (4 if dtype == float32 else 2) + 16)
        self.requires_grad, self.is_cuda = False, True

    def numel(self): return self._n
    def dim(self): return len(self.shape)
    def get_device(self): return self._dev
    def data_ptr(self): return (ctypes.addressof(self._buf) + 15) & ~15
    def is_contiguous(self): return True


def empty_like(x): return Tensor(x.shape, x.dtype, x._dev)
def softmax(x, dim): raise NotImplementedError
def log_softmax(x, dim): raise NotImplementedError


_C = types.SimpleNamespace(is_grad_enabled=lambda: False, _len_torch_dispatch_stack=lambda: 0,
                           _cuda_getDevice=lambda: 0, _cuda_getCurrentRawStream=lambda i: 0)
compiler = types.SimpleNamespace(is_compiling=lambda: False)
cuda = types.SimpleNamespace(current_device=lambda: 0)


class _Op:
    def __init__(self, name, fn):
        ops.tuned.__dict__[name.split("::")[1]] = types.SimpleNamespace(default=fn)
    def register_kernel(self, dev): return lambda f: f
    def register_fake(self, f): return f
    def register_autograd(self, g, setup_context=None): return None


ops = types.SimpleNamespace(tuned=types.SimpleNamespace())
library = types.SimpleNamespace(custom_op=lambda name, fn, mutates_args=(), schema=None: _Op(name, fn))
autograd = types.SimpleNamespace(Function=type("Function", (), {}))
"""

# A stand-in libtuned over the real one: handles are slots that tuned_close
# marks closed, and tuned_softmax says when it is given a closed one (the
# real library would read freed memory).
HANDLE_SHIM = r"""
#include <stdio.h>
static int slots[16], opened;
int tuned_open(void **out, const void *o)
{
    (void)o;
    slots[opened] = 1;
    *out = &slots[opened++];
    return 0;
}
void tuned_close(void *h) { if (h) *(int *)h = 0; }
int tuned_softmax(void *h, const void *x, void *y, long long r, long long c, long long s, int t,
                  void *st)
{
    (void)x, (void)y, (void)r, (void)c, (void)s, (void)t, (void)st;
    if (h == NULL)
        return -1;
    if (*(int *)h != 1) {
        fprintf(stderr, "tuned_softmax: called on a closed handle\n");
        return -1;
    }
    return 0;
}
"""


class DefaultHandleTests(unittest.TestCase):
    """Closing the module's default handle (`with tuned.default_handle()`,
    a test's teardown): the torch fast path never calls libtuned with the
    closed handle, and the next call opens a new default handle."""

    @unittest.skipUnless(LIBTUNED and os.path.exists(LIBTUNED), "no libtuned given")
    def test_close_default_handle(self):
        cc = os.environ.get("CC", "cc")
        if not shutil.which(cc):
            self.skipTest(f"no C compiler ({cc})")
        d = tempfile.mkdtemp(prefix="tuned-py-default-")
        try:
            os.makedirs(os.path.join(d, "torch"))
            with open(os.path.join(d, "torch", "__init__.py"), "w") as f:
                f.write(STAND_IN_TORCH)
            with open(os.path.join(d, "shim.c"), "w") as f:
                f.write(HANDLE_SHIM)
            shim = os.path.join(d, "libshim.so")
            libdir = os.path.dirname(LIBTUNED)
            p = subprocess.run([cc, "-shared", "-fPIC", os.path.join(d, "shim.c"), "-o", shim,
                                "-L" + libdir, "-Wl,--no-as-needed",
                                "-l:" + os.path.basename(LIBTUNED), "-Wl,-rpath," + libdir],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            rc, out, err = run_child(f"""
                import sys
                sys.path.insert(0, {d!r})
                import torch, tuned
                from tuned import torch_ops as T
                x = torch.Tensor((8, 1024))
                T._library()
                print("open", T._softmax_rows(x, 2) is not None)
                with tuned.default_handle() as h:
                    pass
                print("closed", T._softmax_rows(x, 2) is not None)
                T._library()
                print("reopened", tuned.default_handle() is not h,
                      T._softmax_rows(x, 2) is not None)
            """, {"TUNED_LIBRARY": shim, "TUNED_POLICY": "never", "TUNED_DB": d})
            self.assertEqual(rc, 0, err)
            self.assertNotIn("closed handle", err)
            self.assertIn("open True", out)
            self.assertIn("closed False", out)
            self.assertIn("reopened True True", out)
        finally:
            shutil.rmtree(d, ignore_errors=True)


class KernelPathsTests(unittest.TestCase):
    """Which kernels a libtuned exports decides each torch operator's path:
    libtuned exports all four and the fused scale, so every operator
    reports tuned; a stand-in shared object that shadows two of them (and
    links the real libtuned for the rest) gets its own bound, with the
    argument types the C signatures have."""

    @unittest.skipUnless(LIBTUNED and os.path.exists(LIBTUNED), "no libtuned given")
    def test_today(self):
        rc, out, err = run_child("""
            import tuned
            print(sorted(tuned.kernel_paths().items()))
        """, {"TUNED_LIBRARY": LIBTUNED})
        self.assertEqual(rc, 0, err)
        self.assertIn(f"('library', '{LIBTUNED}')", out)
        for op, path in (("softmax", "tuned"), ("softmax_scale", "fused"),
                         ("softmax_backward", "tuned"), ("log_softmax", "tuned"),
                         ("log_softmax_backward", "tuned")):
            self.assertIn(f"('{op}', '{path}')", out)

    @unittest.skipUnless(LIBTUNED and os.path.exists(LIBTUNED), "no libtuned given")
    def test_new_exports_are_used(self):
        cc = os.environ.get("CC", "cc")
        if not shutil.which(cc):
            self.skipTest(f"no C compiler ({cc})")
        d = tempfile.mkdtemp(prefix="tuned-py-shim-")
        try:
            src = os.path.join(d, "shim.c")
            with open(src, "w") as f:
                f.write("int tuned_softmax_backward(void *h, const void *y, const void *dy, void *dx,"
                        " long long r, long long c, long long s, int t, void *st) { return -14; }\n"
                        "int tuned_log_softmax(void *h, const void *x, void *y, long long r,"
                        " long long c, long long s, int t, float scale, void *st) { return -14; }\n")
            shim = os.path.join(d, "libshim.so")
            libdir = os.path.dirname(LIBTUNED)
            # --no-as-needed: the shim calls nothing in libtuned, but needs
            # it loaded beside it (its symbols are found through the shim).
            p = subprocess.run([cc, "-shared", "-fPIC", src, "-o", shim, "-L" + libdir,
                                "-Wl,--no-as-needed", "-l:" + os.path.basename(LIBTUNED),
                                "-Wl,-rpath," + libdir],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            rc, out, err = run_child("""
                import ctypes, tuned
                from tuned import _lib
                print(sorted(tuned.kernel_paths().items()))
                print("version", tuned.version())
                f = _lib.load().tuned_log_softmax
                print("argtypes", f.argtypes[-2] is ctypes.c_float, f.restype is ctypes.c_int)
            """, {"TUNED_LIBRARY": shim})
            self.assertEqual(rc, 0, err)
            # the shim's two exports and, through its link to libtuned,
            # the rest of libtuned's
            for op, path in (("softmax", "tuned"), ("softmax_scale", "fused"),
                             ("softmax_backward", "tuned"), ("log_softmax", "tuned"),
                             ("log_softmax_backward", "tuned")):
                self.assertIn(f"('{op}', '{path}')", out)
            self.assertIn("version 0.1.0", out)
            self.assertIn("argtypes True True", out)
        finally:
            shutil.rmtree(d, ignore_errors=True)


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
    return run_suite(suite)


if __name__ == "__main__":
    sys.exit(main())
