/* jobs.c: the job table, the queue and the GPU threads (jobs.h).
 *
 * One mutex guards the table, the queue and each GPU's public state; the
 * GPU threads hold it only to take a job and to publish progress, never
 * while they wait on a worker. A job's search runs in its GPU's thread
 * (tuned__search_run over the real tuned__space); its evaluation function
 * sends the variants to the worker process and survives the worker:
 *
 *   - batch mode: up to TUNED__WORKER_MAX_BATCH variants per request, the
 *     results streaming back a chunk at a time;
 *   - the worker is lost (crash, fatal GPU error, missed deadline): it is
 *     stopped, a new one is started and opened on the same shape, and the
 *     variants not yet answered are sent one at a time (single mode); the
 *     first one that takes the worker down again is the culprit: it is
 *     marked failed ("launch error") and named in the job; batch mode
 *     resumes after it, or after a chunk's worth of singles that passed;
 *   - MAX_CONSECUTIVE culprits without one good answer in between mean
 *     the GPU itself is gone: the job fails.
 *
 * A stop (daemon shutdown) lets the running chunk finish within the grace,
 * then the search ends and the best found so far is stored if it beats
 * the stored record (a checkpoint). */
#include "jobs.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uv.h>

#include "../tuner/tune.h"
#include "tuned.h"
#include "worker.h"

#define MAX_CONSECUTIVE 5

typedef struct job {
    tuned__job_view v;   /* public state, under the mutex */
    tuned__search_opts search;
    double started_s;
    struct job *next;
} job;

typedef struct slot {
    tuned__jobs *owner;
    tuned__jobs_gpu info;   /* public part, under the mutex */
    int chunk;
    tuned__worker *worker;  /* the slot thread's (the starter's before it runs) */
    uv_thread_t thread;
    bool thread_started;
    bool finished;          /* under the mutex */
} slot;

struct tuned__jobs {
    tuned__jobs_opts o;
    tuned__store *store;
    uv_mutex_t mu;
    uv_cond_t cv;
    bool stop;
    double stop_s;
    slot *slots;
    size_t nslots;
    char no_gpu[512];
    job *head, *tail;
    uint64_t next_id;
    tuned__jobs_counts counts;
    _Atomic uint64_t writes;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void logf_(const tuned__jobs *j, const char *fmt, ...) TUNED__PRINTF(2, 3);

static void logf_(const tuned__jobs *j, const char *fmt, ...)
{
    if (j->o.quiet)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "tuned serve: %s\n", line);
}

const char *tuned__job_state_name(int state)
{
    switch (state) {
    case TUNED__JOB_QUEUED: return "queued";
    case TUNED__JOB_RUNNING: return "running";
    case TUNED__JOB_DONE: return "done";
    case TUNED__JOB_FAILED: return "failed";
    case TUNED__JOB_CANCELLED: return "cancelled";
    default: return "?";
    }
}

static bool finished_state(int s)
{
    return s == TUNED__JOB_DONE || s == TUNED__JOB_FAILED || s == TUNED__JOB_CANCELLED;
}

/* ---- one job's run (the slot thread, no lock held unless said) ---- */

typedef struct run_ctx {
    slot *s;
    job *jb;
    tuned__shape shape;
    double copy_us;
    bool single;        /* single mode after a lost worker */
    int singles_ok;
    int consecutive;    /* culprits without a good answer between them */
} run_ctx;

static bool stopping(tuned__jobs *j)
{
    uv_mutex_lock(&j->mu);
    bool s = j->stop;
    uv_mutex_unlock(&j->mu);
    return s;
}

/* The worker's cancel: a stop whose grace has run out. */
static bool cancel_fn(void *ctx)
{
    tuned__jobs *j = ctx;
    uv_mutex_lock(&j->mu);
    bool c = j->stop && now_s() > j->stop_s + j->o.shutdown_grace_s;
    uv_mutex_unlock(&j->mu);
    return c;
}

static void set_worker(slot *s, tuned__worker *w)
{
    s->worker = w;
    uv_mutex_lock(&s->owner->mu);
    s->info.worker_pid = tuned__worker_pid(w);
    uv_mutex_unlock(&s->owner->mu);
}

