/* worker.h: the GPU worker process, seen from both ends of its pipes.
 *
 * The daemon never touches a GPU itself. For each GPU it runs the tuned
 * binary again as `tuned worker --device N --db STORE`, a child that owns
 * the CUDA context and runs whole tunes with tuned__tune() (the store's
 * compile cache, history, warm start, finalists: the same tune as `tuned
 * tune`), talking one JSON object per line over its stdin (requests) and
 * stdout (events); its stderr is the daemon's. Before each variant's first
 * launch it names that variant (the evaluator's on_variant hook), so when
 * a variant faults (illegal address: the context is dead), aborts or hangs
 * and takes the process down, the daemon knows which one: it writes a
 * failed entry for it into the store's history, starts a new worker and
 * sends the same tune again, which resumes from the history (every
 * variant measured so far, and the culprit, are not run again). The lines:
 *
 *   worker -> {"hello":{"count":N,"fake":B,"gpu":{...}}}   once, at start
 *             {"error":{"code":C,"message":M}}             instead, then exits
 *   daemon -> {"op":"tune","dtype":"fp16","rows":R,"cols":C,"budget":B,
 *              "time_s":T,"seed":S,"population":P,"finalist_rounds":F,
 *              "retune":false}   (finalist_rounds 0: the default)
 *   worker -> {"progress":{"copy_us":X,...}}   the roofline, then after each generation
 *             {"running":"w8.r1.v8..."}        before each variant's first launch
 *             {"evaluated":{"config":..,"s":STATUS,"us":MEDIAN,"detail":..}}
 *                                              each variant, after its batch
 *             {"outcome":{"record":{...},"evaluations":N,...}}   done; the next tune may come
 *             {"error":{...},"lost":B}         the tune failed (lost: the GPU context
 *                                              is dead); the worker exits after it
 *   EOF on stdin: the worker exits. */
#ifndef TUNED_DAEMON_WORKER_H
#define TUNED_DAEMON_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "cache/store.h"
#include "src/tuner/evaluator.h"
#include "src/driver/gpu.h"

/* ---- the daemon's end ---- */

typedef struct tuned__worker tuned__worker;

/* Polled every 100 ms while waiting on the worker; true gives up (the
 * worker is killed and the call fails with TUNED_ETIMEOUT). */
typedef bool (*tuned__worker_cancel_fn)(void *ctx);

typedef struct tuned__worker_opts {
    const char *exe;        /* the tuned binary */
    int device;             /* GPU ordinal */
    const char *db;         /* the store: the worker's compile cache (may be NULL) */
    int nice;               /* the worker's nice value (compiles yield to serving) */
    double hello_timeout_s; /* how long driver load + cuInit may take */
    /* Polled while waiting for the hello (NULL: never): a stop need not
     * wait hello_timeout_s for a worker hung in cuInit. */
    tuned__worker_cancel_fn cancel;
    void *cancel_ctx;
} tuned__worker_opts;

/* Starts a worker and reads its hello into gpu and *count (the GPUs the
 * driver sees). On failure *out is NULL and e holds the worker's own
 * message when it sent one. */
int tuned__worker_start(tuned__worker **out, const tuned__worker_opts *o, tuned__gpu *gpu,
                        int *count, bool *fake, tuned__err *e);

pid_t tuned__worker_pid(const tuned__worker *w);

typedef struct tuned__worker_tune {
    tuned__shape shape;
    size_t budget;
    double time_s;
    uint64_t seed;
    size_t population;         /* random variants in generation 0 */
    int finalist_rounds;       /* 0: the default */
    bool retune;
} tuned__worker_tune;

/* Starts a tune in the worker; its events come from tuned__worker_next. */
int tuned__worker_send_tune(tuned__worker *w, const tuned__worker_tune *t, tuned__err *e);

enum {
    TUNED__WEV_PROGRESS = 0,
    TUNED__WEV_RUNNING,
    TUNED__WEV_EVALUATED,
    TUNED__WEV_OUTCOME,
    TUNED__WEV_ERROR,
};

typedef struct tuned__worker_event {
    int kind;                           /* TUNED__WEV_* */
    char config[TUNED__CONFIG_TEXT];    /* RUNNING, EVALUATED */
    int status;                         /* EVALUATED: TUNED__EVAL_* */
    double us;                          /* EVALUATED: the median, OK only */
    char detail[512];                   /* EVALUATED: why it failed */
    double copy_us;                     /* PROGRESS */
    bool have_generation;               /* PROGRESS: after a generation (else the roofline) */
    int generation;
    tuned__record record;               /* OUTCOME: the winner, as it is to be stored */
    size_t evaluations, resumed, failed, finalists, warm_seeds; /* OUTCOME */
    char stop_reason[64];               /* OUTCOME */
    int code;                           /* ERROR: TUNED_E* */
    char message[1024];                 /* ERROR */
    bool lost;                          /* ERROR: the GPU context is dead */
} tuned__worker_event;

/* The next event of the running tune, waiting at most timeout_s. 0 with
 * *ev; otherwise the worker is lost: it died (TUNED_EIO), sent nothing in
 * time or was cancelled (TUNED_ETIMEOUT; it is killed), and e says how; the
 * caller must tuned__worker_stop() it. After an ERROR event the worker
 * exits by itself. */
int tuned__worker_next(tuned__worker *w, tuned__worker_event *ev, double timeout_s,
                       tuned__worker_cancel_fn cancel, void *ctx, tuned__err *e);

/* Ends the worker: closes its stdin, waits up to grace_s for it to exit,
 * then SIGKILLs it; reaps it and frees w. NULL is allowed. */
void tuned__worker_stop(tuned__worker *w, double grace_s);

/* ---- the worker's end (`tuned worker`) ---- */

/* The worker process's main loop on stdin/stdout; returns its exit code.
 * db (may be NULL): the store whose compile cache the evaluator uses. */
int tuned__worker_main(int device, const char *db);

#endif
