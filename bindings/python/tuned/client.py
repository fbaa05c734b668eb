"""Client: the daemon's protocol (docs/protocol.md) over its Unix socket.

Newline-delimited JSON: one request object per line, one reply per line,
in order. A reply with "ok": false raises DaemonError with the daemon's
stable error code. Pure Python: needs neither libtuned nor a GPU.

    with tuned.Client() as c:
        print(c.get(4096, 32000, dtype="fp16"))
        job = c.tune(4096, 32000)["job"]
        print(c.wait(job))
"""

import json
import os
import socket as _socket
import stat
import time

from .errors import DaemonError

MAX_REPLY = 16 << 20


# The system service's socket (tools/tuned-softmax.service).
SERVICE_SOCKET = "/run/tuned-softmax/tuned.sock"


def _is_socket(path):
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def default_socket():
    """The rule of libtuned's (src/client/paths.c): $TUNED_SOCKET; else a
    user's daemon on $XDG_RUNTIME_DIR/tuned/tuned.sock, then the service's
    /run/tuned-softmax/tuned.sock, whichever listens; where neither does,
    the user's when there is a runtime directory, else the service's."""
    env = os.environ.get("TUNED_SOCKET")
    if env:
        return env
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    user = os.path.join(xdg, "tuned", "tuned.sock") if xdg and xdg.startswith("/") else ""
    if user and _is_socket(user):
        return user
    if _is_socket(SERVICE_SOCKET):
        return SERVICE_SOCKET
    return user or SERVICE_SOCKET


class Client:
    """A connection to `tuned serve`. Not thread-safe: one per thread."""

    def __init__(self, path=None, timeout=10.0):
        self.path = path or default_socket()
        self.timeout = timeout
        self._sock = None
        self._buf = b""

    # ---- connection ----

    def connect(self):
        if self._sock is not None:
            return self
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
        except OSError as exc:
            s.close()
            raise ConnectionError(
                f"cannot connect to the tuned daemon at {self.path}: {exc.strerror or exc} "
                "(is `tuned serve` running? set TUNED_SOCKET or pass the path)") from exc
        self._sock = s
        self._buf = b""
        return self

    def close(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buf = b""

    def __enter__(self):
        return self.connect()

    def __exit__(self, *exc):
        self.close()

    # ---- framing ----

    def _send(self, obj):
        line = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
        try:
            self._sock.sendall(line)
        except OSError as exc:
            self.close()
            raise ConnectionError(f"daemon {self.path}: send failed: {exc}") from exc

    def _read_line(self):
        while b"\n" not in self._buf:
            try:
                chunk = self._sock.recv(65536)
            except _socket.timeout as exc:
                self.close()
                raise TimeoutError(f"daemon {self.path}: no reply within {self.timeout} s") from exc
            except OSError as exc:
                self.close()
                raise ConnectionError(f"daemon {self.path}: receive failed: {exc}") from exc
            if not chunk:
                self.close()
                raise ConnectionError(f"daemon {self.path}: closed the connection before replying")
            self._buf += chunk
            if len(self._buf) > MAX_REPLY:
                self.close()
                raise ConnectionError(f"daemon {self.path}: a reply over {MAX_REPLY} bytes")
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _reply(self):
        line = self._read_line()
        try:
            reply = json.loads(line)
        except ValueError as exc:
            self.close()
            raise ConnectionError(f"daemon {self.path}: a reply that is not JSON: {line[:80]!r}") from exc
        if not isinstance(reply, dict) or "ok" not in reply:
            self.close()
            raise ConnectionError(f"daemon {self.path}: a malformed reply: {line[:80]!r}")
        return reply

    @staticmethod
    def _raise_for(reply):
        if reply.get("ok") is True:
            return reply
        err = reply.get("error") or {}
        raise DaemonError(err.get("code", "unknown"), err.get("message", ""), reply)

    # ---- requests ----

    def request(self, op, **fields):
        """One request; fields whose value is None are left out."""
        self.connect()
        obj = {"op": op}
        obj.update({k: v for k, v in fields.items() if v is not None})
        self._send(obj)
        return self._raise_for(self._reply())

    def pipeline(self, requests):
        """Sends every request (dicts with "op") before reading; returns the
        replies in order, failures included as their reply dicts."""
        self.connect()
        for r in requests:
            self._send(r)
        return [self._reply() for _ in requests]

    def ping(self):
        return self.request("ping")

    def get(self, rows, cols, dtype=None, gpu=None, kernel=None, tune_if_missing=None, id=None):
        return self.request("get", rows=rows, cols=cols, dtype=dtype, gpu=gpu, kernel=kernel,
                            tune_if_missing=tune_if_missing, id=id)

    def tune(self, rows, cols, dtype=None, gpu=None, kernel=None, budget=None, time_s=None,
             seed=None, id=None):
        return self.request("tune", rows=rows, cols=cols, dtype=dtype, gpu=gpu, kernel=kernel,
                            budget=budget, time_s=time_s, seed=seed, id=id)

    def job(self, job):
        return self.request("job", job=job)["job"]

    def list(self, **filters):
        return self.request("list", **filters)

    def stats(self):
        return self.request("stats")

    def wait(self, job, poll=0.25, timeout=None):
        """Follows a job until it is done, failed or cancelled; its last state."""
        start = time.monotonic()
        while True:
            state = self.job(job)
            if state.get("state") in ("done", "failed", "cancelled"):
                return state
            if timeout is not None and time.monotonic() - start > timeout:
                raise TimeoutError(f"job {job} still {state.get('state')} after {timeout} s")
            time.sleep(poll)
