/* api.h: the internals of the embedding API (include/tuned.h, issue 6),
 * shared by its files and their tests.
 *
 *   api.c        the public functions: handles, tuned_softmax's fast and
 *                slow paths, lookups, tunes, the per-thread last error
 *   api_table.c  the lock-free map from a call's key to an immutable entry
 *   api_pick.c   exact / compatible / nearest / default, and a variant's
 *                cubin (compile cache or NVRTC)
 *   api_child.c  tunes outside this process: a `tuned` child process, or
 *                the daemon over its socket
 *
 * The fast path of tuned_softmax reads the current context, hashes the
 * call's key, finds an entry in the map without taking a lock, and
 * launches. Entries never change after they are published (except the
 * time of their next recheck, an atomic); a better entry for a key
 * replaces the pointer in its slot, and the old one stays allocated until
 * the handle is closed, so a reader never sees freed memory. */
#ifndef TUNED_API_API_H
#define TUNED_API_API_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/store.h"
#include "src/codegen/config.h"
#include "src/client/client.h"
#include "src/codegen/nvrtc.h"
#include "src/driver/driver.h"
#include "src/driver/gpu.h"
#include "src/driver/launch.h"
#include "tuned.h"

/* ---- the map (api_table.c) ---- */

/* What one call (tuned_softmax, tuned_softmax_backward, ...) is cached
 * under: 40 bytes on a 64-bit system, no padding, so keys compare with
 * memcmp (both asserted). */
typedef struct tuned__api_key {
    void *ctx;          /* CUcontext the call ran in */
    uint64_t rows, cols, stride; /* cols: with the kind's key parameters above bit 32
                                    (tuned__wire_cols) */
    uint32_t dtype;
    uint16_t kernel;    /* TUNED_KERNEL_* (never 0) */
    uint8_t aligned;    /* every tensor and every row start are 16-byte aligned */
    uint8_t flags;      /* the kind's compiled-in options (codegen's flags) */
} tuned__api_key;
#define TUNED__API_KEY_FIELD(f) sizeof(((tuned__api_key *)0)->f)
_Static_assert(sizeof(tuned__api_key) ==
                   TUNED__API_KEY_FIELD(ctx) + TUNED__API_KEY_FIELD(rows) +
                       TUNED__API_KEY_FIELD(cols) + TUNED__API_KEY_FIELD(stride) +
                       TUNED__API_KEY_FIELD(dtype) + TUNED__API_KEY_FIELD(kernel) +
                       TUNED__API_KEY_FIELD(aligned) + TUNED__API_KEY_FIELD(flags),
               "tuned__api_key has padding (or a field left out here): memcmp would "
               "compare garbage bytes");
#undef TUNED__API_KEY_FIELD
_Static_assert(sizeof(void *) != 8 || sizeof(tuned__api_key) == 40,
               "tuned__api_key is not 40 bytes on a 64-bit system");

/* What a pick saw of the store: its last committed transaction and its
 * generation (raised only by writes that change the best records). */
typedef struct tuned__api_seen {
    uint64_t txnid;
    uint64_t generation;
} tuned__api_seen;

typedef struct tuned__api_entry {
    tuned__api_key key;
    uint64_t hash;
    /* The launch, and for a grid split its workspace (NULL otherwise),
     * allocated in the key's context and freed at close. */
    tuned__launch launch;
    tuned__workspace *work;
    /* The module's helper kernels (the kind's spec). */
    CUfunction helper[TUNED__KIND_MAX_HELPERS];
    /* CLOCK_MONOTONIC_COARSE nanoseconds after which a call takes the slow
     * path to look again (a better record may have been stored);
     * INT64_MAX: never (an exact record). Set to 0 to force a recheck. */
    _Atomic int64_t recheck_ns;
    /* Slow path only (under the handle's lock). */
    tuned__api_seen seen;     /* the store when picked */
    tuned__config config;
    tuned_choice choice;      /* what tuned_last_choice() reports */
    struct tuned__api_entry *all_next; /* every entry ever made, freed at close */
} tuned__api_entry;

typedef struct tuned__api_table {
    size_t mask;                       /* slots - 1 (a power of two) */
    struct tuned__api_table *retired;  /* older tables, freed with the map */
    _Atomic(tuned__api_entry *) slot[];
} tuned__api_table;

/* Readers: tuned__api_map_find() from any thread, no lock. Writers:
 * tuned__api_map_put(), serialised by the caller. */
typedef struct tuned__api_map {
    _Atomic(tuned__api_table *) live;
    size_t count;             /* distinct keys (writer only) */
} tuned__api_map;

uint64_t tuned__api_key_hash(const tuned__api_key *k);

int tuned__api_map_init(tuned__api_map *m, tuned__err *e);

/* Frees the tables (not the entries, which the caller owns). */
void tuned__api_map_free(tuned__api_map *m);

/* Publishes e under e->key (e->hash set): a new key takes an empty slot,
 * growing the table (a new one is published; the old one is retired) when
 * it is half full; a known key's slot is overwritten, and *replaced (may
 * be NULL) receives the entry it held, or NULL. Only TUNED_ENOMEM fails. */
int tuned__api_map_put(tuned__api_map *m, tuned__api_entry *e, tuned__api_entry **replaced,
                       tuned__err *e_out);

