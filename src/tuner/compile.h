/* compile.h: the compile pipeline of a batch of variants.
 *
 * Worker threads (one per core) generate each variant's source and take its
 * cubin from the compile cache, or compile it with NVRTC and put it there;
 * the caller waits for the variants in order, each as soon as it is ready,
 * so that GPU work on one overlaps the compiles of the next. A wait can time
 * out: the variant is then given up (the compile goes on in its thread, but
 * the caller moves on), and finishing the batch waits for such a thread at
 * most that long from when it took its item: then it is detached, owning
 * everything it uses (compile.c), so a hung NVRTC compile bounds a batch
 * by the timeout. A cubin that arrives after the batch was finished is
 * thrown away, not cached. */
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

/* Starts compiling cfgs[0..n) for t (cfgs are copied). t->cubins must
 * outlive the call of tuned__compile_finish (not the threads: they leave
 * the cache alone after it); t->nvrtc only the call, when NVRTC can be
 * loaded again for the threads (else the threads use it and are always
 * joined). */
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

/* Lets the threads finish the items they hold and joins them, but waits
 * for one no longer than the last wait's timeout_s from when it took its
 * item (0: as long as it takes); if one runs past that, every thread still
 * running is detached, and the batch is freed by the last of them. */
void tuned__compile_finish(tuned__compile_batch *b);

/* Threads of finished batches still running (given up, detached). While
 * there are any, exit() ends the process with _exit() before NVRTC's
 * static destructors run (stdio flushed; other exit handlers registered
 * before the first detach are skipped). */
size_t tuned__compile_stranded(void);

#ifdef TUNED_TEST_HOOKS
/* Test only: the next NVRTC compile of any batch first sleeps seconds. */
void tuned__compile_test_hook_stall(double seconds);
#endif

#endif
