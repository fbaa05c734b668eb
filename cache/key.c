/* key.c: encoding of store keys and of their text form (layout in key.h).
 *
 * Keys are byte strings compared with memcmp(), so every multi-byte field
 * is written big-endian; that keeps records of one shape contiguous and
 * makes a prefix scan find every GPU's record for that shape. Nothing else
 * in the store builds or reads key bytes. */
#include "cache/key.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/hash.h"
#include "tuned.h"

void tuned__put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
}

uint64_t tuned__get_be64(const uint8_t *p)
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
    tuned__put_be64(out + 3, rows);
    tuned__put_be64(out + 11, cols);
}

void tuned__key_encode(uint8_t out[TUNED__KEY_LEN], uint8_t tag, const tuned__store_key *k)
{
    tuned__key_encode_shape(out, tag, k->kernel, k->dtype, k->rows, k->cols);
    out[TUNED__KEY_SHAPE_LEN] = k->layout;
    tuned__put_be64(out + TUNED__KEY_SHAPE_LEN + 1, k->gpu_fp);
}

static void decode_fields(const uint8_t *p, tuned__store_key *out)
{
    out->kernel = p[1];
    out->dtype = p[2];
    out->rows = tuned__get_be64(p + 3);
    out->cols = tuned__get_be64(p + 11);
    out->layout = p[TUNED__KEY_SHAPE_LEN];
    out->gpu_fp = tuned__get_be64(p + TUNED__KEY_SHAPE_LEN + 1);
}

int tuned__key_decode(const void *buf, size_t len, uint8_t tag, tuned__store_key *out,
                      tuned__err *e)
{
    const uint8_t *p = buf;
    if (len != TUNED__KEY_LEN)
        return tuned__errf(e, TUNED_ESTORE, "key: %zu bytes, expected %d", len, TUNED__KEY_LEN);
    if (p[0] != tag)
        return tuned__errf(e, TUNED_ESTORE, "key: tag 0x%02x, expected 0x%02x", p[0], tag);
    decode_fields(p, out);
    return 0;
}

