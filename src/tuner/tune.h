/* tune.h: one whole tune of one shape on one GPU, and its record.
 *
 * Ties the pieces together: space for the shape and architecture, an
 * evaluator on the GPU, the search, and the store record of the winner.
 * This is where the tuner hands its result to the cache (data flows
 * codegen -> tuner -> cache). */
#ifndef TUNED_TUNER_TUNE_H
#define TUNED_TUNER_TUNE_H

#include "cache/store.h"
#include "src/tuner/search.h"

#define TUNED__FINALIST_ROUNDS_DEFAULT 3
#define TUNED__FINALIST_ROUNDS_MAX 8

/* Most configs a request may ask to be measured first. */
#define TUNED__TUNE_MAX_TRIES 8

typedef struct tuned__tune_request {
    tuned__shape shape;
    int device;                 /* GPU ordinal */
    tuned__search_opts search;
    tuned__eval_opts eval;
    /* The store (may be NULL): compile cache, evaluation history (written
     * after every generation, read back to resume), and the winners of
     * neighbouring shapes as starting points. */
    tuned__store *store;
    bool retune;                /* ignore this shape's history: measure again */
    /* Rounds of re-timing the finalists get (1 to TUNED__FINALIST_ROUNDS_MAX,
     * default TUNED__FINALIST_ROUNDS_DEFAULT; src/tuner/effort.h sets it). */
    int finalist_rounds;
    /* Called with every evaluated variant (may be NULL): for traces. */
    void (*trace)(void *ctx, const tuned__config *c, const tuned__eval_result *r);
    void *trace_ctx;
    /* Configs measured first, before the warm and heuristic seeds (the
     * CLI's --try): a variant the search might not draw. Each must lie in
     * the shape's space on this GPU (TUNED_EINVAL otherwise, naming why). */
    tuned__config tries[TUNED__TUNE_MAX_TRIES];
    size_t ntries;
} tuned__tune_request;

void tuned__tune_request_default(tuned__tune_request *r);

typedef struct tuned__tune_progress {
    const tuned__gpu *gpu;
    double copy_us;             /* the roofline, once measured */
    const tuned__search_progress *search; /* NULL before the first generation */
} tuned__tune_progress;

typedef void (*tuned__tune_progress_fn)(void *ctx, const tuned__tune_progress *p);

typedef struct tuned__tune_outcome {
    tuned__gpu gpu;
    double copy_us;
    tuned__search_result search; /* best and best_us: after the finalists' re-timing */
    size_t finalists;            /* configs re-timed against each other */
    double noise;                /* relative spread of timing one config repeatedly */
    size_t warm_seeds;           /* starting points taken from other shapes */
    uint64_t cubin;              /* compile-cache key of the winner's cubin (0: unknown) */
} tuned__tune_outcome;

/* Tunes r->shape on GPU r->device. TUNED_ENOSPACE when no variant fits the
 * shape; TUNED_EWRONG when every variant tried failed its check (the
 * message names the first failure). progress may be NULL.
 *
 * After the search, the finalists (correct configs within a few percent of
 * the best; among equal medians, those with the lighter slow tail) are
 * timed again, interleaved, several rounds, each round checking them
 * again: a finalist that fails a round's check is out (its failure goes
 * to the history), and when every one fails the tune fails with
 * TUNED_EWRONG rather than store one. Of the rest, the fastest by the median of
 * its rounds' interquartile means wins (they resolve differences under
 * the events' 32 ns step, where medians tie), unless a simpler config's
 * rounds overlap its rounds (its fastest no slower than the winner's
 * slowest), so that two runs on two identical GPUs pick the same winner
 * among ties. The winner's figure stays the median of its rounds. */
int tuned__tune(const tuned__driver *d, const tuned__nvrtc *n, const tuned__tune_request *r,
                tuned__tune_progress_fn progress, void *ctx, tuned__tune_outcome *out,
                tuned__err *e);

/* What evaluates variants for a tune: the GPU evaluator, or for tests and
 * the daemon's test-only fake GPU, anything with the evaluator's contract
 * (run: results for every config; nonzero only when evaluation as a whole
 * cannot go on). */
typedef struct tuned__tune_backend {
    int (*run)(void *ctx, const tuned__config *cfgs, size_t n, tuned__eval_result *out,
               tuned__err *e);
    void *ctx;
    double copy_us; /* the roofline */
} tuned__tune_backend;

/* The whole tune of tuned__tune() (store history and resume, warm start,
 * search, finalists) over backend b for a GPU described by gpu; leaves
 * out->cubin 0. */
int tuned__tune_on(const tuned__tune_backend *b, const tuned__gpu *gpu,
                   const tuned__tune_request *r, tuned__tune_progress_fn progress, void *ctx,
                   tuned__tune_outcome *out, tuned__err *e);

/* The measurements stored under key (every config the store's history
 * holds for that shape and GPU, parsed; unparsable ones skipped), as a
 * search's prior; *out is malloc'd. */
int tuned__tune_history(tuned__store *store, const tuned__store_key *key,
                        tuned__search_prior **out, size_t *n, tuned__err *e);

/* The store key of shape on gpu. */
void tuned__tune_key(const tuned__gpu *gpu, const tuned__shape *shape, tuned__store_key *key);

/* Orders configs by simplicity (family, cluster, blocks per SM, stages,
 * hints, register mode, then the text): negative when a is simpler. */
int tuned__config_simpler(const tuned__config *a, const tuned__config *b);

/* The store record of a successful outcome. */
void tuned__tune_record(const tuned__tune_outcome *o, const tuned__shape *shape,
                        tuned__record *rec);

#endif
