"""ctypes declarations of libtuned (include/tuned.h), loaded on first use.

The library is found, in order, at $TUNED_LIBRARY (a path: an explicit
choice, nothing else is tried), in this package's own directory (where
`pip install .` from the repository root puts the libtuned it built), as
libtuned.so.0 through the dynamic loader (LD_LIBRARY_PATH, ldconfig),
through ctypes.util.find_library("tuned"), and in the default install
prefixes. When none works, LibraryError says what was tried and how to fix
it.

Before it loads, $TUNED_SITE_PACKAGES is set (unless it is set already) to
this interpreter's site-packages and sys.path directories: libtuned, and
the tuned processes it starts, look there for the NVRTC of the nvidia-*
wheels that torch installs when no CUDA toolkit is found
(src/codegen/nvrtc.h).

Kernels that later versions of libtuned export (the backward passes,
log_softmax, a forward with a fused scale, cross-entropy) are declared in _OPTIONAL: a
library without them still loads, and has() tells which it exports, so the
torch operators use each one from the day it exists.
"""

import ctypes
import ctypes.util
import os
import site
import sys
import threading

from .errors import LibraryError, TunedError

# Error codes (include/tuned.h).
OK = 0

# The kernel kinds, copied from TUNED_KERNEL_MAP in include/tuned.h (name:
# id); tests/python/test_errcodes.py checks the copy against that table.
KERNELS = {
    "softmax": 1,
    "softmax_bwd": 2,
    "log_softmax": 3,
    "log_softmax_bwd": 4,
    "cross_entropy": 5,
    "cross_entropy_loss": 6,
    "cross_entropy_bwd": 7,
    "router_topk": 8,
    "router_topk_bwd": 9,
    "linear_cross_entropy": 10,
}


def kernel_code(kernel):
    """The id of a kernel kind's name; ValueError listing the kinds otherwise."""
    if kernel is None:
        return KERNELS["softmax"]
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r} (the kernels: {', '.join(KERNELS)})")
    return KERNELS[kernel]

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


class Progress(ctypes.Structure):
    """struct tuned_progress."""

    _fields_ = [
        ("rows", ctypes.c_int64),
        ("cols", ctypes.c_int64),
        ("dtype", ctypes.c_int),
        ("device", ctypes.c_int),
        ("state", ctypes.c_char_p),
        ("generation", ctypes.c_int),
        ("evaluated", ctypes.c_int64),
        ("failed", ctypes.c_int64),
        ("budget", ctypes.c_int64),
        ("best_config", ctypes.c_char_p),
        ("best_us", ctypes.c_double),
        ("copy_us", ctypes.c_double),
        ("elapsed_s", ctypes.c_double),
        ("message", ctypes.c_char_p),
    ]


# tuned_progress_fn: void (*)(void *ctx, const tuned_progress *p)
PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(Progress))


class Options(ctypes.Structure):
    """struct tuned_options."""

    _fields_ = [
        ("store", ctypes.c_char_p),
        ("socket", ctypes.c_char_p),
        ("policy", ctypes.c_int),
        ("tuned_path", ctypes.c_char_p),
        ("tune_time_s", ctypes.c_double),
        ("on_progress", PROGRESS_FN),
        ("progress_ctx", ctypes.c_void_p),
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


# The struct sizes the C header gives on x86-64 and aarch64 Linux (every
# field's offset is checked against the compiled header in
# tests/python/test_bindings.py).
class CeOptions(ctypes.Structure):
    """struct tuned_ce_options (the cross-entropy calls' options)."""

    _fields_ = [
        ("scale", ctypes.c_float),
        ("label_smoothing", ctypes.c_float),
        ("z_loss", ctypes.c_float),
        ("ignore_index", ctypes.c_int64),
        ("reduction", ctypes.c_int),
        ("grad_output", ctypes.c_void_p),
        ("z_out", ctypes.c_void_p),
        ("error", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("labels_int32", ctypes.c_int),
        ("softcap", ctypes.c_float),
        ("argmax", ctypes.c_void_p),
        ("class_offset", ctypes.c_int64),
        ("classes", ctypes.c_int64),
        ("lse_lo", ctypes.c_void_p),
        ("total", ctypes.c_void_p),
    ]


# enum tuned_reduction and TUNED_CE_ERR_LABEL.
REDUCTION_NONE, REDUCTION_SUM, REDUCTION_MEAN = 0, 1, 2
CE_ERR_LABEL = 1

assert ctypes.sizeof(Options) == 56, ctypes.sizeof(Options)
assert ctypes.sizeof(CeOptions) == 112, ctypes.sizeof(CeOptions)
assert ctypes.sizeof(Choice) == 520, ctypes.sizeof(Choice)
assert ctypes.sizeof(Progress) == 104, ctypes.sizeof(Progress)


def progress_dict(p):
    """A tuned_progress as a dict (its strings decoded; None where NULL)."""
    d = {name: getattr(p, name) for name, _ in Progress._fields_}
    d["dtype"] = {v: k for k, v in DTYPES.items()}.get(p.dtype, p.dtype)
    for key in ("state", "best_config", "message"):
        d[key] = d[key].decode(errors="replace") if d[key] is not None else None
    return d

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
        [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64,
         ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.POINTER(Choice)],
    ),
    "tuned_last_choice": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(Choice)]),
    "tuned_lookup": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
         ctypes.c_int, ctypes.POINTER(Choice)],
    ),
    "tuned_lookup_params": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_char_p,
         ctypes.c_int, ctypes.c_int, ctypes.POINTER(Choice)],
    ),
    "tuned_tune": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
         ctypes.c_int, ctypes.c_double],
    ),
}

