/* record.h: a tuned__record as a versioned JSON value, and back.
 *
 * Store values are JSON objects so that a person can read them with
 * mdb_dump and a newer tool can add fields. "v" is the record version:
 * a reader refuses versions newer than TUNED__RECORD_VERSION with
 * TUNED_ESCHEMA, and refuses malformed fields with TUNED_ESTORE naming the
 * field; strings that do not fit the struct's arrays are errors, never
 * silently cut. The object carries the key fields too, so the store can
 * check that a value sits under its own key. */
#ifndef TUNED_CACHE_RECORD_H
#define TUNED_CACHE_RECORD_H

#include <stddef.h>

#include <jansson.h>

#include "../src/common/err.h"
#include "store.h"

#define TUNED__RECORD_VERSION 1

/* Builds the JSON object of r into *out (a new reference). Returns 0,
 * TUNED_EINVAL for a field that cannot be written (a string that is not
 * NUL-terminated within its array or not UTF-8, a non-finite or negative
 * number, rows or cols above INT64_MAX), or TUNED_ENOMEM. */
int tuned__record_to_json(const tuned__record *r, json_t **out, tuned__err *e);

/* Fills *out from the JSON value v. Returns 0, TUNED_ESCHEMA for a record
 * version newer than ours, or TUNED_ESTORE for anything malformed. *out is
 * written only on success. */
int tuned__record_from_json(const json_t *v, tuned__record *out, tuned__err *e);

/* tuned__record_to_json(), serialized compactly into *text, a malloc()ed
 * buffer of *len bytes with no terminating NUL; free() it. */
int tuned__record_encode(const tuned__record *r, char **text, size_t *len, tuned__err *e);

/* Parses len bytes of JSON text (duplicate keys rejected) and then as
 * tuned__record_from_json(). */
int tuned__record_decode(const void *text, size_t len, tuned__record *out, tuned__err *e);

#endif
