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
#            .whlA/, .whlB/, ... (QuACK's toolchain wheel comes in parts,
#            NAME.part.N, one a call, kept in /tmp between calls while the
#            machine stays up, joined and checked against parts.sha256),
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
#   cross-entropy
#            the cross-entropy steps named in CE_STEPS (default all, in
#            order; a later call on the same machine goes on with the
#            store the first one tuned, /tmp/tuned-ce-db):
#              import    the records of CE_RECORDS (files, space-separated:
#                        bench/ce_records.py's from an earlier tune step, or
#                        lce-tune's lce-records.jsonl) into the store
#              tune      build, then cross_entropy (fused), _loss and _bwd
#                        (split) tuned cold on the benchmark's rows and the
#                        training step's (CE_TUNE_TIME seconds each, 6)
#              test      the Python package's cross-entropy GPU tests
#              sanitize  bench/ce_sanitize.py under compute-sanitizer
#                        memcheck (planted bad labels, tuned shapes)
#              bench     bench/cross_entropy_bench.py (QuACK and Liger from
#                        the staged wheels)
#              train     bench/train_step.py (TRAIN_ONLY, TRAIN_BLOCKS,
#                        TRAIN_PEAK, TRAIN_ROUNDS, TRAIN_BUDGETS: its --only,
#                        --blocks, --peak, --rounds and --budgets;
#                        its log train$TRAIN_TAG.log;
#                        TRAIN_TIMEOUT seconds, 300)
#              overhead  bench/ce_overhead.py: the host's time a call
#              cli-gpu   tests/test_cli_gpu.sh (every linear_cross_entropy
#                        config, in vocabulary blocks too, checked per dtype)
#              lce-test  tests/python/test_linear_cross_entropy.py (CUDA too)
#              linear    bench/linear_ce_bench.py: the 8B-scale loss block
#                        (LINEAR_ARGS: its options; its log linear$LINEAR_TAG.log)
#              lce-tune  bench/lce_tune.sh: linear_cross_entropy's chunk tuned
#              lce-profile  bench/lce_profile.py: its kernels by CUDA time
#              features  bench/ce_features_gpu.py: softcap and argmax
#            Each step's log goes to OUT; a step that would start with less
#            than a minute of the call's 570 s left is skipped (named).
#   router   build, then the router steps named in ROUTER_STEPS (default
#            "tune test bench"; the store /tmp/tuned-router-db is kept
#            while the machine stays up):
#              tune   router_topk tuned (ROUTER_TUNE_TIME seconds, 5;
#                     ROUTER_TUNE_TIME_LARGE, if set, at 4096 rows or
#                     more, where one generation of 40 variants takes
#                     about 20 s and a shorter tune takes no step of the
#                     pattern search) for
#                     bench/router_bench.py's routers at 64 and 16384
#                     tokens (others take the nearest winner of their
#                     key parameters; the biased routers' keys say
#                     bias=1), and router_topk_bwd at 16384;
#                     ROUTER_TUNE_KEYS and ROUTER_TUNE_ROWS choose the keys
#                     and rows, ROUTER_TUNE_ARGS adds options to each forward
#                     tune (--try CONFIG, --trace FILE), ROUTER_TUNE_TRIES
#                     "SPEC CONFIG; ..." a --try for one key (SPEC as in
#                     ROUTER_TUNE_KEYS) alone, ROUTER_BWD=0 leaves
#                     the backward out, ROUTER_TRACE=1 writes each forward
#                     tune's variants to OUT/trace-KEY.tsv
#              check  test_gpu over the router kinds (every sampled
#                     variant against float64)
#              ncu    Nsight Compute on one launch of each of
#                     ROUTER_NCU_CONFIGS at ROUTER_NCU_SHAPE (16384x128:k=8),
#                     and of each "SHAPE CONFIG" of ROUTER_NCU_RUNS (';'
#                     apart), by bench/ncu-configs.sh (NCU_SOURCE=1: the
#                     warp stalls instruction by instruction too); the
#                     reports in OUT/ncu.tgz, the summary ncu-configs.txt
#              test   tests/python/test_router.py on the GPU (transformers'
#                     routers, rules, gradients, opcheck, compile, graphs)
#              bench  bench/router_bench.py (ROUTER_BENCH_ARGS), under
#                     ROUTER_BENCH_WRAP if set (a command prefix: ncu ...)
#              moe    bench/moe_step.py (MOE_ARGS): a Qwen3-30B-A3B-shaped
#                     and a DeepSeek-V3-routed model's decode and training
#                     steps with transformers' routers and tuned's, the
#                     router keys those steps meet tuned first (MOE_TUNE_TIME
#                     seconds each, 3)
#              host   bench/router_host.py (ROUTER_HOST_ARGS): an eager
#                     call's host time, piece by piece
#              ab     bench/router-ab.sh: tuned's columns of this tree
#                     against a copy built with ROUTER_AB_OLD's
#                     router_topk.cu and/or router.py, A B B A ...
#                     (AB_BENCH_ARGS, AB_ROUNDS)
#   stage    only keep the wheels carried in this call (a .whlX/ folder)
#            in /tmp, for a later `anchors` or `train` call.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
phase="${1:?usage: bench/gpu-session.sh check|train|decode|anchors|cross-entropy|stage NAME}"
name="${2:?usage: bench/gpu-session.sh check|train|decode|anchors|cross-entropy|stage NAME}"
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
    local noquack=
    stage_wheels >/dev/null
    # QuACK's toolchain wheel, too large for one call, comes in parts
    # (NAME.part.0, .1, ...: one a call), joined here and checked against
    # parts.sha256, which names the whole wheel.
    local whole
    whole=$(awk 'NR == 1 {print $2}' "$wheels/parts.sha256" 2>/dev/null)
    if [[ -n "$whole" && ! -f "$wheels/$whole" ]]; then
        local parts=()
        mapfile -t parts < <(ls "$wheels"/*.part.* 2>/dev/null | sort -V)
        if ((${#parts[@]} > 0)) && cat "${parts[@]}" >"$wheels/$whole.joined" &&
            (cd "$wheels" && sed "s/ $whole\$/ $whole.joined/" parts.sha256 |
                sha256sum -c --quiet >/dev/null 2>&1); then
            mv "$wheels/$whole.joined" "$wheels/$whole"
        else
            rm -f "$wheels/$whole.joined"
            echo "anchors: $whole is not complete in $wheels (parts: ${parts[*]##*/});" \
                "the other anchors without QuACK (stage every .whlX/ folder for it)"
            noquack=1
        fi
    fi
    # Unpacked one over another, not pip --target: nvidia-cutlass-dsl's
    # libs-base and libs-cu12 wheels share the nvidia_cutlass_dsl folder,
    # and pip --target --upgrade replaces a folder a later wheel also has
    # (cutlass.cutlass_dsl went missing that way).
    # (The machine has no unzip: Python's zipfile unpacks.)
    mkdir -p /tmp/site
    local w
    for w in "$wheels"/*.whl; do
        case "${w##*/}" in quack* | nvidia_cutlass*) [[ -n "$noquack" ]] && continue ;; esac
        python3 -m zipfile -e "$w" /tmp/site || return 1
    done
    # The wheel's .pth file is not read from a --target directory: its
    # packages' folder by hand (python_packages up to 4.3, dsl_packages after).
    local dsl=/tmp/site/nvidia_cutlass_dsl
    export PYTHONPATH="/tmp/site:$dsl/python_packages:$dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}"
    python3 -c 'import quack, liger_kernel; print("anchors: quack", quack.__version__)' 2>&1 | tail -1
    [[ -z "${noquack:-}" ]]
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
router)
    device_env
    t0=$SECONDS
    db=/tmp/tuned-router-db
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/device.txt" 2>&1
    install_wheels >"$out/wheels.log" 2>&1 || echo "anchors: not all installed (wheels.log says which)"
    tools/setup.sh --no-deps >/tmp/tuned-build.log 2>&1 || { tail -n 30 /tmp/tuned-build.log; exit 1; }
    echo "== build: $((SECONDS - t0)) s"
    export TUNED_DB="$db" TUNED_POLICY=never TUNED_LIBRARY="$root/build/libtuned.so.0" \
        TUNED_BIN="$root/build/tuned" PYTHONPATH="$root/bindings/python:$root/bench:${PYTHONPATH:-}"
    for step in ${ROUTER_STEPS:-tune test bench}; do
        s0=$SECONDS
        if (( SECONDS - t0 > 540 )); then echo "== $step: skipped (time)"; continue; fi
        case "$step" in
        tune)
            : >>"$out/tunes.jsonl"
            for spec in ${ROUTER_TUNE_KEYS:-8:k=2,renorm=1 60:k=4 128: 160:k=6 \
                    256:k=8,score=sigmoid,groups=8,topk_group=4,renorm=1,bias=1 \
                    384:k=8,score=sigmoid,renorm=1,bias=1}; do
                for rows in ${ROUTER_TUNE_ROWS:-16384 64}; do
                    (( SECONDS - t0 > 480 )) && continue
                    # ROUTER_TRACE=1: every variant's times, a file a key
                    trace=()
                    [[ "${ROUTER_TRACE:-0}" == 1 ]] &&
                        trace=(--trace "$out/trace-${rows}x${spec//[:,=]/_}.tsv")
                    time_s=${ROUTER_TUNE_TIME:-5}
                    (( rows >= 4096 )) && time_s=${ROUTER_TUNE_TIME_LARGE:-$time_s}
                    # ROUTER_TUNE_TRIES: "SPEC CONFIG" entries (';' apart),
                    # each CONFIG tried first where SPEC is this key's
                    tries=()
                    IFS=';' read -ra entries <<<"${ROUTER_TUNE_TRIES:-}"
                    for entry in ${entries[@]+"${entries[@]}"}; do
                        read -r try_spec try_config <<<"$entry"
                        [[ "$try_spec" == "$spec" ]] && tries+=(--try "$try_config")
                    done
                    timeout 120 build/tuned tune --kernel router_topk \
                        --shape "${rows}x${spec}" --dtype "${ROUTER_DTYPE:-fp32}" \
                        --time "$time_s" --db "$db" --json ${ROUTER_TUNE_ARGS:-} \
                        ${tries[@]+"${tries[@]}"} ${trace[@]+"${trace[@]}"} \
                        >>"$out/tunes.jsonl" 2>>"$out/tunes.log" ||
                        echo "{\"kernel\": \"router_topk\", \"spec\": \"${rows}x$spec\", \"failed\": true}" \
                            >>"$out/tunes.jsonl"
                done
            done
            for spec in 128:k=8 256:k=8,score=sigmoid,renorm=1; do
                [[ "${ROUTER_BWD:-1}" == 0 ]] && continue
                timeout 120 build/tuned tune --kernel router_topk_bwd --shape "16384x$spec" \
                    --dtype "${ROUTER_DTYPE:-fp32}" --time "${ROUTER_TUNE_TIME:-5}" --db "$db" \
                    --json >>"$out/tunes.jsonl" 2>>"$out/tunes.log" ||
                    echo "{\"kernel\": \"router_topk_bwd\", \"spec\": \"16384x$spec\", \"failed\": true}" \
                        >>"$out/tunes.jsonl"
            done
            build/tuned list --db "$db" >"$out/list.txt" 2>&1
            grep -c '"failed"' "$out/tunes.jsonl" | sed 's/^/tunes failed: /'
            ;;
        check)
            # every sampled router variant against float64: test_gpu's
            # gpu-correctness over the router kinds
            GPU_CORRECTNESS_KINDS=router_topk,router_topk_bwd timeout 400 build/tests/test_gpu \
                >"$out/gpu-correctness.log" 2>&1
            echo "check: exit $?: $(tail -n 1 "$out/gpu-correctness.log")"
            ;;
        ncu)
            # one launch of each of ROUTER_NCU_CONFIGS under Nsight Compute,
            # or of each "SHAPE CONFIG" pair of ROUTER_NCU_RUNS (';' apart);
            # the reports packed into ncu.tgz (a call returns few files)
            mkdir -p "$out/ncu"
            [[ -n "${ROUTER_NCU_CONFIGS:-}" ]] &&
                bash bench/ncu-configs.sh "$out/ncu" "router_topk:${ROUTER_NCU_SHAPE:-16384x128:k=8}" \
                    "${ROUTER_DTYPE:-fp32}" $ROUTER_NCU_CONFIGS
            IFS=';' read -ra ncu_runs <<<"${ROUTER_NCU_RUNS:-}"
            for run in ${ncu_runs[@]+"${ncu_runs[@]}"}; do
                read -r ncu_shape ncu_config <<<"$run"
                [[ -n "$ncu_config" ]] &&
                    bash bench/ncu-configs.sh "$out/ncu" "router_topk:$ncu_shape" \
                        "${ROUTER_DTYPE:-fp32}" "$ncu_config"
            done
            mv "$out/ncu/ncu-configs.txt" "$out/" 2>/dev/null
            tar czf "$out/ncu.tgz" -C "$out" ncu && rm -rf "$out/ncu"
            ;;
        test)
            timeout 300 python3 tests/python/test_router.py build/libtuned.so.0 . \
                >"$out/test.log" 2>&1
            echo "test: exit $?: $(tail -n 1 "$out/test.log")"
            ;;
        bench)
            # ROUTER_BENCH_WRAP: a command the bench runs under (an ncu
            # line, to time each kernel alone)
            timeout 300 ${ROUTER_BENCH_WRAP:-} python3 bench/router_bench.py ${ROUTER_BENCH_ARGS:-} \
                >"$out/bench.log" 2>&1
            echo "bench: exit $?"
            ;;
        host)
            # where an eager call's host time goes (ROUTER_HOST_ARGS)
            timeout 300 python3 bench/router_host.py ${ROUTER_HOST_ARGS:-} >"$out/host.txt" 2>&1
            echo "host: exit $?"
            sed -n '/^router host time/,$p' "$out/host.txt"
            ;;
        moe)
            # a MoE model's steps with transformers' routers and tuned's:
            # the keys its routers meet tuned first (decode rows 1 and 64,
            # training rows 4096), forward and backward
            keys=("router_topk_bwd bf16 4096x128:k=8,renorm=1"
                "router_topk_bwd fp32 4096x256:k=8,score=sigmoid,renorm=1")
            for rows in 1 64 4096; do
                keys+=("router_topk bf16 ${rows}x128:k=8,renorm=1"
                    "router_topk fp32 ${rows}x256:k=8,score=sigmoid,groups=8,topk_group=4,renorm=1,bias=1")
            done
            for key in "${keys[@]}"; do
                read -r kernel dtype shape <<<"$key"
                timeout 120 build/tuned tune --kernel "$kernel" --dtype "$dtype" --shape "$shape" \
                    --time "${MOE_TUNE_TIME:-3}" --db "$db" --json \
                    >>"$out/moe-tunes.jsonl" 2>>"$out/moe-tunes.log" || echo "moe: tune $key failed"
            done
            timeout $((570 - (SECONDS - t0))) python3 bench/moe_step.py ${MOE_ARGS:-} \
                >"$out/moe.log" 2>&1
            echo "moe: exit $?"
            sed -n '/^model /,$p' "$out/moe.log"
            ;;
        ab)
            # this tree's router kernels against ROUTER_AB_OLD's template
            bash bench/router-ab.sh "${ROUTER_AB_OLD:?a folder holding the old router_topk.cu or router.py}" \
                "$out" >"$out/ab.txt" 2>&1
            echo "ab: exit $?"
            sed -n '/^router A\/B/,$p' "$out/ab.txt"
            ;;
        esac
        echo "== $step: $((SECONDS - s0)) s"
    done
    [[ -f "$out/list.txt" ]] && cat "$out/list.txt" | head -40
    [[ -f "$out/bench.log" ]] && sed -n '/^router forward/,$p' "$out/bench.log"
    # a call returns at most eight files: past seven, all but the summary
    # files go into router-logs.tgz
    if (( $(find "$out" -maxdepth 1 -type f | wc -l) > 7 )); then
        (cd "$out" && find . -maxdepth 1 -type f ! -name device.txt ! -name ab.txt \
            ! -name list.txt ! -name '*.tgz' -printf '%P\n' | tar czf router-logs.tgz -T - --remove-files)
    fi
    ;;
