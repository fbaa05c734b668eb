/* best.c: the "best" database: one winning config per (kernel, dtype,
 * rows, cols, layout, GPU fingerprint) (store.h).
 *
 * Every value read is decoded and checked (record.c) and must name the key
 * it sits under, so a value moved, damaged or written by a foreign tool is
 * an error naming the key, never a wrong answer. get_best serves only
 * records of this build's measurement policy; find_compatible the best
 * record of a shape for the caller's hardware class and kernel code, any
 * toolchain; find_shape, each_best and forget see every record. tuned__best_walk() decodes each entry of a walk
 * once, for the walks here, in gc.c and in export.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/key.h"
#include "cache/record.h"
#include "cache/store.h"
#include "tuned.h"
#include "cache/txn.h"

typedef struct put_arg {
    const uint8_t *key;
    const char *text;
    size_t len;
    /* put_best_unless_better: the record written, the policy a stored
     * record must have to keep its place; whether it was written */
    const tuned__record *r;
    const char *policy;
    bool only_better, written;
} put_arg;

/* Whether the value under a->key, if any, keeps its place against a->r:
 * a record of the policy asked for (any, for NULL), as fast or faster.
 * Damage, another version or another policy gives way. */
static bool stored_is_better(tuned__txn *t, const put_arg *a, tuned__err *e)
{
    MDB_val v;
    int found = tuned__txn_get(t, t->s->best, a->key, TUNED__KEY_LEN, &v, e);
    if (found <= 0)
        return false; /* none, or an error the transaction now carries */
    tuned__record old;
    tuned__err ignore = {0};
    if (tuned__best_decode(t->s, &a->r->key, v.mv_data, v.mv_size, &old, &ignore) != 0)
        return false;
    if (a->policy != NULL && strcmp(old.prov.policy, a->policy) != 0)
        return false;
    return old.median_us <= a->r->median_us;
}

static void put_write(tuned__txn *t, void *arg, tuned__err *e)
{
    put_arg *a = arg;
    a->written = false;
    if (a->only_better && (stored_is_better(t, a, e) || t->rc != 0))
        return;
    tuned__txn_put(t, t->s->best, a->key, TUNED__KEY_LEN, a->text, a->len, e);
    a->written = t->rc == 0;
}

static int put_best(tuned__store *s, put_arg *a, tuned__err *e)
{
    const tuned__record *r = a->r;
    char ks[160];
    if (s->readonly)
        return tuned__errf(e, TUNED_EINVAL, "store %s: opened read-only", s->path);
    char *text;
    size_t len;
    int rc = tuned__record_check(r, TUNED_EINVAL, e);
    if (rc == 0)
        rc = tuned__record_encode(r, &text, &len, e);
    if (rc != 0) {
        tuned__store_key_str(ks, sizeof ks, &r->key);
        return tuned__err_prefix(e, rc, "store %s: %s: ", s->path, ks);
    }
    uint8_t key[TUNED__KEY_LEN];
    tuned__key_encode(key, TUNED__KEY_TAG_BEST, &r->key);
    a->key = key;
    a->text = text;
    a->len = len;
    rc = tuned__store_write(s, put_write, a, e);
    free(text);
    return rc;
}

int tuned__store_put_best(tuned__store *s, const tuned__record *r, tuned__err *e)
{
    put_arg a = {.r = r};
    return put_best(s, &a, e);
}

int tuned__store_put_best_unless_better(tuned__store *s, const tuned__record *r,
                                        const char *policy, bool *written, tuned__err *e)
{
    put_arg a = {.r = r, .policy = policy, .only_better = true};
    int rc = put_best(s, &a, e);
    *written = rc == 0 && a.written;
    return rc;
}

static int key_equal(const tuned__store_key *a, const tuned__store_key *b)
{
    return a->kernel == b->kernel && a->dtype == b->dtype && a->rows == b->rows
           && a->cols == b->cols && a->layout == b->layout && a->gpu_fp == b->gpu_fp;
}

