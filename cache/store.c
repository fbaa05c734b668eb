/* store.c: the LMDB store of tuned results (API in store.h).
 *
 * One MDB_env per process, opened once with MDB_NOTLS so that daemon worker
 * threads can each run their own transactions. The named databases "meta"
 * and "best" are created in one start-up write transaction that also checks
 * the schema version, and are never closed. Keys come from key.c, values
 * from record.c.
 *
 * The map starts at 64 MiB and grows on demand: a write that hits
 * MDB_MAP_FULL aborts, doubles the map and retries; a transaction that
 * finds MDB_MAP_RESIZED (another process grew it) adopts the new size and
 * retries. LMDB requires that no transaction of this process be live while
 * the map is resized, so every transaction holds s->resize shared and a
 * resize holds it exclusive.
 *
 * Every LMDB return code goes through mdb_fail(), the one place MDB_* and
 * errno values become TUNED_E* codes with "store PATH: mdb_xxx: reason". */
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "../src/common/hash.h"
#include "key.h"
#include "record.h"
#include "store_internal.h"
#include "tuned.h"

#define STORE_MAXDBS 4        /* "meta", "best", and room to add one later */
#define STORE_MAX_RETRIES 16  /* map grows or adoptions for one operation */

struct tuned__store {
    MDB_env *env;
    MDB_dbi meta;
    MDB_dbi best;
    int have_best;            /* 0 only for a read-only open of a store without dbs */
    int readonly;
    int lock_ready;           /* resize was initialized */
    pthread_rwlock_t resize;  /* txns hold it shared, map resizes exclusive */
    size_t mapsize;           /* current map size; written only under resize held exclusive */
    char path[];
};

/* ---- errors ---- */

/* The one translation of LMDB (and errno) codes returned by mdb_* calls. */
static int mdb_fail(tuned__err *e, const char *path, const char *call, int rc)
{
    int code;
    switch (rc) {
    case MDB_NOTFOUND:
    case ENOENT:
        code = TUNED_ENOTFOUND;
        break;
    case MDB_VERSION_MISMATCH:
        code = TUNED_ESCHEMA;
        break;
    case ENOMEM:
        code = TUNED_ENOMEM;
        break;
    default:
        code = TUNED_ESTORE;
        break;
    }
    return tuned__errf(e, code, "store %s: %s: %s", path, call, mdb_strerror(rc));
}

static int lock_fail(tuned__err *e, const char *path, const char *call, int rc)
{
    return tuned__errf(e, TUNED_ESTORE, "store %s: %s: %s", path, call, strerror(rc));
}

static void key_str(char *buf, size_t size, const tuned__store_key *k)
{
    snprintf(buf, size, "key kernel %u dtype %u %" PRIu64 "x%" PRIu64 " gpu %016" PRIx64,
             (unsigned)k->kernel, (unsigned)k->dtype, k->rows, k->cols, k->gpu_fp);
}

/* ---- transactions ---- */

/* A transaction with a sticky error: the first failure wins, later calls
 * are no-ops, and the end aborts instead of committing. */
typedef struct store_txn {
    tuned__store *s;
    MDB_txn *txn;
    size_t seen_mapsize;  /* s->mapsize when it began */
    int mdb_rc;           /* the first LMDB failure, 0 if none */
    int rc;               /* the first failure as a TUNED_E* code, 0 if none */
} store_txn;

static void stx_fail(store_txn *t, const char *call, int mdb_rc, tuned__err *e)
{
    if (t->rc != 0)
        return;
    t->mdb_rc = mdb_rc;
    t->rc = mdb_fail(e, t->s->path, call, mdb_rc);
}

/* Adopts a map size another process set, or doubles the map when it is
 * still the seen size. Takes s->resize exclusive: no txn of ours is live. */
