/* txn.h: what the store's files share: the handle, the transaction with a
 * sticky error through which every LMDB call goes, and the one cursor walk
 * every listing, sweep and export uses (tuned__txn_walk).
 *
 * A tuned__txn holds the first failure: later calls on it are no-ops, and
 * tuned__txn_end() then aborts instead of committing, so call sites stay
 * linear and check once. tuned__store_write() runs a function in a write
 * transaction and, when the map is full, grows it and runs the function
 * again: such functions must start from scratch on every run (reset their
 * outputs first) and report to people only after it returned.
 * Not for use outside cache/. */
#ifndef TUNED_CACHE_TXN_H
#define TUNED_CACHE_TXN_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "src/common/err.h"
#include "cache/store.h"

struct tuned__store {
    MDB_env *env;
    MDB_dbi meta, best, hist, cubins;
    atomic_int have_dbs;      /* 0 only for a read-only open of a store without dbs
                                 (yet: tuned__store_dbs() looks again) */
    pthread_mutex_t dbs_lock; /* serializes the read-only look for the dbs */
    int readonly;
    int lock_ready;           /* resize was initialized */
    pthread_rwlock_t resize;  /* txns hold it shared, map resizes exclusive */
    size_t mapsize;           /* current map size; written only under resize held exclusive */
    int stale_readers;        /* reader slots of dead processes cleared at open */
#ifdef TUNED_TEST_HOOKS
    void (*test_hook)(void *ctx, const char *where); /* store_internal.h */
    void *test_ctx;
#endif
    char path[];
};

typedef struct tuned__txn {
    tuned__store *s;
    MDB_txn *txn;
    size_t seen_mapsize;  /* s->mapsize when it began */
    int mdb_rc;           /* the first LMDB failure, 0 if none */
    int rc;               /* the first failure as a TUNED_E* code, 0 if none */
    int discard;          /* end without committing, and without an error */
    int write;            /* a write transaction */
    int touched_best;     /* it wrote (or may have deleted) a best record: the
                             generation is bumped at commit (generation.c) */
} tuned__txn;

/* The one translation of LMDB (and errno) codes returned by mdb_* calls
 * into TUNED_E* with "store PATH: CALL: reason". */
int tuned__mdb_fail(tuned__err *e, const char *path, const char *call, int rc);

/* Raises the store's generation by one inside write transaction t. */
void tuned__generation_bump(tuned__txn *t, tuned__err *e);

/* Begins a transaction (flags 0 or MDB_RDONLY), adopting a map another
 * process grew. */
int tuned__txn_begin(tuned__txn *t, tuned__store *s, unsigned flags, tuned__err *e);

/* Commits, or after a failure aborts; returns the first failure. */
int tuned__txn_end(tuned__txn *t, tuned__err *e);

/* Records a failure of LMDB call `call` (if none is recorded yet). */
void tuned__txn_fail(tuned__txn *t, const char *call, int mdb_rc, tuned__err *e);

/* Makes tuned__txn_end() abort and return 0 (a dry run). */
void tuned__txn_discard(tuned__txn *t);

/* Records a failure that is not LMDB's (code and message already in e). */
void tuned__txn_error(tuned__txn *t, int code);

void tuned__txn_put(tuned__txn *t, MDB_dbi dbi, const void *k, size_t kn, const void *v,
                    size_t vn, tuned__err *e);

/* 1 and *v when found, 0 when not, -1 after a failure (recorded). */
int tuned__txn_get(tuned__txn *t, MDB_dbi dbi, const void *k, size_t kn, MDB_val *v,
                   tuned__err *e);

/* 1 when deleted, 0 when there was nothing, -1 after a failure. */
int tuned__txn_del(tuned__txn *t, MDB_dbi dbi, const void *k, size_t kn, tuned__err *e);

/* A cursor on dbi, or NULL after a failure (recorded). Close it before the
 * transaction ends. */
MDB_cursor *tuned__txn_cursor(tuned__txn *t, MDB_dbi dbi, tuned__err *e);

/* Called by tuned__txn_walk() for each entry, cur on it (a write
 * transaction's visit may mdb_cursor_del() it). A nonzero return stops the
 * walk, and so does a failure the visit recorded in t. */
