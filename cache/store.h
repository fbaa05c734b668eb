/* store.h: the LMDB store of tuned results: winners, evaluation history and
 * compiled variants. The product's memory: a tuned result costs GPU
 * minutes, so nothing here may lose one or serve one where it does not hold.
 *
 * One LMDB environment per process, opened once by tuned__store_open() and
 * closed by tuned__store_close(), or shared by every tuned__store_acquire()
 * of its directory (registry.c); one handle may be used by many threads.
 * Named databases, all created in the start-up write transaction and never
 * closed:
 *   "meta"     "schema" (TUNED__STORE_SCHEMA) and "writer" (the version of
 *              the last tuned that opened it for writing)
 *   "best"     the winning config per (kernel, dtype, rows, cols, layout,
 *              GPU fingerprint): a versioned JSON record (record.h)
 *   "history"  every evaluated variant per (shape, layout, GPU, config):
 *              a versioned JSON value (history.c)
 *   "cubins"   compiled variants by a 64-bit hash the caller computes:
 *              a versioned binary header, then the cubin (cubins.c)
 * Keys are built in one place (key.c): a tag byte, then fixed big-endian
 * fields, so byte order equals numeric order.
 *
 * Concurrency: any number of processes (the daemon, CLI runs, embedding
 * applications) may open one store at once. LMDB admits one write
 * transaction at a time and never blocks readers; a writer killed at any
 * moment loses only its uncommitted transaction. Stale reader slots of dead
 * processes are cleared at open. A write that finds the map full grows it
 * and retries; other processes adopt the grown size on their next
 * transaction. Every error message names the store's path.
 *
 * Provenance: a record is served as exact only on the system that measured
 * it. The key carries the fingerprint of the GPU identity string (GPU name,
 * compute capability, SM count, memory size, driver version, NVRTC version,
 * template+codegen hash; built by src/driver/gpu.c) and the layout class;
 * the record carries the identity itself, its parts and the measurement
 * policy. tuned__store_get_best() returns only records that may be served
 * as exact; tuned__store_find_compatible() the best record of a shape
 * measured on the same hardware class with the same kernel code (another
 * driver, NVRTC or policy), to be checked before it is served;
 * tuned__store_find_shape() returns every record of a shape (candidates to
 * seed a search). tuned__record_exact() and tuned__record_tier() explain a
 * mismatch.
 *
 * This module knows nothing of the tuner: it stores plain records. */
#ifndef TUNED_CACHE_STORE_H
#define TUNED_CACHE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "src/common/clock.h"
#include "src/common/err.h"
#include "src/common/identity.h"
#include "src/codegen/config.h"

/* Bump when the key layout or record meaning changes incompatibly. A store
 * of another schema is refused with TUNED_ESCHEMA (never migrated, never
 * written): schema 1 (the first whole path) had no layout byte, no
 * measurement policy and no history. */
#define TUNED__STORE_SCHEMA 2

/* Kind ids in keys are the registry's (TUNED_KERNEL_MAP in tuned.h,
 * src/codegen/kind.h): stable forever once shipped. */

/* Row stride / alignment classes (key.layout). The tuner measures class 0;
 * other values are reserved for strided or misaligned inputs and are
 * stored, compared and exported as they are. */
enum {
    TUNED__LAYOUT_DENSE = 0, /* rows back to back (row stride == cols), x and y
                                as cuMemAlloc returns them (256-byte aligned) */
};

typedef struct tuned__store tuned__store;

/* What a best-config record is filed under. gpu_fp is the 64-bit
 * fingerprint of the GPU identity string (see tuned__record.gpu). The
 * fields are in this order so that positional initializers written for
 * schema 1 still compile (layout last, 0 by default). */
typedef struct tuned__store_key {
    uint8_t kernel;
    uint8_t dtype;   /* tuned_dtype */
    uint64_t rows;
    uint64_t cols;
    uint64_t gpu_fp;
    uint8_t layout;  /* TUNED__LAYOUT_* */
} tuned__store_key;

/* The parts of the GPU identity string, and how the result was measured. */
typedef struct tuned__provenance {
    uint32_t cc_major, cc_minor;  /* compute capability, e.g. 9 and 0 */
    uint32_t sm_count;
    uint64_t mem_mib;             /* device memory, MiB */
    uint32_t driver_version;      /* cuDriverGetVersion(), e.g. 13000 */
    uint32_t nvrtc_major, nvrtc_minor;
    uint64_t template_hash;       /* templates + codegen version */
    char policy[64];              /* how it was measured (src/tuner/policy.h) */
} tuned__provenance;

