/* record.h: a best-config record (tuned__record) as a versioned JSON
 * object, and back; and the checks every record passes.
 *
 * Store values and export lines are the same JSON object, so a person can
 * read them with mdb_dump or jq and a newer tool can add fields. "v" is the
 * record version: a reader refuses any version but TUNED__RECORD_VERSION
 * with TUNED_ESCHEMA, and malformed fields with TUNED_ESTORE naming the
 * field; strings that do not fit the struct's arrays are errors, never
 * silently cut. Unknown fields are ignored. The object carries the key
 * fields too, so the store can check that a value sits under its own key.
 * The field list is documented in docs/store-format.md. */
#ifndef TUNED_CACHE_RECORD_H
#define TUNED_CACHE_RECORD_H

#include <stddef.h>

#include <jansson.h>

#include "src/common/err.h"
#include "cache/store.h"

#define TUNED__RECORD_VERSION 2

/* Whether r is a record the store may hold: known kernel and dtype, rows
 * and cols >= 1, gpu_fp the fingerprint of gpu, a config text, GPU name and
 * policy that are not empty, median_us > 0, a valid date. Returns 0 or code
 * with the reason. */
int tuned__record_check(const tuned__record *r, int code, tuned__err *e);

/* The fastest any current GPU moves memory, in bytes per second: HBM3e
 * parts (H200, B200) peak at 4.8 to 8 TB/s; 10 TB/s is above every one.
 * No kind moves the bytes its spec says it moves (tuned__kind_bytes)
 * faster. */
#define TUNED__RECORD_MAX_BYTES_PER_S 10e12
/* A kind moves at least the copy's bytes with more work, or fewer: no
 * measurement of it beats 0.8 x the copy's measured time, scaled down to
 * its bytes where it moves fewer (the loss-only cross-entropy reads one
 * matrix where the copy moves two: half the copy's time is possible); the
 * margin is the noise between two medians. */
#define TUNED__RECORD_MIN_OF_COPY 0.8
/* The shortest time, in microseconds, any launch of a kernel or a copy
 * takes from one event to the next: the launch, one memory round trip and
 * the events' own step come to 2-4 us on the GPUs measured; no record
 * (median or copy) of a possible measurement is below it. */
#define TUNED__RECORD_MIN_US 1.0

/* Whether r could be a real measurement (beyond tuned__record_check): its
 * gpu_name is the name its identity string begins with ("NAME|sm_90|..."),
 * it has the copy time every tune measures first, its median_us and
 * copy_us are at least TUNED__RECORD_MIN_US, its median_us is at least
 * TUNED__RECORD_MIN_OF_COPY x its copy_us, and neither its bytes read and
 * written over median_us nor its stated gbps pass
 * TUNED__RECORD_MAX_BYTES_PER_S. Import refuses a record that is not, and
 * replaces a stored one that is not; the fleet serves none. Returns 0 or
 * code with the reason. */
int tuned__record_plausible(const tuned__record *r, int code, tuned__err *e);

/* Builds the JSON object of r into *out (a new reference). Returns 0,
 * TUNED_EINVAL for a field that cannot be written (a string that is not
 * NUL-terminated within its array or not UTF-8, a non-finite or negative
 * number, rows or cols above INT64_MAX), or TUNED_ENOMEM. Does not run
 * tuned__record_check(). */
int tuned__record_to_json(const tuned__record *r, json_t **out, tuned__err *e);

/* Fills *out from the JSON value v and checks it (tuned__record_check).
 * Returns 0, TUNED_ESCHEMA for another record version, or TUNED_ESTORE for
 * anything malformed. *out is written only on success. */
int tuned__record_from_json(const json_t *v, tuned__record *out, tuned__err *e);

/* tuned__record_to_json(), serialized compactly into *text, a malloc()ed
 * buffer of *len bytes with no terminating NUL; free() it. */
int tuned__record_encode(const tuned__record *r, char **text, size_t *len, tuned__err *e);

/* Parses len bytes of JSON text (duplicate keys rejected) and then as
 * tuned__record_from_json(). */
int tuned__record_decode(const void *text, size_t len, tuned__record *out, tuned__err *e);

#endif