typedef int (*tuned__walk_fn)(void *ctx, tuned__txn *t, MDB_cursor *cur, const MDB_val *k,
                              const MDB_val *v, tuned__err *e);

/* The one cursor loop of the store: visits the entries of dbi whose keys
 * start with prefix (plen bytes; 0: every entry), in key order. Cursor
 * failures are recorded in t. */
void tuned__txn_walk(tuned__txn *t, MDB_dbi dbi, const void *prefix, size_t plen,
                     tuned__walk_fn visit, void *ctx, tuned__err *e);

/* tuned__txn_walk() starting at the first key >= from (flen bytes), for as
 * long as keys start with from's first plen bytes (plen <= flen): a page of
 * a listing that resumes after its last key. */
void tuned__txn_walk_from(tuned__txn *t, MDB_dbi dbi, const void *from, size_t flen, size_t plen,
                          tuned__walk_fn visit, void *ctx, tuned__err *e);

/* Room for element n of arr (elements of elem bytes, *cap of them): arr
 * itself when n < *cap, else arr grown (doubled, at least 16; *cap
 * updated). NULL after recording TUNED_ENOMEM ("store PATH: what: out of
 * memory") in t; arr is then unchanged and still the caller's to free. */
void *tuned__txn_grow(tuned__txn *t, void *arr, size_t n, size_t *cap, size_t elem,
                      const char *what, tuned__err *e);

typedef void (*tuned__txn_fn)(tuned__txn *t, void *arg, tuned__err *e);

/* Runs fn in a read transaction (one snapshot) and ends it; returns the
 * first failure fn recorded in t. */
int tuned__store_read(tuned__store *s, tuned__txn_fn fn, void *arg, tuned__err *e);

/* Runs fn in a write transaction and commits; on MDB_MAP_FULL aborts,
 * grows the map and runs fn again. TUNED_EINVAL on a read-only store. */
int tuned__store_write(tuned__store *s, tuned__txn_fn fn, void *arg, tuned__err *e);

/* Whether the store's databases exist: 1, 0 for a read-only handle of a
 * store not yet initialized (or not ours: an empty store), or an error. A
 * read-only handle opened while a writer was creating the store looks
 * again at each call until it finds them. */
int tuned__store_dbs(tuned__store *s, tuned__err *e);

/* "key softmax/fp16/4096x32000/dense/0123456789abcdef" for messages. */
void tuned__store_key_str(char *buf, size_t size, const tuned__store_key *k);

/* Whether record r (or, when r is NULL, key k alone) passes filter f. */
bool tuned__filter_match(const tuned__store_filter *f, const tuned__store_key *k,
                         const tuned__record *r);

/* ---- decoders the store's files share ---- */

/* Decodes a best value found under key k; it must carry that same key. */
int tuned__best_decode(const tuned__store *s, const tuned__store_key *k, const void *data,
                       size_t size, tuned__record *out, tuned__err *e);

/* One entry of "best" as tuned__best_walk() hands it on: decoded, or why
 * not. */
typedef struct tuned__best_entry {
    MDB_cursor *cur;          /* on the entry: a write walk may delete it */
    bool key_ok;              /* the key decoded (else key is zeroed) */
    tuned__store_key key;
    const tuned__record *r;   /* NULL when the key or the value does not decode */
    const tuned__err *why;    /* then why: code and message (a value's names
                                 the store and the key) */
} tuned__best_entry;

typedef int (*tuned__best_fn)(void *ctx, tuned__txn *t, const tuned__best_entry *b,
                              tuned__err *e);

/* tuned__txn_walk() over "best" (keys starting with prefix, plen bytes; 0:
 * every entry, foreign keys included), each entry decoded for visit. */
void tuned__best_walk(tuned__txn *t, const uint8_t *prefix, size_t plen, tuned__best_fn visit,
                      void *ctx, tuned__err *e);

/* Decodes a history entry (its key and value) into ev. */
int tuned__hist_decode(const MDB_val *k, const MDB_val *v, tuned__store_eval *ev,
                       tuned__err *e);

/* Checks a cubin value's header: *created (unix seconds) and *size (of the
 * blob after the header). TUNED_ESTORE when the header is malformed. */
int tuned__cubin_header(const void *data, size_t n, uint64_t *created, uint64_t *size,
                        tuned__err *e);

#endif
