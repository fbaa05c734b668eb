/* reload.c: the daemon's index kept in step with the store without ever
 * blocking the event loop (state.h).
 *
 * Reading a whole store takes seconds at a million records; done on the
 * loop, no client would be answered meanwhile. So the loop only looks:
 * LMDB's last transaction id (no transaction), and when that moved the
 * store's generation (one read transaction), which only writes of best
 * records raise. A moved generation starts a build of a fresh index on
 * a thread of its own, from one read snapshot; the loop keeps answering
 * from the old index and swaps the new one in when it is done (a change
 * during the build is seen at the next look, which starts another). The records this
 * daemon's own jobs write are put into the serving index at once, so a
 * client that saw its job done gets the winner as exact on its next
 * `get`; those written after a build's snapshot are put into the fresh
 * index before the swap.
 *
 * A build takes a core for its duration; a store that another process
 * writes without pause (an import in a loop) would keep one busy for
 * ever and slow the loop's answers on a small machine. So builds run on a
 * thread of their own at idle CPU priority (background.c: they take only
 * what the loop and its clients leave, and yield at once when one of them
 * wakes), and the next one starts no sooner than REBUILD_GAP_MS, or the
 * last build's duration, after the last one ended. The index swapped out
 * is freed the same way. */

#define REBUILD_GAP_MS 100
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/log.h"
#include "src/daemon/remote.h"
#include "src/daemon/state.h"
#include "src/tuner/policy.h"
#include "src/tuner/tune.h"

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

typedef struct tuned__rebuild {
    tuned__bg_work w;
    tuned__daemon *d;
    tuned__index *ix;     /* built on the background thread */
    uint64_t writes;      /* the jobs' writes counted before the snapshot */
    uint64_t gen, txnid;  /* read before the snapshot */
    uint64_t t0_ms;
    size_t skipped;
    int rc;
    tuned__err e;
} tuned__rebuild;

#define note(d, ...) tuned__logf((d)->o->quiet, "tuned serve", __VA_ARGS__)

/* The record a tune of each kind on each local GPU would write, for exact
 * matching, and its identity (tuned__here_at). */
static int set_here(tuned__daemon *d, tuned__err *e)
{
    size_t n = d->jobs != NULL ? tuned__jobs_gpu_count(d->jobs) : 0;
    free(d->here);
    free(d->here_id);
    d->here = n > 0 ? calloc(n * TUNED__KIND_COUNT, sizeof *d->here) : NULL;
    d->here_id = n > 0 ? calloc(n * TUNED__KIND_COUNT, sizeof *d->here_id) : NULL;
    d->nhere = 0;
    if (n > 0 && (d->here == NULL || d->here_id == NULL))
        return tuned__errf(e, TUNED_ENOMEM, "index: out of memory");
    tuned__jobs_gpu g;
    for (size_t i = 0; i < n && tuned__jobs_gpu_at(d->jobs, i, &g); i++) {
        for (size_t k = 0; k < tuned__kind_count(); k++) {
            const tuned__kind_spec *kind = tuned__kind_at(k);
            size_t at = tuned__here_at(i, kind->id);
            tuned__tune_outcome o = {.gpu = g.gpu};
            o.search.best_us = 1.0;
            tuned__shape s = {TUNED_FP16, 1, 1, kind->id, 0};
            tuned__tune_record(&o, &s, &d->here[at]);
            tuned__gpu_identity(&g.gpu, kind->id, TUNED__MEASURE_POLICY, &d->here_id[at]);
        }
        d->nhere++;
    }
    return 0;
}

/* Puts the jobs' writes after..upto into ix; false if one is no longer
 * kept (a build then brings it). */
static bool put_written(tuned__daemon *d, tuned__index *ix, uint64_t after, uint64_t upto)
{
    bool all = true;
    for (uint64_t seq = after + 1; seq <= upto && seq > after; seq++) {
        tuned__record r;
        tuned__err e = {0};
        if (!tuned__jobs_written(d->jobs, seq, &r))
            all = false;
        else if (tuned__index_put(ix, &r, &e) != 0)
            note(d, "index: %s", e.msg);
    }
    return all;
}

int tuned__daemon_reload(tuned__daemon *d, tuned__err *e)
{
    uint64_t txnid = 0, gen = 0;
    uint64_t writes = d->jobs != NULL ? tuned__jobs_writes(d->jobs) : 0;
    size_t skipped = 0;
    int rc = set_here(d, e);
    if (rc == 0)
        rc = tuned__index_set_here(d->index, d->here, d->nhere * TUNED__KIND_COUNT, e);
    if (rc == 0)
        rc = tuned__store_txnid(d->store, &txnid, e);
    if (rc == 0)
        rc = tuned__store_generation(d->store, &gen, e);
    if (rc == 0)
        rc = tuned__index_load_store(d->index, d->store, &skipped, e);
    if (rc != 0)
        return rc;
    d->seen_txnid = txnid;
    d->index_gen = gen;
    d->applied_writes = writes;
    d->st.index_loads++;
    if (skipped > 0)
        note(d, "%zu stored records could not be read and are not served", skipped);
    return 0;
}

static void rebuild_work(tuned__bg_work *w)
{
    tuned__rebuild *rb = container_of(w, tuned__rebuild, w);
    tuned__daemon *d = rb->d;
    rb->writes = d->jobs != NULL ? tuned__jobs_writes(d->jobs) : 0;
    rb->rc = tuned__store_txnid(d->store, &rb->txnid, &rb->e);
    if (rb->rc == 0)
        rb->rc = tuned__store_generation(d->store, &rb->gen, &rb->e);
    if (rb->rc == 0)
        rb->rc = tuned__index_load_store(rb->ix, d->store, &rb->skipped, &rb->e);
}

