#!/usr/bin/env bash
# test_cli.sh TUNED: the command line's bad-input table. Every bad input gets
# exactly one line on stderr, a non-zero exit and nothing stored; help and
# version are true; with no GPU driver, devices/tune say so in one line.
set -u
tuned="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect_bad EXIT_CODE ARGS...: one stderr line, that exit code, no store.
expect_bad() {
    local want="$1"; shift
    local db="$tmp/db-$RANDOM"
    "$tuned" "$@" --db "$db" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [[ $rc -eq $want ]] || fail "tuned $* exited $rc, want $want"
    [[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "tuned $*: stderr has $(wc -l <"$tmp/err") lines: $(cat "$tmp/err")"
    grep -q '^tuned: ' "$tmp/err" || fail "tuned $*: stderr does not start with 'tuned: '"
    [[ ! -s "$tmp/out" ]] || fail "tuned $*: printed on stdout"
    [[ ! -e "$db" ]] || fail "tuned $*: created the store $db"
    echo "ok: tuned $* -> $(cat "$tmp/err")"
}

expect_bad 2 --shape 0x5
expect_bad 2 --shape -1x3
expect_bad 2 --shape 4096
expect_bad 2 --shape 99999999999x2
expect_bad 2 --shape 4096x0
expect_bad 2 --shape 4096x32000x3
expect_bad 2 --shape 12ax3
expect_bad 2 --shape ' 4x4'
expect_bad 2 --shape 2147483647x2147483392
expect_bad 2 --shape 4096x32000 --dtype fp8
expect_bad 2 --shape 4096x32000 --kernel softmax_backward
expect_bad 2 --shape 4096x32000 --kernel
expect_bad 2 --shape 4096x32000 --budget 0
expect_bad 2 --shape 4096x32000 --time -3
expect_bad 2 --shape 4096x32000 --seed x
expect_bad 2 --shape 4096x32000 --try w8.r1.bogus
nine=(); for i in 1 2 3 4 5 6 7 8 9; do nine+=(--try w8.r1.c1.m1.v8.ld=def.st=def.reg=f32); done
expect_bad 2 --shape 4096x32000 "${nine[@]}"
expect_bad 2 --shape 4096x32000 --device -1
expect_bad 2 --shape 4096x32000 --frobnicate
expect_bad 2 --shape
expect_bad 2 frob --shape 4x4
expect_bad 2 get
expect_bad 2 tune
expect_bad 2 --dtype fp16

# A mistyped import file: refused before the store is opened, so none is created.
expect_bad 1 import "$tmp/no-such-file.jsonl"

# A limit in range on its own but not against another: the message names both.
expect_bad 2 serve --socket "$tmp/s.sock" --limit output-total=8192
grep -q 'output-total 8192 must be at least output (1048576)' "$tmp/err" ||
    fail "serve --limit output-total=8192: the message does not name the limits: $(cat "$tmp/err")"

# An unwritable store path: one line naming the path, nothing created.
touch "$tmp/file"
"$tuned" --shape 64x64 --db "$tmp/file/store" >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 1 ]] || fail "unwritable db exited $rc"
[[ $(wc -l <"$tmp/err") -eq 1 ]] && grep -q "$tmp/file" "$tmp/err" ||
    fail "unwritable db message: $(cat "$tmp/err")"
echo "ok: unwritable db -> $(cat "$tmp/err")"

# get on a store that does not exist: exit 3, one line, nothing created.
"$tuned" get --shape 64x64 --db "$tmp/none" >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 3 && ! -e "$tmp/none" ]] || fail "get on a missing store exited $rc"
echo "ok: get on a missing store -> $(cat "$tmp/err")"

"$tuned" --help >"$tmp/out" 2>&1 && grep -q -- '--shape RxC' "$tmp/out" &&
    grep -q -- '--budget N' "$tmp/out" || fail "--help"

# Options of another command: refused, naming the command's own --help.
expect_bad 2 list --budget 5
expect_bad 2 get --shape 4x4 --budget 5
expect_bad 2 gc --json
expect_bad 2 export --json
expect_bad 2 --shape 4x4 --days 3
expect_bad 2 --shape 4x4 --effort medium
grep -q 'see tuned list --help' <("$tuned" list --budget 5 2>&1) || fail "list --budget: not pointed to list --help"
# The environment: a bad value is refused like a bad option.
TUNED_EFFORT=huge expect_bad 2 --shape 4x4
TUNED_LOG=loud expect_bad 2 list
TUNED_RETUNE=maybe expect_bad 2 --shape 4x4
"$tuned" worker --help | grep -q -i internal || fail "worker --help does not say it is internal"
"$tuned" --version | grep -q '^tuned [0-9]' || fail "--version"

# Without a driver: one clear line from devices and from a tune.
if ! "$tuned" devices >"$tmp/out" 2>"$tmp/err"; then
    if grep -q "no CUDA driver found" "$tmp/err"; then
        [[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "devices: $(cat "$tmp/err")"
        "$tuned" --shape 64x64 --db "$tmp/db" >"$tmp/out" 2>"$tmp/err"
        rc=$?
        [[ $rc -eq 1 ]] && grep -q "no CUDA driver found" "$tmp/err" ||
            fail "tune without a driver: exit $rc: $(cat "$tmp/err")"
        "$tuned" get --shape 64x64 --db "$tmp/db" >"$tmp/out" 2>"$tmp/err"
        [[ $? -eq 3 ]] || fail "get with no record and no GPU"
        echo "ok: no driver -> $(head -n 1 "$tmp/err")"
    fi
fi
echo "$fails failures"
[[ $fails -eq 0 ]]
