/* worker_child.c: `tuned worker`, the process that owns one GPU for the
 * daemon (the protocol is in worker.h).
 *
 * A tune request runs tuned__tune() with the real driver and NVRTC and
 * the store (compile cache, history, warm start): the same tune as `tuned
 * tune`. Its callbacks become event lines: the roofline and each
 * generation (progress), each variant right before its first launch
 * (running: the evaluator's on_variant hook), each variant's result after
 * its batch (evaluated), the winner (outcome). The test-only fake backend
 * (fake_gpu.h) stands in for the GPU when TUNED_TEST_FAKE_GPU is set, with
 * the same lines; like the planted fault, it exists only in a build with
 * test hooks (-Dtest_hooks=true).
 *
 * After a failed tune the worker reports it and exits: a fatal CUDA error
 * leaves the context unusable, and a fresh process is cheap. It dies with
 * the daemon thread that started it (PDEATHSIG), ignores SIGINT and SIGHUP
 * (a Ctrl-C or a hangup of the daemon's terminal reaches the whole process
 * group; the daemon stops its workers itself) and lowers its priority so that NVRTC compiles
 * do not slow down the daemon's answers. */
#include "src/daemon/worker.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <jansson.h>

#include "cache/record.h"
#include "cache/store.h"
#include "src/driver/driver.h"
#include "src/tuner/tune.h"
#include "src/daemon/fake_gpu.h"
#include "tuned.h"

#define MAX_REQUEST_LINE ((size_t)1 << 20)

typedef struct backend {
    bool fake;
    int device;
    tuned__driver *d;
    tuned__nvrtc *n;
    tuned__store *store;     /* compile cache and history, when it opens */
    tuned__gpu gpu;
    int count;
    const char *plant_fault; /* TEST ONLY: TUNED_TEST_PLANT_FAULT */
} backend;

/* Writes one JSON line on stdout and frees msg; exits when stdout is gone
 * (the daemon died or gave up on us). */
static void emit(json_t *msg)
{
    char *text = msg != NULL ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    if (text == NULL) {
        fprintf(stderr, "tuned worker: out of memory\n");
        _exit(2);
    }
    int bad = fputs(text, stdout) == EOF || fputc('\n', stdout) == EOF || fflush(stdout) != 0;
    free(text);
    if (bad)
        _exit(0);
}

static json_t *error_obj(int code, const char *message)
{
    return json_pack("{s:i, s:s}", "code", code, "message", message);
}

static void emit_error(const tuned__err *e, bool lost)
{
    emit(json_pack("{s:o, s:b}", "error", error_obj(e->code != 0 ? e->code : TUNED_ECUDA, e->msg),
                   "lost", lost));
}

/* ---- the real GPU ---- */

#ifdef TUNED_TEST_HOOKS
/* TEST ONLY (TUNED_TEST_PLANT_FAULT): makes the context fault as a variant
 * writing out of bounds would, with a one-thread PTX kernel that stores to
 * address 8. The context is dead afterwards (a sticky error): the variant
 * about to run fails on it, and so does the tune, exactly as after a
 * faulting variant. A build without test hooks has none of this. */
static const char *planted_fault_config(void)
{
    const char *cfg = getenv("TUNED_TEST_PLANT_FAULT");
    if (cfg == NULL || *cfg == '\0')
        return NULL;
    fprintf(stderr, "tuned worker: TEST ONLY: a fault is planted in %s\n", cfg);
    return cfg;
}

static void plant_fault(backend *b)
{
    static const char ptx[] = ".version 7.0\n.target sm_70\n.address_size 64\n"
                              ".visible .entry tuned_planted_fault()\n{\n"
                              "  .reg .b64 %rd<2>;\n  .reg .b32 %r<2>;\n"
                              "  mov.u64 %rd1, 8;\n  mov.u32 %r1, 1;\n"
                              "  st.global.u32 [%rd1], %r1;\n  ret;\n}\n";
    const tuned__driver *d = b->d;
    tuned__err e = {0};
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    int rc = tuned__cuda_check(d, d->cuDevicePrimaryCtxRetain(&ctx, b->gpu.device), &e,
                               "cuDevicePrimaryCtxRetain");
    if (rc == 0)
        rc = tuned__cuda_check(d, d->cuCtxSetCurrent(ctx), &e, "cuCtxSetCurrent");
    if (rc == 0)
        rc = tuned__cuda_check(d, d->cuModuleLoadData(&mod, ptx), &e, "cuModuleLoadData");
    if (rc == 0)
        rc = tuned__cuda_check(d, d->cuModuleGetFunction(&fn, mod, "tuned_planted_fault"), &e,
                               "cuModuleGetFunction");
    if (rc == 0)
        rc = tuned__cuda_check(d, d->cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
                               &e, "launch");
    if (rc == 0)
        rc = tuned__cuda_check(d, d->cuCtxSynchronize(), &e, "cuCtxSynchronize");
    fprintf(stderr, "tuned worker: TEST ONLY: planted fault: %s\n",
            rc != 0 ? e.msg : "the kernel did not fault");
}
#else
static const char *planted_fault_config(void)
{
    return NULL;
}

