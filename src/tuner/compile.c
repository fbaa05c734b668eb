/* compile.c: the compile pipeline (see compile.h): a shared counter hands
 * items to the threads; a condition variable tells the waiting caller
 * when any item is done. */
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
    tuned__compile_target target;
    const tuned__config *cfgs;
    size_t n;
    tuned__blob *blobs;
    tuned__err *errs;
    bool *cached;
    atomic_size_t next;
    pthread_mutex_t lock;
    pthread_cond_t compiled; /* signalled whenever an item starts or is done */
    bool *done;              /* under lock */
    struct timespec *began;  /* under lock: when a thread took the item (0: not yet) */
    pthread_t tids[MAX_THREADS];
    size_t started;
};

/* Source, then the compile cache, then NVRTC (and into the cache). */
static void compile_one(const tuned__compile_target *t, const tuned__config *c, tuned__blob *blob,
                        bool *cached, tuned__err *err)
{
    char name[TUNED__CONFIG_TEXT + 16], *src = NULL;
    char text[TUNED__CONFIG_TEXT];
    tuned__config_format(c, text, sizeof text);
    snprintf(name, sizeof name, "softmax %s", text);
    if (tuned__source_softmax(c, &t->shape, &t->codegen, &src, err) != 0)
        return;
    uint64_t key = tuned__nvrtc_cache_key(t->nvrtc, src, t->arch, TUNED__NVRTC_CUBIN);
    if (t->cubins != NULL) {
        void *data = NULL;
        size_t size = 0;
        if (tuned__store_get_cubin(t->cubins, key, &data, &size, NULL) == 0) {
            blob->data = data;
            blob->size = size;
            blob->compile_ms = 0.0;
            *cached = true;
            free(src);
            return;
        }
    }
    if (tuned__nvrtc_compile(t->nvrtc, src, name, t->arch, TUNED__NVRTC_CUBIN, blob, err) == 0 &&
        t->cubins != NULL)
        /* A cache that cannot take the cubin costs a compile next time,
         * nothing else: the variant is still evaluated. */
        tuned__store_put_cubin(t->cubins, key, blob->data, blob->size, NULL);
    free(src);
}

static void *compile_worker(void *arg)
{
    tuned__compile_batch *b = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&b->next, 1);
        if (i >= b->n)
            return NULL;
        pthread_mutex_lock(&b->lock);
        clock_gettime(CLOCK_REALTIME, &b->began[i]);
        pthread_cond_broadcast(&b->compiled); /* a waiter's clock starts */
        pthread_mutex_unlock(&b->lock);
        compile_one(&b->target, &b->cfgs[i], &b->blobs[i], &b->cached[i], &b->errs[i]);
        pthread_mutex_lock(&b->lock);
        b->done[i] = true;
        pthread_cond_broadcast(&b->compiled);
        pthread_mutex_unlock(&b->lock);
    }
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
    }
    if (b == NULL || b->blobs == NULL || b->errs == NULL || b->cached == NULL || b->done == NULL ||
        b->began == NULL) {
        if (b != NULL) {
            free(b->blobs);
            free(b->errs);
            free(b->cached);
            free(b->done);
            free(b->began);
            free(b);
        }
        return tuned__errf(e, TUNED_ENOMEM, "compile: out of memory for %zu variants", n);
    }
    b->target = *t;
    b->cfgs = cfgs;
    b->n = n;
    atomic_init(&b->next, 0);
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->compiled, NULL);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    size_t threads = t->threads > 0 ? (size_t)t->threads : (size_t)(cores > 0 ? cores : 1);
    if (threads > n)
        threads = n;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    for (b->started = 0; b->started < threads; b->started++)
        if (pthread_create(&b->tids[b->started], NULL, compile_worker, b) != 0)
            break;
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
    if (b->started == 0) {
        /* No thread could start: compile here, in order. */
        if (!b->done[i]) {
            compile_one(&b->target, &b->cfgs[i], &b->blobs[i], &b->cached[i], &b->errs[i]);
            b->done[i] = true;
        }
    } else {
        if (!wait_done(b, i, timeout_s)) {
            char text[TUNED__CONFIG_TEXT];
            tuned__config_format(&b->cfgs[i], text, sizeof text);
            return tuned__errf(e, TUNED_ETIMEOUT,
                               "compile: softmax %s: not compiled within %.0f s: given up", text,
                               timeout_s);
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

void tuned__compile_finish(tuned__compile_batch *b)
{
    if (b == NULL)
        return;
    atomic_store(&b->next, b->n);
    for (size_t i = 0; i < b->started; i++)
        pthread_join(b->tids[i], NULL);
    for (size_t i = 0; i < b->n; i++)
        tuned__blob_free(&b->blobs[i]);
    free(b->blobs);
    free(b->errs);
    free(b->cached);
    free(b->done);
    free(b->began);
    pthread_cond_destroy(&b->compiled);
    pthread_mutex_destroy(&b->lock);
    free(b);
}