/* One stored winner. Strings are NUL-terminated; a string that does not fit
 * its array, or rows/cols above INT64_MAX (JSON integers), is refused. */
typedef struct tuned__record {
    tuned__store_key key;
    char config[128];       /* the winning config, e.g. "w32.r1.v8.ld=el.st=cs.reg=f32" */
    char gpu[512];          /* the full GPU identity string the fingerprint hashes */
    char gpu_name[128];     /* e.g. "NVIDIA H100 80GB HBM3" */
    tuned__provenance prov;
    double median_us;       /* median time of the winner, > 0 */
    double copy_us;         /* median time of a D2D copy of the same bytes */
    double gbps;            /* bytes read + written / median time */
    uint32_t evaluations;   /* variants evaluated by the search */
    uint64_t cubin;         /* compile-cache hash of the winner's cubin; 0: unknown */
    char date[32];          /* ISO 8601 UTC, "2026-11-21T10:00:00Z" */
    char tool_version[32];  /* tuned version that measured it */
} tuned__record;
_Static_assert(sizeof(((tuned__record *)0)->date) >= TUNED__DATE_TEXT, "a record's date fits");

enum {
    TUNED__STORE_READONLY = 1, /* open for reading; a missing store is TUNED_ENOTFOUND */
};

/* Opens (creating with mode 0700 if missing, parents included, unless
 * READONLY) the store directory at path. Errors name the path: an
 * unwritable directory or a damaged file is TUNED_ESTORE, a store of
 * another schema TUNED_ESCHEMA. */
int tuned__store_open(tuned__store **out, const char *path, unsigned flags, tuned__err *e);

/* Closes the environment; NULL is allowed. */
void tuned__store_close(tuned__store *s);

/* The directory it was opened at. */
const char *tuned__store_path(const tuned__store *s);

/* Whether it was opened read-only (asked for, or the fallback of
 * tuned__store_acquire()): writes fail with TUNED_EINVAL. */
bool tuned__store_readonly(const tuned__store *s);

/* ---- one environment per store directory in a process (registry.c) ---- */

/* LMDB's locks are per process: two environments on one store in one
 * process drop each other's locks. Code that may open one store more than
 * once in a process (the embedding API's handles) acquires it instead of
 * opening it: every acquire of one directory, however spelled (a symlink,
 * "dir/./"), returns the same store, counted, until the last release
 * closes it. Thread-safe.
 *
 * A directory not yet acquired is opened as flags ask; without
 * TUNED__STORE_READONLY, a store this user cannot write (TUNED_ESTORE) is
 * opened read-only instead, so its results can still be read. A directory
 * already acquired is shared as it is: a read-only acquire of a writable
 * store gets the writable one, and an acquire without READONLY of a store
 * opened read-only gets the read-only one (an environment cannot change
 * its mode while others use it); tuned__store_readonly() tells which. */
int tuned__store_acquire(const char *path, unsigned flags, tuned__store **out, tuned__err *e);

/* Gives back one acquire; the last closes the store. NULL is allowed.
 * Never tuned__store_close() an acquired store. */
void tuned__store_release(tuned__store *s);

/* The acquired store's directory as realpath() resolved it (for handing
 * to another process, whatever the current directory becomes); valid
 * until the last release. tuned__store_path() for a store not acquired. */
const char *tuned__store_real_path(const tuned__store *s);

/* ---- best configs ---- */

/* Writes r under r->key in one transaction, replacing any older record.
 * TUNED_EINVAL on a read-only store or for a record that fails
 * tuned__record_check() (e.g. r->key.gpu_fp is not the fingerprint of
 * r->gpu). */
int tuned__store_put_best(tuned__store *s, const tuned__record *r, tuned__err *e);

/* tuned__store_put_best(), unless the stored record of r->key keeps its
 * place: one measured under policy (NULL: any) that is as fast or faster.
 * A damaged record, one of another version or of another policy gives way.
 * The read and the write are one transaction, so a faster record another
 * writer stores meanwhile is never overwritten by a slower one. *written
 * says whether r went in. */
int tuned__store_put_best_unless_better(tuned__store *s, const tuned__record *r,
                                        const char *policy, bool *written, tuned__err *e);

/* The record under key, if it may be served as exact: TUNED_ENOTFOUND when
 * there is none, or when it was measured under a measurement policy other
 * than policy (the message says which; NULL accepts any). key.gpu_fp is the fingerprint of this system's
 * GPU identity, and every stored record's identity is checked to hash to
 * its key, so a hit was measured on this GPU, driver, NVRTC and templates. */
