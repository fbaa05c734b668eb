/* fleet.h: the remote tier, a Redis or Valkey server that a fleet of tuned
 * daemons shares, so that each shape is tuned once per hardware class and
 * toolchain instead of once per host.
 *
 * Everything runs on the caller's libuv loop through hiredis's libuv
 * adapter and never blocks it: every operation returns at once and reports
 * through its callback. The contract, for every operation below:
 *   - it returns 0 and its callback then fires exactly once, later, from
 *     the loop (never inside the call), also when the connection is lost
 *     (TUNED__FLEET_DOWN), the operation runs past its timeout
 *     (TUNED__FLEET_TIMEOUT) or the client is closed first
 *     (TUNED__FLEET_CLOSED);
 *   - or it returns a negative TUNED_E* code (a bad argument; e says why)
 *     and the callback never fires.
 * The reply passed to a callback is valid only during the callback. No
 * call may follow tuned__fleet_close() except from the callbacks it ends.
 * The process must ignore SIGPIPE (hiredis writes with write()).
 *
 * What is stored (docs/fleet.md is the reference; keys carry "v1"):
 *   tuned:v1:rec:KERNEL:DTYPE:RxC:LAYOUT:HWCLASS:TOOLCHAIN   a record's JSON line
 *   tuned:v1:idx:KERNEL:DTYPE:HWCLASS                        set of "RxC:LAYOUT:TOOLCHAIN"
 *   tuned:v1:lock:<as rec>                                   a tune's lease: its owner
 *   tuned:v1:done:<as rec>                                   channel: a record was written
 *   tuned:v1:queue:HWCLASS                                   stream of tune jobs, group "tuned"
 *   tuned:v1:queued:KERNEL:DTYPE:RxC:LAYOUT:HWCLASS          a job of that shape is queued
 *
 * A record read from the server is served (TUNED__FLEET_OK) only after it
 * passed tuned__fleet_check_record(): the store's decoder, a config this
 * build parses in canonical form, ranges, the identity of the key it sits
 * under, and plausible times. */
#ifndef TUNED_FLEET_FLEET_H
#define TUNED_FLEET_FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "cache/store.h"
#include "src/common/err.h"

/* Longest hwclass, toolchain, code or policy text plus NUL. */
#define TUNED__FLEET_NAME 64

/* What a record is for: the shape, and the portable identity of the GPU,
 * toolchain, kernel code and measurement policy that produced it. hwclass,
 * toolchain and code are 1..63 characters of [A-Za-z0-9._+-], policy of
 * those and '/': all are parts of keys, so that records of two builds
 * (code and policy) never share one, and two versions of tuned sharing
 * the tier (an upgrade) each keep their own. */
typedef struct tuned__fleet_id {
    uint8_t kernel;                        /* TUNED_KERNEL_* */
    uint8_t dtype;                         /* tuned_dtype */
    uint64_t rows, cols;
    uint8_t layout;                        /* TUNED__LAYOUT_* */
    char hwclass[TUNED__FLEET_NAME];       /* GPU model, compute capability, SM count */
    char toolchain[TUNED__FLEET_NAME];     /* driver API and NVRTC versions */
    char code[TUNED__FLEET_NAME];          /* templates + codegen hash */
    char policy[TUNED__FLEET_NAME];        /* measurement policy */
} tuned__fleet_id;

/* The identity a record carries, derived from its fields: hwclass is
 * "hw" + 16 hex digits of FNV-1a over "GPU NAME|sm_XY|Nsm", toolchain
 * "drvD.nvrtcM.m", code the template hash in hex, policy the record's.
 * The one place that maps records to identities: the tier's writers and
 * readers both build their ids through it. */
void tuned__fleet_id_from_record(const tuned__record *r, tuned__fleet_id *out);

/* The hwclass name of a hardware class text, "GPU NAME|sm_XY|Nsm" (as
 * `tuned list --json` prints a record's "hwclass"): "hw" + 16 hex digits. */
void tuned__fleet_hwclass_name(const char *text, char *out, size_t n);

/* 0 when id's fields are within their ranges and alphabets (TUNED_EINVAL
 * naming the field otherwise). */
int tuned__fleet_id_check(const tuned__fleet_id *id, tuned__err *e);

