/* key.c: encoding of store keys (layout in key.h).
 *
 * Keys are byte strings compared with memcmp(), so every multi-byte field
 * is written big-endian; that keeps records of one shape contiguous and
 * makes a prefix scan find every GPU's record for that shape. Nothing else
 * in the store builds or reads key bytes. */
#include "key.h"

#include "tuned.h"

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

void tuned__key_encode_shape(uint8_t out[TUNED__KEY_SHAPE_LEN], uint8_t tag, uint8_t kernel,
                             uint8_t dtype, uint64_t rows, uint64_t cols)
{
    out[0] = tag;
    out[1] = kernel;
    out[2] = dtype;
    put_be64(out + 3, rows);
    put_be64(out + 11, cols);
}

void tuned__key_encode(uint8_t out[TUNED__KEY_LEN], uint8_t tag, const tuned__store_key *k)
{
    tuned__key_encode_shape(out, tag, k->kernel, k->dtype, k->rows, k->cols);
    put_be64(out + TUNED__KEY_SHAPE_LEN, k->gpu_fp);
}

int tuned__key_decode(const void *buf, size_t len, uint8_t tag, tuned__store_key *out,
                      tuned__err *e)
{
    const uint8_t *p = buf;
    if (len != TUNED__KEY_LEN)
        return tuned__errf(e, TUNED_ESTORE, "key: %zu bytes, expected %d", len, TUNED__KEY_LEN);
    if (p[0] != tag)
        return tuned__errf(e, TUNED_ESTORE, "key: tag 0x%02x, expected 0x%02x", p[0], tag);
    out->kernel = p[1];
    out->dtype = p[2];
    out->rows = get_be64(p + 3);
    out->cols = get_be64(p + 11);
    out->gpu_fp = get_be64(p + TUNED__KEY_SHAPE_LEN);
    return 0;
}