static int map_resize(tuned__store *s, size_t seen, int grow, tuned__err *e)
{
    MDB_envinfo info;
    int urc;
    int rc = pthread_rwlock_wrlock(&s->resize);
    if (rc != 0)
        return lock_fail(e, s->path, "pthread_rwlock_wrlock", rc);
    if (s->mapsize != seen)
        goto out; /* another thread resized it meanwhile */
    if ((rc = mdb_env_set_mapsize(s->env, 0)) != 0) {
        rc = mdb_fail(e, s->path, "mdb_env_set_mapsize", rc);
        goto out;
    }
    if ((rc = mdb_env_info(s->env, &info)) != 0) {
        rc = mdb_fail(e, s->path, "mdb_env_info", rc);
        goto out;
    }
    if (grow && info.me_mapsize <= seen) {
        if (seen > SIZE_MAX / 2) {
            rc = tuned__errf(e, TUNED_ESTORE, "store %s: map of %zu bytes is full and cannot grow",
                             s->path, seen);
            goto out;
        }
        if ((rc = mdb_env_set_mapsize(s->env, seen * 2)) != 0) {
            rc = mdb_fail(e, s->path, "mdb_env_set_mapsize", rc);
            goto out;
        }
        if ((rc = mdb_env_info(s->env, &info)) != 0) {
            rc = mdb_fail(e, s->path, "mdb_env_info", rc);
            goto out;
        }
    }
    s->mapsize = info.me_mapsize;
    rc = 0;
out:
    urc = pthread_rwlock_unlock(&s->resize);
    if (urc != 0 && rc == 0)
        rc = lock_fail(e, s->path, "pthread_rwlock_unlock", urc);
    return rc;
}

/* Begins a transaction (flags 0 or MDB_RDONLY) holding s->resize shared,
 * adopting a map grown by another process on MDB_MAP_RESIZED. */
static int stx_begin(store_txn *t, tuned__store *s, unsigned flags, tuned__err *e)
{
    memset(t, 0, sizeof *t);
    t->s = s;
    for (int tries = 0;; tries++) {
        int rc = pthread_rwlock_rdlock(&s->resize);
        if (rc != 0)
            return lock_fail(e, s->path, "pthread_rwlock_rdlock", rc);
        t->seen_mapsize = s->mapsize;
        rc = mdb_txn_begin(s->env, NULL, flags, &t->txn);
        if (rc == 0)
            return 0;
        int urc = pthread_rwlock_unlock(&s->resize);
        if (urc != 0)
            return lock_fail(e, s->path, "pthread_rwlock_unlock", urc);
        if (rc != MDB_MAP_RESIZED || tries >= STORE_MAX_RETRIES)
            return mdb_fail(e, s->path, "mdb_txn_begin", rc);
        if ((rc = map_resize(s, t->seen_mapsize, 0, e)) != 0)
            return rc;
    }
}

/* Commits (or, after a failure, aborts) and releases s->resize. Returns the
 * transaction's first failure or the commit's. */
static int stx_end(store_txn *t, tuned__err *e)
{
    if (t->rc == 0) {
        int rc = mdb_txn_commit(t->txn);
        if (rc != 0)
            stx_fail(t, "mdb_txn_commit", rc, e);
    } else {
        mdb_txn_abort(t->txn);
    }
    t->txn = NULL;
    int urc = pthread_rwlock_unlock(&t->s->resize);
    if (urc != 0 && t->rc == 0)
        t->rc = lock_fail(e, t->s->path, "pthread_rwlock_unlock", urc);
    return t->rc;
}

static void stx_put(store_txn *t, MDB_dbi dbi, const void *k, size_t kn, const void *v,
                    size_t vn, tuned__err *e)
{
    if (t->rc != 0)
        return;
    MDB_val key = {.mv_size = kn, .mv_data = (void *)k};
    MDB_val val = {.mv_size = vn, .mv_data = (void *)v};
    int rc = mdb_put(t->txn, dbi, &key, &val, 0);
    if (rc != 0)
        stx_fail(t, "mdb_put", rc, e);
}

/* Runs fn in a write transaction; on MDB_MAP_FULL aborts, grows the map
 * and runs it again. */
typedef void (*write_fn)(store_txn *t, void *arg, tuned__err *e);

static int write_txn(tuned__store *s, write_fn fn, void *arg, tuned__err *e)
{
    for (int tries = 0;; tries++) {
        store_txn t;
        int rc = stx_begin(&t, s, 0, e);
        if (rc != 0)
            return rc;
        fn(&t, arg, e);
        rc = stx_end(&t, e);
        if (rc == 0 || t.mdb_rc != MDB_MAP_FULL || tries >= STORE_MAX_RETRIES)
            return rc;
        if ((rc = map_resize(s, t.seen_mapsize, 1, e)) != 0)
            return rc;
        tuned__err_clear(e);
    }
}

