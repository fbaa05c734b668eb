/* api.c: the embedding API of include/tuned.h: handles, tuned_softmax and
 * the other kernels' calls (tuned_softmax_scaled, tuned_log_softmax,
 * tuned_softmax_backward, tuned_log_softmax_backward) on the caller's
 * stream, lookups and tunes.
 *
 * A call's key (context, rows, cols, row stride, dtype, kernel, alignment) maps to
 * an immutable entry holding the loaded kernel and its launch; the map is
 * read without locks (api_table.c), so a repeated call costs the current
 * context, a hash, a probe and cuLaunchKernel. Everything else happens on
 * the slow path, under the handle's lock, once per key: the GPU's
 * identity, the config (api_pick.c: exact, compatible, nearest, default;
 * a compatible config is run once against the float64 reference before it
 * is served, src/driver/check.c), the cubin
 * (compile cache or NVRTC), the module (one per context and variant,
 * shared by every key that compiles to the same source), the launch
 * geometry. Entries that are not exact carry a recheck time: at most once
 * a second a call looks whether the store changed (its transaction id)
 * and, if a better record appeared, builds and publishes a new entry.
 * Nothing is freed before tuned_close(), so a reader holding an old entry
 * (or a CUDA graph holding its function) stays valid.
 *
 * Tunes never run in this process (api_tune.c, api_child.c). The handle
 * itself is in handle.h. Errors reach the caller as a code and the
 * calling thread's message (tuned_last_error). */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "src/codegen/source.h"
#include "src/api/handle.h"
#include "src/driver/check.h"
#include "src/tuner/space.h"

#ifndef TUNED__BINDIR
#define TUNED__BINDIR "/usr/local/bin"
#endif

/* A call whose config is not exact looks at the store again after this. */
#define RECHECK_NS 1000000000ll

/* ---- the handle ---- */

static atomic_uint_fast64_t next_serial = 1;

/* ---- per-thread records: the last error and the last call ---- */

static _Thread_local uint64_t err_serial;
static _Thread_local char err_msg[TUNED__ERR_MSG];
static _Thread_local uint64_t call_serial;
static _Thread_local const tuned__api_entry *call_entry;

static int fail(const tuned_handle *h, const tuned__err *e)
{
    err_serial = h != NULL ? h->serial : 0;
    snprintf(err_msg, sizeof err_msg, "%s", e->msg[0] != '\0' ? e->msg : tuned_strerror(e->code));
    return e->code;
}

static int vfailf(const tuned_handle *h, int code, const char *fmt, va_list ap)
{
    err_serial = h != NULL ? h->serial : 0;
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    return code;
}

static int failf(const tuned_handle *h, int code, const char *fmt, ...) TUNED__PRINTF(3, 4);

static int failf(const tuned_handle *h, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfailf(h, code, fmt, ap);
    va_end(ap);
    return code;
}

/* The same for the handle's other files (handle.h). */
int tuned__api_fail(const tuned_handle *h, const tuned__err *e)
{
    return fail(h, e);
}

int tuned__api_failf(const tuned_handle *h, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfailf(h, code, fmt, ap);
    va_end(ap);
    return code;
}

const char *tuned_last_error(const tuned_handle *h)
{
    return err_serial == (h != NULL ? h->serial : 0) ? err_msg : "";
}

const char *tuned_source_name(tuned_source s)
{
    switch (s) {
    case TUNED_SOURCE_EXACT: return "exact";
    case TUNED_SOURCE_NEAREST: return "nearest";
    case TUNED_SOURCE_DEFAULT: return "default";
    case TUNED_SOURCE_COMPATIBLE: return "compatible";
    }
    return NULL;
}

static int64_t coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* ---- options, open, close ---- */

void tuned_options_init(tuned_options *o)
{
    if (o != NULL)
        memset(o, 0, sizeof *o);
}

