/* remote.c: the daemon's side of the fleet tier (remote.h), on the event
 * loop, through the fleet client (src/fleet/fleet.h).
 *
 * Three kinds of work, each a small state machine driven by the client's
 * callbacks (each fires exactly once) and by the daemon's 100 ms tick:
 *
 *   - a read (`readop`): a `get` whose local answer was not exact waits
 *     for the fleet's record of this GPU's toolchain and build, else (the
 *     index of the hardware class) of another toolchain of the build; or a `tune` for a hardware
 *     class no local GPU has waits for its push onto the fleet queue;
 *   - a flight: a tune job, gated in the job table until its lease is
 *     taken (then the fleet is asked once more for the record, and the
 *     tune runs here), or until the record another daemon publishes
 *     arrives (a wait; when it times out, the lease is asked for again:
 *     a dead holder's lease has expired by then). After the tune the
 *     record is published (SET NX, else compare-and-set with NOISE), the
 *     lease released, and a queue job acknowledged;
 *   - the outbox: records tuned while the fleet was unreachable, published
 *     when it is back.
 *
 * A record read from the fleet goes into the serving index at once and
 * into the local store on libuv's thread pool (a local record as fast or
 * faster stays). `tuned forget --remote` is in remote_forget.c. */
#include "src/daemon/remote.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cache/key.h"
#include "src/codegen/templates.h"
#include "src/common/log.h"
#include "src/fleet/fleet.h"
#include "src/tuner/policy.h"
#include "src/tuner/search.h"
#include "src/tuner/tune.h"
#include "tuned.h"

/* A replacing record must be faster than the stored one by this fraction:
 * the fake and real evaluators' p20..p80 spread is about 2% of the median,
 * and records carry no spread of their own. */
#define NOISE 0.02
#define OUTBOX_MAX 256
#define QUEUE_POLL_MS 1000
#define QUEUED_TTL_MS (6u * 3600u * 1000u) /* a queued shape's mark */
#define MAX_CLASSES 8
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

enum { F_ACQUIRE, F_CHECK, F_TUNING, F_WAIT, F_STORE, F_PUBLISH, F_RELEASE, F_ACK, F_DONE };

typedef struct flight {
    struct flight *next;
    struct tuned__remote *rm;
    uint64_t job;
    size_t slot;
    tuned__fleet_id id;
    bool retune;
    int state;
    int busy;              /* fleet calls and store writes in flight */
    bool lease, renewing;
    uint64_t renew_at;     /* loop ms */
    bool has_qjob;         /* a fleet queue job: acknowledged at the end */
    bool failed;           /* the tune failed (a queue job is acknowledged anyway) */
    tuned__fleet_job qjob;
    tuned__record rec;
} flight;

enum { R_GET, R_PUSH };

typedef struct readop {
    struct readop *next;
    struct tuned__remote *rm;
    tuned__later *later;   /* NULL: the connection went away */
    int kind;
    tuned__request req;
    size_t slot;
    tuned__fleet_id id;
} readop;

typedef struct tuned__remote {
    tuned__daemon *d;
    tuned__fleet *f;
    bool stopping, closing, closed;
    flight *flights;
    readop *reads;
    struct store_work *storing; /* records taken, their store write in flight */
    tuned__record *outbox;
    size_t nout;
    bool out_busy;
    bool reading, reclaiming;
    uint64_t next_read_ms, next_reclaim_ms;
    size_t reclaim_next;     /* the class the next reclaim asks for */
    size_t reclaim_class;    /* the class of the reclaim in flight */
    char hw[MAX_CLASSES][64]; /* the local GPUs' hardware classes, once each */
    char reclaim_from[MAX_CLASSES][48]; /* each class's reclaim cursor ("": the start) */
    size_t nhw;
    unsigned lease_ms, reclaim_ms;
    struct {
        uint64_t read_through, read_remote, read_invalid, leases, lease_waits, lease_lost,
            tuned_here, from_fleet, published, replaced, kept, outbox_published,
            outbox_dropped, queued, queue_taken, queue_acked, stored_local;
    } c;
} tuned__remote;

#define logf_(rm, ...) tuned__logf((rm)->d->o->quiet, "tuned serve", __VA_ARGS__)

bool tuned__remote_available(void)
{
    return true;
}

static uint64_t now_ms(const tuned__remote *rm)
{
    return rm->d->now_ms(rm->d->now_ctx);
}

/* Whether a request may go to the fleet now: a client is connected and
 * the daemon is not closing it. */
static bool fleet_open(const tuned__remote *rm)
{
    return rm->f != NULL && !rm->closing;
}

void tuned__remote_hwclass_name(uint64_t hwclass_fp, char *out, size_t n)
{
    snprintf(out, n, "hw%016" PRIx64, hwclass_fp);
}

/* The fleet id of shape (its kernel, dtype and size) on local GPU slot
 * (this build's code and policy). */
static void id_of(const tuned__daemon *d, size_t slot, const tuned__shape *shape,
                  tuned__fleet_id *id)
{
    tuned__record r = d->here[tuned__here_at(slot, tuned__shape_kernel(shape))];
    r.key.kernel = (uint8_t)tuned__shape_kernel(shape);
    r.key.dtype = (uint8_t)shape->dtype;
    r.key.rows = shape->rows;
    r.key.cols = tuned__wire_cols_of(shape);
    r.key.layout = TUNED__LAYOUT_DENSE;
    tuned__fleet_id_from_record(&r, id);
}

bool tuned__remote_usable(tuned__daemon *d)
{
    tuned__remote *rm = d->remote;
    if (rm == NULL || !fleet_open(rm))
        return false;
    tuned__fleet_stats st;
    tuned__fleet_stats_get(rm->f, &st);
    return st.state == TUNED__FLEET_STATE_CONNECTED;
}

/* ---- the local copy of a fleet record ---- */

typedef struct store_work {
    uv_work_t req;
    tuned__remote *rm;
    flight *fl;            /* NULL for a read-through */
    tuned__record rec;
    bool stored, kept;
    tuned__err e;
    struct store_work *prev, *next; /* tuned__remote.storing */
} store_work;

