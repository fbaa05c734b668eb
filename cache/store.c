/* store.c: the LMDB environment of the store: opening, the schema check,
 * the map that grows, and the sticky-error transactions every other store
 * file uses (txn.h, store.h).
 *
 * One MDB_env per handle, opened with MDB_NOTLS so that daemon worker
 * threads can each run their own transactions. The named databases are
 * created in one start-up write transaction that also checks the schema
 * version, and are never closed.
 *
 * The map starts at 64 MiB and grows on demand: a write that hits
 * MDB_MAP_FULL aborts, doubles the map and retries; a transaction that
 * finds MDB_MAP_RESIZED (another process grew it) adopts the new size and
 * retries. LMDB requires that no transaction of this process be live while
 * the map is resized, so every transaction holds s->resize shared and a
 * resize holds it exclusive.
 *
 * Crash safety is LMDB's: copy-on-write pages and two meta pages, synced at
 * every commit (no MDB_NOSYNC), so a process killed at any point leaves the
 * last committed state; its write lock is a robust mutex the next writer
 * recovers, and its reader slot is cleared by mdb_reader_check() at open. */
#include "cache/store.h"

#include <errno.h>
#include <inttypes.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "src/common/hash.h"
#include "cache/key.h"
#include "cache/store_internal.h"
#include "tuned.h"
#include "cache/txn.h"

#define STORE_MAXDBS 8        /* four used, room to add some later */
#define STORE_MAX_RETRIES 16  /* map grows or adoptions for one operation */

/* ---- errors ---- */

int tuned__mdb_fail(tuned__err *e, const char *path, const char *call, int rc)
{
    int code;
    const char *hint = "";
    switch (rc) {
    case MDB_NOTFOUND:
    case ENOENT:
        code = TUNED_ENOTFOUND;
        break;
    case ENOMEM:
        code = TUNED_ENOMEM;
        break;
    case MDB_INVALID:
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_VERSION_MISMATCH:
        code = TUNED_ESTORE;
        hint = " (the store's files are damaged or not an LMDB store of this LMDB version; "
               "move the directory away to start a new store)";
        break;
    case EACCES:
    case EROFS:
    case EPERM:
        code = TUNED_ESTORE;
        hint = " (the store directory and its files must be writable)";
        break;
    default:
        code = TUNED_ESTORE;
        break;
    }
    return tuned__errf(e, code, "store %s: %s: %s%s", path, call, mdb_strerror(rc), hint);
}

static int lock_fail(tuned__err *e, const char *path, const char *call, int rc)
{
    return tuned__errf(e, TUNED_ESTORE, "store %s: %s: %s", path, call, strerror(rc));
}

void tuned__store_key_str(char *buf, size_t size, const tuned__store_key *k)
{
    char text[TUNED__KEY_TEXT];
    tuned__key_format(text, sizeof text, k);
    snprintf(buf, size, "key %s", text);
}

const char *tuned__store_path(const tuned__store *s)
{
    return s->path;
}

bool tuned__store_readonly(const tuned__store *s)
{
    return s->readonly != 0;
}

/* ---- transactions ---- */

void tuned__txn_fail(tuned__txn *t, const char *call, int mdb_rc, tuned__err *e)
{
    if (t->rc != 0)
        return;
    t->mdb_rc = mdb_rc;
    t->rc = tuned__mdb_fail(e, t->s->path, call, mdb_rc);
}

void tuned__txn_discard(tuned__txn *t)
{
    t->discard = 1;
}

