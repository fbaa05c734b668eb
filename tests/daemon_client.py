"""daemon_client.py: a test's client of `tuned serve` (docs/protocol.md):
one connection, over the Unix socket or TCP, one JSON request line out and
one reply line in, with a timeout; for the Python tests that start real
daemons (test_abuse.py, test_fleet_daemons.py)."""
import json
import socket


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
