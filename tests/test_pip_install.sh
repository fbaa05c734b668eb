#!/usr/bin/env bash
# test_pip_install.sh PYTHON TUNED SOURCE_DIR VERSION [--test-hooks]: `pip install .` from
# the repository root, as a user runs it, in a fresh virtual environment.
#
# pip builds libtuned and tuned with meson-python in an isolated build
# environment (meson-python, meson and ninja come from PyPI: the test skips,
# exit 77, only when pip says it could not reach them), installs the
# package with both inside it, and then, with no TUNED_* variable set,
# tests/python/check_pip_install.py checks the installed package: that it
# is the venv's copy, its library and executable, tuned.version() against
# VERSION (the meson project's), the Client against a real daemon (TUNED,
# the test build's `tuned serve`, with its test-only fake GPU: --test-hooks
# says the build has it; without it and without a GPU the get/tune checks are
# skipped, said so), and that
# CUDA work without a GPU raises a clear error. The source tree must be
# left as it was (meson-python builds out of tree): `git status` before and
# after are compared.
set -euo pipefail
python="$1" tuned="$(realpath "$2")" src="$(realpath "$3")" version="$4" hooks="${5:-}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# What git sees in the source tree, ignored files included (build
# directories are listed by name only: their contents change under meson
# test itself).
tree_state() {
    git -C "$src" status --porcelain --ignored=traditional --untracked-files=normal 2>/dev/null |
        sort
}
have_git=0
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    have_git=1
    tree_state >"$tmp/before"
fi

"$python" -m venv "$tmp/venv"
venv_python="$tmp/venv/bin/python"

# pip's own environment, without this project's variables.
clean_env=(env)
for var in $(compgen -e); do
    case "$var" in TUNED_*|PYTHONPATH|PYTHONHOME) clean_env+=(-u "$var") ;; esac
done

start=$SECONDS
if ! (cd "$tmp" && "${clean_env[@]}" "$venv_python" -m pip install --no-input "$src" \
        >"$tmp/pip.log" 2>&1); then
    if grep -qE "Failed to establish a new connection|Temporary failure in name resolution|No matching distribution found for (meson|ninja)|Could not fetch URL" "$tmp/pip.log"; then
        echo "SKIP: pip could not reach PyPI for the build requirements (meson-python, meson, ninja):"
        tail -5 "$tmp/pip.log"
        exit 77
    fi
    echo "FAIL: pip install $src"
    cat "$tmp/pip.log"
    exit 1
fi
echo "pip install: $((SECONDS - start)) s"
grep -E "^(Successfully|  Created wheel)" "$tmp/pip.log" || true

status=0
(cd "$tmp" && "${clean_env[@]}" "$venv_python" "$src/tests/python/check_pip_install.py" \
    "$tuned" "$src" "$version" "$tmp/venv" ${hooks:+"$hooks"}) || status=$?

if [[ $have_git == 1 ]]; then
    tree_state >"$tmp/after"
    if ! diff -u "$tmp/before" "$tmp/after"; then
        echo "FAIL: pip install left files in the source tree (git status changed, above)"
        status=1
    fi
fi
exit $status
