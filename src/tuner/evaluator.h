/* evaluator.h: compiles variants, checks them against the float64
 * reference and times the correct ones on one GPU.
 *
 * One evaluator serves one shape on one GPU: it owns the primary context's
 * stream, the input, output, L2-flush buffers and the reference kernels.
 * A variant that computes a wrong softmax, or writes outside its output, is
 * never timed. Timing: warm-up, then for each repeat an L2 flush (every
 * line of x and y set back to normal eviction priority, then a memset of
 * twice the L2, then a pause of settle_us with the GPU spinning), CUDA
 * events around one launch, each repeat run alone (serial); the median
 * over a time budget. The device-to-device copy of the same bytes is timed the same way
 * and is the roofline every variant is compared with. */
#ifndef TUNED_TUNER_EVALUATOR_H
#define TUNED_TUNER_EVALUATOR_H

#include "cache/store.h"
#include "src/codegen/config.h"
#include "src/codegen/nvrtc.h"
#include "src/codegen/source.h"
#include "src/driver/gpu.h"

typedef struct tuned__evaluator tuned__evaluator;

typedef struct tuned__eval_opts {
    double budget_ms;        /* kernel time to spend timing one variant (default 10;
                                the L2 flush before each launch adds about as much) */
    int min_reps, max_reps;  /* repeats per variant (defaults 5 and 200) */
    double settle_us;        /* pause between each flush and the timed launch,
                                the GPU spinning (default 100; 0: none) */
    bool serial;             /* each repeat enqueued only after the last one ran
                                (default true, as in bench_torch.py: the GPU idles
                                while the host waits, and the pause wakes it);
                                false: repeats queued in batches, which on the
                                H100 timed few-µs kernels 0.7-1 µs slower */
    int compile_threads;     /* parallel NVRTC compiles; 0: one per core */
    double compile_timeout_s; /* a variant not compiled by then is given up
                                 (status timeout), and its batch does not wait
                                 for it either (compile.h); 0: no limit
                                 (default 120) */
    size_t x_offset;         /* elements between the allocation and x (alignment tests) */
    size_t y_offset;         /* likewise for y */
    tuned__codegen_opts codegen; /* test only: planted bugs */
    long long stray_write;   /* test only: a byte at y + this overwritten after
                                each checked launch, as a stray store would
                                (0: none; refused without TUNED_TEST_HOOKS) */
    tuned__store *cubins;    /* compile cache (may be NULL): cubins by
                                tuned__nvrtc_cache_key, shared by every shape */
    /* Called right before a variant's first launch (may be NULL): a
     * process that a faulting variant kills can say which one it was. */
    void (*on_variant)(void *ctx, const tuned__config *c);
    void *on_variant_ctx;
} tuned__eval_opts;

/* Fills the defaults. */
void tuned__eval_opts_default(tuned__eval_opts *o);

/* A result's status. UNRUN is 0, so a zeroed result never reads as a
 * verdict: a batch that stops (a fatal GPU error) leaves the variants it
 * did not finish UNRUN, and they are neither timings nor failures. Not on
 * disk: the history stores its own names (TUNED__HIST_*, mapped by
 * tune.c); the daemon's worker sends these numbers to its parent, the
 * same binary. */
enum {
    TUNED__EVAL_UNRUN = 0,    /* not run (to the end): the batch stopped */
    TUNED__EVAL_OK,
    TUNED__EVAL_COMPILE_ERROR,
    TUNED__EVAL_WRONG,
    TUNED__EVAL_LAUNCH_ERROR,
    TUNED__EVAL_TIMEOUT,      /* its compile did not finish in time */
};
_Static_assert(TUNED__EVAL_UNRUN == 0, "a zeroed (calloc'd) result must read as not run");

/* How the detail of a TUNED__EVAL_LAUNCH_ERROR begins when the variant
 * killed the GPU context: the process can run nothing after it, and the
 * daemon names it as the one that took its worker down. */
#define TUNED__EVAL_KILLED_CONTEXT "killed the GPU context"

typedef struct tuned__eval_result {
    int status;               /* TUNED__EVAL_* */
    double median_us;         /* only for TUNED__EVAL_OK */
    double p20_us, p80_us;
    /* The mean of the middle half of the sorted times. On a few-µs kernel
     * the events tick in 32 ns steps and many variants share one median;
     * this mean still tells them apart (the tune's finalists rank by it). */
    double iqm_us;
    int reps;
    double compile_ms;        /* 0 when the cubin came from the compile cache */
    bool cached;              /* the cubin came from the compile cache */
    int registers;            /* per thread, from the loaded cubin */
    int local_bytes;          /* per thread: spills */
    char detail[512];         /* why it failed */
} tuned__eval_result;

/* Returns a short name for a TUNED__EVAL_* status ("ok", "wrong", ...). */
const char *tuned__eval_status_name(int status);

/* Sets up shape s on gpu: buffers, reference kernels (checked against a
 * CPU float64 softmax), and the copy roofline. */
int tuned__evaluator_open(tuned__evaluator **out, const tuned__driver *d, const tuned__nvrtc *n,
                          const tuned__gpu *gpu, const tuned__shape *s, const tuned__eval_opts *o,
                          tuned__err *e);
void tuned__evaluator_close(tuned__evaluator *ev);

/* The code generation options the variants are compiled with (the
 * caller's, made unaligned where the buffers' offsets require it). */
const tuned__codegen_opts *tuned__evaluator_codegen(const tuned__evaluator *ev);

/* Median time of a device-to-device copy of the shape's bytes. */
double tuned__evaluator_copy_us(const tuned__evaluator *ev);

/* Compiles cfgs (in parallel), then checks and times each in turn. A
 * variant's own failure is its result's status; the return value is
 * nonzero only when the GPU itself can no longer be used, and then the
 * variants after the one it failed in are TUNED__EVAL_UNRUN, and so is
 * that one, unless it killed the context (an illegal address, a trap:
 * TUNED__EVAL_LAUNCH_ERROR, its culprit). */
int tuned__evaluator_run(tuned__evaluator *ev, const tuned__config *cfgs, size_t n,
                         tuned__eval_result *results, tuned__err *e);

#endif
