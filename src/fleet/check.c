/* check.c: the tier's names and checks, with no server: identities, the
 * keys built from them (the one place their text is spelt), and the check
 * every record read from the server passes before it may be served. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cache/key.h"
#include "cache/record.h"
#include "src/codegen/config.h"
#include "src/common/hash.h"
#include "src/fleet/internal.h"
#include "tuned.h"

/* A shape the tier accepts: the daemon's protocol limits. */
#define MAX_DIM 2147483647ull
#define MAX_BYTES (1ull << 40)     /* input plus output */

void tuned__fleet_hwclass_name(const char *text, char *out, size_t n)
{
    snprintf(out, n, "hw%016" PRIx64, tuned__fnv1a64(text, strlen(text), TUNED__FNV_SEED));
}

void tuned__fleet_id_from_record(const tuned__record *r, tuned__fleet_id *out)
{
    memset(out, 0, sizeof *out);
    out->kernel = r->key.kernel;
    out->dtype = r->key.dtype;
    out->rows = r->key.rows;
    out->cols = r->key.cols;
    out->layout = r->key.layout;
    char hw[256];
    snprintf(hw, sizeof hw, "%s|sm_%u%u|%usm", r->gpu_name, r->prov.cc_major, r->prov.cc_minor,
             r->prov.sm_count);
    tuned__fleet_hwclass_name(hw, out->hwclass, sizeof out->hwclass);
    snprintf(out->toolchain, sizeof out->toolchain, "drv%u.nvrtc%u.%u", r->prov.driver_version,
             r->prov.nvrtc_major, r->prov.nvrtc_minor);
    snprintf(out->code, sizeof out->code, "%016" PRIx64, r->prov.template_hash);
    snprintf(out->policy, sizeof out->policy, "%s", r->prov.policy);
}

/* 1..63 characters of [A-Za-z0-9._+-] and of extra. */
static bool text_ok(const char *s, const char *extra)
{
    size_t n = strnlen(s, TUNED__FLEET_NAME);
    if (n == 0 || n == TUNED__FLEET_NAME)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == '+' || strchr(extra, c) != NULL))
            return false;
    }
    return true;
}

bool tuned__fleet_name_ok(const char *s)
{
    return text_ok(s, "");
}

bool tuned__fleet_policy_ok(const char *s)
{
    return text_ok(s, "/");
}

/* s cut at its ':' into at most n fields; the count. */
static size_t split_fields(char *s, char **fields, size_t n)
{
    size_t k = 0;
    for (char *p = s; k < n; k++) {
        fields[k] = p;
        char *c = strchr(p, ':');
        if (c == NULL)
            return k + 1;
        *c = '\0';
        p = c + 1;
    }
    return n + 1; /* more fields than wanted */
}

int tuned__fleet_id_check(const tuned__fleet_id *id, tuned__err *e)
{
    if (tuned__kernel_name(id->kernel) == NULL)
        return tuned__errf(e, TUNED_EINVAL, "fleet id: unknown kernel id %u", id->kernel);
    if (tuned_dtype_name((tuned_dtype)id->dtype) == NULL)
        return tuned__errf(e, TUNED_EINVAL, "fleet id: unknown dtype id %u", id->dtype);
    /* the columns as they travel: a kind's key parameters above bit 32 */
    uint64_t cols = tuned__wire_cols_cols(id->cols);
    if (id->rows < 1 || cols < 1 || id->rows > MAX_DIM || cols > MAX_DIM)
        return tuned__errf(e, TUNED_EINVAL, "fleet id: shape %" PRIu64 "x%" PRIu64
                           " is out of range", id->rows, cols);
    if (!tuned__fleet_name_ok(id->hwclass))
        return tuned__errf(e, TUNED_EINVAL, "fleet id: hwclass '%.63s' is not 1..63 of "
                           "[A-Za-z0-9._+-]", id->hwclass);
    if (!tuned__fleet_name_ok(id->toolchain))
        return tuned__errf(e, TUNED_EINVAL, "fleet id: toolchain '%.63s' is not 1..63 of "
                           "[A-Za-z0-9._+-]", id->toolchain);
    if (!tuned__fleet_name_ok(id->code))
        return tuned__errf(e, TUNED_EINVAL, "fleet id: code '%.63s' is not 1..63 of "
                           "[A-Za-z0-9._+-]", id->code);
    if (!tuned__fleet_policy_ok(id->policy))
        return tuned__errf(e, TUNED_EINVAL, "fleet id: policy '%.63s' is not 1..63 of "
                           "[A-Za-z0-9._+/-]", id->policy);
    return 0;
}

