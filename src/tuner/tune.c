/* tune.c: the whole tune of one shape (see tune.h). */
#include "src/tuner/tune.h"

#include "cache/key.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tuned.h"
#include "src/common/sort.h"
#include "src/common/clock.h"
#include "src/tuner/policy.h"

void tuned__tune_request_default(tuned__tune_request *r)
{
    memset(r, 0, sizeof *r);
    r->shape.dtype = TUNED_FP16;
    tuned__search_opts_default(&r->search);
    tuned__eval_opts_default(&r->eval);
    r->finalist_rounds = TUNED__FINALIST_ROUNDS_DEFAULT;
}

typedef struct tune_ctx {
    const tuned__tune_backend *backend;
    const tuned__tune_request *request;
    tuned__store_key key;
    tuned__tune_progress_fn progress;
    void *user;
    const tuned__gpu *gpu;
    double copy_us;
    /* Everything measured for this tune (prior and new): the finalists
     * come from here. */
    tuned__search_prior *log;
    size_t nlog, caplog;
    bool log_oom;
} tune_ctx;

static void remember(tune_ctx *t, const tuned__config *c, bool ok, double us, double p80_us)
{
    if (t->nlog == t->caplog) {
        size_t cap = t->caplog ? 2 * t->caplog : 256;
        tuned__search_prior *grown = realloc(t->log, cap * sizeof *grown);
        if (grown == NULL) {
            t->log_oom = true;
            return;
        }
        t->log = grown;
        t->caplog = cap;
    }
    t->log[t->nlog++] = (tuned__search_prior){*c, ok, us, p80_us};
}

_Static_assert(sizeof TUNED__MEASURE_POLICY <= sizeof(((tuned__provenance *)0)->policy),
               "the measurement policy's name fits a record (a cut one would never match)");

/* The history's status for an evaluation's (the store keeps its own
 * names); -1 for a variant that was not run, which the history skips. */
static int hist_status(int eval_status)
{
    switch (eval_status) {
    case TUNED__EVAL_OK: return TUNED__HIST_OK;
    case TUNED__EVAL_COMPILE_ERROR: return TUNED__HIST_COMPILE_ERROR;
    case TUNED__EVAL_WRONG: return TUNED__HIST_WRONG;
    case TUNED__EVAL_LAUNCH_ERROR: return TUNED__HIST_LAUNCH_ERROR;
    case TUNED__EVAL_TIMEOUT: return TUNED__HIST_TIMEOUT;
    }
    return -1;
}

/* Writes one generation's results (failures_only: only its failures) to
 * the history in one transaction, so a killed tune loses at most the
 * generation in flight. */
static int record_history(const tune_ctx *t, const tuned__config *cfgs, size_t n,
                          const tuned__eval_result *res, bool failures_only, tuned__err *e)
{
    tuned__store_eval *evs = calloc(n, sizeof *evs);
    if (evs == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "tune: out of memory for the history");
    char date[32];
    tuned__date_now(date, sizeof date);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int status = hist_status(res[i].status);
        if (status < 0)
            continue; /* not run: the batch stopped at a fatal GPU error */
        if (failures_only && status == TUNED__HIST_OK)
            continue;
        tuned__store_eval *h = &evs[k++];
        h->key = t->key;
        tuned__config_format(&cfgs[i], h->config, sizeof h->config);
        h->status = status;
        if (res[i].status == TUNED__EVAL_OK) {
            h->median_us = res[i].median_us;
            h->p20_us = res[i].p20_us;
            h->p80_us = res[i].p80_us;
        }
        h->compile_ms = res[i].compile_ms;
        snprintf(h->date, sizeof h->date, "%s", date);
        snprintf(h->detail, sizeof h->detail, "%s", res[i].detail);
    }
    int rc = k > 0 ? tuned__store_put_evals(t->request->store, evs, k, e) : 0;
    free(evs);
    return rc;
}

