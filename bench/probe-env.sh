# bench/probe-env.sh: sourced by the probe scripts on the GPU machine, with
# $out set: the dependencies and the CUDA libraries from tools/device-env.sh,
# and the build brought up to date (its log in $out/build.log), so that a
# probe never times kernels from templates older than the tree's.
# shellcheck shell=bash disable=SC2154 # out is the sourcing script's
# shellcheck source=tools/device-env.sh
source tools/device-env.sh >/dev/null || exit 1
tools/setup.sh --no-deps >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
# A probe list's lines "SHAPE DTYPE CONFIG...", without its comments and
# blank lines.
list_lines() {
    grep -Ev '^[[:space:]]*(#|$)' "$1"
}