/* The entry for k, or NULL. Lock-free: safe against a concurrent put. */
static inline tuned__api_entry *tuned__api_map_find(tuned__api_map *m, const tuned__api_key *k,
                                                    uint64_t hash)
{
    tuned__api_table *t = atomic_load_explicit(&m->live, memory_order_acquire);
    for (size_t i = (size_t)hash & t->mask;; i = (i + 1) & t->mask) {
        tuned__api_entry *e = atomic_load_explicit(&t->slot[i], memory_order_acquire);
        if (e == NULL)
            return NULL;
        if (e->hash == hash && e->key.ctx == k->ctx && e->key.rows == k->rows &&
            e->key.cols == k->cols && e->key.stride == k->stride &&
            e->key.dtype == k->dtype && e->key.kernel == k->kernel &&
            e->key.aligned == k->aligned && e->key.flags == k->flags)
            return e;
    }
}

/* ---- picking a config and building its kernel (api_pick.c) ---- */

typedef struct tuned__api_pick {
    tuned__config config;
    tuned_source source;
    double median_us;            /* the record's, 0 for default */
    uint64_t record_rows, record_cols;
    tuned__api_seen seen;        /* the store before the lookup */
    tuned__store_key record_key; /* the record's key (not default) */
    /* For people (tuned_choice.tune_message): what a compatible record's
     * system differs in ("compatible: driver 12080 (here 13000)"), or why a
     * compatible record was passed over; "" when nothing needs saying. */
    char note[256];
} tuned__api_pick;

/* Compatible records the caller refuses (they failed their check here):
 * refused(ctx, r) true passes r over. Called inside a store read: it must
 * not call the store. */
typedef struct tuned__api_veto {
    bool (*refused)(void *ctx, const tuned__record *r);
    void *ctx;
} tuned__api_veto;

/* Which config serves shape on gpu, from the first tier that has one:
 *   exact       the stored winner of this shape on this GPU's whole
 *               identity, measured under this build's policy;
 *   compatible  the stored winner of this shape on the same hardware class
 *               with the same kernel code, of another toolchain or policy
 *               (tuned__store_find_compatible() says which one), unless
 *               veto refuses it; the caller checks it before serving it
 *               (tuned__check_variant()) and, if it fails, refuses it and
 *               asks again;
 *   nearest     the stored winner of the closest other shape of the same
 *               hardware class and dtype, any toolchain, whose config is
 *               valid for this shape: distance |log rows ratio| + 2 |log
 *               cols ratio|, as the daemon; at equal distance one of this
 *               GPU's own identity first;
 *   default     the first heuristic seed of the space.
 * A stored config must be valid for the shape here to serve at any tier.
 * store may be NULL (then always default); veto may be NULL.
 * TUNED_ENOSPACE when no variant fits the shape; store errors pass up. */
int tuned__api_pick_config(tuned__store *store, const tuned__gpu *gpu, const tuned__shape *shape,
                           const tuned__api_veto *veto, tuned__api_pick *out, tuned__err *e);

/* Whether a best record may have been stored, replaced or removed since
 * the pick that saw *seen: the transaction id first (nothing committed:
 * no), then the generation, so that the writes that leave the best records
 * alone (the compile cache, a tune's history) do not send every recheck
 * to a new pick. When nothing changed them, *seen is brought up to date.
 * A store that cannot be read answers no (the next recheck asks again). */
bool tuned__api_store_moved(tuned__store *store, tuned__api_seen *seen);

/* The cubin of config c for shape s, compiled assuming 16-byte-aligned
 * rows or not, for arch: from the store's compile cache (under
 * tuned__nvrtc_cache_key, as the evaluator files them), else NVRTC, then
 * into the cache (when writable is true; a failed put is ignored).
 * *from_cache says which. out is freed with tuned__blob_free(). */
int tuned__api_cubin(const tuned__nvrtc *n, tuned__store *store, bool writable,
                     const tuned__config *c, const tuned__shape *s, bool aligned, unsigned flags,
                     int arch,
                     tuned__blob *out, uint64_t *hash, bool *from_cache, tuned__err *e);

/* ---- tunes in another process (api_child.c) ---- */

typedef struct tuned__api_child {
    const char *binary;   /* the tuned executable: a path, or a name searched in $PATH */
    const char *store;    /* --db */
    int device;           /* --device */
    tuned__shape shape;
    double time_s;        /* --time; 0: tuned's default */
    double timeout_s;     /* kill the child after this long (0: no limit) */
    atomic_int *cancel;   /* may be NULL; nonzero: kill the child now */
    /* May be NULL: the child then runs -q; else with --progress json, and
     * each progress line it writes becomes a call. */
    tuned_progress_fn on_progress;
    void *progress_ctx;
} tuned__api_child;

/* A progress object (a child's `--progress json` line's "progress", or a
 * daemon `job` reply's "job": the same fields) into p for shape s; the
 * strings point into v or best (n bytes). */
void tuned__api_progress_from_json(const json_t *v, const tuned__shape *s, tuned_progress *p,
                                   char *best, size_t n);

/* Calls fn(ctx, p) with the calling thread marked as inside a progress
 * callback: every call of a handle's on_progress goes through here. */
void tuned__api_progress_call(tuned_progress_fn fn, void *ctx, const tuned_progress *p);

/* Whether the calling thread is inside a progress callback: a tune (and
 * so the handle's tune lock) is running below it on this thread, so
 * tuned_tune() and tuned_close() refuse (they would wait forever). */
bool tuned__api_in_progress(void);

/* Runs `BINARY tune [--kernel K] --shape RxC --dtype D --device N --db STORE
 * -q [--progress json] [--time S]`
 * and waits for it. The child gets /dev/null as stdin and stdout, its
 * stderr is read (its last line ends up in error messages), and it dies
 * with the calling thread (PR_SET_PDEATHSIG). TUNED_ETUNE when it exits
 * with a failure, TUNED_ETIMEOUT when killed after timeout_s, TUNED_EIO
 * when it cannot be started or was cancelled. */
int tuned__api_run_child(const tuned__api_child *c, tuned__err *e);

#endif