static void plant_fault(backend *b)
{
    (void)b;
}
#endif

static int real_init(backend *b, tuned__err *e)
{
    int rc = tuned__driver_load(&b->d, e);
    if (rc == 0)
        rc = tuned__nvrtc_load(&b->n, e);
    if (rc == 0)
        rc = tuned__gpu_count(b->d, &b->count, e);
    if (rc == 0 && b->count == 0)
        rc = tuned__errf(e, TUNED_ENODEV, "the CUDA driver sees no GPU");
    if (rc == 0)
        rc = tuned__gpu_query(b->d, b->n, b->device, &b->gpu, e);
    b->plant_fault = planted_fault_config();
    return rc;
}

/* ---- the tune's callbacks, as event lines ---- */

static void on_variant(void *ctx, const tuned__config *c)
{
    backend *b = ctx;
    char text[TUNED__CONFIG_TEXT];
    tuned__config_format(c, text, sizeof text);
    emit(json_pack("{s:s}", "running", text));
    if (!b->fake && b->plant_fault != NULL && strcmp(text, b->plant_fault) == 0)
        plant_fault(b);
}

static void on_trace(void *ctx, const tuned__config *c, const tuned__eval_result *r)
{
    (void)ctx;
    char text[TUNED__CONFIG_TEXT];
    tuned__config_format(c, text, sizeof text);
    emit(json_pack("{s:{s:s, s:i, s:f, s:s}}", "evaluated", "config", text, "s", r->status, "us",
                   r->median_us, "detail", r->detail));
}

static void on_progress(void *ctx, const tuned__tune_progress *p)
{
    (void)ctx;
    if (p->search == NULL) {
        emit(json_pack("{s:{s:f}}", "progress", "copy_us", p->copy_us));
        return;
    }
    emit(json_pack("{s:{s:f, s:i, s:I, s:I}}", "progress", "copy_us", p->copy_us, "generation",
                   p->search->generation, "tried", (json_int_t)p->search->tried, "failed",
                   (json_int_t)p->search->failed));
}

/* Runs one tune request; false when the worker must exit (the tune failed). */
static bool do_tune(backend *b, const json_t *req)
{
    tuned__err e = {0};
    tuned__tune_request r;
    tuned__tune_request_default(&r);
    const json_t *dt = json_object_get(req, "dtype");
    const json_t *rows = json_object_get(req, "rows");
    const json_t *cols = json_object_get(req, "cols");
    const json_t *budget = json_object_get(req, "budget");
    const json_t *time_s = json_object_get(req, "time_s");
    const json_t *seed = json_object_get(req, "seed");
    const json_t *population = json_object_get(req, "population");
    const json_t *rounds = json_object_get(req, "finalist_rounds");
    const json_t *kernel = json_object_get(req, "kernel");
    if (!json_is_string(dt) || tuned_dtype_parse(json_string_value(dt), &r.shape.dtype) != 0 ||
        !json_is_integer(rows) || !json_is_integer(cols) || json_integer_value(rows) < 1 ||
        json_integer_value(cols) < 1 || !json_is_integer(budget) ||
        json_integer_value(budget) < 1 || !json_is_number(time_s) ||
        !(json_number_value(time_s) > 0) || !json_is_integer(seed) ||
        (population != NULL && (!json_is_integer(population) ||
                                json_integer_value(population) < 1)) ||
        (kernel != NULL && (!json_is_string(kernel) ||
                            tuned__kernel_parse(json_string_value(kernel), &r.shape.kernel) != 0)) ||
        (rounds != NULL && (!json_is_integer(rounds) || json_integer_value(rounds) < 0 ||
                            json_integer_value(rounds) > TUNED__FINALIST_ROUNDS_MAX))) {
        tuned__errf(&e, TUNED_EINVAL, "worker: malformed tune request");
        emit_error(&e, false);
        return false;
    }
    r.shape.rows = (uint64_t)json_integer_value(rows);
    r.shape.cols = (uint64_t)json_integer_value(cols);
    r.shape.params = tuned__params_default(tuned__shape_spec(&r.shape));
    const json_t *params = json_object_get(req, "params");
    if (params != NULL && (!json_is_string(params) ||
                           tuned__params_parse(tuned__shape_spec(&r.shape),
                                               json_string_value(params), &r.shape.params,
                                               &e) != 0)) {
        tuned__err_prefix(&e, TUNED_EINVAL, "worker: tune request's params");
        emit_error(&e, false);
        return false;
    }
    r.device = b->device;
    r.search.budget = (size_t)json_integer_value(budget);
    r.search.time_s = json_number_value(time_s);
    r.search.seed = (uint64_t)json_integer_value(seed);
    if (population != NULL)
        r.search.population = (size_t)json_integer_value(population);
    if (rounds != NULL && json_integer_value(rounds) > 0)
        r.finalist_rounds = (int)json_integer_value(rounds);
    r.retune = json_is_true(json_object_get(req, "retune"));
    r.store = b->store;
    r.eval.on_variant = on_variant;
    r.eval.on_variant_ctx = b;
    r.trace = on_trace;
    r.trace_ctx = b;
    tuned__tune_outcome out;
    int rc = b->fake ? tuned__fake_tune(&r, &b->gpu, on_progress, b, &out, &e)
                     : tuned__tune(b->d, b->n, &r, on_progress, b, &out, &e);
    if (rc != 0) {
        /* A dead context (a faulting variant, a lost GPU): say so. */
        emit_error(&e, rc == TUNED_ECUDA);
        return false;
    }
    tuned__record rec;
    tuned__tune_record(&out, &r.shape, &rec);
    json_t *rj = NULL;
    if (tuned__record_to_json(&rec, &rj, &e) != 0) {
        emit_error(&e, false);
        return false;
    }
    emit(json_pack("{s:{s:o, s:I, s:I, s:I, s:i, s:s, s:I, s:f, s:I}}", "outcome", "record", rj,
                   "evaluations", (json_int_t)out.search.evaluations, "resumed",
                   (json_int_t)out.search.resumed, "failed", (json_int_t)out.search.failed,
                   "generations", out.search.generations, "stop_reason", out.search.stop_reason,
                   "finalists", (json_int_t)out.finalists, "noise", out.noise, "warm_seeds",
                   (json_int_t)out.warm_seeds));
    return true;
}

