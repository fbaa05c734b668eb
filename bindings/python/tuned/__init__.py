"""tuned: autotuned GPU softmax kernels, from Python.

    import tuned
    y = tuned.softmax(x)          # x: a CUDA torch tensor, fp16/bf16/fp32
    y = tuned.log_softmax(x, -1, scale=0.5)
    tuned.last_choice()           # which config that call used, and from where
    tuned.kernel_paths()          # which operators run libtuned's kernels, which torch's
    tuned.tune(4096, 32000)       # tune a shape now (a child `tuned`, or the daemon)
    loss = tuned.cross_entropy(logits, labels)   # (..., V) logits, vocabulary last
    loss = tuned.linear_cross_entropy(hidden, lm_head.weight, labels)  # no logits held

    with tuned.Client() as c:     # the daemon's protocol, no GPU needed
        c.get(4096, 32000)

ctypes over libtuned (include/tuned.h); no compiled extension. The library
is loaded on first use ($TUNED_LIBRARY; else the copy `pip install .`
puts inside this package; else libtuned.so.0 from the loader's paths), so
`import tuned` works without it (Client needs nothing).

softmax and log_softmax come from tuned.torch_ops, which
imports torch and registers the operators torch.ops.tuned.* (softmax,
log_softmax and their backwards): on first use of one of these names, or
at `import tuned` when torch is already imported. cross_entropy (and
cross_entropy_errors) come from tuned.cross_entropy the same way, with
its operators torch.ops.tuned.cross_entropy_*; the function shadows the
module's name (the module is sys.modules["tuned.cross_entropy"]);
linear_cross_entropy (tuned.linear_cross_entropy) likewise.
"""

import sys as _sys

from ._dispatch import set_strict, strict
from .client import Client, default_socket
from .errors import DaemonError, FallbackError, LibraryError, TunedError
from .handle import Choice, Handle, default_handle

__all__ = [
    "Choice", "Client", "DaemonError", "FallbackError", "Handle", "LibraryError", "TunedError",
    "cross_entropy", "cross_entropy_errors", "default_handle", "linear_cross_entropy", "router_topk", "default_socket", "kernel_paths", "last_choice", "log_softmax", "lookup",
    "set_strict", "softmax", "strict", "tune", "version",
]

__version__ = "0.1.0"

_TORCH_NAMES = {"softmax": "torch_ops", "log_softmax": "torch_ops",
                "cross_entropy": "cross_entropy", "cross_entropy_errors": "cross_entropy",
                "linear_cross_entropy": "linear_cross_entropy", "router_topk": "router"}


def __getattr__(name):
    # The torch operators, imported on first use: `import tuned` stays
    # free of torch for the Client and the C API's users.
    if name in _TORCH_NAMES:
        import importlib

        try:
            module = importlib.import_module("." + _TORCH_NAMES[name], __name__)
        except ImportError as exc:
            if getattr(exc, "name", None) == "torch":
                raise ImportError(f"tuned.{name} needs torch (pip install torch)") from exc
            raise
        value = getattr(module, name)
        # Importing tuned.cross_entropy set this package's attribute of that
        # name to the module: the function replaces it.
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tuned' has no attribute {name!r}")


if "torch" in _sys.modules:
    # torch is here already: register the operators now, so that
    # torch.ops.tuned.* exist before anything is compiled or loaded.
    from .torch_ops import log_softmax, softmax  # noqa: E402,F401
    from .cross_entropy import cross_entropy, cross_entropy_errors  # noqa: E402,F401
    from .linear_cross_entropy import linear_cross_entropy  # noqa: E402,F401
    from .router import router_topk  # noqa: E402,F401


def kernel_paths():
    """Which torch operators run libtuned's kernels on CUDA and which run
    torch's: {"softmax": "tuned", "softmax_backward": "torch", ...}, with the
    library loaded (see tuned.torch_ops)."""
    from . import _lib

    return _lib.kernel_paths()


def version():
    """libtuned's version (LibraryError without the library)."""
    from . import _lib

    return _lib.load().tuned_version().decode()


def last_choice():
    """The Choice of this thread's last tuned.softmax call, or None."""
    return default_handle().last_choice()


def lookup(rows, cols, dtype="fp16", device=-1, kernel="softmax"):
    """The Choice a call of kernel on this shape would make (nothing launched)."""
    return default_handle().lookup(rows, cols, dtype, device, kernel)


def tune(rows, cols, dtype="fp16", device=-1, time_s=0.0, kernel="softmax"):
    """Tunes kernel on a shape and waits; later calls of it use the winner."""
    return default_handle().tune(rows, cols, dtype, device, time_s, kernel)
