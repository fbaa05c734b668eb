/* hash.h: FNV-1a, the 64-bit hash used for fingerprints (GPU identity,
 * template text, generated source). Not cryptographic: it names things,
 * it does not defend against an adversary. */
#ifndef TUNED_COMMON_HASH_H
#define TUNED_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

#define TUNED__FNV_SEED 0xcbf29ce484222325ull

static inline uint64_t tuned__fnv1a64(const void *data, size_t n, uint64_t h)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#endif
