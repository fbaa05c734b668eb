/* remote.h: the daemon's side of the fleet tier (src/fleet, docs/fleet.md):
 * a daemon started with --remote shares a Redis or Valkey server with the
 * other daemons of its fleet.
 *
 *   - get: on a local miss (no exact record for this GPU), the request
 *     reads through: the fleet's record of this GPU's toolchain, else of
 *     another toolchain of its hardware class (compatible); a record found
 *     (validated by the fleet client) goes into the index at once and into
 *     the local store off the loop, and the reply says "from":"remote".
 *     The connection's reply waits for it (tuned__later); other clients are
 *     served meanwhile; a timeout or a fleet that is down answers from
 *     local data.
 *   - tune: every job is gated until the fleet decides: the lease of its
 *     key taken (renewed while the tune runs, released after), the record
 *     looked for once more, then the tune runs here; or another daemon
 *     holds the lease: the job waits for its record (notification, polling
 *     fallback) and is done by it, or takes the lease over when it expires.
 *     A finished tune publishes its record (SET NX, else compare-and-set
 *     with 2% noise); a fleet that is down lets the job tune here, and its
 *     record is published when the fleet is back (an outbox).
 *   - the queue: a tune for a hardware class no local GPU has is pushed to
 *     that class's stream (queued_remote); each daemon reads the streams of
 *     its GPUs' classes, runs the jobs as its own (lease included) and
 *     acknowledges them, and takes over jobs left unacknowledged for
 *     reclaim_s by a consumer that died.
 *
 * Everything runs on the event loop and nothing blocks it. Without the
 * fleet layer in the build (no hiredis), these are no-ops and --remote is
 * refused. */
#ifndef TUNED_DAEMON_REMOTE_H
#define TUNED_DAEMON_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/daemon/state.h"

/* Whether this build has the fleet tier. */
bool tuned__remote_available(void);

/* Opens the fleet client on d's loop (d->remote), when d->o->remote is set:
 * it connects in the background (a server that is down is retried with
 * backoff; the daemon serves meanwhile). TUNED_EINVAL for a bad URL,
 * credentials that cannot be read, or a build without the tier. */
int tuned__remote_open(tuned__daemon *d, tuned__err *e);

/* Whether the fleet answers now (connected). */
bool tuned__remote_usable(tuned__daemon *d);

/* A `get` whose local answer is not exact, for local GPU slot: reads
 * through to the fleet the record of its kernel, dtype and shape, and
 * answers through later; false (nothing started)
 * when the fleet cannot be asked now. */
bool tuned__remote_read_through(tuned__daemon *d, const tuned__request *r, size_t slot,
                                tuned__later *later);

/* The connection of later is closing: its reply is no longer wanted. */
void tuned__remote_cancel(tuned__daemon *d, tuned__later *later);

/* Job (submitted gated) of the local GPU slot: lease, wait or tune, then
 * publish (see above). */
void tuned__remote_tune(tuned__daemon *d, uint64_t job, size_t slot, const tuned__shape *shape,
                        bool retune);

/* A `tune` for hardware class hwclass (its fleet name, "hw" + 16 hex
 * digits), which no local GPU has: pushes it to the fleet queue and
 * answers through later (state queued_remote); false when the fleet
 * cannot be asked now. */
bool tuned__remote_queue(tuned__daemon *d, const tuned__request *r, const char *hwclass,
                         tuned__later *later);

/* The fleet name of local GPU slot's hardware class into out (size >= 64). */
void tuned__remote_hwclass_name(uint64_t hwclass_fp, char *out, size_t n);

/* Every 100 ms: renews leases, follows tunes, retries the outbox, reads
 * and reclaims queue jobs. */
void tuned__remote_tick(tuned__daemon *d);

/* The stop began: leases are released. */
void tuned__remote_stop(tuned__daemon *d);

/* Closes the client (once the jobs are done); true once it is closed (or
 * there was none). */
bool tuned__remote_close(tuned__daemon *d);

/* Frees what is left after the loop ended. */
void tuned__remote_free(tuned__daemon *d);

/* Puts the records taken from the fleet whose local store write is still
 * in flight into ix: a fresh index built from a snapshot before that write
 * lacks them, and is about to replace the one that has them. */
void tuned__remote_put_pending(tuned__daemon *d, struct tuned__index *ix);

/* ,"remote":{...} for stats (nothing without --remote). */
void tuned__remote_stats(tuned__daemon *d, tuned__buf *out);

/* ---- tuned forget --remote ---- */

typedef struct tuned__remote_forget_req {
    const char *url;           /* as --remote */
    const char *credentials;   /* as --remote-credentials; NULL: none */
    const char *const *keys;   /* record keys (tuned__fleet_record_key) */
    size_t nkeys;
    /* Or a filter: every record of rows x cols (of kind kernel, or of
     * every kind; of dtype, or of every dtype) of hardware class hwclass
     * ("hw" + 16 hex digits) that the fleet's index lists, of any
     * toolchain, kernel code and policy. */
    const char *hwclass;
    uint64_t rows, cols;
    bool have_kernel;
    uint8_t kernel;            /* TUNED_KERNEL_* */
    bool have_dtype;
    uint8_t dtype;
    bool dry_run;              /* say what would go, remove nothing */
    double timeout_s;          /* each call (0: 2 s) */
    /* Called for each key: what happened ("forgot", "would forget", "no
     * record", or an error). */
    void (*say)(void *ctx, const char *key, const char *what);
    void *ctx;
} tuned__remote_forget_req;

/* Removes fleet records (and their index entries), blocking on its own
 * loop. *removed counts them. TUNED_EINVAL for a bad key, URL or filter,
 * TUNED_EIO when the fleet cannot be reached (e says why). */
int tuned__remote_forget(const tuned__remote_forget_req *q, size_t *removed, tuned__err *e);

#endif
