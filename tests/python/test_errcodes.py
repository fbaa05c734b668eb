"""test_errcodes.py SOURCE_ROOT: the Python package's copies of the error
codes and of the kernel kinds (bindings/python/tuned/_lib.py) against the
C tables they copy, TUNED_ERRNO_MAP and TUNED_KERNEL_MAP in
include/tuned.h, from which the C enums, tuned_strerror() and the
registry's names are made. Fails when an entry is missing on either side
or has another value. Reads the sources only: no library, no GPU."""

import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

from tuned import _lib  # noqa: E402


def c_map(name, row):
    """The rows of the X-macro table #define NAME(XX) in include/tuned.h,
    each as the groups of the regular expression row."""
    with open(os.path.join(ROOT, "include", "tuned.h"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"#define " + name + r"\(XX\)(.*?)(?<!\\)\n", text, re.S)
    if m is None:
        sys.exit(f"include/tuned.h: no {name}(XX) table")
    return re.findall(row, m.group(1))


def c_table():
    """{"EINVAL": -1, ...} from the TUNED_ERRNO_MAP(XX) definition."""
    rows = c_map("TUNED_ERRNO_MAP", r"XX\(\s*(\w+)\s*,\s*(-?\d+)\s*,")
    return {name: int(value) for name, value in rows}


def c_kernels():
    """{"softmax": 1, ...} from the TUNED_KERNEL_MAP(XX) definition."""
    rows = c_map("TUNED_KERNEL_MAP", r"XX\(\s*(\w+)\s*,\s*(\d+)\s*,\s*\"(\w+)\"\s*\)")
    return {text: int(value) for _, value, text in rows}


def kernel_problems():
    c = c_kernels()
    problems = []
    if len(c) < 4:
        problems.append(f"tuned.h: only {len(c)} kinds parsed from TUNED_KERNEL_MAP")
    if c != _lib.KERNELS:
        problems.append(f"_lib.KERNELS {_lib.KERNELS} is not tuned.h's TUNED_KERNEL_MAP {c}")
    try:
        _lib.kernel_code("no_such_kernel")
        problems.append("_lib.kernel_code accepted an unknown kernel")
    except ValueError as exc:
        if "softmax_bwd" not in str(exc):
            problems.append(f"_lib.kernel_code's error does not list the kinds: {exc}")
    print(f"{len(c)} kinds in tuned.h, {len(_lib.KERNELS)} in _lib.py")
    return problems


def main():
    c = c_table()
    py = {name: getattr(_lib, name) for name in dir(_lib)
          if re.fullmatch(r"E[A-Z]+", name) and isinstance(getattr(_lib, name), int)}
    problems = []
    if len(c) < 16:
        problems.append(f"tuned.h: only {len(c)} codes parsed from TUNED_ERRNO_MAP")
    if len(set(c.values())) != len(c):
        problems.append("tuned.h: two codes share a value")
    for name, value in sorted(c.items(), key=lambda kv: -kv[1]):
        if name not in py:
            problems.append(f"_lib.py lacks {name} = {value}")
        elif py[name] != value:
            problems.append(f"_lib.py: {name} = {py[name]}, tuned.h: TUNED_{name} = {value}")
    for name in sorted(set(py) - set(c)):
        problems.append(f"_lib.py: {name} = {py[name]} is not in tuned.h's TUNED_ERRNO_MAP")
    if getattr(_lib, "OK", None) != 0:
        problems.append("_lib.py: OK is not 0")
    problems += kernel_problems()
    for p in problems:
        print("FAIL:", p)
    print(f"{len(c)} codes in tuned.h, {len(py)} in _lib.py, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
