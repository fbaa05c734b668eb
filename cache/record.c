/* record.c: the JSON form of a stored winner, its checks, and the
 * provenance comparison that decides whether it may be served (record.h,
 * store.h). */
#include "cache/record.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/hash.h"
#include "cache/json.h"
#include "cache/key.h"
#include "tuned.h"
#include "src/common/why.h"

#define WHAT "record"

uint64_t tuned__store_gpu_fingerprint(const char *gpu_identity)
{
    return tuned__fnv1a64(gpu_identity, strlen(gpu_identity), TUNED__FNV_SEED);
}

int tuned__record_check(const tuned__record *r, int code, tuned__err *e)
{
    time_t t;
    if (tuned__kernel_name(r->key.kernel) == NULL)
        return tuned__errf(e, code, WHAT ": unknown kernel id %u", (unsigned)r->key.kernel);
    if (tuned_dtype_name((tuned_dtype)r->key.dtype) == NULL)
        return tuned__errf(e, code, WHAT ": unknown dtype id %u", (unsigned)r->key.dtype);
    if (r->key.rows < 1 || r->key.cols < 1 || r->key.rows > INT64_MAX || r->key.cols > INT64_MAX)
        return tuned__errf(e, code, WHAT ": shape %" PRIu64 "x%" PRIu64 " is out of range",
                           r->key.rows, r->key.cols);
    if (strnlen(r->gpu, sizeof r->gpu) == sizeof r->gpu || r->gpu[0] == '\0')
        return tuned__errf(e, code, WHAT ": field \"gpu\": empty or not terminated");
    if (tuned__store_gpu_fingerprint(r->gpu) != r->key.gpu_fp)
        return tuned__errf(e, code,
                           WHAT ": gpu_fp %016" PRIx64 " is not the fingerprint of its gpu "
                           "identity (%016" PRIx64 ")",
                           r->key.gpu_fp, tuned__store_gpu_fingerprint(r->gpu));
    if (strnlen(r->config, sizeof r->config) == sizeof r->config || !tuned__key_config_ok(r->config))
        return tuned__errf(e, code, WHAT ": field \"config\": must be 1..%d printable characters "
                           "without spaces", TUNED__KEY_CONFIG_MAX);
    if (strnlen(r->gpu_name, sizeof r->gpu_name) == sizeof r->gpu_name || r->gpu_name[0] == '\0')
        return tuned__errf(e, code, WHAT ": field \"gpu_name\": empty or not terminated");
    if (strnlen(r->prov.policy, sizeof r->prov.policy) == sizeof r->prov.policy ||
        r->prov.policy[0] == '\0')
        return tuned__errf(e, code, WHAT ": field \"policy\": empty or not terminated");
    if (!(isfinite(r->median_us) && r->median_us > 0))
        return tuned__errf(e, code, WHAT ": field \"median_us\": %g is not a time > 0",
                           r->median_us);
    if (!(isfinite(r->copy_us) && r->copy_us >= 0) || !(isfinite(r->gbps) && r->gbps >= 0))
        return tuned__errf(e, code, WHAT ": copy_us and gbps must be finite numbers >= 0");
    if (strnlen(r->date, sizeof r->date) == sizeof r->date || tuned__date_parse(r->date, &t) != 0)
        return tuned__errf(e, code, WHAT ": field \"date\": not a date YYYY-MM-DDTHH:MM:SSZ");
    if (strnlen(r->tool_version, sizeof r->tool_version) == sizeof r->tool_version)
        return tuned__errf(e, code, WHAT ": field \"tool_version\": not terminated");
    return 0;
}

