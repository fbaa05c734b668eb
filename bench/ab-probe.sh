#!/usr/bin/env bash
# bench/ab-probe.sh OLD_TEMPLATES [LIST] - on the GPU machine (run by the
# device tool, which sets $OUT): the tree's kernel templates against older
# ones, variant by variant. OLD_TEMPLATES is a folder of the older
# kernels/templates/*.cu (carried with the call); the tree is built as
# usual (bench/probe-env.sh), and a copy of it with the older templates in
# /tmp/ab-old. LIST (default bench/ab-decode.list) has lines
# "SHAPE DTYPE CONFIG...", SHAPE as probe_settle takes it
# ([KERNEL:]ROWSxCOLS). Each line's configs are timed by both builds'
# build/bench/probe_settle (each variant checked before it is timed; 3
# interleaved rounds at the evaluator's pause, with its copy), old, new,
# old, new, so drift shows as a difference between a build's two runs.
# Then the new build's gpu-correctness test. Writes OUT/ab-probe.txt,
# OUT/ab.md (the median of each variant's 6 rounds per build) and
# OUT/gpu-tests.log.
# OLD_TEMPLATES written --twin=SED compares variants of this tree instead:
# "old" runs the list's configs, "new" the same configs rewritten by the
# sed expression SED (e.g. --twin=s/red=fused/red=online/), one build; the
# table names each variant by its old text.
set -u
out=${OUT:?run on the GPU machine, with OUT set}
old_templates=${1:?usage: bench/ab-probe.sh OLD_TEMPLATES [LIST]}
list=${2:-bench/ab-decode.list}
# shellcheck source=bench/probe-env.sh
source bench/probe-env.sh >/dev/null
# Renames each twin config in probe_settle's output back to its old text,
# so that the table pairs them: $1 the old configs, $2 the twins (the
# same words outside --twin: nothing changes).
paste_names() {
    local -a from to
    read -r -a from <<<"$1"
    read -r -a to <<<"$2"
    local expr="" i
    for i in "${!to[@]}"; do
        expr+="s|${to[$i]}|${from[$i]}|g;"
    done
    sed "$expr"
}
old=/tmp/ab-old
twin=""
if [[ "$old_templates" == --twin=* ]]; then
    twin=${old_templates#--twin=}
    old=.
    echo "twins: $twin" >"$out/ab-probe.txt"
else
    rm -rf "$old"
    mkdir -p "$old"
    tar --exclude=./build --exclude=./.debs --exclude='./.whl?' -cf - . | tar -xf - -C "$old"
    cp "$old_templates"/*.cu "$old/kernels/templates/"
    (cd "$old" && meson setup build --buildtype=debugoptimized -Dtest_hooks=true >"$out/build-old.log" 2>&1 && ninja -C build bench/probe_settle \
        >>"$out/build-old.log" 2>&1) || { tail -n 20 "$out/build-old.log"; exit 1; }
    for t in "$old"/kernels/templates/*.cu; do
        cmp -s "$t" "kernels/templates/$(basename "$t")" || echo "differs: $(basename "$t")"
    done >"$out/ab-probe.txt"
fi
while read -r shape dtype configs; do
    for build in old new old new; do
        bin=build/bench/probe_settle
        [[ "$build" == old ]] && bin="$old/build/bench/probe_settle"
        run=$configs
        [[ -n "$twin" && "$build" == new ]] && run=$(sed "$twin" <<<"$configs")
        echo "== $build $shape $dtype"
        # shellcheck disable=SC2086 # configs are words
        "$bin" "$shape" "$dtype" 100 $run 2>&1 | paste_names "$configs" "$run"
    done
done < <(list_lines "$list") >>"$out/ab-probe.txt"
timeout 300 meson test -C build gpu-correctness >/dev/null 2>&1
echo "gpu-correctness exit $?" >>"$out/ab-probe.txt"
cp build/meson-logs/testlog.txt "$out/gpu-tests.log"
python3 - "$out" <<'PY'
import re, statistics, sys
out = sys.argv[1]
rows, cur = {}, None
for line in open(f"{out}/ab-probe.txt"):
    m = re.match(r"== (old|new) (\S+) (\S+)", line)
    if m:
        cur = m.groups()
        continue
    m = re.match(r"[0-9.]+s?\s+(copy \(at open\)|\S+)\s+([0-9.]+)", line)
    if cur and m:
        build, shape, dtype = cur
        rows.setdefault((shape, dtype, m.group(1)), {}).setdefault(build, []).append(float(m.group(2)))
with open(f"{out}/ab.md", "w") as f:
    f.write("| shape | dtype | variant | old µs | new µs | new - old |\n|---|---|---|---|---|---|\n")
    for (shape, dtype, what), t in rows.items():
        o = statistics.median(t["old"]) if t.get("old") else float("nan")
        n = statistics.median(t["new"]) if t.get("new") else float("nan")
        f.write(f"| {shape} | {dtype} | {what} | {o:.3f} | {n:.3f} | {n - o:+.3f} |\n")
print(open(f"{out}/ab.md").read())
PY
grep -E "differs|gpu-correctness|error|wrong|FAIL" "$out/ab-probe.txt" | head -20
