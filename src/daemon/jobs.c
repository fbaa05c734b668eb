/* jobs.c: the job table, the queue and the GPU threads (jobs.h).
 *
 * One mutex guards the table, the queue and each GPU's public state; the
 * GPU threads hold it only to take a job and to publish progress, never
 * while they wait on a worker. A job runs as a whole tune in its GPU's
 * worker process (tuned__tune: compile cache, history, warm start,
 * finalists); the GPU thread follows its events and survives the worker:
 *
 *   - the worker names each variant before its first launch; when the
 *     worker dies, reports a dead context, or says nothing for
 *     variant_timeout_s (then it is killed), the variant named and not yet
 *     answered is the culprit: it gets a failed entry in the store's
 *     history (launch_error, or timeout for a hang), the job names it, a
 *     new worker starts and the same tune is sent again; tuned__tune
 *     resumes from the history, so neither the culprit nor anything
 *     measured before runs again, with the budget and time that are left;
 *   - MAX_CONSECUTIVE culprits without one good answer in between mean
 *     the GPU itself is gone, and two losses with no variant named (a
 *     start-up or compile crash) too: the job fails.
 *
 * A stop (daemon shutdown) lets the tune run on for the grace; if it does
 * not finish, the worker is killed and the best answer seen so far is
 * stored if it beats the stored record (a checkpoint). Its history stays
 * in the store: the next tune of the shape resumes from it. */
#include "src/daemon/jobs.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uv.h>

#include "src/tuner/tune.h"
#include "tuned.h"
#include "src/daemon/worker.h"
#include "src/common/clock.h"
#include "src/common/log.h"
#include "src/tuner/policy.h"

#define MAX_CONSECUTIVE 5
#define MAX_UNNAMED 2
/* The last records the jobs wrote, for the event loop to put into the
 * index it serves from at once (tuned__jobs_written). */
#define WRITTEN_KEPT 64

typedef struct written {
    uint64_t seq;
    tuned__record rec;
} written;

typedef struct job {
    tuned__job_view v;   /* public state, under the mutex */
    tuned__search_opts search;
    int finalist_rounds; /* 0: the default */
    bool retune;
    bool gated;          /* waits for tuned__jobs_ungate (the fleet's lease) */
    bool have_rec;       /* rec: the winner it stored */
    tuned__record rec;
    double started_s;
    uint64_t finished_seq; /* order of finishing (jobs run out of submission order) */
    struct job *next;
} job;

typedef struct slot {
    tuned__jobs *owner;
    tuned__jobs_gpu info;   /* public part, under the mutex */
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
    uint64_t finishes;      /* jobs finished so far: the next finished_seq */
    tuned__jobs_counts counts;
    _Atomic uint64_t writes;
    written kept[WRITTEN_KEPT]; /* under the mutex; kept[seq % WRITTEN_KEPT] */
};

/* A log line of the jobs, unless the daemon is quiet. */
#define logf_(j, ...) tuned__logf((j)->o.quiet, "tuned serve", __VA_ARGS__)

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

/* jb (its view) into a finished state; the mutex held. */
static void mark_finished(tuned__jobs *j, job *jb, int state)
{
    jb->v.state = state;
    jb->finished_seq = ++j->finishes;
}

/* ---- one job's run (the slot thread, no lock held unless said) ---- */

typedef struct run_ctx {
    slot *s;
    job *jb;
    tuned__shape shape;
    tuned__store_key key;                /* the tune's history key */
    double copy_us;
    size_t evaluated;                    /* answers over every attempt */
    char running[TUNED__CONFIG_TEXT];    /* named by the worker, not yet answered */
    bool have_best;                      /* the best answer seen, for a checkpoint */
    tuned__config best;
    double best_us;
    int consecutive;                     /* culprits without a good answer between */
    int unnamed;                         /* losses with no variant named */
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
    bool c = j->stop && tuned__now_s() > j->stop_s + j->o.shutdown_grace_s;
    uv_mutex_unlock(&j->mu);
    return c;
}

