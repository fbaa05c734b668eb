#!/usr/bin/env bash
# test_cli_gpu.sh TUNED: on a GPU, a small tune stores a winner that `tuned
# get` in a second process prints. Exit 77 (skipped) without a driver.
set -u
tuned="$1"
if ! "$tuned" devices >/dev/null 2>&1; then
    echo "SKIP: $("$tuned" devices 2>&1 | head -n 1)"
    exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$tuned" --shape 512x1000 --dtype bf16 --budget 12 --db "$tmp/db" -q >"$tmp/tune.out" || exit 1
config="$(awk '$1 == "config" { print $2 }' "$tmp/tune.out")"
[[ -n "$config" ]] || { echo "FAIL: no config printed"; cat "$tmp/tune.out"; exit 1; }
"$tuned" get --shape 512x1000 --dtype bf16 --db "$tmp/db" >"$tmp/get.out" || exit 1
got="$(awk '$1 == "config" { print $2 }' "$tmp/get.out")"
[[ "$got" == "$config" ]] || { echo "FAIL: get says '$got', tune stored '$config'"; exit 1; }
"$tuned" get --shape 512x1000 --dtype fp16 --db "$tmp/db" >/dev/null 2>&1
[[ $? -eq 3 ]] || { echo "FAIL: a record for a dtype never tuned"; exit 1; }
echo "ok: tuned and read back $config"
