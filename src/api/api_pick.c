/* api_pick.c: the slow path's first two questions, in the order a call
 * asks them: which config (exact, nearest, default) and which cubin
 * (compile cache or NVRTC). The third, which launch, is launch.c's, shared
 * with the evaluator that measured the config, so the timing holds.
 *
 * The config choice follows the daemon's `get` (src/daemon/requests.c), so
 * that a process and the daemon answer the same for the same store. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/codegen/source.h"
#include "src/api/api.h"
#include "src/tuner/space.h"
#include "cache/key.h"
#include "src/tuner/policy.h"

/* ---- exact, nearest, default ---- */

typedef struct nearest_scan {
    const tuned__space *sp;
    uint64_t fp;
    double best_d;
    bool found;
    tuned__record best;
    tuned__config config;
} nearest_scan;

static int nearest_one(void *ctx, const tuned__record *r)
{
    nearest_scan *n = ctx;
    const tuned__shape *s = &n->sp->shape;
    if (r->key.gpu_fp != n->fp || r->key.kernel != TUNED__KERNEL_SOFTMAX ||
        r->key.dtype != (uint8_t)s->dtype || r->key.rows == 0 || r->key.cols == 0 ||
        (r->key.rows == s->rows && r->key.cols == s->cols))
        return 0;
    double d = 2.0 * fabs(log((double)r->key.cols / (double)s->cols)) +
               fabs(log((double)r->key.rows / (double)s->rows));
    if (!(d < n->best_d))
        return 0;
    tuned__config c;
    if (tuned__config_parse(r->config, &c, NULL) != 0 || !tuned__space_valid(n->sp, &c, NULL, 0))
        return 0;
    n->best_d = d;
    n->best = *r;
    n->config = c;
    n->found = true;
    return 0;
}

int tuned__api_pick_config(tuned__store *store, const tuned__gpu *gpu, const tuned__shape *shape,
                           tuned__api_pick *out, tuned__err *e)
{
    memset(out, 0, sizeof *out);
    /* Rules only: whether a stored config fits this shape, and the first
     * seed, need no enumeration of the space. */
    tuned__space sp;
    int rc = tuned__space_rules(&sp, shape, gpu->cc_major * 10 + gpu->cc_minor, gpu->sm_count, e);
    if (rc != 0)
        return rc;
    if (store != NULL) {
        /* The transaction id first: a record committed after it makes the
         * next recheck look again. */
        if ((rc = tuned__store_txnid(store, &out->txnid, e)) != 0)
            return rc;
        tuned__store_key key = tuned__store_key_softmax(shape, gpu->fingerprint);
        tuned__record rec;
        tuned__err miss = {0};
        rc = tuned__store_get_best(store, &key, &rec, TUNED__MEASURE_POLICY, &miss);
        if (rc == 0 && tuned__config_parse(rec.config, &out->config, NULL) == 0 &&
            tuned__space_valid(&sp, &out->config, NULL, 0)) {
            out->source = TUNED_SOURCE_EXACT;
            out->median_us = rec.median_us;
            out->record_rows = rec.key.rows;
            out->record_cols = rec.key.cols;
            return 0;
        }
        if (rc != 0 && rc != TUNED_ENOTFOUND)
            return tuned__errf(e, rc, "%s", miss.msg);
        nearest_scan n = {.sp = &sp, .fp = gpu->fingerprint, .best_d = INFINITY};
        if ((rc = tuned__store_scan(store, nearest_one, &n, NULL, e)) != 0)
            return rc;
        if (n.found) {
            out->config = n.config;
            out->source = TUNED_SOURCE_NEAREST;
            out->median_us = n.best.median_us;
            out->record_rows = n.best.key.rows;
            out->record_cols = n.best.key.cols;
            return 0;
        }
    }
    out->source = TUNED_SOURCE_DEFAULT;
    return tuned__space_default(&sp, &out->config, e);
}

/* ---- the cubin ---- */

int tuned__api_cubin(const tuned__nvrtc *n, tuned__store *store, bool writable,
                     const tuned__config *c, const tuned__shape *s, bool aligned, int arch,
                     tuned__blob *out, uint64_t *hash, bool *from_cache, tuned__err *e)
{
    memset(out, 0, sizeof *out);
    *from_cache = false;
    tuned__codegen_opts opts = {.unaligned = !aligned};
    char *src = NULL;
    int rc = tuned__source_softmax(c, s, &opts, &src, e);
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
    snprintf(name, sizeof name, "softmax %s", text);
    rc = tuned__nvrtc_compile(n, src, name, arch, TUNED__NVRTC_CUBIN, out, e);
    free(src);
    if (rc == 0 && store != NULL && writable)
        /* A cache that cannot take it costs a compile next time, nothing else. */
        tuned__store_put_cubin(store, *hash, out->data, out->size, NULL);
    return rc;
}