int tuned__store_get_best(tuned__store *s, const tuned__store_key *key, tuned__record *out,
                          const char *policy, tuned__err *e);

/* Every record for (kernel, dtype, rows, cols), whatever the GPU, layout
 * or policy, in key order: at most cap of them into out (NULL when cap is
 * 0), their number in *n (which may exceed cap). out may be partly written
 * on error. Candidates to seed a search, not results to serve. */
int tuned__store_find_shape(tuned__store *s, uint8_t kernel, uint8_t dtype, uint64_t rows,
                            uint64_t cols, tuned__record *out, size_t cap, size_t *n,
                            tuned__err *e);

/* 64-bit fingerprint (FNV-1a, common/hash.h) of a GPU identity string. */
uint64_t tuned__store_gpu_fingerprint(const char *gpu_identity);

/* Whether stored record r may be served as exact to the system described
 * by here (a record holding this system's key and provenance, as the tuner
 * would write it): the same key, identity, parts and policy. When not, why
 * (n bytes, may be NULL) lists the differences, e.g. "driver 12080 (here
 * 13000); policy ...". */
bool tuned__record_exact(const tuned__record *r, const tuned__record *here, char *why, size_t n);

/* ---- the identity's parts and the serving tiers (docs/store-format.md) ---- */

/* The identity of the system that measured r (src/common/identity.h: the
 * whole string, hardware class, toolchain, kernel code, policy), made from
 * its fields (gpu_name and prov, which every record of schema 2 has, so
 * records written before the parts were named give them too). Returns
 * whether r->gpu is the identity string those fields make, as in every
 * record tuned writes: a record that does not spell its own parts is
 * never served as compatible. */
bool tuned__record_identity(const tuned__record *r, tuned__identity *out);

/* How a stored record of the wanted shape and layout may serve a system. */
typedef enum tuned__tier {
    TUNED__TIER_NONE = 0,   /* another hardware class or kernel code: never
                               served for this shape (it may still be the
                               nearest of another shape, or seed a search) */
    TUNED__TIER_COMPATIBLE, /* the same hardware class and kernel code;
                               another toolchain, memory size or measurement
                               policy: served once checked on this system */
    TUNED__TIER_EXACT,      /* the whole identity and the policy match */
} tuned__tier;

/* "none", "compatible", "exact"; "?" for another value. */
const char *tuned__tier_name(tuned__tier t);

/* The tier of stored record r for the system here (its identity, with the
 * policy the caller measures under). Compares identities only: the shape
 * and layout are the caller's to match. why (n bytes, may be NULL) lists
 * what differs, e.g. "driver 12080 (here 13000)". */
tuned__tier tuned__record_tier(const tuned__record *r, const tuned__identity *here, char *why,
                               size_t n);

/* A caller's veto on a candidate record (its config does not fit, it
 * failed a check here): false passes it over. Called inside a read
 * transaction: it must not call the store. */
typedef bool (*tuned__store_accept_fn)(void *ctx, const tuned__record *r, tuned__tier tier);

/* The record of key's shape and layout (kernel, dtype, rows, cols, layout;
 * key->gpu_fp is not used) that serves the system here best, whatever its
 * toolchain: an exact one, else the compatible one (same hardware class and
 * kernel code) measured under here's policy, then with here's NVRTC
 * version (the same compiler makes the same machine code, so its time
 * carries over best), then with here's driver, then the newest (times
 * measured by other toolchains or methods do not compare, so the fastest
 * would be chosen by noise; the newest was measured by the latest tool and
 * toolchain); ties keep key order. accept (may be NULL) passes candidates
 * over. The record into *out and its tier into *tier; TUNED_ENOTFOUND when
 * none serves. Damaged records of the shape are passed over, not errors. */
int tuned__store_find_compatible(tuned__store *s, const tuned__store_key *key,
                                 const tuned__identity *here, tuned__store_accept_fn accept,
                                 void *ctx, tuned__record *out, tuned__tier *tier, tuned__err *e);

/* ---- enumeration and change detection (for the daemon, issue 5) ---- */

/* Called by tuned__store_scan() for each record; a nonzero return stops the
 * scan and becomes its return value. */
typedef int (*tuned__store_scan_fn)(void *ctx, const tuned__record *r);

/* Calls fn for every best record (whatever its provenance: check it with
 * tuned__record_exact() before serving one), in key order, inside one read
 * transaction. A record that cannot be decoded (malformed, or written by a
 * newer version) is skipped and counted in *skipped (which may be NULL).
 * fn must not call the store. */
