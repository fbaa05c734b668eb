/* best.c: the "best" database: one winning config per (kernel, dtype,
 * rows, cols, layout, GPU fingerprint) (store.h).
 *
 * Every value read is decoded and checked (record.c) and must name the key
 * it sits under, so a value moved, damaged or written by a foreign tool is
 * an error naming the key, never a wrong answer. get_best serves only
 * records of this build's measurement policy; find_shape, each_best and
 * forget see every record. */
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
} put_arg;

static void put_write(tuned__txn *t, void *arg, tuned__err *e)
{
    const put_arg *a = arg;
    tuned__txn_put(t, t->s->best, a->key, TUNED__KEY_LEN, a->text, a->len, e);
}

int tuned__store_put_best(tuned__store *s, const tuned__record *r, tuned__err *e)
{
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
    put_arg a = {.key = key, .text = text, .len = len};
    rc = tuned__store_write(s, put_write, &a, e);
    free(text);
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

int tuned__store_get_best(tuned__store *s, const tuned__store_key *key, tuned__record *out,
                          const char *policy, tuned__err *e)
{
    char ks[160];
    int ready = tuned__store_dbs(s, e);
    if (ready < 0)
        return ready;
    if (ready == 0) {
        tuned__store_key_str(ks, sizeof ks, key);
        return tuned__errf(e, TUNED_ENOTFOUND, "store %s: no record for %s", s->path, ks);
    }
    uint8_t kb[TUNED__KEY_LEN];
    tuned__key_encode(kb, TUNED__KEY_TAG_BEST, key);
    tuned__txn t;
    int rc = tuned__txn_begin(&t, s, MDB_RDONLY, e);
    if (rc != 0)
        return rc;
    MDB_val v;
    int found = tuned__txn_get(&t, s->best, kb, sizeof kb, &v, e);
    tuned__record r;
    if (found == 0) {
        tuned__store_key_str(ks, sizeof ks, key);
        t.rc = tuned__errf(e, TUNED_ENOTFOUND, "store %s: no record for %s", s->path, ks);
    } else if (found == 1 && (t.rc = tuned__best_decode(s, key, v.mv_data, v.mv_size, &r, e)) == 0) {
        if (policy != NULL && strcmp(r.prov.policy, policy) != 0) {
            tuned__store_key_str(ks, sizeof ks, key);
            t.rc = tuned__errf(e, TUNED_ENOTFOUND,
                               "store %s: %s: the record was measured under policy %s, this "
                               "build measures under %s: not served",
                               s->path, ks, r.prov.policy, policy);
        } else {
            *out = r;
        }
    }
    return tuned__txn_end(&t, e);
}

/* Walks the best records from prefix (plen bytes) while keys start with
 * it; calls visit for each. A visit return of nonzero stops the walk. */
typedef int (*visit_fn)(void *ctx, tuned__txn *t, MDB_cursor *cur, const MDB_val *k,
                        const MDB_val *v, tuned__err *e);

static void walk(tuned__txn *t, const uint8_t *prefix, size_t plen, visit_fn visit, void *ctx,
                 tuned__err *e)
{
    MDB_cursor *cur = tuned__txn_cursor(t, t->s->best, e);
    if (cur == NULL)
        return;
    MDB_val k = {.mv_size = plen, .mv_data = (void *)prefix};
    MDB_val v;
    int rc = mdb_cursor_get(cur, &k, &v, plen > 0 ? MDB_SET_RANGE : MDB_FIRST);
    while (rc == 0) {
        if (k.mv_size < plen || memcmp(k.mv_data, prefix, plen) != 0)
            break;
        if (visit(ctx, t, cur, &k, &v, e) != 0)
            break;
        rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    }
    if (rc != 0 && rc != MDB_NOTFOUND)
        tuned__txn_fail(t, "mdb_cursor_get", rc, e);
    mdb_cursor_close(cur);
}

typedef struct shape_ctx {
    tuned__record *out;
    size_t cap, count;
} shape_ctx;

static int shape_visit(void *ctx, tuned__txn *t, MDB_cursor *cur, const MDB_val *k,
                       const MDB_val *v, tuned__err *e)
{
    (void)cur;
    shape_ctx *c = ctx;
    tuned__store_key key;
    int rc = tuned__key_decode(k->mv_data, k->mv_size, TUNED__KEY_TAG_BEST, &key, e);
    if (rc != 0) {
        tuned__txn_error(t, tuned__err_prefix(e, rc, "store %s: ", t->s->path));
        return 1;
    }
    if (c->count < c->cap &&
        (rc = tuned__best_decode(t->s, &key, v->mv_data, v->mv_size, &c->out[c->count], e)) != 0) {
        tuned__txn_error(t, rc);
        return 1;
    }
    c->count++;
    return 0;
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
    tuned__txn t;
    int rc = tuned__txn_begin(&t, s, MDB_RDONLY, e);
    if (rc != 0)
        return rc;
    shape_ctx c = {.out = out, .cap = cap};
    walk(&t, prefix, sizeof prefix, shape_visit, &c, e);
    rc = tuned__txn_end(&t, e);
    if (rc == 0)
        *n = c.count;
    return rc;
}

/* ---- every record, for maintenance ---- */

typedef struct each_ctx {
    const tuned__store_filter *f;
    tuned__store_each_fn fn;
    void *user;
    int stopped;
} each_ctx;

static int each_visit(void *ctx, tuned__txn *t, MDB_cursor *cur, const MDB_val *k,
                      const MDB_val *v, tuned__err *e)
{
    (void)cur;
    each_ctx *c = ctx;
    tuned__store_key key;
    tuned__record r;
    tuned__err why = {0};
    int rc = tuned__key_decode(k->mv_data, k->mv_size, TUNED__KEY_TAG_BEST, &key, &why);
    if (rc != 0) {
        /* Not a key of ours at all: shown only when nothing is filtered. */
        memset(&key, 0, sizeof key);
        const tuned__store_filter *f = c->f;
        bool all = f == NULL || (!f->have_shape && !f->have_dtype && (!f->gpu || !f->gpu[0]));
        rc = all ? c->fn(c->user, &key, NULL, why.msg) : 0;
    } else if (tuned__best_decode(t->s, &key, v->mv_data, v->mv_size, &r, &why) != 0) {
        rc = tuned__filter_match(c->f, &key, NULL) ? c->fn(c->user, &key, NULL, why.msg) : 0;
    } else {
        rc = tuned__filter_match(c->f, &key, &r) ? c->fn(c->user, &key, &r, NULL) : 0;
    }
    if (rc != 0) {
        c->stopped = rc;
        tuned__errf(e, rc, "store %s: stopped by the caller", t->s->path);
        return 1;
    }
    return 0;
}

/* visit for every best record, in one read snapshot; 0 on an empty store. */
static int walk_best(tuned__store *s, visit_fn visit, void *ctx, tuned__err *e)
{
    int ready = tuned__store_dbs(s, e);
    if (ready <= 0)
        return ready;
    uint8_t tag = TUNED__KEY_TAG_BEST;
    tuned__txn t;
    int rc = tuned__txn_begin(&t, s, MDB_RDONLY, e);
    if (rc != 0)
        return rc;
    walk(&t, &tag, 1, visit, ctx, e);
    return tuned__txn_end(&t, e);
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

static int scan_visit(void *ctx, tuned__txn *t, MDB_cursor *cur, const MDB_val *k,
                      const MDB_val *v, tuned__err *e)
{
    (void)cur;
    (void)e;
    scan_ctx *c = ctx;
    tuned__store_key key;
    tuned__record r;
    tuned__err ignored = {0};
    if (tuned__key_decode(k->mv_data, k->mv_size, TUNED__KEY_TAG_BEST, &key, &ignored) != 0 ||
        tuned__best_decode(t->s, &key, v->mv_data, v->mv_size, &r, &ignored) != 0) {
        if (c->skipped != NULL)
            (*c->skipped)++;
        return 0;
    }
    c->stop = c->fn(c->user, &r);
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

static int forget_visit(void *ctx, tuned__txn *t, MDB_cursor *cur, const MDB_val *k,
                        const MDB_val *v, tuned__err *e)
{
    forget_arg *a = ctx;
    tuned__record r;
    tuned__err why = {0};
    memset(&r, 0, sizeof r);
    if (tuned__key_decode(k->mv_data, k->mv_size, TUNED__KEY_TAG_BEST, &r.key, &why) != 0)
        return 0; /* not ours to name: left for a person with mdb_dump */
    int ok = tuned__best_decode(t->s, &r.key, v->mv_data, v->mv_size, &r, &why) == 0;
    if (!tuned__filter_match(a->f, &r.key, ok ? &r : NULL))
        return 0;
    if (!ok)
        memset(r.gpu_name, 0, sizeof r.gpu_name);
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        tuned__record *p = realloc(a->removed, cap * sizeof *p);
        if (p == NULL) {
            tuned__txn_error(t, tuned__errf(e, TUNED_ENOMEM, "store %s: forget: out of memory",
                                            t->s->path));
            return 1;
        }
        a->removed = p;
        a->cap = cap;
    }
    a->removed[a->n++] = r;
    if (!a->dry_run) {
        int rc = mdb_cursor_del(cur, 0);
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
    uint8_t tag = TUNED__KEY_TAG_BEST;
    walk(t, &tag, 1, forget_visit, a, e);
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
