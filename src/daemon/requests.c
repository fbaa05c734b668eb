/* requests.c: what each request means: one validated request in, one
 * reply line out (state.h). Runs on the event loop's thread and must
 * never block: answers come from the in-memory index, jobs are handed to
 * the job threads, and the only store access is the cheap look for a
 * change (reload.c).
 *
 * Which GPU a request means: "gpu" absent is the daemon's first GPU (or,
 * with no GPU here, the only GPU the store knows); an ordinal is a local
 * GPU; a fingerprint or a model name is a local GPU of that model or one
 * the store has records of. `get` answers `exact` from the record of that
 * key, else `compatible` (a record of the same hardware class and kernel
 * code measured under another driver, NVRTC or template build, whose
 * config is valid for this shape), else `nearest` (the closest stored
 * shape on that GPU and dtype whose config is valid for this shape), else
 * `default` (the first heuristic seed of the variant space). With a fleet,
 * an answer that is not exact waits for the remote store first, whose
 * record wins when it has one (remote.c); a tune for a GPU model not here
 * goes to its hardware class's fleet queue. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "src/common/hash.h"
#include "src/tuner/effort.h"
#include "src/tuner/space.h"
#include "src/tuner/tune.h"
#include "src/daemon/remote.h"
#include "src/daemon/state.h"
#include "tuned.h"

typedef struct target {
    uint64_t fp;         /* 0: a hardware class only (a fleet queue target) */
    char name[128];
    int arch;
    int sms;             /* 0: unknown */
    uint64_t total_mem;  /* 0: unknown */
    bool local;
    size_t slot;         /* local: the GPU's position (tuned__here_at) */
    uint64_t rec_fp;     /* the fingerprint the request's kind's records on it
                            are filed under (tuned__gpu_kind_fp) */
    uint64_t hwclass;    /* its hardware class fingerprint; 0: unknown */
} target;

static int error_reply(tuned__daemon *d, tuned__buf *out, const tuned__request *r, int code,
                       const char *fmt, ...) TUNED__PRINTF(5, 6);

static int error_reply(tuned__daemon *d, tuned__buf *out, const tuned__request *r, int code,
                       const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    d->st.errors++;
    tuned__reply_error(out, r->id, code, msg);
    return -1;
}

_Static_assert(sizeof(((target *)0)->name) == sizeof(((tuned__jobs_gpu *)0)->gpu.name) &&
                   sizeof(((target *)0)->name) == sizeof(((tuned__index_gpu *)0)->name),
               "a target's GPU name is copied whole from a local or an indexed GPU's");

static void from_local(const tuned__daemon *d, size_t slot, const tuned__jobs_gpu *g,
                       unsigned kind, target *t)
{
    t->slot = slot;
    t->hwclass = slot < d->nhere ? d->here_id[tuned__here_at(slot, kind)].hwclass.fp : 0;
    t->fp = g->gpu.fingerprint;
    t->rec_fp = tuned__gpu_kind_fp(&g->gpu, kind);
    /* The same size: a copy, not a printf per get. */
    memcpy(t->name, g->gpu.name, sizeof t->name);
    t->name[sizeof t->name - 1] = '\0';
    t->arch = g->arch;
    t->sms = g->gpu.sm_count;
    t->total_mem = g->gpu.total_mem;
    t->local = true;
}

static void from_index(const tuned__index_gpu *g, target *t)
{
    t->fp = g->fp;
    t->rec_fp = g->fp;
    memcpy(t->name, g->name, sizeof t->name);
    t->name[sizeof t->name - 1] = '\0';
    t->arch = g->arch;
    t->sms = g->sms;
    t->total_mem = g->total_mem;
    t->local = false;
    t->hwclass = g->hwclass;
}

/* "hw" + 16 hex digits: a hardware class as the fleet names it. */
static bool hwclass_sel(const char *name, uint64_t *out)
{
    if (strncmp(name, "hw", 2) != 0 || strlen(name) != 18)
        return false;
    uint64_t v = 0;
    for (const char *p = name + 2; *p != '\0'; p++) {
        int c = *p;
        int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (x < 0)
            return false;
        v = v << 4 | (uint64_t)x;
    }
    *out = v;
    return v != 0;
}

