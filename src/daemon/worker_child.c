/* worker_child.c: `tuned worker`, the process that owns one GPU for the
 * daemon (the protocol is in worker.h).
 *
 * The real backend loads the CUDA driver and NVRTC and evaluates with the
 * tuner's own evaluator (tuned__evaluator_open/run: the same compile,
 * check against the float64 reference and timing as `tuned tune`). The
 * test-only fake backend (fake_gpu.h) stands in when TUNED_TEST_FAKE_GPU
 * is set. Results go back one line per chunk of variants (as many as
 * compile in parallel), so the daemon's deadline is per chunk and a hang
 * is noticed within one chunk's time.
 *
 * The process dies with the daemon thread that started it (PDEATHSIG),
 * ignores SIGINT (a Ctrl-C in the daemon's terminal reaches the whole
 * process group; the daemon stops its workers itself) and lowers its
 * priority so that NVRTC compiles do not slow down the daemon's answers. */
#include "worker.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <jansson.h>

#include "../../cache/store.h"
#include "../tuner/driver.h"
#include "fake_gpu.h"
#include "tuned.h"

#define MAX_REQUEST_LINE ((size_t)1 << 20)

typedef struct backend {
    bool fake;
    int device;
    tuned__driver *d;
    tuned__nvrtc *n;
    tuned__store *cubins;    /* the compile cache, when the store opens */
    tuned__gpu gpu;
    int count;
    int chunk;
    tuned__evaluator *ev;
    bool open;
    tuned__shape shape;
    double copy_us;
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

static void emit_error(const char *key, const tuned__err *e)
{
    emit(json_pack("{s:o}", key, error_obj(e->code != 0 ? e->code : TUNED_ECUDA, e->msg)));
}

/* ---- the real GPU ---- */

/* TEST ONLY (TUNED_TEST_PLANT_FAULT): makes the context fault as a variant
 * writing out of bounds would, with a one-thread PTX kernel that stores to
 * address 8. The context is dead afterwards (a sticky error), exactly the
 * state a faulting variant leaves; the caller reports it as fatal. */
static int plant_fault(backend *b, tuned__err *e)
{
    static const char ptx[] = ".version 7.0\n.target sm_70\n.address_size 64\n"
                              ".visible .entry tuned_planted_fault()\n{\n"
                              "  .reg .b64 %rd<2>;\n  .reg .b32 %r<2>;\n"
                              "  mov.u64 %rd1, 8;\n  mov.u32 %r1, 1;\n"
                              "  st.global.u32 [%rd1], %r1;\n  ret;\n}\n";
    const tuned__driver *d = b->d;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    int rc = tuned__cuda_check(d, d->cuDevicePrimaryCtxRetain(&ctx, b->gpu.device), e,
                               "planted fault: cuDevicePrimaryCtxRetain");
    if (rc == 0)
        rc = tuned__cuda_check(d, d->cuCtxSetCurrent(ctx), e, "planted fault: cuCtxSetCurrent");
    if (rc == 0)
        rc = tuned__cuda_check(d, d->cuModuleLoadData(&mod, ptx), e,
                               "planted fault: cuModuleLoadData");
    if (rc == 0)
        rc = tuned__cuda_check(d, d->cuModuleGetFunction(&fn, mod, "tuned_planted_fault"), e,
                               "planted fault: cuModuleGetFunction");
    if (rc == 0)
        rc = tuned__cuda_check(d, d->cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
                               e, "planted fault: launch");
    if (rc == 0)
        rc = tuned__cuda_check(d, d->cuCtxSynchronize(), e, "planted fault: cuCtxSynchronize");
    if (rc == 0)
        rc = tuned__errf(e, TUNED_ECUDA, "planted fault: the kernel did not fault");
    return rc;
}

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
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    b->chunk = cores < 4 ? 4 : cores > 32 ? 32 : (int)cores;
    b->plant_fault = getenv("TUNED_TEST_PLANT_FAULT");
    if (b->plant_fault != NULL && *b->plant_fault != '\0')
        fprintf(stderr, "tuned worker: TEST ONLY: a fault is planted in %s\n", b->plant_fault);
    return rc;
}

