#!/usr/bin/env python3
"""sass_classify.py: sorts the differences sass_diff kept (SASS_DIFF_KEEP=DIR)
by what they are, with nvdisasm: the same opcode sequence (registers named
otherwise), the same opcodes in another order, the same up to one constant
loaded by MOV on one side and HFMA2.MMA on the other (ptxas's two ways to
put a constant in a register, one instruction each), or OTHER, printed with
the opcodes each side has more of.

Usage: sass_classify.py NVDISASM DIR"""
import collections
import glob
import os
import re
import subprocess
import sys

MOVES = {"MOV", "IMAD.MOV.U32", "IMAD.MOV", "HFMA2.MMA"}


def opcodes(nvdisasm, path):
    out = subprocess.run([nvdisasm, "-c", path], capture_output=True, text=True,
                         check=True).stdout
    ops = []
    for line in out.split("\n"):
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            ops.append(m.group(2))
    return ops


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: sass_classify.py NVDISASM DIR")
    nvdisasm, folder = sys.argv[1], sys.argv[2]
    kinds = collections.Counter()
    for old in sorted(glob.glob(os.path.join(folder, "*.old.cubin"))):
        a = opcodes(nvdisasm, old)
        b = opcodes(nvdisasm, old[:-len(".old.cubin")] + ".new.cubin")
        ca, cb = collections.Counter(a), collections.Counter(b)
        moves = lambda ops: collections.Counter("MOVE" if k in MOVES else k for k in ops)
        if a == b:
            kind = "same opcode sequence, other registers"
        elif ca == cb:
            kind = "same opcodes, other order"
        elif len(a) == len(b) and moves(a) == moves(b):
            kind = "same opcodes up to MOV/HFMA2.MMA constant loads"
        else:
            kind = "OTHER"
            print(f"OTHER {os.path.basename(old)}: {len(a)} -> {len(b)} instructions, "
                  f"old has more {dict(ca - cb)}, new has more {dict(cb - ca)}")
        kinds[kind] += 1
    for kind, n in kinds.most_common():
        print(f"{n:5d}  {kind}")
    return 1 if kinds["OTHER"] else 0


if __name__ == "__main__":
    sys.exit(main())
