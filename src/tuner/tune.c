/* tune.c: the whole tune of one shape (see tune.h). */
#include "tune.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tuned.h"

void tuned__tune_request_default(tuned__tune_request *r)
{
    memset(r, 0, sizeof *r);
    r->shape.dtype = TUNED_FP16;
    tuned__search_opts_default(&r->search);
    tuned__eval_opts_default(&r->eval);
}

typedef struct tune_ctx {
    tuned__evaluator *ev;
    const tuned__tune_request *request;
    tuned__tune_progress_fn progress;
    void *user;
    const tuned__gpu *gpu;
    double copy_us;
} tune_ctx;

static int eval_batch(void *ctx, const tuned__config *cfgs, size_t n, tuned__eval_result *out,
                      tuned__err *e)
{
    tune_ctx *t = ctx;
    int rc = tuned__evaluator_run(t->ev, cfgs, n, out, e);
    if (t->request->trace != NULL)
        for (size_t i = 0; i < n; i++)
            if (rc == 0 || out[i].status != TUNED__EVAL_OK || out[i].median_us > 0)
                t->request->trace(t->request->trace_ctx, &cfgs[i], &out[i]);
    return rc;
}

static void on_progress(void *ctx, const tuned__search_progress *p)
{
    tune_ctx *t = ctx;
    if (t->progress != NULL) {
        tuned__tune_progress tp = {.gpu = t->gpu, .copy_us = t->copy_us, .search = p};
        t->progress(t->user, &tp);
    }
}

int tuned__tune(const tuned__driver *d, const tuned__nvrtc *n, const tuned__tune_request *r,
                tuned__tune_progress_fn progress, void *ctx, tuned__tune_outcome *out,
                tuned__err *e)
{
    memset(out, 0, sizeof *out);
    int rc = tuned__gpu_query(d, n, r->device, &out->gpu, e);
    if (rc != 0)
        return rc;
    tuned__space sp;
    if ((rc = tuned__space_init(&sp, &r->shape, out->gpu.cc_major * 10 + out->gpu.cc_minor, e)))
        return rc;
    tuned__evaluator *ev = NULL;
    if ((rc = tuned__evaluator_open(&ev, d, n, &out->gpu, &r->shape, &r->eval, e)) != 0) {
        tuned__space_free(&sp);
        return rc;
    }
    out->copy_us = tuned__evaluator_copy_us(ev);
    tune_ctx t = {.ev = ev, .request = r, .progress = progress, .user = ctx, .gpu = &out->gpu,
                  .copy_us = out->copy_us};
    if (progress != NULL) {
        tuned__tune_progress tp = {.gpu = &out->gpu, .copy_us = out->copy_us, .search = NULL};
        progress(ctx, &tp);
    }
    rc = tuned__search_run(&sp, &r->search, eval_batch, &t, on_progress, &t, &out->search, e);
    tuned__evaluator_close(ev);
    tuned__space_free(&sp);
    if (rc != 0)
        return rc;
    if (!out->search.found)
        return tuned__errf(e, TUNED_EWRONG, "tune: none of %zu variants passed its check; first: %s",
                           out->search.evaluations, out->search.first_failure);
    return 0;
}

void tuned__tune_key(const tuned__gpu *gpu, const tuned__shape *shape, tuned__store_key *key)
{
    memset(key, 0, sizeof *key);
    key->kernel = TUNED__KERNEL_SOFTMAX;
    key->dtype = (uint8_t)shape->dtype;
    key->rows = shape->rows;
    key->cols = shape->cols;
    key->gpu_fp = gpu->fingerprint;
}

void tuned__tune_record(const tuned__tune_outcome *o, const tuned__shape *shape,
                        tuned__record *rec)
{
    memset(rec, 0, sizeof *rec);
    tuned__tune_key(&o->gpu, shape, &rec->key);
    tuned__config_format(&o->search.best, rec->config, sizeof rec->config);
    snprintf(rec->gpu, sizeof rec->gpu, "%s", o->gpu.identity);
    snprintf(rec->gpu_name, sizeof rec->gpu_name, "%s", o->gpu.name);
    /* Provenance: the parts of the identity string, and how we measured. */
    rec->prov.cc_major = (uint32_t)o->gpu.cc_major;
    rec->prov.cc_minor = (uint32_t)o->gpu.cc_minor;
    rec->prov.sm_count = (uint32_t)o->gpu.sm_count;
    rec->prov.mem_mib = (uint64_t)(o->gpu.total_mem >> 20);
    rec->prov.driver_version = (uint32_t)o->gpu.driver_version;
    rec->prov.nvrtc_major = (uint32_t)o->gpu.nvrtc_major;
    rec->prov.nvrtc_minor = (uint32_t)o->gpu.nvrtc_minor;
    rec->prov.template_hash = o->gpu.template_hash;
    snprintf(rec->prov.policy, sizeof rec->prov.policy, "%s", TUNED__MEASURE_POLICY);
    rec->median_us = o->search.best_us;
    rec->copy_us = o->copy_us;
    double bytes = 2.0 * (double)shape->rows * (double)shape->cols *
                   (double)tuned_dtype_size(shape->dtype);
    rec->gbps = bytes / (o->search.best_us * 1e3);
    rec->evaluations = (uint32_t)o->search.evaluations;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(rec->date, sizeof rec->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(rec->tool_version, sizeof rec->tool_version, "%s", TUNED_VERSION_STRING);
}