static void flight_stored(flight *fl, bool stored);

static void store_fn(uv_work_t *req)
{
    store_work *w = container_of(req, store_work, req);
    tuned__store *s = w->rm->d->store;
    /* A local record of the key as fast or faster, of this build's policy,
     * stays; one of another policy is not served here and gives way. */
    bool written = false;
    if (tuned__store_put_best_unless_better(s, &w->rec, TUNED__MEASURE_POLICY, &written, &w->e) != 0)
        return;
    w->stored = written;
    w->kept = !written;
}

static void store_done(uv_work_t *req, int status)
{
    store_work *w = container_of(req, store_work, req);
    tuned__remote *rm = w->rm;
    tuned__err e = {0};
    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        rm->storing = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    if (status == 0 && w->stored) {
        rm->c.stored_local++;
        /* Again: an index built from a snapshot before the write lacks it. */
        if (tuned__index_put(rm->d->index, &w->rec, &e) != 0)
            logf_(rm, "index: %s", e.msg);
    } else if (status == 0 && !w->kept) {
        logf_(rm, "fleet: cannot keep a record locally: %s", w->e.msg);
    }
    if (w->fl != NULL)
        flight_stored(w->fl, w->stored || w->kept);
    free(w);
}

/* rec (valid, from the fleet) into the index now and the store soon. */
static void take_record(tuned__remote *rm, const tuned__record *rec, flight *fl)
{
    tuned__daemon *d = rm->d;
    tuned__err e = {0};
    if (tuned__index_put(d->index, rec, &e) != 0)
        logf_(rm, "index: %s", e.msg);
    if (fl != NULL)
        fl->busy++; /* flight_stored ends it */
    store_work *w = d->read_only ? NULL : calloc(1, sizeof *w);
    if (w != NULL) {
        w->rm = rm;
        w->fl = fl;
        w->rec = *rec;
        if (uv_queue_work(d->loop, &w->req, store_fn, store_done) == 0) {
            w->next = rm->storing;
            if (rm->storing != NULL)
                rm->storing->prev = w;
            rm->storing = w;
            return;
        }
        free(w);
    }
    if (fl != NULL)
        flight_stored(fl, false);
}

void tuned__remote_put_pending(tuned__daemon *d, tuned__index *ix)
{
    if (d->remote == NULL)
        return;
    tuned__err e = {0};
    for (store_work *w = d->remote->storing; w != NULL; w = w->next)
        if (tuned__index_put(ix, &w->rec, &e) != 0)
            logf_(d->remote, "index: %s", e.msg);
}

/* ---- reads: get through to the fleet, and the queue push ---- */

static void read_unlink(readop *op)
{
    for (readop **p = &op->rm->reads; *p != NULL; p = &(*p)->next)
        if (*p == op) {
            *p = op->next;
            return;
        }
}

/* Answers op's connection (if it is still there) and frees op. */
static void read_answer(readop *op, tuned__buf *reply)
{
    read_unlink(op);
    tuned__later *l = op->later;
    if (l != NULL) {
        l->pending = false;
        l->done(l, reply->data != NULL ? reply->data : "", reply->len);
    }
    free(op);
}

static void read_local(readop *op, bool from_remote)
{
    tuned__buf b = {0};
    tuned__daemon_get_local(op->rm->d, &op->req, from_remote, &b);
    read_answer(op, &b);
    tuned__buf_free(&b);
}

static void note_invalid(tuned__remote *rm, const tuned__fleet_id *id, const tuned__fleet_reply *r)
{
    rm->c.read_invalid++;
    logf_(rm, "fleet: the record of %s %s %" PRIu64 "x%" PRIu64 " for %s %s fails its check and "
          "is not served (tuned forget --remote removes it): %s",
          tuned__kernel_name(id->kernel), tuned_dtype_name((tuned_dtype)id->dtype), id->rows,
          id->cols, id->hwclass, id->toolchain, r->err.msg);
}

static void on_read_compat(void *ctx, const tuned__fleet_reply *r)
{
    readop *op = ctx;
    if (r->status == TUNED__FLEET_OK) {
        op->rm->c.read_remote++;
        take_record(op->rm, &r->record, NULL);
        read_local(op, true);
        return;
    }
    if (r->status == TUNED__FLEET_INVALID)
        note_invalid(op->rm, &op->id, r);
    read_local(op, false);
}

static void on_read_shapes(void *ctx, const tuned__fleet_reply *r)
{
    readop *op = ctx;
    tuned__remote *rm = op->rm;
    if (r->status == TUNED__FLEET_OK && fleet_open(rm)) {
        for (size_t i = 0; i < r->n_shapes; i++) {
            const tuned__fleet_shape *s = &r->shapes[i];
            if (s->rows != op->id.rows || s->cols != op->id.cols || s->layout != op->id.layout ||
                strcmp(s->toolchain, op->id.toolchain) == 0 || strcmp(s->code, op->id.code) != 0 ||
                strcmp(s->policy, op->id.policy) != 0)
                continue;
            /* Another toolchain of this hardware class, this build's code
             * and policy: compatible. */
            snprintf(op->id.toolchain, sizeof op->id.toolchain, "%s", s->toolchain);
            tuned__err e = {0};
            if (tuned__fleet_get(rm->f, &op->id, on_read_compat, op, &e) == 0)
                return;
            break;
        }
    }
    read_local(op, false);
}

static void on_read_get(void *ctx, const tuned__fleet_reply *r)
{
    readop *op = ctx;
    tuned__remote *rm = op->rm;
    if (r->status == TUNED__FLEET_OK) {
        rm->c.read_remote++;
        take_record(rm, &r->record, NULL);
        read_local(op, true);
        return;
    }
    if (r->status == TUNED__FLEET_INVALID)
        note_invalid(rm, &op->id, r);
    if ((r->status == TUNED__FLEET_MISS || r->status == TUNED__FLEET_INVALID) &&
        fleet_open(rm)) {
        tuned__err e = {0};
        if (tuned__fleet_shapes(rm->f, op->id.kernel, op->id.dtype, op->id.hwclass,
                                on_read_shapes, op, &e) == 0)
            return;
    }
    read_local(op, false);
}

