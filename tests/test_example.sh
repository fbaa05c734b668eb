#!/usr/bin/env bash
# test_example.sh MODE BUILD_DIR SOURCE_DIR [CFLAGS...]: the installed package
# works for an application (issue 6).
#
#   build  `meson install --destdir` into a temporary directory, check what
#          was installed (library, header, pkg-config file, tuned, man page),
#          and compile every examples/*.c against it with
#          `pkg-config --cflags --libs tuned` (PKG_CONFIG_SYSROOT_DIR points
#          pkg-config into the temporary root); the header also compiles as
#          C++. Needs no GPU.
#   run    the same, then runs each example against the installed library;
#          an example exits 77 where there is no GPU, and so does this test
#          (skipped).
# Extra arguments are added to the compile line (the sanitizers of an ASan
# build, whose libtuned needs their runtime).
set -euo pipefail
mode="$1" build="$2" src="$3"
shift 3
extra=("$@")

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
root="$tmp/root"

if ! meson install -C "$build" --no-rebuild --destdir "$root" >"$tmp/install.log" 2>&1; then
    echo "FAIL: meson install --destdir"
    cat "$tmp/install.log"
    exit 1
fi
pc="$(find "$root" -name tuned.pc -print -quit)"
[[ -n "$pc" ]] || { echo "FAIL: no tuned.pc installed"; find "$root"; exit 1; }
for want in include/tuned.h bin/tuned share/man/man1/tuned.1; do
    [[ -n "$(find "$root" -path "*/$want" -print -quit)" ]] ||
        { echo "FAIL: $want not installed"; find "$root"; exit 1; }
done
lib="$(find "$root" -name 'libtuned.so.0' -print -quit)"
[[ -n "$lib" ]] || { echo "FAIL: libtuned.so.0 not installed"; find "$root"; exit 1; }
libdir="$(dirname "$lib")"
echo "installed: $(cd "$root" && find . -type f -o -type l | sort | tr '\n' ' ')"

export PKG_CONFIG_PATH="$(dirname "$pc")"
export PKG_CONFIG_SYSROOT_DIR="$root"
unset PKG_CONFIG_LIBDIR
flags="$(pkg-config --cflags --libs tuned)"
echo "pkg-config --cflags --libs tuned: $flags"
cc="${CC:-cc}"

# The header alone, in C and C++.
printf '#include <tuned.h>\nint main(void) { return tuned_version() == 0; }\n' >"$tmp/h.c"
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror -pedantic "$tmp/h.c" $flags -o "$tmp/h" ${extra[@]+"${extra[@]}"} ||
    { echo "FAIL: tuned.h alone does not build as C11"; exit 1; }
if command -v c++ >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    c++ -x c++ -std=c++11 -Wall -Wextra -Werror -fsyntax-only $flags "$tmp/h.c" ||
        { echo "FAIL: tuned.h does not compile as C++"; exit 1; }
fi

built=()
for example in "$src"/examples/*.c; do
    name="$(basename "$example" .c)"
    # shellcheck disable=SC2086
    # Nothing beyond what pkg-config says: the README promises that line works.
    if ! "$cc" -std=c11 -Wall -Wextra -Werror "$example" $flags \
            ${extra[@]+"${extra[@]}"} -o "$tmp/$name"; then
        echo "FAIL: $example does not build against the installed package"
        exit 1
    fi
    echo "built $name against the installed libtuned"
    built+=("$name")
done
[[ ${#built[@]} -gt 0 ]] || { echo "FAIL: no examples in $src/examples"; exit 1; }
[[ "$mode" == build ]] && exit 0

skipped=0
for name in "${built[@]}"; do
    rc=0
    LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" TUNED_DB="$tmp/store" \
        "$tmp/$name" || rc=$?
    if [[ $rc -eq 77 ]]; then
        skipped=1
    elif [[ $rc -ne 0 ]]; then
        echo "FAIL: $name exited $rc"
        exit 1
    fi
done
[[ $skipped -eq 1 ]] && exit 77
exit 0
