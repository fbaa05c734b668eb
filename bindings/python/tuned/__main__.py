"""`python -m tuned ARGS` and the `tuned` command of a `pip install .`:
runs the tuned executable installed inside this package (the CLI and the
daemon: `tuned --shape 4096x32000`, `tuned serve`), replacing this process.
It exports $TUNED_SITE_PACKAGES first, as the package does before it loads
libtuned, so that the executable finds the NVRTC of torch's nvidia-*
wheels where no CUDA toolkit is installed."""

import os
import sys

from . import _lib


def main(argv=None):
    exe = _lib.bundled_executable()
    if exe is None:
        sys.stderr.write(
            "tuned: this copy of the Python package has no tuned executable inside it "
            f"(looked for {_lib.BUNDLED_EXECUTABLE}); install it with `pip install .` from "
            "tuned's repository, or run the tuned that meson installed\n")
        return 127
    args = sys.argv[1:] if argv is None else list(argv)
    _lib.export_site_packages()
    os.execv(exe, ["tuned"] + args)
    return 127  # not reached: execv replaces the process or raises


if __name__ == "__main__":
    sys.exit(main())