const char *tuned__fleet_layout_text(uint8_t layout, char *buf, size_t n)
{
    if (layout == TUNED__LAYOUT_DENSE)
        return "dense";
    snprintf(buf, n, "L%u", (unsigned)layout);
    return buf;
}

int tuned__fleet_layout_parse(const char *s, uint8_t *out)
{
    if (strcmp(s, "dense") == 0) {
        *out = TUNED__LAYOUT_DENSE;
        return 0;
    }
    unsigned v;
    char tail;
    if (s[0] != 'L' || sscanf(s + 1, "%3u%c", &v, &tail) != 1 || v > 255 || v == 0)
        return -1;
    *out = (uint8_t)v;
    return 0;
}

void tuned__fleet_key_suffix(char *buf, size_t n, const tuned__fleet_id *id)
{
    char lb[8];
    snprintf(buf, n, "%s:%s:%" PRIu64 "x%" PRIu64 ":%s:%s:%s:%s:%s",
             tuned__kernel_name(id->kernel), tuned_dtype_name((tuned_dtype)id->dtype), id->rows,
             id->cols, tuned__fleet_layout_text(id->layout, lb, sizeof lb), id->hwclass,
             id->toolchain, id->code, id->policy);
}

void tuned__fleet_key(char *buf, size_t n, const char *kind, const tuned__fleet_id *id)
{
    char suffix[TUNED__FLEET_KEY];
    tuned__fleet_key_suffix(suffix, sizeof suffix, id);
    snprintf(buf, n, TUNED__FLEET_PREFIX ":%s:%s", kind, suffix);
}

void tuned__fleet_record_key(char *buf, size_t n, const tuned__fleet_id *id)
{
    tuned__fleet_key(buf, n, "rec", id);
}

int tuned__fleet_record_key_parse(const char *key, tuned__fleet_id *id, tuned__err *e)
{
    static const char prefix[] = TUNED__FLEET_PREFIX ":rec:";
    char text[TUNED__FLEET_KEY], tail;
    char *f[8];
    memset(id, 0, sizeof *id);
    size_t len = strlen(key);
    if (strncmp(key, prefix, sizeof prefix - 1) != 0 || len >= sizeof text)
        goto bad;
    memcpy(text, key + sizeof prefix - 1, len - (sizeof prefix - 1) + 1);
    uint8_t kernel;
    tuned_dtype dt;
    if (split_fields(text, f, 8) != 8 || tuned__kernel_parse(f[0], &kernel) != 0 ||
        tuned_dtype_parse(f[1], &dt) != 0 ||
        sscanf(f[2], "%" SCNu64 "x%" SCNu64 "%c", &id->rows, &id->cols, &tail) != 2 ||
        tuned__fleet_layout_parse(f[3], &id->layout) != 0 || strlen(f[4]) >= TUNED__FLEET_NAME ||
        strlen(f[5]) >= TUNED__FLEET_NAME || strlen(f[6]) >= TUNED__FLEET_NAME ||
        strlen(f[7]) >= TUNED__FLEET_NAME)
        goto bad;
    id->kernel = kernel;
    id->dtype = (uint8_t)dt;
    snprintf(id->hwclass, sizeof id->hwclass, "%s", f[4]);
    snprintf(id->toolchain, sizeof id->toolchain, "%s", f[5]);
    snprintf(id->code, sizeof id->code, "%s", f[6]);
    snprintf(id->policy, sizeof id->policy, "%s", f[7]);
    return tuned__fleet_id_check(id, e);
bad:
    return tuned__errf(e, TUNED_EINVAL, "'%.200s' is not a record key: expected " TUNED__FLEET_PREFIX
                       ":rec:KERNEL:DTYPE:RxC:LAYOUT:HWCLASS:TOOLCHAIN:CODE:POLICY", key);
}

void tuned__fleet_index_key(char *buf, size_t n, uint8_t kernel, uint8_t dtype,
                            const char *hwclass)
{
    snprintf(buf, n, TUNED__FLEET_PREFIX ":idx:%s:%s:%s", tuned__kernel_name(kernel),
             tuned_dtype_name((tuned_dtype)dtype), hwclass);
}

void tuned__fleet_index_member(char *buf, size_t n, const tuned__fleet_id *id)
{
    char lb[8];
    snprintf(buf, n, "%" PRIu64 "x%" PRIu64 ":%s:%s:%s:%s", id->rows, id->cols,
             tuned__fleet_layout_text(id->layout, lb, sizeof lb), id->toolchain, id->code,
             id->policy);
}

