#!/usr/bin/env bash
# tools/test.sh - the project's one test command (README and CI run exactly
# `tools/test.sh`).
#
# Usage: tools/test.sh [--no-asan] [SUITE...] [meson test args...]
#
#   1. tools/setup.sh --asan --release: installs missing build deps, builds
#      build/ and build-asan/ (AddressSanitizer + UBSan), both with the test
#      hooks (-Dtest_hooks=true), and the `tuned` executable and libtuned of
#      build-release/ (default options: no test hooks).
#   2. meson test -C build --print-errorlogs            (all suites)
#   3. meson test -C build-asan --print-errorlogs --suite unit --suite integration
#      with ASAN_OPTIONS=detect_leaks=1, LSAN_OPTIONS=suppressions=tests/lsan.supp
#      (if that file exists), UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1.
#   4. meson test -C build-release --no-rebuild --suite release: the default
#      build holds none of the test hooks (tests/test_hooks.py).
#   5. Totals from the three builds' meson-logs/testlog.json. The LAST line printed
#      is always `N passed, N failed, N skipped` (OK/EXPECTEDFAIL = passed,
#      FAIL/TIMEOUT/ERROR/UNEXPECTEDPASS = failed, SKIP = skipped; a step that
#      failed without a failing test, e.g. the build, counts as 1 failed).
#      Exit status is 1 if anything failed, else 0.
#
# Extra arguments go to both `meson test` calls. A bare suite name (unit, gpu,
# integration) is shorthand for `--suite NAME`. When suites are given, the
# ASan run keeps only the ones among unit/integration (none left: it is
# skipped). --no-asan skips the ASan build and run altogether. The release
# check runs when no suite is given or integration is among them; it takes
# none of the extra arguments.
# Tests that need a GPU exit 77 and are reported as skipped.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '==> test: %s\n' "$*"; }

ASAN_DEFAULT_SUITES=(unit integration)

