/* api_tune.c: the tunes a handle asks for. Tunes never run in this
 * process: under TUNED_POLICY_PROCESS a background thread of the handle
 * runs `tuned` child processes one at a time (api_child.c); under
 * TUNED_POLICY_DAEMON it sends the daemon a `tune` request. tuned_tune()
 * does the same and waits, reporting progress to the handle's callback.
 * When a tune is done, the calls of its shape look at the store again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/api/handle.h"
#include "src/client/client.h"
#include "src/tuner/space.h"

/* ---- tunes (under h->mu unless said otherwise) ---- */

tune_job *tuned__api_job_find(tuned_handle *h, uint64_t fp, const tuned__shape *s)
{
    for (tune_job *j = h->jobs; j != NULL; j = j->next)
        if (j->fp == fp && j->shape.rows == s->rows && j->shape.cols == s->cols &&
            j->shape.params == s->params &&
            j->shape.dtype == s->dtype && tuned__shape_kernel(&j->shape) == tuned__shape_kernel(s))
            return j;
    return NULL;
}

static tune_job *job_add(tuned_handle *h, int device, uint64_t fp, const tuned__shape *s)
{
    tune_job *j = calloc(1, sizeof *j);
    if (j == NULL)
        return NULL;
    j->device = device;
    j->fp = fp;
    j->shape = *s;
    j->state = TUNED_TUNE_QUEUED;
    j->next = h->jobs;
    h->jobs = j;
    return j;
}

/* Makes every call of the shape on device look at the store again. */
static void force_recheck(tuned_handle *h, int device, const tuned__shape *s)
{
    for (tuned__api_entry *e = h->entries; e != NULL; e = e->all_next)
        if (e->key.rows == s->rows && e->key.cols == tuned__wire_cols_of(s) &&
            e->key.dtype == s->dtype &&
            e->key.kernel == tuned__shape_kernel(s) && e->choice.device == device)
            atomic_store_explicit(&e->recheck_ns, 0, memory_order_relaxed);
}

/* Runs one child tune; not under h->mu. */
static int child_tune(tuned_handle *h, int device, const tuned__shape *s, double time_s,
                      tuned__err *e)
{
    tuned__api_child c = {.binary = h->tuned_path, .store = tuned__store_real_path(h->store),
                          .device = device, .shape = *s, .time_s = time_s,
                          .timeout_s = (time_s > 0 ? time_s : TUNE_DEFAULT_S) * 2 + TUNE_SLACK_S,
                          .cancel = &h->cancel, .on_progress = h->on_progress,
                          .progress_ctx = h->progress_ctx};
    pthread_mutex_lock(&h->tune_mu);
    int rc = tuned__api_run_child(&c, e);
    pthread_mutex_unlock(&h->tune_mu);
    return rc;
}