static int resolve_gpu(tuned__daemon *d, const tuned__request *r, target *t, tuned__buf *out)
{
    memset(t, 0, sizeof *t);
    const tuned__gpu_sel *sel = &r->gpu;
    unsigned kind = tuned__shape_kernel(&r->shape);
    size_t nlocal = tuned__jobs_gpu_count(d->jobs);
    size_t nidx = tuned__index_gpu_count(d->index);
    tuned__jobs_gpu g;
    switch (sel->kind) {
    case TUNED__GPU_ANY:
        if (tuned__jobs_gpu_at(d->jobs, 0, &g)) {
            from_local(d, 0, &g, kind, t);
            return 0;
        }
        if (nidx == 1) {
            from_index(tuned__index_gpu_at(d->index, 0), t);
            return 0;
        }
        if (nidx == 0)
            return error_reply(d, out, r, TUNED__PE_NO_GPU,
                               "no GPU here (%s) and no stored record names one",
                               tuned__jobs_no_gpu(d->jobs));
        return error_reply(d, out, r, TUNED__PE_GPU_REQUIRED,
                           "no GPU here and the store holds %zu GPUs: name one in \"gpu\"", nidx);
    case TUNED__GPU_ORDINAL:
        for (size_t i = 0; i < nlocal; i++)
            if (tuned__jobs_gpu_at(d->jobs, i, &g) && g.gpu.ordinal == sel->ordinal) {
                from_local(d, i, &g, kind, t);
                return 0;
            }
        return error_reply(d, out, r, TUNED__PE_UNKNOWN_GPU, "no GPU %d here (%zu GPUs)",
                           sel->ordinal, nlocal);
    case TUNED__GPU_FP:
        for (size_t i = 0; i < nlocal; i++)
            if (tuned__jobs_gpu_at(d->jobs, i, &g) && g.gpu.fingerprint == sel->fp) {
                from_local(d, i, &g, kind, t);
                return 0;
            }
        for (size_t i = 0; i < nidx; i++)
            if (tuned__index_gpu_at(d->index, i)->fp == sel->fp) {
                from_index(tuned__index_gpu_at(d->index, i), t);
                return 0;
            }
        return error_reply(d, out, r, TUNED__PE_UNKNOWN_GPU,
                           "no GPU here or in the store has fingerprint %016" PRIx64, sel->fp);
    default:
        for (size_t i = 0; i < nlocal; i++)
            if (tuned__jobs_gpu_at(d->jobs, i, &g) && strcasecmp(g.gpu.name, sel->name) == 0) {
                from_local(d, i, &g, kind, t);
                return 0;
            }
        uint64_t hw;
        if (hwclass_sel(sel->name, &hw)) {
            for (size_t i = 0; i < nlocal && i < d->nhere; i++)
                if (d->here_id[tuned__here_at(i, kind)].hwclass.fp == hw &&
                    tuned__jobs_gpu_at(d->jobs, i, &g)) {
                    from_local(d, i, &g, kind, t);
                    return 0;
                }
            for (size_t i = 0; i < nidx; i++)
                if (tuned__index_gpu_at(d->index, i)->hwclass == hw) {
                    from_index(tuned__index_gpu_at(d->index, i), t);
                    return 0;
                }
            if (d->remote != NULL) {
                /* Known to the fleet maybe: its queue, for a tune. */
                snprintf(t->name, sizeof t->name, "%s", sel->name);
                t->hwclass = hw;
                return 0;
            }
            return error_reply(d, out, r, TUNED__PE_UNKNOWN_GPU,
                               "no GPU here or in the store is of hardware class %s", sel->name);
        }
        for (size_t i = 0; i < nidx; i++)
            if (strcasecmp(tuned__index_gpu_at(d->index, i)->name, sel->name) == 0) {
                from_index(tuned__index_gpu_at(d->index, i), t);
                return 0;
            }
        return error_reply(d, out, r, TUNED__PE_UNKNOWN_GPU,
                           "no GPU here or in the store is named \"%s\"", sel->name);
    }
}

/* The tensors the shape's kind moves must fit the GPU's memory. */
static int check_fits(tuned__daemon *d, const tuned__request *r, const target *t, tuned__buf *out)
{
    unsigned tensors = tuned__shape_matrices(&r->shape);
    uint64_t row_bytes = tensors * r->shape.cols * tuned_dtype_size(r->shape.dtype);
    if (t->total_mem != 0 && r->shape.rows > t->total_mem / row_bytes)
        return error_reply(d, out, r, TUNED__PE_TOO_BIG,
                           "%" PRIu64 "x%" PRIu64 " %s %s: its %u tensors exceed the %" PRIu64
                           " MiB of %s",
                           r->shape.rows, r->shape.cols, tuned_dtype_name(r->shape.dtype),
                           tuned__kernel_name(r->kernel), tensors, t->total_mem >> 20, t->name);
    return 0;
}