int tuned__record_plausible(const tuned__record *r, int code, tuned__err *e)
{
    /* An identity without '|' is not one tuned wrote (a test's label): its
     * name cannot be read back, so there is nothing to compare. */
    const char *bar = strchr(r->gpu, '|');
    if (bar != NULL && (strlen(r->gpu_name) != (size_t)(bar - r->gpu) ||
                        strncmp(r->gpu, r->gpu_name, (size_t)(bar - r->gpu)) != 0))
        return tuned__errf(e, code, WHAT ": gpu_name \"%s\" is not the GPU of its identity "
                           "\"%.*s\"", r->gpu_name, (int)(bar - r->gpu), r->gpu);
    if (!(r->copy_us >= TUNED__RECORD_MIN_US) || !(r->median_us >= TUNED__RECORD_MIN_US))
        return tuned__errf(e, code, WHAT ": median_us %g, copy_us %g: a measured time is at "
                           "least %.1f us (every tune times the copy first): not a possible "
                           "measurement", r->median_us, r->copy_us, TUNED__RECORD_MIN_US);
    /* The kind's bytes against the copy's; a kind this build does not know
     * is refused by tuned__record_check. */
    const tuned__kind_spec *kind = tuned__kind(r->key.kernel);
    size_t esize = tuned_dtype_size((tuned_dtype)r->key.dtype);
    uint64_t cols = tuned__wire_cols_cols(r->key.cols);
    double of_copy = kind != NULL ? tuned__kind_copies(kind, r->key.rows, r->key.cols, esize) : 1.0;
    double bytes = of_copy * 2.0 * (double)r->key.rows * (double)cols * (double)esize;
    /* a kind moving more than the copy (a backward's three tensors) is held
     * to the copy's bound all the same: measured, they beat 1.5 copies */
    double least = TUNED__RECORD_MIN_OF_COPY * (of_copy < 1.0 ? of_copy : 1.0);
    if (r->median_us < least * r->copy_us)
        return tuned__errf(e, code, WHAT ": median_us %g is faster than %.2f x its own copy_us "
                           "%g: not a possible measurement", r->median_us, least, r->copy_us);
    double bw = bytes / (r->median_us * 1e-6);
    if (bw > TUNED__RECORD_MAX_BYTES_PER_S)
        return tuned__errf(e, code, WHAT ": median_us %g moves %.0f bytes at %.1f TB/s, above "
                           "the %.0f TB/s of any GPU: not a possible measurement", r->median_us,
                           bytes, bw / 1e12, TUNED__RECORD_MAX_BYTES_PER_S / 1e12);
    if (r->gbps * 1e9 > TUNED__RECORD_MAX_BYTES_PER_S)
        return tuned__errf(e, code, WHAT ": gbps %g is above the %.0f TB/s of any GPU: not a "
                           "possible measurement", r->gbps, TUNED__RECORD_MAX_BYTES_PER_S / 1e12);
    return 0;
}

/* ---- writing ---- */

