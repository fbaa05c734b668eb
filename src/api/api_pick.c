/* api_pick.c: the slow path's first two questions, in the order a call
 * asks them: which config (exact, compatible, nearest, default; the
 * identity's parts decide, src/common/identity.h) and which cubin
 * (compile cache or NVRTC). The third, which launch, is launch.c's, shared
 * with the evaluator that measured the config, so the timing holds.
 *
 * The daemon's `get` (src/daemon/requests.c) answers by the same tiers and
 * store functions, so that a process and the daemon answer the same for
 * the same store. A compatible pick is only a candidate: api.c checks it
 * against the float64 reference before it serves it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/codegen/source.h"
#include "src/api/api.h"
#include "src/tuner/space.h"
#include "cache/key.h"
#include "src/tuner/policy.h"

/* ---- exact, compatible, nearest, default ---- */

typedef struct nearest_scan {
    const tuned__space *sp;
    const tuned__identity *here;
    double best_d;
    bool best_own;      /* the best so far is of this GPU's whole identity */
    bool found;
    tuned__record best;
    tuned__config config;
} nearest_scan;

static int nearest_one(void *ctx, const tuned__record *r)
{
    nearest_scan *n = ctx;
    const tuned__shape *s = &n->sp->shape;
    uint64_t cols = tuned__wire_cols_cols(r->key.cols);
    if (r->key.kernel != tuned__shape_kernel(s) || r->key.dtype != (uint8_t)s->dtype ||
        !tuned__key_params_match(&r->key, s) || r->key.rows == 0 || cols == 0 ||
        (r->key.rows == s->rows && cols == s->cols))
        return 0;
    double d = 2.0 * fabs(log((double)cols / (double)s->cols)) +
               fabs(log((double)r->key.rows / (double)s->rows));
    bool own = r->key.gpu_fp == n->here->full_fp;
    if (n->found && !(d < n->best_d || (d == n->best_d && own && !n->best_own)))
        return 0;
    /* The same hardware class, any toolchain: a record that does not spell
     * its own identity is not trusted to say which class it is. */
    tuned__identity id;
    if (!own && (!tuned__record_identity(r, &id) ||
                 strcmp(id.hwclass.text, n->here->hwclass.text) != 0))
        return 0;
    tuned__config c;
    if (tuned__config_parse(r->config, &c, NULL) != 0 || !tuned__space_valid(n->sp, &c, NULL, 0))
        return 0;
    n->best_d = d;
    n->best_own = own;
    n->best = *r;
    n->config = c;
    n->found = true;
    return 0;
}

typedef struct compat_accept {
    const tuned__space *sp;
    const tuned__api_veto *veto;
    char passed[192]; /* why the last candidate passed over was */
} compat_accept;

static bool compat_ok(void *ctx, const tuned__record *r, tuned__tier tier)
{
    (void)tier;
    compat_accept *a = ctx;
    tuned__config c;
    if (tuned__config_parse(r->config, &c, NULL) != 0 || !tuned__space_valid(a->sp, &c, NULL, 0)) {
        snprintf(a->passed, sizeof a->passed, "compatible record's config %s is not valid here",
                 r->config);
        return false;
    }
    if (a->veto != NULL && a->veto->refused != NULL && a->veto->refused(a->veto->ctx, r)) {
        snprintf(a->passed, sizeof a->passed,
                 "compatible record's config %s failed its check here", r->config);
        return false;
    }
    return true;
}

static void from_record(tuned__api_pick *out, const tuned__record *r, tuned_source source)
{
    out->source = source;
    out->median_us = r->median_us;
    out->record_rows = r->key.rows;
    out->record_cols = tuned__wire_cols_cols(r->key.cols);
    out->record_key = r->key;
}