/* ---- opening ---- */

/* mkdir -p path with mode 0700 for each directory it creates. */
static int mkdir_p(const char *path, tuned__err *e)
{
    size_t n = strlen(path);
    char *buf = malloc(n + 1);
    if (buf == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "store %s: out of memory", path);
    memcpy(buf, path, n + 1);
    int rc = 0;
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        struct stat st;
        if (mkdir(buf, 0700) != 0) {
            int err = errno;
            /* EEXIST, or EACCES/EROFS on a directory that already exists. */
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
                if (err == EEXIST)
                    err = ENOTDIR;
                if (i == n)
                    rc = tuned__errf(e, TUNED_ESTORE, "store %s: cannot create directory: %s",
                                     path, strerror(err));
                else
                    rc = tuned__errf(e, TUNED_ESTORE, "store %s: cannot create directory %s: %s",
                                     path, buf, strerror(err));
                break;
            }
        }
        buf[i] = saved;
    }
    free(buf);
    return rc;
}

/* For READONLY: the directory and its data file must exist. */
static int check_readonly_path(const char *path, tuned__err *e)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        int err = errno;
        return tuned__errf(e, err == ENOENT ? TUNED_ENOTFOUND : TUNED_ESTORE,
                           "store %s: cannot open read-only: %s", path, strerror(err));
    }
    if (!S_ISDIR(st.st_mode))
        return tuned__errf(e, TUNED_ESTORE, "store %s: not a directory", path);
    size_t n = strlen(path);
    char *data = malloc(n + sizeof "/data.mdb");
    if (data == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "store %s: out of memory", path);
    memcpy(data, path, n);
    memcpy(data + n, "/data.mdb", sizeof "/data.mdb");
    int rc = 0;
    if (stat(data, &st) != 0) {
        int err = errno;
        rc = tuned__errf(e, err == ENOENT ? TUNED_ENOTFOUND : TUNED_ESTORE,
                         "store %s: cannot open read-only: data.mdb: %s", path, strerror(err));
    }
    free(data);
    return rc;
}

/* Checks meta "schema" against ours. In a writable open it also writes
 * "schema" into a new store and "writer" (our version) into any store. */
static void check_schema(store_txn *t, int writable, tuned__err *e)
{
    if (t->rc != 0)
        return;
    tuned__store *s = t->s;
    static const char schema_key[] = "schema";
    static const char writer_key[] = "writer";
    char want[24];
    int want_n = snprintf(want, sizeof want, "%d", TUNED__STORE_SCHEMA);

    MDB_val k = {.mv_size = sizeof schema_key - 1, .mv_data = (void *)schema_key};
    MDB_val v;
    int rc = mdb_get(t->txn, s->meta, &k, &v);
    if (rc == MDB_NOTFOUND) {
        /* A new store: this transaction creates it. */
        if (writable)
            stx_put(t, s->meta, schema_key, sizeof schema_key - 1, want, (size_t)want_n, e);
    } else if (rc != 0) {
        stx_fail(t, "mdb_get", rc, e);
        return;
    } else {
        const char *p = v.mv_data;
        uint64_t have = 0;
        size_t i = 0;
        for (; i < v.mv_size && i < 10 && p[i] >= '0' && p[i] <= '9'; i++)
            have = have * 10 + (uint64_t)(p[i] - '0');
        if (v.mv_size == 0 || i != v.mv_size) {
            t->rc = tuned__errf(e, TUNED_ESTORE,
                                "store %s: meta \"schema\" is not a decimal number", s->path);
            return;
        }
        if (have != TUNED__STORE_SCHEMA) {
            t->rc = tuned__errf(e, TUNED_ESCHEMA,
                                "store %s: schema version %" PRIu64 ", this build uses %d",
                                s->path, have, TUNED__STORE_SCHEMA);
            return;
        }
    }
    if (writable)
        stx_put(t, s->meta, writer_key, sizeof writer_key - 1, TUNED_VERSION_STRING,
                sizeof TUNED_VERSION_STRING - 1, e);
}

