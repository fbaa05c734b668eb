#!/usr/bin/env bash
# bench/source-identity.sh OLD_COMMIT [BUILD_DIR]: proves a codegen change
# leaves the generated kernels alone. Builds bench/source_identity.c against
# this tree's codegen, space and common libraries (BUILD_DIR, default build/)
# and against OLD_COMMIT's (a temporary worktree, configured and built for
# those three libraries only), runs both (about 5 minutes each on 2 cores)
# and compares their outputs: every valid config's source hash and entry
# point. Exit 0 when equal; 1 with the first differences otherwise. Needs no
# GPU and no NVRTC.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
old="${1:?usage: bench/source-identity.sh OLD_COMMIT [BUILD_DIR]}"
build="${2:-$root/build}"
tmp="$(mktemp -d)"
trap 'git -C "$root" worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
libs="src/tuner/libtuned_space.a src/codegen/libtuned_codegen.a src/common/libtuned_common.a"
build_dump() { # TREE BUILD OUT
    (cd "$1" && cc -std=c11 -D_GNU_SOURCE -O1 -I. -Iinclude -isystem /usr/local/cuda/include \
        "$root/bench/source_identity.c" $(for l in $libs; do echo "$2/$l"; done) \
        -ldl -lm -lpthread -o "$3")
}
ninja -C "$build" $libs > /dev/null
git -C "$root" worktree add -q --detach "$tmp/old" "$old"
meson setup "$tmp/old/build" "$tmp/old" > /dev/null
ninja -C "$tmp/old/build" $libs > /dev/null
build_dump "$root" "$build" "$tmp/new"
build_dump "$tmp/old" "$tmp/old/build" "$tmp/old-dump"
"$tmp/new" > "$tmp/new.txt" &
"$tmp/old-dump" > "$tmp/old.txt"
wait
if cmp -s "$tmp/old.txt" "$tmp/new.txt"; then
    echo "identical: $(wc -l < "$tmp/new.txt") lines ($(grep -c ' sm[89]0 ' "$tmp/new.txt") sources)," \
         "sha256 $(sha256sum < "$tmp/new.txt" | cut -c1-16)"
    exit 0
fi
diff "$tmp/old.txt" "$tmp/new.txt" | head -20
exit 1