static char *dup_or_null(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

/* The tuned executable: the option, $TUNED_BIN, the installed one, $PATH. */
static const char *pick_tuned_path(const tuned_options *o)
{
    if (o->tuned_path != NULL && o->tuned_path[0] != '\0')
        return o->tuned_path;
    const char *env = getenv("TUNED_BIN");
    if (env != NULL && env[0] != '\0')
        return env;
    if (access(TUNED__BINDIR "/tuned", X_OK) == 0)
        return TUNED__BINDIR "/tuned";
    return "tuned";
}

int tuned_open(tuned_handle **out, const tuned_options *o)
{
    tuned__err e = {0};
    if (out == NULL)
        return failf(NULL, TUNED_EINVAL, "tuned_open: out is NULL");
    *out = NULL;
    tuned_options defaults;
    tuned_options_init(&defaults);
    if (o == NULL)
        o = &defaults;
    if (o->policy != TUNED_POLICY_NEVER && o->policy != TUNED_POLICY_DAEMON &&
        o->policy != TUNED_POLICY_PROCESS)
        return failf(NULL, TUNED_EINVAL, "tuned_open: unknown policy %d", (int)o->policy);
    if (!(o->tune_time_s >= 0 && o->tune_time_s <= 86400))
        return failf(NULL, TUNED_EINVAL, "tuned_open: tune_time_s %g out of range (0 to 86400)",
                     o->tune_time_s);
    tuned_handle *h = calloc(1, sizeof *h);
    if (h == NULL)
        return failf(NULL, TUNED_ENOMEM, "tuned_open: out of memory");
    h->serial = atomic_fetch_add(&next_serial, 1);
    h->policy = o->policy;
    h->tune_time_s = o->tune_time_s;
    h->on_progress = o->on_progress;
    h->progress_ctx = o->progress_ctx;
    atomic_init(&h->cancel, 0);
    pthread_mutex_init(&h->mu, NULL);
    pthread_mutex_init(&h->tune_mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    int rc = tuned__api_map_init(&h->map, &e);
    if (rc == 0)
        rc = tuned__driver_load(&h->d, &e);
    if (rc == 0)
        rc = tuned__nvrtc_load(&h->n, &e);
    if (rc == 0)
        rc = tuned__gpu_count(h->d, &h->ndev, &e);
    if (rc == 0 && h->ndev < 1)
        rc = tuned__errf(&e, TUNED_ENODEV, "cuda: the driver sees no GPU");
    if (rc == 0 && (h->devs = calloc((size_t)h->ndev, sizeof *h->devs)) == NULL)
        rc = tuned__errf(&e, TUNED_ENOMEM, "out of memory");
    char socket[PATH_MAX];
    if (o->socket != NULL && o->socket[0] != '\0')
        snprintf(socket, sizeof socket, "%s", o->socket);
    else
        tuned__default_socket(socket, sizeof socket);
    if (rc == 0) {
        h->socket = strdup(socket);
        h->tuned_path = dup_or_null(pick_tuned_path(o));
        if (h->socket == NULL || h->tuned_path == NULL)
            rc = tuned__errf(&e, TUNED_ENOMEM, "out of memory");
    }
    if (rc == 0 && !(o->store != NULL && o->store[0] == '\0')) {
        char path[PATH_MAX] = "";
        if (o->store != NULL) {
            snprintf(path, sizeof path, "%s", o->store);
        } else if (o->policy == TUNED_POLICY_DAEMON) {
            /* The daemon's store, so that its results are ours to see. */
            tuned__err ignored = {0};
            if (tuned__client_store_path(h->socket, path, sizeof path, &ignored) != 0 ||
                path[0] != '/')
                path[0] = '\0';
        }
        if (path[0] == '\0')
            tuned__default_store(path, sizeof path);
        rc = tuned__store_acquire(path, 0, &h->store, &e);
    }
    if (rc != 0) {
        tuned__err_prefix(&e, rc, "tuned_open: ");
        tuned_close(h);
        return fail(NULL, &e);
    }
    *out = h;
    return 0;
}

static void stop_worker(tuned_handle *h)
{
    pthread_mutex_lock(&h->mu);
    h->stopping = true;
    pthread_cond_broadcast(&h->cv);
    bool started = h->worker_started;
    pthread_mutex_unlock(&h->mu);
    atomic_store(&h->cancel, 1);
    if (started)
        pthread_join(h->worker, NULL);
}

/* Frees an entry and its workspace (from the key's context). */
static void entry_free(tuned_handle *h, tuned__api_entry *e)
{
    if (e->work != NULL && h->d->cuCtxPushCurrent((CUcontext)e->key.ctx) == CUDA_SUCCESS) {
        tuned__workspace_free(h->d, e->work);
        CUcontext popped;
        h->d->cuCtxPopCurrent(&popped);
    }
    free(e->work);
    free(e);
}

void tuned_close(tuned_handle *h)
{
    if (h == NULL)
        return;
    if (tuned__api_in_progress()) {
        /* A tune of a handle is running below on this thread: freeing the
         * handle (or joining its background thread, which may be this
         * one) would pull it out from under it. */
        failf(h, TUNED_EINVAL, "tuned_close: called from a progress callback; the handle "
                               "stays open (close it after the tune returns)");
        return;
    }
    stop_worker(h);
    for (module_rec *m = h->modules, *next; m != NULL; m = next) {
        next = m->next;
        /* Unload from the context it was loaded into. */
        if (h->d->cuCtxPushCurrent(m->ctx) == CUDA_SUCCESS) {
            h->d->cuModuleUnload(m->module);
            CUcontext popped;
            h->d->cuCtxPopCurrent(&popped);
        }
        free(m);
    }
    for (tuned__api_entry *e = h->entries, *next; e != NULL; e = next) {
        next = e->all_next;
        entry_free(h, e);
    }
    for (tune_job *j = h->jobs, *next; j != NULL; j = next) {
        next = j->next;
        free(j);
    }
    for (refusal *r = h->refused, *next; r != NULL; r = next) {
        next = r->next;
        free(r);
    }
    tuned__api_map_free(&h->map);
    tuned__store_release(h->store);
    tuned__nvrtc_unload(h->n);
    tuned__driver_unload(h->d);
    free(h->devs);
    free(h->socket);
    free(h->tuned_path);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->tune_mu);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

/* ---- devices (under h->mu) ---- */

int tuned__api_device_get(tuned_handle *h, int ordinal, const tuned__gpu **out, tuned__err *e)
{
    if (ordinal < 0 || ordinal >= h->ndev)
        return tuned__errf(e, TUNED_ENODEV, "no GPU %d (this machine has %d)", ordinal, h->ndev);
    device_info *di = &h->devs[ordinal];
    if (!di->ready) {
        int rc = tuned__gpu_query(h->d, h->n, ordinal, &di->gpu, e);
        if (rc != 0)
            return rc;
        di->ready = true;
    }
    *out = &di->gpu;
    return 0;
}

/* The ordinal of the current context's device. */
static int current_ordinal(tuned_handle *h, int *ordinal, tuned__err *e)
{
    CUdevice dev;
    int rc = tuned__cuda_check(h->d, h->d->cuCtxGetDevice(&dev), e,
                               "the current context's device");
    if (rc != 0)
        return rc;
    for (int i = 0; i < h->ndev; i++) {
        CUdevice di;
        if (h->d->cuDeviceGet(&di, i) == CUDA_SUCCESS && di == dev) {
            *ordinal = i;
            return 0;
        }
    }
    return tuned__errf(e, TUNED_ENODEV, "the current context's device is none of the %d GPUs",
                       h->ndev);
}

/* ---- kernels (under h->mu) ---- */

static int module_get(tuned_handle *h, CUcontext ctx, const tuned__config *c,
                      const tuned__shape *s, bool aligned, unsigned flags, int arch,
                      module_rec **out, tuned__err *e)
{
    tuned__codegen_opts opts = {.unaligned = !aligned, .flags = flags};
    char *src = NULL;
    int rc = tuned__source_kernel(c, s, &opts, &src, e);
    if (rc != 0)
        return rc;
    uint64_t hash = tuned__nvrtc_cache_key(h->n, src, arch, TUNED__NVRTC_CUBIN);
    free(src);
    for (module_rec *m = h->modules; m != NULL; m = m->next) {
        if (m->ctx == ctx && m->hash == hash) {
            *out = m;
            return 0;
        }
    }
    tuned__blob blob;
    bool cached;
    bool writable = h->store != NULL && !tuned__store_readonly(h->store);
    if ((rc = tuned__api_cubin(h->n, h->store, writable, c, s, aligned, flags, arch, &blob, &hash,
                               &cached, e)) != 0)
        return rc;
    module_rec *m = calloc(1, sizeof *m);
    if (m == NULL) {
        tuned__blob_free(&blob);
        return tuned__errf(e, TUNED_ENOMEM, "out of memory");
    }
    rc = tuned__cuda_check(h->d, h->d->cuModuleLoadData(&m->module, blob.data), e,
                           "loading the kernel");
    tuned__blob_free(&blob);
    if (rc == 0 && (rc = tuned__cuda_check(h->d,
                                           h->d->cuModuleGetFunction(&m->fn, m->module,
                                                                     tuned__source_entry(c, s)),
                                           e, "finding the kernel")) != 0)
        h->d->cuModuleUnload(m->module);
    const tuned__kind_spec *kind = tuned__shape_spec(s);
    for (unsigned i = 0; rc == 0 && i < TUNED__KIND_MAX_HELPERS && kind->helper[i] != NULL; i++)
        if ((rc = tuned__cuda_check(h->d,
                                    h->d->cuModuleGetFunction(&m->helper[i], m->module,
                                                              kind->helper[i]),
                                    e, "finding the kernel's helper")) != 0)
            h->d->cuModuleUnload(m->module);
    if (rc != 0) {
        free(m);
        return rc;
    }
    m->ctx = ctx;
    m->hash = hash;
    m->next = h->modules;
    h->modules = m;
    *out = m;
    return 0;
}

/* ---- compatible records: checked before served (under h->mu) ---- */

typedef struct veto_ctx {
    const tuned_handle *h;
    bool all; /* refuse every compatible record (too many checks failed) */
} veto_ctx;

static bool is_refused(void *ctx, const tuned__record *r)
{
    const veto_ctx *v = ctx;
    if (v->all)
        return true;
    for (const refusal *f = v->h->refused; f != NULL; f = f->next)
        if (memcmp(&f->key, &r->key, sizeof f->key) == 0 && strcmp(f->config, r->config) == 0)
            return true;
    return false;
}

/* Whether the handle refuses p's record. */
static bool pick_refused(const tuned_handle *h, const tuned__api_pick *p)
{
    char text[TUNED__CONFIG_TEXT];
    tuned__config_format(&p->config, text, sizeof text);
    for (const refusal *f = h->refused; f != NULL; f = f->next)
        if (memcmp(&f->key, &p->record_key, sizeof f->key) == 0 && strcmp(f->config, text) == 0)
            return true;
    return false;
}

static void refuse(tuned_handle *h, const tuned__api_pick *p)
{
    refusal *f = calloc(1, sizeof *f);
    if (f == NULL)
        return; /* out of memory: the record may be checked again, nothing worse */
    memcpy(&f->key, &p->record_key, sizeof f->key);
    tuned__config_format(&p->config, f->config, sizeof f->config);
    f->next = h->refused;
    h->refused = f;
}

/* The pick for shape s on gpu, its compatible candidates vetoed by the
 * handle's refusals (all of them when all is true). */
static int pick(tuned_handle *h, const tuned__gpu *gpu, const tuned__shape *s, bool all,
                tuned__api_pick *p, tuned__err *e)
{
    veto_ctx v = {.h = h, .all = all};
    tuned__api_veto veto = {.refused = is_refused, .ctx = &v};
    return tuned__api_pick_config(h->store, gpu, s, &veto, p, e);
}

static void fill_choice(const tuned_handle *h, const tuned__gpu *gpu, int device,
                        const tuned__api_pick *p, bool aligned, tuned_choice *out)
{
    (void)h;
    memset(out, 0, sizeof *out);
    tuned__config_format(&p->config, out->config, sizeof out->config);
    out->source = p->source;
    out->median_us = p->median_us;
    out->record_rows = (int64_t)p->record_rows;
    out->record_cols = (int64_t)p->record_cols;
    out->device = device;
    snprintf(out->gpu, sizeof out->gpu, "%s", gpu->name);
    out->aligned = aligned;
    snprintf(out->tune_message, sizeof out->tune_message, "%s", p->note);
}

/* tune_message of a choice: the tune's message, then the pick's note. */
static void choice_message(tuned_choice *out, const char *tune, const char *note)
{
    char both[sizeof out->tune_message];
    snprintf(both, sizeof both, "%s%s%s", tune, tune[0] && note[0] ? "; " : "", note);
    memcpy(out->tune_message, both, sizeof both);
}

/* Builds and publishes the entry for key k (current context k->ctx) with
 * pick p on GPU device. */
static int build_entry(tuned_handle *h, const tuned__api_key *k, uint64_t hash, int device,
                       const tuned__gpu *gpu, const tuned__api_pick *p, tuned__api_entry **out,
                       tuned__err *e)
{
    tuned__shape s = {.dtype = (tuned_dtype)k->dtype, .rows = k->rows,
                      .kernel = (uint8_t)k->kernel};
    tuned__shape_set_wire_cols(&s, k->cols);
    int arch = gpu->cc_major * 10 + gpu->cc_minor;
    module_rec *mod = NULL;
    int rc = module_get(h, (CUcontext)k->ctx, &p->config, &s, k->aligned != 0, k->flags, arch,
                        &mod, e);
    CUfunction fn = rc == 0 ? mod->fn : NULL;
    tuned__launch launch;
    if (rc == 0)
        rc = tuned__launch_prepare(h->d, fn, &p->config, &s, gpu->sm_count, &launch, e);
    char checked[256] = "";
    if (rc == 0 && p->source == TUNED_SOURCE_COMPATIBLE) {
        /* Measured by another toolchain or policy: compiled here, it must
         * compute softmax here before any call gets it. */
        bool ok = false;
        char detail[200];
        /* The check runs the kind without compiled-in options (what its
         * reference draws); the config is the same. */
        module_rec *plain = mod;
        if (k->flags != 0)
            rc = module_get(h, (CUcontext)k->ctx, &p->config, &s, k->aligned != 0, 0, arch,
                            &plain, e);
        if (rc == 0)
            rc = tuned__check_variant(h->d, h->n, arch, gpu->sm_count, plain->fn, &p->config, &s,
                                  k->aligned != 0, &ok, detail, sizeof detail, e);
        if (rc == 0 && !ok)
            rc = tuned__errf(e, TUNED_EWRONG, "failed its check against the float64 reference: %s",
                             detail);
        else if (rc != 0)
            tuned__err_prefix(e, rc, "its check against the float64 reference could not run: ");
        else
            snprintf(checked, sizeof checked, "%s; checked against the float64 reference%s%s",
                     p->note, detail[0] ? ", " : "", detail);
    }
    tuned__api_entry *en = NULL;
    if (rc == 0 && (en = calloc(1, sizeof *en)) == NULL)
        rc = tuned__errf(e, TUNED_ENOMEM, "out of memory");
    /* Before any capture (the first call of a key is taken outside one):
     * allocating memory would invalidate a capture. */
    if (rc == 0 && launch.work_bytes > 0) {
        if ((en->work = calloc(1, sizeof *en->work)) == NULL)
            rc = tuned__errf(e, TUNED_ENOMEM, "out of memory");
        else if ((rc = tuned__workspace_alloc(h->d, en->work, launch.work_bytes, e)) != 0) {
            free(en->work);
            en->work = NULL;
        }
    }
    if (rc != 0) {
        free(en);
        char text[TUNED__CONFIG_TEXT];
        tuned__config_format(&p->config, text, sizeof text);
        return tuned__err_prefix(e, rc, "%s config %s: ", tuned_source_name(p->source), text);
    }
    en->key = *k;
    en->hash = hash;
    en->launch = launch;
    memcpy(en->helper, mod->helper, sizeof en->helper);
    bool final = p->source == TUNED_SOURCE_EXACT || h->store == NULL;
    atomic_init(&en->recheck_ns, final ? INT64_MAX : coarse_ns() + RECHECK_NS);
    en->seen = p->seen;
    en->config = p->config;
    fill_choice(h, gpu, device, p, k->aligned != 0, &en->choice);
    if (checked[0] != '\0')
        snprintf(en->choice.tune_message, sizeof en->choice.tune_message, "%s", checked);
    en->choice.function = (void *)fn;
    en->choice.grid = launch.grid;
    en->choice.block = launch.block;
    en->choice.smem = launch.smem;
    en->choice.cooperative = launch.cooperative;
    if ((rc = tuned__api_map_put(&h->map, en, NULL, e)) != 0) {
        entry_free(h, en);
        return rc;
    }
    en->all_next = h->entries;
    h->entries = en;
    *out = en;
    return 0;
}

/* A new key: device, config, kernel, entry. */
static int build_new(tuned_handle *h, const tuned__api_key *k, uint64_t hash,
                     tuned__api_entry **out, tuned__err *e)
{
    int device;
    const tuned__gpu *gpu;
    int rc = current_ordinal(h, &device, e);
    if (rc == 0)
        rc = tuned__api_device_get(h, device, &gpu, e);
    if (rc != 0)
        return rc;
    tuned__shape s = {.dtype = (tuned_dtype)k->dtype, .rows = k->rows,
                      .kernel = (uint8_t)k->kernel};
    tuned__shape_set_wire_cols(&s, k->cols);
    tuned__api_pick p;
    char failed[256] = ""; /* why the last compatible record was not served */
    for (int checks = 0;; checks++) {
        if ((rc = pick(h, gpu, &s, checks >= CHECKS_PER_PICK, &p, e)) != 0)
            return rc;
        if (p.source != TUNED_SOURCE_COMPATIBLE)
            break;
        tuned__err why = {0};
        rc = build_entry(h, k, hash, device, gpu, &p, out, &why);
        if (rc == 0) {
            tuned__api_request_tune(h, device, gpu, &s, p.source);
            return 0;
        }
        /* Not served, by this handle, ever: the next tier answers. */
        refuse(h, &p);
        snprintf(failed, sizeof failed, "not served: %s", why.msg);
    }
    if (failed[0] != '\0')
        snprintf(p.note, sizeof p.note, "%s", failed);
    tuned__api_request_tune(h, device, gpu, &s, p.source);
    return build_entry(h, k, hash, device, gpu, &p, out, e);
}

/* An entry whose recheck is due: keep it, or replace it by a better one.
 * Never fails the call: whatever goes wrong, the old kernel still works. */
static tuned__api_entry *recheck(tuned_handle *h, const tuned__api_key *k, uint64_t hash,
                                 tuned__api_entry *old, void *stream)
{
    tuned__api_entry *cur = tuned__api_map_find(&h->map, k, hash);
    if (cur != NULL)
        old = cur;
    int64_t due = atomic_load_explicit(&old->recheck_ns, memory_order_relaxed);
    int64_t now = coarse_ns();
    if (due == INT64_MAX || now < due)
        return old; /* another thread did it */
    bool forced = due == 0; /* by a tune this handle saw finish */
    int64_t next = now + RECHECK_NS;
    tuned__store *store = h->store;
    if (store == NULL) {
        atomic_store_explicit(&old->recheck_ns, INT64_MAX, memory_order_relaxed);
        return old;
    }
    /* Not while the stream is being captured: loading a module there may
     * be refused. The capture keeps the current kernel. */
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (h->d->cuStreamIsCapturing((CUstream)stream, &capture) != CUDA_SUCCESS ||
        capture != CU_STREAM_CAPTURE_STATUS_NONE) {
        atomic_store_explicit(&old->recheck_ns, next, memory_order_relaxed);
        return old;
    }
    if (!forced && !tuned__api_store_moved(store, &old->seen)) {
        /* No best record was written since the pick. */
        atomic_store_explicit(&old->recheck_ns,
                              old->choice.source == TUNED_SOURCE_EXACT ? INT64_MAX : next,
                              memory_order_relaxed);
        return old;
    }
    const tuned__gpu *gpu;
    tuned__shape s = {.dtype = (tuned_dtype)k->dtype, .rows = k->rows,
                      .kernel = (uint8_t)k->kernel};
    tuned__shape_set_wire_cols(&s, k->cols);
    tuned__api_pick p;
    tuned__err ignored = {0};
    if (tuned__api_device_get(h, old->choice.device, &gpu, &ignored) != 0 ||
        pick(h, gpu, &s, false, &p, &ignored) != 0) {
        atomic_store_explicit(&old->recheck_ns, next, memory_order_relaxed);
        return old;
    }
    if (p.source == TUNED_SOURCE_EXACT) {
        tune_job *j = tuned__api_job_find(h, gpu->fingerprint, &s);
        if (j != NULL && j->state == TUNED_TUNE_QUEUED && j->started) {
            j->state = TUNED_TUNE_DONE;
            snprintf(j->message, sizeof j->message, "stored");
        }
    }
    if (tuned__config_equal(&p.config, &old->config) && p.source == old->choice.source) {
        old->seen = p.seen;
        atomic_store_explicit(&old->recheck_ns,
                              p.source == TUNED_SOURCE_EXACT ? INT64_MAX : next,
                              memory_order_relaxed);
        return old;
    }
    tuned__api_entry *fresh = NULL;
    if (build_entry(h, k, hash, old->choice.device, gpu, &p, &fresh, &ignored) != 0) {
        /* A compatible record that fails its check is never tried again;
         * the old kernel still works. */
        if (p.source == TUNED_SOURCE_COMPATIBLE && !pick_refused(h, &p))
            refuse(h, &p);
        atomic_store_explicit(&old->recheck_ns, next, memory_order_relaxed);
        return old;
    }
    return fresh;
}

/* ---- the call ---- */

typedef tuned__api_args call_args;

/* Whether the call passes tensor i: the kind uses it, and it is not an
 * optional one left NULL. */
static bool used(const call_args *a, unsigned i)
{
    return a->kind->tensor[i].role != TUNED__TENSOR_UNUSED &&
           !(a->kind->tensor[i].optional && a->ptr[i] == NULL);
}

/* Whether the call's tensor i holds int32 values indexing the rows x k
 * expanded rows (a router's source rows) that rows x k past 2^31 would
 * wrap; only such a tensor reads k. */
static bool indexes_past_int32(const call_args *a, unsigned i, int64_t rows)
{
    return a->kind->tensor[i].indexes_rows_k &&
           (uint64_t)rows * tuned__params_value(a->kind, a->key_params, "k", 1) > (1ull << 31);
}

/* Whether an output tensor of a overlaps another tensor (inputs may share
 * memory with each other: y and dy may be one; an output may be exactly the
 * input its spec lets it replace). *out_i and *other_i name the first such
 * pair. */
static bool outputs_overlap(const call_args *a, uint64_t rows, uint64_t cols, uint64_t stride,
                            size_t esize, unsigned *out_i, unsigned *other_i)
{
    const tuned__kind_spec *k = a->kind;
    cols = tuned__wire_cols(cols, a->key_params); /* extents of rows x k read k */
    for (unsigned i = 0; i < k->ntensors; i++) {
        if (k->tensor[i].role != TUNED__TENSOR_OUT || !used(a, i))
            continue;
        uint64_t span_i = tuned__kind_span(k, i, rows, cols, stride, esize, a->flags);
        for (unsigned j = 0; j < k->ntensors; j++) {
            if (j == i || !used(a, j))
                continue;
            if (k->tensor[i].in_place == j + 1 && a->ptr[i] == a->ptr[j])
                continue;
            uint64_t span_j = tuned__kind_span(k, j, rows, cols, stride, esize, a->flags);
            if (tuned__api_overlap((uintptr_t)a->ptr[i], span_i, (uintptr_t)a->ptr[j], span_j)) {
                *out_i = i;
                *other_i = j;
                return true;
            }
        }
    }
    return false;
}

static int bad_call(const tuned_handle *h, const call_args *a, int64_t rows, int64_t cols,
                    int64_t stride, tuned_dtype dtype, float scale)
{
    const char *fn = a->fn;
    size_t esize = tuned_dtype_size(dtype);
    if (h == NULL)
        return failf(NULL, TUNED_EINVAL, "%s: the handle is NULL", fn);
    if (a->kind == NULL) {
        char kinds[256];
        tuned__kind_list(kinds, sizeof kinds);
        return failf(h, TUNED_EINVAL, "%s: unknown kernel (the kernels: %s)", fn, kinds);
    }
    if (esize == 0)
        return failf(h, TUNED_EINVAL, "%s: unknown dtype %d", fn, (int)dtype);
    for (unsigned i = 0; i < a->kind->ntensors; i++)
        if (used(a, i) && a->ptr[i] == NULL)
            return failf(h, TUNED_EINVAL, "%s: %s is NULL", fn, a->kind->tensor[i].name);
    if (a->kind->scaled && !(scale > 0.0f && scale <= FLT_MAX))
        return failf(h, TUNED_EINVAL, "%s: scale %g (it must be positive and finite)", fn,
                     (double)scale);
    if (rows < 1 || (uint64_t)rows > TUNED__MAX_ROWS || cols < 1 ||
        (uint64_t)cols > TUNED__MAX_COLS)
        return failf(h, TUNED_EINVAL,
                     "%s: shape %lldx%lld out of range (rows 1..%llu, cols 1..%llu)", fn,
                     (long long)rows, (long long)cols, TUNED__MAX_ROWS, TUNED__MAX_COLS);
    if (stride < cols)
        return failf(h, TUNED_EINVAL, "%s: row_stride %lld is less than cols %lld", fn,
                     (long long)stride, (long long)cols);
    if (rows > 1 && (uint64_t)stride > ((uint64_t)INT64_MAX / esize - (uint64_t)cols) / (uint64_t)(rows - 1))
        return failf(h, TUNED_EINVAL, "%s: %lld rows of stride %lld overflow the address space",
                     fn, (long long)rows, (long long)stride);
    for (unsigned i = 0; i < a->kind->ntensors; i++) {
        size_t es = tuned__kind_elem_size_flags(a->kind, i, esize, a->flags);
        if (used(a, i) && (uintptr_t)a->ptr[i] % es != 0)
            return failf(h, TUNED_EINVAL, "%s: %s (%p) is not %zu-byte aligned", fn,
                         a->kind->tensor[i].name, a->ptr[i], es);
        if (used(a, i) && indexes_past_int32(a, i, rows))
            return failf(h, TUNED_EINVAL, "%s: %s: %lld rows x k %u are past 2^31 (its int32 "
                         "values index them)", fn, a->kind->tensor[i].name, (long long)rows,
                         tuned__params_value(a->kind, a->key_params, "k", 1));
    }
    unsigned o = 0, other = 0;
    outputs_overlap(a, (uint64_t)rows, (uint64_t)cols, (uint64_t)stride, esize, &o, &other);
    return failf(h, TUNED_EINVAL, "%s: %s (%p) and %s (%p) overlap%s", fn,
                 a->kind->tensor[other].name, a->ptr[other], a->kind->tensor[o].name, a->ptr[o],
                 a->kind->tensor[o].in_place == other + 1 ? " (only the very same memory may)"
                                                         : "");
}

/* The fast path's argument check: everything bad_call() explains. */
static inline bool call_ok(const tuned_handle *h, const call_args *a, int64_t rows, int64_t cols,
                           int64_t stride, tuned_dtype dtype, float scale, uint64_t *esize)
{
    if (h == NULL || a->kind == NULL || (unsigned)dtype > (unsigned)TUNED_FP32 ||
        (a->kind->scaled && !(scale > 0.0f && scale <= FLT_MAX)) || rows < 1 ||
        (uint64_t)rows > TUNED__MAX_ROWS || cols < 1 || (uint64_t)cols > TUNED__MAX_COLS ||
        stride < cols)
        return false;
    uint64_t es = dtype == TUNED_FP32 ? 4 : 2;
    if (rows > 1 && (uint64_t)stride > ((uint64_t)INT64_MAX / es - (uint64_t)cols) / (uint64_t)(rows - 1))
        return false;
    for (unsigned i = 0; i < a->kind->ntensors; i++) {
        if (!used(a, i))
            continue;
        if (a->ptr[i] == NULL ||
            ((uintptr_t)a->ptr[i] & (tuned__kind_elem_size_flags(a->kind, i, es, a->flags) - 1)) != 0 ||
            indexes_past_int32(a, i, rows))
            return false;
    }
    unsigned o, other;
    if (outputs_overlap(a, (uint64_t)rows, (uint64_t)cols, (uint64_t)stride, es, &o, &other))
        return false;
    *esize = es;
    return true;
}

/* The entry for a call: the fast path, else the slow path. */
int tuned__api_resolve(tuned_handle *h, const call_args *a, int64_t rows, int64_t cols,
                   int64_t stride, tuned_dtype dtype, float scale, void *stream,
                   tuned__api_entry **out)
{
    uint64_t esize;
    if (!call_ok(h, a, rows, cols, stride, dtype, scale, &esize))
        return bad_call(h, a, rows, cols, stride, dtype, scale);
    CUcontext ctx = NULL;
    h->d->cuCtxGetCurrent(&ctx);
    /* Vector access needs the row tensors on 16 bytes. */
    uintptr_t bits = 0;
    for (unsigned i = 0; i < a->kind->ntensors; i++)
        if (a->kind->tensor[i].extent == TUNED__EXTENT_MATRIX && used(a, i))
            bits |= (uintptr_t)a->ptr[i];
    /* The context, when none is current, is the first input's. */
    const unsigned in = tuned__kind_first_in(a->kind);
    uintptr_t xa = (uintptr_t)a->ptr[in];
    /* the key says which optional tensors the call passes (a router's bias) */
    const uint32_t key_params = tuned__params_present(a->kind, a->key_params, a->ptr);
    tuned__api_key k = {.ctx = ctx, .rows = (uint64_t)rows,
                        .cols = tuned__wire_cols((uint64_t)cols, key_params),
                        .stride = (uint64_t)stride, .dtype = (uint32_t)dtype,
                        .kernel = (uint16_t)a->kind->id, .flags = (uint8_t)a->flags,
                        .aligned = (bits & 15) == 0 &&
                                   (stride == cols || ((uint64_t)stride * esize) % 16 == 0)};
    uint64_t hash = tuned__api_key_hash(&k);
    tuned__api_entry *e = ctx != NULL ? tuned__api_map_find(&h->map, &k, hash) : NULL;
    if (e != NULL) {
        int64_t due = atomic_load_explicit(&e->recheck_ns, memory_order_relaxed);
        if (due == INT64_MAX || coarse_ns() < due)
            goto found;
        /* A recheck: whoever gets the lock does it; the others go on. */
        if (pthread_mutex_trylock(&h->mu) == 0) {
            e = recheck(h, &k, hash, e, stream);
            pthread_mutex_unlock(&h->mu);
        }
        goto found;
    }
    /* The slow path. */
    tuned__err err = {0};
    if (ctx == NULL) {
        /* No current context: the input's, made current as the runtime would. */
        CUresult r = h->d->cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT,
                                                 (CUdeviceptr)xa);
        if (r != CUDA_SUCCESS || ctx == NULL)
            return failf(h, TUNED_EINVAL,
                         "%s: no CUDA context is current on this thread, and %s (%p) is not "
                         "memory of a context the driver knows: make a context current first "
                         "(cudaSetDevice, cuCtxSetCurrent)",
                         a->fn, a->kind->tensor[in].name, a->ptr[in]);
        int rc = tuned__cuda_check(h->d, h->d->cuCtxSetCurrent(ctx), &err,
                                   "making the input's context current");
        if (rc != 0)
            return fail(h, &err);
        k.ctx = ctx;
        hash = tuned__api_key_hash(&k);
    }
    pthread_mutex_lock(&h->mu);
    int rc = 0;
    e = tuned__api_map_find(&h->map, &k, hash); /* another thread may have built it */
    if (e == NULL)
        rc = build_new(h, &k, hash, &e, &err);
    pthread_mutex_unlock(&h->mu);
    if (rc != 0) {
        tuned__err_prefix(&err, rc, "%s %lldx%lld %s: ", a->fn, (long long)rows, (long long)cols,
                          tuned_dtype_name(dtype));
        return fail(h, &err);
    }
found:
    call_serial = h->serial;
    call_entry = e;
    *out = e;
    return 0;
}

int tuned__api_launch(tuned_handle *h, const call_args *a, const tuned__api_entry *e,
                      int64_t rows, int64_t cols, int64_t row_stride, tuned_dtype dtype,
                      float scale, void *stream)
{
    CUdeviceptr tensors[TUNED__KIND_MAX_TENSORS];
    for (unsigned i = 0; i < a->kind->ntensors; i++)
        tensors[i] = used(a, i) ? (CUdeviceptr)(uintptr_t)a->ptr[i] : 0;
    CUresult cr = tuned__launch_run(h->d, &e->launch, e->work, tensors, rows, (int)cols,
                                    row_stride, a->params != NULL ? a->params : &scale,
                                    (CUstream)stream);
    if (cr != CUDA_SUCCESS) {
        tuned__err err = {0};
        char what[192];
        snprintf(what, sizeof what,
                 "%s %lldx%lld %s: launching %s (grid %u, block %u, %u bytes shared%s)", a->fn,
                 (long long)rows, (long long)cols, tuned_dtype_name(dtype), e->choice.config,
                 e->launch.grid, e->launch.block, e->launch.smem,
                 e->launch.cooperative ? ", cooperative" : "");
        tuned__cuda_check(h->d, cr, &err, what);
        return fail(h, &err);
    }
    return 0;
}

const tuned__api_entry *tuned__api_find_kind(tuned_handle *h, tuned_kernel kernel, const void *ptr,
                                             int64_t rows, int64_t cols, int64_t row_stride,
                                             tuned_dtype dtype)
{
    CUcontext ctx = NULL;
    if (rows < 1 || cols < 1 || h->d->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
        return NULL;
    /* No context current (a thread that has run no CUDA work yet, as
     * autograd's backward thread before its first kernel): ptr's, made
     * current as the runtime would. */
    if (ctx == NULL &&
        (h->d->cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT,
                                     (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS ||
         ctx == NULL || h->d->cuCtxSetCurrent(ctx) != CUDA_SUCCESS))
        return NULL;
    for (unsigned aligned = 0; aligned < 2; aligned++)
        for (unsigned flags = 0; flags < 1u << TUNED__KIND_MAX_FLAGS; flags++) {
            tuned__api_key k = {.ctx = ctx, .rows = (uint64_t)rows, .cols = (uint64_t)cols,
                                .stride = (uint64_t)row_stride, .dtype = (uint32_t)dtype,
                                .kernel = (uint16_t)kernel, .aligned = (uint8_t)aligned,
                                .flags = (uint8_t)flags};
            tuned__api_entry *e = tuned__api_map_find(&h->map, &k, tuned__api_key_hash(&k));
            if (e != NULL)
                return e;
        }
    return NULL;
}

/* One call: resolve, then launch on the caller's stream. */
static int call(tuned_handle *h, const call_args *a, int64_t rows, int64_t cols,
                int64_t row_stride, tuned_dtype dtype, float scale, void *stream)
{
    tuned__api_entry *e;
    int rc = tuned__api_resolve(h, a, rows, cols, row_stride, dtype, scale, stream, &e);
    return rc != 0 ? rc : tuned__api_launch(h, a, e, rows, cols, row_stride, dtype, scale, stream);
}

int tuned_run(tuned_handle *h, tuned_kernel kernel, const void *const *tensors, int64_t rows,
              int64_t cols, int64_t row_stride, tuned_dtype dtype, float scale, void *stream)
{
    call_args a = {"tuned_run", tuned__kind((unsigned)kernel), {NULL}, NULL, 0,
                   tuned__params_default(tuned__kind((unsigned)kernel))};
    if (tensors == NULL)
        return failf(h, TUNED_EINVAL, "tuned_run: tensors is NULL");
    if (a.kind != NULL && !a.kind->scaled && a.kind->params_size > 0)
        return failf(h, TUNED_EINVAL, "tuned_run: %s takes options: call its own function",
                     a.kind->name);
    for (unsigned i = 0; a.kind != NULL && i < a.kind->ntensors; i++)
        a.ptr[i] = tensors[i];
    return call(h, &a, rows, cols, row_stride, dtype, a.kind != NULL && a.kind->scaled ? scale : 1.0f,
                stream);
}

/* The named entry points: one kind each, its tensors in the spec's order. */
static int call_kind(tuned_handle *h, const char *fn, tuned_kernel kernel, const void *t0,
                     const void *t1, const void *t2, int64_t rows, int64_t cols,
                     int64_t row_stride, tuned_dtype dtype, float scale, void *stream)
{
    call_args a = {fn, tuned__kind((unsigned)kernel), {t0, t1, t2}, NULL, 0, 0};
    return call(h, &a, rows, cols, row_stride, dtype, scale, stream);
}

int tuned_softmax(tuned_handle *h, const void *x, void *y, int64_t rows, int64_t cols,
                  int64_t row_stride, tuned_dtype dtype, void *stream)
{
    return call_kind(h, "tuned_softmax", TUNED_KERNEL_SOFTMAX, x, y, NULL, rows, cols,
                     row_stride, dtype, 1.0f, stream);
}

int tuned_softmax_scaled(tuned_handle *h, const void *x, void *y, int64_t rows, int64_t cols,
                         int64_t row_stride, tuned_dtype dtype, float scale, void *stream)
{
    return call_kind(h, "tuned_softmax_scaled", TUNED_KERNEL_SOFTMAX, x, y, NULL, rows, cols,
                     row_stride, dtype, scale, stream);
}

int tuned_log_softmax(tuned_handle *h, const void *x, void *y, int64_t rows, int64_t cols,
                      int64_t row_stride, tuned_dtype dtype, float scale, void *stream)
{
    return call_kind(h, "tuned_log_softmax", TUNED_KERNEL_LOG_SOFTMAX, x, y, NULL, rows, cols,
                     row_stride, dtype, scale, stream);
}

int tuned_softmax_backward(tuned_handle *h, const void *y, const void *dy, void *dx, int64_t rows,
                           int64_t cols, int64_t row_stride, tuned_dtype dtype, void *stream)
{
    return call_kind(h, "tuned_softmax_backward", TUNED_KERNEL_SOFTMAX_BWD, y, dy, dx, rows,
                     cols, row_stride, dtype, 1.0f, stream);
}

int tuned_log_softmax_backward(tuned_handle *h, const void *y, const void *dy, void *dx,
                               int64_t rows, int64_t cols, int64_t row_stride, tuned_dtype dtype,
                               void *stream)
{
    return call_kind(h, "tuned_log_softmax_backward", TUNED_KERNEL_LOG_SOFTMAX_BWD, y, dy, dx,
                     rows, cols, row_stride, dtype, 1.0f, stream);
}

/* Copies e's choice and the shape's tune state. */
static void copy_choice(tuned_handle *h, const tuned__api_entry *e, tuned_choice *out)
{
    pthread_mutex_lock(&h->mu);
    *out = e->choice;
    const tuned__gpu *gpu = h->devs[e->choice.device].ready ? &h->devs[e->choice.device].gpu : NULL;
    tuned__shape s = {.dtype = (tuned_dtype)e->key.dtype, .rows = e->key.rows,
                      .kernel = (uint8_t)e->key.kernel};
    tuned__shape_set_wire_cols(&s, e->key.cols);
    tune_job *j = gpu != NULL ? tuned__api_job_find(h, gpu->fingerprint, &s) : NULL;
    if (j != NULL) {
        out->tune = j->state;
        choice_message(out, j->message, e->choice.tune_message);
    }
    pthread_mutex_unlock(&h->mu);
}

int tuned_prepare(tuned_handle *h, tuned_kernel kernel, const void *const *tensors, int64_t rows,
                  int64_t cols, int64_t row_stride, tuned_dtype dtype, tuned_choice *out)
{
    tuned__api_entry *e;
    call_args a = {"tuned_prepare", tuned__kind((unsigned)kernel), {NULL}, NULL, 0,
                   tuned__params_default(tuned__kind((unsigned)kernel))};
    if (tensors == NULL)
        return failf(h, TUNED_EINVAL, "tuned_prepare: tensors is NULL");
    for (unsigned i = 0; a.kind != NULL && i < a.kind->ntensors; i++)
        a.ptr[i] = tensors[i];
    int rc = tuned__api_resolve(h, &a, rows, cols, row_stride, dtype, 1.0f, NULL, &e);
    if (rc == 0 && out != NULL)
        copy_choice(h, e, out);
    return rc;
}

int tuned_last_choice(tuned_handle *h, tuned_choice *out)
{
    if (h == NULL || out == NULL)
        return failf(h, TUNED_EINVAL, "tuned_last_choice: %s is NULL", h == NULL ? "h" : "out");
    if (call_serial != h->serial || call_entry == NULL)
        return failf(h, TUNED_ENOTFOUND,
                     "tuned_last_choice: this thread has made no successful call on this handle");
    copy_choice(h, call_entry, out);
    return 0;
}

/* The ordinal for device (-1: the current context's, else 0). */
int tuned__api_resolve_device(tuned_handle *h, int device, int *ordinal, tuned__err *e)
{
    if (device >= 0) {
        *ordinal = device;
        return 0;
    }
    CUcontext ctx = NULL;
    if (h->d->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == NULL) {
        *ordinal = 0;
        return 0;
    }
    return current_ordinal(h, ordinal, e);
}

int tuned__api_shape_ok(const tuned_handle *h, const char *fn, tuned_kernel kernel, int64_t rows,
                        int64_t cols, tuned_dtype dtype, int device)
{
    if (h == NULL)
        return failf(NULL, TUNED_EINVAL, "%s: the handle is NULL", fn);
    if (tuned__kind((unsigned)kernel) == NULL) {
        char kinds[160];
        tuned__kind_list(kinds, sizeof kinds);
        return failf(h, TUNED_EINVAL, "%s: unknown kernel %d (the kernels: %s)", fn, (int)kernel,
                     kinds);
    }
    if (tuned_dtype_size(dtype) == 0)
        return failf(h, TUNED_EINVAL, "%s: unknown dtype %d", fn, (int)dtype);
    if (rows < 1 || (uint64_t)rows > TUNED__MAX_ROWS || cols < 1 ||
        (uint64_t)cols > TUNED__MAX_COLS)
        return failf(h, TUNED_EINVAL,
                     "%s: shape %lldx%lld out of range (rows 1..%llu, cols 1..%llu)", fn,
                     (long long)rows, (long long)cols, TUNED__MAX_ROWS, TUNED__MAX_COLS);
    if (device < -1)
        return failf(h, TUNED_EINVAL, "%s: device %d (an ordinal, or -1)", fn, device);
    return 0;
}

/* tuned_lookup and tuned_lookup_params: the shape checked by the caller. */
static int lookup_shape(tuned_handle *h, const char *fn, tuned__shape s, int device,
                        tuned_choice *out)
{
    int rc;
    tuned_kernel kernel = (tuned_kernel)s.kernel;
    int64_t rows = (int64_t)s.rows, cols = (int64_t)s.cols;
    tuned_dtype dtype = s.dtype;
    tuned__err e = {0};
    int ordinal = 0;
    const tuned__gpu *gpu = NULL;
    tuned__api_pick p;
    pthread_mutex_lock(&h->mu);
    rc = tuned__api_resolve_device(h, device, &ordinal, &e);
    if (rc == 0)
        rc = tuned__api_device_get(h, ordinal, &gpu, &e);
    if (rc == 0)
        rc = pick(h, gpu, &s, false, &p, &e);
    if (rc == 0) {
        tuned__api_request_tune(h, ordinal, gpu, &s, p.source);
        fill_choice(h, gpu, ordinal, &p, true, out);
        if (p.source == TUNED_SOURCE_COMPATIBLE)
            choice_message(out, out->tune_message, "checked against the float64 reference on first use");
        tune_job *j = tuned__api_job_find(h, gpu->fingerprint, &s);
        if (j != NULL) {
            out->tune = j->state;
            choice_message(out, j->message, p.note);
        }
    }
    pthread_mutex_unlock(&h->mu);
    if (rc != 0) {
        char params[128];
        tuned__shape_params_text(&s, params, sizeof params);
        tuned__err_prefix(&e, rc, "%s %s %lldx%lld%s%s %s: ", fn, tuned_kernel_name(kernel),
                          (long long)rows, (long long)cols, params[0] != '\0' ? ":" : "", params,
                          tuned_dtype_name(dtype));
        return fail(h, &e);
    }
    return 0;
}

/* The checks of both lookups, then lookup_shape. params NULL: the kind's
 * defaults, unchecked against the columns (tuned_lookup's, as before
 * parameters existed); text: parsed and checked. */
static int lookup_checked(tuned_handle *h, const char *fn, tuned_kernel kernel, int64_t rows,
                          int64_t cols, const char *params, tuned_dtype dtype, int device,
                          tuned_choice *out)
{
    int rc = tuned__api_shape_ok(h, fn, kernel, rows, cols, dtype, device);
    if (rc != 0)
        return rc;
    if (out == NULL)
        return failf(h, TUNED_EINVAL, "%s: out is NULL", fn);
    const tuned__kind_spec *k = tuned__kind((unsigned)kernel);
    tuned__shape s = {.dtype = dtype, .rows = (uint64_t)rows, .cols = (uint64_t)cols,
                      .kernel = (uint8_t)kernel, .params = tuned__params_default(k)};
    if (params != NULL) {
        tuned__err e = {0};
        char why[192];
        if (tuned__params_parse(k, params, &s.params, &e) != 0)
            return failf(h, TUNED_EINVAL, "%s: %s", fn, e.msg);
        if (!tuned__params_check(k, s.cols, s.params, why, sizeof why))
            return failf(h, TUNED_EINVAL, "%s: %s", fn, why);
    }
    return lookup_shape(h, fn, s, device, out);
}

int tuned_lookup(tuned_handle *h, tuned_kernel kernel, int64_t rows, int64_t cols,
                 tuned_dtype dtype, int device, tuned_choice *out)
{
    return lookup_checked(h, "tuned_lookup", kernel, rows, cols, NULL, dtype, device, out);
}

int tuned_lookup_params(tuned_handle *h, tuned_kernel kernel, int64_t rows, int64_t cols,
                        const char *params, tuned_dtype dtype, int device, tuned_choice *out)
{
    return lookup_checked(h, "tuned_lookup_params", kernel, rows, cols,
                          params != NULL ? params : "", dtype, device, out);
}