static void *worker_main(void *arg)
{
    tuned_handle *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->stopping) {
        tune_job *j = h->jobs;
        while (j != NULL && (j->started || j->state != TUNED_TUNE_QUEUED))
            j = j->next;
        if (j == NULL) {
            pthread_cond_wait(&h->cv, &h->mu);
            continue;
        }
        j->started = true;
        int device = j->device;
        uint64_t fp = j->fp;
        tuned__shape shape = j->shape;
        pthread_mutex_unlock(&h->mu);
        tuned__err e = {0};
        uint64_t daemon_job = 0;
        bool by_daemon = h->policy == TUNED_POLICY_DAEMON;
        int rc = by_daemon
                     ? tuned__client_tune(h->socket, &shape, fp, h->tune_time_s, &daemon_job, &e)
                     : child_tune(h, device, &shape, h->tune_time_s, &e);
        if (rc != 0 && h->on_progress != NULL) {
            /* The background tune failed: said once, through the callback
             * (outside the lock, as every report), with why. */
            tuned_progress p = {.rows = (int64_t)shape.rows, .cols = (int64_t)shape.cols,
                                .dtype = shape.dtype, .device = device, .state = "failed",
                                .generation = -1, .message = e.msg};
            tuned__api_progress_call(h->on_progress, h->progress_ctx, &p);
        }
        pthread_mutex_lock(&h->mu);
        if (rc != 0) {
            j->state = TUNED_TUNE_FAILED;
            snprintf(j->message, sizeof j->message, "%s", e.msg);
        } else if (by_daemon) {
            /* Queued there; the store tells when it is done. */
            snprintf(j->message, sizeof j->message, "daemon job %llu",
                     (unsigned long long)daemon_job);
        } else {
            j->state = TUNED_TUNE_DONE;
            snprintf(j->message, sizeof j->message, "tuned by a child process");
            force_recheck(h, device, &shape);
        }
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

void tuned__api_request_tune(tuned_handle *h, int device, const tuned__gpu *gpu,
                         const tuned__shape *s, tuned_source source)
{
    if (source == TUNED_SOURCE_EXACT || h->policy == TUNED_POLICY_NEVER || h->store == NULL ||
        h->stopping || tuned__api_job_find(h, gpu->fingerprint, s) != NULL)
        return;
    tune_job *j = job_add(h, device, gpu->fingerprint, s);
    if (j == NULL)
        return; /* out of memory: no tune, nothing else lost */
    if (!h->worker_started) {
        if (pthread_create(&h->worker, NULL, worker_main, h) != 0) {
            j->state = TUNED_TUNE_FAILED;
            snprintf(j->message, sizeof j->message, "cannot start the tuning thread");
            return;
        }
        h->worker_started = true;
    }
    snprintf(j->message, sizeof j->message, "queued");
    pthread_cond_signal(&h->cv);
}

/* The job's progress to the handle's callback; a failed request only
 * skips one report (the job's state is asked for separately). */
static void report_daemon_job(tuned_handle *h, uint64_t id, const tuned__shape *s)
{
    json_t *req = json_pack("{s:s, s:I}", "op", "job", "job", (json_int_t)id);
    json_t *rep = NULL;
    tuned__err ignored = {0};
    if (req != NULL && tuned__client_request(h->socket, req, 10.0, &rep, &ignored) == 0) {
        tuned_progress p;
        char best[128];
        tuned__api_progress_from_json(json_object_get(rep, "job"), s, &p, best, sizeof best);
        tuned__api_progress_call(h->on_progress, h->progress_ctx, &p);
    }
    json_decref(req);
    json_decref(rep);
}

/* Follows daemon job id until it ends, reporting its progress; not under
 * h->mu. */
static int follow_daemon_job(tuned_handle *h, uint64_t id, const tuned__shape *s,
                             double timeout_s, tuned__err *e)
{
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        char state[32], why[256];
        if (h->on_progress != NULL)
            report_daemon_job(h, id, s);
        int rc = tuned__client_job(h->socket, id, state, sizeof state, why, sizeof why, e);
        if (rc != 0)
            return rc;
        if (strcmp(state, "done") == 0)
            return 0;
        if (strcmp(state, "failed") == 0 || strcmp(state, "cancelled") == 0)
            return tuned__errf(e, TUNED_ETUNE, "daemon job %llu %s%s%s", (unsigned long long)id,
                               state, why[0] ? ": " : "", why);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double elapsed = (double)(now.tv_sec - start.tv_sec) +
                         (double)(now.tv_nsec - start.tv_nsec) / 1e9;
        if (elapsed > timeout_s)
            return tuned__errf(e, TUNED_ETIMEOUT, "daemon job %llu still %s after %.0f s",
                               (unsigned long long)id, state, elapsed);
        if (atomic_load(&h->cancel) != 0)
            return tuned__errf(e, TUNED_EIO, "daemon job %llu: no longer followed (closing)",
                               (unsigned long long)id);
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 250 * 1000000L};
        nanosleep(&pause, NULL);
    }
}

/* TUNED_ENOSPACE (with the reason) when no variant fits s on gpu: said at
 * once, not by a child or the daemon after it allocated its buffers and
 * timed the copy. The rules and the first valid config only, as a pick. */
