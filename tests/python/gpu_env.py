"""gpu_env.py: how the Python GPU tests start (test_torch_gpu.py,
test_torch_ops_gpu.py, each run as `TEST TUNED LIBTUNED SOURCE_ROOT`):
bindings/python on sys.path, exit 77 (skipped) without torch or a CUDA
device torch can see, and the environment that makes `import tuned` use
the build's libtuned and tuned with a fresh store and no tunes of its own."""
import os
import sys
import tempfile


def start(store_prefix):
    """The fresh store's directory, after the checks above (or exit 77)."""
    tuned_exe, libtuned, root = [os.path.abspath(a) if a else None
                                 for a in (sys.argv[1:4] + [None, None, None])[:3]]
    root = root or os.path.join(os.path.dirname(__file__), "..", "..")
    sys.path.insert(0, os.path.join(root, "bindings", "python"))
    try:
        import torch
    except ImportError:
        print("SKIP: no torch")
        sys.exit(77)
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        sys.exit(77)
    if libtuned:
        os.environ["TUNED_LIBRARY"] = libtuned
    if tuned_exe:
        os.environ["TUNED_BIN"] = tuned_exe
    store = tempfile.mkdtemp(prefix=store_prefix)
    os.environ["TUNED_DB"] = store
    os.environ["TUNED_POLICY"] = "never"
    return store
