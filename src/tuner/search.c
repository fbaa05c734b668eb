/* search.c: the search loop (see search.h). Evaluated configs are kept in
 * one array with their times; the space is small enough (hundreds) that a
 * linear scan beats any index. */
#include "src/tuner/search.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tuned.h"
#include "src/common/clock.h"

#define MAX_NEIGHBORS 32
/* Generations in a row that gain less than min_gain before the search stops. */
#define PATIENCE 2
/* How far down the ranking the pattern search looks for incumbents. */
#define MAX_RANK 16

typedef struct tried {
    tuned__config config;
    bool ok;
    double us;
} tried;

typedef struct search_state {
    const tuned__space *sp;
    const tuned__search_opts *o;
    tried *log;
    size_t n, cap;
    size_t nprior;      /* log entries measured before this search */
    size_t failed;
    double t0;
    tuned__search_result *out;
} search_state;

void tuned__search_opts_default(tuned__search_opts *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->budget = 200;
    o->time_s = 50.0;
    o->population = 40;
    o->copies = 4;
    o->min_gain = 0.002;
}

static bool was_tried(const search_state *st, const tuned__config *c)
{
    for (size_t i = 0; i < st->n; i++)
        if (tuned__config_equal(&st->log[i].config, c))
            return true;
    return false;
}

/* Appends c to batch unless tried or already in it, within the budget. */
static void propose(const search_state *st, tuned__config *batch, size_t *nb, size_t cap,
                    const tuned__config *c)
{
    if (*nb >= cap || was_tried(st, c))
        return;
    for (size_t i = 0; i < *nb; i++)
        if (tuned__config_equal(&batch[i], c))
            return;
    batch[(*nb)++] = *c;
}

static size_t budget_left(const search_state *st)
{
    size_t spent = st->n - st->nprior;
    return st->o->budget > spent ? st->o->budget - spent : 0;
}

/* Takes the prior measurements into the log (valid ones, once each). */
static void load_prior(search_state *st)
{
    for (size_t i = 0; i < st->o->nprior && st->n < st->cap; i++) {
        const tuned__search_prior *p = &st->o->prior[i];
        if (!tuned__space_valid(st->sp, &p->config, NULL, 0) || was_tried(st, &p->config))
            continue;
        bool ok = p->ok && p->us > 0.0;
        st->log[st->n++] = (tried){p->config, ok, p->us};
        if (!ok)
            st->failed++;
        else if (!st->out->found || p->us < st->out->best_us) {
            st->out->found = true;
            st->out->best = p->config;
            st->out->best_us = p->us;
        }
    }
    st->nprior = st->n;
}

/* Evaluates batch and records every result; updates out's best. */
static int run_batch(search_state *st, const tuned__config *batch, size_t nb,
                     tuned__eval_batch_fn eval, void *ctx, tuned__err *e)
{
    tuned__eval_result *res = calloc(nb, sizeof *res);
    if (res == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "search: out of memory");
    int rc = eval(ctx, batch, nb, res, e); /* res zeroed: TUNED__EVAL_UNRUN until run */
    for (size_t i = 0; i < nb; i++) {
        if (res[i].status == TUNED__EVAL_UNRUN)
            continue; /* the batch stopped (a fatal error) before it */
        bool ok = res[i].status == TUNED__EVAL_OK;
        st->log[st->n++] = (tried){batch[i], ok, res[i].median_us};
        if (!ok) {
            st->failed++;
            if (st->out->first_failure[0] == '\0') {
                char name[TUNED__CONFIG_TEXT];
                tuned__config_format(&batch[i], name, sizeof name);
                snprintf(st->out->first_failure, sizeof st->out->first_failure, "%s: %s: %s",
                         name, tuned__eval_status_name(res[i].status), res[i].detail);
            }
        } else if (!st->out->found || res[i].median_us < st->out->best_us) {
            st->out->found = true;
            st->out->best = batch[i];
            st->out->best_us = res[i].median_us;
        }
    }
    free(res);
    return rc;
}

static int cmp_tried(const void *a, const void *b)
{
    const tried *x = a, *y = b;
    if (x->ok != y->ok)
        return x->ok ? -1 : 1;
    return (x->us > y->us) - (x->us < y->us);
}

static void report(const search_state *st, int generation, tuned__progress_fn progress, void *ctx)
{
    if (progress == NULL)
        return;
    tuned__search_progress p = {
        .generation = generation,
        .tried = st->n,
        .budget = st->o->budget,
        .failed = st->failed,
        .have_best = st->out->found,
        .best = st->out->best,
        .best_us = st->out->best_us,
        .elapsed_s = tuned__now_s() - st->t0,
    };
    progress(ctx, &p);
}

static void finish(search_state *st, int generations, const char *why)
{
    st->out->evaluations = st->n - st->nprior;
    st->out->resumed = st->nprior;
    st->out->failed = st->failed;
    st->out->generations = generations;
    st->out->elapsed_s = tuned__now_s() - st->t0;
    snprintf(st->out->stop_reason, sizeof st->out->stop_reason, "%s", why);
}

