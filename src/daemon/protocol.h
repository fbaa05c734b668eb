/* protocol.h: the daemon's client protocol as pure functions.
 *
 * One request is one line of JSON; one reply is one line of JSON. This
 * module turns a line into a validated tuned__request (or a protocol error
 * with a stable code name) and writes replies into a growable buffer. It
 * does no I/O, holds no state and never touches the store or the GPU, so
 * that the unit tests and the fuzz target (tests/fuzz_protocol.c) can call
 * it on anything. docs/protocol.md is the user-facing description; keep
 * both in step. */
#ifndef TUNED_DAEMON_PROTOCOL_H
#define TUNED_DAEMON_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/store.h"
#include "src/codegen/config.h"

/* Requests. */
enum {
    TUNED__OP_PING = 0,
    TUNED__OP_GET,
    TUNED__OP_TUNE,
    TUNED__OP_JOB,
    TUNED__OP_LIST,
    TUNED__OP_STATS,
    TUNED__OP_COUNT
};

/* Protocol error codes; their names (tuned__perr_name) are what a reply's
 * error.code carries, and are stable. */
enum {
    TUNED__PE_NONE = 0,
    TUNED__PE_BAD_JSON,         /* not JSON (or duplicate keys, or a NUL) */
    TUNED__PE_BAD_REQUEST,      /* JSON, but not an object with a string "op" */
    TUNED__PE_UNKNOWN_OP,
    TUNED__PE_UNKNOWN_FIELD,    /* a field this op does not take */
    TUNED__PE_MISSING_FIELD,
    TUNED__PE_BAD_TYPE,         /* a field of the wrong JSON type */
    TUNED__PE_BAD_VALUE,        /* right type, out of range or unknown name */
    TUNED__PE_TOO_BIG,          /* the shape's bytes exceed what a GPU holds */
    TUNED__PE_LINE_TOO_LONG,    /* then the connection is closed */
    TUNED__PE_TOO_MANY_CLIENTS, /* then the connection is closed */
    TUNED__PE_QUEUE_FULL,
    TUNED__PE_NO_SUCH_JOB,
    TUNED__PE_NO_GPU,           /* no local GPU of that model can tune */
    TUNED__PE_UNKNOWN_GPU,      /* neither a local GPU nor one in the store */
    TUNED__PE_GPU_REQUIRED,     /* no local GPU and the store holds several */
    TUNED__PE_NO_SPACE,         /* no valid variant for this shape */
    TUNED__PE_STORE,
    TUNED__PE_SHUTTING_DOWN,
    TUNED__PE_INTERNAL,
    TUNED__PE_READ_ONLY,        /* tune on a daemon whose store is read-only */
    TUNED__PE_IDLE,             /* closed after the idle timeout */
    TUNED__PE_COUNT
};

const char *tuned__perr_name(int code);
const char *tuned__op_name(int op);

/* Largest id string echoed back, in bytes. */
#define TUNED__PROTO_ID_MAX 64
/* Longest GPU name a request may name (tuned__record.gpu_name's size - 1). */
#define TUNED__PROTO_GPU_MAX 127
/* Largest first population a tune may ask for (as tuned --population). */
#define TUNED__PROTO_POPULATION_MAX 10000
/* Most records one list reply holds; default when "limit" is absent. */
#define TUNED__PROTO_LIST_MAX 1000
#define TUNED__PROTO_LIST_DEFAULT 100
/* No shape whose input plus output exceeds this is accepted, whatever the
 * GPU (the daemon checks the GPU's own memory as well). */
#define TUNED__PROTO_MAX_BYTES (1ull << 40)

/* How a request names a GPU. */
enum {
    TUNED__GPU_ANY = 0,    /* absent: the daemon's first GPU */
    TUNED__GPU_ORDINAL,    /* an integer: a local GPU ordinal */
    TUNED__GPU_FP,         /* a string of 16 hex digits: a store fingerprint */
    TUNED__GPU_NAME,       /* any other string: a GPU model name */
};

typedef struct tuned__gpu_sel {
    int kind;
    int ordinal;
    uint64_t fp;
    char name[TUNED__PROTO_GPU_MAX + 1];
} tuned__gpu_sel;

/* Sets g from a "gpu" string of n bytes (1..TUNED__PROTO_GPU_MAX, no NUL
 * among them; need not be NUL-ended): 16 hex digits name a fingerprint,
 * anything else a model. Both request parsers read the string this way. */
void tuned__gpu_sel_from_text(const char *text, size_t n, tuned__gpu_sel *g);

