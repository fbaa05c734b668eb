/* store.h: the LMDB store of tuned results (the "cache" of tuned configs).
 *
 * One LMDB environment per process, opened once by tuned__store_open() and
 * closed by tuned__store_close(). Named databases: "meta" (schema version,
 * writer version) and "best" (the winning config per key). Keys are built in
 * one place (key.c): a tag byte, then fixed big-endian fields, so byte order
 * equals numeric order. Values are versioned JSON records (record.c).
 * This module knows nothing of the tuner: it stores plain records. */
#ifndef TUNED_CACHE_STORE_H
#define TUNED_CACHE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "../src/common/err.h"

/* Bump when the key layout or record meaning changes incompatibly. */
#define TUNED__STORE_SCHEMA 1

/* Kernel ids in keys; stable forever once shipped. */
enum { TUNED__KERNEL_SOFTMAX = 1 };

typedef struct tuned__store tuned__store;

/* What a best-config record is filed under. gpu_fp is the 64-bit
 * fingerprint of the GPU identity string (see tuned__record.gpu). */
typedef struct tuned__store_key {
    uint8_t kernel;
    uint8_t dtype;   /* tuned_dtype */
    uint64_t rows;
    uint64_t cols;
    uint64_t gpu_fp;
} tuned__store_key;

/* One stored winner. Strings are NUL-terminated; a string that does not fit
 * its array, or rows/cols above INT64_MAX (JSON integers), is refused. */
typedef struct tuned__record {
    tuned__store_key key;
    char config[128];       /* the winning config, e.g. "w32.r1.v8.ld=el.st=cs.reg=f32" */
    char gpu[512];          /* the full GPU identity string the fingerprint hashes */
    char gpu_name[128];     /* e.g. "NVIDIA H100 80GB HBM3" */
    double median_us;       /* median time of the winner */
    double copy_us;         /* median time of a D2D copy of the same bytes */
    double gbps;            /* bytes read + written / median time */
    uint32_t evaluations;   /* variants evaluated by the search */
    char date[32];          /* ISO 8601 UTC, "2026-11-21T10:00:00Z" */
    char tool_version[32];  /* tuned version that measured it */
} tuned__record;

enum {
    TUNED__STORE_READONLY = 1, /* open for reading; a missing store is TUNED_ENOTFOUND */
};

/* Opens (creating with mode 0700 if missing, parents included, unless
 * READONLY) the store directory at path. Errors name the path. */
int tuned__store_open(tuned__store **out, const char *path, unsigned flags, tuned__err *e);

/* Closes the environment; NULL is allowed. */
void tuned__store_close(tuned__store *s);

/* Writes r under r->key in one transaction, replacing any older record.
 * TUNED_EINVAL on a read-only store. Callers keep r->key.gpu_fp equal to
 * the fingerprint of r->gpu. One handle may be used by several threads. */
int tuned__store_put_best(tuned__store *s, const tuned__record *r, tuned__err *e);

/* Reads the record under key into out; TUNED_ENOTFOUND if there is none. */
int tuned__store_get_best(tuned__store *s, const tuned__store_key *key, tuned__record *out,
                          tuned__err *e);

/* Every record for (kernel, dtype, rows, cols), whatever the GPU, in key
 * order (ascending gpu_fp): at most cap of them into out (NULL when cap is
 * 0), their number in *n (which may exceed cap). out may be partly written
 * on error. */
int tuned__store_find_shape(tuned__store *s, uint8_t kernel, uint8_t dtype, uint64_t rows,
                            uint64_t cols, tuned__record *out, size_t cap, size_t *n,
                            tuned__err *e);

/* 64-bit fingerprint (FNV-1a, common/hash.h) of a GPU identity string. */
uint64_t tuned__store_gpu_fingerprint(const char *gpu_identity);

/* ---- added for the daemon (issue 5): enumeration and change detection ---- */

/* Called by tuned__store_scan() for each record; a nonzero return stops the
 * scan and becomes its return value. */
typedef int (*tuned__store_scan_fn)(void *ctx, const tuned__record *r);

/* Calls fn for every best record, in key order, inside one read
 * transaction. A record that cannot be decoded (malformed, or written by a
 * newer version) is skipped and counted in *skipped (which may be NULL). */
int tuned__store_scan(tuned__store *s, tuned__store_scan_fn fn, void *ctx, size_t *skipped,
                      tuned__err *e);

/* LMDB's last committed transaction id: it changes whenever any process
 * commits a write, so a reader can tell cheaply whether its copy of the
 * store is stale. */
int tuned__store_txnid(tuned__store *s, uint64_t *out, tuned__err *e);

#endif
