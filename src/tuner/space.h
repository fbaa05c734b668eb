/* space.h: the variant space for one shape on one architecture.
 *
 * A config of the space is one tuned__config_check accepts for the shape
 * and GPU (so that an invalid config is never generated, compiled or
 * timed) and that the search's policy keeps (space.c: no ld=el, no
 * variant that idles half its threads, ...). tuned__space_init enumerates
 * them once (hundreds to ten thousand), which makes random draws exact;
 * tuned__space_rules skips that, for callers that only ask whether a
 * config belongs or which one to start from. */
#ifndef TUNED_TUNER_SPACE_H
#define TUNED_TUNER_SPACE_H

#include <stdbool.h>
#include <stddef.h>

#include "src/codegen/config.h"
#include "src/common/rng.h"

typedef struct tuned__space {
    tuned__shape shape;
    int arch;              /* compute capability as 10*major+minor, e.g. 90 */
    int sms;               /* multiprocessors; 0: unknown, and no row split over the grid */
    tuned__config *valid;  /* every valid config, in enumeration order (malloc'd);
                              NULL in a space of rules only */
    size_t count;
} tuned__space;

/* Builds the space for a GPU of compute capability arch with sms
 * multiprocessors (grid splits must fit on them at once; 0 leaves them
 * out), and enumerates it; TUNED_ENOSPACE (with the reason) if no config
 * is valid, e.g. rows too long to hold in registers. */
int tuned__space_init(tuned__space *sp, const tuned__shape *shape, int arch, int sms,
                      tuned__err *e);

/* The same space without its enumeration: no allocation, count 0.
 * tuned__space_valid, _neighbors, _seeds and _default answer as for the
 * enumerated space; _random needs tuned__space_init. TUNED_EINVAL for a
 * shape out of range or no compute capability. */
int tuned__space_rules(tuned__space *sp, const tuned__shape *shape, int arch, int sms,
                       tuned__err *e);

/* Frees the enumeration (a space of rules only has none). */
void tuned__space_free(tuned__space *sp);

/* The config a shape gets before any tune: the first heuristic seed, else
 * the first valid config in enumeration order; TUNED_ENOSPACE (as
 * tuned__space_init) when none is valid. */
int tuned__space_default(const tuned__space *sp, tuned__config *out, tuned__err *e);

/* Whether c is valid; when not, why (if why is not NULL). */
bool tuned__space_valid(const tuned__space *sp, const tuned__config *c, char *why, size_t n);

/* The valid configs one parameter one step from c (and the step that
 * doubles or halves warps and rows together, keeping threads per row);
 * at most cap of them into out, their number returned. */
size_t tuned__space_neighbors(const tuned__space *sp, const tuned__config *c, tuned__config *out,
                              size_t cap);

/* A uniformly random valid config of an enumerated space. */
void tuned__space_random(const tuned__space *sp, tuned__rng *rng, tuned__config *out);

/* Heuristic starting points (widest vectors, a few row-group sizes). */
size_t tuned__space_seeds(const tuned__space *sp, tuned__config *out, size_t cap);

/* ---- kinds evaluated in chunks (space_chunk.c) ---- */

/* Whether sp's kind is tuned by its chunk (family chunk) rather than a
 * kernel config. */
bool tuned__space_chunked(const tuned__space *sp);

/* The chunk a caller without a record takes for s (the registry's
 * tuned__kind_chunk_rule on s's key). */
uint32_t tuned__chunk_rule(const tuned__shape *s);

/* The config of chunk rows at s's key: whole rows up to the rule's chunk,
 * above it the fewest vocabulary blocks within the budget; false where
 * none fits. */
bool tuned__chunk_at(const tuned__shape *s, uint32_t chunk, tuned__config *out);

/* The space's policy on a chunk config (tuned__config_check passed). */
bool tuned__space_chunk_policy(const tuned__space *sp, const tuned__config *c, char *why,
                               size_t n);

/* The space's chunks: in whole rows smallest first, the rule's last,
 * then in vocabulary blocks by rows: at most cap into
 * out, their number returned (always at least 1). */
size_t tuned__space_chunk_list(const tuned__space *sp, tuned__config *out, size_t cap);

#endif