static void hello(const backend *b)
{
    char tpl[17];
    snprintf(tpl, sizeof tpl, "%016llx", (unsigned long long)b->gpu.template_hash);
    json_t *gpu = json_pack("{s:i, s:s, s:s, s:i, s:i, s:I, s:i, s:i, s:i, s:i, s:s}", "ordinal",
                            b->device, "name", b->gpu.name, "identity", b->gpu.identity, "cc",
                            b->gpu.cc_major * 10 + b->gpu.cc_minor, "sms", b->gpu.sm_count,
                            "total_mem", (json_int_t)b->gpu.total_mem, "l2", b->gpu.l2_bytes,
                            "driver", b->gpu.driver_version, "nvrtc_major", b->gpu.nvrtc_major,
                            "nvrtc_minor", b->gpu.nvrtc_minor, "template_hash", tpl);
    emit(json_pack("{s:{s:s, s:i, s:b, s:o}}", "hello", "version", tuned_version(), "count",
                   b->count, "fake", b->fake, "gpu", gpu));
}

/* Dies with the daemon thread that spawned us; yields the CPU to it. */
static void lifetime(void)
{
    const char *parent = getenv("TUNED_WORKER_PARENT");
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        fprintf(stderr, "tuned worker: prctl(PR_SET_PDEATHSIG): %s\n", strerror(errno));
    if (parent != NULL && atoi(parent) != (int)getppid()) {
        fprintf(stderr, "tuned worker: the daemon is gone\n");
        _exit(1);
    }
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN); /* a hangup reaches the group too; the daemon survives it */
    const char *nice_s = getenv("TUNED_WORKER_NICE");
    int nice_v = nice_s != NULL ? atoi(nice_s) : 0;
    if (nice_v != 0 && setpriority(PRIO_PROCESS, 0, nice_v) != 0)
        fprintf(stderr, "tuned worker: setpriority(%d): %s\n", nice_v, strerror(errno));
}

int tuned__worker_main(int device, const char *db)
{
    lifetime();
    backend b = {.device = device, .fake = tuned__fake_gpu_enabled()};
    tuned__err e = {0};
    int rc;
    if (b.fake) {
        fprintf(stderr, "tuned worker: TEST ONLY: fake GPU backend (TUNED_TEST_FAKE_GPU)\n");
        rc = tuned__fake_gpu_query(device, &b.gpu, &b.count, &e);
    } else {
        rc = real_init(&b, &e);
    }
    /* The store is a help, not a need: without it, no compile cache and no
     * history (a crash then cannot be resumed past). */
    tuned__err se = {0};
    if (rc == 0 && db != NULL && *db != '\0' && tuned__store_open(&b.store, db, 0, &se) != 0)
        fprintf(stderr, "tuned worker: no store: %s\n", se.msg);
    if (rc != 0) {
        emit(json_pack("{s:o}", "error", error_obj(e.code != 0 ? e.code : TUNED_ENODEV, e.msg)));
        tuned__nvrtc_unload(b.n);
        tuned__driver_unload(b.d);
        return 1;
    }
    hello(&b);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, stdin)) > 0) {
        if ((size_t)len > MAX_REQUEST_LINE)
            break;
        json_error_t jerr;
        json_t *req = json_loadb(line, (size_t)len, 0, &jerr);
        const json_t *op = json_object_get(req, "op");
        if (json_is_string(op) && strcmp(json_string_value(op), "tune") == 0) {
            if (!do_tune(&b, req))
                rc = 3;
        } else {
            tuned__errf(&e, TUNED_EINVAL, "worker: unknown request");
            emit_error(&e, false);
            rc = 3;
        }
        json_decref(req);
    }
    free(line);
    tuned__store_close(b.store);
    tuned__nvrtc_unload(b.n);
    tuned__driver_unload(b.d);
    return rc;
}