/* The job parameters of r's search: the defaults, with what r sets. */
static void search_params(const tuned__request *r, tuned__job_params *p)
{
    tuned__search_opts *o = &p->search;
    tuned__search_opts_default(o);
    if (r->have_budget)
        o->budget = (size_t)r->budget;
    if (r->have_time)
        o->time_s = r->time_s;
    if (r->have_seed)
        o->seed = r->seed;
    if (r->have_population)
        o->population = (size_t)r->population;
    p->finalist_rounds = r->have_finalist_rounds ? (int)r->finalist_rounds : 0;
}

/* Submits a tune; on failure fills code and msg. */
static int submit(tuned__daemon *d, const tuned__request *r, const target *t, uint64_t *id,
                  bool *joined, int *code, char *msg, size_t n)
{
    if (d->read_only) {
        *code = TUNED__PE_READ_ONLY;
        snprintf(msg, n, "the store %s is read-only here (full or not writable): this daemon "
                 "serves stored results and tunes nothing", d->o->db);
        return -1;
    }
    if (!t->local) {
        *code = TUNED__PE_NO_GPU;
        snprintf(msg, n, "no %s here to tune on%s%s", t->name,
                 tuned__jobs_gpu_count(d->jobs) == 0 ? ": " : "", tuned__jobs_no_gpu(d->jobs));
        return -1;
    }
    tuned__job_params p = {.shape = r->shape, .gpu_fp = t->fp, .retune = r->retune,
                           .gated = d->remote != NULL};
    search_params(r, &p);
    switch (tuned__jobs_submit(d->jobs, &p, id, joined)) {
    case TUNED__SUBMIT_OK:
        if (p.gated && !*joined)
            tuned__remote_tune(d, *id, t->slot, &r->shape, r->retune);
        return 0;
    case TUNED__SUBMIT_FULL:
        *code = TUNED__PE_QUEUE_FULL;
        snprintf(msg, n, "%u tune jobs are queued already; try later", d->o->max_jobs);
        return -1;
    case TUNED__SUBMIT_NO_GPU:
        *code = TUNED__PE_NO_GPU;
        snprintf(msg, n, "no %s here to tune on", t->name);
        return -1;
    case TUNED__SUBMIT_STOPPING:
        *code = TUNED__PE_SHUTTING_DOWN;
        snprintf(msg, n, "the daemon is stopping");
        return -1;
    default:
        *code = TUNED__PE_INTERNAL;
        snprintf(msg, n, "out of memory");
        return -1;
    }
}

static void gpu_fields(tuned__buf *out, const target *t)
{
    char fp[17];
    tuned__fp_hex(t->fp, fp);
    tuned__json_key(out, "gpu", false);
    tuned__json_str(out, t->name);
    tuned__json_key(out, "gpu_fp", false);
    tuned__json_str(out, fp);
}

/* Whether a compatible record's config is valid for the shape (the
 * space's rules). */
static bool config_fits(void *ctx, const tuned__record *r, tuned__tier tier)
{
    (void)tier;
    tuned__config c;
    return tuned__config_parse(r->config, &c, NULL) == 0 &&
           tuned__space_valid((const tuned__space *)ctx, &c, NULL, 0);
}

/* The local answer for r on t: exact, compatible (local GPUs), nearest,
 * default; -1 after an error reply. */
