/* space_chunk.c: the space of a kind tuned by its chunk of rows (the
 * registry's tuned__kind_chunked): which chunk configs a tune measures.
 *
 * The registry's rule (tuned__kind_chunk_rule) gives the chunk a caller
 * without a record takes: the largest that fits the key's memory budget,
 * in whole rows. The space is that chunk and every power of two times the
 * rule's step below it, in whole rows; and above it, up to the key's rows,
 * each such chunk (and the rows themselves) with its logits made in the
 * fewest vocabulary blocks that keep a block within the budget
 * ("chunk2048.v17": a chunk's d weight GEMM then sums over more rows, for
 * a second logits GEMM of all blocks but one; more blocks than the fewest
 * would only add GEMMs, so they are not in the space). So a tune never
 * stores a chunk slower than the rule's (it measures it), and the budget
 * bounds every config it tries. Two dozen configs at most: the search
 * sees them all. */
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

bool tuned__chunk_at(const tuned__shape *s, uint32_t chunk, tuned__config *out)
{
    uint32_t rule = tuned__chunk_rule(s);
    uint32_t rows = chunk < s->rows ? chunk : (uint32_t)s->rows;
    int splits = chunk <= rule ? 0
                               : tuned__kind_chunk_splits(tuned__shape_spec(s), rows, s->cols,
                                                          s->params, tuned_dtype_size(s->dtype));
    if (chunk < 1 || splits < 0)
        return false;
    *out = (tuned__config){.family = TUNED__FAMILY_CHUNK, .chunk = chunk, .splits = (uint8_t)splits};
    return true;
}

/* Whether chunk is the rule's step times a power of two. */
static bool stepped(uint32_t chunk)
{
    unsigned v = chunk / TUNED__CHUNK_STEP;
    return chunk % TUNED__CHUNK_STEP == 0 && v > 0 && (v & (v - 1)) == 0;
}

bool tuned__space_chunk_policy(const tuned__space *sp, const tuned__config *c, char *why,
                               size_t n)
{
    const tuned__shape *s = &sp->shape;
    uint32_t rule = tuned__chunk_rule(s);
    if (c->splits == 0) {
        if (c->chunk == rule)
            return true;
        if (c->chunk > rule)
            return tuned__config_refuse(why, n, "a chunk of %u rows exceeds the budget's %u in "
                                        "whole rows (make its logits in vocabulary blocks: "
                                        "chunk%u.vS)", (unsigned)c->chunk, (unsigned)rule,
                                        (unsigned)c->chunk);
        if (!stepped(c->chunk))
            return tuned__config_refuse(why, n, "the space's chunks are %u rows times a power of "
                                        "two, or the budget's own (%u)",
                                        TUNED__CHUNK_STEP, (unsigned)rule);
        return true;
    }
    if (c->chunk <= rule)
        return tuned__config_refuse(why, n, "a chunk of %u rows fits the budget in whole rows "
                                    "(chunk%u)", (unsigned)c->chunk, (unsigned)c->chunk);
    if (!stepped(c->chunk) && c->chunk != s->rows)
        return tuned__config_refuse(why, n, "the space's chunks in blocks are %u rows times a "
                                    "power of two, or the key's %llu rows",
                                    TUNED__CHUNK_STEP, (unsigned long long)s->rows);
    tuned__config fewest;
    if (!tuned__chunk_at(s, c->chunk, &fewest) || c->splits < fewest.splits)
        return tuned__config_refuse(why, n, "a chunk of %u rows in %u blocks of %llu columns "
                                    "exceeds the budget", (unsigned)c->chunk, (unsigned)c->splits,
                                    (unsigned long long)tuned__kind_block_cols(s->cols,
                                                                               c->splits));
    /* more blocks than the fewest only make more logits GEMMs (and
     * several counts name one width): one config a chunk */
    if (c->splits > fewest.splits)
        return tuned__config_refuse(why, n, "a chunk of %u rows fits the budget in %u blocks "
                                    "(chunk%u.v%u)", (unsigned)c->chunk,
                                    (unsigned)fewest.splits, (unsigned)c->chunk,
                                    (unsigned)fewest.splits);
    return true;
}

/* Appends the config of chunk rows in vocabulary blocks, where the
 * budget's whole rows do not hold it and some blocks do. */
static void add_in_blocks(const tuned__space *sp, uint32_t chunk, uint32_t rule,
                          tuned__config *out, size_t cap, size_t *n)
{
    tuned__config at;
    if (chunk <= rule || !tuned__chunk_at(&sp->shape, chunk, &at) ||
        !tuned__space_chunk_policy(sp, &at, NULL, 0))
        return;
    if (*n < cap)
        out[*n] = at;
    (*n)++;
}

size_t tuned__space_chunk_list(const tuned__space *sp, tuned__config *out, size_t cap)
{
    const tuned__shape *s = &sp->shape;
    uint32_t rule = tuned__chunk_rule(s);
    size_t n = 0;
    for (uint32_t c = TUNED__CHUNK_STEP; c < rule; c *= 2) {
        if (n < cap)
            out[n] = (tuned__config){.family = TUNED__FAMILY_CHUNK, .chunk = c};
        n++;
    }
    if (n < cap)
        out[n] = (tuned__config){.family = TUNED__FAMILY_CHUNK, .chunk = rule};
    n++;
    /* above the rule, in vocabulary blocks: stepped chunks, then the rows */
    uint32_t last = s->rows < TUNED__MAX_CHUNK ? (uint32_t)s->rows : TUNED__MAX_CHUNK;
    for (uint64_t c = TUNED__CHUNK_STEP; c < last; c *= 2)
        add_in_blocks(sp, (uint32_t)c, rule, out, cap, &n);
    add_in_blocks(sp, last, rule, out, cap, &n);
    return n;
}
