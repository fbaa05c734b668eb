#!/bin/sh
# sass-diff.sh: checks that the kernel templates of this tree compile to the
# same machine code as those of an older commit (default HEAD: the change
# not yet committed), config by config over a sample of the tuner's space
# for eight shapes, three dtypes and the four kernels (bench/sass_diff.c).
# The define blocks are this tree's codegen's: it answers for changes to
# the templates alone.
#
#   bench/sass-diff.sh [BUILD_DIR [COMMIT [PER_KIND [THREADS]]]]
#
# Needs NVRTC, not a GPU. Exits 1 if any kernel's code differs. With
# NVDISASM=/path/to/nvdisasm (pip: nvidia-cuda-nvdisasm) the differences are
# kept and sorted by kind (bench/sass_classify.py).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
commit=${2:-HEAD}
per_kind=${3:-4}
threads=${4:-2}
old=$(mktemp -d)
trap 'rm -rf "$old"' EXIT
for t in $(git -C "$root" ls-tree --name-only "$commit" kernels/templates/ | grep '\.cu$'); do
    git -C "$root" show "$commit:$t" > "$old/$(basename "$t")"
done
ninja -C "$build" bench/sass_diff > /dev/null
if [ -z "${NVDISASM:-}" ]; then
    exec "$build/bench/sass_diff" "$old" "$per_kind" "$threads"
fi
mkdir "$old/kept"
rc=0
SASS_DIFF_KEEP="$old/kept" "$build/bench/sass_diff" "$old" "$per_kind" "$threads" || rc=$?
python3 "$root/bench/sass_classify.py" "$NVDISASM" "$old/kept" || true
exit $rc
