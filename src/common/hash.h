/* hash.h: FNV-1a, the 64-bit hash used for fingerprints (GPU identity,
 * template text, generated source). Not cryptographic: it names things,
 * it does not defend against an adversary. */
#ifndef TUNED_COMMON_HASH_H
#define TUNED_COMMON_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TUNED__FNV_SEED 0xcbf29ce484222325ull

/* A fingerprint written as text: true when s holds exactly 16 hex digits
 * (either case) in its n bytes, the value then in *fp (left alone else).
 * Every reader of a fingerprint's text (keys, the protocol's "gpu", store
 * filters, records) takes it this way. */
static inline bool tuned__fp_parse(const char *s, size_t n, uint64_t *fp)
{
    if (n != 16)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                            : 16;
        if (d == 16)
            return false;
        v = v << 4 | d;
    }
    *fp = v;
    return true;
}

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