static readop *read_new(tuned__remote *rm, int kind, const tuned__request *r, tuned__later *l)
{
    readop *op = calloc(1, sizeof *op);
    if (op == NULL)
        return NULL;
    op->rm = rm;
    op->kind = kind;
    op->req = *r;
    op->later = l;
    return op;
}

static void read_start(readop *op, tuned__later *l)
{
    op->next = op->rm->reads;
    op->rm->reads = op;
    l->pending = true;
}

bool tuned__remote_read_through(tuned__daemon *d, const tuned__request *r, size_t slot,
                                tuned__later *later)
{
    tuned__remote *rm = d->remote;
    if (slot >= d->nhere || !tuned__remote_usable(d))
        return false;
    readop *op = read_new(rm, R_GET, r, later);
    if (op == NULL)
        return false;
    op->slot = slot;
    id_of(d, slot, &r->shape, &op->id);
    tuned__err e = {0};
    if (tuned__fleet_get(rm->f, &op->id, on_read_get, op, &e) != 0) {
        free(op);
        return false;
    }
    rm->c.read_through++;
    read_start(op, later);
    return true;
}

void tuned__remote_cancel(tuned__daemon *d, tuned__later *later)
{
    if (d->remote == NULL)
        return;
    for (readop *op = d->remote->reads; op != NULL; op = op->next)
        if (op->later == later)
            op->later = NULL;
    later->pending = false;
}

static void on_push(void *ctx, const tuned__fleet_reply *r)
{
    readop *op = ctx;
    tuned__remote *rm = op->rm;
    tuned__daemon *d = rm->d;
    tuned__buf b = {0};
    if (r->status == TUNED__FLEET_OK || r->status == TUNED__FLEET_MISS) {
        rm->c.queued += r->status == TUNED__FLEET_OK;
        tuned__reply_begin(&b, op->req.id);
        tuned__buf_adds(&b, ",\"job\":null");
        tuned__json_key(&b, "joined", false);
        tuned__json_bool(&b, r->status == TUNED__FLEET_MISS);
        tuned__json_key(&b, "state", false);
        tuned__json_str(&b, "queued_remote");
        tuned__json_key(&b, "hwclass", false);
        tuned__json_str(&b, op->id.hwclass);
        tuned__json_key(&b, "entry", false);
        tuned__json_str(&b, r->entry);
        tuned__reply_end(&b);
        logf_(rm, "fleet queue: %s %" PRIu64 "x%" PRIu64 " for %s %s (%s)",
              tuned_dtype_name((tuned_dtype)op->id.dtype), op->id.rows, op->id.cols,
              op->id.hwclass, r->status == TUNED__FLEET_OK ? "queued" : "queued already",
              r->entry);
    } else {
        char msg[512];
        snprintf(msg, sizeof msg, "no GPU of hardware class %s here, and the fleet queue "
                 "answered %s: %s", op->id.hwclass, tuned__fleet_status_name(r->status),
                 r->err.msg);
        d->st.errors++;
        tuned__reply_error(&b, op->req.id, r->status == TUNED__FLEET_CLOSED
                                               ? TUNED__PE_SHUTTING_DOWN : TUNED__PE_NO_GPU,
                           msg);
    }
    read_answer(op, &b);
    tuned__buf_free(&b);
}

bool tuned__remote_queue(tuned__daemon *d, const tuned__request *r, const char *hwclass,
                         tuned__later *later)
{
    tuned__remote *rm = d->remote;
    if (rm == NULL || !fleet_open(rm))
        return false;
    readop *op = read_new(rm, R_PUSH, r, later);
    if (op == NULL)
        return false;
    tuned__fleet_id *id = &op->id;
    if (d->nhere > 0) {
        id_of(d, 0, &r->shape, id); /* the pusher's toolchain, code and policy */
    } else {
        id->kernel = r->kernel;
        id->dtype = (uint8_t)r->shape.dtype;
        id->rows = r->shape.rows;
        id->cols = tuned__wire_cols_of(&r->shape);
        snprintf(id->toolchain, sizeof id->toolchain, "none");
        snprintf(id->code, sizeof id->code, "%016" PRIx64,
                 tuned__kind_identity_hash(tuned__kind(r->kernel)));
        snprintf(id->policy, sizeof id->policy, "%s", TUNED__MEASURE_POLICY);
    }
    id->layout = TUNED__LAYOUT_DENSE;
    snprintf(id->hwclass, sizeof id->hwclass, "%s", hwclass);
    tuned__search_opts so;
    tuned__search_opts_default(&so);
    char params[256];
    snprintf(params, sizeof params, "{\"budget\":%" PRIu64 ",\"time_s\":%.17g,\"seed\":%" PRIu64
             ",\"population\":%" PRIu64 ",\"finalist_rounds\":%" PRIu64 ",\"retune\":%s}",
             r->have_budget ? r->budget : (uint64_t)so.budget,
             r->have_time ? r->time_s : so.time_s, r->have_seed ? r->seed : so.seed,
             r->have_population ? r->population : (uint64_t)so.population,
             r->have_finalist_rounds ? r->finalist_rounds : 0, r->retune ? "true" : "false");
    tuned__err e = {0};
    if (tuned__fleet_queue_push(rm->f, id, params, QUEUED_TTL_MS, on_push, op, &e) != 0) {
        logf_(rm, "fleet queue: %s", e.msg);
        free(op);
        return false;
    }
    read_start(op, later);
    return true;
}

/* ---- flights: one tune job under the fleet's lease ---- */

static void fl_note(flight *fl, const char *fmt, ...) TUNED__PRINTF(2, 3);

