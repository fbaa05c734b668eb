#!/usr/bin/env bash
# bench/gpu-session.sh PHASE NAME: one session's GPU work on a lent machine,
# in calls that each end inside the device tool's 10-minute limit. NAME is
# the GPU's short name (h100, h200); results go to $OUT (the device tool's
# folder), else bench/results/DATE-NAME.
#
#   check    build (dependencies from .debs/ through tools/device-env.sh),
#            the GPU test suite (about 320 s; GPU_SUITE=0 leaves it out,
#            for a call that must fit less device time), tools/bench.sh on
#            the mission table (a fresh store, every shape tuned cold),
#            then tools/pretune.sh
#            NAME --from that export: cache/pretuned/NAME.jsonl made anew,
#            imported into a fresh store, served exact, verified. A short
#            table last.
#   anchors  the anchors' Python packages from the wheels carried in
#            .whlA/, .whlB/, ... (QuACK's 91 MB wheel comes in parts,
#            cu12.part.N, one a call, kept in /tmp between calls while the
#            machine stays up, joined and checked against cu12.sha256),
#            then bench/api-bench.sh: tuned.softmax against the
#            copy, torch, torch.compile, Triton, QuACK and Liger on the
#            mission, anchor and decode shapes. It stops itself before the
#            limit; run it again to go on where it stopped.
#   train    build, the GPU test suite, then bench/bench_train.py: the
#            four kernels tuned, and a training step's softmax and
#            log_softmax (backward alone against its floor, forward and
#            backward through autograd) against torch, torch.compile, QuACK
#            and Liger; stops itself before the limit (run again to go on).
#            Environment: TRAIN_SHAPES, TRAIN_DTYPES, TRAIN_TUNE_TIME (the
#            bench's --shapes, --dtypes, --tune-time), TRAIN_BUDGET_S (560:
#            seconds from the build to the bench's stop), GPU_CHECK (meson
#            test names run before the bench, e.g. api-overhead).
#   decode   build, the tests named in GPU_CHECK, then tools/bench.sh on the
#            decode set (rows 1, 8, 64 by 32768 to 262144 columns, three
#            dtypes; a fresh store, every shape tuned cold): OUT/decode.md.
#   stage    only keep the wheels carried in this call (a .whlX/ folder)
#            in /tmp, for a later `anchors` or `train` call.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
phase="${1:?usage: bench/gpu-session.sh check|train|decode|anchors|stage NAME}"
name="${2:?usage: bench/gpu-session.sh check|train|decode|anchors|stage NAME}"
out="${OUT:-$root/bench/results/$(date -u +%F)-$name}"
mkdir -p "$out"
wheels=/tmp/tuned-wheels

stage_wheels() {
    mkdir -p "$wheels"
    local d
    for d in .whl[A-Z]; do
        [[ -d "$d" ]] && cp -n "$d"/* "$wheels"/ 2>/dev/null
    done
    ls "$wheels"
}

install_wheels() {
    stage_wheels >/dev/null
    local cu12=nvidia_cutlass_dsl_libs_cu12-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
    if [[ ! -f "$wheels/$cu12" ]]; then
        # The parts in order (cu12.part.0, .1, ...), then the whole checked.
        local parts=()
        mapfile -t parts < <(ls "$wheels"/cu12.part.* 2>/dev/null | sort -V)
        if ((${#parts[@]} > 0)) && cat "${parts[@]}" >"$wheels/$cu12.joined" &&
            (cd "$wheels" && [[ -f cu12.sha256 ]] &&
                sed "s/ $cu12\$/ $cu12.joined/" cu12.sha256 | sha256sum -c --quiet >/dev/null 2>&1); then
            mv "$wheels/$cu12.joined" "$wheels/$cu12"
        else
            rm -f "$wheels/$cu12.joined"
            echo "anchors: QuACK's cu12 wheel is not complete in $wheels (parts: ${parts[*]##*/});" \
                "stage every .whlX/ folder first"
            return 1
        fi
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$wheels"/*.whl || return 1
    # The wheel's .pth file is not read from a --target directory.
    export PYTHONPATH="/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}"
    python3 -c 'import quack, liger_kernel; print("anchors: quack", quack.__version__)' 2>&1 | tail -1
}

# The build's dependencies and the CUDA libraries (tools/device-env.sh
# unpacks the .debs and sets the compiler's and loader's paths).
device_env() {
    # shellcheck source=tools/device-env.sh
    source tools/device-env.sh || exit 1
}