/* The key of id's record, "tuned:v2:rec:KERNEL:DTYPE:RxC:LAYOUT:HWCLASS:
 * TOOLCHAIN:CODE:POLICY", and back: TUNED_EINVAL for text that is not one,
 * or whose fields fail tuned__fleet_id_check. */
void tuned__fleet_record_key(char *buf, size_t n, const tuned__fleet_id *id);
int tuned__fleet_record_key_parse(const char *key, tuned__fleet_id *id, tuned__err *e);

/* Outcome of an operation. */
typedef enum tuned__fleet_status {
    TUNED__FLEET_OK = 0,  /* get, wait: a valid record; publish, replace: written;
                             lease: held (acquire, renew) or released; push: queued;
                             read, reclaim, shapes: done (maybe with no entries);
                             ack: acknowledged; forget: removed */
    TUNED__FLEET_MISS,    /* get: no record; publish: one is stored already;
                             replace: the stored one stays (not faster beyond the
                             noise); lease: another owner holds it (holder, ttl_ms);
                             push: that shape is queued already; ack, forget: nothing there */
    TUNED__FLEET_INVALID, /* get, wait: the stored value failed its check (err says
                             why); never served. Remove it with forget. */
    TUNED__FLEET_TIMEOUT, /* no answer within the timeout */
    TUNED__FLEET_DOWN,    /* not connected, or the connection was lost */
    TUNED__FLEET_DENIED,  /* the server's ACL refused it (NOPERM, NOAUTH, WRONGPASS) */
    TUNED__FLEET_ERROR,   /* another error reply, or a reply of an unexpected form */
    TUNED__FLEET_CLOSED,  /* the client was closed before an answer came */
    TUNED__FLEET_STATUS_COUNT
} tuned__fleet_status;

/* "ok", "miss", "invalid", "timeout", "down", "denied", "error",
 * "closed"; NULL for another value. */
const char *tuned__fleet_status_name(tuned__fleet_status s);

/* A tune job of the fleet queue. */
typedef struct tuned__fleet_job {
    char entry[48];          /* the stream entry id, e.g. "1732500000000-0" */
    tuned__fleet_id id;      /* the shape and hardware class; toolchain is the pusher's */
    char origin[128];        /* the owner name of the daemon that pushed it */
    char params[512];        /* the pusher's text (e.g. budget and time as JSON), may be "" */
} tuned__fleet_job;

/* A shape the fleet has a record of (from the index). */
typedef struct tuned__fleet_shape {
    uint64_t rows, cols;
    uint8_t layout;
    char toolchain[TUNED__FLEET_NAME];
    char code[TUNED__FLEET_NAME];
    char policy[TUNED__FLEET_NAME];
} tuned__fleet_shape;

typedef struct tuned__fleet_reply {
    tuned__fleet_status status;
    tuned__err err;             /* why, for every status but OK (e.g. "not faster than
                                   the stored 10 us by 2%"); empty on OK */
    bool has_record;
    tuned__record record;       /* get, wait: OK */
    char holder[128];           /* lease: the owner now ("" when none) */
    int64_t ttl_ms;             /* lease: its remaining time (-2: no lease) */
    double stored_us;           /* replace: the median stored before (0: none) */
    const tuned__fleet_job *jobs;      /* read, reclaim */
    size_t n_jobs;
    const tuned__fleet_shape *shapes;  /* shapes */
    size_t n_shapes;
    char entry[48];             /* push: the new entry id; reclaim: where the next
                                   reclaim of the class goes on ("0-0": from the start) */
} tuned__fleet_reply;

typedef void (*tuned__fleet_cb)(void *ctx, const tuned__fleet_reply *r);

typedef struct tuned__fleet tuned__fleet;

typedef struct tuned__fleet_opts {
    /* "redis://HOST[:PORT][/DB]" (port 6379, db 0 by default; HOST may be
     * "[v6addr]") or "unix:///PATH[?db=N]". No credentials in it. */
    const char *url;
    /* Credentials, "USER:PASSWORD" (an ACL user) or "PASSWORD" (the
     * default user), read from a file (its first line) or from an
     * environment variable named here; at most one of the two, none for a
     * server without AUTH. Never from the command line. */
    const char *credentials_file;
    const char *credentials_env;
    const char *owner;           /* lease owner and consumer name; NULL: HOST:PID:RANDOM */
    const char *group;           /* queue consumer group; NULL: "tuned" */
    unsigned timeout_ms;         /* each command (default 1000) */
    unsigned connect_timeout_ms; /* connect, AUTH and SELECT (default 2000) */
    unsigned backoff_min_ms;     /* first reconnect delay (default 100), doubled per */
    unsigned backoff_max_ms;     /* failure up to this (default 10000), +-25% jitter */
    unsigned poll_ms;            /* wait's polling fallback (default 1000) */
} tuned__fleet_opts;

