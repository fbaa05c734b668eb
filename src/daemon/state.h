/* state.h: what the server (server.c) and the request handlers
 * (requests.c) share: the store, its in-memory index, the jobs, counters.
 * Owned and touched by the event loop's thread only (the jobs module has
 * its own lock). */
#ifndef TUNED_DAEMON_STATE_H
#define TUNED_DAEMON_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "cache/store.h"
#include "src/daemon/background.h"
#include "src/daemon/daemon.h"
#include "src/daemon/index.h"
#include "src/daemon/jobs.h"
#include "src/daemon/protocol.h"
#include "src/codegen/kind.h"

typedef struct tuned__stats {
    uint64_t requests;
    uint64_t by_op[TUNED__OP_COUNT];
    uint64_t errors;
    uint64_t exact, compatible, nearest, defaults;
    uint64_t from_remote;       /* get answers with a record just read from the fleet */
    uint64_t compatible_retunes;/* tunes queued by --retune-compatible */
    uint64_t clients_now, clients_total, clients_rejected, clients_cut_off;
    uint64_t lines_too_long;
    uint64_t clients_idle;      /* closed after the idle timeout */
    uint64_t output_cut_off;    /* cut off by the global output cap */
    uint64_t index_loads;
    uint64_t index_load_ms;     /* the last load's duration (off the loop) */
} tuned__stats;

struct tuned__rebuild;
struct tuned__remote;

/* A reply that comes later: a request whose answer waits for the fleet
 * tier. The connection embeds one; while it is pending the connection
 * answers no further line of its own (replies stay in order), and others
 * are served meanwhile. done is called exactly once, from the loop, unless
 * the connection cancels it first (tuned__remote_cancel). */
typedef struct tuned__later {
    void (*done)(struct tuned__later *l, const char *reply, size_t len);
    bool pending;
} tuned__later;

#define TUNED__RETUNED_MAX 1024

typedef struct tuned__daemon {
    const tuned__serve_opts *o;
    tuned__store *store;
    tuned__index *index;
    bool read_only;          /* the store could not be opened for writing */
    uv_loop_t *loop;
    /* The local systems, for exact matching, and their identities with
     * this build's policy: one of each per GPU and kind (a kind's records
     * are filed under its own code hash), at tuned__here_at. */
    tuned__record *here;
    tuned__identity *here_id;
    size_t nhere;            /* GPUs */
    uint64_t index_gen;      /* the store generation the index was built at */
    uint64_t seen_txnid;     /* the store's txn id when the generation was last read */
    uint64_t applied_writes; /* tuned__jobs_writes() put into the index */
    tuned__bg bg;            /* threads for idle-priority work (background.h) */
    bool bg_prio_noted;      /* said once that they run at normal priority */
    struct tuned__rebuild *rebuild; /* a build of a fresh index in flight */
    bool rebuild_again;      /* the store changed again during it */
    uint64_t rebuild_not_before; /* the loop's ms before which no build starts */
    bool stopping;
    tuned__jobs *jobs;
    struct tuned__remote *remote; /* the fleet tier; NULL without --remote */
    uint64_t start_ms;
    uint64_t (*now_ms)(void *ctx); /* the loop's clock */
    void *now_ctx;
    tuned__stats st;
    /* --retune-compatible: keys whose background tune was queued (a ring:
     * past TUNED__RETUNED_MAX keys the oldest may be queued again). */
    uint64_t retuned[TUNED__RETUNED_MAX];
    size_t nretuned;
} tuned__daemon;

/* The position in d->here and d->here_id of local GPU slot's record and
 * identity for kind (a known kind: 1 .. TUNED__KIND_COUNT). */
static inline size_t tuned__here_at(size_t slot, unsigned kind)
{
    return slot * TUNED__KIND_COUNT + (kind - 1);
}

/* Loads the index from the store, on this thread (at start). */
int tuned__daemon_reload(tuned__daemon *d, tuned__err *e);

/* Keeps the index in step with the store without blocking (reload.c): puts
 * the records this daemon's jobs wrote into it at once, and when another
 * process changed the store (its generation moved), builds a fresh index
 * on a thread of its own at idle priority and swaps it in when done; the
 * old one answers meanwhile. Cheap when nothing changed. */
void tuned__daemon_refresh(tuned__daemon *d);

/* Builds a fresh index off the loop whatever the generation says (SIGHUP). */
void tuned__daemon_rebuild(tuned__daemon *d);

/* Frees what reload.c holds (after the loop ended). */
void tuned__daemon_reload_free(tuned__daemon *d);

/* Answers one request line: appends exactly one reply line to out, or
 * (only when later is not NULL) none, with later->pending set: the reply
 * comes through later->done. */
void tuned__daemon_answer(tuned__daemon *d, const char *line, size_t len, tuned__buf *out,
                          tuned__later *later);

/* The reply to get request r from the local index (no read-through);
 * from_remote adds "from":"remote" (a record just read from the fleet). */
void tuned__daemon_get_local(tuned__daemon *d, const tuned__request *r, bool from_remote,
                             tuned__buf *out);

#endif