# The GPU test suite, its log in OUT/gpu-tests.log; a pass is remembered
# in /tmp/tuned-gpu-suite.ok for later calls on this machine. Returns the
# suite's exit status.
gpu_suite() {
    local t0=$SECONDS rc
    meson test -C build --suite gpu --print-errorlogs >"$out/gpu-tests.log" 2>&1
    rc=$?
    [[ $rc -eq 0 ]] && touch /tmp/tuned-gpu-suite.ok
    grep -E '^ *[0-9]+/[0-9]+ ' "$out/gpu-tests.log"
    echo "== GPU suite: exit $rc, $((SECONDS - t0)) s"
    return $rc
}

# The meson tests named in GPU_CHECK, their logs in OUT/checks.log.
run_checks() {
    [[ -n "${GPU_CHECK:-}" ]] || return 0
    # shellcheck disable=SC2086 # a list of test names
    meson test -C build --print-errorlogs $GPU_CHECK >"$out/checks.log" 2>&1
    grep -E '^ *[0-9]+/[0-9]+ |^(host|eager|while|graph|FAIL)' "$out/checks.log"
}

case "$phase" in
stage)
    stage_wheels
    ;;
check)
    device_env
    stage_wheels >/dev/null
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv \
        >"$out/nvidia-smi.txt" 2>&1
    t0=$SECONDS
    # (what comes back from $OUT is at most 8 files: the build log stays here)
    tools/setup.sh --no-deps >/tmp/tuned-build.log 2>&1 || { tail -n 30 /tmp/tuned-build.log; exit 1; }
    echo "== build: $((SECONDS - t0)) s"
    suite=0
    if [[ "${GPU_SUITE:-1}" == 0 ]]; then
        echo "== GPU suite: skipped (GPU_SUITE=0)"
    else
        gpu_suite
        suite=$?
    fi
    tools/bench.sh "$out" shapes >/dev/null 2>/tmp/tuned-bench-progress.log
    tar czf "$out/traces.tgz" -C "$out" traces && rm -rf "$out/traces"
    echo "== shapes: $((SECONDS - t0)) s"
    tools/pretune.sh "$name" --from "$out/shapes.jsonl" >"$out/pretune.log" 2>&1
    pre=$?
    cp "cache/pretuned/$name.jsonl" "$out/$name.jsonl"
    tail -n 3 "$out/pretune.log"
    echo "== pretune: exit $pre, $((SECONDS - t0)) s"
    cat "$out/shapes.md"
    [[ $suite -eq 0 && $pre -eq 0 ]]
    ;;
train)
    device_env
    install_wheels >"$out/wheels.log" 2>&1 || { cat "$out/wheels.log"; exit 1; }
    tail -n 1 "$out/wheels.log"
    t0=$SECONDS
    tools/setup.sh --no-deps >/tmp/tuned-build.log 2>&1 || { tail -n 30 /tmp/tuned-build.log; exit 1; }
    echo "== build: $((SECONDS - t0)) s"
    [[ -f /tmp/tuned-gpu-suite.ok ]] || gpu_suite
    run_checks
    left=$(( ${TRAIN_BUDGET_S:-560} - (SECONDS - t0) ))
    (( left < 60 )) && left=60
    PYTHONPATH="$root/bindings/python:${PYTHONPATH:-}" TUNED_LIBRARY="$root/build/libtuned.so.0" \
        python3 bench/bench_train.py --out "$out" --tuned-bin "$root/build/tuned" \
        --budget-s "$left" ${TRAIN_SHAPES:+--shapes "$TRAIN_SHAPES"} \
        ${TRAIN_TUNE_TIME:+--tune-time "$TRAIN_TUNE_TIME"} ${TRAIN_DTYPES:+--dtypes "$TRAIN_DTYPES"} \
        >"$out/train.log" 2>&1
    rc=$?
    grep -vE '^(tune |[0-9]+x[0-9]+\|)' "$out/train.log" | tail -n 60
    exit $rc
    ;;
decode)
    device_env
    tools/setup.sh --no-deps >/tmp/tuned-build.log 2>&1 || { tail -n 30 /tmp/tuned-build.log; exit 1; }
    run_checks
    tools/bench.sh "$out" decode decode >/dev/null 2>/tmp/tuned-bench-progress.log
    tar czf "$out/decode-traces.tgz" -C "$out" traces && rm -rf "$out/traces"
    cat "$out/decode.md"
    ;;
anchors)
    install_wheels >"$out/wheels.log" 2>&1 || { cat "$out/wheels.log"; exit 1; }
    tail -n 1 "$out/wheels.log"
    BENCH_SHAPES="${BENCH_SHAPES:-mission,anchors,decode}" bench/api-bench.sh "$out/api"
    ;;
*)
    echo "gpu-session: unknown phase '$phase' (check, train, decode, anchors, stage)" >&2
    exit 2
    ;;
esac
