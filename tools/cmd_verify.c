/* cmd_verify.c: `tuned verify [--shape RxC] [--dtype D] [--device N]
 * [--fix]`: re-measures the stored winners of this GPU model (same name
 * and compute capability; exact records and ones of another driver, NVRTC
 * or template alike) with the evaluator, and reports the drift from the
 * stored time. With --fix, a record of exactly this system (its key and
 * provenance) whose config now measures slower than stored by more than
 * FIX_NOISE is stored again with the time measured now: a stored time
 * nobody can reproduce (an optimistic or poisoned import) would otherwise
 * keep every honest record of that key out.
 * Without a usable GPU it says why in one line and exits 1. Exit 1 also
 * when a stored winner now fails (does not compile, computes a wrong
 * result, does not launch). */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cache/key.h"
#include "src/common/clock.h"
#include "tools/cli.h"

#define DRIFT_FLAG 0.10 /* report a drift beyond 10% */
#define FIX_NOISE 0.10  /* run-to-run noise of a median on one GPU stays within this */

typedef struct collect {
    const tuned__gpu *gpu;
    tuned__record *recs;
    size_t n, cap, damaged, other_gpu;
} collect;

static int gather(void *ctx, const tuned__store_key *key, const tuned__record *r,
                  const char *damage)
{
    (void)key;
    (void)damage;
    collect *c = ctx;
    if (r == NULL) {
        c->damaged++;
        return 0;
    }
    if (strcmp(r->gpu_name, c->gpu->name) != 0 || r->prov.cc_major != (uint32_t)c->gpu->cc_major ||
        r->prov.cc_minor != (uint32_t)c->gpu->cc_minor) {
        c->other_gpu++;
        return 0;
    }
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        tuned__record *p = realloc(c->recs, cap * sizeof *p);
        if (p == NULL)
            return TUNED_ENOMEM;
        c->recs = p;
        c->cap = cap;
    }
    c->recs[c->n++] = *r;
    return 0;
}

/* Re-measures r; prints one line. Returns 1 when the winner now fails, a
 * negative code when the GPU itself failed. */
/* One result: a table line, or with --json (out not NULL) an object. */
static void report(json_t *out, const char *label, const tuned__record *r, double now_us,
                   const char *status, const char *detail, const char *fmt, ...)
    TUNED__PRINTF(7, 8);

static void report(json_t *out, const char *label, const tuned__record *r, double now_us,
                   const char *status, const char *detail, const char *fmt, ...)
{
    if (out == NULL) {
        va_list ap;
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        return;
    }
    char ks[TUNED__KEY_TEXT];
    tuned__key_format(ks, sizeof ks, &r->key);
    json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:f, s:o, s:o, s:s, s:s}", "shape", label,
                                         "key", ks, "config", r->config, "stored_us", r->median_us,
                                         "now_us", now_us > 0 ? json_real(now_us) : json_null(),
                                         "drift", now_us > 0 ? json_real((now_us - r->median_us) /
                                                                         r->median_us)
                                                             : json_null(),
                                         "status", status, "detail", detail));
}

