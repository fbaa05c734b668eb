/* effort.c: the effort presets (effort.h). The default row is the search's
 * own defaults (tuned__search_opts_default, TUNED__FINALIST_ROUNDS_DEFAULT),
 * asserted at the first use, so a change of one is a change of both. */
#include <assert.h>
#include <string.h>

#include "src/tuner/effort.h"

static const tuned__effort_preset presets[] = {
    /* A first answer: about a third of the default's measurements. */
    [TUNED__EFFORT_QUICK] = {"quick", 60, 16, 15.0, 2},
    [TUNED__EFFORT_DEFAULT] = {"default", 200, 40, 50.0, TUNED__FINALIST_ROUNDS_DEFAULT},
    /* Overnight tables: a wider first generation, more patience. */
    [TUNED__EFFORT_FULL] = {"full", 1000, 120, 300.0, 5},
};
_Static_assert(sizeof presets / sizeof presets[0] == TUNED__EFFORT_FULL + 1,
               "one preset per tuned__effort");
_Static_assert(5 <= TUNED__FINALIST_ROUNDS_MAX, "the full preset's rounds exceed the maximum");

const tuned__effort_preset *tuned__effort_preset_of(tuned__effort e)
{
    if ((int)e < 0 || (size_t)e >= sizeof presets / sizeof presets[0])
        e = TUNED__EFFORT_DEFAULT;
#ifndef NDEBUG
    tuned__search_opts def;
    tuned__search_opts_default(&def);
    assert(def.budget == presets[TUNED__EFFORT_DEFAULT].budget &&
           def.population == presets[TUNED__EFFORT_DEFAULT].population &&
           def.time_s == presets[TUNED__EFFORT_DEFAULT].time_s);
#endif
    return &presets[e];
}

int tuned__effort_parse(const char *name, tuned__effort *out)
{
    for (size_t i = 0; name != NULL && i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(name, presets[i].name) == 0) {
            *out = (tuned__effort)i;
            return 0;
        }
    return TUNED_EINVAL;
}

void tuned__effort_apply(tuned__effort e, tuned__tune_request *r)
{
    const tuned__effort_preset *p = tuned__effort_preset_of(e);
    r->search.budget = p->budget;
    r->search.population = p->population;
    r->search.time_s = p->time_s;
    r->finalist_rounds = p->finalist_rounds;
}