/* The start-up write transaction: creates both dbs, checks the schema. */
static void setup_write(store_txn *t, void *arg, tuned__err *e)
{
    (void)arg;
    tuned__store *s = t->s;
    int rc = mdb_dbi_open(t->txn, "meta", MDB_CREATE, &s->meta);
    if (rc != 0) {
        stx_fail(t, "mdb_dbi_open meta", rc, e);
        return;
    }
    if ((rc = mdb_dbi_open(t->txn, "best", MDB_CREATE, &s->best)) != 0) {
        stx_fail(t, "mdb_dbi_open best", rc, e);
        return;
    }
    check_schema(t, 1, e);
}

/* Read-only: missing dbs mean an empty store, not an error. */
static int setup_read(tuned__store *s, tuned__err *e)
{
    store_txn t;
    int rc = stx_begin(&t, s, MDB_RDONLY, e);
    if (rc != 0)
        return rc;
    rc = mdb_dbi_open(t.txn, "meta", 0, &s->meta);
    if (rc == 0) {
        check_schema(&t, 0, e);
        if (t.rc == 0) {
            rc = mdb_dbi_open(t.txn, "best", 0, &s->best);
            if (rc == 0)
                s->have_best = 1;
            else if (rc != MDB_NOTFOUND)
                stx_fail(&t, "mdb_dbi_open best", rc, e);
        }
    } else if (rc != MDB_NOTFOUND) {
        stx_fail(&t, "mdb_dbi_open meta", rc, e);
    }
    /* Committed, not aborted: dbi handles opened in it must outlive it. */
    return stx_end(&t, e);
}

int tuned__store_open_mapsize(tuned__store **out, const char *path, unsigned flags,
                              size_t mapsize, tuned__err *e)
{
    *out = NULL;
    if (path == NULL || path[0] == '\0')
        return tuned__errf(e, TUNED_EINVAL, "store: empty path");
    if ((flags & ~(unsigned)TUNED__STORE_READONLY) != 0)
        return tuned__errf(e, TUNED_EINVAL, "store %s: unknown flags 0x%x", path, flags);
    if (mapsize == 0)
        mapsize = TUNED__STORE_MAPSIZE;
    int readonly = (flags & TUNED__STORE_READONLY) != 0;

    int rc = readonly ? check_readonly_path(path, e) : mkdir_p(path, e);
    if (rc != 0)
        return rc;

    size_t n = strlen(path);
    tuned__store *s = calloc(1, sizeof *s + n + 1);
    if (s == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "store %s: out of memory", path);
    memcpy(s->path, path, n + 1);
    s->readonly = readonly;

    if ((rc = pthread_rwlock_init(&s->resize, NULL)) != 0) {
        rc = lock_fail(e, path, "pthread_rwlock_init", rc);
        goto fail;
    }
    s->lock_ready = 1;

    if ((rc = mdb_env_create(&s->env)) != 0) {
        s->env = NULL;
        rc = mdb_fail(e, path, "mdb_env_create", rc);
        goto fail;
    }
    if ((rc = mdb_env_set_mapsize(s->env, mapsize)) != 0) {
        rc = mdb_fail(e, path, "mdb_env_set_mapsize", rc);
        goto fail;
    }
    if ((rc = mdb_env_set_maxdbs(s->env, STORE_MAXDBS)) != 0) {
        rc = mdb_fail(e, path, "mdb_env_set_maxdbs", rc);
        goto fail;
    }
    unsigned env_flags = MDB_NOTLS | (readonly ? MDB_RDONLY : 0);
    if ((rc = mdb_env_open(s->env, path, env_flags, 0600)) != 0) {
        rc = mdb_fail(e, path, "mdb_env_open", rc);
        goto fail;
    }
    int dead;
    if ((rc = mdb_reader_check(s->env, &dead)) != 0) {
        rc = mdb_fail(e, path, "mdb_reader_check", rc);
        goto fail;
    }
    MDB_envinfo info;
    if ((rc = mdb_env_info(s->env, &info)) != 0) {
        rc = mdb_fail(e, path, "mdb_env_info", rc);
        goto fail;
    }
    s->mapsize = info.me_mapsize;

    if (readonly) {
        rc = setup_read(s, e);
    } else {
        rc = write_txn(s, setup_write, NULL, e);
        s->have_best = rc == 0;
    }
    if (rc != 0)
        goto fail;
    *out = s;
    return 0;

fail:
    tuned__store_close(s);
    return rc;
}

