/* key.h: the one place store keys are built and taken apart.
 *
 * A key is a tag byte naming the kind of record, then fixed-width fields,
 * the wide ones big-endian, so that memcmp() order (LMDB's default) equals
 * numeric order and all records of one shape sit next to each other:
 *
 *   tag(1) kernel(1) dtype(1) rows(8, BE) cols(8, BE) gpu_fp(8, BE) = 27 bytes
 *
 * The first 19 bytes (tag through cols) are the shape prefix that
 * tuned__store_find_shape() scans with MDB_SET_RANGE. */
#ifndef TUNED_CACHE_KEY_H
#define TUNED_CACHE_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "../src/common/err.h"
#include "store.h"

#define TUNED__KEY_TAG_BEST ((uint8_t)'B')

#define TUNED__KEY_LEN 27         /* a full key */
#define TUNED__KEY_SHAPE_LEN 19   /* tag, kernel, dtype, rows, cols */

/* Writes the 27-byte key of k under tag into out. */
void tuned__key_encode(uint8_t out[TUNED__KEY_LEN], uint8_t tag, const tuned__store_key *k);

/* Writes the 19-byte shape prefix (a key without gpu_fp) into out. */
void tuned__key_encode_shape(uint8_t out[TUNED__KEY_SHAPE_LEN], uint8_t tag, uint8_t kernel,
                             uint8_t dtype, uint64_t rows, uint64_t cols);

/* Parses a key of len bytes that must carry tag. Returns 0, or
 * TUNED_ESTORE for a wrong length or tag (the message says which). */
int tuned__key_decode(const void *buf, size_t len, uint8_t tag, tuned__store_key *out,
                      tuned__err *e);

#endif