static int verify_one(const tuned__driver *d, const tuned__nvrtc *n, const tuned__gpu *gpu,
                      const tuned__record *r, tuned__store *fix, size_t *fixed, json_t *out,
                      tuned__err *e)
{
    tuned__record here;
    tuned__shape shape = tuned__store_key_shape(&r->key);
    cli_here_record(gpu, &shape, &here);
    char why[512];
    tuned__identity id;
    tuned__gpu_identity(gpu, r->key.kernel, here.prov.policy, &id);
    tuned__tier tier = tuned__record_tier(r, &id, why, sizeof why);
    bool exact = tier == TUNED__TIER_EXACT && tuned__record_exact(r, &here, why, sizeof why);
    char label[64];
    snprintf(label, sizeof label, "%llux%llu %s", (unsigned long long)r->key.rows,
             (unsigned long long)shape.cols, tuned_dtype_name(shape.dtype));
    if (r->key.layout != TUNED__LAYOUT_DENSE) {
        report(out, label, r, 0, "skipped", "layout not measured by this build",
               "%-22s %-36s %10.2f %10s %8s  skipped: layout %u is not measured by this build\n",
               label, r->config, r->median_us, "-", "-", (unsigned)r->key.layout);
        return 0;
    }
    tuned__config cfg;
    tuned__err why_cfg = {0};
    if (tuned__config_parse(r->config, &cfg, &why_cfg) != 0) {
        report(out, label, r, 0, "failed", why_cfg.msg,
               "%-22s %-36s %10.2f %10s %8s  FAILED: this build cannot read the config: %s\n",
               label, r->config, r->median_us, "-", "-", why_cfg.msg);
        return 1;
    }
    tuned__eval_opts opts;
    tuned__eval_opts_default(&opts);
    tuned__evaluator *ev = NULL;
    tuned__eval_result res;
    int rc = tuned__evaluator_open(&ev, d, n, gpu, &shape, &opts, e);
    double copy_us = rc == 0 ? tuned__evaluator_copy_us(ev) : 0;
    if (rc == 0)
        rc = tuned__evaluator_run(ev, &cfg, 1, &res, e);
    tuned__evaluator_close(ev);
    if (rc != 0)
        return rc;
    if (res.status != TUNED__EVAL_OK) {
        report(out, label, r, 0, "failed", res.detail, "%-22s %-36s %10.2f %10s %8s  FAILED: %s: %s\n",
               label, r->config, r->median_us, "-", "-", tuned__eval_status_name(res.status),
               res.detail);
        return 1;
    }
    double drift = (res.median_us - r->median_us) / r->median_us;
    bool fixing = fix != NULL && exact && drift > FIX_NOISE;
    report(out, label, r, res.median_us,
           fixing ? "fixed" : fabs(drift) > DRIFT_FLAG ? "drift" : "ok",
           exact ? "exact" : why,
           "%-22s %-36s %10.2f %10.2f %+7.1f%%  %s%s%s%s\n", label, r->config, r->median_us,
           res.median_us, 100.0 * drift, fabs(drift) > DRIFT_FLAG ? "DRIFT " : "",
           exact ? "exact" : tier == TUNED__TIER_COMPATIBLE ? "compatible: " : "not exact: ",
           exact ? "" : why, fixing ? "; FIXED" : "");
    if (fixing) {
        /* The record as measured now: its time, the copy the evaluator
         * timed first (the stored one may come from another machine), and
         * the bandwidth over every tensor the kernel moves. */
        tuned__record now = *r;
        now.median_us = res.median_us;
        now.copy_us = copy_us;
        double bytes = tuned__kind_bytes(tuned__shape_spec(&shape), r->key.rows, r->key.cols,
                                         tuned_dtype_size(shape.dtype));
        now.gbps = bytes / (res.median_us * 1e3);
        tuned__date_now(now.date, sizeof now.date);
        if ((rc = tuned__store_put_best(fix, &now, e)) != 0)
            return rc;
        (*fixed)++;
    }
    return 0;
}

int cli_cmd_verify(const cli_opts *o)
{
    tuned__err e = {0};
    tuned__driver *d = NULL;
    tuned__nvrtc *n = NULL;
    tuned__gpu gpu;
    if (tuned__driver_load(&d, &e) != 0 || tuned__nvrtc_load(&n, &e) != 0 ||
        tuned__gpu_query(d, n, o->request.device, &gpu, &e) != 0) {
        fprintf(stderr, "tuned: verify re-measures stored winners on a GPU and cannot here: %s\n",
                e.msg);
        tuned__nvrtc_unload(n);
        tuned__driver_unload(d);
        return CLI_ERROR;
    }
    tuned__store *s = NULL;
    int rc = cli_open_store(o, o->fix ? 0 : TUNED__STORE_READONLY, &s, &e);
    collect c = {.gpu = &gpu};
    if (rc == 0) {
        tuned__store_filter f;
        cli_filter(o, &f);
        rc = tuned__store_each_best(s, &f, gather, &c, &e);
    }
    size_t fixed = 0;
    int status = CLI_OK;
    json_t *results = o->json ? json_array() : NULL;
    if (rc != 0) {
        status = cli_fail(&e);
    } else {
        if (!o->quiet)
            fprintf(stderr, "tuned: verifying %zu stored winner%s on GPU %d, %s (%s)\n", c.n,
                    c.n == 1 ? "" : "s", gpu.ordinal, gpu.name, gpu.identity);
        if (c.n > 0 && results == NULL)
            printf("%-22s %-36s %10s %10s %8s  %s\n", "SHAPE", "CONFIG", "STORED_US", "NOW_US",
                   "DRIFT", "STATUS");
        size_t failed = 0;
        for (size_t i = 0; i < c.n; i++) {
            fflush(stdout);
            int vrc = verify_one(d, n, &gpu, &c.recs[i], o->fix ? s : NULL, &fixed, results, &e);
            if (vrc < 0) {
                status = cli_fail(&e);
                break;
            }
            failed += (size_t)vrc;
        }
        if (o->fix)
            fprintf(stderr, "tuned: --fix: %zu stored time%s replaced by the time measured now\n",
                    fixed, fixed == 1 ? "" : "s");
        if (c.other_gpu > 0 || c.damaged > 0)
            fprintf(stderr, "tuned: not verified here: %zu record%s of other GPUs, %zu damaged\n",
                    c.other_gpu, c.other_gpu == 1 ? "" : "s", c.damaged);
        if (failed > 0) {
            fprintf(stderr, "tuned: %zu stored winner%s failed on this GPU\n", failed,
                    failed == 1 ? "" : "s");
            status = CLI_ERROR;
        }
    }
    tuned__store_close(s);
    free(c.recs);
    if (results != NULL && cli_print_json(results) != CLI_OK)
        status = CLI_ERROR;
    tuned__nvrtc_unload(n);
    tuned__driver_unload(d);
    return status;
}
