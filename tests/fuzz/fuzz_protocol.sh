#!/usr/bin/env bash
# fuzz_protocol.sh SRCDIR [SECONDS]: builds tests/fuzz/fuzz_protocol.c with
# clang -fsanitize=fuzzer,address,undefined and runs it for SECONDS
# (default: $TUNED_FUZZ_SECONDS, else 60) from the seeds in
# tests/fuzz/corpus/ with the dictionary tests/fuzz/protocol.dict. Exit 77
# (skipped) when clang or libFuzzer is missing; 1 when the fuzzer found a
# crash, a leak or undefined behaviour (the input is saved and printed).
# TUNED_FUZZ_LIBS: the build's static libraries the parser needs beyond
# the files compiled here (the kernel names are codegen's; meson passes
# them), not instrumented.
set -u
src="${1:?usage: fuzz_protocol.sh SRCDIR [SECONDS]}"
secs="${2:-${TUNED_FUZZ_SECONDS:-60}}"
command -v clang >/dev/null 2>&1 || { echo "clang not found: skipped"; exit 77; }
command -v pkg-config >/dev/null 2>&1 && pkg-config --exists jansson ||
    { echo "jansson (pkg-config) not found: skipped"; exit 77; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' >"$tmp/probe.c"
if ! clang -fsanitize=fuzzer "$tmp/probe.c" -o "$tmp/probe" >/dev/null 2>&1; then
    echo "clang has no libFuzzer (-fsanitize=fuzzer): skipped"
    exit 77
fi
# shellcheck disable=SC2046
clang -std=c11 -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -I"$src" -I"$src/include" $(pkg-config --cflags jansson) \
    -isystem "${CUDA_INCLUDE:-/usr/local/cuda/include}" \
    "$src/tests/fuzz/fuzz_protocol.c" "$src/src/daemon/protocol.c" \
    "$src/src/daemon/protocol_get.c" "$src/src/common/dtype.c" \
    "$src/src/common/err.c" ${TUNED_FUZZ_LIBS:-} $(pkg-config --libs jansson) -lm -o "$tmp/fuzz" || exit 1
mkdir -p "$tmp/corpus"
cd "$tmp" || exit 1
echo "fuzzing the request parser for $secs s"
ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}" "$tmp/fuzz" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
    -dict="$src/tests/fuzz/protocol.dict" "$tmp/corpus" "$src/tests/fuzz/corpus" 2>&1 | tail -n 25
rc=${PIPESTATUS[0]}
for f in "$tmp"/crash-* "$tmp"/leak-* "$tmp"/timeout-* "$tmp"/oom-*; do
    [[ -e "$f" ]] || continue
    echo "reproducer $f: $(od -c "$f" | head -n 5)"
done
exit "$rc"
