/* fake_gpu.h: TEST ONLY. A pretend GPU for the worker process, so that the
 * daemon's whole job path (queue, worker process, progress, joining, a
 * worker that crashes or hangs, kill -9 during a tune) runs on a machine
 * without a GPU, as on CI.
 *
 * It exists only in a build configured with -Dtest_hooks=true (which
 * defines TUNED_TEST_HOOKS; fake_gpu.c is compiled only then). There it is
 * off unless the environment says otherwise, and nothing but tests and
 * the load generator sets these variables:
 *
 *   TUNED_TEST_FAKE_GPU=N      the worker pretends to see N (1..8) identical
 *                              GPUs named "tuned test-only fake GPU"
 *   TUNED_TEST_FAKE_MODEL=TEXT the GPUs are named "tuned test-only fake GPU TEXT":
 *                              another model, so another hardware class
 *   TUNED_TEST_FAKE_DRIVER=N   their driver version (default 0): another
 *                              toolchain of the same hardware class
 *   TUNED_TEST_FAKE_MS=M       milliseconds each variant takes (default 5)
 *   TUNED_TEST_FAKE_BUSY=1     spin for those milliseconds instead of sleeping
 *   TUNED_TEST_FAKE_FAULT=CFG  abort() when config CFG is evaluated (a kernel
 *                              that kills its process)
 *   TUNED_TEST_FAKE_HANG=CFG   never return when CFG is evaluated (a hung kernel)
 *
 * Times are synthetic and deterministic: a config's time is the shape's
 * copy time at 3 TB/s times a factor in [1.05, 2.05) hashed from the
 * config's text, so the search runs over the real space with a fixed
 * landscape. Nothing measured this way is a GPU result; its records carry
 * the fake GPU's identity and never match a real GPU's fingerprint. */
#ifndef TUNED_DAEMON_FAKE_GPU_H
#define TUNED_DAEMON_FAKE_GPU_H

#include <stdbool.h>

#include "src/common/err.h"
#include "src/tuner/evaluator.h"
#include "src/driver/gpu.h"
#include "src/tuner/tune.h"
#include "tuned.h"

#ifdef TUNED_TEST_HOOKS

/* Whether TUNED_TEST_FAKE_GPU is set to a count from 1 to 8. */
bool tuned__fake_gpu_enabled(void);

/* The fake GPU ordinal, and the count; TUNED_ENODEV past the count. */
int tuned__fake_gpu_query(int ordinal, tuned__gpu *out, int *count, tuned__err *e);

/* The synthetic copy time of shape s. */
double tuned__fake_copy_us(const tuned__shape *s);

/* Evaluates c for s: sleeps (or spins), and may abort() or hang as the
 * environment says. */
void tuned__fake_eval(const tuned__shape *s, const tuned__config *c, tuned__eval_result *out);

/* tuned__tune() on the fake GPU: the same whole tune (tuned__tune_on:
 * history and resume, warm start, search, finalists; progress, trace and
 * eval.on_variant), with tuned__fake_eval as the evaluator, so that a
 * resumed tune skips what was measured and what took a worker down. */
int tuned__fake_tune(const tuned__tune_request *r, const tuned__gpu *gpu,
                     tuned__tune_progress_fn progress, void *ctx, tuned__tune_outcome *out,
                     tuned__err *e);

#else

/* A build without test hooks has no fake GPU, whatever the environment
 * says: the callers' fake branches are dead code the compiler drops. */
static inline bool tuned__fake_gpu_enabled(void)
{
    return false;
}

static inline int tuned__fake_gpu_query(int ordinal, tuned__gpu *out, int *count, tuned__err *e)
{
    (void)out;
    *count = 0;
    return tuned__errf(e, TUNED_ENODEV, "fake GPU %d: built without test hooks", ordinal);
}

static inline int tuned__fake_tune(const tuned__tune_request *r, const tuned__gpu *gpu,
                                   tuned__tune_progress_fn progress, void *ctx,
                                   tuned__tune_outcome *out, tuned__err *e)
{
    (void)r;
    (void)gpu;
    (void)progress;
    (void)ctx;
    (void)out;
    return tuned__errf(e, TUNED_ENODEV, "fake GPU: built without test hooks");
}

#endif /* TUNED_TEST_HOOKS */

#endif