cross-entropy)
    device_env
    t0=$SECONDS
    db=/tmp/tuned-ce-db
    steps="${CE_STEPS:-tune test sanitize bench train}"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/device.txt" 2>&1
    if [[ " $steps " == *" bench "* || " $steps " == *" train "* || " $steps " == *" linear "* ]]; then
        install_wheels >"$out/wheels.log" 2>&1 || echo "anchors: not all installed (wheels.log says which)"
    fi
    tools/setup.sh --no-deps >/tmp/tuned-build.log 2>&1 || { tail -n 30 /tmp/tuned-build.log; exit 1; }
    echo "== build: $((SECONDS - t0)) s"
    export TUNED_DB="$db" TUNED_POLICY=never TUNED_LIBRARY="$root/build/libtuned.so.0" \
        TUNED_BIN="$root/build/tuned" PYTHONPATH="$root/bindings/python:${PYTHONPATH:-}"
    have_time() {
        if (( SECONDS - t0 > 510 )); then echo "== $1: skipped (the call's time is nearly spent)"; return 1; fi
    }
    for step in $steps; do
        have_time "$step" || continue
        s0=$SECONDS
        case "$step" in
        import)
            # records a tune step made before (bench/ce_records.py), instead of tuning
            for records in ${CE_RECORDS:?CE_RECORDS: the export files}; do
                build/tuned import "$records" --db "$db" 2>&1 | tail -n 1
            done
            ;;
        tune)
            : >>"$out/tunes.jsonl"
            for spec in ${CE_TUNE_SHAPES:-4096x32000:bf16 8192x50257:bf16 8192x128256:bf16 \
                    16384x151936:bf16 4096x262144:bf16 512x128256:bf16 8192x128256:fp32 \
                    4096x128256:bf16}; do
                for kind in ${CE_TUNE_KINDS:-cross_entropy cross_entropy_loss cross_entropy_bwd}; do
                    have_time "tune $kind $spec" || continue
                    timeout 90 build/tuned tune --kernel "$kind" --shape "${spec%:*}" \
                        --dtype "${spec#*:}" --time "${CE_TUNE_TIME:-6}" --db "$db" --json \
                        >>"$out/tunes.jsonl" 2>>"$out/tunes.log" ||
                        echo "{\"kernel\": \"$kind\", \"spec\": \"$spec\", \"failed\": true}" \
                            >>"$out/tunes.jsonl"
                done
            done
            build/tuned list --db "$db" >"$out/list.txt" 2>&1
            ;;
        test)
            timeout 240 python3 tests/python/test_cross_entropy_gpu.py build/tuned \
                build/libtuned.so.0 . >"$out/test.log" 2>&1
            echo "test: exit $?: $(tail -n 1 "$out/test.log")"
            ;;
        sanitize)
            # the tuned store (the planted shapes it holds run tuned configs)
            timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 \
                python3 bench/ce_sanitize.py >"$out/sanitize.log" 2>&1
            echo "sanitize: exit $?: $(grep -E 'ERROR SUMMARY|passed' "$out/sanitize.log" | tr '\n' ' ')"
            ;;
        bench)
            timeout 420 python3 bench/cross_entropy_bench.py >"$out/bench.log" 2>&1
            echo "bench: exit $?"
            sed -n '/^GPU time/,$p' "$out/bench.log" | cut -c1-200
            ;;
        train)
            timeout "${TRAIN_TIMEOUT:-300}" python3 bench/train_step.py \
                ${TRAIN_ONLY:+--only "$TRAIN_ONLY"} ${TRAIN_BLOCKS:+--blocks "$TRAIN_BLOCKS"} \
                ${TRAIN_PEAK:+--peak "$TRAIN_PEAK"} ${TRAIN_ROUNDS:+--rounds "$TRAIN_ROUNDS"} \
                ${TRAIN_BUDGETS:+--budgets "$TRAIN_BUDGETS"} >"$out/train${TRAIN_TAG:-}.log" 2>&1
            echo "train: exit $?"
            ;;
        cli-gpu)  # tests/test_cli_gpu.sh: a tune read back, verify --fix, every linear_cross_entropy config checked
            timeout 300 bash tests/test_cli_gpu.sh build/tuned >"$out/cli_gpu.log" 2>&1
            echo "cli-gpu: exit $?"; grep -E '^(ok|FAIL)' "$out/cli_gpu.log"
            ;;
        lce-test)  # tests/python/test_linear_cross_entropy.py: its CUDA cases too
            timeout 300 python3 tests/python/test_linear_cross_entropy.py build/libtuned.so.0 . \
                >"$out/lce_test.log" 2>&1
            echo "lce-test: exit $?: $(tail -n 1 "$out/lce_test.log")"
            ;;
        linear)
            timeout 300 python3 bench/linear_ce_bench.py ${LINEAR_ARGS:-} >"$out/linear${LINEAR_TAG:-}.log" 2>&1
            echo "linear: exit $?"
            ;;
        features)  # the in-kernel softcap and argmax, checked and timed (bench/ce_features_gpu.py)
            timeout 240 python3 bench/ce_features_gpu.py --reps 20 >"$out/features.log" 2>&1
            echo "features: exit $?"
            tail -n 14 "$out/features.log"
            ;;
        lce-profile)  # the linear loss block's kernels by CUDA time (bench/lce_profile.py)
            timeout 180 python3 bench/lce_profile.py >"$out/lce_profile.log" 2>&1
            echo "lce-profile: exit $?"
            grep "^check" "$out/lce_profile.log"
            ;;
        lce-tune)  # the chunk of linear_cross_entropy tuned and stored (bench/lce_tune.sh)
            timeout 500 bench/lce_tune.sh "$db" "$out" 2>&1 | tee "$out/lce_tune.log"
            ;;
        overhead)
            timeout 240 python3 bench/ce_overhead.py >"$out/overhead.log" 2>&1
            echo "overhead: exit $?"
            grep -E ' host |^== ' "$out/overhead.log"
            ;;
        *) echo "== $step: no such step" ;;
        esac
        echo "== $step: $((SECONDS - s0)) s"
    done
    [[ -f "$out/tunes.jsonl" ]] && python3 bench/ce_tunes_table.py "$out/tunes.jsonl"
    [[ -f "$out/bench.log" ]] && sed -n '/^shape /,$p' "$out/bench.log"
    [[ -f "$out/train${TRAIN_TAG:-}.log" ]] && sed -n '/^loss /,$p' "$out/train${TRAIN_TAG:-}.log"
    [[ -f "$out/linear${LINEAR_TAG:-}.log" ]] && sed -n '/^loss block /,$p' "$out/linear${LINEAR_TAG:-}.log"
    true  # a log that is absent is no failure of the call
    ;;
anchors)
    install_wheels >"$out/wheels.log" 2>&1 || { cat "$out/wheels.log"; exit 1; }
    tail -n 1 "$out/wheels.log"
    BENCH_SHAPES="${BENCH_SHAPES:-mission,anchors,decode}" bench/api-bench.sh "$out/api"
    ;;
*)
    echo "gpu-session: unknown phase '$phase' (check, train, decode, anchors, cross-entropy, stage)" >&2
    exit 2
    ;;
esac