int tuned__best_decode(const tuned__store *s, const tuned__store_key *k, const void *data,
                       size_t size, tuned__record *out, tuned__err *e)
{
    char ks[160];
    tuned__record r;
    int rc = tuned__record_decode(data, size, &r, e);
    if (rc != 0) {
        tuned__store_key_str(ks, sizeof ks, k);
        return tuned__err_prefix(e, rc, "store %s: %s: ", s->path, ks);
    }
    if (!key_equal(&r.key, k)) {
        tuned__store_key_str(ks, sizeof ks, k);
        return tuned__errf(e, TUNED_ESTORE, "store %s: %s: record names another key", s->path,
                           ks);
    }
    *out = r;
    return 0;
}

typedef struct get_arg {
    const tuned__store_key *key;
    const char *policy;
    tuned__record *out;
} get_arg;

static void get_read(tuned__txn *t, void *arg, tuned__err *e)
{
    const get_arg *a = arg;
    char ks[160];
    uint8_t kb[TUNED__KEY_LEN];
    tuned__key_encode(kb, TUNED__KEY_TAG_BEST, a->key);
    MDB_val v;
    int found = tuned__txn_get(t, t->s->best, kb, sizeof kb, &v, e);
    tuned__record r;
    if (found == 0) {
        tuned__store_key_str(ks, sizeof ks, a->key);
        tuned__txn_error(t, tuned__errf(e, TUNED_ENOTFOUND, "store %s: no record for %s",
                                        t->s->path, ks));
    } else if (found == 1) {
        int rc = tuned__best_decode(t->s, a->key, v.mv_data, v.mv_size, &r, e);
        if (rc == 0 && a->policy != NULL && strcmp(r.prov.policy, a->policy) != 0) {
            tuned__store_key_str(ks, sizeof ks, a->key);
            rc = tuned__errf(e, TUNED_ENOTFOUND,
                             "store %s: %s: the record was measured under policy %s, this "
                             "build measures under %s: not served",
                             t->s->path, ks, r.prov.policy, a->policy);
        }
        if (rc != 0)
            tuned__txn_error(t, rc);
        else
            *a->out = r;
    }
}

int tuned__store_get_best(tuned__store *s, const tuned__store_key *key, tuned__record *out,
                          const char *policy, tuned__err *e)
{
    int ready = tuned__store_dbs(s, e);
    if (ready < 0)
        return ready;
    if (ready == 0) {
        char ks[160];
        tuned__store_key_str(ks, sizeof ks, key);
        return tuned__errf(e, TUNED_ENOTFOUND, "store %s: no record for %s", s->path, ks);
    }
    get_arg a = {.key = key, .policy = policy, .out = out};
    return tuned__store_read(s, get_read, &a, e);
}

/* ---- walking the records ---- */

typedef struct best_walk_ctx {
    tuned__best_fn visit;
    void *ctx;
} best_walk_ctx;

static int decode_visit(void *ctx, tuned__txn *t, MDB_cursor *cur, const MDB_val *k,
                        const MDB_val *v, tuned__err *e)
{
    const best_walk_ctx *w = ctx;
    tuned__record r;
    tuned__err why = {0};
    tuned__best_entry b = {.cur = cur, .why = &why};
    b.key_ok = tuned__key_decode(k->mv_data, k->mv_size, TUNED__KEY_TAG_BEST, &b.key, &why) == 0;
    if (!b.key_ok)
        memset(&b.key, 0, sizeof b.key);
    else if (tuned__best_decode(t->s, &b.key, v->mv_data, v->mv_size, &r, &why) == 0)
        b.r = &r;
    return w->visit(w->ctx, t, &b, e);
}

void tuned__best_walk(tuned__txn *t, const uint8_t *prefix, size_t plen, tuned__best_fn visit,
                      void *ctx, tuned__err *e)
{
    best_walk_ctx w = {.visit = visit, .ctx = ctx};
    tuned__txn_walk(t, t->s->best, prefix, plen, decode_visit, &w, e);
}

/* Fails t with what b->why says (the store's path before a key's message:
 * a value's names it already). */
static void fail_entry(tuned__txn *t, const tuned__best_entry *b, tuned__err *e)
{
    if (e != NULL)
        *e = *b->why;
    tuned__txn_error(t, b->key_ok ? b->why->code
                                  : tuned__err_prefix(e, b->why->code, "store %s: ", t->s->path));
}

