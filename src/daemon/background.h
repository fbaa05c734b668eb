/* background.h: the daemon's work that runs off the loop at idle CPU
 * priority (an index build, the freeing of an old index).
 *
 * libuv's pool is no place for it: a pool thread lowered to idle priority
 * cannot be raised again without CAP_SYS_NICE, and the pool also runs work
 * that must not wait behind a busy machine (the fleet's store writes). So
 * each piece of background work gets a thread of its own, which lowers
 * itself, runs the work and ends; the loop hears of it through one
 * uv_async_t and then calls the work's done callback. */
#ifndef TUNED_DAEMON_BACKGROUND_H
#define TUNED_DAEMON_BACKGROUND_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <uv.h>

#include "src/common/err.h"

typedef struct tuned__bg_work tuned__bg_work;

/* Embedded in the caller's struct (container_of gets it back). */
struct tuned__bg_work {
    void (*work)(tuned__bg_work *w); /* on the background thread */
    void (*done)(tuned__bg_work *w); /* then on the loop; may free w */
    int prio_rc;                     /* the thread could not lower itself: */
    tuned__err prio_err;             /* why (it ran at normal priority) */
    /* private */
    pthread_t thread;
    struct tuned__bg *bg;
    tuned__bg_work *next;
};

typedef struct tuned__bg {
    uv_async_t async;
    bool open;
    bool lock_ready;
    pthread_mutex_t lock; /* guards finished, the one thing threads touch */
    tuned__bg_work *finished;
    size_t running;       /* started, done not yet called (loop only) */
} tuned__bg;

/* Opens bg on loop (the loop's thread). */
int tuned__bg_init(tuned__bg *bg, uv_loop_t *loop, tuned__err *e);

/* Runs w->work on a new thread at idle priority; w->done follows on the
 * loop. On failure nothing runs and done is not called. */
int tuned__bg_start(tuned__bg *bg, tuned__bg_work *w, tuned__err *e);

/* Closes bg's handle; only once nothing is running (running == 0). A
 * handle that uv_walk closed already is left alone. */
void tuned__bg_close(tuned__bg *bg);

/* Frees the lock, after the loop closed the handle (any bg, also one
 * whose init failed or never ran, if it was zeroed). */
void tuned__bg_free(tuned__bg *bg);

#endif