typedef struct tuned__request {
    int op;                 /* TUNED__OP_* */
    /* The request's "id" as JSON text, ready to echo; empty when absent. */
    char id[TUNED__PROTO_ID_MAX * 6 + 3];
    uint8_t kernel;         /* TUNED__KIND_DEFAULT when absent */
    bool have_kernel, have_dtype, have_rows, have_cols;
    tuned__shape shape;     /* dtype defaults to fp16 */
    tuned__gpu_sel gpu;
    bool tune_if_missing;   /* get */
    bool have_budget, have_time, have_seed, have_population, have_finalist_rounds;
    uint64_t budget;        /* tune: 1..100000 */
    double time_s;          /* tune: (0, 86400] */
    uint64_t seed;          /* tune */
    uint64_t population;    /* tune: random variants in generation 0, 1..10000 */
    uint64_t finalist_rounds; /* tune: 1..TUNED__FINALIST_ROUNDS_MAX */
    bool retune;            /* tune: ignore the shape's history */
    uint64_t job;           /* job: >= 1 */
    size_t limit;           /* list: 1..TUNED__PROTO_LIST_MAX */
} tuned__request;

typedef struct tuned__proto_error {
    int code;               /* TUNED__PE_* */
    char message[256];
} tuned__proto_error;

/* Parses one request line (without its newline; need not be NUL-ended).
 * Returns 0, or -1 with err filled; req->id is filled as far as it could
 * be read, so that an error reply can echo it. A `get` line of the common
 * shape is read by a scanner that builds no JSON tree (protocol_get.h);
 * every other line, and every line that scanner does not fully accept,
 * by jansson (tuned__proto_parse_json), with the same result either way. */
int tuned__proto_parse(const char *line, size_t len, tuned__request *req,
                       tuned__proto_error *err);

/* tuned__proto_parse through jansson only (the fast path's reference, for
 * the tests that compare the two). */
int tuned__proto_parse_json(const char *line, size_t len, tuned__request *req,
                            tuned__proto_error *err);


/* Whether the tensors the shape's kind moves exceed TUNED__PROTO_MAX_BYTES
 * (rows and cols at least 1). */
bool tuned__shape_over_cap(const tuned__shape *shape);

/* A request with every field at its default (what an absent field means). */
void tuned__request_init(tuned__request *req);

/* ---- reply writing ---- */

/* A growable byte buffer with a sticky out-of-memory flag: after a failed
 * allocation every append is a no-op and oom stays set, so callers write a
 * whole reply and check once. */
typedef struct tuned__buf {
    char *data;
    size_t len, cap;
    bool oom;
} tuned__buf;

void tuned__buf_free(tuned__buf *b);
void tuned__buf_add(tuned__buf *b, const void *p, size_t n);
void tuned__buf_adds(tuned__buf *b, const char *s);
void tuned__buf_printf(tuned__buf *b, const char *fmt, ...) TUNED__PRINTF(2, 3);

/* JSON values: strings are escaped (control characters as \u00XX; NUL
 * and bytes that are not UTF-8 as U+FFFD); non-finite numbers become null. */
void tuned__json_str(tuned__buf *b, const char *s);
void tuned__json_strn(tuned__buf *b, const char *s, size_t n);
void tuned__json_u64(tuned__buf *b, uint64_t v);
void tuned__json_i64(tuned__buf *b, int64_t v);
void tuned__json_double(tuned__buf *b, double v);
void tuned__json_bool(tuned__buf *b, bool v);
/* `,"key":` (the comma omitted when first). */
void tuned__json_key(tuned__buf *b, const char *key, bool first);

/* Writes `, "params": "k=8,..."` for a kind's key parameters that differ
 * from its defaults (nothing when none do). */
void tuned__json_params(tuned__buf *b, uint8_t kernel, uint32_t params);

/* `{"id":ID,"ok":true` (no id when id is empty); close with
 * tuned__reply_end. */
void tuned__reply_begin(tuned__buf *b, const char *id);
void tuned__reply_end(tuned__buf *b);

/* A whole error line, newline included. */
void tuned__reply_error(tuned__buf *b, const char *id, int code, const char *message);

/* The fields of a stored record, each with a leading comma:
 * ,"kernel":..,"dtype":..,"rows":..,"cols":..,"gpu":..,"gpu_fp":..,
 * "config":..,"median_us":..,"copy_us":..,"gbps":..,"evaluations":..,
 * "date":..,"tuned":.. */
void tuned__reply_record(tuned__buf *b, const tuned__record *r);

/* The head of a `get` answer from a stored record: ,"config":..,"median_us":..
 * (the daemon's index renders it once per record). */
void tuned__reply_answer_head(tuned__buf *b, const tuned__record *r);

/* The 16 lowercase hex digits of a fingerprint, NUL-ended (17 bytes). */
void tuned__fp_hex(uint64_t fp, char out[17]);

#endif