/* A start-up's cancel: any stop (no tune runs yet, so no grace is due). */
static bool stop_fn(void *ctx)
{
    return stopping(ctx);
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
                             .nice = j->o.worker_nice, .hello_timeout_s = j->o.hello_timeout_s,
                             .cancel = stop_fn, .cancel_ctx = j};
    tuned__gpu gpu;
    int count;
    bool fake;
    tuned__worker *w;
    int rc = tuned__worker_start(&w, &wo, &gpu, &count, &fake, e);
    if (rc != 0)
        return rc;
    if (gpu.fingerprint != s->info.gpu.fingerprint) {
        tuned__worker_stop(w, 1.0);
        return tuned__errf(e, TUNED_ENODEV, "GPU %d is now %s, not %s (a driver update?)",
                           s->info.gpu.ordinal, gpu.identity, s->info.gpu.identity);
    }
    set_worker(s, w);
    return 0;
}

/* Stops the worker (one that is exiting by itself gets grace_s). */
static void drop_worker(slot *s, double grace_s)
{
    tuned__worker *w = s->worker;
    set_worker(s, NULL);
    tuned__worker_stop(w, grace_s);
}

/* One answered variant into the job's live counters. */
static void account(run_ctx *rx, const char *config, int status, double us)
{
    tuned__jobs *j = rx->s->owner;
    tuned__config c;
    bool ok = status == TUNED__EVAL_OK && us > 0 && tuned__config_parse(config, &c, NULL) == 0;
    rx->evaluated++;
    if (ok) {
        rx->consecutive = 0;
        if (!rx->have_best || us < rx->best_us) {
            rx->have_best = true;
            rx->best = c;
            rx->best_us = us;
        }
    }
    uv_mutex_lock(&j->mu);
    tuned__job_view *v = &rx->jb->v;
    v->evaluated = rx->evaluated;
    v->failed += !ok;
    if (ok && (!v->have_best || us < v->best_us)) {
        v->have_best = true;
        v->best_us = us;
        snprintf(v->best_config, sizeof v->best_config, "%s", config);
    }
    uv_mutex_unlock(&j->mu);
}

static void note_restart(run_ctx *rx, const char *culprit)
{
    tuned__jobs *j = rx->s->owner;
    uv_mutex_lock(&j->mu);
    rx->s->info.restarts++;
    j->counts.worker_restarts++;
    tuned__job_view *v = &rx->jb->v;
    v->worker_restarts++;
    if (culprit != NULL) {
        if (v->crashes < TUNED__JOB_CRASHES_SHOWN)
            snprintf(v->crashed[v->crashes], sizeof v->crashed[0], "%s", culprit);
        v->crashes++;
    }
    uv_mutex_unlock(&j->mu);
}

/* The culprit's failed entry in the history, so the resumed tune skips it. */
static void record_culprit(run_ctx *rx, bool hang, const char *why)
{
    tuned__jobs *j = rx->s->owner;
    tuned__store_eval ev = {.key = rx->key, .status = hang ? TUNED__HIST_TIMEOUT
                                                           : TUNED__HIST_LAUNCH_ERROR};
    snprintf(ev.config, sizeof ev.config, "%s", rx->running);
    tuned__date_now(ev.date, sizeof ev.date);
    snprintf(ev.detail, sizeof ev.detail, "took the worker down: %s", why);
    tuned__err e = {0};
    if (tuned__store_put_eval(j->store, &ev, &e) != 0)
        logf_(j, "GPU %d: job %llu: cannot record %s in the history: %s", rx->s->info.gpu.ordinal,
              (unsigned long long)rx->jb->v.id, rx->running, e.msg);
}

/* The job's end. From here another thread's trim may free the job: the
 * caller reads nothing of rx->jb after it. */
