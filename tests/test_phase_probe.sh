#!/usr/bin/env bash
# test_phase_probe.sh EMIT_SOURCE: the phase probe's hooks still find the
# stages in the templates' text, and every probe of bench/phase-probe.list
# builds with nvcc (bench/phase-probe.sh prepare, then build). Exit 77
# (skipped) without nvcc.
set -u
emit="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
    echo "SKIP: no /usr/local/cuda/bin/nvcc"
    exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
EMIT_SOURCE="$emit" bash "$root/bench/phase-probe.sh" prepare "$tmp/probe" || exit 1
cases=$(wc -l < "$tmp/probe/cases")
want=$(grep -cv '^#' "$root/bench/phase-probe.list")
[[ "$cases" -eq "$want" ]] || { echo "FAIL: $cases cases prepared, the list has $want"; exit 1; }
hooks=$(grep -c 'PHASE(' "$tmp/probe/$(head -n 1 "$tmp/probe/cases" | cut -d' ' -f1).cu")
[[ "$hooks" -ge 5 ]] || { echo "FAIL: $hooks hooks in the first variant"; exit 1; }
bash "$root/bench/phase-probe.sh" build "$tmp/probe" || exit 1
built=$(find "$tmp/probe/bin" -type f -perm -u+x | wc -l)
[[ "$built" -eq "$cases" ]] || { echo "FAIL: $built of $cases probes built"; exit 1; }
echo "ok: $cases probes prepared and built"