void tuned__txn_error(tuned__txn *t, int code)
{
    if (t->rc == 0)
        t->rc = code;
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
        rc = tuned__mdb_fail(e, s->path, "mdb_env_set_mapsize", rc);
        goto out;
    }
    if ((rc = mdb_env_info(s->env, &info)) != 0) {
        rc = tuned__mdb_fail(e, s->path, "mdb_env_info", rc);
        goto out;
    }
    if (grow && info.me_mapsize <= seen) {
        if (seen > SIZE_MAX / 2) {
            rc = tuned__errf(e, TUNED_ESTORE, "store %s: map of %zu bytes is full and cannot grow",
                             s->path, seen);
            goto out;
        }
        if ((rc = mdb_env_set_mapsize(s->env, seen * 2)) != 0) {
            rc = tuned__mdb_fail(e, s->path, "mdb_env_set_mapsize", rc);
            goto out;
        }
        if ((rc = mdb_env_info(s->env, &info)) != 0) {
            rc = tuned__mdb_fail(e, s->path, "mdb_env_info", rc);
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

int tuned__txn_begin(tuned__txn *t, tuned__store *s, unsigned flags, tuned__err *e)
{
    memset(t, 0, sizeof *t);
    t->s = s;
    t->write = !(flags & MDB_RDONLY);
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
            return tuned__mdb_fail(e, s->path, "mdb_txn_begin", rc);
        if ((rc = map_resize(s, t->seen_mapsize, 0, e)) != 0)
            return rc;
    }
}

int tuned__txn_end(tuned__txn *t, tuned__err *e)
{
    if (t->rc == 0 && !t->discard) {
        int rc = mdb_txn_commit(t->txn);
        if (rc != 0)
            tuned__txn_fail(t, "mdb_txn_commit", rc, e);
    } else {
        mdb_txn_abort(t->txn);
    }
    t->txn = NULL;
    int urc = pthread_rwlock_unlock(&t->s->resize);
    if (urc != 0 && t->rc == 0)
        t->rc = lock_fail(e, t->s->path, "pthread_rwlock_unlock", urc);
    return t->rc;
}

void tuned__txn_put(tuned__txn *t, MDB_dbi dbi, const void *k, size_t kn, const void *v,
                    size_t vn, tuned__err *e)
{
    if (t->rc != 0)
        return;
    MDB_val key = {.mv_size = kn, .mv_data = (void *)k};
    MDB_val val = {.mv_size = vn, .mv_data = (void *)v};
    t->touched_best |= dbi == t->s->best;
    int rc = mdb_put(t->txn, dbi, &key, &val, 0);
    if (rc != 0)
        tuned__txn_fail(t, "mdb_put", rc, e);
}

int tuned__txn_get(tuned__txn *t, MDB_dbi dbi, const void *k, size_t kn, MDB_val *v,
                   tuned__err *e)
{
    if (t->rc != 0)
        return -1;
    MDB_val key = {.mv_size = kn, .mv_data = (void *)k};
    int rc = mdb_get(t->txn, dbi, &key, v);
    if (rc == 0)
        return 1;
    if (rc == MDB_NOTFOUND)
        return 0;
    tuned__txn_fail(t, "mdb_get", rc, e);
    return -1;
}

int tuned__txn_del(tuned__txn *t, MDB_dbi dbi, const void *k, size_t kn, tuned__err *e)
{
    if (t->rc != 0)
        return -1;
    MDB_val key = {.mv_size = kn, .mv_data = (void *)k};
    t->touched_best |= dbi == t->s->best;
    int rc = mdb_del(t->txn, dbi, &key, NULL);
    if (rc == 0)
        return 1;
    if (rc == MDB_NOTFOUND)
        return 0;
    tuned__txn_fail(t, "mdb_del", rc, e);
    return -1;
}

MDB_cursor *tuned__txn_cursor(tuned__txn *t, MDB_dbi dbi, tuned__err *e)
{
    if (t->rc != 0)
        return NULL;
    MDB_cursor *cur;
    /* A write transaction's cursor on the best records may delete through
     * it (forget): count it as a change. */
    t->touched_best |= t->write && dbi == t->s->best;
    int rc = mdb_cursor_open(t->txn, dbi, &cur);
    if (rc != 0) {
        tuned__txn_fail(t, "mdb_cursor_open", rc, e);
        return NULL;
    }
    return cur;
}

void tuned__txn_walk_from(tuned__txn *t, MDB_dbi dbi, const void *from, size_t flen, size_t plen,
                          tuned__walk_fn visit, void *ctx, tuned__err *e)
{
    MDB_cursor *cur = tuned__txn_cursor(t, dbi, e);
    if (cur == NULL)
        return;
    MDB_val k = {.mv_size = flen, .mv_data = (void *)from};
    MDB_val v;
    int rc = mdb_cursor_get(cur, &k, &v, flen > 0 ? MDB_SET_RANGE : MDB_FIRST);
    for (; rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (plen > 0 && (k.mv_size < plen || memcmp(k.mv_data, from, plen) != 0))
            break;
        if (visit(ctx, t, cur, &k, &v, e) != 0 || t->rc != 0)
            break;
    }
    if (rc != 0 && rc != MDB_NOTFOUND)
        tuned__txn_fail(t, "mdb_cursor_get", rc, e);
    mdb_cursor_close(cur);
}

void tuned__txn_walk(tuned__txn *t, MDB_dbi dbi, const void *prefix, size_t plen,
                     tuned__walk_fn visit, void *ctx, tuned__err *e)
{
    tuned__txn_walk_from(t, dbi, prefix, plen, plen, visit, ctx, e);
}

void *tuned__txn_grow(tuned__txn *t, void *arr, size_t n, size_t *cap, size_t elem,
                      const char *what, tuned__err *e)
{
    if (n < *cap)
        return arr;
    size_t grown = *cap ? *cap * 2 : 16;
    void *p = grown <= SIZE_MAX / elem ? realloc(arr, grown * elem) : NULL;
    if (p == NULL) {
        tuned__txn_error(t, tuned__errf(e, TUNED_ENOMEM, "store %s: %s: out of memory",
                                        t->s->path, what));
        return NULL;
    }
    *cap = grown;
    return p;
}

int tuned__store_read(tuned__store *s, tuned__txn_fn fn, void *arg, tuned__err *e)
{
    tuned__txn t;
    int rc = tuned__txn_begin(&t, s, MDB_RDONLY, e);
    if (rc != 0)
        return rc;
    fn(&t, arg, e);
    return tuned__txn_end(&t, e);
}

static int write_txn(tuned__store *s, tuned__txn_fn fn, void *arg, tuned__err *e)
{
    for (int tries = 0;; tries++) {
        tuned__txn t;
        int rc = tuned__txn_begin(&t, s, 0, e);
        if (rc != 0)
            return rc;
        fn(&t, arg, e);
        if (t.rc == 0 && t.touched_best && !t.discard)
            tuned__generation_bump(&t, e);
#ifdef TUNED_TEST_HOOKS
        if (t.rc == 0 && s->test_hook != NULL)
            s->test_hook(s->test_ctx, "before-commit");
#endif
        rc = tuned__txn_end(&t, e);
        if (rc == 0 || t.mdb_rc != MDB_MAP_FULL || tries >= STORE_MAX_RETRIES)
            return rc;
        if ((rc = map_resize(s, t.seen_mapsize, 1, e)) != 0)
            return rc;
        tuned__err_clear(e);
    }
}

int tuned__store_write(tuned__store *s, tuned__txn_fn fn, void *arg, tuned__err *e)
{
    if (s->readonly)
        return tuned__errf(e, TUNED_EINVAL, "store %s: opened read-only", s->path);
    return write_txn(s, fn, arg, e);
}

/* ---- filters ---- */

bool tuned__filter_match(const tuned__store_filter *f, const tuned__store_key *k,
                         const tuned__record *r)
{
    if (f == NULL)
        return true;
    if (f->have_shape && (k->rows != f->rows || k->cols != f->cols))
        return false;
    if (f->have_dtype && k->dtype != f->dtype)
        return false;
    if (f->have_kernel && k->kernel != f->kernel)
        return false;
    if (f->gpu != NULL && f->gpu[0] != '\0') {
        uint64_t fp;
        if (tuned__fp_parse(f->gpu, strlen(f->gpu), &fp) && fp == k->gpu_fp)
            return true;
        return r != NULL && strcasestr(r->gpu_name, f->gpu) != NULL;
    }
    return true;
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
static void check_schema(tuned__txn *t, int writable, tuned__err *e)
{
    if (t->rc != 0)
        return;
    tuned__store *s = t->s;
    static const char schema_key[] = "schema";
    static const char writer_key[] = "writer";
    char want[24];
    int want_n = snprintf(want, sizeof want, "%d", TUNED__STORE_SCHEMA);

    MDB_val v;
    int found = tuned__txn_get(t, s->meta, schema_key, sizeof schema_key - 1, &v, e);
    if (found < 0)
        return;
    if (found == 0) {
        /* A new store: this transaction creates it. */
        if (writable)
            tuned__txn_put(t, s->meta, schema_key, sizeof schema_key - 1, want, (size_t)want_n, e);
    } else {
        const char *p = v.mv_data;
        uint64_t have = 0;
        size_t i = 0;
        for (; i < v.mv_size && i < 10 && p[i] >= '0' && p[i] <= '9'; i++)
            have = have * 10 + (uint64_t)(p[i] - '0');
        if (v.mv_size == 0 || i != v.mv_size) {
            t->rc = tuned__errf(e, TUNED_ESTORE,
                                "store %s: meta \"schema\" is not a decimal number: the store is "
                                "damaged or was not written by tuned", s->path);
            return;
        }
        if (have != TUNED__STORE_SCHEMA) {
            /* Say who wrote it, when the store says so (printable bytes only). */
            char writer[40] = "an unknown version";
            MDB_val w;
            if (tuned__txn_get(t, s->meta, writer_key, sizeof writer_key - 1, &w, e) == 1) {
                size_t n = w.mv_size < 30 ? w.mv_size : 30;
                char *dst = writer + snprintf(writer, sizeof writer, "tuned ");
                for (size_t k = 0; k < n; k++)
                    *dst++ = ((const char *)w.mv_data)[k] >= 0x20 &&
                                     ((const char *)w.mv_data)[k] < 0x7f
                                 ? ((const char *)w.mv_data)[k]
                                 : '?';
                *dst = '\0';
            }
            t->rc = tuned__errf(
                e, TUNED_ESCHEMA,
                "store %s: schema version %" PRIu64 " (last written by %s), this build uses "
                "schema %d; the store was left untouched: use a tuned that reads schema %" PRIu64
                ", or move the directory away (or pass another --db) to start a new store",
                s->path, have, writer, TUNED__STORE_SCHEMA, have);
            return;
        }
    }
    if (writable)
        tuned__txn_put(t, s->meta, writer_key, sizeof writer_key - 1, TUNED_VERSION_STRING,
                       sizeof TUNED_VERSION_STRING - 1, e);
}

static const struct {
    const char *name;
    size_t offset;
} store_dbs[] = {
    {"best", offsetof(tuned__store, best)},
    {"history", offsetof(tuned__store, hist)},
    {"cubins", offsetof(tuned__store, cubins)},
};

/* The start-up write transaction: meta first and the schema check, then
 * the other dbs; any failure aborts it, so nothing is created. */
static void setup_write(tuned__txn *t, void *arg, tuned__err *e)
{
    (void)arg;
    tuned__store *s = t->s;
    int rc = mdb_dbi_open(t->txn, "meta", MDB_CREATE, &s->meta);
    if (rc != 0) {
        tuned__txn_fail(t, "mdb_dbi_open meta", rc, e);
        return;
    }
    check_schema(t, 1, e);
    for (size_t i = 0; t->rc == 0 && i < sizeof store_dbs / sizeof store_dbs[0]; i++) {
        MDB_dbi *dbi = (MDB_dbi *)((char *)s + store_dbs[i].offset);
        if ((rc = mdb_dbi_open(t->txn, store_dbs[i].name, MDB_CREATE, dbi)) != 0)
            tuned__txn_fail(t, "mdb_dbi_open", rc, e);
    }
}

/* Read-only: missing dbs mean an empty store, not an error. Called at open
 * and again, under s->dbs_lock, until the dbs are found. */
static int setup_read(tuned__store *s, tuned__err *e)
{
    tuned__txn t;
    int rc = tuned__txn_begin(&t, s, MDB_RDONLY, e);
    if (rc != 0)
        return rc;
    rc = mdb_dbi_open(t.txn, "meta", 0, &s->meta);
    if (rc == 0) {
        check_schema(&t, 0, e);
        int have = 1;
        for (size_t i = 0; t.rc == 0 && i < sizeof store_dbs / sizeof store_dbs[0]; i++) {
            MDB_dbi *dbi = (MDB_dbi *)((char *)s + store_dbs[i].offset);
            rc = mdb_dbi_open(t.txn, store_dbs[i].name, 0, dbi);
            if (rc == MDB_NOTFOUND)
                have = 0;
            else if (rc != 0)
                tuned__txn_fail(&t, "mdb_dbi_open", rc, e);
        }
        atomic_store(&s->have_dbs, have);
    } else if (rc != MDB_NOTFOUND) {
        tuned__txn_fail(&t, "mdb_dbi_open meta", rc, e);
    }
    /* Committed, not aborted: dbi handles opened in it must outlive it. */
    return tuned__txn_end(&t, e);
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
    if ((rc = pthread_mutex_init(&s->dbs_lock, NULL)) != 0) {
        pthread_rwlock_destroy(&s->resize);
        rc = lock_fail(e, path, "pthread_mutex_init", rc);
        goto fail;
    }
    s->lock_ready = 1;

    if ((rc = mdb_env_create(&s->env)) != 0) {
        s->env = NULL;
        rc = tuned__mdb_fail(e, path, "mdb_env_create", rc);
        goto fail;
    }
    if ((rc = mdb_env_set_mapsize(s->env, mapsize)) != 0) {
        rc = tuned__mdb_fail(e, path, "mdb_env_set_mapsize", rc);
        goto fail;
    }
    if ((rc = mdb_env_set_maxdbs(s->env, STORE_MAXDBS)) != 0) {
        rc = tuned__mdb_fail(e, path, "mdb_env_set_maxdbs", rc);
        goto fail;
    }
    unsigned env_flags = MDB_NOTLS | (readonly ? MDB_RDONLY : 0);
    /* 0660 less the umask: private in a user's 0700 store directory, shared
     * with its group where a service asks for it (UMask=0007, a 0770
     * directory: tools/tuned-softmax.service.in). */
    if ((rc = mdb_env_open(s->env, path, env_flags, 0660)) != 0) {
        rc = tuned__mdb_fail(e, path, "mdb_env_open", rc);
        goto fail;
    }
    if ((rc = mdb_reader_check(s->env, &s->stale_readers)) != 0) {
        rc = tuned__mdb_fail(e, path, "mdb_reader_check", rc);
        goto fail;
    }
    MDB_envinfo info;
    if ((rc = mdb_env_info(s->env, &info)) != 0) {
        rc = tuned__mdb_fail(e, path, "mdb_env_info", rc);
        goto fail;
    }
    s->mapsize = info.me_mapsize;

    if (readonly) {
        rc = setup_read(s, e);
    } else {
        rc = write_txn(s, setup_write, NULL, e);
        atomic_store(&s->have_dbs, rc == 0);
    }
    if (rc != 0)
        goto fail;
    *out = s;
    return 0;

fail:
    tuned__store_close(s);
    return rc;
}

int tuned__store_dbs(tuned__store *s, tuned__err *e)
{
    if (atomic_load(&s->have_dbs))
        return 1;
    /* mdb_dbi_open must not run in two transactions of a process at once. */
    int rc = pthread_mutex_lock(&s->dbs_lock);
    if (rc != 0)
        return lock_fail(e, s->path, "pthread_mutex_lock", rc);
    if (!atomic_load(&s->have_dbs))
        rc = setup_read(s, e);
    pthread_mutex_unlock(&s->dbs_lock);
    return rc != 0 ? rc : atomic_load(&s->have_dbs);
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
    if (s->lock_ready) {
        pthread_rwlock_destroy(&s->resize);
        pthread_mutex_destroy(&s->dbs_lock);
    }
    free(s);
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
        return tuned__mdb_fail(e, s->path, "mdb_env_info", mrc);
    if (rc != 0)
        return lock_fail(e, s->path, "pthread_rwlock_unlock", rc);
    *out = (uint64_t)info.me_last_txnid;
    return 0;
}

#ifdef TUNED_TEST_HOOKS
void tuned__store_set_test_hook(tuned__store *s, void (*fn)(void *ctx, const char *where),
                                void *ctx)
{
    s->test_hook = fn;
    s->test_ctx = ctx;
}
#endif

int tuned__store_stale_readers(const tuned__store *s)
{
    return s->stale_readers;
}

size_t tuned__store_mapsize(tuned__store *s)
{
    pthread_rwlock_rdlock(&s->resize);
    size_t n = s->mapsize;
    pthread_rwlock_unlock(&s->resize);
    return n;
}