/* ---- requests ---- */

static void close_shape(backend *b)
{
    if (b->ev != NULL)
        tuned__evaluator_close(b->ev);
    b->ev = NULL;
    b->open = false;
}

static void do_open(backend *b, const json_t *req)
{
    close_shape(b);
    tuned__err e = {0};
    tuned__shape s = {0};
    const json_t *dt = json_object_get(req, "dtype");
    const json_t *rows = json_object_get(req, "rows");
    const json_t *cols = json_object_get(req, "cols");
    if (!json_is_string(dt) || tuned_dtype_parse(json_string_value(dt), &s.dtype) != 0 ||
        !json_is_integer(rows) || !json_is_integer(cols) || json_integer_value(rows) < 1 ||
        json_integer_value(cols) < 1) {
        tuned__errf(&e, TUNED_EINVAL, "worker: malformed open request");
        emit_error("error", &e);
        return;
    }
    s.rows = (uint64_t)json_integer_value(rows);
    s.cols = (uint64_t)json_integer_value(cols);
    if (b->fake) {
        b->copy_us = tuned__fake_copy_us(&s);
    } else {
        tuned__eval_opts o;
        tuned__eval_opts_default(&o);
        o.cubins = b->cubins;
        if (tuned__evaluator_open(&b->ev, b->d, b->n, &b->gpu, &s, &o, &e) != 0) {
            emit_error("error", &e);
            return;
        }
        b->copy_us = tuned__evaluator_copy_us(b->ev);
    }
    b->shape = s;
    b->open = true;
    emit(json_pack("{s:{s:f}}", "opened", "copy_us", b->copy_us));
}

static json_t *result_obj(const tuned__eval_result *r)
{
    return json_pack("{s:i, s:f, s:f, s:f, s:i, s:f, s:i, s:i, s:s}", "s", r->status, "us",
                     r->median_us, "p20", r->p20_us, "p80", r->p80_us, "reps", r->reps, "cms",
                     r->compile_ms, "regs", r->registers, "local", r->local_bytes, "detail",
                     r->detail);
}

/* Sends {"results":[res[0..n)]} (with "fatal" when fe is not NULL). */
static void emit_results(const tuned__eval_result *res, size_t n, const tuned__err *fe)
{
    json_t *arr = json_array();
    json_t *msg = json_pack("{s:o}", "results", arr);
    if (msg == NULL) {
        fprintf(stderr, "tuned worker: out of memory\n");
        _exit(2);
    }
    for (size_t i = 0; i < n; i++)
        if (json_array_append_new(arr, result_obj(&res[i])) != 0) {
            fprintf(stderr, "tuned worker: out of memory\n");
            _exit(2);
        }
    if (fe != NULL &&
        json_object_set_new(msg, "fatal", error_obj(fe->code ? fe->code : TUNED_ECUDA, fe->msg)))
        _exit(2);
    emit(msg);
}

/* Evaluates one chunk on the real GPU; on a fatal error reports what was
 * done before it and exits (the context is unusable). */
static void real_chunk(backend *b, const tuned__config *cfgs, size_t n, tuned__eval_result *res)
{
    tuned__err e = {0};
    size_t upto = n, planted = n;
    if (b->plant_fault != NULL && *b->plant_fault != '\0') {
        for (size_t i = 0; i < n && planted == n; i++) {
            char text[TUNED__CONFIG_TEXT];
            tuned__config_format(&cfgs[i], text, sizeof text);
            if (strcmp(text, b->plant_fault) == 0)
                planted = upto = i;
        }
    }
    int rc = upto > 0 ? tuned__evaluator_run(b->ev, cfgs, upto, res, &e) : 0;
    if (rc == 0 && planted < n) {
        fprintf(stderr, "tuned worker: TEST ONLY: planted fault in %s\n", b->plant_fault);
        rc = plant_fault(b, &e);
    }
    if (rc == 0) {
        emit_results(res, n, NULL);
        return;
    }
    size_t done = 0; /* the results finished before the failure */
    while (done < upto && (res[done].status != TUNED__EVAL_OK || res[done].median_us > 0))
        done++;
    emit_results(res, done, &e);
    fprintf(stderr, "tuned worker %d: GPU %d lost: %s\n", (int)getpid(), b->device, e.msg);
    _exit(3);
}

