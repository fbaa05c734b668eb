/* json.c: checked JSON fields and ISO dates for the store (see json.h).
 *
 * Writing checks that every field can be represented faithfully (strings
 * terminated and UTF-8, numbers finite); reading checks every field's type
 * and range, so a value damaged on disk or written by a foreign tool turns
 * into an error naming the field rather than a half-filled struct. */
#include "cache/json.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/hash.h"
#include "tuned.h"

int tuned__utf8_valid(const unsigned char *s, size_t n)
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

static int set_new(json_t *obj, const char *what, const char *field, json_t *v, tuned__err *e)
{
    if (v == NULL || json_object_set_new(obj, field, v) != 0)
        return tuned__errf(e, TUNED_ENOMEM, "%s: field \"%s\": out of memory", what, field);
    return 0;
}

int tuned__json_set_str(json_t *obj, const char *what, const char *field, const char *s,
                        size_t size, tuned__err *e)
{
    size_t n = strnlen(s, size);
    if (n == size)
        return tuned__errf(e, TUNED_EINVAL,
                           "%s: field \"%s\": not NUL-terminated within %zu bytes", what, field,
                           size);
    if (!tuned__utf8_valid((const unsigned char *)s, n))
        return tuned__errf(e, TUNED_EINVAL, "%s: field \"%s\": not valid UTF-8", what, field);
    return set_new(obj, what, field, json_stringn(s, n), e);
}

int tuned__json_set_num(json_t *obj, const char *what, const char *field, double v,
                        tuned__err *e)
{
    if (!isfinite(v) || v < 0)
        return tuned__errf(e, TUNED_EINVAL, "%s: field \"%s\": %g is not a finite number >= 0",
                           what, field, v);
    return set_new(obj, what, field, json_real(v), e);
}

int tuned__json_set_uint(json_t *obj, const char *what, const char *field, uint64_t v,
                         tuned__err *e)
{
    if (v > (uint64_t)INT64_MAX)
        return tuned__errf(e, TUNED_EINVAL, "%s: field \"%s\": %" PRIu64 " exceeds %" PRId64,
                           what, field, v, INT64_MAX);
    return set_new(obj, what, field, json_integer((json_int_t)v), e);
}

int tuned__json_set_hex64(json_t *obj, const char *what, const char *field, uint64_t v,
                          tuned__err *e)
{
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, v);
    return set_new(obj, what, field, json_stringn(hex, 16), e);
}

/* ---- reading ---- */

static int missing(const char *what, const char *field, tuned__err *e)
{
    return tuned__errf(e, TUNED_ESTORE, "%s: field \"%s\": missing", what, field);
}

int tuned__json_get_uint(const json_t *obj, const char *what, const char *field, uint64_t max,
                         uint64_t *out, tuned__err *e)
{
    const json_t *v = json_object_get(obj, field);
    if (v == NULL)
        return missing(what, field, e);
    if (!json_is_integer(v))
        return tuned__errf(e, TUNED_ESTORE, "%s: field \"%s\": not an integer", what, field);
    json_int_t i = json_integer_value(v);
    if (i < 0 || (uint64_t)i > max)
        return tuned__errf(e, TUNED_ESTORE,
                           "%s: field \"%s\": %" JSON_INTEGER_FORMAT " is out of range 0..%" PRIu64,
                           what, field, i, max);
    *out = (uint64_t)i;
    return 0;
}

int tuned__json_get_num(const json_t *obj, const char *what, const char *field, double *out,
                        tuned__err *e)
{
    const json_t *v = json_object_get(obj, field);
    if (v == NULL)
        return missing(what, field, e);
    if (!json_is_number(v))
        return tuned__errf(e, TUNED_ESTORE, "%s: field \"%s\": not a number", what, field);
    double d = json_number_value(v);
    if (!isfinite(d) || d < 0)
        return tuned__errf(e, TUNED_ESTORE, "%s: field \"%s\": %g is not a finite number >= 0",
                           what, field, d);
    *out = d;
    return 0;
}

int tuned__json_get_str(const json_t *obj, const char *what, const char *field, char *dst,
                        size_t size, tuned__err *e)
{
    const json_t *v = json_object_get(obj, field);
    if (v == NULL)
        return missing(what, field, e);
    if (!json_is_string(v))
        return tuned__errf(e, TUNED_ESTORE, "%s: field \"%s\": not a string", what, field);
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (strlen(s) != n)
        return tuned__errf(e, TUNED_ESTORE, "%s: field \"%s\": contains a NUL character", what,
                           field);
    if (n >= size)
        return tuned__errf(e, TUNED_ESTORE, "%s: field \"%s\": %zu bytes long, at most %zu fit",
                           what, field, n, size - 1);
    memcpy(dst, s, n + 1);
    return 0;
}

int tuned__json_get_hex64(const json_t *obj, const char *what, const char *field, uint64_t *out,
                          tuned__err *e)
{
    char s[17];
    int rc = tuned__json_get_str(obj, what, field, s, sizeof s, e);
    if (rc != 0)
        return rc;
    if (!tuned__fp_parse(s, strlen(s), out))
        return tuned__errf(e, TUNED_ESTORE, "%s: field \"%s\": \"%s\" is not 16 hex digits", what,
                           field, s);
    return 0;
}

/* ---- whole values ---- */

int tuned__json_dump(const json_t *o, const char *what, char **text, size_t *len, tuned__err *e)
{
    /* Dumped into our own malloc() buffer, whatever allocator jansson has. */
    const size_t flags = JSON_COMPACT | JSON_REAL_PRECISION(17);
    size_t n = json_dumpb(o, NULL, 0, flags);
    char *s = n > 0 ? malloc(n) : NULL;
    if (s == NULL || json_dumpb(o, s, n, flags) != n) {
        free(s);
        return tuned__errf(e, TUNED_ENOMEM, "%s: json_dumpb: out of memory", what);
    }
    *text = s;
    *len = n;
    return 0;
}

int tuned__json_load(const void *text, size_t len, const char *what, json_t **out,
                     tuned__err *e)
{
    json_error_t jerr;
    json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (v == NULL) {
        /* jansson quotes the offending bytes: keep the message one clean line. */
        for (char *c = jerr.text; *c != '\0'; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = '?';
        return tuned__errf(e, TUNED_ESTORE, "%s: invalid JSON at column %d: %s", what,
                           jerr.column, jerr.text);
    }
    *out = v;
    return 0;
}

int tuned__json_check_version(const json_t *o, const char *what, uint64_t version,
                              tuned__err *e)
{
    if (!json_is_object(o))
        return tuned__errf(e, TUNED_ESTORE, "%s: not a JSON object", what);
    uint64_t v;
    int rc = tuned__json_get_uint(o, what, "v", INT64_MAX, &v, e);
    if (rc != 0)
        return rc;
    if (v != version)
        return tuned__errf(e, TUNED_ESCHEMA, "%s: version %" PRIu64 ", this build reads "
                           "version %" PRIu64 " only", what, v, version);
    return 0;
}
