/* worker.h: the GPU worker process, seen from both ends of its pipes.
 *
 * The daemon never touches a GPU itself. For each GPU it runs the tuned
 * binary again as `tuned worker --device N`, a child that owns the CUDA
 * context, compiles and times variants, and talks one JSON object per line
 * over its stdin (requests) and stdout (replies); its stderr is the
 * daemon's. A variant that faults (illegal address: the context is dead),
 * aborts or hangs takes only this process down: the daemon sees EOF, a
 * "fatal" line or a missed deadline, kills what is left and starts a new
 * one. The lines:
 *
 *   worker -> {"hello":{"count":N,"chunk":P,"fake":B,"gpu":{...}}}  once, at start
 *             {"error":{"code":C,"message":M}}                      instead, then exits
 *   daemon -> {"op":"open","dtype":"fp16","rows":R,"cols":C}
 *   worker -> {"opened":{"copy_us":X}} | {"error":{...}}
 *   daemon -> {"op":"eval","configs":["w8.r1.v8...",...]}
 *   worker -> {"results":[{...},...]}   one line per chunk of at most P variants,
 *                                       in order, until every config has a result
 *             {"fatal":{...},"results":[...]}  the GPU is lost: the results done
 *                                       before it, then the worker exits
 *   daemon -> {"op":"close"}            frees the shape's buffers
 *   worker -> {"closed":true}
 *   EOF on stdin: the worker exits.
 *
 * A result is {"s":status,"us":median,"p20":..,"p80":..,"reps":..,"cms":..,
 * "regs":..,"local":..,"detail":".."} with s a TUNED__EVAL_* value. */
#ifndef TUNED_DAEMON_WORKER_H
#define TUNED_DAEMON_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "../tuner/evaluator.h"
#include "../tuner/gpu.h"

/* ---- the daemon's end ---- */

typedef struct tuned__worker tuned__worker;

typedef struct tuned__worker_opts {
    const char *exe;        /* the tuned binary */
    int device;             /* GPU ordinal */
    const char *db;         /* the store: the worker's compile cache (may be NULL) */
    int nice;               /* the worker's nice value (compiles yield to serving) */
    double hello_timeout_s; /* how long driver load + cuInit may take */
} tuned__worker_opts;

/* Polled every 100 ms while waiting on the worker; true gives up (the
 * worker is killed and the call fails with TUNED_ETIMEOUT). */
typedef bool (*tuned__worker_cancel_fn)(void *ctx);

/* Starts a worker and reads its hello into gpu and *count (the GPUs the
 * driver sees) and *chunk (variants per result line). On failure *out is
 * NULL and e holds the worker's own message when it sent one. */
int tuned__worker_start(tuned__worker **out, const tuned__worker_opts *o, tuned__gpu *gpu,
                        int *count, int *chunk, bool *fake, tuned__err *e);

pid_t tuned__worker_pid(const tuned__worker *w);

/* Sets up shape s in the worker; *copy_us is the roofline it measured. */
int tuned__worker_open(tuned__worker *w, const tuned__shape *s, double timeout_s,
                       double *copy_us, tuned__err *e);

/* Evaluates cfgs[0..n) (n at most TUNED__WORKER_MAX_BATCH): res[i] for
 * i < *done holds the worker's result. 0 when all n came back. Otherwise
 * the worker is lost: it died (EOF: TUNED_EIO), sent no line within
 * line_timeout_s or was cancelled (TUNED_ETIMEOUT; it is killed), or
 * reported a fatal GPU error (TUNED_ECUDA); e says which, and the caller
 * must tuned__worker_stop() it. */
int tuned__worker_eval(tuned__worker *w, const tuned__config *cfgs, size_t n,
                       tuned__eval_result *res, size_t *done, double line_timeout_s,
                       tuned__worker_cancel_fn cancel, void *ctx, tuned__err *e);

/* Frees the shape's buffers in the worker. */
int tuned__worker_close_shape(tuned__worker *w, double timeout_s, tuned__err *e);

/* Ends the worker: closes its stdin, waits up to grace_s for it to exit,
 * then SIGKILLs it; reaps it and frees w. NULL is allowed. */
void tuned__worker_stop(tuned__worker *w, double grace_s);

#define TUNED__WORKER_MAX_BATCH 256

/* ---- the worker's end (`tuned worker`) ---- */

/* The worker process's main loop on stdin/stdout; returns its exit code.
 * db (may be NULL): the store whose compile cache the evaluator uses. */
int tuned__worker_main(int device, const char *db);

#endif
