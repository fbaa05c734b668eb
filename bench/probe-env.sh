# bench/probe-env.sh: sourced by the probe scripts on the GPU machine, with
# $out set: the dependencies from tools/device-env.sh, the CUDA libraries
# on the loader path, and the build (its log in $out/build.log) unless
# build/bench/probe_settle is there already.
# shellcheck shell=bash disable=SC2154 # out is the sourcing script's
# shellcheck source=tools/device-env.sh
source tools/device-env.sh >/dev/null || exit 1
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if [ ! -x build/bench/probe_settle ]; then
    tools/setup.sh --no-deps >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
fi
