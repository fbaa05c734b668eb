#!/bin/sh
# sass-diff.sh: checks that the kernel templates of this tree compile to the
# same machine code as those of an older commit (default e14ad99, before the
# templates were split into named stages), config by config over a sample of
# the tuner's space for six shapes in three dtypes (bench/sass_diff.c).
#
#   bench/sass-diff.sh [BUILD_DIR [COMMIT [PER_KIND [THREADS]]]]
#
# Needs NVRTC, not a GPU. Exits 1 if any kernel's code differs. With
# NVDISASM=/path/to/nvdisasm (pip: nvidia-cuda-nvdisasm) the differences are
# kept and sorted by kind (bench/sass_classify.py).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
commit=${2:-e14ad99}
per_kind=${3:-12}
threads=${4:-2}
old=$(mktemp -d)
trap 'rm -rf "$old"' EXIT
for t in softmax_common softmax_rows softmax_staged; do
    git -C "$root" show "$commit:kernels/templates/$t.cu" > "$old/$t.cu"
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