void tuned__fleet_opts_init(tuned__fleet_opts *o);

/* Checks o, reads the credentials, and starts connecting (the first
 * operations wait for it within their timeouts). TUNED_EINVAL for a bad
 * URL or option, TUNED_EIO for credentials that cannot be read,
 * TUNED_ENOMEM. */
int tuned__fleet_open(uv_loop_t *loop, const tuned__fleet_opts *o, tuned__fleet **out,
                      tuned__err *e);

/* Ends every pending operation with TUNED__FLEET_CLOSED (their callbacks
 * fire from the loop), drops the connections, and calls done (may be NULL)
 * once every handle is closed; then f is gone. Operations called from
 * those callbacks fail with CLOSED too. */
void tuned__fleet_close(tuned__fleet *f, void (*done)(void *ctx), void *ctx);

typedef enum tuned__fleet_state {
    TUNED__FLEET_STATE_DOWN = 0,   /* waiting to reconnect (backoff) */
    TUNED__FLEET_STATE_CONNECTING, /* connect, AUTH, SELECT under way */
    TUNED__FLEET_STATE_CONNECTED,
} tuned__fleet_state;

/* "down", "connecting", "connected". */
const char *tuned__fleet_state_name(tuned__fleet_state s);

typedef struct tuned__fleet_stats {
    tuned__fleet_state state;      /* of the command connection */
    bool subscribed;               /* the notification connection listens */
    char last_error[256];          /* "" when none yet */
    uint64_t gets, hits, misses, invalid;
    uint64_t puts, puts_applied;   /* publish and replace */
    uint64_t errors;               /* results TIMEOUT, DOWN, DENIED or ERROR */
    uint64_t timeouts;
    uint64_t connects;             /* handshakes completed */
    uint64_t connect_failures;     /* attempts that failed (the backoff's count) */
    uint64_t notifications;        /* done messages received */
    uint64_t jobs_invalid;         /* malformed queue entries acknowledged away */
} tuned__fleet_stats;

void tuned__fleet_stats_get(const tuned__fleet *f, tuned__fleet_stats *out);

/* The owner name leases and the queue use. */
const char *tuned__fleet_owner(const tuned__fleet *f);

/* ---- records ---- */

/* The record stored for id: OK, MISS or INVALID. */
int tuned__fleet_get(tuned__fleet *f, const tuned__fleet_id *id, tuned__fleet_cb cb, void *ctx,
                     tuned__err *e);

/* Stores r under id when no record is there (one SET NX; the index entry
 * and the done notification in the same script, so a reader never sees an
 * index entry without its record): OK, or MISS when one is stored. r must
 * pass tuned__fleet_check_record() for id (TUNED_EINVAL otherwise). */
int tuned__fleet_publish(tuned__fleet *f, const tuned__fleet_id *id, const tuned__record *r,
                         tuned__fleet_cb cb, void *ctx, tuned__err *e);

/* Compare-and-set: stores r under id when none is stored, when the stored
 * value fails its check, or when r's median
 * is below the stored median by more than noise (a fraction, 0..0.5):
 * r->median_us < stored * (1 - noise). Otherwise MISS, with stored_us. A
 * value changed by another writer between the read and the script is read
 * again (at most 3 times). */
int tuned__fleet_replace(tuned__fleet *f, const tuned__fleet_id *id, const tuned__record *r,
                         double noise, tuned__fleet_cb cb, void *ctx, tuned__err *e);

/* Removes the record under id and its index entry: OK, or MISS. */
int tuned__fleet_forget(tuned__fleet *f, const tuned__fleet_id *id, tuned__fleet_cb cb,
                        void *ctx, tuned__err *e);

/* The shapes the index lists for (kernel, dtype, hwclass), every toolchain,
 * code and policy. */
