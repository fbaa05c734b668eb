/* space.h: the variant space for one shape on one architecture.
 *
 * The space holds every parameter's allowed values and the constraints
 * between them (threads <= 1024, registers per thread, vector width vs
 * dtype, cache hints vs architecture), so that an invalid config is never
 * generated, compiled or timed. The valid configs are enumerated once at
 * init (hundreds to a few thousand), which makes random draws and validity
 * checks cheap and exact. */
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
    tuned__config *valid;  /* every valid config, in enumeration order */
    size_t count;
} tuned__space;

/* Largest rows and columns tuned accepts (a CUDA grid holds 2^31-1 blocks;
 * kernels index columns with int). */
#define TUNED__MAX_ROWS 2147483647ull
#define TUNED__MAX_COLS 2147483392ull

/* Builds the space for a GPU of compute capability arch with sms
 * multiprocessors (grid splits must fit on them at once; 0 leaves them
 * out); TUNED_ENOSPACE (with the reason) if no config is valid, e.g. rows
 * too long to hold in registers. */
int tuned__space_init(tuned__space *sp, const tuned__shape *shape, int arch, int sms,
                      tuned__err *e);
void tuned__space_free(tuned__space *sp);

/* Whether c is valid; when not, why (if why is not NULL). */
bool tuned__space_valid(const tuned__space *sp, const tuned__config *c, char *why, size_t n);

/* The valid configs one parameter one step from c (and the step that
 * doubles or halves warps and rows together, keeping threads per row);
 * at most cap of them into out, their number returned. */
size_t tuned__space_neighbors(const tuned__space *sp, const tuned__config *c, tuned__config *out,
                              size_t cap);

/* A uniformly random valid config. */
void tuned__space_random(const tuned__space *sp, tuned__rng *rng, tuned__config *out);

/* Heuristic starting points (widest vectors, a few row-group sizes). */
size_t tuned__space_seeds(const tuned__space *sp, tuned__config *out, size_t cap);

#endif