static int local_answer(tuned__daemon *d, const tuned__request *r, const target *t,
                        tuned__answer *a, tuned__buf *out)
{
    tuned__store_key key = {.kernel = r->kernel, .dtype = (uint8_t)r->shape.dtype,
                            .rows = r->shape.rows, .cols = tuned__wire_cols_of(&r->shape),
                            .gpu_fp = t->rec_fp};
    long at = tuned__index_find(d->index, &key);
    if (at >= 0) {
        a->source = TUNED__SOURCE_EXACT;
        a->rec = at;
        return 0;
    }
    if (tuned__index_memo_get(d->index, &key, a))
        return 0;
    /* Rules only: validating a stored record's config and taking the
     * default need no enumeration of the space. */
    tuned__space sp;
    tuned__err e = {0};
    if (tuned__space_rules(&sp, &r->shape, t->arch > 0 ? t->arch : 80, t->sms, &e) != 0)
        return error_reply(d, out, r, TUNED__PE_NO_SPACE, "%s", e.msg);
    a->rec = -1;
    a->config[0] = '\0';
    if (t->local && t->slot < d->nhere) {
        tuned__tier tier;
        a->rec = tuned__index_compatible(d->index, &key,
                                         &d->here_id[tuned__here_at(t->slot, r->kernel)],
                                         config_fits, &sp, &tier);
        a->source = tier == TUNED__TIER_EXACT ? TUNED__SOURCE_EXACT : TUNED__SOURCE_COMPATIBLE;
    }
    if (a->rec < 0) {
        a->rec = tuned__index_nearest(d->index, &sp, t->rec_fp);
        a->source = a->rec >= 0 ? TUNED__SOURCE_NEAREST : TUNED__SOURCE_DEFAULT;
    }
    if (a->rec < 0) {
        tuned__config first;
        if (tuned__space_default(&sp, &first, &e) != 0)
            return error_reply(d, out, r, TUNED__PE_NO_SPACE, "%s", e.msg);
        tuned__config_format(&first, a->config, sizeof a->config);
    }
    tuned__index_memo_put(d->index, &key, a);
    return 0;
}

/* With --retune-compatible, whether a compatible answer for r on t should
 * queue its key's tune: a local GPU, a writable store, and a key (kind,
 * dtype, shape, GPU) not queued before (marked here). */
static bool retune_due(tuned__daemon *d, const tuned__request *r, const target *t)
{
    if (!d->o->retune_compatible || !t->local || d->read_only || d->stopping)
        return false;
    const uint64_t parts[] = {tuned__shape_kernel(&r->shape), r->shape.dtype, r->shape.rows,
                              tuned__wire_cols_of(&r->shape), t->rec_fp};
    uint64_t h = tuned__fnv1a64(parts, sizeof parts, TUNED__FNV_SEED);
    size_t n = d->nretuned < TUNED__RETUNED_MAX ? d->nretuned : TUNED__RETUNED_MAX;
    for (size_t i = 0; i < n; i++)
        if (d->retuned[i] == h)
            return false;
    d->retuned[d->nretuned++ % TUNED__RETUNED_MAX] = h;
    return true;
}

static void get_reply(tuned__daemon *d, const tuned__request *r, const target *t,
                      const tuned__answer *a, bool from_remote, tuned__buf *out)
{
    /* tune_if_missing: queue (or join) a tune, answer at once; so does a
     * compatible answer under --retune-compatible, at the quick effort (the
     * tune seeds itself with the compatible config). */
    uint64_t job = 0;
    bool joined = false;
    int code = 0;
    char msg[256] = "";
    bool queue = r->tune_if_missing && a->source != TUNED__SOURCE_EXACT;
    if (queue) {
        submit(d, r, t, &job, &joined, &code, msg, sizeof msg);
    } else if (a->source == TUNED__SOURCE_COMPATIBLE && retune_due(d, r, t)) {
        tuned__request quick = *r;
        const tuned__effort_preset *p = tuned__effort_preset_of(TUNED__EFFORT_QUICK);
        quick.have_budget = quick.have_time = quick.have_population = true;
        quick.have_finalist_rounds = true;
        quick.budget = p->budget;
        quick.time_s = p->time_s;
        quick.population = p->population;
        quick.finalist_rounds = (uint64_t)p->finalist_rounds;
        queue = true;
        submit(d, &quick, t, &job, &joined, &code, msg, sizeof msg);
        d->st.compatible_retunes += code == 0;
    }

    static const char *const sources[] = {
        [TUNED__SOURCE_EXACT] = ",\"source\":\"exact\"",
        [TUNED__SOURCE_COMPATIBLE] = ",\"source\":\"compatible\"",
        [TUNED__SOURCE_NEAREST] = ",\"source\":\"nearest\"",
        [TUNED__SOURCE_DEFAULT] = ",\"source\":\"default\"",
    };
    tuned__reply_begin(out, r->id);
    tuned__buf_adds(out, sources[a->source]);
    const tuned__record *rec = a->rec >= 0 ? tuned__index_at(d->index, (size_t)a->rec) : NULL;
    if (rec != NULL) {
        /* config and median_us, rendered when the record was indexed */
        size_t len;
        const char *head = tuned__index_answer_head(d->index, (size_t)a->rec, &len);
        tuned__buf_add(out, head, len);
    } else {
        tuned__json_key(out, "config", false);
        tuned__json_str(out, a->config);
        tuned__buf_adds(out, ",\"median_us\":null");
    }
    if (rec != NULL && a->source == TUNED__SOURCE_COMPATIBLE && t->slot < d->nhere) {
        char why[256];
        tuned__record_tier(rec, &d->here_id[tuned__here_at(t->slot, r->kernel)], why, sizeof why);
        tuned__json_key(out, "differs", false);
        tuned__json_str(out, why);
    }
    if (from_remote && rec != NULL) {
        tuned__json_key(out, "from", false);
        tuned__json_str(out, "remote");
    }
    if (rec != NULL) {
        size_t len;
        const char *f = tuned__index_fields(d->index, (size_t)a->rec, &len);
        tuned__buf_adds(out, ",\"record\":{");
        tuned__buf_add(out, f + 1, len - 1); /* without its leading comma */
        tuned__buf_add(out, "}", 1);
    }
    if (a->source != TUNED__SOURCE_EXACT)
        gpu_fields(out, t);
    if (queue) {
        tuned__json_key(out, "job", false);
        if (code == 0) {
            tuned__json_u64(out, job);
            tuned__json_key(out, "joined", false);
            tuned__json_bool(out, joined);
        } else {
            tuned__buf_add(out, "null", 4);
            tuned__json_key(out, "job_error", false);
            tuned__buf_adds(out, "{\"code\":");
            tuned__json_str(out, tuned__perr_name(code));
            tuned__buf_adds(out, ",\"message\":");
            tuned__json_str(out, msg);
            tuned__buf_add(out, "}", 1);
        }
    }
    tuned__reply_end(out);
    if (a->source == TUNED__SOURCE_EXACT)
        d->st.exact++;
    else if (a->source == TUNED__SOURCE_COMPATIBLE)
        d->st.compatible++;
    else if (a->source == TUNED__SOURCE_NEAREST)
        d->st.nearest++;
    else
        d->st.defaults++;
    d->st.from_remote += from_remote && rec != NULL;
}