typedef struct shape_ctx {
    const uint8_t *prefix;
    tuned__record *out;
    size_t cap, count;
} shape_ctx;

static int shape_visit(void *ctx, tuned__txn *t, const tuned__best_entry *b, tuned__err *e)
{
    shape_ctx *c = ctx;
    if (b->r == NULL && (!b->key_ok || c->count < c->cap)) {
        fail_entry(t, b, e);
        return 1;
    }
    if (c->count < c->cap)
        c->out[c->count] = *b->r;
    c->count++;
    return 0;
}

static void shape_read(tuned__txn *t, void *arg, tuned__err *e)
{
    shape_ctx *c = arg;
    c->count = 0;
    tuned__best_walk(t, c->prefix, TUNED__KEY_SHAPE_LEN, shape_visit, c, e);
}

int tuned__store_find_shape(tuned__store *s, uint8_t kernel, uint8_t dtype, uint64_t rows,
                            uint64_t cols, tuned__record *out, size_t cap, size_t *n,
                            tuned__err *e)
{
    *n = 0;
    if (cap > 0 && out == NULL)
        return tuned__errf(e, TUNED_EINVAL, "store %s: find_shape: no output array", s->path);
    int ready = tuned__store_dbs(s, e);
    if (ready <= 0)
        return ready;
    uint8_t prefix[TUNED__KEY_SHAPE_LEN];
    tuned__key_encode_shape(prefix, TUNED__KEY_TAG_BEST, kernel, dtype, rows, cols);
    shape_ctx c = {.prefix = prefix, .out = out, .cap = cap};
    int rc = tuned__store_read(s, shape_read, &c, e);
    if (rc == 0)
        *n = c.count;
    return rc;
}

/* ---- the best record of a shape for another toolchain ---- */

typedef struct compat_ctx {
    const tuned__store_key *key;
    const tuned__identity *here;
    tuned__store_accept_fn accept;
    void *user;
    bool found;
    tuned__tier tier;
    int rank[4]; /* the best's: tier, same policy, same NVRTC, same driver */
    tuned__record best;
} compat_ctx;

/* Whether (rank, date) beats the best so far: each rank, then the newer date
 * (ISO 8601 UTC of one length: text order is time order). */
static bool compat_better(const compat_ctx *c, const int rank[4], const char *date)
{
    if (!c->found)
        return true;
    for (int i = 0; i < 4; i++)
        if (rank[i] != c->rank[i])
            return rank[i] > c->rank[i];
    return strcmp(date, c->best.date) > 0;
}

static int compat_visit(void *ctx, tuned__txn *t, const tuned__best_entry *b, tuned__err *e)
{
    (void)t;
    (void)e;
    compat_ctx *c = ctx;
    /* A damaged record of the shape is not this lookup's failure: list and
     * verify name it; here it just does not serve. */
    if (b->r == NULL || b->r->key.layout != c->key->layout)
        return 0;
    tuned__tier tier = tuned__record_tier(b->r, c->here, NULL, 0);
    if (tier == TUNED__TIER_NONE || (c->accept != NULL && !c->accept(c->user, b->r, tier)))
        return 0;
    const tuned__provenance *p = &b->r->prov;
    const tuned__ident_facts *q = &c->here->f;
    int rank[4] = {tier == TUNED__TIER_EXACT, strcmp(p->policy, q->policy) == 0,
                   p->nvrtc_major == q->nvrtc_major && p->nvrtc_minor == q->nvrtc_minor,
                   p->driver_version == q->driver_version};
    if (compat_better(c, rank, b->r->date)) {
        c->found = true;
        c->tier = tier;
        memcpy(c->rank, rank, sizeof rank);
        c->best = *b->r;
    }
    return 0;
}

typedef struct compat_arg {
    const uint8_t *prefix;
    compat_ctx *c;
} compat_arg;

