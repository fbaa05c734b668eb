/* index.h: the daemon's in-memory copy of the store, for fast answers.
 *
 * A `get` must be answered in microseconds, many thousand times a second;
 * a store read decodes a JSON record each time. The index holds every
 * record once, decoded, with the record's reply text prepared, in a hash
 * table by key; the GPUs the records name (model, architecture, memory and
 * hardware class read back from the identity string), so that a record of
 * another build of the same class is found (`compatible`); and a memo of
 * derived answers (`nearest`, `default`) by key. The owner builds a fresh one when the
 * store changed (off its serving thread: a load of a large store takes
 * seconds) and swaps it in, and puts the records its own jobs wrote into
 * the one it serves from meanwhile. One index is used by one thread at a
 * time. */
#ifndef TUNED_DAEMON_INDEX_H
#define TUNED_DAEMON_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/store.h"
#include "src/tuner/space.h"

typedef struct tuned__index tuned__index;

typedef struct tuned__index_gpu {
    uint64_t fp;
    char name[128];
    int arch;            /* 0 when the identity does not say */
    int sms;             /* multiprocessors; 0 when the identity does not say */
    uint64_t total_mem;  /* bytes; 0 when the identity does not say */
    uint64_t hwclass;    /* its hardware class fingerprint; 0 when its records do
                            not spell their identity */
} tuned__index_gpu;

int tuned__index_new(tuned__index **out, tuned__err *e);
void tuned__index_free(tuned__index *ix);

/* The systems this daemon measures on: for each local GPU and kind, the
 * record a tune of that kind there would write, minus the measurement (tuned__tune_record of an
 * empty outcome). A stored record on one of these GPUs is served as exact
 * only when tuned__record_exact() says it matches (provenance, policy,
 * layout); on other GPUs (a fleet's, known from the store) when its key
 * matches and it was measured under this build's policy. Copied; takes
 * effect at the next load. */
int tuned__index_set_here(tuned__index *ix, const tuned__record *here, size_t n, tuned__err *e);

/* Replaces the contents with copies of recs[0..n); unchanged on failure.
 * The memo is emptied. */
int tuned__index_load(tuned__index *ix, const tuned__record *recs, size_t n, tuned__err *e);

/* Adds r, or replaces the record of its key (tuned__index_load() keeps
 * room for a few; more grow the arrays). The memo is emptied. */
int tuned__index_put(tuned__index *ix, const tuned__record *r, tuned__err *e);

/* tuned__index_load() of every record in the store. */
int tuned__index_load_store(tuned__index *ix, tuned__store *s, size_t *skipped, tuned__err *e);

size_t tuned__index_count(const tuned__index *ix);
const tuned__record *tuned__index_at(const tuned__index *ix, size_t i);

/* The position of the k-th record in store key order (k < count). */
size_t tuned__index_ordered(const tuned__index *ix, size_t k);

/* The position of the record under k, or -1 (also for a record measured
 * under another measurement policy: listed, but never served as exact;
 * records of another layout class than dense rows are not held at all). */
long tuned__index_find(const tuned__index *ix, const tuned__store_key *k);

/* Record i's reply fields, as tuned__reply_record() writes them. */
const char *tuned__index_fields(const tuned__index *ix, size_t i, size_t *len);

/* Record i's head of a `get` answer, as tuned__reply_answer_head() writes it. */
const char *tuned__index_answer_head(const tuned__index *ix, size_t i, size_t *len);

size_t tuned__index_gpu_count(const tuned__index *ix);
const tuned__index_gpu *tuned__index_gpu_at(const tuned__index *ix, size_t i);

/* Reads the architecture (sm_XY -> XY), multiprocessors (NNNsm) and memory
 * (NNNMiB) out of a GPU identity string "name|sm_90|132sm|81559MiB|...";
 * false if it cannot. */
bool tuned__identity_parse(const char *identity, int *arch, int *sms, uint64_t *total_mem);

/* The record of GPU fp's hardware class (a local GPU's, or one a stored
 * record spells; any toolchain), or of fp itself, same kernel and dtype as
 * sp's shape but another shape, whose config is valid for sp
 * (tuned__space_valid), closest in shape (log-distance, columns weighing
 * double), GPU fp's own records first on ties; -1 if none. */
long tuned__index_nearest(const tuned__index *ix, const tuned__space *sp, uint64_t fp);

/* The record of k's shape and layout (k->gpu_fp is not used) that serves
 * the system here best, ranked as tuned__store_find_compatible() ranks
 * them: exact, else compatible (same hardware class and kernel code) of
 * here's policy, NVRTC, driver, then the newest. accept (may be NULL)
 * passes candidates over. Its tier into *tier; -1 if none. */
long tuned__index_compatible(const tuned__index *ix, const tuned__store_key *k,
                             const tuned__identity *here, tuned__store_accept_fn accept,
                             void *ctx, tuned__tier *tier);

/* Derived answers, remembered until the next load. */
enum {
    TUNED__SOURCE_EXACT = 0,
    TUNED__SOURCE_COMPATIBLE,
    TUNED__SOURCE_NEAREST,
    TUNED__SOURCE_DEFAULT,
};

typedef struct tuned__answer {
    int source;                        /* TUNED__SOURCE_* */
    long rec;                          /* the record (exact, nearest), else -1 */
    char config[TUNED__CONFIG_TEXT];   /* default's config */
} tuned__answer;

bool tuned__index_memo_get(const tuned__index *ix, const tuned__store_key *k, tuned__answer *out);
void tuned__index_memo_put(tuned__index *ix, const tuned__store_key *k, const tuned__answer *a);

#endif