static int start_worker(slot *s, tuned__err *e)
{
    tuned__jobs *j = s->owner;
    tuned__worker_opts wo = {.exe = j->o.worker_exe, .device = s->info.gpu.ordinal, .db = j->o.db,
                             .nice = j->o.worker_nice, .hello_timeout_s = j->o.hello_timeout_s};
    tuned__gpu gpu;
    int count, chunk;
    bool fake;
    tuned__worker *w;
    int rc = tuned__worker_start(&w, &wo, &gpu, &count, &chunk, &fake, e);
    if (rc != 0)
        return rc;
    if (gpu.fingerprint != s->info.gpu.fingerprint) {
        tuned__worker_stop(w, 1.0);
        return tuned__errf(e, TUNED_ENODEV, "GPU %d is now %s, not %s (a driver update?)",
                           s->info.gpu.ordinal, gpu.identity, s->info.gpu.identity);
    }
    s->chunk = chunk;
    set_worker(s, w);
    return 0;
}

static void drop_worker(slot *s)
{
    tuned__worker *w = s->worker;
    set_worker(s, NULL);
    tuned__worker_stop(w, 0.0);
}

static double open_timeout(const tuned__jobs *j)
{
    double t = 3 * j->o.variant_timeout_s;
    return t < 60 ? 60 : t;
}

/* A running worker with the job's shape open; one restart allowed. */
static int ensure_open(run_ctx *rx, tuned__err *e)
{
    slot *s = rx->s;
    int rc = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (s->worker == NULL && (rc = start_worker(s, e)) != 0)
            continue;
        double copy_us;
        rc = tuned__worker_open(s->worker, &rx->shape, open_timeout(s->owner), &copy_us, e);
        if (rc == 0) {
            if (rx->copy_us == 0)
                rx->copy_us = copy_us;
            return 0;
        }
        drop_worker(s);
    }
    return rc;
}

/* Publishes n results in the job's live counters. */
static void account(run_ctx *rx, const tuned__config *cfgs, const tuned__eval_result *res,
                    size_t n)
{
    tuned__jobs *j = rx->s->owner;
    uv_mutex_lock(&j->mu);
    tuned__job_view *v = &rx->jb->v;
    for (size_t i = 0; i < n; i++) {
        v->evaluated++;
        if (res[i].status != TUNED__EVAL_OK || !(res[i].median_us > 0)) {
            v->failed++;
        } else if (!v->have_best || res[i].median_us < v->best_us) {
            v->have_best = true;
            v->best_us = res[i].median_us;
            tuned__config_format(&cfgs[i], v->best_config, sizeof v->best_config);
        }
    }
    uv_mutex_unlock(&j->mu);
}

static void note_restart(run_ctx *rx, const tuned__config *culprit)
{
    tuned__jobs *j = rx->s->owner;
    uv_mutex_lock(&j->mu);
    rx->s->info.restarts++;
    j->counts.worker_restarts++;
    tuned__job_view *v = &rx->jb->v;
    v->worker_restarts++;
    if (culprit != NULL) {
        if (v->crashes < TUNED__JOB_CRASHES_SHOWN)
            tuned__config_format(culprit, v->crashed[v->crashes], sizeof v->crashed[0]);
        v->crashes++;
    }
    uv_mutex_unlock(&j->mu);
}

static int eval_batch(void *ctx, const tuned__config *cfgs, size_t n, tuned__eval_result *out,
                      tuned__err *e)
{
    run_ctx *rx = ctx;
    slot *s = rx->s;
    tuned__jobs *j = s->owner;
    size_t i = 0;
    while (i < n) {
        if (stopping(j))
            return tuned__errf(e, TUNED_ETIMEOUT, "the daemon is stopping");
        if (s->worker == NULL) {
            int rc = ensure_open(rx, e);
            if (rc != 0)
                return tuned__err_prefix(e, rc, "GPU %d: cannot restart its worker: ",
                                         s->info.gpu.ordinal);
        }
        size_t m = rx->single ? 1 : n - i;
        if (m > TUNED__WORKER_MAX_BATCH)
            m = TUNED__WORKER_MAX_BATCH;
        size_t done = 0;
        tuned__err we = {0};
        int rc = tuned__worker_eval(s->worker, cfgs + i, m, out + i, &done,
                                    j->o.variant_timeout_s, cancel_fn, j, &we);
        account(rx, cfgs + i, out + i, done);
        i += done;
        if (rc == 0) {
            rx->consecutive = 0;
            if (rx->single && ++rx->singles_ok >= s->chunk)
                rx->single = false;
            continue;
        }
        drop_worker(s);
        if (stopping(j))
            return tuned__errf(e, TUNED_ETIMEOUT, "the daemon is stopping");
        if (!rx->single) {
            /* The culprit is among the next chunk: find it one at a time. */
            logf_(j, "GPU %d: job %llu: %s; retrying its variants one at a time",
                  s->info.gpu.ordinal, (unsigned long long)rx->jb->v.id, we.msg);
            note_restart(rx, NULL);
            rx->single = true;
            rx->singles_ok = 0;
            continue;
        }
        char name[TUNED__CONFIG_TEXT];
        tuned__config_format(&cfgs[i], name, sizeof name);
        logf_(j, "GPU %d: job %llu: variant %s took the worker down: %s", s->info.gpu.ordinal,
              (unsigned long long)rx->jb->v.id, name, we.msg);
        note_restart(rx, &cfgs[i]);
        memset(&out[i], 0, sizeof out[i]);
        out[i].status = TUNED__EVAL_LAUNCH_ERROR;
        snprintf(out[i].detail, sizeof out[i].detail, "took the worker down: %s", we.msg);
        account(rx, cfgs + i, out + i, 1);
        i++;
        rx->single = false;
        if (++rx->consecutive >= MAX_CONSECUTIVE)
            return tuned__errf(e, TUNED_ECUDA,
                               "GPU %d lost: %d variants in a row took its worker down; last: %s",
                               s->info.gpu.ordinal, rx->consecutive, we.msg);
    }
    return 0;
}