int tuned__store_open(tuned__store **out, const char *path, unsigned flags, tuned__err *e)
{
    return tuned__store_open_mapsize(out, path, flags, TUNED__STORE_MAPSIZE, e);
}

void tuned__store_close(tuned__store *s)
{
    if (s == NULL)
        return;
    if (s->env != NULL)
        mdb_env_close(s->env);
    if (s->lock_ready)
        pthread_rwlock_destroy(&s->resize);
    free(s);
}

/* ---- records ---- */

typedef struct put_arg {
    const uint8_t *key;
    const char *text;
    size_t len;
} put_arg;

static void put_write(store_txn *t, void *arg, tuned__err *e)
{
    const put_arg *a = arg;
    stx_put(t, t->s->best, a->key, TUNED__KEY_LEN, a->text, a->len, e);
}

int tuned__store_put_best(tuned__store *s, const tuned__record *r, tuned__err *e)
{
    if (s->readonly)
        return tuned__errf(e, TUNED_EINVAL, "store %s: opened read-only", s->path);
    char *text;
    size_t len;
    int rc = tuned__record_encode(r, &text, &len, e);
    if (rc != 0) {
        char ks[128];
        key_str(ks, sizeof ks, &r->key);
        return tuned__err_prefix(e, rc, "store %s: %s: ", s->path, ks);
    }
    uint8_t key[TUNED__KEY_LEN];
    tuned__key_encode(key, TUNED__KEY_TAG_BEST, &r->key);
    put_arg a = {.key = key, .text = text, .len = len};
    rc = write_txn(s, put_write, &a, e);
    free(text);
    return rc;
}

static int key_equal(const tuned__store_key *a, const tuned__store_key *b)
{
    return a->kernel == b->kernel && a->dtype == b->dtype && a->rows == b->rows
           && a->cols == b->cols && a->gpu_fp == b->gpu_fp;
}

/* Decodes a value found under key k; it must carry that same key. */
static int decode_value(tuned__store *s, const tuned__store_key *k, const MDB_val *v,
                        tuned__record *out, tuned__err *e)
{
    char ks[128];
    tuned__record r;
    int rc = tuned__record_decode(v->mv_data, v->mv_size, &r, e);
    if (rc != 0) {
        key_str(ks, sizeof ks, k);
        return tuned__err_prefix(e, rc, "store %s: %s: ", s->path, ks);
    }
    if (!key_equal(&r.key, k)) {
        key_str(ks, sizeof ks, k);
        return tuned__errf(e, TUNED_ESTORE, "store %s: %s: record names another key", s->path,
                           ks);
    }
    *out = r;
    return 0;
}

int tuned__store_get_best(tuned__store *s, const tuned__store_key *key, tuned__record *out,
                          tuned__err *e)
{
    char ks[128];
    if (!s->have_best) {
        key_str(ks, sizeof ks, key);
        return tuned__errf(e, TUNED_ENOTFOUND, "store %s: no record for %s", s->path, ks);
    }
    uint8_t kb[TUNED__KEY_LEN];
    tuned__key_encode(kb, TUNED__KEY_TAG_BEST, key);
    store_txn t;
    int rc = stx_begin(&t, s, MDB_RDONLY, e);
    if (rc != 0)
        return rc;
    MDB_val k = {.mv_size = sizeof kb, .mv_data = kb};
    MDB_val v;
    rc = mdb_get(t.txn, s->best, &k, &v);
    if (rc == MDB_NOTFOUND) {
        key_str(ks, sizeof ks, key);
        t.rc = tuned__errf(e, TUNED_ENOTFOUND, "store %s: no record for %s", s->path, ks);
    } else if (rc != 0) {
        stx_fail(&t, "mdb_get", rc, e);
    } else {
        t.rc = decode_value(s, key, &v, out, e);
    }
    return stx_end(&t, e);
}

