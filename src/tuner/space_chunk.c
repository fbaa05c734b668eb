/* space_chunk.c: the space of a kind tuned by its chunk of rows (the
 * registry's tuned__kind_chunked): which chunk sizes a tune measures.
 *
 * The registry's rule (tuned__kind_chunk_rule) gives the chunk a caller
 * without a record takes: the largest that fits the key's memory budget.
 * The space is that chunk and every power of two times the rule's step
 * below it, so that a tune never stores a chunk slower than the rule's (it
 * measures it) and a budget bounds every chunk it tries. A dozen configs
 * at most: the search sees them all. */
#include "src/tuner/space.h"

#include "tuned.h"

bool tuned__space_chunked(const tuned__space *sp)
{
    return tuned__kind_chunked(tuned__shape_spec(&sp->shape));
}

uint32_t tuned__chunk_rule(const tuned__shape *s)
{
    return tuned__kind_chunk_rule(tuned__shape_spec(s), s->rows, s->cols, s->params,
                                  tuned_dtype_size(s->dtype));
}

bool tuned__space_chunk_policy(const tuned__space *sp, const tuned__config *c, char *why,
                               size_t n)
{
    uint32_t rule = tuned__chunk_rule(&sp->shape);
    if (c->chunk == rule)
        return true;
    if (c->chunk > rule)
        return tuned__config_refuse(why, n, "a chunk of %u rows exceeds the budget's %u",
                                    (unsigned)c->chunk, (unsigned)rule);
    unsigned v = c->chunk / TUNED__CHUNK_STEP;
    if (c->chunk % TUNED__CHUNK_STEP != 0 || (v & (v - 1)) != 0)
        return tuned__config_refuse(why, n, "the space's chunks are %u rows times a power of "
                                    "two, or the budget's own (%u)",
                                    TUNED__CHUNK_STEP, (unsigned)rule);
    return true;
}

size_t tuned__space_chunk_list(const tuned__space *sp, tuned__config *out, size_t cap)
{
    uint32_t rule = tuned__chunk_rule(&sp->shape);
    size_t n = 0;
    for (uint32_t c = TUNED__CHUNK_STEP; c < rule; c *= 2) {
        if (n < cap)
            out[n] = (tuned__config){.family = TUNED__FAMILY_CHUNK, .chunk = c};
        n++;
    }
    if (n < cap)
        out[n] = (tuned__config){.family = TUNED__FAMILY_CHUNK, .chunk = rule};
    return n + 1;
}