static void do_eval(backend *b, const json_t *req)
{
    tuned__err e = {0};
    const json_t *list = json_object_get(req, "configs");
    size_t n = json_array_size(list);
    if (!b->open || !json_is_array(list) || n == 0 || n > TUNED__WORKER_MAX_BATCH) {
        tuned__errf(&e, TUNED_EINVAL, "worker: eval needs an open shape and 1 to %d configs",
                    TUNED__WORKER_MAX_BATCH);
        emit_error("error", &e);
        return;
    }
    tuned__config cfgs[TUNED__WORKER_MAX_BATCH];
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(list, i);
        if (!json_is_string(v) || tuned__config_parse(json_string_value(v), &cfgs[i], &e) != 0) {
            tuned__errf(&e, TUNED_EINVAL, "worker: config %zu is not a config", i);
            emit_error("error", &e);
            return;
        }
    }
    tuned__eval_result *res = calloc((size_t)b->chunk, sizeof *res);
    if (res == NULL) {
        fprintf(stderr, "tuned worker: out of memory\n");
        _exit(2);
    }
    for (size_t at = 0; at < n; at += (size_t)b->chunk) {
        size_t m = n - at < (size_t)b->chunk ? n - at : (size_t)b->chunk;
        memset(res, 0, (size_t)b->chunk * sizeof *res);
        if (b->fake) {
            for (size_t i = 0; i < m; i++)
                tuned__fake_eval(&b->shape, &cfgs[at + i], &res[i]);
            emit_results(res, m, NULL);
        } else {
            real_chunk(b, cfgs + at, m, res);
        }
    }
    free(res);
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
    emit(json_pack("{s:{s:s, s:i, s:i, s:b, s:o}}", "hello", "version", tuned_version(), "count",
                   b->count, "chunk", b->chunk, "fake", b->fake, "gpu", gpu));
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
        b.chunk = 4;
        rc = tuned__fake_gpu_query(device, &b.gpu, &b.count, &e);
    } else {
        rc = real_init(&b, &e);
        /* The compile cache is a help, not a need: without it, compile. */
        tuned__err se = {0};
        if (rc == 0 && db != NULL && *db != '\0' && tuned__store_open(&b.cubins, db, 0, &se) != 0)
            fprintf(stderr, "tuned worker: no compile cache: %s\n", se.msg);
    }
    if (rc != 0) {
        emit_error("error", &e);
        tuned__nvrtc_unload(b.n);
        tuned__driver_unload(b.d);
        return 1;
    }
    hello(&b);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, stdin)) > 0) {
        if ((size_t)len > MAX_REQUEST_LINE)
            break;
        json_error_t jerr;
        json_t *req = json_loadb(line, (size_t)len, 0, &jerr);
        const json_t *op = json_object_get(req, "op");
        const char *name = json_is_string(op) ? json_string_value(op) : "";
        if (strcmp(name, "open") == 0) {
            do_open(&b, req);
        } else if (strcmp(name, "eval") == 0) {
            do_eval(&b, req);
        } else if (strcmp(name, "close") == 0) {
            close_shape(&b);
            emit(json_pack("{s:b}", "closed", 1));
        } else {
            tuned__errf(&e, TUNED_EINVAL, "worker: unknown request");
            emit_error("error", &e);
        }
        json_decref(req);
    }
    free(line);
    close_shape(&b);
    tuned__store_close(b.cubins);
    tuned__nvrtc_unload(b.n);
    tuned__driver_unload(b.d);
    return 0;
}
