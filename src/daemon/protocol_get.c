/* protocol_get.c: the scanner for `get` request lines (protocol_get.h).
 *
 * It reads one JSON object left to right, with no tree and no allocation:
 * each key is matched against the fields `get` takes, each value is read
 * in the one form the scanner knows for that field, and the first thing
 * outside that subset declines the line. The subset, chosen to be exactly
 * as strict as the jansson path on what it accepts:
 *   - whitespace: JSON's four characters, anywhere between tokens;
 *   - strings (keys and values): printable ASCII without `"` or `\`, so
 *     there is no escape, no NUL and no UTF-8 to decode or validate;
 *   - integers: JSON's form without a fraction or an exponent and with
 *     few enough digits that they cannot overflow; a sign only for `id`
 *     (never `-0`, which jansson reads as 0 and echoes as `0`);
 *   - `true` and `false`;
 *   - each field at most once (jansson rejects duplicate keys), `op` equal
 *     to "get", `rows` and `cols` present, every value in its range, the
 *     shape under the 1 TiB cap (counting the tensors its kind moves).
 * Every check that fails declines: the jansson path then gives the error
 * reply (or, for a line merely outside the subset, the same answer). */
#include "src/daemon/protocol_get.h"

#include <stdint.h>
#include <string.h>

#include "tuned.h"

typedef struct scan {
    const char *p, *end;
} scan;

/* The fields a `get` takes, one bit each to catch repeats. */
enum {
    F_ID = 1u << 0,
    F_OP = 1u << 1,
    F_KERNEL = 1u << 2,
    F_DTYPE = 1u << 3,
    F_ROWS = 1u << 4,
    F_COLS = 1u << 5,
    F_GPU = 1u << 6,
    F_TUNE_IF_MISSING = 1u << 7,
};

/* Longest kernel or dtype name looked up (a longer one declines the line:
 * the jansson path answers it). */
#define NAME_MAX_LEN 31
/* Digits read of an unsigned integer: 10 reach past 2^31, 18 stay within
 * int64, so neither can overflow what it is read into. */
#define U31_DIGITS 10
#define ID_DIGITS 18

static void skip_ws(scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static bool take(scan *s, char c)
{
    skip_ws(s);
    if (s->p == s->end || *s->p != c)
        return false;
    s->p++;
    return true;
}

/* A string of printable ASCII other than `"` and `\`: its bytes (between
 * the quotes) in *text, *n. */
static bool plain_string(scan *s, const char **text, size_t *n)
{
    if (!take(s, '"'))
        return false;
    const char *start = s->p;
    for (; s->p < s->end; s->p++) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            *text = start;
            *n = (size_t)(s->p - start);
            s->p++;
            return true;
        }
        if (c < 0x20 || c > 0x7e || c == '\\')
            return false;
    }
    return false;
}

/* An unsigned JSON integer of at most max_digits digits, no sign, right
 * at s->p (no whitespace: after a sign there may be none). */
static bool plain_uint(scan *s, int max_digits, uint64_t *out)
{
    const char *start = s->p;
    uint64_t v = 0;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
        if (s->p - start == max_digits)
            return false;
        v = v * 10 + (uint64_t)(*s->p - '0');
        s->p++;
    }
    /* No digits, or a leading zero before more digits (not JSON). */
    if (s->p == start || (*start == '0' && s->p - start > 1))
        return false;
    *out = v;
    return true;
}

/* A name looked up by a function that wants it NUL-ended. */
static bool plain_name(scan *s, char out[NAME_MAX_LEN + 1])
{
    const char *t;
    size_t n;
    if (!plain_string(s, &t, &n) || n > NAME_MAX_LEN)
        return false;
    memcpy(out, t, n);
    out[n] = '\0';
    return true;
}

/* "id": an integer (echoed as its digits, which are already the form
 * "%lld" prints: JSON has no leading zeros or plus sign) or a string of
 * at most TUNED__PROTO_ID_MAX bytes (echoed in quotes: it needs no escape). */
static bool read_id(scan *s, tuned__request *r)
{
    if (s->p < s->end && *s->p == '"') {
        const char *t;
        size_t n;
        if (!plain_string(s, &t, &n) || n > TUNED__PROTO_ID_MAX)
            return false;
        r->id[0] = '"';
        memcpy(r->id + 1, t, n);
        r->id[n + 1] = '"';
        r->id[n + 2] = '\0';
        return true;
    }
    const char *start = s->p;
    bool negative = s->p < s->end && *s->p == '-';
    s->p += negative;
    uint64_t v;
    if (!plain_uint(s, ID_DIGITS, &v) || (negative && v == 0))
        return false;
    size_t n = (size_t)(s->p - start);
    memcpy(r->id, start, n);
    r->id[n] = '\0';
    return true;
}