static int get_target(tuned__daemon *d, const tuned__request *r, target *t, tuned__buf *out)
{
    if (resolve_gpu(d, r, t, out) != 0)
        return -1;
    if (t->fp == 0)
        return error_reply(d, out, r, TUNED__PE_UNKNOWN_GPU,
                           "no GPU here or in the store is of hardware class %s", t->name);
    return check_fits(d, r, t, out);
}

static void op_get(tuned__daemon *d, const tuned__request *r, tuned__buf *out,
                   tuned__later *later)
{
    target t;
    if (get_target(d, r, &t, out) != 0)
        return;
    tuned__daemon_refresh(d);
    tuned__answer a;
    if (local_answer(d, r, &t, &a, out) != 0)
        return;
    /* Not exact here: the fleet may have it (the reply waits for it). */
    if (a.source != TUNED__SOURCE_EXACT && later != NULL && t.local && d->remote != NULL &&
        !d->stopping && tuned__remote_read_through(d, r, t.slot, later))
        return;
    get_reply(d, r, &t, &a, false, out);
}

void tuned__daemon_get_local(tuned__daemon *d, const tuned__request *r, bool from_remote,
                             tuned__buf *out)
{
    target t;
    if (get_target(d, r, &t, out) != 0)
        return;
    tuned__answer a;
    if (local_answer(d, r, &t, &a, out) != 0)
        return;
    get_reply(d, r, &t, &a, from_remote, out);
}

static void op_tune(tuned__daemon *d, const tuned__request *r, tuned__buf *out,
                    tuned__later *later)
{
    target t;
    if (resolve_gpu(d, r, &t, out) != 0 || check_fits(d, r, &t, out) != 0)
        return;
    /* A GPU model this daemon does not have: the fleet queue of its class. */
    if (!t.local && t.hwclass != 0 && d->remote != NULL && !d->read_only) {
        char hw[64];
        tuned__remote_hwclass_name(t.hwclass, hw, sizeof hw);
        if (later != NULL && !d->stopping && tuned__remote_queue(d, r, hw, later))
            return;
        error_reply(d, out, r, TUNED__PE_NO_GPU, "no %s here to tune on, and the fleet queue "
                    "of its hardware class %s cannot be reached now", t.name, hw);
        return;
    }
    uint64_t id;
    bool joined;
    int code;
    char msg[256];
    if (submit(d, r, &t, &id, &joined, &code, msg, sizeof msg) != 0) {
        error_reply(d, out, r, code, "%s", msg);
        return;
    }
    tuned__job_view v;
    bool have = tuned__jobs_get(d->jobs, id, &v);
    tuned__reply_begin(out, r->id);
    tuned__json_key(out, "job", false);
    tuned__json_u64(out, id);
    tuned__json_key(out, "joined", false);
    tuned__json_bool(out, joined);
    tuned__json_key(out, "state", false);
    tuned__json_str(out, have ? tuned__job_state_name(v.state) : "queued");
    gpu_fields(out, &t);
    tuned__reply_end(out);
}