static int config_bytes_ok(const char *s, size_t n)
{
    if (n < 1 || n > TUNED__KEY_CONFIG_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return 0;
    return 1;
}

int tuned__key_config_ok(const char *config)
{
    return config_bytes_ok(config, strnlen(config, TUNED__KEY_CONFIG_MAX + 1));
}

int tuned__key_encode_hist(uint8_t out[TUNED__KEY_HIST_MAX], const tuned__store_key *k,
                           const char *config, size_t *len, tuned__err *e)
{
    if (!tuned__key_config_ok(config))
        return tuned__errf(e, TUNED_EINVAL,
                           "history: config text must be 1..%d printable characters, no spaces",
                           TUNED__KEY_CONFIG_MAX);
    size_t n = strlen(config);
    tuned__key_encode(out, TUNED__KEY_TAG_HIST, k);
    memcpy(out + TUNED__KEY_LEN, config, n);
    *len = TUNED__KEY_LEN + n;
    return 0;
}

int tuned__key_decode_hist(const void *buf, size_t len, tuned__store_key *k, char *config,
                           tuned__err *e)
{
    const uint8_t *p = buf;
    if (len <= TUNED__KEY_LEN || len > TUNED__KEY_HIST_MAX)
        return tuned__errf(e, TUNED_ESTORE, "history key: %zu bytes, expected %d..%d", len,
                           TUNED__KEY_LEN + 1, TUNED__KEY_HIST_MAX);
    if (p[0] != TUNED__KEY_TAG_HIST)
        return tuned__errf(e, TUNED_ESTORE, "history key: tag 0x%02x, expected 0x%02x", p[0],
                           TUNED__KEY_TAG_HIST);
    size_t n = len - TUNED__KEY_LEN;
    if (!config_bytes_ok((const char *)p + TUNED__KEY_LEN, n))
        return tuned__errf(e, TUNED_ESTORE, "history key: config text is not printable ASCII");
    decode_fields(p, k);
    memcpy(config, p + TUNED__KEY_LEN, n);
    config[n] = '\0';
    return 0;
}

void tuned__key_encode_cubin(uint8_t out[TUNED__KEY_CUBIN_LEN], uint64_t hash)
{
    out[0] = TUNED__KEY_TAG_CUBIN;
    tuned__put_be64(out + 1, hash);
}

int tuned__key_decode_cubin(const void *buf, size_t len, uint64_t *hash, tuned__err *e)
{
    const uint8_t *p = buf;
    if (len != TUNED__KEY_CUBIN_LEN || p[0] != TUNED__KEY_TAG_CUBIN)
        return tuned__errf(e, TUNED_ESTORE, "cubin key: %zu bytes with tag 0x%02x, expected %d "
                           "with 0x%02x", len, len > 0 ? p[0] : 0, TUNED__KEY_CUBIN_LEN,
                           TUNED__KEY_TAG_CUBIN);
    *hash = tuned__get_be64(p + 1);
    return 0;
}

void tuned__key_format(char *buf, size_t n, const tuned__store_key *k)
{
    const char *kernel = tuned__kernel_name(k->kernel);
    const char *dtype = tuned_dtype_name((tuned_dtype)k->dtype);
    char kbuf[8], dbuf[8], lbuf[8];
    if (kernel == NULL) {
        snprintf(kbuf, sizeof kbuf, "k%u", (unsigned)k->kernel);
        kernel = kbuf;
    }
    if (dtype == NULL) {
        snprintf(dbuf, sizeof dbuf, "d%u", (unsigned)k->dtype);
        dtype = dbuf;
    }
    if (k->layout == TUNED__LAYOUT_DENSE)
        snprintf(lbuf, sizeof lbuf, "dense");
    else
        snprintf(lbuf, sizeof lbuf, "L%u", (unsigned)k->layout);
    char params[128] = "";
    uint32_t word = tuned__wire_params(k->cols);
    if (word != 0) {
        const tuned__kind_spec *spec = tuned__kind(k->kernel);
        params[0] = ':';
        if (spec != NULL && spec->nparams > 0)
            tuned__params_format(spec, word, params + 1, sizeof params - 1);
        if (params[1] == '\0') /* the defaults, or a kind this build does not know */
            snprintf(params + 1, sizeof params - 1, "0x%08x", (unsigned)word);
    }
    snprintf(buf, n, "%s/%s/%" PRIu64 "x%" PRIu64 "%s/%s/%016" PRIx64, kernel, dtype, k->rows,
             tuned__wire_cols_cols(k->cols), params, lbuf, k->gpu_fp);
}

static int parse_dec(const char *s, const char *end, uint64_t max, uint64_t *out);

/* "COLS" or "COLS:PARAMS" of kind kernel into the travelling columns. */
static int parse_cols(const char *s, uint8_t kernel, uint64_t *out, tuned__err *e)
{
    const char *colon = strchr(s, ':');
    const char *end = colon != NULL ? colon : s + strlen(s);
    uint64_t cols;
    if (!parse_dec(s, end, colon != NULL ? TUNED__MAX_COLS : INT64_MAX, &cols))
        return tuned__errf(e, TUNED_EINVAL, "'%s' is not ROWSxCOLS", s);
    if (colon == NULL) {
        *out = cols;
        return 0;
    }
    uint32_t word = 0;
    const char *text = colon + 1;
    if (strncmp(text, "0x", 2) == 0 && strlen(text) == 10) {
        /* the word of a kind this build cannot name (tuned__key_format) */
        char *rest = NULL;
        unsigned long v = strtoul(text + 2, &rest, 16);
        if (*rest != '\0' || !isxdigit((unsigned char)text[2]))
            return tuned__errf(e, TUNED_EINVAL, "key parameters '%s': bad hex", text);
        word = (uint32_t)v;
    } else {
        const tuned__kind_spec *spec = tuned__kind(kernel);
        int rc = spec != NULL ? tuned__params_parse(spec, text, &word, e)
                              : tuned__errf(e, TUNED_EINVAL, "unknown kernel");
        if (rc != 0)
            return rc;
    }
    *out = tuned__wire_cols(cols, word);
    return 0;
}

/* Strict unsigned decimal of 1..19 digits into *out, ending at end. */
static int parse_dec(const char *s, const char *end, uint64_t max, uint64_t *out)
{
    size_t n = (size_t)(end - s);
    if (n < 1 || n > 19)
        return 0;
    uint64_t v = 0;
    for (const char *p = s; p < end; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v > max)
        return 0;
    *out = v;
    return 1;
}

int tuned__key_parse(const char *text, tuned__store_key *out, tuned__err *e)
{
    /* Five '/'-separated parts, each short. */
    char buf[TUNED__KEY_TEXT];
    const char *part[5];
    if (strlen(text) >= sizeof buf)
        return tuned__errf(e, TUNED_EINVAL, "key '%.40s...': too long", text);
    memcpy(buf, text, strlen(text) + 1);
    int np = 0;
    char *p = buf;
    part[np++] = p;
    for (; *p != '\0'; p++) {
        if (*p == '/') {
            if (np == 5)
                return tuned__errf(e, TUNED_EINVAL, "key '%s': more than 5 parts", text);
            *p = '\0';
            part[np++] = p + 1;
        }
    }
    if (np != 5)
        return tuned__errf(e, TUNED_EINVAL,
                           "key '%s': expected KERNEL/DTYPE/ROWSxCOLS/LAYOUT/FINGERPRINT, e.g. "
                           "softmax/fp16/4096x32000/dense/0123456789abcdef",
                           text);
    tuned__store_key k;
    memset(&k, 0, sizeof k);
    if (tuned__kernel_parse(part[0], &k.kernel) != 0)
        return tuned__errf(e, TUNED_EINVAL, "key '%s': unknown kernel '%s'", text, part[0]);
    tuned_dtype dt;
    if (tuned_dtype_parse(part[1], &dt) != 0)
        return tuned__errf(e, TUNED_EINVAL, "key '%s': unknown dtype '%s'", text, part[1]);
    k.dtype = (uint8_t)dt;
    const char *x = strchr(part[2], 'x');
    if (x == NULL || !parse_dec(part[2], x, INT64_MAX, &k.rows))
        return tuned__errf(e, TUNED_EINVAL, "key '%s': '%s' is not ROWSxCOLS", text, part[2]);
    if (parse_cols(x + 1, k.kernel, &k.cols, e) != 0)
        return tuned__err_prefix(e, TUNED_EINVAL, "key '%s'", text);
    uint64_t layout;
    if (strcmp(part[3], "dense") == 0)
        k.layout = TUNED__LAYOUT_DENSE;
    else if (part[3][0] == 'L' && parse_dec(part[3] + 1, part[3] + strlen(part[3]), 255, &layout))
        k.layout = (uint8_t)layout;
    else
        return tuned__errf(e, TUNED_EINVAL, "key '%s': layout '%s' is not 'dense' or L<0..255>",
                           text, part[3]);
    if (!tuned__fp_parse(part[4], strlen(part[4]), &k.gpu_fp))
        return tuned__errf(e, TUNED_EINVAL, "key '%s': fingerprint '%s' is not 16 hex digits",
                           text, part[4]);
    *out = k;
    return 0;
}