static bool read_bool(scan *s, bool *out)
{
    size_t left = (size_t)(s->end - s->p);
    if (left >= 4 && memcmp(s->p, "true", 4) == 0) {
        s->p += 4;
        *out = true;
        return true;
    }
    if (left >= 5 && memcmp(s->p, "false", 5) == 0) {
        s->p += 5;
        *out = false;
        return true;
    }
    return false;
}

/* "gpu": an ordinal 0..1023, or a string naming a fingerprint (16 hex
 * digits) or a model. */
static bool read_gpu(scan *s, tuned__gpu_sel *g)
{
    if (s->p < s->end && *s->p != '"') {
        uint64_t v;
        if (!plain_uint(s, U31_DIGITS, &v) || v > 1023)
            return false;
        g->kind = TUNED__GPU_ORDINAL;
        g->ordinal = (int)v;
        return true;
    }
    const char *t;
    size_t n;
    if (!plain_string(s, &t, &n) || n == 0 || n > TUNED__PROTO_GPU_MAX)
        return false;
    tuned__gpu_sel_from_text(t, n, g);
    return true;
}

/* The field named by key (n bytes), or 0 for one `get` does not take. */
static unsigned field_of(const char *key, size_t n)
{
    static const struct {
        const char *name;
        size_t len;
        unsigned bit;
    } names[] = {
        {"op", 2, F_OP},         {"rows", 4, F_ROWS},     {"cols", 4, F_COLS},
        {"dtype", 5, F_DTYPE},   {"gpu", 3, F_GPU},       {"id", 2, F_ID},
        {"kernel", 6, F_KERNEL}, {"tune_if_missing", 15, F_TUNE_IF_MISSING},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].len == n && memcmp(names[i].name, key, n) == 0)
            return names[i].bit;
    return 0;
}

/* Reads the value of field f into r. */
static bool read_value(scan *s, unsigned f, tuned__request *r)
{
    char name[NAME_MAX_LEN + 1];
    const char *t;
    size_t n;
    skip_ws(s);
    switch (f) {
    case F_OP:
        r->op = TUNED__OP_GET;
        return plain_string(s, &t, &n) && n == 3 && memcmp(t, "get", 3) == 0;
    case F_ID:
        return read_id(s, r);
    case F_KERNEL:
        if (!plain_name(s, name) || tuned__kernel_parse(name, &r->kernel) != 0)
            return false;
        r->shape.kernel = r->kernel;
        r->shape.params = tuned__params_default(tuned__kind(r->kernel));
        r->have_kernel = true;
        return true;
    case F_DTYPE:
        if (!plain_name(s, name) || tuned_dtype_parse(name, &r->shape.dtype) != 0)
            return false;
        r->have_dtype = true;
        return true;
    case F_ROWS:
        r->have_rows = true;
        return plain_uint(s, U31_DIGITS, &r->shape.rows) && r->shape.rows >= 1 &&
               r->shape.rows <= TUNED__MAX_ROWS;
    case F_COLS:
        r->have_cols = true;
        return plain_uint(s, U31_DIGITS, &r->shape.cols) && r->shape.cols >= 1 &&
               r->shape.cols <= TUNED__MAX_COLS;
    case F_GPU:
        return read_gpu(s, &r->gpu);
    case F_TUNE_IF_MISSING:
        return read_bool(s, &r->tune_if_missing);
    default:
        return false;
    }
}

bool tuned__proto_parse_get_fast(const char *line, size_t len, tuned__request *req)
{
    scan s = {line, line + len};
    unsigned seen = 0;
    tuned__request_init(req);
    if (!take(&s, '{'))
        return false;
    do {
        const char *key;
        size_t n;
        if (!plain_string(&s, &key, &n) || !take(&s, ':'))
            return false;
        unsigned f = field_of(key, n);
        if (f == 0 || (seen & f) != 0 || !read_value(&s, f, req))
            return false;
        seen |= f;
    } while (take(&s, ','));
    if (!take(&s, '}'))
        return false;
    skip_ws(&s);
    if (s.p != s.end)
        return false;
    const unsigned needed = F_OP | F_ROWS | F_COLS;
    if ((seen & needed) != needed)
        return false;
    return !tuned__shape_over_cap(&req->shape) &&
           tuned__params_check(tuned__kind(req->kernel), req->shape.cols, req->shape.params, NULL,
                               0);
}
