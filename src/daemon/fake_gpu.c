/* fake_gpu.c: TEST ONLY: the pretend GPU of fake_gpu.h. Read that header
 * first; nothing here runs unless TUNED_TEST_FAKE_GPU is set. */
#include "src/daemon/fake_gpu.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "src/codegen/templates.h"
#include "src/common/hash.h"
#include "cache/store.h"
#include "src/tuner/space.h"
#include "tuned.h"

#define FAKE_NAME "tuned test-only fake GPU"
#define FAKE_MEM ((size_t)80 << 30)

static long env_long(const char *name, long fallback, long min, long max)
{
    const char *s = getenv(name);
    if (s == NULL || *s == '\0')
        return fallback;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return fallback;
    return v;
}

bool tuned__fake_gpu_enabled(void)
{
    return env_long("TUNED_TEST_FAKE_GPU", 0, 0, 8) > 0;
}

int tuned__fake_gpu_query(int ordinal, tuned__gpu *out, int *count, tuned__err *e)
{
    *count = (int)env_long("TUNED_TEST_FAKE_GPU", 0, 0, 8);
    if (ordinal < 0 || ordinal >= *count)
        return tuned__errf(e, TUNED_ENODEV, "fake GPU %d: there are %d", ordinal, *count);
    memset(out, 0, sizeof *out);
    out->ordinal = ordinal;
    /* Another model (TUNED_TEST_FAKE_MODEL) is another hardware class; another
     * driver (TUNED_TEST_FAKE_DRIVER) another toolchain of the same class. */
    const char *model = getenv("TUNED_TEST_FAKE_MODEL");
    if (model != NULL && *model != '\0')
        snprintf(out->name, sizeof out->name, "%s %.64s", FAKE_NAME, model);
    else
        snprintf(out->name, sizeof out->name, "%s", FAKE_NAME);
    out->cc_major = 9;
    out->cc_minor = 0;
    out->sm_count = 132;
    out->total_mem = FAKE_MEM;
    out->l2_bytes = 50 << 20;
    out->driver_version = (int)env_long("TUNED_TEST_FAKE_DRIVER", 0, 0, 1000000);
    out->nvrtc_major = out->nvrtc_minor = 0;
    out->template_hash = tuned__templates_hash();
    /* The real identity format, with NVRTC version 0.0: no real GPU can
     * have this fingerprint. */
    tuned__gpu_identify(out);
    return 0;
}

double tuned__fake_copy_us(const tuned__shape *s)
{
    const tuned__kind_spec *k = tuned__shape_spec(s);
    double bytes = k != NULL ? tuned__kind_bytes(k, s->rows, tuned__wire_cols_of(s),
                                                 tuned_dtype_size(s->dtype))
                             : 0.0;
    return 2.0 + bytes / 3.0e6; /* 3 TB/s, plus a launch */
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tuned__fake_eval(const tuned__shape *s, const tuned__config *c, tuned__eval_result *out)
{
    char text[TUNED__CONFIG_TEXT];
    tuned__config_format(c, text, sizeof text);
    const char *fault = getenv("TUNED_TEST_FAKE_FAULT");
    const char *hang = getenv("TUNED_TEST_FAKE_HANG");
    if (fault != NULL && strcmp(fault, text) == 0) {
        fprintf(stderr, "tuned worker: TEST ONLY: planted fault in %s: abort()\n", text);
        abort();
    }
    if (hang != NULL && strcmp(hang, text) == 0) {
        fprintf(stderr, "tuned worker: TEST ONLY: planted hang in %s\n", text);
        for (;;)
            pause();
    }
    long ms = env_long("TUNED_TEST_FAKE_MS", 5, 0, 60000);
    if (env_long("TUNED_TEST_FAKE_BUSY", 0, 0, 1) == 1) {
        double end = mono_s() + (double)ms / 1000.0;
        while (mono_s() < end)
            ;
    } else if (ms > 0) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    uint64_t h = tuned__fnv1a64(text, strlen(text), TUNED__FNV_SEED);
    double copy = tuned__fake_copy_us(s);
    memset(out, 0, sizeof *out);
    out->status = TUNED__EVAL_OK;
    out->median_us = copy * (1.05 + (double)(h % 1000) / 1000.0);
    out->p20_us = out->median_us * 0.99;
    out->p80_us = out->median_us * 1.01;
    out->iqm_us = out->median_us;
    out->reps = 5;
    out->compile_ms = (double)ms;
}

/* ---- the fake tune ---- */

/* The fake backend of tuned__tune_on: every variant announced through the
 * request's on_variant hook, as the GPU evaluator does, then faked. */
static int fake_run(void *ctx, const tuned__config *cfgs, size_t n, tuned__eval_result *out,
                    tuned__err *e)
{
    (void)e;
    const tuned__tune_request *r = ctx;
    for (size_t i = 0; i < n; i++) {
        if (r->eval.on_variant != NULL)
            r->eval.on_variant(r->eval.on_variant_ctx, &cfgs[i]);
        tuned__fake_eval(&r->shape, &cfgs[i], &out[i]);
    }
    return 0;
}

int tuned__fake_tune(const tuned__tune_request *r, const tuned__gpu *gpu,
                     tuned__tune_progress_fn progress, void *ctx, tuned__tune_outcome *out,
                     tuned__err *e)
{
    tuned__tune_backend b = {.run = fake_run, .ctx = (void *)r,
                             .copy_us = tuned__fake_copy_us(&r->shape)};
    return tuned__tune_on(&b, gpu, r, progress, ctx, out, e);
}