static void opt_double(tuned__buf *out, const char *key, bool have, double v)
{
    tuned__json_key(out, key, false);
    if (have)
        tuned__json_double(out, v);
    else
        tuned__buf_add(out, "null", 4);
}

static void op_job(tuned__daemon *d, const tuned__request *r, tuned__buf *out)
{
    tuned__job_view v;
    if (!tuned__jobs_get(d->jobs, r->job, &v)) {
        error_reply(d, out, r, TUNED__PE_NO_SUCH_JOB, "no job %" PRIu64 " (finished jobs are "
                    "kept for a while, then forgotten)", r->job);
        return;
    }
    char fp[17];
    tuned__fp_hex(v.gpu_fp, fp);
    tuned__reply_begin(out, r->id);
    tuned__buf_adds(out, ",\"job\":{\"id\":");
    tuned__json_u64(out, v.id);
    tuned__json_key(out, "state", false);
    tuned__json_str(out, tuned__job_state_name(v.state));
    tuned__json_key(out, "kernel", false);
    tuned__json_str(out, tuned__kernel_name((uint8_t)tuned__shape_kernel(&v.shape)));
    tuned__json_key(out, "dtype", false);
    tuned__json_str(out, tuned_dtype_name(v.shape.dtype));
    tuned__json_key(out, "rows", false);
    tuned__json_u64(out, v.shape.rows);
    tuned__json_key(out, "cols", false);
    tuned__json_u64(out, v.shape.cols);
    tuned__json_params(out, v.shape.kernel, v.shape.params);
    tuned__json_key(out, "gpu", false);
    tuned__json_str(out, v.gpu_name);
    tuned__json_key(out, "gpu_fp", false);
    tuned__json_str(out, fp);
    tuned__json_key(out, "device", false);
    tuned__json_i64(out, v.device);
    tuned__json_key(out, "queue_position", false);
    tuned__json_u64(out, v.queue_position);
    tuned__json_key(out, "budget", false);
    tuned__json_u64(out, v.budget);
    tuned__json_key(out, "evaluated", false);
    tuned__json_u64(out, v.evaluated);
    tuned__json_key(out, "failed", false);
    tuned__json_u64(out, v.failed);
    tuned__json_key(out, "generation", false);
    tuned__json_i64(out, v.generation);
    tuned__json_key(out, "best_config", false);
    if (v.have_best)
        tuned__json_str(out, v.best_config);
    else
        tuned__buf_add(out, "null", 4);
    opt_double(out, "best_us", v.have_best, v.best_us);
    opt_double(out, "copy_us", v.copy_us > 0, v.copy_us);
    tuned__json_key(out, "elapsed_s", false);
    tuned__json_double(out, v.elapsed_s);
    tuned__json_key(out, "worker_restarts", false);
    tuned__json_u64(out, v.worker_restarts);
    tuned__json_key(out, "crashes", false);
    tuned__json_u64(out, v.crashes);
    tuned__json_key(out, "crashed", false);
    tuned__buf_add(out, "[", 1);
    for (unsigned i = 0; i < v.crashes && i < TUNED__JOB_CRASHES_SHOWN; i++) {
        if (i > 0)
            tuned__buf_add(out, ",", 1);
        tuned__json_str(out, v.crashed[i]);
    }
    tuned__buf_add(out, "]", 1);
    tuned__json_key(out, "stop_reason", false);
    tuned__json_str(out, v.stop_reason);
    tuned__json_key(out, "stored", false);
    tuned__json_bool(out, v.stored);
    tuned__json_key(out, "checkpointed", false);
    tuned__json_bool(out, v.checkpointed);
    tuned__json_key(out, "joined", false);
    tuned__json_u64(out, v.joined);
    if (d->remote != NULL) {
        tuned__json_key(out, "from_remote", false);
        tuned__json_bool(out, v.from_remote);
        tuned__json_key(out, "remote", false);
        tuned__json_str(out, v.remote);
    }
    tuned__json_key(out, "error", false);
    if (v.error[0] != '\0')
        tuned__json_str(out, v.error);
    else
        tuned__buf_add(out, "null", 4);
    tuned__buf_add(out, "}", 1);
    tuned__reply_end(out);
}

