"""ctypes declarations of libtuned (include/tuned.h), loaded on first use.

The library is found, in order, at $TUNED_LIBRARY (a path), as libtuned.so.0
through the dynamic loader (LD_LIBRARY_PATH, ldconfig), through
ctypes.util.find_library("tuned"), and in the default install prefixes.
When none works, LibraryError says what was tried and how to fix it.
"""

import ctypes
import ctypes.util
import os
import threading

from .errors import LibraryError, TunedError

# Error codes (include/tuned.h).
OK = 0
EINVAL = -1
ENOMEM = -2
ENODRIVER = -3
ENONVRTC = -4
ENODEV = -5
ECUDA = -6
ECOMPILE = -7
EWRONG = -8
ESTORE = -9
ENOTFOUND = -10
ESCHEMA = -11
EIO = -12
ETIMEOUT = -13
EUNSUPPORTED = -14
ENOSPACE = -15
ETUNE = -16

FP16, BF16, FP32 = 0, 1, 2
DTYPES = {"fp16": FP16, "bf16": BF16, "fp32": FP32}

POLICY_NEVER, POLICY_DAEMON, POLICY_PROCESS = 0, 1, 2
POLICIES = {"never": POLICY_NEVER, "daemon": POLICY_DAEMON, "process": POLICY_PROCESS}

SOURCES = {0: "exact", 1: "nearest", 2: "default", 3: "compatible"}
TUNE_STATES = {0: "none", 1: "queued", 2: "done", 3: "failed"}


class Options(ctypes.Structure):
    """struct tuned_options."""

    _fields_ = [
        ("store", ctypes.c_char_p),
        ("socket", ctypes.c_char_p),
        ("policy", ctypes.c_int),
        ("tuned_path", ctypes.c_char_p),
        ("tune_time_s", ctypes.c_double),
    ]


class Choice(ctypes.Structure):
    """struct tuned_choice."""

    _fields_ = [
        ("config", ctypes.c_char * 64),
        ("source", ctypes.c_int),
        ("median_us", ctypes.c_double),
        ("record_rows", ctypes.c_int64),
        ("record_cols", ctypes.c_int64),
        ("device", ctypes.c_int),
        ("gpu", ctypes.c_char * 128),
        ("aligned", ctypes.c_int),
        ("tune", ctypes.c_int),
        ("tune_message", ctypes.c_char * 256),
        ("function", ctypes.c_void_p),
        ("grid", ctypes.c_uint),
        ("block", ctypes.c_uint),
        ("smem", ctypes.c_uint),
        ("cooperative", ctypes.c_int),
    ]


# The struct sizes the C header gives on x86-64 and aarch64 Linux.
assert ctypes.sizeof(Options) == 40, ctypes.sizeof(Options)
assert ctypes.sizeof(Choice) == 520, ctypes.sizeof(Choice)

_PROTOTYPES = {
    "tuned_version": (ctypes.c_char_p, []),
    "tuned_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "tuned_options_init": (None, [ctypes.POINTER(Options)]),
    "tuned_open": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(Options)]),
    "tuned_close": (None, [ctypes.c_void_p]),
    "tuned_last_error": (ctypes.c_char_p, [ctypes.c_void_p]),
    "tuned_softmax": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
         ctypes.c_int64, ctypes.c_int, ctypes.c_void_p],
    ),
    "tuned_prepare": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
         ctypes.c_int64, ctypes.c_int, ctypes.POINTER(Choice)],
    ),
    "tuned_last_choice": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(Choice)]),
    "tuned_lookup": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_int,
         ctypes.POINTER(Choice)],
    ),
    "tuned_tune": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_int,
         ctypes.c_double],
    ),
}

_lock = threading.Lock()
_lib = None


def _candidates():
    env = os.environ.get("TUNED_LIBRARY")
    if env:
        # An explicit choice: nothing else is tried.
        return [("$TUNED_LIBRARY", env)]
    out = [("the dynamic loader", "libtuned.so.0")]
    found = ctypes.util.find_library("tuned")
    if found:
        out.append(("ctypes.util.find_library", found))
    for prefix in ("/usr/local/lib/x86_64-linux-gnu", "/usr/local/lib/aarch64-linux-gnu",
                   "/usr/local/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib"):
        path = os.path.join(prefix, "libtuned.so.0")
        if os.path.exists(path):
            out.append(("the install prefix", path))
    return out


def load():
    """The loaded library (ctypes.CDLL with prototypes); LibraryError if none."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for how, name in _candidates():
            try:
                lib = ctypes.CDLL(name)
            except OSError as exc:
                tried.append(f"{name} ({how}): {exc}")
                continue
            missing = [fn for fn in _PROTOTYPES if not hasattr(lib, fn)]
            if missing:
                tried.append(f"{name} ({how}): not this version of libtuned "
                             f"(no {', '.join(missing[:3])})")
                continue
            for fn, (restype, argtypes) in _PROTOTYPES.items():
                f = getattr(lib, fn)
                f.restype = restype
                f.argtypes = argtypes
            _lib = lib
            return lib
        raise LibraryError(
            "libtuned not found; tried " + "; ".join(tried) +
            ". Install tuned (meson install), or set TUNED_LIBRARY=/path/to/libtuned.so.0")


def strerror(code):
    return load().tuned_strerror(code).decode()


def check(lib, code, handle, what):
    """Raises TunedError for a negative code, with the thread's message."""
    if code >= 0:
        return code
    msg = lib.tuned_last_error(handle)
    text = msg.decode(errors="replace") if msg else ""
    raise TunedError(code, lib.tuned_strerror(code).decode(), text or what)