static void fl_note(flight *fl, const char *fmt, ...)
{
    char text[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    tuned__jobs_note(fl->rm->d->jobs, fl->job, text);
}

static void fl_end(flight *fl)
{
    fl->state = F_DONE;
}

static void on_ack(void *ctx, const tuned__fleet_reply *r)
{
    flight *fl = ctx;
    fl->busy--;
    fl->rm->c.queue_acked += r->status == TUNED__FLEET_OK;
    fl_end(fl);
}

static void fl_ack(flight *fl)
{
    tuned__remote *rm = fl->rm;
    fl->state = F_ACK;
    tuned__err e = {0};
    if (fl->has_qjob && fleet_open(rm) &&
        tuned__fleet_queue_ack(rm->f, &fl->qjob, on_ack, fl, &e) == 0) {
        fl->busy++;
        return;
    }
    fl_end(fl);
}

static void on_release(void *ctx, const tuned__fleet_reply *r)
{
    (void)r;
    flight *fl = ctx;
    fl->busy--;
    fl->lease = false;
    fl_ack(fl);
}

static void fl_release(flight *fl)
{
    tuned__remote *rm = fl->rm;
    fl->state = F_RELEASE;
    tuned__err e = {0};
    if (fl->lease && fleet_open(rm) &&
        tuned__fleet_lease_release(rm->f, &fl->id, on_release, fl, &e) == 0) {
        fl->busy++;
        return;
    }
    fl->lease = false;
    fl_ack(fl);
}

static bool same_key(const tuned__store_key *a, const tuned__store_key *b)
{
    return a->kernel == b->kernel && a->dtype == b->dtype && a->rows == b->rows &&
           a->cols == b->cols && a->layout == b->layout && a->gpu_fp == b->gpu_fp;
}

/* The record stays to be published when the fleet is back. The head is
 * being published while out_busy, and its reply pops it: it is neither
 * overwritten nor dropped then, or the reply would pop a record never
 * sent. */
static void outbox_add(tuned__remote *rm, const tuned__record *rec)
{
    size_t first_free = rm->out_busy ? 1 : 0; /* the entries add may change */
    for (size_t i = first_free; i < rm->nout; i++)
        if (same_key(&rm->outbox[i].key, &rec->key)) {
            rm->outbox[i] = *rec;
            return;
        }
    if (rm->nout == OUTBOX_MAX) {
        rm->c.outbox_dropped++;
        memmove(rm->outbox + first_free, rm->outbox + first_free + 1,
                (rm->nout - first_free - 1) * sizeof *rm->outbox);
        rm->nout--;
    }
    if (rm->outbox == NULL && (rm->outbox = calloc(OUTBOX_MAX, sizeof *rm->outbox)) == NULL)
        return;
    rm->outbox[rm->nout++] = *rec;
}

static void on_replace(void *ctx, const tuned__fleet_reply *r)
{
    flight *fl = ctx;
    tuned__remote *rm = fl->rm;
    fl->busy--;
    if (r->status == TUNED__FLEET_OK) {
        rm->c.replaced++;
        fl_note(fl, "published (replaced a slower record)");
    } else if (r->status == TUNED__FLEET_MISS) {
        rm->c.kept++;
        fl_note(fl, "the fleet's record stays: %s", r->err.msg);
    } else if (r->status != TUNED__FLEET_CLOSED && r->status != TUNED__FLEET_DENIED) {
        outbox_add(rm, &fl->rec);
        fl_note(fl, "not published (%s): will be when the fleet is back",
                tuned__fleet_status_name(r->status));
    }
    fl_release(fl);
}

static void on_publish(void *ctx, const tuned__fleet_reply *r)
{
    flight *fl = ctx;
    tuned__remote *rm = fl->rm;
    fl->busy--;
    tuned__err e = {0};
    switch (r->status) {
    case TUNED__FLEET_OK:
        rm->c.published++;
        fl_note(fl, "published");
        break;
    case TUNED__FLEET_MISS: {
        /* One is stored: ours replaces it only when faster beyond the noise. */
        tuned__fleet_id id;
        tuned__fleet_id_from_record(&fl->rec, &id);
        if (fleet_open(rm) &&
            tuned__fleet_replace(rm->f, &id, &fl->rec, NOISE, on_replace, fl, &e) == 0) {
            fl->busy++;
            return;
        }
        break;
    }
    case TUNED__FLEET_DENIED:
        logf_(rm, "fleet: not allowed to publish: %s", r->err.msg);
        fl_note(fl, "not published: %s", r->err.msg);
        break;
    default:
        outbox_add(rm, &fl->rec);
        fl_note(fl, "not published (%s): will be when the fleet is back",
                tuned__fleet_status_name(r->status));
        break;
    }
    fl_release(fl);
}

static void fl_publish(flight *fl)
{
    tuned__remote *rm = fl->rm;
    fl->state = F_PUBLISH;
    tuned__fleet_id id;
    tuned__fleet_id_from_record(&fl->rec, &id);
    tuned__err e = {0};
    if (!fleet_open(rm)) {
        fl_release(fl);
        return;
    }
    if (tuned__fleet_publish(rm->f, &id, &fl->rec, on_publish, fl, &e) != 0) {
        logf_(rm, "fleet: job %" PRIu64 ": not published: %s", fl->job, e.msg);
        fl_release(fl);
        return;
    }
    fl->busy++;
}

static void flight_stored(flight *fl, bool stored)
{
    tuned__remote *rm = fl->rm;
    fl->busy--;
    if (tuned__jobs_resolve(rm->d->jobs, fl->job, &fl->rec, stored)) {
        rm->c.from_fleet++;
        fl_note(fl, "done by the fleet's record");
        logf_(rm, "fleet: job %" PRIu64 ": %s %.2f us, the fleet's record", fl->job,
              fl->rec.config, fl->rec.median_us);
    }
    fl_release(fl);
}

static void fl_store(flight *fl, const tuned__record *rec)
{
    fl->state = F_STORE;
    fl->rec = *rec;
    take_record(fl->rm, rec, fl);
}

static void fl_tune(flight *fl, const char *fmt, ...) TUNED__PRINTF(2, 3);

static void fl_tune(flight *fl, const char *fmt, ...)
{
    tuned__remote *rm = fl->rm;
    char text[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fl->state = F_TUNING;
    tuned__jobs_note(rm->d->jobs, fl->job, text);
    if (!tuned__jobs_ungate(rm->d->jobs, fl->job)) {
        fl_release(fl); /* cancelled meanwhile (a stop) */
        return;
    }
    rm->c.tuned_here++;
}

static void fl_acquire(flight *fl);

static void on_wait(void *ctx, const tuned__fleet_reply *r)
{
    flight *fl = ctx;
    tuned__remote *rm = fl->rm;
    fl->busy--;
    switch (r->status) {
    case TUNED__FLEET_OK:
        fl_store(fl, &r->record);
        break;
    case TUNED__FLEET_CLOSED:
        fl_end(fl);
        break;
    case TUNED__FLEET_TIMEOUT:
    case TUNED__FLEET_INVALID:
    case TUNED__FLEET_MISS: {
        tuned__job_view v;
        if (!tuned__jobs_get(rm->d->jobs, fl->job, &v) || v.state != TUNED__JOB_QUEUED)
            fl_end(fl);
        else
            fl_acquire(fl); /* the holder may be gone: its lease expires */
        break;
    }
    default:
        fl_tune(fl, "the fleet answered %s while waiting: tuning here",
                tuned__fleet_status_name(r->status));
        break;
    }
}

static void fl_wait(flight *fl, const char *holder, int64_t ttl_ms)
{
    tuned__remote *rm = fl->rm;
    fl->state = F_WAIT;
    rm->c.lease_waits++;
    fl_note(fl, "waiting for %s, which tunes it (its lease: %lld ms left)", holder,
            (long long)ttl_ms);
    /* Until the lease would expire: then it is asked for again. */
    int64_t t = ttl_ms > 0 ? ttl_ms + 250 : 1000;
    if (t > (int64_t)rm->lease_ms + 1000)
        t = (int64_t)rm->lease_ms + 1000;
    tuned__err e = {0};
    if (tuned__fleet_wait(rm->f, &fl->id, (unsigned)t, on_wait, fl, &e) != 0) {
        fl_tune(fl, "the fleet: %s: tuning here", e.msg);
        return;
    }
    fl->busy++;
}

static void on_check(void *ctx, const tuned__fleet_reply *r)
{
    flight *fl = ctx;
    fl->busy--;
    if (r->status == TUNED__FLEET_OK)
        fl_store(fl, &r->record);
    else if (r->status == TUNED__FLEET_CLOSED)
        fl_release(fl);
    else
        fl_tune(fl, "fleet lease taken: tuning here");
}

static void on_acquire(void *ctx, const tuned__fleet_reply *r)
{
    flight *fl = ctx;
    tuned__remote *rm = fl->rm;
    fl->busy--;
    tuned__err e = {0};
    switch (r->status) {
    case TUNED__FLEET_OK:
        fl->lease = true;
        rm->c.leases++;
        fl->renew_at = now_ms(rm) + rm->lease_ms / 3;
        /* Published between our first look and the lease? */
        if (!fl->retune && fleet_open(rm) &&
            tuned__fleet_get(rm->f, &fl->id, on_check, fl, &e) == 0) {
            fl->state = F_CHECK;
            fl->busy++;
            return;
        }
        fl_tune(fl, "fleet lease taken: tuning here");
        break;
    case TUNED__FLEET_MISS:
        fl_wait(fl, r->holder, r->ttl_ms);
        break;
    case TUNED__FLEET_CLOSED:
        fl_end(fl);
        break;
    default:
        fl_tune(fl, "the fleet answered %s (%s): tuning here", tuned__fleet_status_name(r->status),
                r->err.msg);
        break;
    }
}

static void fl_acquire(flight *fl)
{
    tuned__remote *rm = fl->rm;
    fl->state = F_ACQUIRE;
    tuned__err e = {0};
    if (!fleet_open(rm)) {
        fl_tune(fl, "no fleet: tuning here");
        return;
    }
    if (tuned__fleet_lease_acquire(rm->f, &fl->id, rm->lease_ms, on_acquire, fl, &e) != 0) {
        fl_tune(fl, "the fleet: %s: tuning here", e.msg);
        return;
    }
    fl->busy++;
}

static void on_renew(void *ctx, const tuned__fleet_reply *r)
{
    flight *fl = ctx;
    tuned__remote *rm = fl->rm;
    fl->busy--;
    fl->renewing = false;
    if (r->status == TUNED__FLEET_OK) {
        fl->renew_at = now_ms(rm) + rm->lease_ms / 3;
    } else if (r->status == TUNED__FLEET_MISS) {
        fl->lease = false;
        rm->c.lease_lost++;
        logf_(rm, "fleet: job %" PRIu64 ": lease lost (%s); the tune goes on", fl->job,
              r->err.msg);
    } else {
        fl->renew_at = now_ms(rm) + rm->lease_ms / 6;
    }
}

static flight *flight_new(tuned__remote *rm, uint64_t job, size_t slot, const tuned__shape *shape,
                          bool retune)
{
    flight *fl = calloc(1, sizeof *fl);
    if (fl == NULL)
        return NULL;
    fl->rm = rm;
    fl->job = job;
    fl->slot = slot;
    fl->retune = retune;
    id_of(rm->d, slot, shape, &fl->id);
    fl->next = rm->flights;
    rm->flights = fl;
    return fl;
}

void tuned__remote_tune(tuned__daemon *d, uint64_t job, size_t slot, const tuned__shape *shape,
                        bool retune)
{
    tuned__remote *rm = d->remote;
    flight *fl = rm != NULL && slot < d->nhere ? flight_new(rm, job, slot, shape, retune) : NULL;
    if (fl == NULL) {
        tuned__jobs_ungate(d->jobs, job);
        return;
    }
    fl_acquire(fl);
}

/* A tuning flight's job, followed from the tick. */
static void fl_follow(flight *fl, uint64_t now)
{
    tuned__remote *rm = fl->rm;
    tuned__job_view v;
    if (!tuned__jobs_get(rm->d->jobs, fl->job, &v)) {
        fl_release(fl);
        return;
    }
    if (v.state == TUNED__JOB_DONE) {
        if (tuned__jobs_record(rm->d->jobs, fl->job, &fl->rec))
            fl_publish(fl);
        else
            fl_release(fl);
        return;
    }
    if (v.state == TUNED__JOB_FAILED || v.state == TUNED__JOB_CANCELLED) {
        /* A cancelled queue job (a stop) stays pending: another takes it. */
        if (v.state == TUNED__JOB_CANCELLED)
            fl->has_qjob = false;
        fl_release(fl);
        return;
    }
    tuned__err e = {0};
    if (fl->lease && !fl->renewing && now >= fl->renew_at && fleet_open(rm) &&
        tuned__fleet_lease_renew(rm->f, &fl->id, rm->lease_ms, on_renew, fl, &e) == 0) {
        fl->renewing = true;
        fl->busy++;
    }
}

/* ---- the queue ---- */

static void on_ack_only(void *ctx, const tuned__fleet_reply *r)
{
    tuned__remote *rm = ctx;
    rm->c.queue_acked += r->status == TUNED__FLEET_OK;
}

static void take_job(tuned__remote *rm, const tuned__fleet_job *qj)
{
    tuned__daemon *d = rm->d;
    char hw[64];
    size_t slot = d->nhere;
    for (size_t i = 0; i < d->nhere; i++) {
        tuned__remote_hwclass_name(d->here_id[tuned__here_at(i, TUNED__KIND_DEFAULT)].hwclass.fp,
                                   hw, sizeof hw);
        if (strcmp(hw, qj->id.hwclass) == 0) {
            slot = i;
            break;
        }
    }
    tuned__jobs_gpu g;
    if (slot == d->nhere || !tuned__jobs_gpu_at(d->jobs, slot, &g) || d->read_only ||
        tuned__kind(qj->id.kernel) == NULL)
        return; /* stays pending: another consumer reclaims it */
    tuned__job_params p = {.gpu_fp = g.gpu.fingerprint, .gated = true};
    p.shape.kernel = qj->id.kernel;
    p.shape.dtype = (tuned_dtype)qj->id.dtype;
    p.shape.rows = qj->id.rows;
    tuned__shape_set_wire_cols(&p.shape, qj->id.cols);
    tuned__search_opts_default(&p.search);
    json_error_t je;
    json_t *params = json_loads(qj->params, 0, &je);
    if (json_is_object(params)) {
        json_t *v;
        if (json_is_integer(v = json_object_get(params, "budget")) && json_integer_value(v) >= 1 &&
            json_integer_value(v) <= 100000)
            p.search.budget = (size_t)json_integer_value(v);
        if (json_is_number(v = json_object_get(params, "time_s")) && json_number_value(v) > 0 &&
            json_number_value(v) <= 86400)
            p.search.time_s = json_number_value(v);
        if (json_is_integer(v = json_object_get(params, "seed")) && json_integer_value(v) >= 0)
            p.search.seed = (uint64_t)json_integer_value(v);
        if (json_is_integer(v = json_object_get(params, "population")) &&
            json_integer_value(v) >= 1 && json_integer_value(v) <= TUNED__PROTO_POPULATION_MAX)
            p.search.population = (size_t)json_integer_value(v);
        if (json_is_integer(v = json_object_get(params, "finalist_rounds")) &&
            json_integer_value(v) >= 1 && json_integer_value(v) <= TUNED__FINALIST_ROUNDS_MAX)
            p.finalist_rounds = (int)json_integer_value(v);
        p.retune = json_is_true(json_object_get(params, "retune"));
    }
    json_decref(params);
    uint64_t id;
    bool joined;
    int rc = tuned__jobs_submit(d->jobs, &p, &id, &joined);
    tuned__err e = {0};
    if (rc != TUNED__SUBMIT_OK) {
        logf_(rm, "fleet queue: job %s not taken now (the job table said %d)", qj->entry, rc);
        return;
    }
    rm->c.queue_taken++;
    logf_(rm, "fleet queue: job %s from %s: %s %" PRIu64 "x%" PRIu64 " -> job %" PRIu64 "%s",
          qj->entry, qj->origin, tuned_dtype_name(p.shape.dtype), p.shape.rows, p.shape.cols, id,
          joined ? " (joined)" : "");
    if (joined) {
        /* The job of that key here publishes; this entry is done with. */
        tuned__fleet_queue_ack(rm->f, qj, on_ack_only, rm, &e);
        return;
    }
    flight *fl = flight_new(rm, id, slot, &p.shape, p.retune);
    if (fl == NULL) {
        tuned__jobs_ungate(d->jobs, id);
        return;
    }
    fl->has_qjob = true;
    fl->qjob = *qj;
    fl_acquire(fl);
}

static void on_queue_read(void *ctx, const tuned__fleet_reply *r)
{
    tuned__remote *rm = ctx;
    rm->reading = false;
    if (r->status != TUNED__FLEET_OK || rm->closing || rm->stopping)
        return;
    for (size_t i = 0; i < r->n_jobs; i++)
        take_job(rm, &r->jobs[i]);
}

static void on_queue_reclaim(void *ctx, const tuned__fleet_reply *r)
{
    tuned__remote *rm = ctx;
    rm->reclaiming = false;
    if (r->status != TUNED__FLEET_OK || rm->closing || rm->stopping)
        return;
    /* The scan goes on from its cursor next time, so that a job left
     * behind many live ones is reached; "0-0" starts it over. */
    snprintf(rm->reclaim_from[rm->reclaim_class], sizeof rm->reclaim_from[0], "%s",
             strcmp(r->entry, "0-0") == 0 ? "" : r->entry);
    for (size_t i = 0; i < r->n_jobs; i++) {
        logf_(rm, "fleet queue: job %s taken over (left unacknowledged %u ms)", r->jobs[i].entry,
              rm->reclaim_ms);
        take_job(rm, &r->jobs[i]);
    }
}

static void queue_tick(tuned__remote *rm, uint64_t now)
{
    tuned__daemon *d = rm->d;
    if (rm->nhw == 0 || d->read_only)
        return;
    tuned__err e = {0};
    tuned__jobs_counts c;
    tuned__jobs_counts_get(d->jobs, &c);
    /* A job at a time beyond what the GPUs run: the rest stays for others. */
    if (!rm->reading && now >= rm->next_read_ms && c.queued == 0) {
        const char *hw[MAX_CLASSES];
        for (size_t i = 0; i < rm->nhw; i++)
            hw[i] = rm->hw[i];
        rm->next_read_ms = now + QUEUE_POLL_MS;
        if (tuned__fleet_queue_read(rm->f, hw, rm->nhw, 1, on_queue_read, rm, &e) == 0)
            rm->reading = true;
    }
    if (!rm->reclaiming && now >= rm->next_reclaim_ms && c.queued == 0) {
        unsigned every = rm->reclaim_ms / 2 > QUEUE_POLL_MS ? rm->reclaim_ms / 2 : QUEUE_POLL_MS;
        rm->next_reclaim_ms = now + every;
        size_t k = rm->reclaim_next++ % rm->nhw;
        if (tuned__fleet_queue_reclaim(rm->f, rm->hw[k], rm->reclaim_from[k], rm->reclaim_ms, 1,
                                       on_queue_reclaim, rm, &e) == 0) {
            rm->reclaiming = true;
            rm->reclaim_class = k;
        }
    }
}

/* ---- the outbox ---- */

static void outbox_pop(tuned__remote *rm)
{
    rm->out_busy = false;
    if (rm->nout == 0)
        return;
    memmove(rm->outbox, rm->outbox + 1, (rm->nout - 1) * sizeof *rm->outbox);
    rm->nout--;
}

static void on_out_replace(void *ctx, const tuned__fleet_reply *r)
{
    tuned__remote *rm = ctx;
    if (r->status == TUNED__FLEET_TIMEOUT || r->status == TUNED__FLEET_DOWN ||
        r->status == TUNED__FLEET_CLOSED) {
        rm->out_busy = false;
        return;
    }
    rm->c.outbox_published += r->status == TUNED__FLEET_OK;
    outbox_pop(rm);
}

static void on_out_publish(void *ctx, const tuned__fleet_reply *r)
{
    tuned__remote *rm = ctx;
    tuned__err e = {0};
    if (r->status == TUNED__FLEET_MISS && fleet_open(rm)) {
        tuned__fleet_id id;
        tuned__fleet_id_from_record(&rm->outbox[0], &id);
        if (tuned__fleet_replace(rm->f, &id, &rm->outbox[0], NOISE, on_out_replace, rm, &e) == 0)
            return;
    }
    if (r->status == TUNED__FLEET_TIMEOUT || r->status == TUNED__FLEET_DOWN ||
        r->status == TUNED__FLEET_CLOSED) {
        rm->out_busy = false;
        return;
    }
    rm->c.outbox_published += r->status == TUNED__FLEET_OK;
    outbox_pop(rm);
}

static void outbox_tick(tuned__remote *rm)
{
    if (rm->out_busy || rm->nout == 0)
        return;
    tuned__fleet_id id;
    tuned__fleet_id_from_record(&rm->outbox[0], &id);
    tuned__err e = {0};
    if (tuned__fleet_publish(rm->f, &id, &rm->outbox[0], on_out_publish, rm, &e) == 0) {
        rm->out_busy = true;
        return;
    }
    logf_(rm, "fleet: dropped from the outbox: %s", e.msg);
    outbox_pop(rm);
}

/* ---- the client's life ---- */

void tuned__remote_tick(tuned__daemon *d)
{
    tuned__remote *rm = d->remote;
    if (rm == NULL)
        return;
    uint64_t now = now_ms(rm);
    for (flight **p = &rm->flights; *p != NULL;) {
        flight *fl = *p;
        if (fl->state == F_TUNING)
            fl_follow(fl, now);
        if (fl->state == F_DONE && fl->busy == 0) {
            *p = fl->next;
            free(fl);
            continue;
        }
        p = &fl->next;
    }
    if (rm->closing || rm->stopping || !tuned__remote_usable(d))
        return;
    outbox_tick(rm);
    queue_tick(rm, now);
}

int tuned__remote_open(tuned__daemon *d, tuned__err *e)
{
    const tuned__serve_opts *o = d->o;
    if (o->remote[0] == '\0')
        return 0;
    tuned__remote *rm = calloc(1, sizeof *rm);
    if (rm == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "remote: out of memory");
    rm->d = d;
    rm->lease_ms = (unsigned)(o->lease_s * 1000.0);
    rm->reclaim_ms = (unsigned)(o->reclaim_s * 1000.0);
    tuned__fleet_opts fo;
    tuned__fleet_opts_init(&fo);
    fo.url = o->remote;
    if (strncmp(o->remote_credentials, "env:", 4) == 0)
        fo.credentials_env = o->remote_credentials + 4;
    else if (o->remote_credentials[0] != '\0')
        fo.credentials_file = o->remote_credentials;
    fo.timeout_ms = (unsigned)(o->remote_timeout_s * 1000.0);
    fo.connect_timeout_ms = 2 * fo.timeout_ms;
    int rc = tuned__fleet_open(d->loop, &fo, &rm->f, e);
    if (rc != 0) {
        free(rm);
        return rc;
    }
    for (size_t i = 0; i < d->nhere && rm->nhw < MAX_CLASSES; i++) {
        char hw[64];
        tuned__remote_hwclass_name(d->here_id[tuned__here_at(i, TUNED__KIND_DEFAULT)].hwclass.fp,
                                   hw, sizeof hw);
        bool seen = false;
        for (size_t k = 0; k < rm->nhw; k++)
            seen = seen || strcmp(rm->hw[k], hw) == 0;
        if (!seen)
            snprintf(rm->hw[rm->nhw++], sizeof rm->hw[0], "%s", hw);
        /* The fleet's names and the identity's must be one. */
        tuned__fleet_id id;
        tuned__shape s = {.dtype = TUNED_FP16, .rows = 1, .cols = 1};
        id_of(d, i, &s, &id);
        if (strcmp(id.hwclass, hw) != 0)
            logf_(rm, "fleet: GPU %zu's hardware class is %s to the fleet, %s here", i,
                  id.hwclass, hw);
    }
    d->remote = rm;
    logf_(rm, "fleet: %s as %s (lease %u ms, queue of %zu hardware class%s)", o->remote,
          tuned__fleet_owner(rm->f), rm->lease_ms, rm->nhw, rm->nhw == 1 ? "" : "es");
    return 0;
}

void tuned__remote_stop(tuned__daemon *d)
{
    if (d->remote != NULL)
        d->remote->stopping = true;
}

static void on_closed(void *ctx)
{
    tuned__remote *rm = ctx;
    rm->closed = true;
    rm->f = NULL;
}

bool tuned__remote_close(tuned__daemon *d)
{
    tuned__remote *rm = d->remote;
    if (rm == NULL || rm->closed)
        return true;
    if (!rm->closing) {
        rm->closing = true;
        tuned__fleet_close(rm->f, on_closed, rm);
    }
    return rm->closed;
}

void tuned__remote_free(tuned__daemon *d)
{
    tuned__remote *rm = d->remote;
    if (rm == NULL)
        return;
    while (rm->flights != NULL) {
        flight *next = rm->flights->next;
        free(rm->flights);
        rm->flights = next;
    }
    while (rm->reads != NULL) {
        readop *next = rm->reads->next;
        free(rm->reads);
        rm->reads = next;
    }
    free(rm->outbox);
    free(rm);
    d->remote = NULL;
}

void tuned__remote_stats(tuned__daemon *d, tuned__buf *out)
{
    tuned__remote *rm = d->remote;
    if (rm == NULL)
        return;
    tuned__fleet_stats st;
    memset(&st, 0, sizeof st);
    if (rm->f != NULL)
        tuned__fleet_stats_get(rm->f, &st);
    tuned__buf_adds(out, ",\"remote\":{\"url\":");
    tuned__json_str(out, d->o->remote);
    tuned__json_key(out, "state", false);
    tuned__json_str(out, rm->f != NULL ? tuned__fleet_state_name(st.state) : "closed");
    tuned__json_key(out, "subscribed", false);
    tuned__json_bool(out, st.subscribed);
    tuned__json_key(out, "last_error", false);
    tuned__json_str(out, st.last_error);
    tuned__json_key(out, "owner", false);
    tuned__json_str(out, rm->f != NULL ? tuned__fleet_owner(rm->f) : "");
    /* The kernel code and policy this daemon's keys end with, to find
     * them in the server: the default kind's code, and each kind's. */
    char code[17];
    snprintf(code, sizeof code, "%016" PRIx64,
             tuned__kind_identity_hash(tuned__kind(TUNED__KIND_DEFAULT)));
    tuned__json_key(out, "code", false);
    tuned__json_str(out, code);
    tuned__json_key(out, "codes", false);
    tuned__buf_add(out, "{", 1);
    for (size_t k = 0; k < tuned__kind_count(); k++) {
        const tuned__kind_spec *kind = tuned__kind_at(k);
        snprintf(code, sizeof code, "%016" PRIx64, tuned__kind_identity_hash(kind));
        tuned__json_key(out, kind->name, k == 0);
        tuned__json_str(out, code);
    }
    tuned__buf_add(out, "}", 1);
    tuned__json_key(out, "policy", false);
    tuned__json_str(out, TUNED__MEASURE_POLICY);
    tuned__buf_printf(out, ",\"fleet\":{\"gets\":%" PRIu64 ",\"hits\":%" PRIu64
                      ",\"misses\":%" PRIu64 ",\"invalid\":%" PRIu64
                      ",\"puts\":%" PRIu64 ",\"puts_applied\":%" PRIu64 ",\"errors\":%" PRIu64
                      ",\"timeouts\":%" PRIu64 ",\"connects\":%" PRIu64
                      ",\"connect_failures\":%" PRIu64 ",\"notifications\":%" PRIu64
                      ",\"jobs_invalid\":%" PRIu64 "}",
                      st.gets, st.hits, st.misses, st.invalid, st.puts, st.puts_applied,
                      st.errors, st.timeouts, st.connects, st.connect_failures, st.notifications,
                      st.jobs_invalid);
    size_t flights = 0;
    for (flight *fl = rm->flights; fl != NULL; fl = fl->next)
        flights += fl->state != F_DONE;
    tuned__buf_printf(out, ",\"read_through\":%" PRIu64 ",\"read_remote\":%" PRIu64
                      ",\"read_invalid\":%" PRIu64 ",\"stored_local\":%" PRIu64
                      ",\"leases\":%" PRIu64 ",\"lease_waits\":%" PRIu64 ",\"lease_lost\":%" PRIu64
                      ",\"tuned_here\":%" PRIu64 ",\"from_fleet\":%" PRIu64
                      ",\"published\":%" PRIu64 ",\"replaced\":%" PRIu64 ",\"kept\":%" PRIu64
                      ",\"outbox\":%zu,\"outbox_published\":%" PRIu64 ",\"outbox_dropped\":%" PRIu64
                      ",\"queued_remote\":%" PRIu64 ",\"queue_taken\":%" PRIu64
                      ",\"queue_acked\":%" PRIu64 ",\"flights\":%zu}",
                      rm->c.read_through, rm->c.read_remote, rm->c.read_invalid,
                      rm->c.stored_local, rm->c.leases, rm->c.lease_waits, rm->c.lease_lost,
                      rm->c.tuned_here, rm->c.from_fleet, rm->c.published, rm->c.replaced,
                      rm->c.kept, rm->nout, rm->c.outbox_published, rm->c.outbox_dropped,
                      rm->c.queued, rm->c.queue_taken, rm->c.queue_acked, flights);
}
