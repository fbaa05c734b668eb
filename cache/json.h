/* json.h: checked reading and writing of the store's JSON fields, and its
 * ISO 8601 dates.
 *
 * Every store value and every export line is a JSON object; these helpers
 * are the one place its fields are typed and ranged. A writer refuses what
 * it cannot represent faithfully (TUNED_EINVAL); a reader refuses what is
 * malformed (TUNED_ESTORE), naming the field: "record: field "rows": ...".
 * `what` is that leading context ("record", "history", ...). */
#ifndef TUNED_CACHE_JSON_H
#define TUNED_CACHE_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>

#include "src/common/clock.h" /* the dates of records and history */
#include "src/common/err.h"

/* ---- writing into obj ---- */

/* s must be NUL-terminated within size bytes and valid UTF-8. */
int tuned__json_set_str(json_t *obj, const char *what, const char *field, const char *s,
                        size_t size, tuned__err *e);
/* v must be finite and >= 0. */
int tuned__json_set_num(json_t *obj, const char *what, const char *field, double v,
                        tuned__err *e);
/* v must be <= INT64_MAX. */
int tuned__json_set_uint(json_t *obj, const char *what, const char *field, uint64_t v,
                         tuned__err *e);
/* As a string of 16 lower-case hex digits. */
int tuned__json_set_hex64(json_t *obj, const char *what, const char *field, uint64_t v,
                          tuned__err *e);

/* ---- reading from obj ---- */

int tuned__json_get_uint(const json_t *obj, const char *what, const char *field, uint64_t max,
                         uint64_t *out, tuned__err *e);
/* A finite number >= 0. */
int tuned__json_get_num(const json_t *obj, const char *what, const char *field, double *out,
                        tuned__err *e);
/* A string without NUL that fits dst[size] with its terminator. */
int tuned__json_get_str(const json_t *obj, const char *what, const char *field, char *dst,
                        size_t size, tuned__err *e);
/* A string of exactly 16 hex digits. */
int tuned__json_get_hex64(const json_t *obj, const char *what, const char *field, uint64_t *out,
                          tuned__err *e);

/* ---- whole values ---- */

/* o serialized compactly (doubles with 17 digits: they come back bit for
 * bit) into *text, a malloc()ed buffer of *len bytes without a NUL. */
int tuned__json_dump(const json_t *o, const char *what, char **text, size_t *len, tuned__err *e);

/* Parses len bytes of JSON (duplicate object keys rejected) into *out, a
 * new reference. TUNED_ESTORE with a one-line message on failure. */
int tuned__json_load(const void *text, size_t len, const char *what, json_t **out,
                     tuned__err *e);

/* Checks that o is an object whose "v" is version: TUNED_ESTORE when it is
 * not an object or has no valid "v", TUNED_ESCHEMA for another version
 * (written by a newer or older tuned). */
int tuned__json_check_version(const json_t *o, const char *what, uint64_t version,
                              tuned__err *e);

/* RFC 3629 UTF-8 (no overlong forms, surrogates or code points past
 * U+10FFFF). */
int tuned__utf8_valid(const unsigned char *s, size_t n);


#endif
