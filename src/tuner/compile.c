/* compile.c: the compile pipeline (see compile.h): a shared counter hands
 * items to the threads; a condition variable tells the waiting caller
 * when any item is done.
 *
 * A compile that hangs (NVRTC stuck in one variant) must not hold the tune
 * past its compile timeout, so finishing a batch joins its threads only
 * when they return in time; otherwise it detaches them. A detached thread
 * touches nothing of its caller's: the batch holds its own copy of the
 * configs and its own NVRTC instance, counts its users (the last one
 * frees it), and no thread enters the compile cache once the batch is
 * finished (the finish waits for those already in it: a store call is
 * short). At process exit, NVRTC's static objects would be destroyed under
 * a thread still inside it, so while one is, exit() ends the process with
 * _exit() (after flushing stdio) before those destructors run. */
#include "src/tuner/compile.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tuned.h"

#define MAX_THREADS 64

struct tuned__compile_batch {
    tuned__compile_target target; /* .nvrtc: own_nvrtc when there is one */
    tuned__nvrtc *own_nvrtc;      /* the threads' own instance; NULL: none could be
                                     loaded, the caller's is used and finish joins */
    tuned__config *cfgs;          /* a copy of the caller's */
    size_t n;
    tuned__blob *blobs;
    tuned__err *errs;
    bool *cached;
    atomic_size_t next;
    pthread_mutex_t lock;
    pthread_cond_t compiled; /* signalled whenever an item starts or is done,
                                a thread returns or leaves the store */
    bool *done;              /* under lock */
    struct timespec *began;  /* under lock: when a thread took the item (0: not yet) */
    double timeout_s;        /* the caller's last wait limit (0: none) */
    /* Under lock: */
    bool finished;           /* the caller is done: no thread enters the store */
    bool detached;           /* its running threads count in `stranded` */
    int in_store;            /* threads inside a compile-cache call */
    size_t running;          /* threads that have not returned */
    size_t refs;             /* running threads, and the caller until finish */
    pthread_t tids[MAX_THREADS];
    size_t started;
};

/* Threads of finished batches still running, in the whole process. */
static atomic_size_t stranded;

#ifdef TUNED_TEST_HOOKS
/* Test only: the next compile sleeps this long first (a hung NVRTC). */
static atomic_llong stall_ms;

void tuned__compile_test_hook_stall(double seconds)
{
    atomic_store(&stall_ms, (long long)(seconds * 1000.0));
}
#endif

size_t tuned__compile_stranded(void)
{
    return atomic_load(&stranded);
}

/* Whether a thread may use the compile cache now (then store_leave). */
static bool store_enter(tuned__compile_batch *b)
{
    if (b->target.cubins == NULL)
        return false;
    pthread_mutex_lock(&b->lock);
    bool ok = !b->finished;
    if (ok)
        b->in_store++;
    pthread_mutex_unlock(&b->lock);
    return ok;
}

static void store_leave(tuned__compile_batch *b)
{
    pthread_mutex_lock(&b->lock);
    b->in_store--;
    pthread_cond_broadcast(&b->compiled);
    pthread_mutex_unlock(&b->lock);
}

/* Source, then the compile cache, then NVRTC (and into the cache). */
static void compile_one(tuned__compile_batch *b, size_t i)
{
    const tuned__compile_target *t = &b->target;
    const tuned__config *c = &b->cfgs[i];
    tuned__blob *blob = &b->blobs[i];
    tuned__err *err = &b->errs[i];
    char name[TUNED__CONFIG_TEXT + 16], *src = NULL;
    char text[TUNED__CONFIG_TEXT];
    tuned__config_format(c, text, sizeof text);
    const tuned__kind_spec *kind = tuned__shape_spec(&t->shape);
    snprintf(name, sizeof name, "%s %s", kind != NULL ? kind->name : "?", text);
    if (tuned__source_kernel(c, &t->shape, &t->codegen, &src, err) != 0)
        return;
    uint64_t key = tuned__nvrtc_cache_key(t->nvrtc, src, t->arch, TUNED__NVRTC_CUBIN);
    if (store_enter(b)) {
        void *data = NULL;
        size_t size = 0;
        bool hit = tuned__store_get_cubin(t->cubins, key, &data, &size, NULL) == 0;
        store_leave(b);
        if (hit) {
            blob->data = data;
            blob->size = size;
            blob->compile_ms = 0.0;
            b->cached[i] = true;
            free(src);
            return;
        }
    }
#ifdef TUNED_TEST_HOOKS
    long long ms = atomic_exchange(&stall_ms, 0);
    if (ms > 0) {
        struct timespec pause = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (ms % 1000) * 1000000L};
        while (nanosleep(&pause, &pause) != 0 && errno == EINTR)
            ;
    }