int tuned__store_scan(tuned__store *s, tuned__store_scan_fn fn, void *ctx, size_t *skipped,
                      tuned__err *e);

/* LMDB's last committed transaction id: it changes whenever any process
 * commits a write, so a reader can tell cheaply whether its copy of the
 * store is stale. */
int tuned__store_txnid(tuned__store *s, uint64_t *out, tuned__err *e);

/* The store's generation: raised by every committed write that changes the
 * best records (put, import, forget), and only by those; 0 for a store no
 * such write has touched. Cheap (one read transaction): a copy of the best
 * records is stale when this moved. Check tuned__store_txnid() first. */
int tuned__store_generation(tuned__store *s, uint64_t *out, tuned__err *e);

/* ---- evaluation history (one entry per evaluated variant) ---- */

/* Outcome of one evaluation. Stored as text ("ok", "compile_error", ...),
 * so these numbers are not on disk. The store's own: the tuner maps its
 * evaluator's statuses onto them (src/tuner/tune.c). */
enum {
    TUNED__HIST_OK = 0,
    TUNED__HIST_COMPILE_ERROR,
    TUNED__HIST_WRONG,
    TUNED__HIST_LAUNCH_ERROR,
    TUNED__HIST_TIMEOUT,
    TUNED__HIST_COUNT
};

/* Name of a TUNED__HIST_* status ("ok", "compile_error", "wrong",
 * "launch_error", "timeout"); NULL for another value. */
const char *tuned__hist_status_name(int status);

typedef struct tuned__store_eval {
    tuned__store_key key;   /* the shape, layout and GPU, as for the best record */
    char config[128];       /* the variant's canonical text: 1..127 printable ASCII
                               characters, no spaces */
    int status;             /* TUNED__HIST_* */
    double median_us;       /* times: > 0 for OK, 0 otherwise */
    double p20_us, p80_us;
    double compile_ms;      /* NVRTC wall time, 0 when it came from the compile cache */
    char date[32];          /* ISO 8601 UTC; gc ages entries by it */
    char detail[512];       /* why it failed, "" for OK */
} tuned__store_eval;
_Static_assert(sizeof(((tuned__store_eval *)0)->date) >= TUNED__DATE_TEXT,
               "a history entry's date fits");

/* Stores one entry, replacing an earlier one of the same key and config
 * (the latest evaluation wins). TUNED_EINVAL for a bad entry. */
int tuned__store_put_eval(tuned__store *s, const tuned__store_eval *ev, tuned__err *e);

/* Stores n entries in one transaction (all or none): cheaper per entry
 * than n calls of tuned__store_put_eval(). */
int tuned__store_put_evals(tuned__store *s, const tuned__store_eval *evs, size_t n,
                           tuned__err *e);

/* Cursor-style listing of the entries of one (shape, layout, GPU) = key, in
 * config text order, so an interrupted tune can resume: writes at most cap
 * entries with config text greater than after (NULL or "": from the first)
 * into out and their number into *n. Fewer than cap means the listing is
 * complete; otherwise call again with after = out[*n - 1].config. Each call
 * is its own snapshot; no transaction stays open between calls. An entry
 * this build cannot decode (damaged, or of another version) is skipped: its
 * config is measured anew, and gc drops it if it is damage. */
int tuned__store_list_evals(tuned__store *s, const tuned__store_key *key, const char *after,
                            tuned__store_eval *out, size_t cap, size_t *n, tuned__err *e);

/* ---- compile cache ---- */

/* Largest cubin stored. */
#define TUNED__CUBIN_MAX ((size_t)64 << 20)

/* Stores size bytes (1..TUNED__CUBIN_MAX) under hash, replacing an earlier
 * blob. hash is the caller's 64-bit hash of everything the cubin depends on
 * (source text, NVRTC options, arch, NVRTC version). */
int tuned__store_put_cubin(tuned__store *s, uint64_t hash, const void *data, size_t size,
                           tuned__err *e);

/* The blob under hash in *data (malloc()ed; free() it) and *size.
 * TUNED_ENOTFOUND when there is none; TUNED_ESTORE for a blob whose length
 * or checksum does not match its header (then recompile and put again). */
int tuned__store_get_cubin(tuned__store *s, uint64_t hash, void **data, size_t *size,
                           tuned__err *e);

/* ---- maintenance (list, export, forget, gc) ---- */

/* Which best records a maintenance call acts on; a zeroed filter selects
 * every record. */
