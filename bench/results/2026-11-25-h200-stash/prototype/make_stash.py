"""make_stash.py DIR: adds stash twins to a phase-probe DIR (prepared from
bench/stash-probe.list): each line of DIR/cases whose shape has 131072
columns becomes, beside itself, a variant of the same config over 262144
columns with passes 1..S kept in shared memory (T_STASH S), for S half the passes and five eighths. The tuner's config check
refuses these configs at 262144 columns (their registers), so they are
made from the source it emits for 131072 columns: T_COLS and T_ITERS are
doubled and T_STASH is defined; the rest of the source, the templates
included, is the tree's."""
import os, re, sys

d = sys.argv[1]
cases = open(f"{d}/cases").read().split("\n")
out = []
for line in cases:
    if not line.strip():
        continue
    name, rows, blocks, threads, dtype, config = line.split()
    if "x131072" not in name:
        out.append(line)
        continue
    src = open(f"{d}/{name}.cu").read()
    iters = int(re.search(r"#define T_ITERS (\d+)", src).group(1))
    for stash in (iters, iters + iters // 4):
        new = re.sub(r"#define T_COLS 131072", "#define T_COLS 262144", src, count=1)
        new = re.sub(r"#define T_ITERS \d+", f"#define T_ITERS {iters * 2}\n#define T_STASH {stash}",
                     new, count=1)
        assert new.count("T_STASH") >= 2 and "T_COLS 262144" in new
        twin = name.replace("x131072", "x262144") + f"-stash{stash}"
        open(f"{d}/{twin}.cu", "w").write(new)
        out.append(f"{twin} {rows} {blocks} {threads} {dtype} {config}.stash{stash}")
open(f"{d}/cases", "w").write("\n".join(out) + "\n")
print(f"{len(out)} cases")