int tuned__store_find_shape(tuned__store *s, uint8_t kernel, uint8_t dtype, uint64_t rows,
                            uint64_t cols, tuned__record *out, size_t cap, size_t *n,
                            tuned__err *e)
{
    *n = 0;
    if (cap > 0 && out == NULL)
        return tuned__errf(e, TUNED_EINVAL, "store %s: find_shape: no output array", s->path);
    if (!s->have_best)
        return 0;
    uint8_t prefix[TUNED__KEY_SHAPE_LEN];
    tuned__key_encode_shape(prefix, TUNED__KEY_TAG_BEST, kernel, dtype, rows, cols);

    store_txn t;
    int rc = stx_begin(&t, s, MDB_RDONLY, e);
    if (rc != 0)
        return rc;
    MDB_cursor *cur;
    if ((rc = mdb_cursor_open(t.txn, s->best, &cur)) != 0) {
        stx_fail(&t, "mdb_cursor_open", rc, e);
        return stx_end(&t, e);
    }
    size_t count = 0;
    MDB_val k = {.mv_size = sizeof prefix, .mv_data = prefix};
    MDB_val v;
    rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    while (rc == 0) {
        if (k.mv_size < sizeof prefix || memcmp(k.mv_data, prefix, sizeof prefix) != 0)
            break;
        tuned__store_key key;
        if ((t.rc = tuned__key_decode(k.mv_data, k.mv_size, TUNED__KEY_TAG_BEST, &key, e)) != 0) {
            tuned__err_prefix(e, t.rc, "store %s: ", s->path);
            break;
        }
        if (count < cap && (t.rc = decode_value(s, &key, &v, &out[count], e)) != 0)
            break;
        count++;
        rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    }
    if (rc != 0 && rc != MDB_NOTFOUND)
        stx_fail(&t, "mdb_cursor_get", rc, e);
    mdb_cursor_close(cur);
    rc = stx_end(&t, e);
    if (rc == 0)
        *n = count;
    return rc;
}

uint64_t tuned__store_gpu_fingerprint(const char *gpu_identity)
{
    return tuned__fnv1a64(gpu_identity, strlen(gpu_identity), TUNED__FNV_SEED);
}

/* ---- added for the daemon (issue 5): enumeration and change detection ---- */

int tuned__store_scan(tuned__store *s, tuned__store_scan_fn fn, void *ctx, size_t *skipped,
                      tuned__err *e)
{
    if (skipped != NULL)
        *skipped = 0;
    if (!s->have_best)
        return 0;
    store_txn t;
    int rc = stx_begin(&t, s, MDB_RDONLY, e);
    if (rc != 0)
        return rc;
    MDB_cursor *cur;
    if ((rc = mdb_cursor_open(t.txn, s->best, &cur)) != 0) {
        stx_fail(&t, "mdb_cursor_open", rc, e);
        return stx_end(&t, e);
    }
    MDB_val k, v;
    int stop = 0;
    rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    while (rc == 0 && stop == 0) {
        tuned__store_key key;
        tuned__record r;
        tuned__err ignored = {0};
        if (tuned__key_decode(k.mv_data, k.mv_size, TUNED__KEY_TAG_BEST, &key, &ignored) != 0 ||
            decode_value(s, &key, &v, &r, &ignored) != 0) {
            if (skipped != NULL)
                (*skipped)++;
        } else {
            stop = fn(ctx, &r);
        }
        if (stop == 0)
            rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    }
    if (rc != 0 && rc != MDB_NOTFOUND)
        stx_fail(&t, "mdb_cursor_get", rc, e);
    mdb_cursor_close(cur);
    rc = stx_end(&t, e);
    return rc != 0 ? rc : stop;
}

int tuned__store_txnid(tuned__store *s, uint64_t *out, tuned__err *e)
{
    /* Shared hold of s->resize: a resize remaps the metas mdb_env_info reads. */
    int rc = pthread_rwlock_rdlock(&s->resize);
    if (rc != 0)
        return lock_fail(e, s->path, "pthread_rwlock_rdlock", rc);
    MDB_envinfo info;
    int mrc = mdb_env_info(s->env, &info);
    rc = pthread_rwlock_unlock(&s->resize);
    if (mrc != 0)
        return mdb_fail(e, s->path, "mdb_env_info", mrc);
    if (rc != 0)
        return lock_fail(e, s->path, "pthread_rwlock_unlock", rc);
    *out = (uint64_t)info.me_last_txnid;
    return 0;
}