static void on_progress(void *ctx, const tuned__search_progress *p)
{
    run_ctx *rx = ctx;
    tuned__jobs *j = rx->s->owner;
    uv_mutex_lock(&j->mu);
    tuned__job_view *v = &rx->jb->v;
    v->generation = p->generation;
    if (p->have_best) {
        v->have_best = true;
        v->best_us = p->best_us;
        tuned__config_format(&p->best, v->best_config, sizeof v->best_config);
    }
    uv_mutex_unlock(&j->mu);
}

static void finish(run_ctx *rx, int state, bool stored, bool checkpointed,
                   const tuned__search_result *res, const char *error)
{
    tuned__jobs *j = rx->s->owner;
    uv_mutex_lock(&j->mu);
    tuned__job_view *v = &rx->jb->v;
    v->state = state;
    v->stored = stored;
    v->checkpointed = checkpointed;
    v->copy_us = rx->copy_us;
    v->elapsed_s = now_s() - rx->jb->started_s;
    if (res != NULL) {
        v->generation = res->generations;
        snprintf(v->stop_reason, sizeof v->stop_reason, "%s", res->stop_reason);
        if (res->found) {
            v->have_best = true;
            v->best_us = res->best_us;
            tuned__config_format(&res->best, v->best_config, sizeof v->best_config);
        }
    }
    if (error != NULL)
        snprintf(v->error, sizeof v->error, "%s", error);
    j->counts.running--;
    if (state == TUNED__JOB_DONE)
        j->counts.done++;
    else if (state == TUNED__JOB_FAILED)
        j->counts.failed++;
    else
        j->counts.cancelled++;
    uv_mutex_unlock(&j->mu);
}

/* Stores rec; for a checkpoint only when it beats the stored record. */
static int store_result(tuned__jobs *j, const tuned__record *rec, bool checkpoint, bool *stored,
                        tuned__err *e)
{
    *stored = false;
    if (checkpoint) {
        tuned__record old;
        tuned__err ignored = {0};
        if (tuned__store_get_best(j->store, &rec->key, &old, &ignored) == 0 &&
            old.median_us <= rec->median_us)
            return 0;
    }
    int rc = tuned__store_put_best(j->store, rec, e);
    if (rc == 0) {
        *stored = true;
        atomic_fetch_add(&j->writes, 1);
    }
    return rc;
}