static int eval_batch(void *ctx, const tuned__config *cfgs, size_t n, tuned__eval_result *out,
                      tuned__err *e)
{
    tune_ctx *t = ctx;
    int rc = t->backend->run(t->backend->ctx, cfgs, n, out, e);
    for (size_t i = 0; i < n; i++)
        if (out[i].status == TUNED__EVAL_OK)
            remember(t, &cfgs[i], true, out[i].median_us, out[i].p80_us);
    if (t->request->trace != NULL)
        for (size_t i = 0; i < n; i++)
            if (out[i].status != TUNED__EVAL_UNRUN)
                t->request->trace(t->request->trace_ctx, &cfgs[i], &out[i]);
    if (t->request->store != NULL) {
        tuned__err he = {0};
        int hrc = record_history(t, cfgs, n, out, false, &he);
        if (rc == 0 && hrc != 0) {
            if (e != NULL)
                *e = he;
            rc = hrc;
        }
    }
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

int tuned__tune_history(tuned__store *store, const tuned__store_key *key,
                        tuned__search_prior **out, size_t *n, tuned__err *e)
{
    enum { PAGE = 256 };
    *out = NULL;
    *n = 0;
    tuned__store_eval *page = malloc(PAGE * sizeof *page);
    if (page == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "tune: out of memory for the history");
    char after[128] = "";
    size_t got, cap = 0;
    int rc;
    do {
        if ((rc = tuned__store_list_evals(store, key, after, page, PAGE, &got, e)) != 0)
            break;
        for (size_t i = 0; i < got; i++) {
            tuned__config c;
            if (tuned__config_parse(page[i].config, &c, NULL) != 0)
                continue; /* a config of an older codegen: measure anew */
            if (*n == cap) {
                cap = cap ? 2 * cap : PAGE;
                tuned__search_prior *grown = realloc(*out, cap * sizeof **out);
                if (grown == NULL) {
                    rc = tuned__errf(e, TUNED_ENOMEM, "tune: out of memory for the history");
                    break;
                }
                *out = grown;
            }
            (*out)[(*n)++] = (tuned__search_prior){c, page[i].status == TUNED__HIST_OK,
                                                   page[i].median_us, page[i].p80_us};
        }
        if (got > 0)
            snprintf(after, sizeof after, "%s", page[got - 1].config);
    } while (rc == 0 && got == PAGE);
    free(page);
    if (rc != 0) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

/* ---- warm start: winners of neighbouring shapes ---- */

#define WARM_SEEDS 4

typedef struct warm_scan {
    const tuned__space *sp;
    const tuned__store_key *key;
    tuned__config seeds[WARM_SEEDS];
    double dist[WARM_SEEDS];
    size_t n;
} warm_scan;

/* Keeps c among the WARM_SEEDS nearest (smallest d) seeds. */
static void warm_add(warm_scan *w, const tuned__config *c, double d)
{
    for (size_t i = 0; i < w->n; i++)
        if (tuned__config_equal(&w->seeds[i], c)) {
            if (d < w->dist[i])
                w->dist[i] = d;
            return;
        }
    size_t slot = w->n;
    if (w->n == WARM_SEEDS) {
        slot = 0;
        for (size_t i = 1; i < w->n; i++)
            if (w->dist[i] > w->dist[slot])
                slot = i;
        if (w->dist[slot] <= d)
            return;
    } else {
        w->n++;
    }
    w->seeds[slot] = *c;
    w->dist[slot] = d;
}

static int warm_candidate(void *ctx, const tuned__record *r)
{
    warm_scan *w = ctx;
    const tuned__store_key *k = &r->key;
    /* fp16 and bf16 move the same bytes with the same vectors: the other
     * one's winner of the same shape is a neighbour too. */
    bool same_dtype = k->dtype == w->key->dtype;
    bool sibling_dtype = !same_dtype && k->dtype != TUNED_FP32 && w->key->dtype != TUNED_FP32;
    if (k->gpu_fp != w->key->gpu_fp || !(same_dtype || sibling_dtype) ||
        k->kernel != w->key->kernel ||
        tuned__wire_params(k->cols) != tuned__wire_params(w->key->cols) ||
        (same_dtype && k->rows == w->key->rows && k->cols == w->key->cols))
        return 0;
    tuned__config c;
    if (tuned__config_parse(r->config, &c, NULL) != 0 || !tuned__space_valid(w->sp, &c, NULL, 0))
        return 0;
    /* Columns matter more than rows: they decide the per-row layout. */
    double d = fabs(log2((double)k->rows / (double)w->key->rows)) +
               2.0 * fabs(log2((double)tuned__wire_cols_cols(k->cols) /
                               (double)tuned__wire_cols_cols(w->key->cols))) +
               (sibling_dtype ? 0.5 : 0.0);
    warm_add(w, &c, d);
    return 0;
}

/* The winner of this very shape on this hardware class and kernel code,
 * measured under another driver, NVRTC or policy (the compatible tier):
 * a toolchain upgrade rarely moves the best config, so it is the nearest
 * seed of all. */
static void warm_compatible(warm_scan *w, tuned__store *store, const tuned__gpu *gpu)
{
    tuned__identity here;
    tuned__gpu_identity(gpu, w->key->kernel, TUNED__MEASURE_POLICY, &here);
    tuned__record r;
    tuned__tier tier;
    tuned__err e = {0};
    tuned__config c;
    if (tuned__store_find_compatible(store, w->key, &here, NULL, NULL, &r, &tier, &e) != 0 ||
        tier == TUNED__TIER_EXACT || tuned__config_parse(r.config, &c, NULL) != 0 ||
        !tuned__space_valid(w->sp, &c, NULL, 0))
        return;
    warm_add(w, &c, -1.0);
}

/* ---- finalists ---- */

#define FINALISTS 5
#define FINALIST_WINDOW 0.05 /* within 5% of the best */

static int simplicity(const tuned__config *c)
{
    int cluster_log = 0;
    for (unsigned v = c->cluster; v > 1; v /= 2)
        cluster_log++;
    return 64 * c->family + 8 * cluster_log + 4 * (c->minb > 1) + 2 * c->stages +
           (c->ld != TUNED__LD_DEF) + (c->st != TUNED__ST_DEF) + c->reg +
           (c->red == TUNED__RED_FUSED) + 8 * (c->grid > 1);
}

int tuned__config_simpler(const tuned__config *a, const tuned__config *b)
{
    int d = simplicity(a) - simplicity(b);
    if (d != 0)
        return d;
    char ta[TUNED__CONFIG_TEXT], tb[TUNED__CONFIG_TEXT];
    tuned__config_format(a, ta, sizeof ta);
    tuned__config_format(b, tb, sizeof tb);
    return strcmp(ta, tb);
}

typedef struct finalist {
    tuned__config config;
    double times[TUNED__FINALIST_ROUNDS_MAX + 1]; /* medians: the search's, then each round's */
    size_t rounds;
    double median;
    double iqm[TUNED__FINALIST_ROUNDS_MAX]; /* each round's interquartile mean: rounds - 1 of them */
    double rank; /* the median of iqm[]: what the finalists are ranked by */
    bool failed; /* a round did not pass its check (or did not run): never the winner */
} finalist;

/* Faster first; among equal medians (a few-µs shape's variants often share
 * one 32 ns step) the lighter slow tail, then the simpler, so that the same
 * measurements always make the same finalists. */
static int cmp_candidate(const void *a, const void *b)
{
    const tuned__search_prior *x = a, *y = b;
    if (x->us != y->us)
        return x->us < y->us ? -1 : 1;
    if (x->p80_us != y->p80_us)
        return x->p80_us < y->p80_us ? -1 : 1;
    return tuned__config_simpler(&x->config, &y->config);
}

/* One round of re-timing the finalists. Each round checks every finalist
 * again: one that fails (a race that the search's single check missed)
 * is out of the running, and its failure goes to the history so that a
 * resumed tune does not trust its earlier pass. first_failure (n bytes)
 * keeps the first such failure's text. */
static int run_finalist_round(tune_ctx *t, finalist *f, const tuned__config *cfgs, size_t nf,
                              tuned__eval_result *res, char *first_failure, size_t n,
                              tuned__err *e)
{
    int rc = t->backend->run(t->backend->ctx, cfgs, nf, res, e);
    for (size_t i = 0; i < nf; i++) {
        if (res[i].status == TUNED__EVAL_OK) {
            f[i].iqm[f[i].rounds - 1] = res[i].iqm_us;
            f[i].times[f[i].rounds++] = res[i].median_us;
            continue;
        }
        f[i].failed = true;
        if (res[i].status != TUNED__EVAL_UNRUN && first_failure[0] == '\0') {
            char name[TUNED__CONFIG_TEXT];
            tuned__config_format(&cfgs[i], name, sizeof name);
            snprintf(first_failure, n, "%s: %s: %s", name,
                     tuned__eval_status_name(res[i].status), res[i].detail);
        }
    }
    if (t->request->store != NULL) {
        tuned__err he = {0};
        /* Only the failures: the search's timing of a passing finalist
         * stays its figure in the history. */
        int hrc = record_history(t, cfgs, nf, res, true, &he);
        if (rc == 0 && hrc != 0) {
            if (e != NULL)
                *e = he;
            rc = hrc;
        }
    }
    return rc;
}

/* Times the finalists again, interleaved, and picks the winner (see tune.h). */
static int run_finalists(tune_ctx *t, const tuned__search_prior *log, size_t nlog,
                         tuned__tune_outcome *out, tuned__err *e)
{
    double best = out->search.best_us;
    tuned__search_prior *cand = malloc((nlog ? nlog : 1) * sizeof *cand);
    if (cand == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "tune: out of memory for the finalists");
    size_t nc = 0;
    for (size_t i = 0; i < nlog; i++)
        if (log[i].ok && log[i].us <= best * (1.0 + FINALIST_WINDOW))
            cand[nc++] = log[i];
    qsort(cand, nc, sizeof *cand, cmp_candidate);
    finalist f[FINALISTS];
    size_t nf = 0;
    for (size_t i = 0; i < nc && nf < FINALISTS; i++) {
        bool seen = false;
        for (size_t k = 0; k < nf; k++)
            seen = seen || tuned__config_equal(&f[k].config, &cand[i].config);
        if (!seen)
            f[nf++] = (finalist){.config = cand[i].config, .times = {cand[i].us}, .rounds = 1};
    }
    free(cand);
    if (nf < 2)
        return 0;
    tuned__config cfgs[FINALISTS];
    tuned__eval_result res[FINALISTS];
    for (size_t i = 0; i < nf; i++)
        cfgs[i] = f[i].config;
    /* The effort's rounds (tuned__effort_preset); 0 or out of range: the
     * default's. */
    int nrounds = t->request->finalist_rounds;
    if (nrounds < 1 || nrounds > TUNED__FINALIST_ROUNDS_MAX)
        nrounds = TUNED__FINALIST_ROUNDS_DEFAULT;
    char first_failure[sizeof out->search.first_failure] = "";
    for (int round = 0; round < nrounds; round++) {
        int rc = run_finalist_round(t, f, cfgs, nf, res, first_failure, sizeof first_failure, e);
        if (rc != 0)
            return rc;
    }
    /* Noise: the largest relative spread of one config's rounds. The
     * finalists are ranked by their rounds' interquartile means, which,
     * unlike medians, resolve differences under the events' 32 ns step
     * (a finalist that failed a round is out of the ranking). */
    double noise = 0.0;
    size_t win = nf; /* none yet */
    for (size_t i = 0; i < nf; i++) {
        qsort(f[i].times, f[i].rounds, sizeof f[i].times[0], tuned__cmp_double);
        f[i].median = f[i].times[f[i].rounds / 2];
        double spread = (f[i].times[f[i].rounds - 1] - f[i].times[0]) / f[i].median;
        if (spread > noise)
            noise = spread;
        size_t timed = f[i].rounds - 1;
        if (f[i].failed) {
            f[i].rank = INFINITY;
            continue;
        }
        qsort(f[i].iqm, timed, sizeof f[i].iqm[0], tuned__cmp_double);
        f[i].rank = f[i].iqm[timed / 2];
        if (win == nf || f[i].rank < f[win].rank)
            win = i;
    }
    if (win == nf)
        return tuned__errf(e, TUNED_EWRONG,
                           "tune: each of the %zu finalists failed a re-check; first: %s", nf,
                           first_failure);
    /* A simpler config takes the win only when its rounds overlap the
     * fastest's: one noisy finalist must not let a config that is slower
     * in every round win (measured, H200 4096x32000 fp32: v2 chosen over
     * v4 within 0.3% of noise, 0.6 us slower in every benchmark). */
    size_t pick = win;
    for (size_t i = 0; i < nf; i++)
        if (f[i].rank < INFINITY && f[i].iqm[0] <= f[win].iqm[nrounds - 1] &&
            tuned__config_simpler(&f[i].config, &f[pick].config) < 0)
            pick = i;
    out->finalists = nf;
    out->noise = noise;
    out->search.best = f[pick].config;
    out->search.best_us = f[pick].median;
    return 0;
}

/* The compile-cache key the evaluator filed the winner's cubin under, so
 * that the store's gc knows the cubin is in use. */
static uint64_t winner_cubin(const tuned__nvrtc *n, const tuned__gpu *gpu,
                             const tuned__shape *shape, const tuned__codegen_opts *codegen,
                             const tuned__config *best)
{
    char *src = NULL;
    if (tuned__source_kernel(best, shape, codegen, &src, NULL) != 0)
        return 0;
    uint64_t key = tuned__nvrtc_cache_key(n, src, gpu->cc_major * 10 + gpu->cc_minor,
                                          TUNED__NVRTC_CUBIN);
    free(src);
    return key;
}

int tuned__tune_on(const tuned__tune_backend *b, const tuned__gpu *gpu,
                   const tuned__tune_request *r, tuned__tune_progress_fn progress, void *ctx,
                   tuned__tune_outcome *out, tuned__err *e)
{
    memset(out, 0, sizeof *out);
    out->gpu = *gpu;
    out->copy_us = b->copy_us;
    tuned__space sp;
    int rc = tuned__space_init(&sp, &r->shape, gpu->cc_major * 10 + gpu->cc_minor, gpu->sm_count, e);
    if (rc != 0)
        return rc;
    /* The caller's tries are checked before the store is read: one outside
     * the space ends the tune having measured and read nothing. */
    tuned__config seeds[TUNED__TUNE_MAX_TRIES + WARM_SEEDS];
    size_t nseeds = 0;
    for (size_t i = 0; i < r->ntries && i < TUNED__TUNE_MAX_TRIES; i++) {
        char why[200] = "", text[TUNED__CONFIG_TEXT];
        if (!tuned__space_valid(&sp, &r->tries[i], why, sizeof why)) {
            tuned__config_format(&r->tries[i], text, sizeof text);
            tuned__space_free(&sp);
            return tuned__errf(e, TUNED_EINVAL,
                               "%s %llux%llu %s: the config to try first, %s, is not in its "
                               "space on this GPU: %s", tuned__kernel_name(r->shape.kernel),
                               (unsigned long long)r->shape.rows,
                               (unsigned long long)r->shape.cols,
                               tuned_dtype_name(r->shape.dtype), text, why);
        }
        seeds[nseeds++] = r->tries[i];
    }
    tune_ctx t = {.backend = b, .request = r, .progress = progress, .user = ctx,
                  .gpu = &out->gpu, .copy_us = b->copy_us};
    tuned__tune_key(gpu, &r->shape, &t.key);
    tuned__search_opts so = r->search;
    tuned__search_prior *prior = NULL;
    warm_scan warm = {.sp = &sp, .key = &t.key};
    if (r->store != NULL) {
        if (!r->retune && (rc = tuned__tune_history(r->store, &t.key, &prior, &so.nprior, e)) != 0) {
            tuned__space_free(&sp);
            return rc;
        }
        so.prior = prior;
        for (size_t i = 0; i < so.nprior; i++)
            if (prior[i].ok)
                remember(&t, &prior[i].config, true, prior[i].us, prior[i].p80_us);
        /* Warm start is a hint: a store that cannot be scanned only
         * loses the hint. */
        if (tuned__store_scan(r->store, warm_candidate, &warm, NULL, NULL) == 0) {
            if (!r->retune)
                warm_compatible(&warm, r->store, gpu);
            so.seeds = warm.seeds;
            so.nseeds = warm.n;
            out->warm_seeds = warm.n;
        }
    }
    /* The caller's tries first, then the warm seeds. */
    if (nseeds > 0) {
        for (size_t i = 0; i < so.nseeds; i++)
            seeds[nseeds++] = so.seeds[i];
        so.seeds = seeds;
        so.nseeds = nseeds;
    }
    if (progress != NULL) {
        tuned__tune_progress tp = {.gpu = &out->gpu, .copy_us = out->copy_us, .search = NULL};
        progress(ctx, &tp);
    }
    rc = tuned__search_run(&sp, &so, eval_batch, &t, on_progress, &t, &out->search, e);
    free(prior);
    if (rc == 0 && out->search.found && !t.log_oom)
        rc = run_finalists(&t, t.log, t.nlog, out, e);
    free(t.log);
    tuned__space_free(&sp);
    if (rc != 0)
        return rc;
    if (!out->search.found)
        return tuned__errf(e, TUNED_EWRONG, "tune: none of %zu variants passed its check; first: %s",
                           out->search.evaluations, out->search.first_failure);
    return 0;
}

static int evaluator_backend_run(void *ctx, const tuned__config *cfgs, size_t n,
                                 tuned__eval_result *out, tuned__err *e)
{
    return tuned__evaluator_run(ctx, cfgs, n, out, e);
}

int tuned__tune(const tuned__driver *d, const tuned__nvrtc *n, const tuned__tune_request *r,
                tuned__tune_progress_fn progress, void *ctx, tuned__tune_outcome *out,
                tuned__err *e)
{
    memset(out, 0, sizeof *out);
    tuned__gpu gpu;
    int rc = tuned__gpu_query(d, n, r->device, &gpu, e);
    if (rc != 0)
        return rc;
    /* An empty space is TUNED_ENOSPACE before the evaluator allocates its
     * buffers, compiles its reference kernels and times the copy. */
    tuned__space sp;
    tuned__config first;
    if ((rc = tuned__space_rules(&sp, &r->shape, gpu.cc_major * 10 + gpu.cc_minor, gpu.sm_count,
                                 e)) != 0 ||
        (rc = tuned__space_default(&sp, &first, e)) != 0)
        return rc;
    tuned__eval_opts eo = r->eval;
    if (r->store != NULL)
        eo.cubins = r->store;
    tuned__evaluator *ev = NULL;
    if ((rc = tuned__evaluator_open(&ev, d, n, &gpu, &r->shape, &eo, e)) != 0)
        return rc;
    tuned__tune_backend b = {.run = evaluator_backend_run, .ctx = ev,
                             .copy_us = tuned__evaluator_copy_us(ev)};
    rc = tuned__tune_on(&b, &gpu, r, progress, ctx, out, e);
    if (rc == 0)
        out->cubin = winner_cubin(n, &gpu, &r->shape, tuned__evaluator_codegen(ev),
                                  &out->search.best);
    tuned__evaluator_close(ev);
    return rc;
}

void tuned__tune_key(const tuned__gpu *gpu, const tuned__shape *shape, tuned__store_key *key)
{
    *key = tuned__store_key_of(shape, tuned__gpu_kind_fp(gpu, tuned__shape_kernel(shape)));
}

void tuned__tune_record(const tuned__tune_outcome *o, const tuned__shape *shape,
                        tuned__record *rec)
{
    memset(rec, 0, sizeof *rec);
    tuned__tune_key(&o->gpu, shape, &rec->key);
    tuned__config_format(&o->search.best, rec->config, sizeof rec->config);
    const tuned__kind_spec *kind = tuned__shape_spec(shape);
    if (tuned__kind_default_code(kind)) {
        snprintf(rec->gpu, sizeof rec->gpu, "%s", o->gpu.identity);
    } else {
        tuned__identity id;
        tuned__gpu_identity(&o->gpu, kind->id, NULL, &id);
        snprintf(rec->gpu, sizeof rec->gpu, "%s", id.full);
    }
    snprintf(rec->gpu_name, sizeof rec->gpu_name, "%s", o->gpu.name);
    /* Provenance: the parts of the identity string, and how we measured. */
    rec->prov.cc_major = (uint32_t)o->gpu.cc_major;
    rec->prov.cc_minor = (uint32_t)o->gpu.cc_minor;
    rec->prov.sm_count = (uint32_t)o->gpu.sm_count;
    rec->prov.mem_mib = (uint64_t)(o->gpu.total_mem >> 20);
    rec->prov.driver_version = (uint32_t)o->gpu.driver_version;
    rec->prov.nvrtc_major = (uint32_t)o->gpu.nvrtc_major;
    rec->prov.nvrtc_minor = (uint32_t)o->gpu.nvrtc_minor;
    /* The code hash the kind's records are filed under (tuned__gpu_identity). */
    rec->prov.template_hash = tuned__kind_default_code(kind) ? o->gpu.template_hash
                                                             : tuned__kind_identity_hash(kind);
    snprintf(rec->prov.policy, sizeof rec->prov.policy, "%s", TUNED__MEASURE_POLICY);
    rec->median_us = o->search.best_us;
    rec->copy_us = o->copy_us;
    /* Every tensor the kind reads or writes, once. */
    double bytes = tuned__kind_bytes(tuned__shape_spec(shape), shape->rows, tuned__wire_cols_of(shape),
                                     tuned_dtype_size(shape->dtype));
    rec->gbps = bytes / (o->search.best_us * 1e3);
    rec->evaluations = (uint32_t)o->search.evaluations;
    rec->cubin = o->cubin;
    tuned__date_now(rec->date, sizeof rec->date);
    snprintf(rec->tool_version, sizeof rec->tool_version, "%s", TUNED_VERSION_STRING);
}
