/* record.c: the JSON form of a stored winner (see record.h).
 *
 * Writing checks that every field can be represented faithfully (strings
 * terminated and UTF-8, numbers finite); reading checks every field's type
 * and range, so a value damaged on disk or written by a foreign tool turns
 * into an error naming the field rather than a half-filled struct. Unknown
 * fields are ignored: a same-version writer may add some. */
#include "record.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuned.h"

/* RFC 3629 UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF
 * (what jansson accepts, checked here so the error can name the field). */
static int utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t more;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            more = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            more = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            more = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (n - i - 1 < more)
            return 0;
        for (size_t k = 1; k <= more; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((more == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff)))
            || (more == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        i += more + 1;
    }
    return 1;
}

/* ---- writing ---- */

static int set_new(json_t *obj, const char *field, json_t *v, tuned__err *e)
{
    if (v == NULL || json_object_set_new(obj, field, v) != 0)
        return tuned__errf(e, TUNED_ENOMEM, "record: field \"%s\": out of memory", field);
    return 0;
}

static int set_str(json_t *obj, const char *field, const char *s, size_t size, tuned__err *e)
{
    size_t n = strnlen(s, size);
    if (n == size)
        return tuned__errf(e, TUNED_EINVAL,
                           "record: field \"%s\": not NUL-terminated within %zu bytes",
                           field, size);
    if (!utf8_valid((const unsigned char *)s, n))
        return tuned__errf(e, TUNED_EINVAL, "record: field \"%s\": not valid UTF-8", field);
    return set_new(obj, field, json_stringn(s, n), e);
}

static int set_num(json_t *obj, const char *field, double v, tuned__err *e)
{
    if (!isfinite(v) || v < 0)
        return tuned__errf(e, TUNED_EINVAL, "record: field \"%s\": %g is not a finite number >= 0",
                           field, v);
    return set_new(obj, field, json_real(v), e);
}

static int set_int(json_t *obj, const char *field, uint64_t v, tuned__err *e)
{
    if (v > (uint64_t)INT64_MAX)
        return tuned__errf(e, TUNED_EINVAL, "record: field \"%s\": %" PRIu64 " exceeds %" PRId64,
                           field, v, INT64_MAX);
    return set_new(obj, field, json_integer((json_int_t)v), e);
}

int tuned__record_to_json(const tuned__record *r, json_t **out, tuned__err *e)
{
    json_t *o = json_object();
    if (o == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "record: out of memory");

    char fp[17];
    snprintf(fp, sizeof fp, "%016" PRIx64, r->key.gpu_fp);

    int rc;
    if ((rc = set_int(o, "v", TUNED__RECORD_VERSION, e)) != 0
        || (rc = set_int(o, "kernel", r->key.kernel, e)) != 0
        || (rc = set_int(o, "dtype", r->key.dtype, e)) != 0
        || (rc = set_int(o, "rows", r->key.rows, e)) != 0
        || (rc = set_int(o, "cols", r->key.cols, e)) != 0
        || (rc = set_str(o, "gpu_fp", fp, sizeof fp, e)) != 0
        || (rc = set_str(o, "config", r->config, sizeof r->config, e)) != 0
        || (rc = set_str(o, "gpu", r->gpu, sizeof r->gpu, e)) != 0
        || (rc = set_str(o, "gpu_name", r->gpu_name, sizeof r->gpu_name, e)) != 0
        || (rc = set_num(o, "median_us", r->median_us, e)) != 0
        || (rc = set_num(o, "copy_us", r->copy_us, e)) != 0
        || (rc = set_num(o, "gbps", r->gbps, e)) != 0
        || (rc = set_int(o, "evaluations", r->evaluations, e)) != 0
        || (rc = set_str(o, "date", r->date, sizeof r->date, e)) != 0
        || (rc = set_str(o, "tool_version", r->tool_version, sizeof r->tool_version, e)) != 0) {
        json_decref(o);
        return rc;
    }
    *out = o;
    return 0;
}

int tuned__record_encode(const tuned__record *r, char **text, size_t *len, tuned__err *e)
{
    json_t *o;
    int rc = tuned__record_to_json(r, &o, e);
    if (rc != 0)
        return rc;
    /* 17 significant digits: doubles come back bit for bit. Dumped into
     * our own malloc() buffer, whatever allocator jansson was given. */
    const size_t flags = JSON_COMPACT | JSON_REAL_PRECISION(17);
    size_t n = json_dumpb(o, NULL, 0, flags);
    char *s = n > 0 ? malloc(n) : NULL;
    if (s == NULL || json_dumpb(o, s, n, flags) != n) {
        free(s);
        json_decref(o);
        return tuned__errf(e, TUNED_ENOMEM, "record: json_dumpb: out of memory");
    }
    json_decref(o);
    *text = s;
    *len = n;
    return 0;
}

/* ---- reading ---- */

static int missing(const char *field, tuned__err *e)
{
    return tuned__errf(e, TUNED_ESTORE, "record: field \"%s\": missing", field);
}

static int get_uint(const json_t *obj, const char *field, uint64_t max, uint64_t *out,
                    tuned__err *e)
{
    const json_t *v = json_object_get(obj, field);
    if (v == NULL)
        return missing(field, e);
    if (!json_is_integer(v))
        return tuned__errf(e, TUNED_ESTORE, "record: field \"%s\": not an integer", field);
    json_int_t i = json_integer_value(v);
    if (i < 0 || (uint64_t)i > max)
        return tuned__errf(e, TUNED_ESTORE,
                           "record: field \"%s\": %" JSON_INTEGER_FORMAT
                           " is out of range 0..%" PRIu64,
                           field, i, max);
    *out = (uint64_t)i;
    return 0;
}