static void run_job(slot *s, job *jb)
{
    tuned__jobs *j = s->owner;
    run_ctx rx = {.s = s, .jb = jb, .shape = jb->v.shape};
    tuned__err e = {0};
    tuned__space sp;
    char sh[96];
    snprintf(sh, sizeof sh, "%llux%llu %s", (unsigned long long)rx.shape.rows,
             (unsigned long long)rx.shape.cols, tuned_dtype_name(rx.shape.dtype));
    logf_(j, "GPU %d: job %llu: tuning %s", s->info.gpu.ordinal, (unsigned long long)jb->v.id, sh);
    if (tuned__space_init(&sp, &rx.shape, s->info.arch, &e) != 0) {
        finish(&rx, TUNED__JOB_FAILED, false, false, NULL, e.msg);
        return;
    }
    int rc = ensure_open(&rx, &e);
    if (rc != 0) {
        tuned__space_free(&sp);
        finish(&rx, TUNED__JOB_FAILED, false, false, NULL, e.msg);
        return;
    }
    uv_mutex_lock(&j->mu);
    jb->v.copy_us = rx.copy_us;
    uv_mutex_unlock(&j->mu);
    tuned__search_result res;
    rc = tuned__search_run(&sp, &jb->search, eval_batch, &rx, on_progress, &rx, &res, &e);
    tuned__space_free(&sp);
    if (s->worker != NULL) {
        tuned__err ce = {0};
        if (tuned__worker_close_shape(s->worker, open_timeout(j), &ce) != 0)
            drop_worker(s);
    }
    bool stop = stopping(j);
    if (res.found && (rc == 0 || stop)) {
        tuned__tune_outcome o = {.gpu = s->info.gpu, .copy_us = rx.copy_us, .search = res};
        tuned__record rec;
        tuned__tune_record(&o, &rx.shape, &rec);
        bool stored;
        tuned__err se = {0};
        int src = store_result(j, &rec, rc != 0, &stored, &se);
        if (src != 0)
            finish(&rx, TUNED__JOB_FAILED, false, false, &res, se.msg);
        else if (rc == 0)
            finish(&rx, TUNED__JOB_DONE, stored, false, &res, NULL);
        else
            finish(&rx, TUNED__JOB_CANCELLED, stored, stored, &res, e.msg);
        logf_(j, "GPU %d: job %llu: %s: %s %.2f us after %zu variants (%zu failed)%s",
              s->info.gpu.ordinal, (unsigned long long)jb->v.id, sh, rec.config, rec.median_us,
              res.evaluations, res.failed,
              src != 0 ? "; NOT stored" : rc != 0 ? (stored ? "; checkpoint stored" : "; stopped")
                                                  : "");
    } else if (rc == 0) {
        char why[768];
        snprintf(why, sizeof why, "none of %zu variants passed its check; first: %s",
                 res.evaluations, res.first_failure);
        finish(&rx, TUNED__JOB_FAILED, false, false, &res, why);
    } else {
        finish(&rx, stop ? TUNED__JOB_CANCELLED : TUNED__JOB_FAILED, false, false, &res, e.msg);
        logf_(j, "GPU %d: job %llu: %s: %s", s->info.gpu.ordinal, (unsigned long long)jb->v.id,
              stop ? "stopped" : "failed", e.msg);
    }
}

/* ---- the table (mutex held) ---- */

static job *next_for(tuned__jobs *j, const slot *s)
{
    for (job *jb = j->head; jb != NULL; jb = jb->next)
        if (jb->v.state == TUNED__JOB_QUEUED && jb->v.gpu_fp == s->info.gpu.fingerprint)
            return jb;
    return NULL;
}

/* Drops the oldest finished jobs beyond the history size. */
static void trim(tuned__jobs *j)
{
    size_t finished = 0;
    for (job *jb = j->head; jb != NULL; jb = jb->next)
        finished += finished_state(jb->v.state);
    job **link = &j->head, *prev = NULL;
    while (*link != NULL && finished > j->o.history) {
        job *jb = *link;
        if (finished_state(jb->v.state)) {
            *link = jb->next;
            if (j->tail == jb)
                j->tail = prev;
            free(jb);
            finished--;
        } else {
            prev = jb;
            link = &jb->next;
        }
    }
}

static void slot_main(void *arg)
{
    slot *s = arg;
    tuned__jobs *j = s->owner;
    uv_mutex_lock(&j->mu);
    while (!j->stop) {
        job *jb = next_for(j, s);
        if (jb == NULL) {
            uv_cond_wait(&j->cv, &j->mu);
            continue;
        }
        jb->v.state = TUNED__JOB_RUNNING;
        jb->v.device = s->info.gpu.ordinal;
        jb->started_s = now_s();
        s->info.job = jb->v.id;
        j->counts.queued--;
        j->counts.running++;
        uv_mutex_unlock(&j->mu);
        run_job(s, jb);
        uv_mutex_lock(&j->mu);
        s->info.job = 0;
        trim(j);
    }
    uv_mutex_unlock(&j->mu);
    drop_worker(s);
    uv_mutex_lock(&j->mu);
    s->finished = true;
    uv_mutex_unlock(&j->mu);
}

/* ---- the API ---- */