int tuned__record_to_json(const tuned__record *r, json_t **out, tuned__err *e)
{
    const char *kernel = tuned__kernel_name(r->key.kernel);
    const char *dtype = tuned_dtype_name((tuned_dtype)r->key.dtype);
    if (kernel == NULL || dtype == NULL)
        return tuned__errf(e, TUNED_EINVAL, WHAT ": unknown kernel %u or dtype %u",
                           (unsigned)r->key.kernel, (unsigned)r->key.dtype);
    json_t *o = json_object();
    if (o == NULL)
        return tuned__errf(e, TUNED_ENOMEM, WHAT ": out of memory");
    const tuned__provenance *p = &r->prov;
    int rc;
    if ((rc = tuned__json_set_uint(o, WHAT, "v", TUNED__RECORD_VERSION, e)) != 0
        || (rc = tuned__json_set_str(o, WHAT, "kernel", kernel, 32, e)) != 0
        || (rc = tuned__json_set_str(o, WHAT, "dtype", dtype, 16, e)) != 0
        || (rc = tuned__json_set_uint(o, WHAT, "rows", r->key.rows, e)) != 0
        || (rc = tuned__json_set_uint(o, WHAT, "cols", r->key.cols, e)) != 0
        || (rc = tuned__json_set_uint(o, WHAT, "layout", r->key.layout, e)) != 0
        || (rc = tuned__json_set_hex64(o, WHAT, "gpu_fp", r->key.gpu_fp, e)) != 0
        || (rc = tuned__json_set_str(o, WHAT, "config", r->config, sizeof r->config, e)) != 0
        || (rc = tuned__json_set_str(o, WHAT, "gpu", r->gpu, sizeof r->gpu, e)) != 0
        || (rc = tuned__json_set_str(o, WHAT, "gpu_name", r->gpu_name, sizeof r->gpu_name, e)) != 0
        || (rc = tuned__json_set_uint(o, WHAT, "cc_major", p->cc_major, e)) != 0
        || (rc = tuned__json_set_uint(o, WHAT, "cc_minor", p->cc_minor, e)) != 0
        || (rc = tuned__json_set_uint(o, WHAT, "sm_count", p->sm_count, e)) != 0
        || (rc = tuned__json_set_uint(o, WHAT, "mem_mib", p->mem_mib, e)) != 0
        || (rc = tuned__json_set_uint(o, WHAT, "driver", p->driver_version, e)) != 0
        || (rc = tuned__json_set_uint(o, WHAT, "nvrtc_major", p->nvrtc_major, e)) != 0
        || (rc = tuned__json_set_uint(o, WHAT, "nvrtc_minor", p->nvrtc_minor, e)) != 0
        || (rc = tuned__json_set_hex64(o, WHAT, "template_hash", p->template_hash, e)) != 0
        || (rc = tuned__json_set_str(o, WHAT, "policy", p->policy, sizeof p->policy, e)) != 0
        || (rc = tuned__json_set_num(o, WHAT, "median_us", r->median_us, e)) != 0
        || (rc = tuned__json_set_num(o, WHAT, "copy_us", r->copy_us, e)) != 0
        || (rc = tuned__json_set_num(o, WHAT, "gbps", r->gbps, e)) != 0
        || (rc = tuned__json_set_uint(o, WHAT, "evaluations", r->evaluations, e)) != 0
        || (rc = tuned__json_set_hex64(o, WHAT, "cubin", r->cubin, e)) != 0
        || (rc = tuned__json_set_str(o, WHAT, "date", r->date, sizeof r->date, e)) != 0
        || (rc = tuned__json_set_str(o, WHAT, "tool_version", r->tool_version,
                                     sizeof r->tool_version, e)) != 0) {
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
    rc = tuned__json_dump(o, WHAT, text, len, e);
    json_decref(o);
    return rc;
}

/* ---- reading ---- */

int tuned__record_from_json(const json_t *v, tuned__record *out, tuned__err *e)
{
    int rc = tuned__json_check_version(v, WHAT, TUNED__RECORD_VERSION, e);
    if (rc != 0)
        return rc;

    /* Zeroed so that array bytes past each string's NUL are deterministic. */
    tuned__record r;
    memset(&r, 0, sizeof r);
    tuned__provenance *p = &r.prov;
    char kernel[32], dtype[16];
    uint64_t layout, evaluations, cc_major, cc_minor, sm, drv, nv_major, nv_minor;
    if ((rc = tuned__json_get_str(v, WHAT, "kernel", kernel, sizeof kernel, e)) != 0
        || (rc = tuned__json_get_str(v, WHAT, "dtype", dtype, sizeof dtype, e)) != 0
        || (rc = tuned__json_get_uint(v, WHAT, "rows", INT64_MAX, &r.key.rows, e)) != 0
        || (rc = tuned__json_get_uint(v, WHAT, "cols", INT64_MAX, &r.key.cols, e)) != 0
        || (rc = tuned__json_get_uint(v, WHAT, "layout", UINT8_MAX, &layout, e)) != 0
        || (rc = tuned__json_get_hex64(v, WHAT, "gpu_fp", &r.key.gpu_fp, e)) != 0
        || (rc = tuned__json_get_str(v, WHAT, "config", r.config, sizeof r.config, e)) != 0
        || (rc = tuned__json_get_str(v, WHAT, "gpu", r.gpu, sizeof r.gpu, e)) != 0
        || (rc = tuned__json_get_str(v, WHAT, "gpu_name", r.gpu_name, sizeof r.gpu_name, e)) != 0
        || (rc = tuned__json_get_uint(v, WHAT, "cc_major", UINT32_MAX, &cc_major, e)) != 0
        || (rc = tuned__json_get_uint(v, WHAT, "cc_minor", UINT32_MAX, &cc_minor, e)) != 0
        || (rc = tuned__json_get_uint(v, WHAT, "sm_count", UINT32_MAX, &sm, e)) != 0
        || (rc = tuned__json_get_uint(v, WHAT, "mem_mib", INT64_MAX, &p->mem_mib, e)) != 0
        || (rc = tuned__json_get_uint(v, WHAT, "driver", UINT32_MAX, &drv, e)) != 0
        || (rc = tuned__json_get_uint(v, WHAT, "nvrtc_major", UINT32_MAX, &nv_major, e)) != 0
        || (rc = tuned__json_get_uint(v, WHAT, "nvrtc_minor", UINT32_MAX, &nv_minor, e)) != 0
        || (rc = tuned__json_get_hex64(v, WHAT, "template_hash", &p->template_hash, e)) != 0
        || (rc = tuned__json_get_str(v, WHAT, "policy", p->policy, sizeof p->policy, e)) != 0
        || (rc = tuned__json_get_num(v, WHAT, "median_us", &r.median_us, e)) != 0
        || (rc = tuned__json_get_num(v, WHAT, "copy_us", &r.copy_us, e)) != 0
        || (rc = tuned__json_get_num(v, WHAT, "gbps", &r.gbps, e)) != 0
        || (rc = tuned__json_get_uint(v, WHAT, "evaluations", UINT32_MAX, &evaluations, e)) != 0
        || (rc = tuned__json_get_hex64(v, WHAT, "cubin", &r.cubin, e)) != 0
        || (rc = tuned__json_get_str(v, WHAT, "date", r.date, sizeof r.date, e)) != 0
        || (rc = tuned__json_get_str(v, WHAT, "tool_version", r.tool_version,
                                     sizeof r.tool_version, e)) != 0)
        return rc;
    tuned_dtype dt;
    if (tuned__kernel_parse(kernel, &r.key.kernel) != 0)
        return tuned__errf(e, TUNED_ESTORE, WHAT ": field \"kernel\": unknown kernel \"%s\"",
                           kernel);
    if (tuned_dtype_parse(dtype, &dt) != 0 || strcmp(tuned_dtype_name(dt), dtype) != 0)
        return tuned__errf(e, TUNED_ESTORE,
                           WHAT ": field \"dtype\": \"%s\" is not fp16, bf16 or fp32", dtype);
    r.key.dtype = (uint8_t)dt;
    r.key.layout = (uint8_t)layout;
    p->cc_major = (uint32_t)cc_major;
    p->cc_minor = (uint32_t)cc_minor;
    p->sm_count = (uint32_t)sm;
    p->driver_version = (uint32_t)drv;
    p->nvrtc_major = (uint32_t)nv_major;
    p->nvrtc_minor = (uint32_t)nv_minor;
    r.evaluations = (uint32_t)evaluations;
    if ((rc = tuned__record_check(&r, TUNED_ESTORE, e)) != 0)
        return rc;
    *out = r;
    return 0;
}

int tuned__record_decode(const void *text, size_t len, tuned__record *out, tuned__err *e)
{
    json_t *v;
    int rc = tuned__json_load(text, len, WHAT, &v, e);
    if (rc != 0)
        return rc;
    rc = tuned__record_from_json(v, out, e);
    json_decref(v);
    return rc;
}

/* ---- provenance ---- */

bool tuned__record_exact(const tuned__record *r, const tuned__record *here, char *why, size_t n)
{
    tuned__why w = tuned__why_start(why, n);
    const tuned__store_key *a = &r->key, *b = &here->key;
    const tuned__provenance *p = &r->prov, *q = &here->prov;
    if (a->kernel != b->kernel || a->dtype != b->dtype || a->rows != b->rows || a->cols != b->cols)
        tuned__why_add(&w, "another shape or kernel");
    if (a->layout != b->layout)
        tuned__why_add(&w, "layout %u (here %u)", (unsigned)a->layout, (unsigned)b->layout);
    if (strcmp(r->gpu_name, here->gpu_name) != 0)
        tuned__why_add(&w, "GPU %s (here %s)", r->gpu_name, here->gpu_name);
    if (p->cc_major != q->cc_major || p->cc_minor != q->cc_minor)
        tuned__why_add(&w, "sm_%u%u (here sm_%u%u)", p->cc_major, p->cc_minor, q->cc_major, q->cc_minor);
    if (p->sm_count != q->sm_count)
        tuned__why_add(&w, "%u SMs (here %u)", p->sm_count, q->sm_count);
    if (p->mem_mib != q->mem_mib)
        tuned__why_add(&w, "%" PRIu64 " MiB (here %" PRIu64 ")", p->mem_mib, q->mem_mib);
    if (p->driver_version != q->driver_version)
        tuned__why_add(&w, "driver %u (here %u)", p->driver_version, q->driver_version);
    if (p->nvrtc_major != q->nvrtc_major || p->nvrtc_minor != q->nvrtc_minor)
        tuned__why_add(&w, "nvrtc %u.%u (here %u.%u)", p->nvrtc_major, p->nvrtc_minor, q->nvrtc_major,
                q->nvrtc_minor);
    if (p->template_hash != q->template_hash)
        tuned__why_add(&w, "templates %016" PRIx64 " (here %016" PRIx64 ")", p->template_hash,
                q->template_hash);
    if (strcmp(p->policy, q->policy) != 0)
        tuned__why_add(&w, "policy %s (here %s)", p->policy, q->policy);
    /* The identity string and its fingerprint spell the same facts; a
     * difference only there (another format, a collision) still counts. */
    if (w.count == 0 && (a->gpu_fp != b->gpu_fp || strcmp(r->gpu, here->gpu) != 0))
        tuned__why_add(&w, "GPU identity %s (here %s)", r->gpu, here->gpu);
    return w.count == 0;
}

/* ---- the identity's parts and the serving tiers ---- */

bool tuned__record_identity(const tuned__record *r, tuned__identity *out)
{
    tuned__ident_facts f;
    memset(&f, 0, sizeof f);
    const tuned__provenance *p = &r->prov;
    snprintf(f.gpu_name, sizeof f.gpu_name, "%s", r->gpu_name);
    f.cc_major = p->cc_major;
    f.cc_minor = p->cc_minor;
    f.sm_count = p->sm_count;
    f.mem_mib = p->mem_mib;
    f.driver_version = p->driver_version;
    f.nvrtc_major = p->nvrtc_major;
    f.nvrtc_minor = p->nvrtc_minor;
    f.template_hash = p->template_hash;
    snprintf(f.policy, sizeof f.policy, "%s", p->policy);
    tuned__identity_make(&f, out);
    return strcmp(out->full, r->gpu) == 0 && out->full_fp == r->key.gpu_fp;
}

const char *tuned__tier_name(tuned__tier t)
{
    switch (t) {
    case TUNED__TIER_NONE: return "none";
    case TUNED__TIER_COMPATIBLE: return "compatible";
    case TUNED__TIER_EXACT: return "exact";
    }
    return "?";
}

tuned__tier tuned__record_tier(const tuned__record *r, const tuned__identity *here, char *why,
                               size_t n)
{
    tuned__identity id;
    bool spelled = tuned__record_identity(r, &id);
    unsigned diff = tuned__identity_diff(&id, here, why, n);
    if (!spelled) {
        /* Its key and identity string say one system, its fields another. */
        if (why != NULL && n > 0)
            snprintf(why, n, "its identity %s is not the one its fields spell (%s)", r->gpu,
                     id.full);
        return TUNED__TIER_NONE;
    }
    if (diff == 0)
        return TUNED__TIER_EXACT;
    if ((diff & (TUNED__IDENT_HWCLASS | TUNED__IDENT_CODE)) == 0)
        return TUNED__TIER_COMPATIBLE;
    return TUNED__TIER_NONE;
}