static void compat_read(tuned__txn *t, void *arg, tuned__err *e)
{
    compat_arg *a = arg;
    a->c->found = false; /* a retried read starts over */
    tuned__best_walk(t, a->prefix, TUNED__KEY_SHAPE_LEN, compat_visit, a->c, e);
}

int tuned__store_find_compatible(tuned__store *s, const tuned__store_key *key,
                                 const tuned__identity *here, tuned__store_accept_fn accept,
                                 void *ctx, tuned__record *out, tuned__tier *tier, tuned__err *e)
{
    char ks[160];
    *tier = TUNED__TIER_NONE;
    int ready = tuned__store_dbs(s, e);
    if (ready < 0)
        return ready;
    compat_ctx *c = calloc(1, sizeof *c); /* two records: not on a caller's stack */
    if (c == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "store %s: out of memory", s->path);
    c->key = key;
    c->here = here;
    c->accept = accept;
    c->user = ctx;
    int rc = 0;
    if (ready > 0) {
        uint8_t prefix[TUNED__KEY_SHAPE_LEN];
        tuned__key_encode_shape(prefix, TUNED__KEY_TAG_BEST, key->kernel, key->dtype, key->rows,
                                key->cols);
        compat_arg a = {.prefix = prefix, .c = c};
        rc = tuned__store_read(s, compat_read, &a, e);
    }
    if (rc == 0 && !c->found) {
        tuned__store_key_str(ks, sizeof ks, key);
        rc = tuned__errf(e, TUNED_ENOTFOUND,
                         "store %s: no record of %s's shape for hardware class %s and code %s",
                         s->path, ks, here->hwclass.text, here->code.text);
    }
    if (rc == 0) {
        *out = c->best;
        *tier = c->tier;
    }
    free(c);
    return rc;
}

/* ---- every record, for maintenance ---- */

static const uint8_t best_tag = TUNED__KEY_TAG_BEST;

typedef struct all_arg {
    tuned__best_fn visit;
    void *ctx;
} all_arg;

static void all_read(tuned__txn *t, void *arg, tuned__err *e)
{
    const all_arg *a = arg;
    tuned__best_walk(t, &best_tag, 1, a->visit, a->ctx, e);
}

/* visit for every best record, in one read snapshot; 0 on an empty store. */
static int walk_best(tuned__store *s, tuned__best_fn visit, void *ctx, tuned__err *e)
{
    int ready = tuned__store_dbs(s, e);
    if (ready <= 0)
        return ready;
    all_arg a = {.visit = visit, .ctx = ctx};
    return tuned__store_read(s, all_read, &a, e);
}

typedef struct each_ctx {
    const tuned__store_filter *f;
    tuned__store_each_fn fn;
    void *user;
    int stopped;
} each_ctx;

static int each_visit(void *ctx, tuned__txn *t, const tuned__best_entry *b, tuned__err *e)
{
    each_ctx *c = ctx;
    const tuned__store_filter *f = c->f;
    int rc = 0;
    if (!b->key_ok) {
        /* Not a key of ours at all: shown only when nothing is filtered. */
        bool all = f == NULL || (!f->have_shape && !f->have_dtype && !f->have_kernel &&
                                 (!f->gpu || !f->gpu[0]));
        rc = all ? c->fn(c->user, &b->key, NULL, b->why->msg) : 0;
    } else if (tuned__filter_match(f, &b->key, b->r)) {
        rc = c->fn(c->user, &b->key, b->r, b->r != NULL ? NULL : b->why->msg);
    }
    if (rc != 0) {
        c->stopped = rc;
        tuned__errf(e, rc, "store %s: stopped by the caller", t->s->path);
        return 1;
    }
    return 0;
}

int tuned__store_each_best(tuned__store *s, const tuned__store_filter *f, tuned__store_each_fn fn,
                           void *ctx, tuned__err *e)
{
    each_ctx c = {.f = f, .fn = fn, .user = ctx};
    int rc = walk_best(s, each_visit, &c, e);
    return rc != 0 ? rc : c.stopped;
}

/* ---- enumeration for the daemon ---- */

typedef struct scan_ctx {
    tuned__store_scan_fn fn;
    void *user;
    size_t *skipped;
    int stop;
} scan_ctx;