# ------------------------------------------------------------ arguments ----
no_asan=0
user_suites=()
passthru=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --no-asan) no_asan=1 ;;
        --suite)
            [[ $# -ge 2 ]] || { echo "tools/test.sh: --suite needs a value" >&2; exit 2; }
            user_suites+=("$2"); shift ;;
        --suite=*) user_suites+=("${1#--suite=}") ;;
        unit|gpu|integration) user_suites+=("$1") ;;
        # meson test options that take a separate value: keep the pair intact
        --repeat|--num-processes|-j|--wrapper|--wrap|--setup|--test-args|\
        --timeout-multiplier|-t|--no-suite|--logbase|-C)
            passthru+=("$1")
            if [[ $# -ge 2 ]]; then passthru+=("$2"); shift; fi ;;
        *) passthru+=("$1") ;;
    esac
    shift
done

main_args=(--print-errorlogs)
for s in ${user_suites[@]+"${user_suites[@]}"}; do main_args+=(--suite "$s"); done

asan_run=1
[[ $no_asan -eq 1 ]] && asan_run=0
release_run=1
if [[ ${#user_suites[@]} -gt 0 ]]; then
    release_run=0
    for s in "${user_suites[@]}"; do [[ "$s" == integration ]] && release_run=1; done
fi
asan_args=(--print-errorlogs --timeout-multiplier 3)
if [[ ${#user_suites[@]} -gt 0 ]]; then
    kept=0
    for s in "${user_suites[@]}"; do
        for d in "${ASAN_DEFAULT_SUITES[@]}"; do
            if [[ "$s" == "$d" ]]; then asan_args+=(--suite "$s"); kept=1; fi
        done
    done
    if [[ $kept -eq 0 && $asan_run -eq 1 ]]; then
        log "no unit/integration suite requested: skipping the ASan run"
        asan_run=0
    fi
else
    for d in "${ASAN_DEFAULT_SUITES[@]}"; do asan_args+=(--suite "$d"); done
fi

# ----------------------------------------------------------- summary -------
# results: "label|dir|rc" per meson test run
results=()

summarize() {
    # $1 = extra failed steps (e.g. build failure); then results entries
    python3 - "$@" <<'PY'
import json, os, sys

PASS = {"OK", "EXPECTEDFAIL"}
FAIL = {"FAIL", "TIMEOUT", "ERROR", "UNEXPECTEDPASS"}
SKIP = {"SKIP"}

extra_failed = int(sys.argv[1])
tp = tf = ts = 0
for entry in sys.argv[2:]:
    label, d, rc = entry.split("|")
    rc = int(rc)
    p = f = s = 0
    path = os.path.join(d, "meson-logs", "testlog.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    res = json.loads(line).get("result", "ERROR")
                except ValueError:
                    continue
                if res in PASS:
                    p += 1
                elif res in SKIP:
                    s += 1
                else:  # FAIL set and anything unknown
                    f += 1
    note = ""
    if rc != 0 and f == 0:
        f += 1  # meson test itself failed (rebuild error, bad arguments, ...)
        note = f"  (meson test exited {rc} without a failing test)"
    print(f"==> test: {label}: {p} passed, {f} failed, {s} skipped{note}")
    tp, tf, ts = tp + p, tf + f, ts + s
tf += extra_failed
sys.stdout.flush()
print(f"{tp} passed, {tf} failed, {ts} skipped")
sys.exit(1 if tf else 0)
PY
}

# -------------------------------------------------------------- build ------
setup_args=()
if [[ $asan_run -eq 1 ]]; then setup_args+=(--asan); fi
if [[ $release_run -eq 1 ]]; then setup_args+=(--release); fi
log "building (tools/setup.sh${setup_args[*]+ ${setup_args[*]}})"
if ! bash "$ROOT/tools/setup.sh" ${setup_args[@]+"${setup_args[@]}"}; then
    log "build FAILED"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
fi

# -------------------------------------------------------------- tests ------
run_meson_test() {
    # run_meson_test DIR [args...]; extra environment from the test_env array
    local dir="$1"; shift
    local rc=0
    rm -f "$dir/meson-logs/testlog.json"
    log "meson test -C $dir $*"
    env ${test_env[@]+"${test_env[@]}"} meson test -C "$dir" "$@" || rc=$?
    results+=("$dir|$dir|$rc")
}

test_env=()
run_meson_test build "${main_args[@]}" ${passthru[@]+"${passthru[@]}"}

if [[ $asan_run -eq 1 ]]; then
    leak_opt="detect_leaks=1"
    # LeakSanitizer needs ptrace; some containers forbid it and then every
    # test would die with "LeakSanitizer has encountered a fatal error".
    probe_dir="$(mktemp -d)"
    printf 'int main(void) { return 0; }\n' > "$probe_dir/p.c"
    if "${CC:-cc}" -fsanitize=address -o "$probe_dir/p" "$probe_dir/p.c" >/dev/null 2>&1 &&
       ! ASAN_OPTIONS=detect_leaks=1 "$probe_dir/p" >/dev/null 2>&1; then
        log "WARNING: LeakSanitizer does not work here (ptrace restricted?); running ASan with detect_leaks=0"
        leak_opt="detect_leaks=0"
    fi
    rm -rf "$probe_dir"

    # protect_shadow_gap=0: lets the CUDA driver map memory under ASan on the
    # GPU machine; harmless elsewhere.
    test_env=(
        "ASAN_OPTIONS=${leak_opt}:protect_shadow_gap=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
        "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
    )
    if [[ -f "$ROOT/tests/lsan.supp" ]]; then
        test_env+=("LSAN_OPTIONS=suppressions=$ROOT/tests/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}")
    fi
    log "ASan environment: ${test_env[*]}"
    run_meson_test build-asan "${asan_args[@]}" ${passthru[@]+"${passthru[@]}"}
fi

if [[ $release_run -eq 1 ]]; then
    # Only the release suite: the rest of build-release/ is not compiled.
    test_env=()
    run_meson_test build-release --no-rebuild --print-errorlogs --suite release
fi

# The totals line is the last thing printed; its exit status is ours.
summarize 0 "${results[@]}"