/* Every valid config in enumeration order, in batches, within the budgets. */
static int run_exhaustive(search_state *st, tuned__eval_batch_fn eval, void *ctx,
                          tuned__progress_fn progress, void *progress_ctx, tuned__err *e)
{
    enum { BATCH = 64 };
    int rc = 0, generation = 0;
    const char *why = "exhaustive";
    for (size_t next = 0; next < st->sp->count && rc == 0; generation++) {
        if (budget_left(st) == 0 || tuned__now_s() - st->t0 >= st->o->time_s) {
            why = budget_left(st) == 0 ? "evaluation budget" : "time budget";
            break;
        }
        tuned__config batch[BATCH];
        size_t nb = 0, cap = budget_left(st) < BATCH ? budget_left(st) : BATCH;
        for (; next < st->sp->count && nb < cap; next++)
            if (!was_tried(st, &st->sp->valid[next]))
                batch[nb++] = st->sp->valid[next];
        if (nb > 0)
            rc = run_batch(st, batch, nb, eval, ctx, e);
        report(st, generation, progress, progress_ctx);
    }
    finish(st, generation, rc != 0 ? "evaluation failed" : why);
    return rc;
}

int tuned__search_run(const tuned__space *sp, const tuned__search_opts *o,
                      tuned__eval_batch_fn eval, void *eval_ctx, tuned__progress_fn progress,
                      void *progress_ctx, tuned__search_result *out, tuned__err *e)
{
    memset(out, 0, sizeof *out);
    if (o->budget == 0 || o->population == 0 || o->copies == 0)
        return tuned__errf(e, TUNED_EINVAL, "search: budget, population and copies must be > 0");
    search_state st = {.sp = sp, .o = o, .out = out, .t0 = tuned__now_s()};
    st.cap = (o->exhaustive && sp->count < o->budget ? sp->count : o->budget) + o->nprior;
    st.log = calloc(st.cap, sizeof *st.log);
    size_t batch_cap = o->budget;
    tuned__config *batch = calloc(batch_cap, sizeof *batch);
    if (st.log == NULL || batch == NULL) {
        free(st.log);
        free(batch);
        return tuned__errf(e, TUNED_ENOMEM, "search: out of memory");
    }
    tuned__rng rng = {o->seed};
    int rc = 0;
    load_prior(&st);
    if (o->exhaustive) {
        rc = run_exhaustive(&st, eval, eval_ctx, progress, progress_ctx, e);
        free(st.log);
        free(batch);
        return rc;
    }

    /* Generation 0: seeds, then random draws (several tries per slot, as
     * small spaces run out of untried configs). */
    size_t nb = 0, want = o->population < budget_left(&st) ? o->population : budget_left(&st);
    for (size_t i = 0; i < o->nseeds; i++)
        if (tuned__space_valid(sp, &o->seeds[i], NULL, 0))
            propose(&st, batch, &nb, want, &o->seeds[i]);
    tuned__config seeds[48];
    size_t ns = tuned__space_seeds(sp, seeds, sizeof seeds / sizeof seeds[0]);
    for (size_t i = 0; i < ns; i++)
        propose(&st, batch, &nb, want, &seeds[i]);
    for (size_t tries = 0; nb < want && tries < 20 * want; tries++) {
        tuned__config c;
        tuned__space_random(sp, &rng, &c);
        propose(&st, batch, &nb, want, &c);
    }
    if (nb > 0)
        rc = run_batch(&st, batch, nb, eval, eval_ctx, e);
    report(&st, 0, progress, progress_ctx);
    int generation = 0, stale = 0;
    const char *why = "budget";
    while (rc == 0) {
        if (budget_left(&st) == 0) {
            why = "evaluation budget";
            break;
        }
        if (tuned__now_s() - st.t0 >= o->time_s) {
            why = "time budget";
            break;
        }
        if (!out->found) {
            why = "no correct variant";
            break;
        }
        tried *ranked = malloc(st.n * sizeof *ranked);
        if (ranked == NULL) {
            rc = tuned__errf(e, TUNED_ENOMEM, "search: out of memory");
            break;
        }
        memcpy(ranked, st.log, st.n * sizeof *ranked);
        qsort(ranked, st.n, sizeof *ranked, cmp_tried);
        /* Incumbents: the best configs that still have an untried
         * neighbour, up to `copies` of them from the best few. */
        nb = 0;
        size_t left = budget_left(&st), taken = 0;
        for (size_t i = 0; taken < o->copies && i < st.n && i < MAX_RANK && ranked[i].ok; i++) {
            tuned__config nbrs[MAX_NEIGHBORS];
            size_t k = tuned__space_neighbors(sp, &ranked[i].config, nbrs, MAX_NEIGHBORS);
            size_t before = nb;
            for (size_t j = 0; j < k; j++)
                propose(&st, batch, &nb, left, &nbrs[j]);
            taken += nb > before;
        }
        free(ranked);
        if (nb == 0) {
            why = "converged (no untried neighbour)";
            break;
        }
        double before = out->best_us;
        generation++;
        rc = run_batch(&st, batch, nb, eval, eval_ctx, e);
        report(&st, generation, progress, progress_ctx);
        /* One flat generation may only mean the incumbents sit on a ridge;
         * the next ones move from the runners-up. */
        stale = out->best_us > before * (1.0 - o->min_gain) ? stale + 1 : 0;
        if (rc == 0 && stale >= PATIENCE) {
            why = "converged (gain under threshold)";
            break;
        }
    }
    finish(&st, generation, rc != 0 ? "evaluation failed" : why);
    free(st.log);
    free(batch);
    return rc;
}