static int space_check(const tuned__gpu *gpu, const tuned__shape *s, tuned__err *e)
{
    tuned__space sp;
    tuned__config first;
    int rc = tuned__space_rules(&sp, s, gpu->cc_major * 10 + gpu->cc_minor, gpu->sm_count, e);
    return rc != 0 ? rc : tuned__space_default(&sp, &first, e);
}

int tuned_tune(tuned_handle *h, tuned_kernel kernel, int64_t rows, int64_t cols,
               tuned_dtype dtype, int device, double time_s)
{
    if (h != NULL && tuned__api_in_progress())
        /* The tune reporting holds the tune lock on this thread. */
        return tuned__api_failf(h, TUNED_EINVAL,
                                "tuned_tune: called from a progress callback (the tune that "
                                "reports holds the handle's tune lock); tune after it returns");
    int rc = tuned__api_shape_ok(h, "tuned_tune", kernel, rows, cols, dtype, device);
    if (rc != 0)
        return rc;
    if (!(time_s >= 0 && time_s <= 86400))
        return tuned__api_failf(h, TUNED_EINVAL, "tuned_tune: time_s %g out of range (0 to 86400)",
                                time_s);
    if (h->store == NULL)
        return tuned__api_failf(h, TUNED_EINVAL,
                                "tuned_tune: this handle has no store to keep a result in");
    tuned__err e = {0};
    tuned__shape s = {.dtype = dtype, .rows = (uint64_t)rows, .cols = (uint64_t)cols,
                      .kernel = (uint8_t)kernel};
    int ordinal = 0;
    const tuned__gpu *gpu = NULL;
    uint64_t fp = 0;
    pthread_mutex_lock(&h->mu);
    rc = tuned__api_resolve_device(h, device, &ordinal, &e);
    if (rc == 0)
        rc = tuned__api_device_get(h, ordinal, &gpu, &e);
    if (rc == 0)
        rc = space_check(gpu, &s, &e);
    if (rc == 0) {
        fp = gpu->fingerprint;
        tune_job *j = tuned__api_job_find(h, fp, &s);
        if (j == NULL)
            j = job_add(h, ordinal, fp, &s);
        if (j != NULL) {
            j->started = true; /* the background thread leaves it to us */
            j->state = TUNED_TUNE_QUEUED;
            snprintf(j->message, sizeof j->message, "tuning (tuned_tune)");
        }
    }
    pthread_mutex_unlock(&h->mu);
    if (rc == 0) {
        double budget = time_s > 0 ? time_s : (h->tune_time_s > 0 ? h->tune_time_s : 0);
        if (h->policy == TUNED_POLICY_DAEMON) {
            uint64_t id = 0;
            rc = tuned__client_tune(h->socket, &s, fp, budget, &id, &e);
            if (rc == 0)
                rc = follow_daemon_job(h, id, &s,
                                       (budget > 0 ? budget : TUNE_DEFAULT_S) * 2 + TUNE_SLACK_S,
                                       &e);
        } else {
            rc = child_tune(h, ordinal, &s, budget, &e);
        }
    }
    pthread_mutex_lock(&h->mu);
    tune_job *j = gpu != NULL ? tuned__api_job_find(h, fp, &s) : NULL;
    if (j != NULL) {
        j->state = rc == 0 ? TUNED_TUNE_DONE : TUNED_TUNE_FAILED;
        snprintf(j->message, sizeof j->message, "%s", rc == 0 ? "stored" : e.msg);
    }
    if (rc == 0)
        force_recheck(h, ordinal, &s);
    pthread_mutex_unlock(&h->mu);
    if (rc != 0) {
        tuned__err_prefix(&e, rc, "tuned_tune %s %lldx%lld %s: ", tuned_kernel_name(kernel),
                          (long long)rows, (long long)cols, tuned_dtype_name(dtype));
        return tuned__api_fail(h, &e);
    }
    return 0;
}
