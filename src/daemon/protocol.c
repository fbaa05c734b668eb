/* protocol.c: request parsing and validation, reply writing (protocol.h).
 *
 * Parsing goes in a fixed order so that every input gets the most useful
 * error: JSON syntax, then the shape of the request (an object with a
 * string "op"), the "id" (so that later errors can echo it), unknown
 * fields, then each field's type and range. Fields are described once, in
 * the table below, with the ops that take them. jansson parses with
 * JSON_REJECT_DUPLICATES; integers beyond int64 are a JSON error there.
 * The common `get` line is first offered to protocol_get.c's scanner,
 * which accepts only what this path accepts, with the same result, and
 * leaves everything else (errors included) to it. */
#include "src/daemon/protocol.h"
#include "src/daemon/protocol_get.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "src/common/hash.h"
#include "src/tuner/space.h"
#include "src/tuner/tune.h"
#include "tuned.h"

static const char *const perr_names[TUNED__PE_COUNT] = {
    [TUNED__PE_NONE] = "none",
    [TUNED__PE_BAD_JSON] = "bad_json",
    [TUNED__PE_BAD_REQUEST] = "bad_request",
    [TUNED__PE_UNKNOWN_OP] = "unknown_op",
    [TUNED__PE_UNKNOWN_FIELD] = "unknown_field",
    [TUNED__PE_MISSING_FIELD] = "missing_field",
    [TUNED__PE_BAD_TYPE] = "bad_type",
    [TUNED__PE_BAD_VALUE] = "bad_value",
    [TUNED__PE_TOO_BIG] = "too_big",
    [TUNED__PE_LINE_TOO_LONG] = "line_too_long",
    [TUNED__PE_TOO_MANY_CLIENTS] = "too_many_clients",
    [TUNED__PE_QUEUE_FULL] = "queue_full",
    [TUNED__PE_NO_SUCH_JOB] = "no_such_job",
    [TUNED__PE_NO_GPU] = "no_gpu",
    [TUNED__PE_UNKNOWN_GPU] = "unknown_gpu",
    [TUNED__PE_GPU_REQUIRED] = "gpu_required",
    [TUNED__PE_NO_SPACE] = "no_space",
    [TUNED__PE_STORE] = "store_error",
    [TUNED__PE_SHUTTING_DOWN] = "shutting_down",
    [TUNED__PE_INTERNAL] = "internal",
    [TUNED__PE_READ_ONLY] = "read_only",
    [TUNED__PE_IDLE] = "idle_timeout",
};

static const char *const op_names[TUNED__OP_COUNT] = {
    [TUNED__OP_PING] = "ping", [TUNED__OP_GET] = "get",   [TUNED__OP_TUNE] = "tune",
    [TUNED__OP_JOB] = "job",   [TUNED__OP_LIST] = "list", [TUNED__OP_STATS] = "stats",
};

const char *tuned__perr_name(int code)
{
    return code >= 0 && code < TUNED__PE_COUNT ? perr_names[code] : "internal";
}

const char *tuned__op_name(int op)
{
    return op >= 0 && op < TUNED__OP_COUNT ? op_names[op] : "?";
}

/* ---- buffer and JSON writing ---- */

