/* effort.h: the effort presets (quick, default, full): how much a tune
 * measures. One table sets a tune's evaluation budget, first population,
 * wall-clock limit and finalist rounds, so that `tuned --effort`,
 * $TUNED_EFFORT, the embedding library's child tunes (which run the CLI)
 * and the daemon's jobs mean the same thing by a name. What each preset
 * costs and finds on the benchmark table is measured by tools/effort.sh. */
#ifndef TUNED_TUNER_EFFORT_H
#define TUNED_TUNER_EFFORT_H

#include <stddef.h>

#include "src/tuner/tune.h"

typedef enum tuned__effort {
    TUNED__EFFORT_QUICK = 0,
    TUNED__EFFORT_DEFAULT = 1,
    TUNED__EFFORT_FULL = 2,
} tuned__effort;

typedef struct tuned__effort_preset {
    const char *name;       /* "quick", "default", "full" */
    size_t budget;          /* most new evaluations */
    size_t population;      /* random configs in generation 0 */
    double time_s;          /* most wall-clock seconds of search */
    int finalist_rounds;    /* re-timing rounds of the finalists */
} tuned__effort_preset;

/* The preset of effort e (never NULL for a value of the enum). */
const tuned__effort_preset *tuned__effort_preset_of(tuned__effort e);

/* "quick", "default" or "full" into *out; TUNED_EINVAL otherwise. */
int tuned__effort_parse(const char *name, tuned__effort *out);

/* Sets r's budget, population, time and finalist rounds from preset e;
 * leaves everything else (seed, copies, min_gain, exhaustive) alone. */
void tuned__effort_apply(tuned__effort e, tuned__tune_request *r);

#endif