static bool list_match(tuned__daemon *d, const tuned__request *r, const tuned__record *rec)
{
    if ((r->have_dtype && rec->key.dtype != (uint8_t)r->shape.dtype) ||
        (r->have_rows && rec->key.rows != r->shape.rows) ||
        (r->have_cols && rec->key.cols != tuned__wire_cols_of(&r->shape)) ||
        (r->have_kernel && rec->key.kernel != r->kernel))
        return false;
    tuned__jobs_gpu g;
    switch (r->gpu.kind) {
    case TUNED__GPU_ORDINAL:
        for (size_t i = 0; tuned__jobs_gpu_at(d->jobs, i, &g); i++)
            if (g.gpu.ordinal == r->gpu.ordinal)
                return rec->key.gpu_fp == tuned__gpu_kind_fp(&g.gpu, rec->key.kernel);
        return false;
    case TUNED__GPU_FP: return rec->key.gpu_fp == r->gpu.fp;
    case TUNED__GPU_NAME: return strcasecmp(rec->gpu_name, r->gpu.name) == 0;
    default: return true;
    }
}

static void op_list(tuned__daemon *d, const tuned__request *r, tuned__buf *out)
{
    tuned__daemon_refresh(d);
    size_t n = tuned__index_count(d->index), shown = 0, total = 0;
    tuned__reply_begin(out, r->id);
    tuned__buf_adds(out, ",\"records\":[");
    for (size_t k = 0; k < n; k++) {
        size_t i = tuned__index_ordered(d->index, k);
        if (!list_match(d, r, tuned__index_at(d->index, i)))
            continue;
        total++;
        if (shown == r->limit)
            continue;
        size_t len;
        const char *f = tuned__index_fields(d->index, i, &len);
        tuned__buf_add(out, shown > 0 ? ",{" : "{", shown > 0 ? 2 : 1);
        tuned__buf_add(out, f + 1, len - 1);
        tuned__buf_add(out, "}", 1);
        shown++;
    }
    tuned__buf_add(out, "]", 1);
    tuned__json_key(out, "count", false);
    tuned__json_u64(out, shown);
    tuned__json_key(out, "total", false);
    tuned__json_u64(out, total);
    tuned__json_key(out, "truncated", false);
    tuned__json_bool(out, total > shown);
    tuned__reply_end(out);
}