static int add_slot(tuned__jobs *j, tuned__worker *w, const tuned__gpu *gpu, int chunk, bool fake)
{
    slot *s = &j->slots[j->nslots++];
    s->owner = j;
    s->info.gpu = *gpu;
    s->info.arch = gpu->cc_major * 10 + gpu->cc_minor;
    s->info.fake = fake;
    s->chunk = chunk;
    s->worker = w;
    s->info.worker_pid = tuned__worker_pid(w);
    logf_(j, "GPU %d: %s (sm_%d%d, %zu MiB), worker pid %d%s", gpu->ordinal, gpu->name,
          gpu->cc_major, gpu->cc_minor, gpu->total_mem >> 20, (int)s->info.worker_pid,
          fake ? " -- TEST ONLY fake GPU (TUNED_TEST_FAKE_GPU)" : "");
    return 0;
}

int tuned__jobs_start(tuned__jobs **out, tuned__store *store, const tuned__jobs_opts *o,
                      tuned__err *e)
{
    *out = NULL;
    tuned__jobs *j = calloc(1, sizeof *j);
    if (j == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "jobs: out of memory");
    j->o = *o;
    j->store = store;
    j->next_id = 1;
    atomic_init(&j->writes, 0);
    int rc = uv_mutex_init(&j->mu);
    if (rc != 0) {
        free(j);
        return tuned__errf(e, TUNED_ENOMEM, "jobs: uv_mutex_init: %s", uv_strerror(rc));
    }
    if ((rc = uv_cond_init(&j->cv)) != 0) {
        uv_mutex_destroy(&j->mu);
        free(j);
        return tuned__errf(e, TUNED_ENOMEM, "jobs: uv_cond_init: %s", uv_strerror(rc));
    }
    /* GPU 0's worker tells how many GPUs there are. */
    tuned__worker_opts wo = {.exe = o->worker_exe, .device = 0, .db = o->db, .nice = o->worker_nice,
                             .hello_timeout_s = o->hello_timeout_s};
    tuned__worker *w = NULL;
    tuned__gpu gpu;
    int count = 0, chunk = 0;
    bool fake = false;
    tuned__err we = {0};
    if (tuned__worker_start(&w, &wo, &gpu, &count, &chunk, &fake, &we) != 0) {
        snprintf(j->no_gpu, sizeof j->no_gpu, "%s", we.msg);
        logf_(j, "no GPU to tune on (%s); serving stored results only", we.msg);
        *out = j;
        return 0;
    }
    j->slots = calloc((size_t)count, sizeof *j->slots);
    if (j->slots == NULL) {
        tuned__worker_stop(w, 1.0);
        tuned__jobs_free(j);
        return tuned__errf(e, TUNED_ENOMEM, "jobs: out of memory");
    }
    add_slot(j, w, &gpu, chunk, fake);
    for (int d = 1; d < count; d++) {
        wo.device = d;
        tuned__err de = {0};
        int dcount;
        if (tuned__worker_start(&w, &wo, &gpu, &dcount, &chunk, &fake, &de) != 0) {
            logf_(j, "GPU %d: no worker, not used: %s", d, de.msg);
            continue;
        }
        add_slot(j, w, &gpu, chunk, fake);
    }
    for (size_t i = 0; i < j->nslots; i++) {
        if ((rc = uv_thread_create(&j->slots[i].thread, slot_main, &j->slots[i])) != 0) {
            tuned__jobs_free(j);
            return tuned__errf(e, TUNED_ENOMEM, "jobs: uv_thread_create: %s", uv_strerror(rc));
        }
        j->slots[i].thread_started = true;
    }
    *out = j;
    return 0;
}

void tuned__jobs_stop(tuned__jobs *j)
{
    uv_mutex_lock(&j->mu);
    if (!j->stop) {
        j->stop = true;
        j->stop_s = now_s();
        for (job *jb = j->head; jb != NULL; jb = jb->next) {
            if (jb->v.state != TUNED__JOB_QUEUED)
                continue;
            jb->v.state = TUNED__JOB_CANCELLED;
            snprintf(jb->v.error, sizeof jb->v.error, "the daemon stopped before it ran");
            j->counts.queued--;
            j->counts.cancelled++;
        }
        uv_cond_broadcast(&j->cv);
    }
    uv_mutex_unlock(&j->mu);
}

bool tuned__jobs_finished(tuned__jobs *j)
{
    uv_mutex_lock(&j->mu);
    bool all = true;
    for (size_t i = 0; i < j->nslots; i++)
        all = all && (!j->slots[i].thread_started || j->slots[i].finished);
    uv_mutex_unlock(&j->mu);
    return all;
}