static int scan_visit(void *ctx, tuned__txn *t, const tuned__best_entry *b, tuned__err *e)
{
    (void)t;
    (void)e;
    scan_ctx *c = ctx;
    if (b->r == NULL) {
        if (c->skipped != NULL)
            (*c->skipped)++;
        return 0;
    }
    c->stop = c->fn(c->user, b->r);
    return c->stop;
}

int tuned__store_scan(tuned__store *s, tuned__store_scan_fn fn, void *ctx, size_t *skipped,
                      tuned__err *e)
{
    if (skipped != NULL)
        *skipped = 0;
    scan_ctx c = {.fn = fn, .user = ctx, .skipped = skipped};
    int rc = walk_best(s, scan_visit, &c, e);
    return rc != 0 ? rc : c.stop;
}

/* ---- forgetting ---- */

typedef struct forget_arg {
    const tuned__store_filter *f;
    bool dry_run;
    tuned__record *removed; /* grown with realloc; damaged ones have gpu_name "" */
    size_t n, cap;
} forget_arg;

static int forget_visit(void *ctx, tuned__txn *t, const tuned__best_entry *b, tuned__err *e)
{
    forget_arg *a = ctx;
    if (!b->key_ok)
        return 0; /* not ours to name: left for a person with mdb_dump */
    if (!tuned__filter_match(a->f, &b->key, b->r))
        return 0;
    tuned__record *p = tuned__txn_grow(t, a->removed, a->n, &a->cap, sizeof *a->removed,
                                       "forget", e);
    if (p == NULL)
        return 1;
    a->removed = p;
    tuned__record *r = &a->removed[a->n++];
    if (b->r != NULL) {
        *r = *b->r;
    } else {
        memset(r, 0, sizeof *r); /* damaged: gpu_name "" */
        r->key = b->key;
    }
    if (!a->dry_run) {
        int rc = mdb_cursor_del(b->cur, 0);
        if (rc != 0) {
            tuned__txn_fail(t, "mdb_cursor_del", rc, e);
            return 1;
        }
    }
    return 0;
}

static void forget_write(tuned__txn *t, void *arg, tuned__err *e)
{
    forget_arg *a = arg;
    a->n = 0; /* a run after a map grow starts over */
    tuned__best_walk(t, &best_tag, 1, forget_visit, a, e);
    if (a->dry_run)
        tuned__txn_discard(t); /* a dry run changes nothing */
}

int tuned__store_forget(tuned__store *s, const tuned__store_filter *f, bool dry_run,
                        tuned__store_each_fn fn, void *ctx, size_t *removed, tuned__err *e)
{
    *removed = 0;
    forget_arg a = {.f = f, .dry_run = dry_run};
    int rc = tuned__store_write(s, forget_write, &a, e);
    if (rc == 0) {
        *removed = a.n;
        for (size_t i = 0; fn != NULL && i < a.n; i++)
            if (fn(ctx, &a.removed[i].key, a.removed[i].gpu_name[0] ? &a.removed[i] : NULL,
                   a.removed[i].gpu_name[0] ? NULL : "damaged record") != 0)
                break;
    }
    free(a.removed);
    return rc;
}

typedef struct forget_key_arg {
    const uint8_t *kb;
    int found;
} forget_key_arg;

static void forget_key_write(tuned__txn *t, void *arg, tuned__err *e)
{
    forget_key_arg *a = arg;
    a->found = tuned__txn_del(t, t->s->best, a->kb, TUNED__KEY_LEN, e);
}

int tuned__store_forget_key(tuned__store *s, const tuned__store_key *key, tuned__err *e)
{
    uint8_t kb[TUNED__KEY_LEN];
    tuned__key_encode(kb, TUNED__KEY_TAG_BEST, key);
    forget_key_arg a = {.kb = kb};
    int rc = tuned__store_write(s, forget_key_write, &a, e);
    if (rc == 0 && a.found == 0) {
        char ks[160];
        tuned__store_key_str(ks, sizeof ks, key);
        return tuned__errf(e, TUNED_ENOTFOUND, "store %s: no record for %s", s->path, ks);
    }
    return rc;
}