static void op_stats(tuned__daemon *d, const tuned__request *r, tuned__buf *out)
{
    tuned__daemon_refresh(d);
    const tuned__stats *s = &d->st;
    tuned__jobs_counts c;
    tuned__jobs_counts_get(d->jobs, &c);
    tuned__reply_begin(out, r->id);
    tuned__json_key(out, "version", false);
    tuned__json_str(out, tuned_version());
    tuned__json_key(out, "uptime_s", false);
    tuned__json_double(out, (double)(d->now_ms(d->now_ctx) - d->start_ms) / 1000.0);
    tuned__buf_printf(out, ",\"requests\":{\"total\":%" PRIu64 ",\"errors\":%" PRIu64,
                      s->requests, s->errors);
    for (int i = 0; i < TUNED__OP_COUNT; i++)
        tuned__buf_printf(out, ",\"%s\":%" PRIu64, tuned__op_name(i), s->by_op[i]);
    tuned__buf_printf(out, "},\"get\":{\"exact\":%" PRIu64 ",\"compatible\":%" PRIu64
                      ",\"nearest\":%" PRIu64 ",\"default\":%" PRIu64
                      ",\"from_remote\":%" PRIu64 ",\"compatible_retunes\":%" PRIu64 "}",
                      s->exact, s->compatible, s->nearest, s->defaults, s->from_remote,
                      s->compatible_retunes);
    tuned__buf_printf(out, ",\"clients\":{\"now\":%" PRIu64 ",\"total\":%" PRIu64
                      ",\"rejected\":%" PRIu64 ",\"cut_off\":%" PRIu64
                      ",\"lines_too_long\":%" PRIu64 ",\"idle_closed\":%" PRIu64
                      ",\"output_cut_off\":%" PRIu64 "}",
                      s->clients_now, s->clients_total, s->clients_rejected, s->clients_cut_off,
                      s->lines_too_long, s->clients_idle, s->output_cut_off);
    tuned__buf_printf(out, ",\"jobs\":{\"queued\":%zu,\"running\":%zu,\"done\":%" PRIu64
                      ",\"failed\":%" PRIu64 ",\"cancelled\":%" PRIu64 ",\"submitted\":%" PRIu64
                      ",\"joined\":%" PRIu64 ",\"worker_restarts\":%" PRIu64
                      ",\"from_remote\":%" PRIu64 "}",
                      c.queued, c.running, c.done, c.failed, c.cancelled, c.submitted, c.joined,
                      c.worker_restarts, c.from_remote);
    tuned__buf_printf(out, ",\"store\":{\"records\":%zu,\"loads\":%" PRIu64
                      ",\"last_load_ms\":%" PRIu64 ",\"loading\":%s,\"read_only\":%s,\"path\":",
                      tuned__index_count(d->index), s->index_loads, s->index_load_ms,
                      d->rebuild != NULL ? "true" : "false", d->read_only ? "true" : "false");
    tuned__json_str(out, d->o->db);
    tuned__buf_adds(out, "},\"gpus\":[");
    tuned__jobs_gpu g;
    for (size_t i = 0; tuned__jobs_gpu_at(d->jobs, i, &g); i++) {
        char fp[17];
        tuned__fp_hex(g.gpu.fingerprint, fp);
        tuned__buf_adds(out, i > 0 ? ",{\"ordinal\":" : "{\"ordinal\":");
        tuned__json_i64(out, g.gpu.ordinal);
        tuned__json_key(out, "name", false);
        tuned__json_str(out, g.gpu.name);
        tuned__json_key(out, "gpu_fp", false);
        tuned__json_str(out, fp);
        if (i < d->nhere) {
            char hw[64];
            const tuned__identity *id = &d->here_id[tuned__here_at(i, TUNED__KIND_DEFAULT)];
            tuned__remote_hwclass_name(id->hwclass.fp, hw, sizeof hw);
            tuned__json_key(out, "hwclass", false);
            tuned__json_str(out, hw);
            tuned__json_key(out, "toolchain", false);
            tuned__json_str(out, id->toolchain.text);
        }
        tuned__buf_printf(out, ",\"arch\":%d,\"total_mem\":%zu,\"worker_pid\":%d,\"job\":%" PRIu64
                          ",\"worker_restarts\":%u,\"test_only_fake\":%s}",
                          g.arch, g.gpu.total_mem, (int)g.worker_pid, g.job, g.restarts,
                          g.fake ? "true" : "false");
    }
    tuned__buf_add(out, "]", 1);
    tuned__json_key(out, "no_gpu", false);
    if (tuned__jobs_gpu_count(d->jobs) == 0)
        tuned__json_str(out, tuned__jobs_no_gpu(d->jobs));
    else
        tuned__buf_add(out, "null", 4);
    tuned__remote_stats(d, out);
    tuned__reply_end(out);
}

void tuned__daemon_answer(tuned__daemon *d, const char *line, size_t len, tuned__buf *out,
                          tuned__later *later)
{
    tuned__request r;
    tuned__proto_error pe;
    d->st.requests++;
    if (tuned__proto_parse(line, len, &r, &pe) != 0) {
        d->st.errors++;
        tuned__reply_error(out, r.id, pe.code, pe.message);
        return;
    }
    d->st.by_op[r.op]++;
    switch (r.op) {
    case TUNED__OP_PING:
        tuned__reply_begin(out, r.id);
        tuned__buf_adds(out, ",\"pong\":true,\"version\":");
        tuned__json_str(out, tuned_version());
        tuned__reply_end(out);
        break;
    case TUNED__OP_GET: op_get(d, &r, out, later); break;
    case TUNED__OP_TUNE: op_tune(d, &r, out, later); break;
    case TUNED__OP_JOB: op_job(d, &r, out); break;
    case TUNED__OP_LIST: op_list(d, &r, out); break;
    case TUNED__OP_STATS: op_stats(d, &r, out); break;
    default: error_reply(d, out, &r, TUNED__PE_INTERNAL, "unhandled op"); break;
    }
}