void tuned__jobs_free(tuned__jobs *j)
{
    if (j == NULL)
        return;
    tuned__jobs_stop(j);
    for (size_t i = 0; i < j->nslots; i++) {
        slot *s = &j->slots[i];
        if (s->thread_started)
            uv_thread_join(&s->thread);
        else
            tuned__worker_stop(s->worker, 1.0);
    }
    while (j->head != NULL) {
        job *next = j->head->next;
        free(j->head);
        j->head = next;
    }
    free(j->slots);
    uv_cond_destroy(&j->cv);
    uv_mutex_destroy(&j->mu);
    free(j);
}

size_t tuned__jobs_gpu_count(tuned__jobs *j)
{
    return j->nslots;
}

bool tuned__jobs_gpu_at(tuned__jobs *j, size_t i, tuned__jobs_gpu *out)
{
    if (i >= j->nslots)
        return false;
    uv_mutex_lock(&j->mu);
    *out = j->slots[i].info;
    uv_mutex_unlock(&j->mu);
    return true;
}

const char *tuned__jobs_no_gpu(tuned__jobs *j)
{
    return j->no_gpu;
}

int tuned__jobs_submit(tuned__jobs *j, const tuned__job_params *p, uint64_t *id, bool *joined)
{
    int rc = TUNED__SUBMIT_OK;
    *joined = false;
    uv_mutex_lock(&j->mu);
    size_t i = 0;
    while (i < j->nslots && j->slots[i].info.gpu.fingerprint != p->gpu_fp)
        i++;
    if (j->stop) {
        rc = TUNED__SUBMIT_STOPPING;
        goto out;
    }
    if (i == j->nslots) {
        rc = TUNED__SUBMIT_NO_GPU;
        goto out;
    }
    for (job *jb = j->head; jb != NULL; jb = jb->next) {
        if ((jb->v.state == TUNED__JOB_QUEUED || jb->v.state == TUNED__JOB_RUNNING) &&
            jb->v.gpu_fp == p->gpu_fp && jb->v.shape.dtype == p->shape.dtype &&
            jb->v.shape.rows == p->shape.rows && jb->v.shape.cols == p->shape.cols) {
            jb->v.joined++;
            j->counts.joined++;
            *id = jb->v.id;
            *joined = true;
            goto out;
        }
    }
    if (j->counts.queued >= j->o.max_queued) {
        rc = TUNED__SUBMIT_FULL;
        goto out;
    }
    job *jb = calloc(1, sizeof *jb);
    if (jb == NULL) {
        rc = TUNED__SUBMIT_NOMEM;
        goto out;
    }
    jb->v.id = j->next_id++;
    jb->v.state = TUNED__JOB_QUEUED;
    jb->v.shape = p->shape;
    jb->v.gpu_fp = p->gpu_fp;
    snprintf(jb->v.gpu_name, sizeof jb->v.gpu_name, "%s", j->slots[i].info.gpu.name);
    jb->v.device = -1;
    jb->v.budget = p->search.budget;
    jb->search = p->search;
    if (j->tail != NULL)
        j->tail->next = jb;
    else
        j->head = jb;
    j->tail = jb;
    j->counts.queued++;
    j->counts.submitted++;
    *id = jb->v.id;
    uv_cond_broadcast(&j->cv);
out:
    uv_mutex_unlock(&j->mu);
    return rc;
}

bool tuned__jobs_get(tuned__jobs *j, uint64_t id, tuned__job_view *out)
{
    bool found = false;
    uv_mutex_lock(&j->mu);
    size_t ahead = 0;
    for (job *jb = j->head; jb != NULL; jb = jb->next) {
        if (jb->v.id == id) {
            *out = jb->v;
            out->queue_position = jb->v.state == TUNED__JOB_QUEUED ? ahead : 0;
            if (jb->v.state == TUNED__JOB_RUNNING)
                out->elapsed_s = now_s() - jb->started_s;
            found = true;
            break;
        }
        ahead += jb->v.state == TUNED__JOB_QUEUED;
    }
    uv_mutex_unlock(&j->mu);
    return found;
}

void tuned__jobs_counts_get(tuned__jobs *j, tuned__jobs_counts *out)
{
    uv_mutex_lock(&j->mu);
    *out = j->counts;
    uv_mutex_unlock(&j->mu);
}

uint64_t tuned__jobs_writes(tuned__jobs *j)
{
    return atomic_load(&j->writes);
}
