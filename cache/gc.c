/* gc.c: `tuned gc`: drops history entries and cubins that no best record
 * uses once they are older than a given age (store.h).
 *
 * One write transaction: first the set of cubin hashes the best records
 * name, then a walk over "history" (an entry is used when it is the
 * evaluation of its group's best config) and one over "cubins". Values
 * that do not decode are damage and are always dropped: the tuner would
 * only recompute them. A history entry of another version is not damage
 * but another tuned's (one sharing the store after an upgrade or a
 * downgrade), and is kept: its own gc judges it. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cache/json.h"
#include "cache/key.h"
#include "cache/record.h"
#include "cache/store.h"
#include "tuned.h"
#include "cache/txn.h"

typedef struct gc_arg {
    double max_age_s;
    time_t now;
    bool dry_run;
    tuned__gc_stats st;
    uint64_t *used;       /* cubin hashes named by best records, sorted */
    size_t n_used, cap_used;
} gc_arg;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Whether an entry of age_s seconds, used or not, stays. */
static bool keep(const gc_arg *a, bool used, double age_s)
{
    return used || (a->max_age_s > 0 && age_s < a->max_age_s);
}

static int used_visit(void *ctx, tuned__txn *t, const tuned__best_entry *b, tuned__err *e)
{
    gc_arg *a = ctx;
    if (b->r == NULL || b->r->cubin == 0)
        return 0;
    uint64_t *p = tuned__txn_grow(t, a->used, a->n_used, &a->cap_used, sizeof *a->used, "gc", e);
    if (p == NULL)
        return 1;
    a->used = p;
    a->used[a->n_used++] = b->r->cubin;
    return 0;
}

static void collect_used(tuned__txn *t, gc_arg *a, tuned__err *e)
{
    tuned__best_walk(t, NULL, 0, used_visit, a, e);
    if (a->n_used > 0)
        qsort(a->used, a->n_used, sizeof *a->used, cmp_u64);
}

/* The best config of a history group (the 28-byte best key under tag
 * 'B'); "" when there is none or it does not decode. Cached per group. */
typedef struct group_cache {
    uint8_t key[TUNED__KEY_LEN];
    int valid;
    char config[128];
} group_cache;

static const char *group_best(tuned__txn *t, group_cache *g, const tuned__store_key *key,
                              tuned__err *e)
{
    uint8_t kb[TUNED__KEY_LEN];
    tuned__key_encode(kb, TUNED__KEY_TAG_BEST, key);
    if (g->valid && memcmp(kb, g->key, sizeof kb) == 0)
        return g->config;
    memcpy(g->key, kb, sizeof kb);
    g->valid = 1;
    g->config[0] = '\0';
    MDB_val v;
    tuned__record r;
    tuned__err ignore = {0};
    if (tuned__txn_get(t, t->s->best, kb, sizeof kb, &v, e) == 1 &&
        tuned__best_decode(t->s, key, v.mv_data, v.mv_size, &r, &ignore) == 0)
        memcpy(g->config, r.config, sizeof g->config);
    return g->config;
}

/* Drops the entry under cur (counted by the caller). */
static void del(tuned__txn *t, MDB_cursor *cur, tuned__err *e)
{
    int rc = mdb_cursor_del(cur, 0);
    if (rc != 0)
        tuned__txn_fail(t, "mdb_cursor_del", rc, e);
}

typedef struct history_ctx {
    gc_arg *a;
    group_cache g;
} history_ctx;

static int history_visit(void *ctx, tuned__txn *t, MDB_cursor *cur, const MDB_val *k,
                         const MDB_val *v, tuned__err *e)
{
    history_ctx *c = ctx;
    gc_arg *a = c->a;
    tuned__store_eval ev;
    tuned__err ignore = {0};
    time_t when;
    int decoded = tuned__hist_decode(k, v, &ev, &ignore);
    if (decoded == TUNED_ESCHEMA) {
        a->st.evals_kept++;
        return 0;
    }
    if (decoded != 0 || tuned__date_parse(ev.date, &when) != 0) {
        a->st.damaged_removed++;
        del(t, cur, e);
        return 0;
    }
    bool used = strcmp(group_best(t, &c->g, &ev.key, e), ev.config) == 0;
    if (keep(a, used, difftime(a->now, when))) {
        a->st.evals_kept++;
    } else {
        a->st.evals_removed++;
        del(t, cur, e);
    }
    return 0;
}

static int cubin_visit(void *ctx, tuned__txn *t, MDB_cursor *cur, const MDB_val *k,
                       const MDB_val *v, tuned__err *e)
{
    gc_arg *a = ctx;
    uint64_t hash, created, size;
    tuned__err ignore = {0};
    if (tuned__key_decode_cubin(k->mv_data, k->mv_size, &hash, &ignore) != 0 ||
        tuned__cubin_header(v->mv_data, v->mv_size, &created, &size, &ignore) != 0) {
        a->st.damaged_removed++;
        del(t, cur, e);
        return 0;
    }
    bool used = a->n_used > 0 &&
                bsearch(&hash, a->used, a->n_used, sizeof *a->used, cmp_u64) != NULL;
    if (keep(a, used, difftime(a->now, (time_t)created))) {
        a->st.cubins_kept++;
    } else {
        a->st.cubins_removed++;
        a->st.cubin_bytes_removed += size;
        del(t, cur, e);
    }
    return 0;
}

static void gc_write(tuned__txn *t, void *arg, tuned__err *e)
{
    gc_arg *a = arg;
    memset(&a->st, 0, sizeof a->st); /* a run after a map grow starts over */
    a->n_used = 0;
    collect_used(t, a, e);
    history_ctx h = {.a = a};
    tuned__txn_walk(t, t->s->hist, NULL, 0, history_visit, &h, e);
    tuned__txn_walk(t, t->s->cubins, NULL, 0, cubin_visit, a, e);
    if (a->dry_run)
        tuned__txn_discard(t);
}

int tuned__store_gc(tuned__store *s, double max_age_days, time_t now, bool dry_run,
                    tuned__gc_stats *st, tuned__err *e)
{
    memset(st, 0, sizeof *st);
    if (!(max_age_days >= 0) || max_age_days > 1e6)
        return tuned__errf(e, TUNED_EINVAL, "store %s: gc: %g days is not an age", s->path,
                           max_age_days);
    gc_arg a = {.max_age_s = max_age_days * 86400.0, .now = now, .dry_run = dry_run};
    int rc = tuned__store_write(s, gc_write, &a, e);
    free(a.used);
    if (rc == 0)
        *st = a.st;
    return rc;
}
