#!/usr/bin/env bash
# test_wheel.sh TUNED SOURCE_DIR VERSION [--test-hooks]: the binary wheel
# (tools/build-wheel.sh: python -m build, auditwheel repair) installed into
# a fresh venv and used from a directory outside the repository, with no
# LD_LIBRARY_PATH and no TUNED_* variable:
#   - the wheel is one manylinux wheel for every Python 3 (py3-none);
#   - ldd of the installed libtuned and tuned resolves every library, LMDB
#     and jansson (libtuned), and LMDB, jansson, libuv and hiredis (tuned)
#     from the wheel's tuned.libs/;
#   - the venv's `tuned --help` runs the packaged executable;
#   - tests/python/check_pip_install.py: the package, tuned.version(), the
#     Client against TUNED serve (the test build's, with its fake GPU when
#     --test-hooks says it has one), CUDA work without a GPU raising.
# Exit 77 when pip cannot install the build tools (no network).
set -euo pipefail
tuned="$(realpath "$1")" src="$(realpath "$2")" version="$3" hooks="${4:-}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

start=$SECONDS
rc=0
wheel="$("$src/tools/build-wheel.sh" "$tmp/dist" 2>"$tmp/build.err" | tail -1)" || rc=$?
cat "$tmp/build.err"
[[ $rc == 77 ]] && exit 77
[[ $rc == 0 && -f "$wheel" ]] || fail "tools/build-wheel.sh exited $rc"
echo "wheel: ${wheel##*/} ($((SECONDS - start)) s)"
[[ "${wheel##*/}" =~ ^tuned-${version}-py3-none-manylinux_[0-9]+_[0-9]+_x86_64\.whl$|^tuned-${version}-py3-none-manylinux_[0-9]+_[0-9]+_aarch64\.whl$ ]] ||
    fail "not a py3-none manylinux wheel: ${wheel##*/}"

# The venv and every command below: no TUNED_*, PYTHONPATH or LD_LIBRARY_PATH.
clean_env=(env -u LD_LIBRARY_PATH -u PYTHONPATH -u PYTHONHOME)
for var in $(compgen -e); do
    case "$var" in TUNED_*) clean_env+=(-u "$var") ;; esac
done
cd "$tmp"
"${clean_env[@]}" python3 -m venv "$tmp/venv"
"${clean_env[@]}" "$tmp/venv/bin/pip" install --no-input --no-index -q "$wheel" ||
    fail "pip install ${wheel##*/}"
pkg="$("${clean_env[@]}" "$tmp/venv/bin/python" -c 'import os, tuned; print(os.path.dirname(tuned.__file__))')"
libs="$(dirname "$pkg")/tuned.libs"
[[ -d "$libs" ]] || fail "no tuned.libs/ beside $pkg"

# Each library from the wheel's tuned.libs/, none missing.
check_ldd() {
    local file="$1"; shift
    local out
    out="$("${clean_env[@]}" ldd "$file")"
    if grep -q "not found" <<<"$out"; then
        echo "$out"
        fail "ldd $file: a library is not found"
    fi
    for name in "$@"; do
        local target
        target="$(awk -v n="$name" '$1 ~ "^" n "[-.]" && $2 == "=>" { print $3 }' <<<"$out")"
        [[ -n "$target" && "$(realpath "$(dirname "$target")")" == "$(realpath "$libs")" ]] || {
            echo "$out"
            fail "ldd $file: $name not from $libs"
        }
    done
    echo "ok    ldd ${file#"$tmp"/}: $* from tuned.libs/"
}
check_ldd "$pkg/libtuned.so.0" liblmdb libjansson
check_ldd "$pkg/bin/tuned" liblmdb libjansson libuv libhiredis

"${clean_env[@]}" "$tmp/venv/bin/tuned" --help >"$tmp/help" 2>&1 || fail "tuned --help: $(cat "$tmp/help")"
grep -q "usage: tuned" "$tmp/help" || fail "tuned --help says: $(head -3 "$tmp/help")"
echo "ok    venv/bin/tuned --help"

"${clean_env[@]}" "$tmp/venv/bin/python" "$src/tests/python/check_pip_install.py" \
    "$tuned" "$src" "$version" "$tmp/venv" ${hooks:+"$hooks"}
echo "wheel test: $((SECONDS - start)) s"
