/* state.h: what the server (server.c) and the request handlers
 * (requests.c) share: the store, its in-memory index, the jobs, counters.
 * Owned and touched by the event loop's thread only (the jobs module has
 * its own lock). */
#ifndef TUNED_DAEMON_STATE_H
#define TUNED_DAEMON_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "cache/store.h"
#include "src/daemon/daemon.h"
#include "src/daemon/index.h"
#include "src/daemon/jobs.h"
#include "src/daemon/protocol.h"

typedef struct tuned__stats {
    uint64_t requests;
    uint64_t by_op[TUNED__OP_COUNT];
    uint64_t errors;
    uint64_t exact, nearest, defaults;
    uint64_t clients_now, clients_total, clients_rejected, clients_cut_off;
    uint64_t lines_too_long;
    uint64_t index_loads;
} tuned__stats;

typedef struct tuned__daemon {
    const tuned__serve_opts *o;
    tuned__store *store;
    tuned__index *index;
    uint64_t index_txnid;    /* the store's txn id the index was loaded at */
    uint64_t index_writes;   /* tuned__jobs_writes() then */
    uint64_t index_loaded_ms;
    tuned__jobs *jobs;
    uint64_t start_ms;
    uint64_t (*now_ms)(void *ctx); /* the loop's clock */
    void *now_ctx;
    tuned__stats st;
} tuned__daemon;

/* Loads the index from the store (at start, and when it changed). */
int tuned__daemon_reload(tuned__daemon *d, tuned__err *e);

/* Answers one request line: appends exactly one reply line to out. */
void tuned__daemon_answer(tuned__daemon *d, const char *line, size_t len, tuned__buf *out);

#endif
