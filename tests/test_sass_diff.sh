#!/usr/bin/env bash
# test_sass_diff.sh SASS_DIFF: the machine-code comparison that vouches for
# template changes (bench/sass_diff.c) still tells a change from none.
# Against a copy of this tree's own templates every sampled variant of
# 64x262144 fp32 must compile to the same code; against a copy with the
# stash's read grouping changed (STASH_GROUP 4 -> 2), stashed variants
# must differ (those of more than two passes) and no other one may. Exit 77 (skipped) where NVRTC
# cannot be loaded.
set -u
tool="$1"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/same" "$tmp/changed"
cp "$root"/kernels/templates/*.cu "$tmp/same/"
cp "$root"/kernels/templates/*.cu "$tmp/changed/"
sed -i 's/^#define STASH_GROUP 4$/#define STASH_GROUP 2/' "$tmp/changed/softmax_rows_common.cu"
if cmp -s "$tmp/same/softmax_rows_common.cu" "$tmp/changed/softmax_rows_common.cu"; then
    echo "FAIL: no '#define STASH_GROUP 4' in softmax_rows_common.cu to change"
    exit 1
fi
export SASS_DIFF_ONLY="64x262144 fp32"
"$tool" "$tmp/same" 4 2 >"$tmp/same.txt" 2>&1
rc=$?
if [[ $rc -eq 2 ]] && grep -qi nvrtc "$tmp/same.txt"; then
    echo "SKIP: $(tail -n 1 "$tmp/same.txt")"
    exit 77
fi
cat "$tmp/same.txt"
[[ $rc -eq 0 ]] || { echo "FAIL: the same templates: exit $rc"; exit 1; }
grep -qE '^[0-9]+ configs: [0-9]+ identical machine code, 0 differ, 0 failed$' "$tmp/same.txt" ||
    { echo "FAIL: the same templates gave differences"; exit 1; }
"$tool" "$tmp/changed" 4 2 >"$tmp/changed.txt" 2>&1
rc=$?
cat "$tmp/changed.txt"
[[ $rc -eq 1 ]] || { echo "FAIL: changed templates: exit $rc, not 1"; exit 1; }
differ=$(grep -cE '^DIFFERS .*\.stash[0-9]+: ' "$tmp/changed.txt")
[[ "$differ" -gt 0 ]] || { echo "FAIL: no stashed variant differs"; exit 1; }
if grep -E '^(DIFFERS|FAILED)' "$tmp/changed.txt" | grep -vE '\.stash[0-9]+: '; then
    echo "FAIL: a variant without a stash differs, or failed"
    exit 1
fi
echo "ok: the same templates, no difference; the changed stash grouping, $differ stashed variants differ and nothing else"