static void finish(run_ctx *rx, int state, bool stored, bool checkpointed, const char *reason,
                   const char *error)
{
    tuned__jobs *j = rx->s->owner;
    uv_mutex_lock(&j->mu);
    tuned__job_view *v = &rx->jb->v;
    mark_finished(j, rx->jb, state);
    v->stored = stored;
    v->checkpointed = checkpointed;
    v->copy_us = rx->copy_us;
    v->elapsed_s = tuned__now_s() - rx->jb->started_s;
    if (reason != NULL)
        snprintf(v->stop_reason, sizeof v->stop_reason, "%s", reason);
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
    int rc;
    if (checkpoint)
        rc = tuned__store_put_best_unless_better(j->store, rec, TUNED__MEASURE_POLICY, stored, e);
    else if ((rc = tuned__store_put_best(j->store, rec, e)) == 0)
        *stored = true;
    if (*stored) {
        uv_mutex_lock(&j->mu);
        uint64_t seq = atomic_load(&j->writes) + 1;
        j->kept[seq % WRITTEN_KEPT] = (written){.seq = seq, .rec = *rec};
        atomic_store(&j->writes, seq);
        uv_mutex_unlock(&j->mu);
    }
    return rc;
}

/* The daemon stopped before the tune ended: store the best seen so far. */
static void checkpoint(run_ctx *rx)
{
    tuned__jobs *j = rx->s->owner;
    bool stored = false;
    tuned__err e = {0};
    if (rx->have_best) {
        tuned__tune_outcome o = {.gpu = rx->s->info.gpu, .copy_us = rx->copy_us};
        o.search.found = true;
        o.search.best = rx->best;
        o.search.best_us = rx->best_us;
        o.search.evaluations = rx->evaluated;
        tuned__record rec;
        tuned__tune_record(&o, &rx->shape, &rec);
        if (store_result(j, &rec, true, &stored, &e) != 0)
            logf_(j, "job %llu: checkpoint not stored: %s", (unsigned long long)rx->jb->v.id,
                  e.msg);
    }
    logf_(j, "GPU %d: job %llu: stopped after %zu variants%s", rx->s->info.gpu.ordinal,
          (unsigned long long)rx->jb->v.id, rx->evaluated,
          stored ? "; checkpoint stored" : "");
    finish(rx, TUNED__JOB_CANCELLED, stored, stored, "daemon stopped",
           "the daemon stopped before the tune ended");
}

/* What a stop, a failure or a winner does to the job; false: go on. */
static bool on_event(run_ctx *rx, const tuned__worker_event *ev, bool *lost, char *why, size_t n)
{
    slot *s = rx->s;
    tuned__jobs *j = s->owner;
    switch (ev->kind) {
    case TUNED__WEV_PROGRESS:
        uv_mutex_lock(&j->mu);
        if (ev->copy_us > 0)
            rx->jb->v.copy_us = rx->copy_us = ev->copy_us;
        if (ev->have_generation)
            rx->jb->v.generation = ev->generation;
        uv_mutex_unlock(&j->mu);
        return false;
    case TUNED__WEV_RUNNING:
        snprintf(rx->running, sizeof rx->running, "%s", ev->config);
        return false;
    case TUNED__WEV_EVALUATED:
        /* A variant that killed the GPU context stays the one running: the
         * worker exits after it, and the loss names it (once). */
        if (ev->status == TUNED__EVAL_LAUNCH_ERROR && strcmp(rx->running, ev->config) == 0 &&
            strncmp(ev->detail, TUNED__EVAL_KILLED_CONTEXT,
                    sizeof TUNED__EVAL_KILLED_CONTEXT - 1) == 0)
            return false;
        if (strcmp(rx->running, ev->config) == 0)
            rx->running[0] = '\0';
        account(rx, ev->config, ev->status, ev->us);
        return false;
    case TUNED__WEV_OUTCOME: {
        bool stored;
        tuned__err se = {0};
        tuned__record rec = ev->record;
        if (rec.evaluations < rx->evaluated)
            rec.evaluations = (uint32_t)rx->evaluated; /* over every attempt */
        int rc = store_result(j, &rec, false, &stored, &se);
        uv_mutex_lock(&j->mu);
        if (rc == 0) {
            rx->jb->rec = rec;
            rx->jb->have_rec = true;
        }
        rx->jb->v.have_best = true;
        rx->jb->v.best_us = rec.median_us;
        snprintf(rx->jb->v.best_config, sizeof rx->jb->v.best_config, "%s", rec.config);
        uv_mutex_unlock(&j->mu);
        if (rc != 0) {
            finish(rx, TUNED__JOB_FAILED, false, false, ev->stop_reason, se.msg);
        } else {
            logf_(j, "GPU %d: job %llu: %s %.2f us after %zu variants (%zu failed, %zu resumed, "
                  "%zu finalists)", s->info.gpu.ordinal, (unsigned long long)rx->jb->v.id,
                  rec.config, rec.median_us, rx->evaluated, rx->jb->v.failed, ev->resumed,
                  ev->finalists);
            finish(rx, TUNED__JOB_DONE, stored, false, ev->stop_reason, NULL);
        }
        return true;
    }
    default: /* TUNED__WEV_ERROR: the worker exits after it */
        drop_worker(s, 2.0);
        if (ev->lost) {
            *lost = true;
            snprintf(why, n, "GPU error: %s", ev->message);
            return false;
        }
        logf_(j, "GPU %d: job %llu: failed: %s", s->info.gpu.ordinal,
              (unsigned long long)rx->jb->v.id, ev->message);
        finish(rx, TUNED__JOB_FAILED, false, false, NULL, ev->message);
        return true;
    }
}

