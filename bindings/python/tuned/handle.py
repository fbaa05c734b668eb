"""Handle: a libtuned handle (tuned_open ... tuned_close) from Python, and
the module's default handle that tuned.softmax and the torch operators use."""

import ctypes
import dataclasses
import os
import sys
import threading
import traceback

from . import _environ, _lib
from .errors import LibraryError, TunedError


@dataclasses.dataclass
class Choice:
    """Which kernel a call used (last_choice) or a call would use (lookup)."""

    config: str
    source: str          # "exact", "nearest" or "default"
    median_us: float     # the record's measured median (0 for default)
    record_rows: int     # the record's shape (0 for default)
    record_cols: int
    device: int
    gpu: str
    aligned: bool
    tune: str            # this handle's tune of the shape: none, queued, done, failed
    tune_message: str
    function: int        # the CUfunction (last_choice only; 0 from lookup)
    grid: int
    block: int
    smem: int
    cooperative: bool    # a grid split: only tuned_softmax can launch it


def _choice(c):
    return Choice(
        config=c.config.decode(), source=_lib.SOURCES.get(c.source, str(c.source)),
        median_us=c.median_us, record_rows=c.record_rows, record_cols=c.record_cols,
        device=c.device, gpu=c.gpu.decode(errors="replace"), aligned=bool(c.aligned),
        tune=_lib.TUNE_STATES.get(c.tune, str(c.tune)),
        tune_message=c.tune_message.decode(errors="replace"), function=c.function or 0,
        grid=c.grid, block=c.block, smem=c.smem, cooperative=bool(c.cooperative))


def dtype_code(dtype):
    """"fp16"/"half"/..., or a TUNED_* number, as the number."""
    if isinstance(dtype, int) and dtype in (0, 1, 2):
        return dtype
    names = {"fp16": 0, "half": 0, "float16": 0, "bf16": 1, "bfloat16": 1, "fp32": 2,
             "float": 2, "float32": 2}
    try:
        return names[str(dtype).replace("torch.", "")]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r} (fp16, bf16 or fp32)") from None


