/* rng.h: a small seeded generator (splitmix64) so that a search with the
 * same --seed makes the same choices on every machine. */
#ifndef TUNED_COMMON_RNG_H
#define TUNED_COMMON_RNG_H

#include <stdint.h>

typedef struct tuned__rng {
    uint64_t state;
} tuned__rng;

static inline uint64_t tuned__rng_next(tuned__rng *r)
{
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n), n > 0 (the modulo bias is negligible for small n). */
static inline uint64_t tuned__rng_below(tuned__rng *r, uint64_t n)
{
    return tuned__rng_next(r) % n;
}

#endif