static void run_job(slot *s, job *jb)
{
    tuned__jobs *j = s->owner;
    run_ctx rx = {.s = s, .jb = jb, .shape = jb->v.shape};
    tuned__tune_key(&s->info.gpu, &rx.shape, &rx.key);
    char sh[256], params[128];
    tuned__shape_params_text(&rx.shape, params, sizeof params);
    snprintf(sh, sizeof sh, "%llux%llu%s%s %s %s", (unsigned long long)rx.shape.rows,
             (unsigned long long)rx.shape.cols, params[0] != '\0' ? ":" : "", params,
             tuned_dtype_name(rx.shape.dtype),
             tuned__kernel_name((uint8_t)tuned__shape_kernel(&rx.shape)));
    logf_(j, "GPU %d: job %llu: tuning %s (budget %zu, population %zu, %d finalist rounds)",
          s->info.gpu.ordinal, (unsigned long long)jb->v.id, sh, jb->search.budget,
          jb->search.population,
          jb->finalist_rounds > 0 ? jb->finalist_rounds : TUNED__FINALIST_ROUNDS_DEFAULT);
    double t0 = tuned__now_s();
    for (int attempt = 0;; attempt++) {
        tuned__err e = {0};
        if (stopping(j)) {
            checkpoint(&rx);
            return;
        }
        /* A worker that cannot start gets a second try, unless a stop
         * ended the first: then the job checkpoints what it has. */
        if (s->worker == NULL && start_worker(s, &e) != 0 &&
            (stopping(j) || start_worker(s, &e) != 0)) {
            if (stopping(j)) {
                checkpoint(&rx);
                return;
            }
            logf_(j, "GPU %d: job %llu: failed: no worker: %s", s->info.gpu.ordinal,
                  (unsigned long long)jb->v.id, e.msg);
            finish(&rx, TUNED__JOB_FAILED, false, false, NULL, e.msg);
            return;
        }
        /* A resumed attempt gets what is left of the budget and the time. */
        tuned__worker_tune t = {.shape = rx.shape, .seed = jb->search.seed,
                                .population = jb->search.population,
                                .finalist_rounds = jb->finalist_rounds,
                                .retune = jb->retune && attempt == 0};
        t.budget = jb->search.budget > rx.evaluated ? jb->search.budget - rx.evaluated : 1;
        t.time_s = jb->search.time_s - (tuned__now_s() - t0);
        if (t.time_s < 1)
            t.time_s = 1;
        rx.running[0] = '\0';
        bool lost = false, hang = false, done = false;
        char why[1100] = "";
        if (tuned__worker_send_tune(s->worker, &t, &e) != 0) {
            lost = true;
            snprintf(why, sizeof why, "%s", e.msg);
        }
        while (!lost && !done) {
            tuned__worker_event ev;
            int rc = tuned__worker_next(s->worker, &ev, j->o.variant_timeout_s, cancel_fn, j, &e);
            if (rc != 0) {
                lost = true;
                hang = rc == TUNED_ETIMEOUT;
                snprintf(why, sizeof why, "%s", e.msg);
                drop_worker(s, 0.0);
            } else {
                done = on_event(&rx, &ev, &lost, why, sizeof why);
            }
        }
        if (done)
            return;
        /* The worker is lost: who took it down? */
        if (stopping(j)) {
            note_restart(&rx, NULL);
            checkpoint(&rx);
            return;
        }
        if (rx.running[0] != '\0') {
            logf_(j, "GPU %d: job %llu: variant %s took the worker down (%s); resuming",
                  s->info.gpu.ordinal, (unsigned long long)jb->v.id, rx.running, why);
            record_culprit(&rx, hang, why);
            note_restart(&rx, rx.running);
            account(&rx, rx.running, TUNED__EVAL_LAUNCH_ERROR, 0);
            if (++rx.consecutive >= MAX_CONSECUTIVE) {
                char msg[1400];
                snprintf(msg, sizeof msg, "GPU %d lost: %d variants in a row took its worker "
                         "down; last: %s", s->info.gpu.ordinal, rx.consecutive, why);
                finish(&rx, TUNED__JOB_FAILED, false, false, NULL, msg);
                return;
            }
        } else {
            logf_(j, "GPU %d: job %llu: the worker was lost outside any variant (%s)",
                  s->info.gpu.ordinal, (unsigned long long)jb->v.id, why);
            note_restart(&rx, NULL);
            if (++rx.unnamed >= MAX_UNNAMED) {
                finish(&rx, TUNED__JOB_FAILED, false, false, NULL, why);
                return;
            }
        }
    }
}