class Handle:
    """An open libtuned handle.

    store: the store directory (None: the default; "": none); socket: the
    daemon's socket (None: the default); policy: "never", "daemon" or
    "process" (who tunes shapes without an exact record); tuned_path: the
    tuned executable for child tunes (None: $TUNED_BIN, else the one
    installed inside this package, else libtuned's default); tune_time_s:
    their search time. progress: None, or a function called with a dict
    (rows, cols, dtype, device, state, generation, evaluated, failed,
    budget, best_config, best_us, copy_us, elapsed_s, message: tuned_progress's
    fields) as this handle's tunes go on, on the thread that runs the tune
    (the handle's background thread, or the caller of tune()); what it
    raises is printed and ignored.
    Thread-safe; close() (or a with block) releases it.
    """

    def __init__(self, store=None, socket=None, policy="never", tuned_path=None,
                 tune_time_s=0.0, progress=None):
        lib = _lib.load()
        if policy not in _lib.POLICIES:
            raise ValueError(f"unknown policy {policy!r} (never, daemon, process)")
        if tuned_path is None and not os.environ.get("TUNED_BIN"):
            tuned_path = _lib.bundled_executable()
        opts = _lib.Options()
        lib.tuned_options_init(ctypes.byref(opts))
        # Keep the encoded strings alive until tuned_open has copied them.
        self._keep = [None if s is None else str(s).encode() for s in (store, socket, tuned_path)]
        opts.store, opts.socket, opts.tuned_path = self._keep
        opts.policy = _lib.POLICIES[policy]
        opts.tune_time_s = float(tune_time_s)
        if progress is not None:
            if not callable(progress):
                raise TypeError("progress must be a function of one argument (a dict)")

            def report(ctx, p):
                del ctx
                try:
                    progress(_lib.progress_dict(p.contents))
                except Exception:  # noqa: BLE001 - a C callback cannot raise
                    traceback.print_exc()

            # Kept alive with the handle: libtuned calls it until tuned_close.
            self._progress_fn = _lib.PROGRESS_FN(report)
            opts.on_progress = self._progress_fn
        h = ctypes.c_void_p()
        rc = lib.tuned_open(ctypes.byref(h), ctypes.byref(opts))
        _lib.check(lib, rc, None, "tuned_open")
        self._lib = lib
        self._h = h
        self.policy = policy

    @property
    def pointer(self):
        """The tuned_handle * as an int (for other ctypes code)."""
        return self._h.value or 0

    def close(self):
        """Closes the handle. Closing the module's default handle makes the
        next tuned.softmax (or default_handle()) open a new one."""
        global _default
        if getattr(self, "_h", None):
            h, self._h = self._h, None
            if _default is self:
                with _default_lock:
                    if _default is self:
                        _default = None
            self._lib.tuned_close(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # Not at interpreter exit: CUDA may already be gone, and the process
        # frees everything anyway.
        if not sys.is_finalizing():
            self.close()

    def _live(self):
        if not self._h:
            raise ValueError("the handle is closed")
        return self._h

    def softmax_ptr(self, x, y, rows, cols, row_stride=None, dtype="fp16", stream=0):
        """tuned_softmax on raw device pointers (ints) and a stream handle."""
        h = self._live()
        rc = self._lib.tuned_softmax(h, x, y, rows, cols, cols if row_stride is None else row_stride,
                                     dtype_code(dtype), stream or None)
        _lib.check(self._lib, rc, h, "tuned_softmax")

    def prepare(self, x, y, rows, cols, row_stride=None, dtype="fp16", kernel="softmax", dy=None):
        """Everything a call of kernel does but the launch; the Choice. Device
        pointers (ints): a forward kind's x and y; a backward kind's y (x),
        dy and dx (y)."""
        h = self._live()
        c = _lib.Choice()
        code = _lib.kernel_code(kernel)
        if kernel not in ("softmax", "log_softmax", "softmax_bwd", "log_softmax_bwd"):
            # libtuned reads one pointer per tensor of the kind: the others
            # take more than these
            raise ValueError(f"prepare: kernel {kernel!r} (the softmax kinds; call the others "
                             "by their own functions)")
        ptrs = [x, y] if dy is None else [x, dy, y]
        tensors = (ctypes.c_void_p * len(ptrs))(*ptrs)
        rc = self._lib.tuned_prepare(h, code, tensors, rows, cols,
                                     cols if row_stride is None else row_stride, dtype_code(dtype),
                                     ctypes.byref(c))
        _lib.check(self._lib, rc, h, "tuned_prepare")
        return _choice(c)

    def last_choice(self):
        """The Choice of this thread's last successful call, or None."""
        h = self._live()
        c = _lib.Choice()
        rc = self._lib.tuned_last_choice(h, ctypes.byref(c))
        if rc == _lib.ENOTFOUND:
            return None
        _lib.check(self._lib, rc, h, "tuned_last_choice")
        return _choice(c)

    def lookup(self, rows, cols, dtype="fp16", device=-1, kernel="softmax", params=None):
        """The Choice a call of kernel on this shape would make (nothing launched);
        params: the kind's key parameters as text ("hidden=2048,budget=1024")."""
        h = self._live()
        c = _lib.Choice()
        if params:
            rc = self._lib.tuned_lookup_params(h, _lib.kernel_code(kernel), rows, cols,
                                               params.encode(), dtype_code(dtype), device,
                                               ctypes.byref(c))
            _lib.check(self._lib, rc, h, "tuned_lookup_params")
            return _choice(c)
        rc = self._lib.tuned_lookup(h, _lib.kernel_code(kernel), rows, cols, dtype_code(dtype),
                                    device, ctypes.byref(c))
        _lib.check(self._lib, rc, h, "tuned_lookup")
        return _choice(c)

    def tune(self, rows, cols, dtype="fp16", device=-1, time_s=0.0, kernel="softmax"):
        """Tunes kernel on the shape and waits (the daemon, or a child tuned process)."""
        h = self._live()
        rc = self._lib.tuned_tune(h, _lib.kernel_code(kernel), rows, cols, dtype_code(dtype),
                                  device, float(time_s))
        _lib.check(self._lib, rc, h, "tuned_tune")


_default = None
_default_error = None
_default_lock = threading.Lock()


def _default_store():
    """The store libtuned's default rule picks for a handle that does not
    use the daemon's (tuned.h: $TUNED_DB, $XDG_DATA_HOME/tuned,
    ~/.local/share/tuned), or None where it would fall back further."""
    db = _environ.text("TUNED_DB", None)
    if db:
        return db
    xdg = _environ.text("XDG_DATA_HOME", None)
    if xdg and xdg.startswith("/"):
        return os.path.join(xdg, "tuned")
    home = _environ.text("HOME", None)
    return os.path.join(home, ".local", "share", "tuned") if home and home.startswith("/") else None


def _daemon_answers(timeout=1.0):
    """Whether a daemon answers a ping on the default socket."""
    from .client import Client  # noqa: PLC0415 - only needed here

    try:
        with Client(timeout=timeout) as c:
            c.ping()
        return True
    except Exception:  # noqa: BLE001 - any failure means no daemon to use
        return False


def default_policy():
    """$TUNED_POLICY; unset: "daemon" where a daemon answers on the socket,
    else "process" (a child tuned process, the one inside this package or
    $TUNED_BIN, tunes into the user's store) where there is one, else
    "daemon"."""
    policy = _environ.text("TUNED_POLICY", None)
    if policy is not None:
        return policy
    if _daemon_answers():
        return "daemon"
    if os.environ.get("TUNED_BIN") or _lib.bundled_executable():
        return "process"
    return "daemon"


class _TuneNotice:
    """The default handle's progress function under the process policy: one
    line on stderr the first time each shape reports, saying it is being
    tuned and where the winner goes, and one line when its tune fails,
    saying why (the default config keeps serving)."""

    def __init__(self, store):
        self.store = store or "the default store (tuned.h)"
        self.seen = set()
        self.lock = threading.Lock()

    def __call__(self, p):
        failed = p["state"] == "failed"
        key = (p["rows"], p["cols"], p["dtype"], p["device"], failed)
        with self.lock:
            if key in self.seen:
                return
            self.seen.add(key)
        shape = f"{p['rows']}x{p['cols']} {p['dtype']} on GPU {p['device']}"
        if failed:
            print(f"tuned: the background tune of {shape} failed: {p['message']}; the default "
                  f"config keeps serving it", file=sys.stderr, flush=True)
            return
        print(f"tuned: tuning {shape} in the "
              f"background (a child tuned process; no daemon answers); the winner goes to "
              f"{self.store}, and calls switch to it when it is stored (TUNED_POLICY=never: "
              f"no tuning)", file=sys.stderr, flush=True)


def default_handle():
    """The module's handle, opened on first use: the store and socket from
    the environment, policy default_policy() ($TUNED_POLICY; unset: the
    daemon where one answers, else a child tuned process, which says so on
    stderr once per shape it tunes). Raises LibraryError or TunedError
    when it cannot open, and the same error again on later calls (it is not
    retried). Once it is closed, the next call opens a new one."""
    global _default, _default_error
    if _default is not None:
        return _default
    with _default_lock:
        if _default is None:
            if _default_error is not None:
                raise _default_error
            try:
                policy = default_policy()
                store = _default_store() if policy == "process" else None
                _default = Handle(store=store, policy=policy,
                                  tune_time_s=_environ.seconds("TUNED_TUNE_TIME", 0.0),
                                  progress=_TuneNotice(store) if policy == "process" else None)
            except (LibraryError, TunedError, ValueError) as exc:
                _default_error = exc
                raise
    return _default
