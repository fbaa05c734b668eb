/* compile.h: the compile pipeline of a batch of variants.
 *
 * Worker threads (one per core) generate each variant's source and take its
 * cubin from the compile cache, or compile it with NVRTC and put it there;
 * the caller waits for the variants in order, each as soon as it is ready,
 * so that GPU work on one overlaps the compiles of the next. A wait can time
 * out: the variant is then given up (the compile goes on in its thread, and
 * its cubin still lands in the cache, but the caller moves on). */
#ifndef TUNED_TUNER_COMPILE_H
#define TUNED_TUNER_COMPILE_H

#include <stdbool.h>
#include <stddef.h>

#include "cache/store.h"
#include "src/codegen/config.h"
#include "src/codegen/nvrtc.h"
#include "src/codegen/source.h"

typedef struct tuned__compile_target {
    const tuned__nvrtc *nvrtc;
    int arch;                    /* e.g. 90 */
    tuned__shape shape;
    tuned__codegen_opts codegen;
    tuned__store *cubins;        /* compile cache (may be NULL) */
    int threads;                 /* 0: one per core */
} tuned__compile_target;

typedef struct tuned__compile_batch tuned__compile_batch;

/* Starts compiling cfgs[0..n) for t; cfgs and t's pointers must outlive
 * the batch. */
int tuned__compile_start(tuned__compile_batch **out, const tuned__compile_target *t,
                         const tuned__config *cfgs, size_t n, tuned__err *e);

/* Waits for item i, at most timeout_s seconds (0: as long as it takes).
 * 0: *cubin is the compiled variant (owned by the batch), *cached says
 * whether it came from the cache, *compile_ms how long NVRTC took.
 * TUNED_ECOMPILE (or the code generation's error): e says why.
 * TUNED_ETIMEOUT: the wait ran out; the item is given up. */
int tuned__compile_wait(tuned__compile_batch *b, size_t i, double timeout_s,
                        const tuned__blob **cubin, bool *cached, double *compile_ms,
                        tuned__err *e);

/* Lets the threads finish the items they hold, joins them, frees the batch. */
void tuned__compile_finish(tuned__compile_batch *b);

#endif