#endif
    if (tuned__nvrtc_compile(t->nvrtc, src, name, t->arch, TUNED__NVRTC_CUBIN, blob, err) == 0 &&
        store_enter(b)) {
        /* A cache that cannot take the cubin costs a compile next time,
         * nothing else: the variant is still evaluated. */
        tuned__store_put_cubin(t->cubins, key, blob->data, blob->size, NULL);
        store_leave(b);
    }
    free(src);
}

/* The batch's arrays and itself (b may be partly allocated). */
static void batch_free_memory(tuned__compile_batch *b)
{
    free(b->blobs);
    free(b->errs);
    free(b->cached);
    free(b->done);
    free(b->began);
    free(b->cfgs);
    free(b);
}

static void batch_free(tuned__compile_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        tuned__blob_free(&b->blobs[i]);
    if (b->own_nvrtc != NULL)
        tuned__nvrtc_unload(b->own_nvrtc);
    pthread_cond_destroy(&b->compiled);
    pthread_mutex_destroy(&b->lock);
    batch_free_memory(b);
}

static void *compile_worker(void *arg)
{
    tuned__compile_batch *b = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&b->next, 1);
        if (i >= b->n)
            break;
        pthread_mutex_lock(&b->lock);
        clock_gettime(CLOCK_REALTIME, &b->began[i]);
        pthread_cond_broadcast(&b->compiled); /* a waiter's clock starts */
        pthread_mutex_unlock(&b->lock);
        compile_one(b, i);
        pthread_mutex_lock(&b->lock);
        b->done[i] = true;
        pthread_cond_broadcast(&b->compiled);
        pthread_mutex_unlock(&b->lock);
    }
    pthread_mutex_lock(&b->lock);
    b->running--;
    if (b->detached)
        atomic_fetch_sub(&stranded, 1);
    bool last = --b->refs == 0;
    pthread_cond_broadcast(&b->compiled);
    pthread_mutex_unlock(&b->lock);
    if (last)
        batch_free(b);
    return NULL;
}

int tuned__compile_start(tuned__compile_batch **out, const tuned__compile_target *t,
                         const tuned__config *cfgs, size_t n, tuned__err *e)
{
    tuned__compile_batch *b = calloc(1, sizeof *b);
    if (b != NULL) {
        b->blobs = calloc(n ? n : 1, sizeof *b->blobs);
        b->errs = calloc(n ? n : 1, sizeof *b->errs);
        b->cached = calloc(n ? n : 1, sizeof *b->cached);
        b->done = calloc(n ? n : 1, sizeof *b->done);
        b->began = calloc(n ? n : 1, sizeof *b->began);
        b->cfgs = calloc(n ? n : 1, sizeof *b->cfgs);
    }
    if (b == NULL || b->blobs == NULL || b->errs == NULL || b->cached == NULL || b->done == NULL ||
        b->began == NULL || b->cfgs == NULL) {
        if (b != NULL)
            batch_free_memory(b);
        return tuned__errf(e, TUNED_ENOMEM, "compile: out of memory for %zu variants", n);
    }
    b->target = *t;
    if (n > 0)
        memcpy(b->cfgs, cfgs, n * sizeof *cfgs);
    b->n = n;
    /* The threads' own NVRTC instance (the same library, loaded once more:
     * a few symbol lookups), so that one given up may outlive the caller's. */
    if (tuned__nvrtc_load(&b->own_nvrtc, NULL) == 0)
        b->target.nvrtc = b->own_nvrtc;
    atomic_init(&b->next, 0);
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->compiled, NULL);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    size_t threads = t->threads > 0 ? (size_t)t->threads : (size_t)(cores > 0 ? cores : 1);
    if (threads > n)
        threads = n;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    pthread_mutex_lock(&b->lock);
    for (b->started = 0; b->started < threads; b->started++)
        if (pthread_create(&b->tids[b->started], NULL, compile_worker, b) != 0)
            break;
    b->running = b->started;
    b->refs = b->started + 1;
    pthread_mutex_unlock(&b->lock);
    *out = b;
    return 0;
}