# Kernels a libtuned may or may not export yet: bound when present. The
# forwards take a float scale applied to x before the max; every row is
# row_stride elements after the last in each of x, y (and dy, dx).
_ROWS = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
_OPTIONAL = {
    "tuned_softmax_scaled": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p] + _ROWS + [ctypes.c_float, ctypes.c_void_p],
    ),
    "tuned_log_softmax": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p] + _ROWS + [ctypes.c_float, ctypes.c_void_p],
    ),
    "tuned_softmax_backward": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p] + _ROWS + [ctypes.c_void_p],
    ),
    "tuned_log_softmax_backward": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p] + _ROWS + [ctypes.c_void_p],
    ),
    # Cross-entropy (tuned/cross_entropy.py): h, logits, labels, grad (NULL:
    # the loss alone), loss, lse, rows, cols, row_stride, dtype, options, stream.
    "tuned_ce_options_init": (None, [ctypes.POINTER(CeOptions)]),
    "tuned_cross_entropy": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
         ctypes.c_void_p] + _ROWS + [ctypes.POINTER(CeOptions), ctypes.c_void_p],
    ),
    # h, logits, labels, lse, grad, rows, cols, row_stride, dtype, options, stream.
    "tuned_cross_entropy_backward": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        + _ROWS + [ctypes.POINTER(CeOptions), ctypes.c_void_p],
    ),
    # h, grad, rows, cols, row_stride, dtype, factor (a device float), stream.
    "tuned_cross_entropy_rescale": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_void_p] + _ROWS + [ctypes.c_void_p, ctypes.c_void_p],
    ),
}

# What tuned.cross_entropy's kernels need, all of them.
CROSS_ENTROPY_EXPORTS = ("tuned_ce_options_init", "tuned_cross_entropy",
                         "tuned_cross_entropy_backward", "tuned_cross_entropy_rescale")

_lock = threading.Lock()
_lib = None
_path = None
_exported = frozenset()

# What `pip install .` from the repository root puts beside these modules
# (bindings/python/meson.build): the libtuned it built and the tuned
# executable. Absent when the package runs from the source tree or was
# installed alone (bindings/python/pyproject.toml).
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
BUNDLED_LIBRARY = os.path.join(PACKAGE_DIR, "libtuned.so.0")
BUNDLED_EXECUTABLE = os.path.join(PACKAGE_DIR, "bin", "tuned")


def bundled_executable():
    """The tuned executable installed inside this package, or None."""
    if os.access(BUNDLED_EXECUTABLE, os.X_OK):
        return BUNDLED_EXECUTABLE
    return None


def _candidates():
    env = os.environ.get("TUNED_LIBRARY")
    if env:
        # An explicit choice: nothing else is tried.
        return [("$TUNED_LIBRARY", env)]
    out = []
    if os.path.exists(BUNDLED_LIBRARY):
        out.append(("this package", BUNDLED_LIBRARY))
    out.append(("the dynamic loader", "libtuned.so.0"))
    found = ctypes.util.find_library("tuned")
    if found:
        out.append(("ctypes.util.find_library", found))
    for prefix in ("/usr/local/lib/x86_64-linux-gnu", "/usr/local/lib/aarch64-linux-gnu",
                   "/usr/local/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib"):
        path = os.path.join(prefix, "libtuned.so.0")
        if os.path.exists(path):
            out.append(("the install prefix", path))
    return out


