#!/usr/bin/env bash
# test_install.sh BUILD_DIR SOURCE_DIR: a new user's first hour, on a fresh
# prefix. `meson install --destdir` into a temporary root, then:
#   - the README's compile line, verbatim, builds examples/softmax.c (as
#     app.c) against the installed package, and the program runs (it exits
#     77 without a GPU: logged as skipped; the rest needs no GPU);
#   - the installed unit passes `systemd-analyze verify` (no warning at all)
#     and `systemd-analyze security` rates it 4 or lower; the sysusers.d and
#     tmpfiles.d entries are installed; ExecStart names the prefix's tuned;
#   - every command's --help is its own, and true: each option it lists is
#     accepted (before --help, with a valid value), every other option is
#     refused with status 2, and the man page's section of the command
#     names each one;
#   - --json output parses for every command that has it (tune and get
#     through a daemon on the test-only fake GPU when the build has test
#     hooks; verify only on a GPU), and get prints the same record whether
#     the daemon or the store answered;
#   - `tuned list --json | head -1` ends quietly.
# Exit 77 when systemd-analyze is missing (Debian: apt-get install systemd).
set -uo pipefail
build="$1" src="$2"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
command -v systemd-analyze >/dev/null || { echo "skip: no systemd-analyze (apt-get install systemd)"; exit 77; }

tmp="$(mktemp -d)"
daemon_pid=""
cleanup() {
    [[ -n "$daemon_pid" ]] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
root="$tmp/root"
if ! meson install -C "$build" --no-rebuild --destdir "$root" >"$tmp/install.log" 2>&1; then
    echo "FAIL: meson install --destdir"; cat "$tmp/install.log"; exit 1
fi
option() {
    meson introspect "$build" --buildoptions |
        python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == sys.argv[1]))' "$1"
}
prefix="$(option prefix)"
sanitize="$(option b_sanitize)"
tuned="$root$prefix/bin/tuned"
[[ -x "$tuned" ]] || { echo "FAIL: $prefix/bin/tuned not installed"; exit 1; }
lib="$(find "$root" -name 'libtuned.so.0' -print -quit)"
export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TUNED_SOCKET="$tmp/none.sock" TUNED_DB="$tmp/default-store"
unset TUNED_LOG TUNED_EFFORT TUNED_RETUNE TUNED_SKIP_STORE

# ---- the README's compile line, verbatim ----
line="$(grep -o 'cc app\.c \$(pkg-config --cflags --libs tuned)' "$src/README.md" | head -n 1)"
[[ -n "$line" ]] || fail "README.md has no line 'cc app.c \$(pkg-config --cflags --libs tuned)'"
pc="$(find "$root" -name tuned.pc -print -quit)"
mkdir "$tmp/app" && cp "$src/examples/softmax.c" "$tmp/app/app.c"
if (cd "$tmp/app" && PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$root" \
        bash -c "$line" >"$tmp/cc.log" 2>&1); then
    rc=0
    # A sanitized build's libtuned needs the ASan runtime loaded first; the
    # user's program (built by the README's line) has none of its own.
    preload=""
    [[ "$sanitize" == *address* ]] && preload="$(cc -print-file-name=libasan.so)"
    (cd "$tmp/app" && LD_PRELOAD="$preload" TUNED_DB="$tmp/app/store" ./a.out >"$tmp/run.log" 2>&1) || rc=$?
    case $rc in
    0) echo "ok: README compile line; the example ran" ;;
    77) echo "ok: README compile line; the example skipped (no GPU): $(tail -n 1 "$tmp/run.log")" ;;
    *) fail "the example exited $rc: $(cat "$tmp/run.log")" ;;
    esac
else
    fail "the README's line '$line' failed: $(cat "$tmp/cc.log")"
fi

# ---- the service ----
unit="$root$prefix/lib/systemd/system/tuned-softmax.service"
for f in "$unit" "$root$prefix/lib/sysusers.d/tuned-softmax.conf" \
         "$root$prefix/lib/tmpfiles.d/tuned-softmax.conf" "$root$prefix/share/doc/tuned/fleet.md" \
         "$root$prefix/share/doc/tuned/environment.md" "$root$prefix/share/man/man1/tuned.1"; do
    [[ -f "$f" ]] || fail "${f#"$root"} not installed"
done
grep -q "^ExecStart=$prefix/bin/tuned serve --socket /run/tuned-softmax/tuned.sock" "$unit" ||
    fail "ExecStart does not name $prefix/bin/tuned and the service socket: $(grep ExecStart "$unit")"