static struct timespec plus_seconds(struct timespec t, double s)
{
    double whole = (double)(long long)s;
    t.tv_sec += (time_t)whole;
    t.tv_nsec += (long)((s - whole) * 1e9);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* Whether item i is done, waiting at most timeout_s from the moment a
 * thread took it (0: for ever). An item still queued behind slow ones has
 * not started its clock. */
static bool wait_done(tuned__compile_batch *b, size_t i, double timeout_s)
{
    pthread_mutex_lock(&b->lock);
    while (!b->done[i]) {
        if (timeout_s <= 0 || b->began[i].tv_sec == 0) {
            pthread_cond_wait(&b->compiled, &b->lock);
            continue;
        }
        struct timespec deadline = plus_seconds(b->began[i], timeout_s);
        if (pthread_cond_timedwait(&b->compiled, &b->lock, &deadline) == ETIMEDOUT)
            break;
    }
    bool done = b->done[i];
    pthread_mutex_unlock(&b->lock);
    return done;
}

int tuned__compile_wait(tuned__compile_batch *b, size_t i, double timeout_s,
                        const tuned__blob **cubin, bool *cached, double *compile_ms,
                        tuned__err *e)
{
    *cubin = NULL;
    *cached = false;
    *compile_ms = 0.0;
    if (i >= b->n)
        return tuned__errf(e, TUNED_EINVAL, "compile: no item %zu of %zu", i, b->n);
    b->timeout_s = timeout_s;
    if (b->started == 0) {
        /* No thread could start: compile here, in order. */
        if (!b->done[i]) {
            compile_one(b, i);
            b->done[i] = true;
        }
    } else {
        if (!wait_done(b, i, timeout_s)) {
            char text[TUNED__CONFIG_TEXT];
            tuned__config_format(&b->cfgs[i], text, sizeof text);
            const tuned__kind_spec *kind = tuned__shape_spec(&b->target.shape);
            return tuned__errf(e, TUNED_ETIMEOUT,
                               "compile: %s %s: not compiled within %.0f s: given up",
                               kind != NULL ? kind->name : "?", text, timeout_s);
        }
    }
    if (b->errs[i].code != 0) {
        if (e != NULL)
            *e = b->errs[i];
        return b->errs[i].code;
    }
    *cubin = &b->blobs[i];
    *cached = b->cached[i];
    *compile_ms = b->blobs[i].compile_ms;
    return 0;
}

/* The earliest time an item being compiled runs out of the last wait's
 * limit; false when no item is being compiled. Under b->lock. */
static bool earliest_deadline(const tuned__compile_batch *b, struct timespec *out)
{
    bool any = false;
    for (size_t i = 0; i < b->n; i++) {
        if (b->done[i] || b->began[i].tv_sec == 0)
            continue;
        struct timespec d = plus_seconds(b->began[i], b->timeout_s);
        if (!any || d.tv_sec < out->tv_sec || (d.tv_sec == out->tv_sec && d.tv_nsec < out->tv_nsec))
            *out = d;
        any = true;
    }
    return any;
}

/* exit() while a stranded thread is inside NVRTC: end the process before
 * the destructors of NVRTC's static objects run under it. Registered
 * after NVRTC was loaded, so it runs before them. */
static void exit_guard(int status, void *arg)
{
    (void)arg;
    if (atomic_load(&stranded) > 0) {
        fflush(NULL);
        _exit(status);
    }
}

static pthread_once_t exit_guard_once = PTHREAD_ONCE_INIT;

static void exit_guard_install(void)
{
    on_exit(exit_guard, NULL);
}

void tuned__compile_finish(tuned__compile_batch *b)
{
    if (b == NULL)
        return;
    atomic_store(&b->next, b->n);
    pthread_mutex_lock(&b->lock);
    /* The threads finish the items they hold; one that runs past the last
     * wait's limit (from when it took its item) is not waited for. */
    while (b->running > 0) {
        struct timespec deadline;
        if (b->timeout_s <= 0 || b->own_nvrtc == NULL || !earliest_deadline(b, &deadline)) {
            pthread_cond_wait(&b->compiled, &b->lock);
            continue;
        }
        if (pthread_cond_timedwait(&b->compiled, &b->lock, &deadline) == ETIMEDOUT)
            break;
    }
    b->finished = true;
    while (b->in_store > 0)
        pthread_cond_wait(&b->compiled, &b->lock);
    bool detach = b->running > 0;
    if (detach) {
        b->detached = true;
        atomic_fetch_add(&stranded, b->running);
        pthread_once(&exit_guard_once, exit_guard_install);
    }
    size_t started = b->started;
    pthread_t tids[MAX_THREADS];
    memcpy(tids, b->tids, started * sizeof tids[0]);
    bool last = --b->refs == 0;
    pthread_mutex_unlock(&b->lock);
    /* b may be freed by now (by its last thread) unless last. */
    for (size_t i = 0; i < started; i++) {
        if (detach)
            pthread_detach(tids[i]);
        else
            pthread_join(tids[i], NULL);
    }
    if (last)
        batch_free(b);
}
