/* space_chunk.c: the space of a kind evaluated in chunks (kind.h:
 * TUNED__EVALUATE_CHUNKED_LINEAR_CE): which chunk sizes a tune measures.
 *
 * A chunk's logits (chunk x cols in the dtype) must fit the key's memory
 * budget (its parameter "budget", in MiB). The rule a caller without a
 * record uses (bindings/python/tuned/linear_cross_entropy.py, _chunk_rows)
 * is the largest multiple of 64 rows that fits, at least 64, at most the
 * rows; the space is that rule's chunk and every power of two from 64
 * below it, so that a tune never stores a chunk slower than the rule's
 * (it measures it) and a budget bounds every chunk it tries. A dozen
 * configs at most: the search sees them all. */
#include "src/tuner/space.h"

#include "tuned.h"

/* The budget of a key that names none: the Python rule's 256 MiB. */
#define DEFAULT_BUDGET_MIB 256u
/* Chunks are whole multiples of this many rows (the rule's step, and the
 * smallest chunk tried): a GEMM of fewer rows wastes the tensor cores. */
#define CHUNK_STEP 64u

bool tuned__space_chunked(const tuned__space *sp)
{
    const tuned__kind_spec *k = tuned__shape_spec(&sp->shape);
    return k != NULL && k->evaluate == TUNED__EVALUATE_CHUNKED_LINEAR_CE;
}

uint32_t tuned__chunk_rule(const tuned__shape *s)
{
    const tuned__kind_spec *k = tuned__shape_spec(s);
    uint64_t budget = (uint64_t)(k != NULL ? tuned__params_value(k, s->params, "budget",
                                                                 DEFAULT_BUDGET_MIB)
                                           : DEFAULT_BUDGET_MIB)
                      << 20;
    uint64_t row_bytes = s->cols * tuned_dtype_size(s->dtype);
    uint64_t fit = row_bytes > 0 ? budget / row_bytes : 0;
    uint64_t chunk = fit / CHUNK_STEP * CHUNK_STEP;
    if (chunk < CHUNK_STEP)
        chunk = CHUNK_STEP;
    if (chunk > s->rows)
        chunk = s->rows;
    if (chunk > TUNED__MAX_CHUNK)
        chunk = TUNED__MAX_CHUNK / CHUNK_STEP * CHUNK_STEP;
    return (uint32_t)(chunk > 0 ? chunk : 1);
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
    unsigned v = c->chunk / CHUNK_STEP;
    if (c->chunk % CHUNK_STEP != 0 || (v & (v - 1)) != 0)
        return tuned__config_refuse(why, n, "the space's chunks are %u rows times a power of "
                                    "two, or the budget's own (%u)",
                                    CHUNK_STEP, (unsigned)rule);
    return true;
}

size_t tuned__space_chunk_list(const tuned__space *sp, tuned__config *out, size_t cap)
{
    uint32_t rule = tuned__chunk_rule(&sp->shape);
    size_t n = 0;
    for (uint32_t c = CHUNK_STEP; c < rule; c *= 2) {
        if (n < cap)
            out[n] = (tuned__config){.family = TUNED__FAMILY_CHUNK, .chunk = c};
        n++;
    }
    if (n < cap)
        out[n] = (tuned__config){.family = TUNED__FAMILY_CHUNK, .chunk = rule};
    return n + 1;
}
