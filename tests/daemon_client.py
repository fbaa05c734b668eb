"""daemon_client.py: a test's client of `tuned serve` (docs/protocol.md):
one connection, over the Unix socket or TCP, one JSON request line out and
one reply line in, with a timeout; for the Python tests that start real
daemons (test_abuse.py, test_daemon_cli.py, test_fleet_daemons.py,
bench/fleet-gpu.py), and the helpers they share: a daemon process on a
socket and store of its own, waiting for a condition, stopping a daemon,
one request sent to several daemons at once."""
import json
import os
import signal
import socket
import subprocess
import threading
import time


class Tally:
    """A test's verdicts: "ok:" and "FAIL:" lines on stdout, and the
    failures counted."""

    def __init__(self):
        self.failures = 0

    def fail(self, msg):
        self.failures += 1
        print("FAIL:", msg, flush=True)

    def ok(self, msg):
        print("ok:", msg, flush=True)


class Client:
    """A connection to a daemon; line() is None once it closed."""

    def __init__(self, path=None, tcp=None):
        if tcp is not None:
            self.s = socket.create_connection(tcp, timeout=10)
        else:
            self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.s.connect(path)  # blocking: a full backlog waits instead of EAGAIN
            self.s.settimeout(10)
        self.buf = b""

    def send(self, obj):
        self.s.sendall((json.dumps(obj) + "\n").encode())

    def line(self, timeout=10):
        self.s.settimeout(timeout)
        while b"\n" not in self.buf:
            got = self.s.recv(65536)
            if not got:
                return None
            self.buf += got
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def call(self, obj, timeout=10):
        self.send(obj)
        return self.line(timeout)

    def close(self):
        self.s.close()


def call_once(path, obj, timeout=30):
    """obj sent on a connection of its own to the daemon at path; the reply."""
    c = Client(path)
    try:
        return c.call(obj, timeout)
    finally:
        c.close()


def wait_for(pred, timeout, step=0.1):
    """pred()'s first true value within timeout seconds, else its last."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def stop_process(p, timeout=60):
    """SIGTERM, then SIGKILL after timeout seconds; p's exit status (None
    for no process)."""
    if p is None or p.poll() is not None:
        return p.returncode if p else None
    p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        return p.wait()


class Serve:
    """`tuned serve` (the binary tuned) with its socket, store and log in
    folder dir; args, env (the whole environment) and preexec as given."""

    def __init__(self, tuned, dir, args=(), env=None, db=None, preexec=None):
        os.makedirs(dir, exist_ok=True)
        self.tuned, self.dir = tuned, dir
        self.sock = os.path.join(dir, "s.sock")
        self.db = db or os.path.join(dir, "db")
        self.args = list(args)
        self.env = env if env is not None else dict(os.environ)
        self.preexec = preexec
        self.log = open(os.path.join(dir, "log"), "w+")
        self.p = None

    def start(self, timeout=30):
        """True once it answers a ping; False if it exits or never does."""
        self.p = subprocess.Popen([self.tuned, "serve", "--socket", self.sock, "--db", self.db,
                                   *self.args], stdout=self.log, stderr=self.log, env=self.env,
                                  preexec_fn=self.preexec)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.p.poll() is not None:
                return False
            try:
                call_once(self.sock, {"op": "ping"}, 5)
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def call(self, obj, timeout=30):
        return call_once(self.sock, obj, timeout)

    def logtext(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def stop(self):
        return stop_process(self.p)


# The test-hooks build's fake GPU, its variants timed at 1 ms.
FAKE_GPU_ENV = {"TUNED_TEST_FAKE_GPU": "1", "TUNED_TEST_FAKE_MS": "1"}


def run_tuned(tuned, *args, env=None, timeout=60):
    """tuned ARGS with env added: (exit status, stdout, stderr)."""
    p = subprocess.run([tuned, *args], capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    return p.returncode, p.stdout, p.stderr


class FakeGpuServe(Serve):
    """tuned serve in dir on db (default: a store of its own) with the fake
    GPU and env added; registry (a list) collects it, for the stop at the
    test's end."""

    def __init__(self, tuned, dir, registry, db=None, env=None, args=()):
        registry.append(self)
        super().__init__(tuned, dir, args, {**os.environ, **FAKE_GPU_ENV, **(env or {})}, db=db)


def wait_job(d, job, timeout=60):
    """The job's view once it finished (None: not within timeout)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = d.call({"op": "job", "job": job})
        v = r.get("job") or {}
        if r.get("ok") and v.get("state") not in ("queued", "running"):
            return v
        time.sleep(0.05)
    return None


def call_all_at_once(daemons, request, n, timeout=60):
    """n threads each sending request to daemons[i % len(daemons)] (an
    object with call(request)) at once; their replies, {"error": ...} for a
    failed connection."""
    replies, lock = [], threading.Lock()

    def one(i):
        try:
            r = daemons[i % len(daemons)].call(request)
        except OSError as ex:
            r = {"error": str(ex)}
        with lock:
            replies.append(r)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return replies