typedef struct tuned__store_filter {
    const char *gpu;      /* NULL: any; else a case-insensitive substring of
                             gpu_name, or a 16-hex-digit GPU fingerprint */
    bool have_shape;      /* only rows x cols */
    uint64_t rows, cols;
    bool have_dtype;      /* only dtype */
    uint8_t dtype;
    bool have_kernel;     /* only the records of this kind (its registry id) */
    uint8_t kernel;
} tuned__store_filter;

/* Called for each record; r is NULL for a stored value that does not decode
 * (damage then says why). A nonzero return stops the walk and is returned. */
typedef int (*tuned__store_each_fn)(void *ctx, const tuned__store_key *key,
                                    const tuned__record *r, const char *damage);

/* Calls fn for each best record f selects (damaged ones too, if their key
 * matches; a GPU-name filter cannot match them), in key order, in one read
 * snapshot. fn must not call the store. */
int tuned__store_each_best(tuned__store *s, const tuned__store_filter *f, tuned__store_each_fn fn,
                           void *ctx, tuned__err *e);

/* Removes the best records f selects in one transaction (none with
 * dry_run), then calls fn (may be NULL) for each one removed; their number
 * in *removed. History and cubins stay until tuned__store_gc(). */
int tuned__store_forget(tuned__store *s, const tuned__store_filter *f, bool dry_run,
                        tuned__store_each_fn fn, void *ctx, size_t *removed, tuned__err *e);

/* Removes the one record under key (whatever its policy); TUNED_ENOTFOUND
 * when there is none. */
int tuned__store_forget_key(tuned__store *s, const tuned__store_key *key, tuned__err *e);

typedef struct tuned__gc_stats {
    size_t evals_removed, evals_kept;
    size_t cubins_removed, cubins_kept;
    uint64_t cubin_bytes_removed;
    size_t damaged_removed; /* history or cubin values that did not decode */
} tuned__gc_stats;

/* Drops history entries and cubins that no best record uses and that are
 * older than max_age_days at time now (0: every unused one). A history
 * entry is used when it is the evaluation of its shape's best config; a
 * cubin when a best record names its hash. One transaction; none with
 * dry_run. */
int tuned__store_gc(tuned__store *s, double max_age_days, time_t now, bool dry_run,
                    tuned__gc_stats *st, tuned__err *e);

/* ---- export / import (JSON lines, docs/store-format.md) ---- */

/* Receives one line of explanation per skipped or damaged record. */
typedef void (*tuned__store_note_fn)(void *ctx, const char *line);

/* Writes a header line, then one line per best record f selects, to out,
 * from one read snapshot. Damaged records are skipped and noted. Returns 0,
 * TUNED_EIO when out fails (the message says so), or a store error. */
int tuned__store_export(tuned__store *s, const tuned__store_filter *f, FILE *out,
                        tuned__store_note_fn note, void *ctx, size_t *exported, tuned__err *e);

typedef struct tuned__import_opts {
    bool force;   /* replace stored records even when they are better */
    /* The importer's measurement policy (src/tuner/policy.h), or NULL.
     * With it, a stored record of this policy is kept over one of another
     * (their times do not compare), and one of another policy, which is
     * not served, gives way to one of this policy, whatever the medians. */
    const char *policy;
    /* Extra validation of each record (the config text, the shape limits),
     * 0 to accept; NULL for none. */
    int (*check)(void *ctx, const tuned__record *r, tuned__err *e);
    tuned__store_note_fn note; /* may be NULL */
    void *ctx;
} tuned__import_opts;

typedef struct tuned__import_stats {
    size_t lines;      /* lines read, headers and blank lines included */
    size_t added;      /* new keys */
    size_t replaced;   /* better (or --force) records over stored ones */
    size_t unchanged;  /* the same record was already stored */
    size_t kept;       /* the stored record is as good or better */
    size_t invalid;    /* lines that failed validation */
    bool truncated;    /* fewer records than a header declared */
} tuned__import_stats;

/* Reads an export from in (name labels the notes, "FILE:LINE: ..."; o may
 * be NULL for the defaults),
 * validating every line; valid records are stored in batches, a stored
 * record is replaced only by a faster one of the same policy, by one of
 * o->policy over another policy, or with o->force. Invalid lines
 * are noted and counted, not fatal. Returns 0, TUNED_EINVAL for a file
 * that is not an export (no header), TUNED_ESCHEMA for an export of another
 * schema, TUNED_EIO for a read error, or a store error. */
int tuned__store_import(tuned__store *s, FILE *in, const char *name, const tuned__import_opts *o,
                        tuned__import_stats *st, tuned__err *e);

#endif