int tuned__fleet_index_parse(const char *s, size_t len, tuned__fleet_shape *out)
{
    char text[TUNED__FLEET_KEY], tail;
    char *f[5];
    if (len >= sizeof text)
        return -1;
    memcpy(text, s, len);
    text[len] = '\0';
    memset(out, 0, sizeof *out);
    if (split_fields(text, f, 5) != 5 ||
        sscanf(f[0], "%" SCNu64 "x%" SCNu64 "%c", &out->rows, &out->cols, &tail) != 2 ||
        out->rows < 1 || tuned__wire_cols_cols(out->cols) < 1 || out->rows > MAX_DIM ||
        tuned__wire_cols_cols(out->cols) > MAX_DIM ||
        tuned__fleet_layout_parse(f[1], &out->layout) != 0 || !tuned__fleet_name_ok(f[2]) ||
        !tuned__fleet_name_ok(f[3]) || !tuned__fleet_policy_ok(f[4]))
        return -1;
    snprintf(out->toolchain, sizeof out->toolchain, "%s", f[2]);
    snprintf(out->code, sizeof out->code, "%s", f[3]);
    snprintf(out->policy, sizeof out->policy, "%s", f[4]);
    return 0;
}

void tuned__fleet_queue_key(char *buf, size_t n, const char *hwclass)
{
    snprintf(buf, n, TUNED__FLEET_PREFIX ":queue:%s", hwclass);
}

void tuned__fleet_queued_key(char *buf, size_t n, const tuned__fleet_id *id)
{
    char lb[8];
    snprintf(buf, n, TUNED__FLEET_PREFIX ":queued:%s:%s:%" PRIu64 "x%" PRIu64 ":%s:%s",
             tuned__kernel_name(id->kernel), tuned_dtype_name((tuned_dtype)id->dtype), id->rows,
             id->cols, tuned__fleet_layout_text(id->layout, lb, sizeof lb), id->hwclass);
}

int tuned__fleet_check_record(const void *text, size_t len, const tuned__fleet_id *want,
                              tuned__record *out, tuned__err *e)
{
    if (len > TUNED__FLEET_VALUE_MAX)
        return tuned__errf(e, TUNED_ESTORE, "value of %zu bytes is larger than a record", len);
    tuned__record r;
    if (tuned__record_decode(text, len, &r, e) != 0) {
        if (e != NULL)
            e->code = TUNED_ESTORE; /* another record version is as unservable as damage */
        return TUNED_ESTORE;
    }
    tuned__config cfg;
    if (tuned__config_parse_canonical(r.config, TUNED_ESTORE, &cfg, e) != 0)
        return TUNED_ESTORE;
    if (r.key.rows > MAX_DIM || tuned__wire_cols_cols(r.key.cols) > MAX_DIM)
        return tuned__errf(e, TUNED_ESTORE, "shape %" PRIu64 "x%" PRIu64 " is out of range",
                           r.key.rows, r.key.cols);
    /* Every tensor the record's kind moves (the daemon's and CLI's cap). */
    const tuned__kind_spec *kind = tuned__kind(r.key.kernel);
    double bytes = kind == NULL ? 0.0
                                : tuned__kind_bytes(kind, r.key.rows, r.key.cols,
                                                    tuned_dtype_size((tuned_dtype)r.key.dtype));
    if (bytes > (double)MAX_BYTES)
        return tuned__errf(e, TUNED_ESTORE, "shape %" PRIu64 "x%" PRIu64 " moves more than 1 TiB",
                           r.key.rows, r.key.cols);
    tuned__fleet_id got;
    tuned__fleet_id_from_record(&r, &got);
    char gs[TUNED__FLEET_KEY], ws[TUNED__FLEET_KEY];
    tuned__fleet_key_suffix(gs, sizeof gs, &got);
    tuned__fleet_key_suffix(ws, sizeof ws, want);
    if (strcmp(gs, ws) != 0)
        return tuned__errf(e, TUNED_ESTORE, "identity mismatch: the record is %s, its key says %s",
                           gs, ws);
    if (tuned__record_plausible(&r, TUNED_ESTORE, e) != 0)
        return TUNED_ESTORE;
    *out = r;
    return 0;
}

const char *tuned__fleet_status_name(tuned__fleet_status s)
{
    static const char *const names[TUNED__FLEET_STATUS_COUNT] = {
        "ok", "miss", "invalid", "timeout", "down", "denied", "error", "closed",
    };
    return (unsigned)s < TUNED__FLEET_STATUS_COUNT ? names[s] : NULL;
}

const char *tuned__fleet_state_name(tuned__fleet_state s)
{
    switch (s) {
    case TUNED__FLEET_STATE_DOWN: return "down";
    case TUNED__FLEET_STATE_CONNECTING: return "connecting";
    case TUNED__FLEET_STATE_CONNECTED: return "connected";
    }
    return NULL;
}