/* ---- the table (mutex held) ---- */

static job *next_for(tuned__jobs *j, const slot *s)
{
    for (job *jb = j->head; jb != NULL; jb = jb->next)
        if (jb->v.state == TUNED__JOB_QUEUED && !jb->gated &&
            jb->v.gpu_fp == s->info.gpu.fingerprint)
            return jb;
    return NULL;
}

/* The link to the finished job that finished first, and the job before
 * it (NULL at the head); NULL when none has finished. */
static job **first_finished(tuned__jobs *j, job **prev_out)
{
    job **best = NULL, *prev = NULL;
    for (job **link = &j->head; *link != NULL; prev = *link, link = &(*link)->next)
        if (finished_state((*link)->v.state) &&
            (best == NULL || (*link)->finished_seq < (*best)->finished_seq)) {
            best = link;
            *prev_out = prev;
        }
    return best;
}

/* Drops the jobs that finished first beyond the history size (a long job
 * submitted early is kept as long as one that finished when it did). */
static void trim(tuned__jobs *j)
{
    size_t finished = 0;
    for (job *jb = j->head; jb != NULL; jb = jb->next)
        finished += finished_state(jb->v.state);
    for (; finished > j->o.history; finished--) {
        job *prev = NULL;
        job **link = first_finished(j, &prev);
        if (link == NULL)
            return;
        job *jb = *link;
        *link = jb->next;
        if (j->tail == jb)
            j->tail = prev;
        free(jb);
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
        jb->started_s = tuned__now_s();
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
    drop_worker(s, 2.0);
    uv_mutex_lock(&j->mu);
    s->finished = true;
    uv_mutex_unlock(&j->mu);
}

/* ---- the API ---- */

static int add_slot(tuned__jobs *j, tuned__worker *w, const tuned__gpu *gpu, bool fake)
{
    slot *s = &j->slots[j->nslots++];
    s->owner = j;
    s->info.gpu = *gpu;
    s->info.arch = gpu->cc_major * 10 + gpu->cc_minor;
    s->info.fake = fake;
    s->worker = w;
    s->info.worker_pid = tuned__worker_pid(w);
    logf_(j, "GPU %d: %s (sm_%d%d, %zu MiB), worker pid %d%s", gpu->ordinal, gpu->name,
          gpu->cc_major, gpu->cc_minor, gpu->total_mem >> 20, (int)s->info.worker_pid,
          fake ? " -- TEST ONLY fake GPU" : "");
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
    int count = 0;
    bool fake = false;
    tuned__err we = {0};
    if (tuned__worker_start(&w, &wo, &gpu, &count, &fake, &we) != 0) {
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
    add_slot(j, w, &gpu, fake);
    for (int d = 1; d < count; d++) {
        wo.device = d;
        tuned__err de = {0};
        int dcount;
        if (tuned__worker_start(&w, &wo, &gpu, &dcount, &fake, &de) != 0) {
            logf_(j, "GPU %d: no worker, not used: %s", d, de.msg);
            continue;
        }
        add_slot(j, w, &gpu, fake);
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
        j->stop_s = tuned__now_s();
        for (job *jb = j->head; jb != NULL; jb = jb->next) {
            if (jb->v.state != TUNED__JOB_QUEUED)
                continue;
            mark_finished(j, jb, TUNED__JOB_CANCELLED);
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
            jb->v.gpu_fp == p->gpu_fp &&
            tuned__shape_kernel(&jb->v.shape) == tuned__shape_kernel(&p->shape) &&
            jb->v.shape.dtype == p->shape.dtype && jb->v.shape.rows == p->shape.rows &&
            jb->v.shape.cols == p->shape.cols && jb->v.shape.params == p->shape.params) {
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
    jb->v.generation = -1;
    jb->v.budget = p->search.budget;
    jb->search = p->search;
    jb->finalist_rounds = p->finalist_rounds;
    jb->retune = p->retune;
    jb->gated = p->gated;
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
                out->elapsed_s = tuned__now_s() - jb->started_s;
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

bool tuned__jobs_written(tuned__jobs *j, uint64_t seq, tuned__record *out)
{
    uv_mutex_lock(&j->mu);
    const written *w = &j->kept[seq % WRITTEN_KEPT];
    bool found = seq != 0 && w->seq == seq;
    if (found)
        *out = w->rec;
    uv_mutex_unlock(&j->mu);
    return found;
}

/* The queued job id (the mutex held); NULL when it is not queued. */
static job *queued_job(tuned__jobs *j, uint64_t id)
{
    for (job *jb = j->head; jb != NULL; jb = jb->next)
        if (jb->v.id == id)
            return jb->v.state == TUNED__JOB_QUEUED ? jb : NULL;
    return NULL;
}

bool tuned__jobs_ungate(tuned__jobs *j, uint64_t id)
{
    uv_mutex_lock(&j->mu);
    job *jb = queued_job(j, id);
    if (jb != NULL) {
        jb->gated = false;
        uv_cond_broadcast(&j->cv);
    }
    uv_mutex_unlock(&j->mu);
    return jb != NULL;
}

bool tuned__jobs_resolve(tuned__jobs *j, uint64_t id, const tuned__record *rec, bool stored)
{
    uv_mutex_lock(&j->mu);
    job *jb = queued_job(j, id);
    if (jb != NULL) {
        mark_finished(j, jb, TUNED__JOB_DONE);
        jb->v.stored = stored;
        jb->v.from_remote = true;
        jb->v.have_best = true;
        jb->v.best_us = rec->median_us;
        snprintf(jb->v.best_config, sizeof jb->v.best_config, "%s", rec->config);
        snprintf(jb->v.stop_reason, sizeof jb->v.stop_reason, "the fleet's record");
        jb->rec = *rec;
        jb->have_rec = true;
        j->counts.queued--;
        j->counts.done++;
        j->counts.from_remote++;
        trim(j);
    }
    uv_mutex_unlock(&j->mu);
    return jb != NULL;
}

void tuned__jobs_note(tuned__jobs *j, uint64_t id, const char *remote)
{
    uv_mutex_lock(&j->mu);
    for (job *jb = j->head; jb != NULL; jb = jb->next)
        if (jb->v.id == id)
            snprintf(jb->v.remote, sizeof jb->v.remote, "%s", remote);
    uv_mutex_unlock(&j->mu);
}

bool tuned__jobs_record(tuned__jobs *j, uint64_t id, tuned__record *out)
{
    bool found = false;
    uv_mutex_lock(&j->mu);
    for (job *jb = j->head; jb != NULL; jb = jb->next)
        if (jb->v.id == id && jb->have_rec) {
            *out = jb->rec;
            found = true;
        }
    uv_mutex_unlock(&j->mu);
    return found;
}