void tuned__buf_free(tuned__buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

static bool buf_reserve(tuned__buf *b, size_t n)
{
    if (b->oom)
        return false;
    if (n <= b->cap - b->len)
        return true;
    if (n > SIZE_MAX / 2 - b->len) {
        b->oom = true;
        return false;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (p == NULL) {
        b->oom = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void tuned__buf_add(tuned__buf *b, const void *p, size_t n)
{
    if (n == 0 || !buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void tuned__buf_adds(tuned__buf *b, const char *s)
{
    tuned__buf_add(b, s, strlen(s));
}

void tuned__buf_printf(tuned__buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        tuned__buf_add(b, small, (size_t)n);
        return;
    }
    if (!buf_reserve(b, (size_t)n + 1))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if none. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    unsigned cp = c & (0xFFu >> (len + 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

void tuned__json_strn(tuned__buf *b, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    tuned__buf_add(b, "\"", 1);
    size_t run = 0; /* bytes copied as they are, pending */
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            run++;
            i++;
            continue;
        }
        size_t ulen = c >= 0x80 ? utf8_len(p + i, n - i) : 0;
        if (ulen > 0) {
            run += ulen;
            i += ulen;
            continue;
        }
        tuned__buf_add(b, p + i - run, run);
        run = 0;
        char esc[8];
        switch (c) {
        case '"': tuned__buf_add(b, "\\\"", 2); break;
        case '\\': tuned__buf_add(b, "\\\\", 2); break;
        case '\n': tuned__buf_add(b, "\\n", 2); break;
        case '\r': tuned__buf_add(b, "\\r", 2); break;
        case '\t': tuned__buf_add(b, "\\t", 2); break;
        default:
            if (c == 0) {
                tuned__buf_add(b, "\\ufffd", 6); /* many parsers refuse \u0000 */
            } else if (c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                tuned__buf_add(b, esc, 6);
            } else {
                tuned__buf_add(b, "\\ufffd", 6); /* not UTF-8 */
            }
        }
        i++;
    }
    tuned__buf_add(b, p + n - run, run);
    tuned__buf_add(b, "\"", 1);
}

void tuned__json_str(tuned__buf *b, const char *s)
{
    tuned__json_strn(b, s, strlen(s));
}

void tuned__json_u64(tuned__buf *b, uint64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof t, "%" PRIu64, v);
    tuned__buf_add(b, t, (size_t)n);
}

void tuned__json_i64(tuned__buf *b, int64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof t, "%" PRId64, v);
    tuned__buf_add(b, t, (size_t)n);
}

void tuned__json_double(tuned__buf *b, double v)
{
    if (!isfinite(v)) {
        tuned__buf_add(b, "null", 4);
        return;
    }
    /* The shortest of %.15g / %.17g that reads back as the same double. */
    char t[40];
    int n = snprintf(t, sizeof t, "%.15g", v);
    if (strtod(t, NULL) != v)
        n = snprintf(t, sizeof t, "%.17g", v);
    /* Keep it a JSON number that reads back as a real, not an integer. */
    if (strspn(t, "-0123456789") == (size_t)n && n < (int)sizeof t - 2) {
        t[n++] = '.';
        t[n++] = '0';
    }
    tuned__buf_add(b, t, (size_t)n);
}

void tuned__json_bool(tuned__buf *b, bool v)
{
    if (v)
        tuned__buf_add(b, "true", 4);
    else
        tuned__buf_add(b, "false", 5);
}

void tuned__json_key(tuned__buf *b, const char *key, bool first)
{
    if (!first)
        tuned__buf_add(b, ",", 1);
    tuned__json_str(b, key);
    tuned__buf_add(b, ":", 1);
}

void tuned__fp_hex(uint64_t fp, char out[17])
{
    snprintf(out, 17, "%016" PRIx64, fp);
}

void tuned__reply_begin(tuned__buf *b, const char *id)
{
    if (id[0] != '\0') {
        tuned__buf_add(b, "{\"id\":", 6);
        tuned__buf_adds(b, id);
        tuned__buf_add(b, ",\"ok\":true", 10);
    } else {
        tuned__buf_add(b, "{\"ok\":true", 10);
    }
}

void tuned__reply_end(tuned__buf *b)
{
    tuned__buf_add(b, "}\n", 2);
}

void tuned__reply_error(tuned__buf *b, const char *id, int code, const char *message)
{
    if (id[0] != '\0') {
        tuned__buf_add(b, "{\"id\":", 6);
        tuned__buf_adds(b, id);
        tuned__buf_add(b, ",\"ok\":false", 11);
    } else {
        tuned__buf_add(b, "{\"ok\":false", 11);
    }
    tuned__buf_adds(b, ",\"error\":{\"code\":");
    tuned__json_str(b, tuned__perr_name(code));
    tuned__buf_adds(b, ",\"message\":");
    tuned__json_str(b, message);
    tuned__buf_add(b, "}}\n", 3);
}

void tuned__json_params(tuned__buf *b, uint8_t kernel, uint32_t params)
{
    char text[128];
    tuned__params_format(tuned__kind(kernel != 0 ? kernel : TUNED__KIND_DEFAULT), params, text,
                         sizeof text);
    if (text[0] == '\0')
        return;
    tuned__json_key(b, "params", false);
    tuned__json_str(b, text);
}

void tuned__reply_record(tuned__buf *b, const tuned__record *r)
{
    char fp[17];
    const char *dtype = tuned_dtype_name((tuned_dtype)r->key.dtype);
    tuned__json_key(b, "kernel", false);
    const char *kernel = tuned__kernel_name(r->key.kernel);
    tuned__json_str(b, kernel != NULL ? kernel : "?");
    tuned__json_key(b, "dtype", false);
    tuned__json_str(b, dtype != NULL ? dtype : "?");
    tuned__json_key(b, "rows", false);
    tuned__json_u64(b, r->key.rows);
    tuned__json_key(b, "cols", false);
    tuned__json_u64(b, tuned__wire_cols_cols(r->key.cols));
    tuned__json_params(b, r->key.kernel, tuned__wire_params(r->key.cols));
    tuned__json_key(b, "gpu", false);
    tuned__json_str(b, r->gpu_name);
    tuned__json_key(b, "gpu_fp", false);
    tuned__fp_hex(r->key.gpu_fp, fp);
    tuned__json_str(b, fp);
    tuned__json_key(b, "config", false);
    tuned__json_str(b, r->config);
    tuned__json_key(b, "median_us", false);
    tuned__json_double(b, r->median_us);
    tuned__json_key(b, "copy_us", false);
    tuned__json_double(b, r->copy_us);
    tuned__json_key(b, "gbps", false);
    tuned__json_double(b, r->gbps);
    tuned__json_key(b, "evaluations", false);
    tuned__json_u64(b, r->evaluations);
    tuned__json_key(b, "date", false);
    tuned__json_str(b, r->date);
    tuned__json_key(b, "tuned", false);
    tuned__json_str(b, r->tool_version);
}

void tuned__reply_answer_head(tuned__buf *b, const tuned__record *r)
{
    tuned__json_key(b, "config", false);
    tuned__json_str(b, r->config);
    tuned__json_key(b, "median_us", false);
    tuned__json_double(b, r->median_us);
}

/* ---- parsing ---- */

static int fail(tuned__proto_error *err, int code, const char *fmt, ...) TUNED__PRINTF(3, 4);

static int fail(tuned__proto_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    err->code = code;
    return -1;
}

enum {
    B_PING = 1u << TUNED__OP_PING,
    B_GET = 1u << TUNED__OP_GET,
    B_TUNE = 1u << TUNED__OP_TUNE,
    B_JOB = 1u << TUNED__OP_JOB,
    B_LIST = 1u << TUNED__OP_LIST,
    B_STATS = 1u << TUNED__OP_STATS,
    B_ALL = (1u << TUNED__OP_COUNT) - 1,
};

/* Every field a request may carry, and the ops that take it. */
static const struct field {
    const char *name;
    unsigned ops;
} fields[] = {
    {"id", B_ALL},
    {"op", B_ALL},
    {"kernel", B_GET | B_TUNE | B_LIST},
    {"dtype", B_GET | B_TUNE | B_LIST},
    {"rows", B_GET | B_TUNE | B_LIST},
    {"cols", B_GET | B_TUNE | B_LIST},
    {"params", B_GET | B_TUNE | B_LIST},
    {"gpu", B_GET | B_TUNE | B_LIST},
    {"tune_if_missing", B_GET},
    {"budget", B_TUNE},
    {"time_s", B_TUNE},
    {"seed", B_TUNE},
    {"population", B_TUNE},
    {"finalist_rounds", B_TUNE},
    {"retune", B_TUNE},
    {"job", B_JOB},
    {"limit", B_LIST},
};

/* Copies at most n bytes of s for a message, printable ASCII only. */
static void shown(char *out, size_t n, const char *s)
{
    size_t i = 0;
    for (; s[i] != '\0' && i + 1 < n; i++)
        out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    out[i] = '\0';
}

static int get_uint(const json_t *v, const char *name, uint64_t min, uint64_t max, uint64_t *out,
                    tuned__proto_error *err)
{
    if (!json_is_integer(v))
        return fail(err, TUNED__PE_BAD_TYPE, "\"%s\" must be an integer", name);
    json_int_t x = json_integer_value(v);
    if (x < 0 || (uint64_t)x < min || (uint64_t)x > max)
        return fail(err, TUNED__PE_BAD_VALUE, "\"%s\" must be from %" PRIu64 " to %" PRIu64,
                    name, min, max);
    *out = (uint64_t)x;
    return 0;
}

static int parse_gpu(const json_t *v, tuned__gpu_sel *g, tuned__proto_error *err)
{
    if (json_is_integer(v)) {
        uint64_t o;
        if (get_uint(v, "gpu", 0, 1023, &o, err) != 0)
            return -1;
        g->kind = TUNED__GPU_ORDINAL;
        g->ordinal = (int)o;
        return 0;
    }
    if (!json_is_string(v))
        return fail(err, TUNED__PE_BAD_TYPE,
                    "\"gpu\" must be a GPU ordinal, a model name or a 16-digit fingerprint");
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 0 || n > TUNED__PROTO_GPU_MAX || strlen(s) != n)
        return fail(err, TUNED__PE_BAD_VALUE, "\"gpu\" must be 1 to %d bytes",
                    TUNED__PROTO_GPU_MAX);
    tuned__gpu_sel_from_text(s, n, g);
    return 0;
}

void tuned__gpu_sel_from_text(const char *text, size_t n, tuned__gpu_sel *g)
{
    if (tuned__fp_parse(text, n, &g->fp)) {
        g->kind = TUNED__GPU_FP;
        return;
    }
    g->kind = TUNED__GPU_NAME;
    memcpy(g->name, text, n);
    g->name[n] = '\0';
}

bool tuned__shape_over_cap(const tuned__shape *shape)
{
    uint64_t row_bytes = tuned__shape_matrices(shape) * shape->cols * tuned_dtype_size(shape->dtype);
    return shape->rows > TUNED__PROTO_MAX_BYTES / row_bytes;
}

/* Writes the request id as JSON text into req->id. */
static int parse_id(const json_t *v, tuned__request *req, tuned__proto_error *err)
{
    if (json_is_integer(v)) {
        snprintf(req->id, sizeof req->id, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return 0;
    }
    if (json_is_string(v) && json_string_length(v) <= TUNED__PROTO_ID_MAX) {
        tuned__buf b = {0};
        tuned__json_strn(&b, json_string_value(v), json_string_length(v));
        if (b.oom || b.len >= sizeof req->id) {
            tuned__buf_free(&b);
            return fail(err, TUNED__PE_INTERNAL, "out of memory");
        }
        memcpy(req->id, b.data, b.len);
        req->id[b.len] = '\0';
        tuned__buf_free(&b);
        return 0;
    }
    return fail(err, TUNED__PE_BAD_TYPE, "\"id\" must be an integer or a string of at most %d bytes",
                TUNED__PROTO_ID_MAX);
}

static int parse_fields(const json_t *root, tuned__request *r, tuned__proto_error *err)
{
    const json_t *v;
    uint64_t u;
    if ((v = json_object_get(root, "kernel")) != NULL) {
        if (!json_is_string(v))
            return fail(err, TUNED__PE_BAD_TYPE, "\"kernel\" must be a string");
        if (strlen(json_string_value(v)) != json_string_length(v) ||
            tuned__kernel_parse(json_string_value(v), &r->kernel) != 0) {
            char kinds[256];
            tuned__kind_list(kinds, sizeof kinds);
            return fail(err, TUNED__PE_BAD_VALUE, "\"kernel\" must be one of %s", kinds);
        }
        r->shape.kernel = r->kernel;
        r->shape.params = tuned__params_default(tuned__kind(r->kernel));
        r->have_kernel = true;
    }
    if ((v = json_object_get(root, "params")) != NULL) {
        if (!json_is_string(v))
            return fail(err, TUNED__PE_BAD_TYPE, "\"params\" must be a string");
        tuned__err pe = {0};
        if (strlen(json_string_value(v)) != json_string_length(v) ||
            tuned__params_parse(tuned__kind(r->kernel), json_string_value(v), &r->shape.params,
                                &pe) != 0)
            return fail(err, TUNED__PE_BAD_VALUE, "\"params\": %s", pe.msg);
    }
    if ((v = json_object_get(root, "dtype")) != NULL) {
        if (!json_is_string(v))
            return fail(err, TUNED__PE_BAD_TYPE, "\"dtype\" must be a string");
        if (strlen(json_string_value(v)) != json_string_length(v) ||
            tuned_dtype_parse(json_string_value(v), &r->shape.dtype) != 0)
            return fail(err, TUNED__PE_BAD_VALUE, "\"dtype\" must be fp16, bf16 or fp32");
        r->have_dtype = true;
    }
    if ((v = json_object_get(root, "rows")) != NULL) {
        if (get_uint(v, "rows", 1, TUNED__MAX_ROWS, &r->shape.rows, err) != 0)
            return -1;
        r->have_rows = true;
    }
    if ((v = json_object_get(root, "cols")) != NULL) {
        if (get_uint(v, "cols", 1, TUNED__MAX_COLS, &r->shape.cols, err) != 0)
            return -1;
        r->have_cols = true;
        char why[160];
        if (!tuned__params_check(tuned__kind(r->kernel), r->shape.cols, r->shape.params, why,
                                 sizeof why))
            return fail(err, TUNED__PE_BAD_VALUE, "%s", why);
    }
    if ((v = json_object_get(root, "gpu")) != NULL && parse_gpu(v, &r->gpu, err) != 0)
        return -1;
    if ((v = json_object_get(root, "tune_if_missing")) != NULL) {
        if (!json_is_boolean(v))
            return fail(err, TUNED__PE_BAD_TYPE, "\"tune_if_missing\" must be true or false");
        r->tune_if_missing = json_is_true(v);
    }
    if ((v = json_object_get(root, "budget")) != NULL) {
        if (get_uint(v, "budget", 1, 100000, &r->budget, err) != 0)
            return -1;
        r->have_budget = true;
    }
    if ((v = json_object_get(root, "time_s")) != NULL) {
        if (!json_is_number(v))
            return fail(err, TUNED__PE_BAD_TYPE, "\"time_s\" must be a number");
        r->time_s = json_number_value(v);
        if (!(r->time_s > 0) || r->time_s > 86400)
            return fail(err, TUNED__PE_BAD_VALUE, "\"time_s\" must be more than 0 and at most 86400");
        r->have_time = true;
    }
    if ((v = json_object_get(root, "seed")) != NULL) {
        if (get_uint(v, "seed", 0, INT64_MAX, &r->seed, err) != 0)
            return -1;
        r->have_seed = true;
    }
    if ((v = json_object_get(root, "population")) != NULL) {
        if (get_uint(v, "population", 1, TUNED__PROTO_POPULATION_MAX, &r->population, err) != 0)
            return -1;
        r->have_population = true;
    }
    if ((v = json_object_get(root, "finalist_rounds")) != NULL) {
        if (get_uint(v, "finalist_rounds", 1, TUNED__FINALIST_ROUNDS_MAX, &r->finalist_rounds,
                     err) != 0)
            return -1;
        r->have_finalist_rounds = true;
    }
    if ((v = json_object_get(root, "retune")) != NULL) {
        if (!json_is_boolean(v))
            return fail(err, TUNED__PE_BAD_TYPE, "\"retune\" must be true or false");
        r->retune = json_is_true(v);
    }
    if ((v = json_object_get(root, "job")) != NULL) {
        if (get_uint(v, "job", 1, INT64_MAX, &r->job, err) != 0)
            return -1;
    }
    if ((v = json_object_get(root, "limit")) != NULL) {
        if (get_uint(v, "limit", 1, TUNED__PROTO_LIST_MAX, &u, err) != 0)
            return -1;
        r->limit = (size_t)u;
    }
    return 0;
}

static int check_request(const json_t *root, tuned__request *r, tuned__proto_error *err)
{
    if (!json_is_object(root))
        return fail(err, TUNED__PE_BAD_REQUEST, "a request must be a JSON object");
    const json_t *v = json_object_get(root, "id");
    if (v != NULL && parse_id(v, r, err) != 0)
        return -1;
    v = json_object_get(root, "op");
    if (v == NULL)
        return fail(err, TUNED__PE_BAD_REQUEST, "a request needs \"op\"");
    if (!json_is_string(v))
        return fail(err, TUNED__PE_BAD_REQUEST, "\"op\" must be a string");
    r->op = -1;
    for (int i = 0; i < TUNED__OP_COUNT; i++)
        if (strcmp(json_string_value(v), op_names[i]) == 0 &&
            strlen(op_names[i]) == json_string_length(v))
            r->op = i;
    if (r->op < 0) {
        char s[40];
        shown(s, sizeof s, json_string_value(v));
        return fail(err, TUNED__PE_UNKNOWN_OP,
                    "unknown op \"%s\" (ping, get, tune, job, list, stats)", s);
    }
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)root, key, val) {
        (void)val;
        size_t i = 0, nf = sizeof fields / sizeof fields[0];
        while (i < nf && strcmp(fields[i].name, key) != 0)
            i++;
        if (i == nf || !(fields[i].ops & (1u << r->op))) {
            char s[40];
            shown(s, sizeof s, key);
            return fail(err, TUNED__PE_UNKNOWN_FIELD, "\"%s\" takes no field \"%s\"",
                        op_names[r->op], s);
        }
    }
    if (parse_fields(root, r, err) != 0)
        return -1;
    switch (r->op) {
    case TUNED__OP_GET:
    case TUNED__OP_TUNE:
        if (!r->have_rows || !r->have_cols)
            return fail(err, TUNED__PE_MISSING_FIELD, "\"%s\" needs \"rows\" and \"cols\"",
                        op_names[r->op]);
        break;
    case TUNED__OP_JOB:
        if (r->job == 0)
            return fail(err, TUNED__PE_MISSING_FIELD, "\"job\" needs the job id in \"job\"");
        break;
    default:
        break;
    }
    if (r->have_rows && r->have_cols && tuned__shape_over_cap(&r->shape))
        return fail(err, TUNED__PE_TOO_BIG,
                    "%" PRIu64 "x%" PRIu64 " %s %s: its %u tensors exceed 1 TiB",
                    r->shape.rows, r->shape.cols, tuned_dtype_name(r->shape.dtype),
                    tuned__kernel_name(r->kernel), tuned__shape_matrices(&r->shape));
    return 0;
}

void tuned__request_init(tuned__request *req)
{
    memset(req, 0, sizeof *req);
    req->kernel = TUNED__KIND_DEFAULT;
    req->shape.dtype = TUNED_FP16;
    req->limit = TUNED__PROTO_LIST_DEFAULT;
}

int tuned__proto_parse(const char *line, size_t len, tuned__request *req,
                       tuned__proto_error *err)
{
    if (tuned__proto_parse_get_fast(line, len, req)) {
        err->code = TUNED__PE_NONE;
        err->message[0] = '\0';
        return 0;
    }
    return tuned__proto_parse_json(line, len, req, err);
}

int tuned__proto_parse_json(const char *line, size_t len, tuned__request *req,
                            tuned__proto_error *err)
{
    tuned__request_init(req);
    err->code = TUNED__PE_NONE;
    err->message[0] = '\0';
    json_error_t jerr;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (root == NULL) {
        char text[sizeof jerr.text];
        shown(text, sizeof text, jerr.text);
        return fail(err, TUNED__PE_BAD_JSON, "not JSON: %s at column %d", text, jerr.column);
    }
    int rc = check_request(root, req, err);
    json_decref(root);
    return rc;
}
