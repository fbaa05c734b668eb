/* search.h: random population, then pattern search, over a variant space.
 *
 * Generation 0 evaluates the heuristic seeds and a random population.
 * Every later generation takes the best few configs so far that still have
 * an untried neighbour (the incumbents) and evaluates all those neighbours;
 * the search stops when two generations in a row improve the best time by
 * less than min_gain, when no untried neighbour is left, or when the
 * evaluation or wall-clock budget runs out. The search never touches a GPU: it calls an evaluation
 * function, so tests can replay a recorded landscape. Same seed, same
 * landscape, same choices. */
#ifndef TUNED_TUNER_SEARCH_H
#define TUNED_TUNER_SEARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/tuner/evaluator.h"
#include "src/tuner/space.h"

/* A config measured before this search (a resumed tune's history). */
typedef struct tuned__search_prior {
    tuned__config config;
    bool ok;
    double us;     /* the median */
    double p80_us; /* orders equal medians when the tune picks its finalists */
} tuned__search_prior;

typedef struct tuned__search_opts {
    /* Defaults: tuned__search_opts_default. */
    uint64_t seed;     /* of the random draws (default 1) */
    size_t budget;     /* most new evaluations (default 200) */
    double time_s;     /* most wall-clock seconds (default 50) */
    size_t population; /* random configs in generation 0 (default 40) */
    size_t copies;     /* incumbents the pattern search moves from (default 4) */
    double min_gain;   /* relative improvement that keeps the search going (default 0.002) */
    bool exhaustive;   /* evaluate every valid config instead (budgets still apply) */
    /* Measured before: never evaluated again, and not counted in budget. */
    const tuned__search_prior *prior;
    size_t nprior;
    /* Extra starting points for generation 0 (e.g. neighbouring shapes'
     * winners), tried before the heuristic seeds; invalid ones are skipped. */
    const tuned__config *seeds;
    size_t nseeds;
} tuned__search_opts;

void tuned__search_opts_default(tuned__search_opts *o);

/* Evaluates n configs into out; nonzero only when evaluation as a whole
 * cannot go on (the GPU is lost). */
typedef int (*tuned__eval_batch_fn)(void *ctx, const tuned__config *cfgs, size_t n,
                                    tuned__eval_result *out, tuned__err *e);

typedef struct tuned__search_progress {
    int generation;
    size_t tried, budget;
    size_t failed;       /* variants that did not compile, were wrong, or did not launch */
    bool have_best;
    tuned__config best;
    double best_us;
    double elapsed_s;
} tuned__search_progress;

typedef void (*tuned__progress_fn)(void *ctx, const tuned__search_progress *p);

typedef struct tuned__search_result {
    bool found;          /* at least one variant was correct */
    tuned__config best;
    double best_us;
    size_t evaluations;  /* new evaluations by this search */
    size_t resumed;      /* measurements taken over from prior */
    size_t failed;
    int generations;
    double elapsed_s;
    char stop_reason[64];
    /* The first failure seen, to explain a search where nothing worked. */
    char first_failure[512];
} tuned__search_result;

/* Runs the search. On a fatal evaluation error it returns that error and
 * out still holds the best found before it. progress may be NULL. */
int tuned__search_run(const tuned__space *sp, const tuned__search_opts *o,
                      tuned__eval_batch_fn eval, void *eval_ctx, tuned__progress_fn progress,
                      void *progress_ctx, tuned__search_result *out, tuned__err *e);

#endif
