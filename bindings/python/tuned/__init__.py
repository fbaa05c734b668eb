"""tuned: autotuned GPU softmax kernels, from Python.

    import tuned
    y = tuned.softmax(x)          # x: a CUDA torch tensor, fp16/bf16/fp32
    tuned.last_choice()           # which config that call used, and from where
    tuned.tune(4096, 32000)       # tune a shape now (a child `tuned`, or the daemon)

    with tuned.Client() as c:     # the daemon's protocol, no GPU needed
        c.get(4096, 32000)

ctypes over libtuned (include/tuned.h); no compiled extension. The library
is loaded on first use ($TUNED_LIBRARY, else libtuned.so.0 from the
loader's paths), so `import tuned` works without it (Client needs nothing).
"""

from .client import Client, default_socket
from .errors import DaemonError, LibraryError, TunedError
from .handle import Choice, Handle
from .torch_ops import default_handle, softmax

__all__ = [
    "Choice", "Client", "DaemonError", "Handle", "LibraryError", "TunedError", "default_handle",
    "default_socket", "last_choice", "lookup", "softmax", "tune", "version",
]

__version__ = "0.1.0"


def version():
    """libtuned's version (LibraryError without the library)."""
    from . import _lib

    return _lib.load().tuned_version().decode()


def last_choice():
    """The Choice of this thread's last tuned.softmax call, or None."""
    return default_handle().last_choice()


def lookup(rows, cols, dtype="fp16", device=-1):
    """The Choice a call of this shape would make (nothing launched)."""
    return default_handle().lookup(rows, cols, dtype, device)


def tune(rows, cols, dtype="fp16", device=-1, time_s=0.0):
    """Tunes a shape and waits; later calls of it use the winner."""
    return default_handle().tune(rows, cols, dtype, device, time_s)