grep -q '^u tuned-softmax ' "$root$prefix/lib/sysusers.d/tuned-softmax.conf" || fail "sysusers.d: no user"
# verify resolves ExecStart and the targets under the root.
mkdir -p "$root/usr/lib/systemd/system"
cp -a /usr/lib/systemd/system/*.target "$root/usr/lib/systemd/system/" 2>/dev/null
if systemd-analyze verify --man=no --root="$root" "$unit" >"$tmp/verify.log" 2>&1 &&
        [[ ! -s "$tmp/verify.log" ]]; then
    echo "ok: systemd-analyze verify"
else
    fail "systemd-analyze verify: $(cat "$tmp/verify.log")"
fi
systemd-analyze security --offline=true --root="$root" "$unit" >"$tmp/security.log" 2>&1
score="$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' "$tmp/security.log")"
if [[ -n "$score" ]] && python3 -c "import sys; sys.exit(0 if float('$score') <= 4.0 else 1)"; then
    echo "ok: systemd-analyze security: $score"
else
    fail "systemd-analyze security: '${score:-?}' (want 4 or lower): $(tail -n 3 "$tmp/security.log")"
fi

# ---- every command's --help: its own, and true ----
commands="tune get devices serve worker list export import forget gc verify stats"
value_of() { # a valid value for an option's argument name
    case "$1" in
    RxC) echo 4x4 ;; D) echo fp16 ;; E) echo quick ;; N) echo 1 ;; S) echo 1 ;; F) echo 0.1 ;;
    FILE) echo "$tmp/trace" ;; PATH) echo "$tmp/p" ;; MODE) echo json ;; NAME) echo x ;;
    A) echo 127.0.0.1:0 ;; G) echo root ;; N=V) echo clients=1 ;; URL) echo redis://127.0.0.1 ;;
    C) echo env:X ;; KERNEL) echo softmax_bwd ;; PRIORITY) echo normal ;;
    CONFIG) echo w8.r1.c1.m1.v8.ld=def.st=def.reg=f32 ;; *) echo "?" ;;
    esac
}
"$tuned" --help >"$tmp/help.all" || fail "tuned --help"
all_opts="$(for c in $commands; do "$tuned" "$c" --help | sed -n '/^options:/,/^$/p' |
            grep -o '^  \(-[a-z], \)\?--[a-z-]*' | sed 's/.*--//'; done | sort -u)"
declare -A seen_help
man="$(cat "$root$prefix/share/man/man1/tuned.1")"
for c in $commands; do
    "$tuned" "$c" --help >"$tmp/help.$c" 2>&1 || fail "tuned $c --help exited $?"
    head -n 1 "$tmp/help.$c" | grep -q "^usage: tuned $c " || fail "tuned $c --help: $(head -n 1 "$tmp/help.$c")"
    sum="$(md5sum <"$tmp/help.$c" | cut -d' ' -f1)"
    [[ -z "${seen_help[$sum]:-}" ]] || fail "tuned $c --help is the same as ${seen_help[$sum]}'s"
    seen_help[$sum]="$c"
    cmp -s "$tmp/help.$c" "$tmp/help.all" && fail "tuned $c --help is the global help"
    section="$(printf '%s\n' "$man" | awk -v c="$c" '
        /^\.SS / { on = ($2 == "tuned" && ($3 == c || $3 == "[" c "]" || (c == "tune" && $3 == "[tune]"))) }
        /^\.SH / { on = 0 } on')"
    [[ -n "$section" ]] || fail "man page: no section for $c"
    mine="$(sed -n '/^options:/,/^$/p' "$tmp/help.$c" | grep -o '^  \(-[a-z], \)\?--[a-z-]*\( [A-Za-z=]*\)\?' |
            sed 's/^  \(-[a-z], \)\?--//')"
    while read -r opt arg; do
        [[ -z "$opt" ]] && continue
        args=("--$opt"); [[ -n "${arg:-}" ]] && args+=("$(value_of "$arg")")
        "$tuned" "$c" "${args[@]}" --help >/dev/null 2>"$tmp/err"
        rc=$?
        [[ $rc -eq 0 ]] || fail "tuned $c ${args[*]} --help exited $rc: $(cat "$tmp/err")"
        case "$opt" in help|version) continue ;; esac
        [[ "$c" == worker ]] && continue # internal: its section names no options
        grep -qF -- "\\-\\-${opt//-/\\-}" <<<"$section" || fail "man page section of $c lacks --$opt"
    done <<<"$(while read -r o; do printf '%s\n' "$o"; done <<<"$mine")"
    for opt in $all_opts; do
        grep -qx -- "$opt\( .*\)\?" <<<"$mine" && continue
        "$tuned" "$c" "--$opt" x >/dev/null 2>"$tmp/err"
        rc=$?
        [[ $rc -eq 2 ]] && grep -q "does not take --$opt" "$tmp/err" ||
            fail "tuned $c --$opt: exit $rc, want 2 ('does not take'): $(cat "$tmp/err")"
    done
done
echo "ok: --help of $(wc -w <<<"$commands") commands distinct, true, in the man page; others' options refused"

# ---- --json parses ----
parses() { python3 -c 'import json,sys; json.load(sys.stdin)' <"$1"; }
db="$tmp/store"
python3 - "$tmp/records.jsonl" <<'PY'
import json, sys
def fnv(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h ^= b; h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h
name = "NVIDIA H100 80GB HBM3"
ident = f"{name}|sm_90|132sm|81079MiB|drv13000|nvrtc13.0|tpl0123456789abcdef"
recs = []
for i in range(600):  # enough output that `list --json | head -1` closes the pipe early
    recs.append({"v": 2, "kernel": "softmax", "dtype": "fp16", "rows": 1 + i, "cols": 1024,
                 "layout": 0, "gpu_fp": "%016x" % fnv(ident), "config": "w8.r1.c1.m1.v8.ld=cs.st=cs.reg=f32",
                 "gpu": ident, "gpu_name": name, "cc_major": 9, "cc_minor": 0, "sm_count": 132,
                 "mem_mib": 81079, "driver": 13000, "nvrtc_major": 13, "nvrtc_minor": 0,
                 "template_hash": "0123456789abcdef", "policy": "l2flush-settle-events-median/3",
                 "median_us": 10.0, "copy_us": 9.0, "gbps": 400.0, "evaluations": 50,
                 "cubin": "0" * 16, "date": "2026-11-21T10:00:00Z", "tool_version": "0.1.0"})
head = {"tuned_export": 1, "schema": 2, "record_version": 2, "writer": "test",
        "date": "2026-11-21T10:00:00Z", "records": len(recs)}
with open(sys.argv[1], "w") as f:
    f.write("".join(json.dumps(x) + "\n" for x in [head, *recs]))
PY
check_json() { # NAME: the command's stdout in $tmp/out parses
    if parses "$tmp/out"; then echo "ok: $1 --json parses"; else fail "$1 --json: $(head -c 300 "$tmp/out")"; fi
}
"$tuned" import --json "$tmp/records.jsonl" --db "$db" >"$tmp/out" 2>/dev/null; check_json import
"$tuned" list --json --db "$db" >"$tmp/out" 2>/dev/null; check_json list
"$tuned" get --json --shape 7x1024 --db "$db" >"$tmp/out" 2>/dev/null; check_json get
"$tuned" export --dry-run --json --db "$db" >"$tmp/out" 2>/dev/null; check_json "export --dry-run"
"$tuned" devices --json >"$tmp/out" 2>/dev/null; check_json devices
have_gpu=0; "$tuned" devices >/dev/null 2>&1 && have_gpu=1
if [[ $have_gpu -eq 1 ]]; then
    "$tuned" verify --json --db "$db" >"$tmp/out" 2>/dev/null; check_json verify
else
    echo "skip: verify --json (no GPU)"
fi
"$tuned" list --json --db "$db" 2>"$tmp/err" | head -n 1 >/dev/null
[[ ! -s "$tmp/err" ]] || fail "list --json | head -1 said: $(cat "$tmp/err")"

# A daemon: stats; tune and get on the fake GPU when the build has hooks.
sock="$tmp/d.sock"
TUNED_TEST_FAKE_GPU=1 TUNED_TEST_FAKE_MS=1 "$tuned" serve --socket "$sock" --db "$db" -q \
    >"$tmp/daemon.log" 2>&1 &
daemon_pid=$!
# started once it answers (its socket file is made a moment before it accepts)
for _ in $(seq 100); do
    "$tuned" stats --json --socket "$sock" >"$tmp/out" 2>"$tmp/err" && break; sleep 0.1
done
if [[ -S "$sock" ]]; then
    check_json stats
    fake="$(python3 -c 'import json,sys; print(any(g.get("test_only_fake") for g in json.load(sys.stdin)["gpus"]))' <"$tmp/out" 2>/dev/null)"
    if [[ "$fake" == True ]]; then
        "$tuned" tune --json -q --shape 64x4096 --budget 12 --time 30 --socket "$sock" >"$tmp/out" 2>"$tmp/err" ||
            fail "tune through the daemon: $(cat "$tmp/err")"
        check_json tune
        "$tuned" get --shape 64x4096 --socket "$sock" >"$tmp/get.daemon" 2>/dev/null ||
            fail "get through the daemon"
        "$tuned" get --shape 64x4096 --db "$db" >"$tmp/get.store" 2>/dev/null || fail "get from the store"
        # The store path has no GPU here (source unchecked); the record is the same.
        if diff <(grep -v '^source' "$tmp/get.daemon") <(grep -v '^source' "$tmp/get.store") >"$tmp/diff"; then
            echo "ok: get prints the same record from the daemon and from the store"
        else
            fail "get differs between daemon and store: $(cat "$tmp/diff")"
        fi
        # --gpu lists the store's records of that GPU (a part of its name
        # matches), daemon or not: source unchecked here, without a GPU.
        gpu_name="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["gpu"])' <"$tmp/out")"
        "$tuned" get --json --shape 64x4096 --gpu "${gpu_name:1}" --socket "$sock" --db "$db" \
            >"$tmp/out" 2>"$tmp/err" || fail "get --gpu with a daemon running: $(cat "$tmp/err")"
        if python3 -c 'import json,sys; a = json.load(sys.stdin); sys.exit(a["source"] != "unchecked" or len(a["records"]) != 1)' <"$tmp/out"; then
            echo "ok: get --gpu PART lists the store's record, as without a daemon"
        else
            fail "get --gpu with a daemon running: $(cat "$tmp/out")"
        fi
    else
        echo "skip: tune --json through a daemon (no test hooks in this build)"
    fi
else
    fail "tuned serve did not start: $(cat "$tmp/daemon.log")"
fi

echo "$fails failures"
[[ $fails -eq 0 ]]
