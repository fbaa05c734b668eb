/* key.h: the one place store keys are built and taken apart.
 *
 * A key is a tag byte naming the kind of record, then fixed-width fields,
 * the wide ones big-endian, so that memcmp() order (LMDB's default) equals
 * numeric order and all records of one shape sit next to each other:
 *
 *   best     'B' kernel(1) dtype(1) rows(8) cols(8) layout(1) gpu_fp(8)      = 28 bytes
 *   history  'H' kernel(1) dtype(1) rows(8) cols(8) layout(1) gpu_fp(8)
 *            config text (1..127 bytes, printable ASCII, no NUL)           = 29..155 bytes
 *   cubin    'C' hash(8)                                                    =  9 bytes
 *
 * The first 19 bytes of a best key (tag through cols) are the shape prefix
 * that tuned__store_find_shape() scans; the first 28 bytes of a history key
 * (a best key under tag 'H') the group that tuned__store_list_evals() scans.
 *
 * Keys also have a text form for people and the command line:
 *   KIND/fp16/4096x32000/dense/0123456789abcdef
 * (the kind's registry name, dtype, rows x cols, layout "dense" or "L<n>",
 * GPU fingerprint). A kind's key parameters (src/codegen/kind.h) ride in
 * the cols field above bit 32 (0 for kinds without: every key from before
 * them keeps its bytes); the text names them after the columns, as the
 * registry writes them (the non-default values, in the kind's order):
 *   KIND/fp32/16384x128:NAME=VALUE,NAME=VALUE/dense/0123456789abcdef */
#ifndef TUNED_CACHE_KEY_H
#define TUNED_CACHE_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "src/common/err.h"
#include "cache/store.h"
#include "src/codegen/config.h"

#define TUNED__KEY_TAG_BEST ((uint8_t)'B')
#define TUNED__KEY_TAG_HIST ((uint8_t)'H')
#define TUNED__KEY_TAG_CUBIN ((uint8_t)'C')

#define TUNED__KEY_LEN 28         /* a best key, and a history key's group prefix */
#define TUNED__KEY_SHAPE_LEN 19   /* tag, kernel, dtype, rows, cols */
#define TUNED__KEY_CONFIG_MAX 127 /* config text bytes in a history key */
#define TUNED__KEY_HIST_MAX (TUNED__KEY_LEN + TUNED__KEY_CONFIG_MAX)
#define TUNED__KEY_CUBIN_LEN 9
#define TUNED__KEY_TEXT 192       /* text form plus NUL */

/* The layout above, and the config texts it must hold, checked. */
_Static_assert(TUNED__KEY_SHAPE_LEN == 1 + 1 + 1 + 8 + 8,
               "shape prefix: tag, kernel, dtype, rows, cols");
_Static_assert(TUNED__KEY_LEN == TUNED__KEY_SHAPE_LEN + 1 + 8,
               "best key: the shape prefix, layout, gpu_fp");
_Static_assert(TUNED__KEY_CUBIN_LEN == 1 + 8, "cubin key: tag, hash");
_Static_assert(TUNED__KEY_CONFIG_MAX + 1 == sizeof(((tuned__store_eval *)0)->config),
               "a history entry's config holds a key's longest config text and its NUL");
_Static_assert(sizeof(((tuned__record *)0)->config) == sizeof(((tuned__store_eval *)0)->config),
               "a winner's config is a history entry's config");
_Static_assert(TUNED__CONFIG_TEXT <= TUNED__KEY_CONFIG_MAX + 1,
               "every config's canonical text fits a history key");

/* Writes the 28-byte key of k under tag into out. */
void tuned__key_encode(uint8_t out[TUNED__KEY_LEN], uint8_t tag, const tuned__store_key *k);

/* Writes the 19-byte shape prefix (a key without layout and gpu_fp). */
void tuned__key_encode_shape(uint8_t out[TUNED__KEY_SHAPE_LEN], uint8_t tag, uint8_t kernel,
                             uint8_t dtype, uint64_t rows, uint64_t cols);

/* Parses a 28-byte key that must carry tag. Returns 0, or TUNED_ESTORE for
 * a wrong length or tag (the message says which). */
int tuned__key_decode(const void *buf, size_t len, uint8_t tag, tuned__store_key *out,
                      tuned__err *e);

/* Whether config is a valid config text for a history key: 1..127 bytes of
 * printable ASCII (0x21..0x7e). */
int tuned__key_config_ok(const char *config);

/* Writes the history key of (k, config) into out and its length into
 * *len. TUNED_EINVAL for a config text that tuned__key_config_ok() refuses. */
int tuned__key_encode_hist(uint8_t out[TUNED__KEY_HIST_MAX], const tuned__store_key *k,
                           const char *config, size_t *len, tuned__err *e);

/* Parses a history key into k and config (at least TUNED__KEY_CONFIG_MAX + 1
 * bytes). TUNED_ESTORE for anything malformed. */
int tuned__key_decode_hist(const void *buf, size_t len, tuned__store_key *k, char *config,
                           tuned__err *e);

void tuned__key_encode_cubin(uint8_t out[TUNED__KEY_CUBIN_LEN], uint64_t hash);
int tuned__key_decode_cubin(const void *buf, size_t len, uint64_t *hash, tuned__err *e);

/* The text form of k into buf (TUNED__KEY_TEXT bytes suffice). */
void tuned__key_format(char *buf, size_t n, const tuned__store_key *k);

/* Parses the text form. TUNED_EINVAL naming the part that is wrong. */
int tuned__key_parse(const char *text, tuned__store_key *out, tuned__err *e);

/* Kind names and ids (tuned__kernel_name, tuned__kernel_parse) are the
 * registry's: src/codegen/kind.h. */

/* Big-endian 64-bit fields, for the store's binary values too. */
void tuned__put_be64(uint8_t *p, uint64_t v);
uint64_t tuned__get_be64(const uint8_t *p);

/* The key of the results of shape's kind for shape on the GPU with
 * fingerprint gpu_fp, dense layout. */
static inline tuned__store_key tuned__store_key_of(const tuned__shape *shape, uint64_t gpu_fp)
{
    tuned__store_key k = {.kernel = (uint8_t)tuned__shape_kernel(shape), .dtype = (uint8_t)shape->dtype,
                          .rows = shape->rows, .cols = tuned__wire_cols_of(shape), .gpu_fp = gpu_fp};
    return k;
}

/* Whether a record keyed k may stand in for shape s as a neighbour (its
 * key parameters equal s's: different parameters compile different
 * code), and the columns to measure the distance by. */
static inline bool tuned__key_params_match(const tuned__store_key *k, const tuned__shape *s)
{
    return tuned__wire_params(k->cols) == s->params;
}

/* The shape a key is for (its key parameters taken from its columns). */
static inline tuned__shape tuned__store_key_shape(const tuned__store_key *k)
{
    tuned__shape s = {.dtype = (tuned_dtype)k->dtype, .rows = k->rows, .kernel = k->kernel};
    tuned__shape_set_wire_cols(&s, k->cols);
    return s;
}

#endif