static void start_rebuild(tuned__daemon *d);

/* A background thread that ran at normal priority says so, once. */
static void note_priority(tuned__daemon *d, const tuned__bg_work *w)
{
    if (w->prio_rc != 0 && !d->bg_prio_noted) {
        d->bg_prio_noted = true;
        note(d, "background work runs at normal priority: %s", w->prio_err.msg);
    }
}

/* An index swapped out, freed off the loop: freeing a large one (a
 * record, its reply text and its memo entries each) takes milliseconds
 * that the loop's clients would wait. */
typedef struct retired_index {
    tuned__bg_work w;
    tuned__daemon *d;
    tuned__index *ix;
} retired_index;

static void retire_work(tuned__bg_work *w)
{
    retired_index *r = container_of(w, retired_index, w);
    tuned__index_free(r->ix);
    r->ix = NULL;
}

static void retire_done(tuned__bg_work *w)
{
    retired_index *r = container_of(w, retired_index, w);
    note_priority(r->d, w);
    free(r);
}

static void retire_index(tuned__daemon *d, tuned__index *ix)
{
    retired_index *r = ix != NULL ? malloc(sizeof *r) : NULL;
    if (r != NULL) {
        *r = (retired_index){.w = {.work = retire_work, .done = retire_done}, .d = d, .ix = ix};
        tuned__err e = {0};
        if (tuned__bg_start(&d->bg, &r->w, &e) == 0)
            return;
        note(d, "freeing the old index on the loop: %s", e.msg);
        free(r);
    }
    tuned__index_free(ix); /* out of memory or no thread: here, then */
}

static void rebuild_done(tuned__bg_work *w)
{
    tuned__rebuild *rb = container_of(w, tuned__rebuild, w);
    tuned__daemon *d = rb->d;
    d->rebuild = NULL;
    note_priority(d, w);
    uint64_t now_ms = d->now_ms(d->now_ctx), took = now_ms - rb->t0_ms;
    d->rebuild_not_before = now_ms + (took > REBUILD_GAP_MS ? took : REBUILD_GAP_MS);
    if (rb->rc == 0) {
        uint64_t now = d->jobs != NULL ? tuned__jobs_writes(d->jobs) : 0;
        put_written(d, rb->ix, rb->writes, now);
        tuned__remote_put_pending(d, rb->ix);
        retire_index(d, d->index);
        d->index = rb->ix;
        rb->ix = NULL;
        d->applied_writes = now;
        d->index_gen = rb->gen;
        d->seen_txnid = rb->txnid; /* a change during the build is seen next */
        d->st.index_loads++;
        d->st.index_load_ms = d->now_ms(d->now_ctx) - rb->t0_ms;
        if (rb->skipped > 0)
            note(d, "%zu stored records could not be read and are not served", rb->skipped);
    } else {
        note(d, "reloading the store: %s", rb->e.msg);
    }
    tuned__index_free(rb->ix);
    free(rb);
    if (d->rebuild_again && !d->stopping) {
        d->rebuild_again = false;
        start_rebuild(d);
    }
}

static void start_rebuild(tuned__daemon *d)
{
    if (d->rebuild != NULL) {
        d->rebuild_again = true;
        return;
    }
    if (d->stopping)
        return;
    tuned__rebuild *rb = calloc(1, sizeof *rb);
    tuned__err e = {0};
    if (rb == NULL || tuned__index_new(&rb->ix, &e) != 0 ||
        tuned__index_set_here(rb->ix, d->here, d->nhere * TUNED__KIND_COUNT, &e) != 0) {
        if (rb != NULL)
            tuned__index_free(rb->ix);
        free(rb);
        note(d, "reloading the store: out of memory");
        return;
    }
    rb->d = d;
    rb->w.work = rebuild_work;
    rb->w.done = rebuild_done;
    rb->t0_ms = d->now_ms(d->now_ctx);
    if (tuned__bg_start(&d->bg, &rb->w, &e) != 0) {
        note(d, "reloading the store: %s", e.msg);
        tuned__index_free(rb->ix);
        free(rb);
        return;
    }
    d->rebuild = rb;
}

void tuned__daemon_refresh(tuned__daemon *d)
{
    uint64_t writes = d->jobs != NULL ? tuned__jobs_writes(d->jobs) : 0;
    if (writes != d->applied_writes) {
        put_written(d, d->index, d->applied_writes, writes);
        d->applied_writes = writes;
    }
    uint64_t txnid, gen;
    tuned__err e = {0};
    /* While a build runs, its end looks again (from its own snapshot on). */
    if (d->rebuild != NULL || d->now_ms(d->now_ctx) < d->rebuild_not_before ||
        tuned__store_txnid(d->store, &txnid, &e) != 0 ||
        txnid == d->seen_txnid)
        return;
    if (tuned__store_generation(d->store, &gen, &e) != 0)
        return;
    d->seen_txnid = txnid;
    if (gen != d->index_gen)
        start_rebuild(d);
}

void tuned__daemon_rebuild(tuned__daemon *d)
{
    start_rebuild(d);
}

void tuned__daemon_reload_free(tuned__daemon *d)
{
    free(d->here);
    free(d->here_id);
    d->here = NULL;
    d->here_id = NULL;
    d->nhere = 0;
}