int tuned__fleet_shapes(tuned__fleet *f, uint8_t kernel, uint8_t dtype, const char *hwclass,
                        tuned__fleet_cb cb, void *ctx, tuned__err *e);

/* Waits up to timeout_ms for a valid record under id: OK with it as soon as
 * one is there (at once when it already is), woken by the done channel
 * and, since pub/sub can lose messages, by polling every poll_ms. At the
 * timeout: TIMEOUT, or INVALID when the last value seen failed its check. */
int tuned__fleet_wait(tuned__fleet *f, const tuned__fleet_id *id, unsigned timeout_ms,
                      tuned__fleet_cb cb, void *ctx, tuned__err *e);

/* ---- single flight: a lease per record key ---- */

/* Takes the lease of id for ttl_ms (SET NX PX): OK (also when this owner
 * holds it already: the ttl starts again), or MISS with the holder and its
 * ttl_ms. A holder that dies stops renewing and its lease expires. */
int tuned__fleet_lease_acquire(tuned__fleet *f, const tuned__fleet_id *id, unsigned ttl_ms,
                               tuned__fleet_cb cb, void *ctx, tuned__err *e);

/* Extends the lease to ttl_ms from now, only if this owner holds it: OK, or
 * MISS (lost: expired or taken; holder says by whom). */
int tuned__fleet_lease_renew(tuned__fleet *f, const tuned__fleet_id *id, unsigned ttl_ms,
                             tuned__fleet_cb cb, void *ctx, tuned__err *e);

/* Drops the lease, only if this owner holds it: OK, or MISS. */
int tuned__fleet_lease_release(tuned__fleet *f, const tuned__fleet_id *id, tuned__fleet_cb cb,
                               void *ctx, tuned__err *e);

/* ---- the fleet queue: a stream per hardware class ---- */

/* Queues a tune of id's shape for id->hwclass, unless one is queued and
 * unacknowledged already (within ttl_ms): OK with entry, or MISS. params
 * (may be NULL) is passed to the consumer as it is (< 512 bytes). */
int tuned__fleet_queue_push(tuned__fleet *f, const tuned__fleet_id *id, const char *params,
                            unsigned ttl_ms, tuned__fleet_cb cb, void *ctx, tuned__err *e);

/* Reads at most count new jobs of the n hardware classes (XREADGROUP, this
 * client's owner as the consumer): OK with jobs (maybe none). A job stays
 * pending for this consumer until acknowledged; malformed entries are
 * acknowledged away and counted (jobs_invalid). */
int tuned__fleet_queue_read(tuned__fleet *f, const char *const *hwclasses, size_t n,
                            unsigned count, tuned__fleet_cb cb, void *ctx, tuned__err *e);

/* Acknowledges a finished job (XACK) and clears its queued mark: OK, or MISS
 * when it was not pending. */
int tuned__fleet_queue_ack(tuned__fleet *f, const tuned__fleet_job *job, tuned__fleet_cb cb,
                           void *ctx, tuned__err *e);

/* Takes over at most count jobs of hwclass that another consumer read and
 * left unacknowledged for min_idle_ms (XAUTOCLAIM): OK with them, and in
 * the reply's entry the cursor to pass as from next time. One call looks
 * at about 10 x count pending jobs from `from` (NULL or "": the first), so
 * a job left behind many that live consumers hold is reached only by
 * going on from the cursor. */
int tuned__fleet_queue_reclaim(tuned__fleet *f, const char *hwclass, const char *from,
                               unsigned min_idle_ms, unsigned count, tuned__fleet_cb cb, void *ctx,
                               tuned__err *e);

/* ---- checks (no server) ---- */

/* Decodes len bytes of a stored value into *out and checks it: the store's
 * record decoder (schema, ranges), a config this build parses and prints
 * back identically, a shape within 2^31-1 rows and cols and 1 TiB of input
 * plus output, the identity of want (kernel, dtype, shape, layout, hwclass,
 * toolchain, code and policy: what the key says), and plausible times
 * (tuned__record_plausible). Returns 0, or TUNED_ESTORE with why. */
int tuned__fleet_check_record(const void *text, size_t len, const tuned__fleet_id *want,
                              tuned__record *out, tuned__err *e);

#endif