int tuned__api_pick_config(tuned__store *store, const tuned__gpu *gpu, const tuned__shape *shape,
                           const tuned__api_veto *veto, tuned__api_pick *out, tuned__err *e)
{
    memset(out, 0, sizeof *out);
    /* Rules only: whether a stored config fits this shape, and the first
     * seed, need no enumeration of the space. */
    tuned__space sp;
    int rc = tuned__space_rules(&sp, shape, gpu->cc_major * 10 + gpu->cc_minor, gpu->sm_count, e);
    if (rc != 0)
        return rc;
    if (store != NULL) {
        /* The transaction id and generation first: a record committed
         * after them makes the next recheck look again. */
        if ((rc = tuned__store_txnid(store, &out->seen.txnid, e)) != 0 ||
            (rc = tuned__store_generation(store, &out->seen.generation, e)) != 0)
            return rc;
        tuned__identity here;
        tuned__gpu_identity(gpu, tuned__shape_kernel(shape), TUNED__MEASURE_POLICY, &here);
        tuned__store_key key = tuned__store_key_of(shape, here.full_fp);
        tuned__record rec;
        tuned__err miss = {0};
        rc = tuned__store_get_best(store, &key, &rec, TUNED__MEASURE_POLICY, &miss);
        if (rc == 0 && tuned__config_parse(rec.config, &out->config, NULL) == 0 &&
            tuned__space_valid(&sp, &out->config, NULL, 0)) {
            from_record(out, &rec, TUNED_SOURCE_EXACT);
            return 0;
        }
        if (rc != 0 && rc != TUNED_ENOTFOUND)
            return tuned__errf(e, rc, "%s", miss.msg);
        /* Another toolchain or policy on this hardware, the same code. */
        compat_accept acc = {.sp = &sp, .veto = veto};
        tuned__tier tier;
        rc = tuned__store_find_compatible(store, &key, &here, compat_ok, &acc, &rec, &tier, &miss);
        if (rc != 0 && rc != TUNED_ENOTFOUND)
            return tuned__errf(e, rc, "%s", miss.msg);
        snprintf(out->note, sizeof out->note, "%s", acc.passed);
        if (rc == 0 && tuned__config_parse(rec.config, &out->config, NULL) == 0) {
            if (tier == TUNED__TIER_EXACT) {
                from_record(out, &rec, TUNED_SOURCE_EXACT);
                out->note[0] = '\0';
                return 0;
            }
            char why[200];
            tuned__record_tier(&rec, &here, why, sizeof why);
            from_record(out, &rec, TUNED_SOURCE_COMPATIBLE);
            snprintf(out->note, sizeof out->note, "compatible: %s", why);
            return 0;
        }
        nearest_scan n = {.sp = &sp, .here = &here, .best_d = INFINITY};
        if ((rc = tuned__store_scan(store, nearest_one, &n, NULL, e)) != 0)
            return rc;
        if (n.found) {
            out->config = n.config;
            from_record(out, &n.best, TUNED_SOURCE_NEAREST);
            return 0;
        }
    }
    out->source = TUNED_SOURCE_DEFAULT;
    return tuned__space_default(&sp, &out->config, e);
}

bool tuned__api_store_moved(tuned__store *store, tuned__api_seen *seen)
{
    uint64_t txnid = 0, generation = 0;
    if (tuned__store_txnid(store, &txnid, NULL) != 0 || txnid == seen->txnid ||
        tuned__store_generation(store, &generation, NULL) != 0)
        return false;
    if (generation != seen->generation)
        return true;
    seen->txnid = txnid;
    return false;
}

/* ---- the cubin ---- */

int tuned__api_cubin(const tuned__nvrtc *n, tuned__store *store, bool writable,
                     const tuned__config *c, const tuned__shape *s, bool aligned, unsigned flags,
                     int arch,
                     tuned__blob *out, uint64_t *hash, bool *from_cache, tuned__err *e)
{
    memset(out, 0, sizeof *out);
    *from_cache = false;
    tuned__codegen_opts opts = {.unaligned = !aligned, .flags = flags};
    char *src = NULL;
    int rc = tuned__source_kernel(c, s, &opts, &src, e);
    if (rc != 0)
        return rc;
    *hash = tuned__nvrtc_cache_key(n, src, arch, TUNED__NVRTC_CUBIN);
    if (store != NULL) {
        void *data = NULL;
        size_t size = 0;
        /* A damaged cached cubin (TUNED_ESTORE) is recompiled and replaced. */
        if (tuned__store_get_cubin(store, *hash, &data, &size, NULL) == 0) {
            out->data = data;
            out->size = size;
            *from_cache = true;
            free(src);
            return 0;
        }
    }
    char text[TUNED__CONFIG_TEXT], name[TUNED__CONFIG_TEXT + 16];
    tuned__config_format(c, text, sizeof text);
    const tuned__kind_spec *kind = tuned__shape_spec(s);
    snprintf(name, sizeof name, "%s %s", kind != NULL ? kind->name : "?", text);
    rc = tuned__nvrtc_compile(n, src, name, arch, TUNED__NVRTC_CUBIN, out, e);
    free(src);
    if (rc == 0 && store != NULL && writable)
        /* A cache that cannot take it costs a compile next time, nothing else. */
        tuned__store_put_cubin(store, *hash, out->data, out->size, NULL);
    return rc;
}