def python_directories():
    """Where this interpreter's packages live, for libtuned's search of the
    nvidia-* wheels: the parents of the nvidia namespace package (if one is
    installed), site-packages (user and system), then sys.path."""
    out = []
    try:
        import nvidia  # noqa: PLC0415 - a namespace package of the nvidia-* wheels

        out += [os.path.dirname(p) for p in getattr(nvidia, "__path__", [])]
    except ImportError:
        pass
    try:
        out += site.getsitepackages()
    except AttributeError:  # an old virtualenv's site module
        pass
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    if isinstance(user, str):
        out.append(user)
    out += sys.path
    seen = []
    for d in out:
        d = os.path.abspath(d) if d else ""
        if d and ":" not in d and os.path.isdir(d) and d not in seen:
            seen.append(d)
    return seen


def export_site_packages():
    """Sets $TUNED_SITE_PACKAGES for libtuned (and its child tunes) unless
    the user set it."""
    if not os.environ.get("TUNED_SITE_PACKAGES"):
        os.environ["TUNED_SITE_PACKAGES"] = ":".join(python_directories())


def load():
    """The loaded library (ctypes.CDLL with prototypes); LibraryError if none."""
    global _lib, _path, _exported
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        export_site_packages()
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
            exported = set()
            for fn, (restype, argtypes) in _OPTIONAL.items():
                f = getattr(lib, fn, None)
                if f is not None:
                    f.restype = restype
                    f.argtypes = argtypes
                    exported.add(fn)
            _exported = frozenset(exported)
            _path = name
            _lib = lib
            return lib
        raise LibraryError(
            "libtuned not found; tried " + "; ".join(tried) +
            ". Install tuned (`pip install .` from its repository, or meson install), "
            "or set TUNED_LIBRARY=/path/to/libtuned.so.0")


def has(fn):
    """Whether the loaded libtuned exports fn, one of _OPTIONAL's kernels
    (False when no libtuned can be loaded)."""
    try:
        load()
    except LibraryError:
        return False
    return fn in _exported


def kernel_paths():
    """What each torch operator's CUDA kernel runs with the libtuned that
    loads: "tuned" (libtuned's tuned kernel) or "torch" (torch's kernels);
    softmax_scale: "fused" (tuned_softmax_scaled) or "torch" (x * scale by
    torch, then tuned_softmax). "library" names the libtuned loaded, or says
    why none could be (then every operator runs torch). A CUDA call still
    falls back to torch where libtuned cannot open a handle (no GPU).
    cross_entropy: "tuned" (tuned_cross_entropy and its backward and
    rescale) or "torch" (tuned.cross_entropy's torch formula)."""
    try:
        load()
    except LibraryError as exc:
        return {"library": f"none ({exc})", "softmax": "torch", "softmax_scale": "torch",
                "softmax_backward": "torch", "log_softmax": "torch",
                "log_softmax_backward": "torch", "cross_entropy": "torch"}
    tuned = {True: "tuned", False: "torch"}
    return {
        "library": _path,
        "softmax": "tuned",
        "softmax_scale": "fused" if "tuned_softmax_scaled" in _exported else "torch",
        "softmax_backward": tuned["tuned_softmax_backward" in _exported],
        "log_softmax": tuned["tuned_log_softmax" in _exported],
        "log_softmax_backward": tuned["tuned_log_softmax_backward" in _exported],
        "cross_entropy": tuned[all(fn in _exported for fn in CROSS_ENTROPY_EXPORTS)],
    }


def loaded_path():
    """The name the library was loaded by (a path, or libtuned.so.0), or None."""
    return _path


def strerror(code):
    return load().tuned_strerror(code).decode()


def check(lib, code, handle, what):
    """Raises TunedError for a negative code, with the thread's message."""
    if code >= 0:
        return code
    msg = lib.tuned_last_error(handle)
    text = msg.decode(errors="replace") if msg else ""
    raise TunedError(code, lib.tuned_strerror(code).decode(), text or what)