static int get_num(const json_t *obj, const char *field, double *out, tuned__err *e)
{
    const json_t *v = json_object_get(obj, field);
    if (v == NULL)
        return missing(field, e);
    if (!json_is_number(v))
        return tuned__errf(e, TUNED_ESTORE, "record: field \"%s\": not a number", field);
    double d = json_number_value(v);
    if (!isfinite(d) || d < 0)
        return tuned__errf(e, TUNED_ESTORE, "record: field \"%s\": %g is not a finite number >= 0",
                           field, d);
    *out = d;
    return 0;
}

/* Copies a JSON string into dst[size]; too long or holding a NUL is an error. */
static int get_str(const json_t *obj, const char *field, char *dst, size_t size, tuned__err *e)
{
    const json_t *v = json_object_get(obj, field);
    if (v == NULL)
        return missing(field, e);
    if (!json_is_string(v))
        return tuned__errf(e, TUNED_ESTORE, "record: field \"%s\": not a string", field);
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (strlen(s) != n)
        return tuned__errf(e, TUNED_ESTORE, "record: field \"%s\": contains a NUL character",
                           field);
    if (n >= size)
        return tuned__errf(e, TUNED_ESTORE, "record: field \"%s\": %zu bytes long, at most %zu fit",
                           field, n, size - 1);
    memcpy(dst, s, n + 1);
    return 0;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int get_fp(const json_t *obj, const char *field, uint64_t *out, tuned__err *e)
{
    char s[17];
    int rc = get_str(obj, field, s, sizeof s, e);
    if (rc != 0)
        return rc;
    uint64_t v = 0;
    size_t n = 0;
    for (; s[n] != '\0'; n++) {
        int d = hex_digit(s[n]);
        if (d < 0)
            break;
        v = (v << 4) | (uint64_t)d;
    }
    if (n != 16 || s[n] != '\0')
        return tuned__errf(e, TUNED_ESTORE, "record: field \"%s\": \"%s\" is not 16 hex digits",
                           field, s);
    *out = v;
    return 0;
}

int tuned__record_from_json(const json_t *v, tuned__record *out, tuned__err *e)
{
    if (!json_is_object(v))
        return tuned__errf(e, TUNED_ESTORE, "record: not a JSON object");

    uint64_t ver;
    int rc = get_uint(v, "v", INT64_MAX, &ver, e);
    if (rc != 0)
        return rc;
    if (ver > TUNED__RECORD_VERSION)
        return tuned__errf(e, TUNED_ESCHEMA,
                           "record: version %" PRIu64 ", this build reads up to %d", ver,
                           TUNED__RECORD_VERSION);
    if (ver < 1)
        return tuned__errf(e, TUNED_ESTORE, "record: field \"v\": version 0 does not exist");

    /* Zeroed so that array bytes past each string's NUL are deterministic. */
    tuned__record r;
    memset(&r, 0, sizeof r);
    uint64_t kernel, dtype, evaluations;
    if ((rc = get_uint(v, "kernel", UINT8_MAX, &kernel, e)) != 0
        || (rc = get_uint(v, "dtype", UINT8_MAX, &dtype, e)) != 0
        || (rc = get_uint(v, "rows", INT64_MAX, &r.key.rows, e)) != 0
        || (rc = get_uint(v, "cols", INT64_MAX, &r.key.cols, e)) != 0
        || (rc = get_fp(v, "gpu_fp", &r.key.gpu_fp, e)) != 0
        || (rc = get_str(v, "config", r.config, sizeof r.config, e)) != 0
        || (rc = get_str(v, "gpu", r.gpu, sizeof r.gpu, e)) != 0
        || (rc = get_str(v, "gpu_name", r.gpu_name, sizeof r.gpu_name, e)) != 0
        || (rc = get_num(v, "median_us", &r.median_us, e)) != 0
        || (rc = get_num(v, "copy_us", &r.copy_us, e)) != 0
        || (rc = get_num(v, "gbps", &r.gbps, e)) != 0
        || (rc = get_uint(v, "evaluations", UINT32_MAX, &evaluations, e)) != 0
        || (rc = get_str(v, "date", r.date, sizeof r.date, e)) != 0
        || (rc = get_str(v, "tool_version", r.tool_version, sizeof r.tool_version, e)) != 0)
        return rc;
    r.key.kernel = (uint8_t)kernel;
    r.key.dtype = (uint8_t)dtype;
    r.evaluations = (uint32_t)evaluations;
    *out = r;
    return 0;
}

int tuned__record_decode(const void *text, size_t len, tuned__record *out, tuned__err *e)
{
    json_error_t jerr;
    json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (v == NULL) {
        /* jansson quotes the offending bytes: keep the message one clean line. */
        for (char *c = jerr.text; *c != '\0'; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = '?';
        return tuned__errf(e, TUNED_ESTORE, "record: invalid JSON at line %d column %d: %s",
                           jerr.line, jerr.column, jerr.text);
    }
    int rc = tuned__record_from_json(v, out, e);
    json_decref(v);
    return rc;
}
