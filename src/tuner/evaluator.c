/* evaluator.c: the GPU side of tuning: compile, check, time.
 *
 * Order of work for a batch of variants: the compile pipeline (compile.c)
 * generates and compiles every source on worker threads, or takes its cubin
 * from the compile cache; meanwhile this thread takes the variants in order
 * as soon as each is ready (or gives one up when its compile runs past the
 * timeout), one at a time on the GPU: load the
 * cubin, draw fresh random input, poison the output and the guard band
 * after it with a finite value no softmax produces, run, compare with the
 * float64 reference (an unwritten element fails even where the reference
 * is NaN), and only then time it. The input, the output, the reference
 * kernels and the comparison are the check's (src/driver/check.c, shared
 * with the embedding API); the timing is this file's.
 *
 * A kind evaluated in chunks (its spec's evaluate: a config is a chunk
 * size, src/driver/lce.h) compiles nothing per config: each is checked
 * first on a small instance against the host's float64 results (a few
 * hundred rows, the last chunk partial), then the whole loss block at the
 * key's size is timed as a kernel would be (L2 flushed, events). Its floor
 * (the "copy" of other kinds) is the same block's GEMMs alone, each
 * block's logits made once, over the key's rows in one chunk: the cost
 * that no chunk config removes. */
#include "src/tuner/evaluator.h"

#include "src/tuner/compile.h"
#include "src/driver/check.h"
#include "src/driver/launch.h"
#include "src/driver/lce.h"
#include "src/driver/module.h"
#include "src/tuner/space.h"
#include "cache/key.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuned.h"
#include "src/common/sort.h"

#define EVENT_BATCH 32

struct tuned__evaluator {
    const tuned__driver *d;
    const tuned__nvrtc *nvrtc;
    tuned__gpu gpu;
    tuned__shape shape;
    tuned__eval_opts opts;
    size_t esize;
    size_t bytes; /* of x, and of y */
    CUcontext ctx;
    CUstream stream;
    tuned__check check; /* x, y, the reference kernels and the comparison */
    CUdeviceptr flush;
    tuned__workspace work; /* grid-split variants' (max, sum) pairs */
    size_t flush_bytes;
    CUfunction l2_normal, settle;
    CUevent start[EVENT_BATCH], stop[EVENT_BATCH];
    double copy_us;
    /* a kind evaluated in chunks: cuBLAS, the block at the key's size and
     * the small instance every chunk is checked on, with its float64
     * results, and the inner kind's reference module (its timing helpers) */
    bool chunked;
    tuned__cublas blas;
    tuned__lce lce, small;
    tuned__lce_ref ref;
    CUmodule timing_module;
};

/* The small instance a chunk is checked on: rows enough for two chunks
 * of the checked size and a partial third, a vocabulary off every vector
 * boundary, and a short hidden (the float64 results take a moment). */
#define SMALL_TOKENS 300u
#define SMALL_VOCAB 1003u
#define SMALL_HIDDEN 64u
#define SMALL_MAX_CHUNK 128u

void tuned__eval_opts_default(tuned__eval_opts *o)
{
    memset(o, 0, sizeof *o);
    o->budget_ms = 10.0;
    o->min_reps = 5;
    o->max_reps = 200;
    o->settle_us = 100.0;
    o->serial = true;
    o->compile_timeout_s = 120.0;
}

const char *tuned__eval_status_name(int status)
{
    switch (status) {
    case TUNED__EVAL_UNRUN: return "not run";
    case TUNED__EVAL_OK: return "ok";
    case TUNED__EVAL_COMPILE_ERROR: return "compile error";
    case TUNED__EVAL_WRONG: return "wrong result";
    case TUNED__EVAL_LAUNCH_ERROR: return "launch error";
    case TUNED__EVAL_TIMEOUT: return "timeout";
    }
    return "?";
}

const tuned__codegen_opts *tuned__evaluator_codegen(const tuned__evaluator *ev)
{
    return &ev->opts.codegen;
}

double tuned__evaluator_copy_us(const tuned__evaluator *ev)
{
    return ev->copy_us;
}

#define CU(call, what) TUNED__CU_RETURN(ev->d, call, what)

/* ---- the helper kernels ---- */

static unsigned grid_for(uint64_t n, unsigned per_block, unsigned cap)
{
    uint64_t g = (n + per_block - 1) / per_block;
    return (unsigned)(g < 1 ? 1 : g > cap ? cap : g);
}

/* Normal L2 priority for every line of x and y (tuned_l2_normal in
 * reference.cu says why), enqueued before each timing's flush. */
static int reset_l2_priority(tuned__evaluator *ev, tuned__err *e)
{
    CUdeviceptr bufs[] = {ev->check.x_alloc, ev->check.y_alloc, ev->check.x2_alloc};
    size_t sizes[] = {ev->check.x_alloc_bytes, ev->check.y_alloc_bytes,
                      ev->check.x2_alloc_bytes};
    for (int i = 0; i < 3; i++) {
        if (bufs[i] == 0)
            continue; /* no second input */
        long long bytes = (long long)sizes[i];
        void *args[] = {&bufs[i], &bytes};
        unsigned sms = ev->gpu.sm_count > 0 ? (unsigned)ev->gpu.sm_count : 1u;
        unsigned grid = grid_for(sizes[i] / 128 + 1, 256, 4u * sms);
        CU(ev->d->cuLaunchKernel(ev->l2_normal, grid, 1, 1, 256, 1, 1, 0, ev->stream, args,
                                 NULL),
           "resetting the L2 priority of the buffers");
    }
    return 0;
}

/* ---- timing ---- */

typedef int (*enqueue_fn)(tuned__evaluator *ev, void *arg, tuned__err *e);

/* The mean of the middle half of n >= 1 sorted values (n / 4 dropped at
 * each end, so all of them when n < 4). */
static double interquartile_mean(const double *sorted, int n)
{
    int cut = n / 4;
    double sum = 0.0;
    for (int i = cut; i < n - cut; i++)
        sum += sorted[i];
    return sum / (n - 2 * cut);
}

/* Times enqueue() as described at the top of evaluator.h. */
static int time_median(tuned__evaluator *ev, enqueue_fn enqueue, void *arg,
                       tuned__eval_result *res, tuned__err *e)
{
    int rc;
    for (int i = 0; i < 2; i++)
        if ((rc = enqueue(ev, arg, e)) != 0)
            return rc;
    CU(ev->d->cuStreamSynchronize(ev->stream), "warm-up");
    int cap = ev->opts.max_reps > 0 ? ev->opts.max_reps : 1;
    double *times = malloc(sizeof(double) * (size_t)cap);
    if (times == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "evaluator: out of memory");
    int reps = 0;
    double spent_ms = 0.0;
    int min_reps = ev->opts.min_reps > 1 ? ev->opts.min_reps : 1;
    long long settle_ns = ev->opts.settle_us > 0 ? (long long)(ev->opts.settle_us * 1e3) : 0;
    while (reps < cap && (reps < min_reps || spent_ms < ev->opts.budget_ms)) {
        int batch = ev->opts.serial ? 1 : cap - reps < EVENT_BATCH ? cap - reps : EVENT_BATCH;
        for (int i = 0; i < batch && rc == 0; i++) {
            if ((rc = reset_l2_priority(ev, e)) != 0)
                break;
            CUresult cr = ev->d->cuMemsetD32Async(ev->flush, (unsigned)i, ev->flush_bytes / 4,
                                                  ev->stream);
            if (cr == CUDA_SUCCESS && settle_ns > 0) {
                void *args[] = {&settle_ns};
                cr = ev->d->cuLaunchKernel(ev->settle, 1, 1, 1, 1, 1, 1, 0, ev->stream, args,
                                           NULL);
            }
            if (cr == CUDA_SUCCESS)
                cr = ev->d->cuEventRecord(ev->start[i], ev->stream);
            if (cr != CUDA_SUCCESS) {
                rc = tuned__cuda_check(ev->d, cr, e, "timing");
                break;
            }
            if ((rc = enqueue(ev, arg, e)) != 0)
                break;
            rc = tuned__cuda_check(ev->d, ev->d->cuEventRecord(ev->stop[i], ev->stream), e,
                                   "timing");
        }
        if (rc == 0)
            rc = tuned__cuda_check(ev->d, ev->d->cuStreamSynchronize(ev->stream), e,
                                   "running the timed launches");
        for (int i = 0; i < batch && rc == 0; i++) {
            float ms = 0.0f;
            rc = tuned__cuda_check(ev->d, ev->d->cuEventElapsedTime(&ms, ev->start[i], ev->stop[i]),
                                   e, "reading the timing events");
            times[reps++] = ms * 1e3;
            spent_ms += ms;
        }
        if (rc != 0) {
            free(times);
            return rc;
        }
    }
    qsort(times, (size_t)reps, sizeof *times, tuned__cmp_double);
    res->reps = reps;
    res->median_us = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
    res->p20_us = times[(reps - 1) / 5];
    res->p80_us = times[((reps - 1) * 4) / 5];
    res->iqm_us = interquartile_mean(times, reps);
    free(times);
    return 0;
}

static int enqueue_copy(tuned__evaluator *ev, void *arg, tuned__err *e)
{
    (void)arg;
    CU(ev->d->cuMemcpyDtoDAsync(ev->check.y, ev->check.x, ev->bytes, ev->stream),
       "device-to-device copy");
    return 0;
}

static int enqueue_variant(tuned__evaluator *ev, void *arg, tuned__err *e)
{
    const tuned__launch *l = arg;
    CUdeviceptr tensors[TUNED__KIND_MAX_TENSORS];
    tuned__check_tensors(&ev->check, tensors);
    CU(tuned__launch_run(ev->d, l, &ev->work, tensors, (long long)ev->shape.rows, (int)ev->shape.cols,
                         (long long)ev->shape.cols, ev->check.params, ev->stream),
       l->cooperative ? "launching the variant (cooperative)" : "launching the variant");
    return 0;
}

/* ---- open / close ---- */

static int alloc(tuned__evaluator *ev, CUdeviceptr *p, size_t bytes, const char *what,
                 tuned__err *e)
{
    CUresult r = ev->d->cuMemAlloc(p, bytes);
    if (r != CUDA_SUCCESS) {
        char context[128];
        snprintf(context, sizeof context, "allocating %zu MiB for %s", bytes >> 20, what);
        return tuned__cuda_check(ev->d, r, e, context);
    }
    return 0;
}

/* The evaluator's own: the timing helpers of a reference module (the
 * check's). */
static int open_timing(tuned__evaluator *ev, CUmodule module, tuned__err *e)
{
    CU(ev->d->cuModuleGetFunction(&ev->l2_normal, module, "tuned_l2_normal"),
       "finding tuned_l2_normal");
    CU(ev->d->cuModuleGetFunction(&ev->settle, module, "tuned_settle"),
       "finding tuned_settle");
    size_t l2 = ev->gpu.l2_bytes > 0 ? (size_t)ev->gpu.l2_bytes : 64u << 20;
    ev->flush_bytes = 2 * l2;
    int rc = alloc(ev, &ev->flush, ev->flush_bytes, "the L2 flush", e);
    if (rc != 0)
        return rc;
    for (int i = 0; i < EVENT_BATCH; i++) {
        CU(ev->d->cuEventCreate(&ev->start[i], CU_EVENT_DEFAULT), "creating events");
        CU(ev->d->cuEventCreate(&ev->stop[i], CU_EVENT_DEFAULT), "creating events");
    }
    return 0;
}

/* ---- a kind evaluated in chunks ---- */

/* The inner kind's config for one chunk's shape: the store's winner on
 * this GPU when it has one the space takes, else the space's default (the
 * config a call without a record gets). */
static int pick_inner(void *ctx, const tuned__shape *s, tuned__config *out, tuned__err *e)
{
    tuned__evaluator *ev = ctx;
    tuned__space sp;
    int rc = tuned__space_rules(&sp, s, ev->gpu.cc_major * 10 + ev->gpu.cc_minor,
                                ev->gpu.sm_count, e);
    if (rc != 0)
        return rc;
    if (ev->opts.cubins != NULL) {
        tuned__store_key key = tuned__store_key_of(s, tuned__gpu_kind_fp(&ev->gpu, s->kernel));
        tuned__record rec;
        if (tuned__store_get_best(ev->opts.cubins, &key, &rec, NULL, NULL) == 0 &&
            tuned__config_parse(rec.config, out, NULL) == 0 &&
            tuned__space_valid(&sp, out, NULL, 0))
            return 0;
    }
    return tuned__space_default(&sp, out, e);
}

/* The floor: the GEMMs alone, each block's logits made once, over the
 * key's rows in one chunk in the fewest vocabulary blocks that fit the
 * budget (the rule's whole rows where none does): not a config of the
 * space, the work every config does at least. */
static int enqueue_floor(tuned__evaluator *ev, void *arg, tuned__err *e)
{
    (void)arg;
    const tuned__shape *s = &ev->shape;
    uint32_t rows = s->rows < TUNED__MAX_CHUNK ? (uint32_t)s->rows : TUNED__MAX_CHUNK;
    tuned__config widest;
    if (!tuned__chunk_at(s, rows, &widest))
        widest = (tuned__config){.family = TUNED__FAMILY_CHUNK, .chunk = tuned__chunk_rule(s)};
    return tuned__lce_enqueue(&ev->lce, &widest, true, e);
}

static int enqueue_chunked(tuned__evaluator *ev, void *arg, tuned__err *e)
{
    return tuned__lce_enqueue(&ev->lce, arg, false, e);
}

/* The inner kind's reference module: the timing helpers (reference.cu). */
static int open_timing_module(tuned__evaluator *ev, const tuned__kind_spec *inner, int arch,
                              tuned__err *e)
{
    char *src = NULL;
    int rc = tuned__source_reference(inner, ev->shape.dtype, &src, e);
    if (rc != 0)
        return rc;
    rc = tuned__module_from_source(ev->d, ev->nvrtc, src, "reference", arch,
                                   "the timing helpers", &ev->timing_module, e);
    free(src);
    return rc;
}

/* cuBLAS, the small instance and its float64 results, the block at the
 * key's size, the timing helpers; the context is current. */
static int open_chunked(tuned__evaluator *ev, const tuned__kind_spec *kind, tuned__err *e)
{
    const tuned__shape *s = &ev->shape;
    const tuned__kind_spec *inner = tuned__kind(kind->inner);
    int arch = ev->gpu.cc_major * 10 + ev->gpu.cc_minor;
    unsigned hidden = tuned__params_value(kind, s->params, "hidden", 0);
    uint64_t buffer = tuned__kind_chunk_elems(kind, s->rows, s->cols, s->params,
                                              tuned_dtype_size(s->dtype));
    if (inner == NULL || hidden == 0)
        return tuned__errf(e, TUNED_EINVAL, "evaluator: %s names no inner kind or hidden size",
                           kind->name);
    int rc;
    if ((rc = tuned__cublas_load(&ev->blas, e)) != 0 ||
        (rc = tuned__lce_ref_make(&ev->ref, SMALL_TOKENS, SMALL_HIDDEN, SMALL_VOCAB, s->dtype,
                                  0x5eed1ceull, e)) != 0 ||
        (rc = tuned__lce_open(&ev->small, ev->d, ev->nvrtc, &ev->blas, arch, ev->gpu.sm_count,
                              kind, s->dtype, SMALL_TOKENS, SMALL_HIDDEN, SMALL_VOCAB,
                              (uint64_t)SMALL_MAX_CHUNK * SMALL_VOCAB, &ev->ref, pick_inner, ev,
                              ev->stream, e)) != 0 ||
        (rc = tuned__lce_open(&ev->lce, ev->d, ev->nvrtc, &ev->blas, arch, ev->gpu.sm_count,
                              kind, s->dtype, s->rows, hidden, s->cols, buffer, NULL, pick_inner,
                              ev, ev->stream, e)) != 0 ||
        (rc = open_timing_module(ev, inner, arch, e)) != 0)
        return rc;
    return open_timing(ev, ev->timing_module, e);
}

/* A chunk checked on the small instance, then timed at the key's size. */
static int evaluate_chunk(tuned__evaluator *ev, const tuned__config *c, tuned__eval_result *res,
                          tuned__err *e)
{
    tuned__config small = *c;
    small.chunk = c->chunk < SMALL_MAX_CHUNK ? c->chunk : SMALL_MAX_CHUNK;
    bool wrong = false;
    int rc = tuned__lce_check(&ev->small, &ev->ref, &small, &wrong, res->detail,
                              sizeof res->detail, e);
    if (rc != 0)
        return rc;
    if (wrong) {
        res->status = TUNED__EVAL_WRONG;
        return 0;
    }
    if ((rc = time_median(ev, enqueue_chunked, (void *)c, res, e)) != 0)
        return rc;
    res->status = TUNED__EVAL_OK;
    return 0;
}

int tuned__evaluator_open(tuned__evaluator **out, const tuned__driver *d, const tuned__nvrtc *n,
                          const tuned__gpu *gpu, const tuned__shape *s, const tuned__eval_opts *o,
                          tuned__err *e)
{
    size_t esize = tuned_dtype_size(s->dtype);
    /* The byte count below must not wrap before the memory check sees it. */
    if (esize == 0 || s->rows < 1 || s->rows > 2147483647u || s->cols < 1 ||
        s->cols > 0x7fffff00u || s->rows > (SIZE_MAX / 4) / s->cols / esize)
        return tuned__errf(e, TUNED_EINVAL, "evaluator: bad shape %llux%llu",
                           (unsigned long long)s->rows, (unsigned long long)s->cols);
    tuned__evaluator *ev = calloc(1, sizeof *ev);
    if (ev == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "evaluator: out of memory");
    ev->d = d;
    ev->nvrtc = n;
    ev->gpu = *gpu;
    ev->shape = *s;
    if (o != NULL)
        ev->opts = *o;
    else
        tuned__eval_opts_default(&ev->opts);
    ev->esize = esize;
    ev->bytes = s->rows * s->cols * esize;
    /* Variants may assume rows start on vector boundaries only when the
     * buffers are 16-byte aligned. */
    if ((ev->opts.x_offset * esize) % 16 != 0 || (ev->opts.y_offset * esize) % 16 != 0)
        ev->opts.codegen.unaligned = true;
    /* Inputs, output (with its guards) and the flush buffer must fit with
     * room to spare. */
    const tuned__kind_spec *kind = tuned__shape_spec(s);
    if (kind == NULL) {
        free(ev);
        return tuned__errf(e, TUNED_EINVAL, "evaluator: unknown kernel %u",
                           tuned__shape_kernel(s));
    }
    size_t need = (size_t)tuned__kind_bytes(kind, s->rows, tuned__wire_cols_of(s), esize) +
                  2 * (size_t)gpu->l2_bytes + 2 * TUNED__CHECK_GUARD_BYTES;
    ev->chunked = tuned__kind_chunked(kind);
    if (ev->chunked) /* and the logits buffer */
        need += (size_t)tuned__kind_chunk_elems(kind, s->rows, s->cols, s->params, esize) * esize;
    int rc = 0;
    if (need > gpu->total_mem - gpu->total_mem / 8) {
        rc = tuned__errf(e, TUNED_EINVAL,
                         "evaluator: %llux%llu %s needs %zu MiB on the GPU, %s has %zu MiB",
                         (unsigned long long)s->rows, (unsigned long long)s->cols,
                         tuned_dtype_name(s->dtype), need >> 20, gpu->name, gpu->total_mem >> 20);
        free(ev);
        return rc;
    }
    CUresult r = d->cuDevicePrimaryCtxRetain(&ev->ctx, gpu->device);
    if (r != CUDA_SUCCESS) {
        rc = tuned__cuda_check(d, r, e, "retaining the primary context");
        free(ev);
        return rc;
    }
    if ((rc = tuned__cuda_check(d, d->cuCtxSetCurrent(ev->ctx), e, "making the context current")) ||
        (rc = tuned__cuda_check(d, d->cuStreamCreate(&ev->stream, CU_STREAM_NON_BLOCKING), e,
                                "creating a stream"))) {
        tuned__evaluator_close(ev);
        return rc;
    }
    if (ev->chunked) {
        tuned__eval_result floor = {0};
        if ((rc = open_chunked(ev, kind, e)) == 0 &&
            (rc = time_median(ev, enqueue_floor, NULL, &floor, e)) != 0)
            tuned__err_prefix(e, rc, "timing the floor (the GEMMs alone): ");
        if (rc != 0) {
            tuned__evaluator_close(ev);
            return rc;
        }
        ev->copy_us = floor.median_us;
        *out = ev;
        return 0;
    }
    if (
        (rc = tuned__check_open(&ev->check, d, n, gpu->cc_major * 10 + gpu->cc_minor, s,
                                ev->opts.x_offset, ev->opts.y_offset, ev->stream, e)) ||
        (rc = tuned__check_flags(&ev->check, ev->opts.codegen.flags, e)) ||
        (rc = open_timing(ev, ev->check.module, e)) ||
        (rc = tuned__workspace_alloc(d, &ev->work,
                                     tuned__grid_work_bytes(TUNED__GRID_MAX_BLOCKS), e)) ||
        (rc = tuned__check_reference(&ev->check, e))) {
        tuned__evaluator_close(ev);
        return rc;
    }
    ev->check.stray_write = ev->opts.stray_write;
    tuned__eval_result copy = {0};
    if ((rc = time_median(ev, enqueue_copy, NULL, &copy, e)) != 0) {
        tuned__evaluator_close(ev);
        return tuned__err_prefix(e, rc, "timing the copy roofline: ");
    }
    ev->copy_us = copy.median_us;
    *out = ev;
    return 0;
}

void tuned__evaluator_close(tuned__evaluator *ev)
{
    if (ev == NULL)
        return;
    const tuned__driver *d = ev->d;
    if (ev->ctx != NULL) {
        d->cuCtxSetCurrent(ev->ctx);
        if (ev->stream != NULL)
            d->cuStreamSynchronize(ev->stream);
        for (int i = 0; i < EVENT_BATCH; i++) {
            if (ev->start[i] != NULL)
                d->cuEventDestroy(ev->start[i]);
            if (ev->stop[i] != NULL)
                d->cuEventDestroy(ev->stop[i]);
        }
        tuned__check_close(&ev->check);
        tuned__lce_close(&ev->lce);
        tuned__lce_close(&ev->small);
        if (ev->timing_module != NULL)
            d->cuModuleUnload(ev->timing_module);
        tuned__workspace_free(d, &ev->work);
        if (ev->flush != 0)
            d->cuMemFree(ev->flush);
        if (ev->stream != NULL)
            d->cuStreamDestroy(ev->stream);
        d->cuDevicePrimaryCtxRelease(ev->gpu.device);
    }
    tuned__lce_ref_free(&ev->ref);
    tuned__cublas_unload(&ev->blas);
    free(ev);
}

/* ---- one variant on the GPU ---- */

/* Poisons y and its guard, runs the variant, and compares with the
 * reference (the check's); fills res->detail when the variant is wrong. */
static int check_once(tuned__evaluator *ev, tuned__launch *v, unsigned char poison,
                      tuned__eval_result *res, tuned__err *e)
{
    bool wrong = false;
    int rc = tuned__check_run(&ev->check, v, &ev->work, poison, &wrong, res->detail,
                              sizeof res->detail, e);
    if (rc == 0 && wrong)
        res->status = TUNED__EVAL_WRONG;
    return rc;
}

static int evaluate_loaded(tuned__evaluator *ev, CUfunction fn, const tuned__config *c,
                           tuned__eval_result *res, tuned__err *e)
{
    int rc;
    if ((rc = tuned__cuda_check(ev->d,
                                ev->d->cuFuncGetAttribute(&res->registers,
                                                          CU_FUNC_ATTRIBUTE_NUM_REGS, fn),
                                e, "reading the variant's registers")) != 0 ||
        (rc = tuned__cuda_check(ev->d,
                                ev->d->cuFuncGetAttribute(&res->local_bytes,
                                                          CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn),
                                e, "reading the variant's local memory")) != 0)
        return rc;
    rc = tuned__check_input(&ev->check, e);
    if (rc != 0)
        return rc;
    /* A launch the driver refuses (too many registers for the block, a
     * cluster the GPU cannot place, a cooperative grid that cannot be
     * resident) is the variant's failure, not the GPU's. */
    tuned__err launch_err = {0};
    tuned__launch v;
    /* The workspace holds TUNED__GRID_MAX_BLOCKS pairs a slot, the most
     * any prepared launch needs. */
    rc = tuned__launch_prepare(ev->d, fn, c, &ev->shape, ev->gpu.sm_count, &v, &launch_err);
    if (rc == 0)
        rc = enqueue_variant(ev, &v, &launch_err);
    if (rc != 0) {
        if (tuned__cuda_check(ev->d, ev->d->cuStreamSynchronize(ev->stream), e, "after a refused launch"))
            return e != NULL ? e->code : TUNED_ECUDA;
        res->status = TUNED__EVAL_LAUNCH_ERROR;
        snprintf(res->detail, sizeof res->detail, "%s", launch_err.msg);
        return 0;
    }
    /* 0x7B... is finite and far above 1 in every dtype (61280 in fp16,
     * 1.3e36 in bf16 and fp32): an unwritten element differs from any
     * softmax output, NaN included, so one poisoned run catches it. */
    if ((rc = check_once(ev, &v, 0x7B, res, e)) != 0)
        return rc;
    if (res->status == TUNED__EVAL_WRONG)
        return 0;
    if ((rc = time_median(ev, enqueue_variant, &v, res, e)) != 0)
        return rc;
    res->status = TUNED__EVAL_OK;
    return 0;
}

/* The verdict on a variant the GPU failed under (rc, e: the failure).
 * When the context is dead of an error that only a running kernel leaves
 * (tuned__cuda_context_lost), the variant killed it: every variant before
 * it ended with its stream synchronised, so a fault of theirs would have
 * shown then. It gets a launch error, which the history keeps, so that
 * no later tune of the shape runs it again (the process is no use after
 * it anyway). Any other failure is no verdict on the variant. */
static void judge_gpu_failure(tuned__evaluator *ev, tuned__eval_result *res, int rc,
                              const tuned__err *e)
{
    const char *why = e != NULL ? e->msg : tuned_strerror(rc);
    if (tuned__cuda_context_lost(ev->d->cuCtxSynchronize())) {
        res->status = TUNED__EVAL_LAUNCH_ERROR;
        snprintf(res->detail, sizeof res->detail, TUNED__EVAL_KILLED_CONTEXT ": %s", why);
        return;
    }
    res->status = TUNED__EVAL_UNRUN;
    snprintf(res->detail, sizeof res->detail, "not run to the end: %s", why);
}

/* A kind evaluated in chunks: nothing to compile per config. */
static int run_chunked(tuned__evaluator *ev, const tuned__config *cfgs, size_t n,
                       tuned__eval_result *results, tuned__err *e)
{
    for (size_t i = 0; i < n; i++) {
        memset(&results[i], 0, sizeof results[i]);
        results[i].status = TUNED__EVAL_UNRUN;
    }
    int rc = tuned__cuda_check(ev->d, ev->d->cuCtxSetCurrent(ev->ctx), e,
                               "making the context current");
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (cfgs[i].family != TUNED__FAMILY_CHUNK) {
            results[i].status = TUNED__EVAL_COMPILE_ERROR;
            snprintf(results[i].detail, sizeof results[i].detail,
                     "%s is tuned by its chunk, not a kernel config",
                     tuned__shape_spec(&ev->shape)->name);
            continue;
        }
        if (ev->opts.on_variant != NULL)
            ev->opts.on_variant(ev->opts.on_variant_ctx, &cfgs[i]);
        rc = evaluate_chunk(ev, &cfgs[i], &results[i], e);
        if (rc != 0)
            judge_gpu_failure(ev, &results[i], rc, e);
    }
    return rc;
}

int tuned__evaluator_run(tuned__evaluator *ev, const tuned__config *cfgs, size_t n,
                         tuned__eval_result *results, tuned__err *e)
{
    if (n == 0)
        return 0;
    if (ev->chunked)
        return run_chunked(ev, cfgs, n, results, e);
    tuned__compile_target target = {
        .nvrtc = ev->nvrtc,
        .arch = ev->gpu.cc_major * 10 + ev->gpu.cc_minor,
        .shape = ev->shape,
        .codegen = ev->opts.codegen,
        .cubins = ev->opts.cubins,
        .threads = ev->opts.compile_threads,
    };
    for (size_t i = 0; i < n; i++) {
        memset(&results[i], 0, sizeof results[i]);
        results[i].status = TUNED__EVAL_UNRUN; /* until it has a verdict */
    }
    tuned__compile_batch *batch = NULL;
    int rc = tuned__compile_start(&batch, &target, cfgs, n, e);
    if (rc != 0)
        return rc;
    rc = tuned__cuda_check(ev->d, ev->d->cuCtxSetCurrent(ev->ctx), e, "making the context current");
    for (size_t i = 0; i < n && rc == 0; i++) {
        tuned__eval_result *res = &results[i];
        const tuned__blob *cubin = NULL;
        tuned__err compile_err = {0};
        int crc = tuned__compile_wait(batch, i, ev->opts.compile_timeout_s, &cubin, &res->cached,
                                      &res->compile_ms, &compile_err);
        if (crc != 0) {
            res->status = crc == TUNED_ETIMEOUT ? TUNED__EVAL_TIMEOUT : TUNED__EVAL_COMPILE_ERROR;
            snprintf(res->detail, sizeof res->detail, "%s", compile_err.msg);
            continue;
        }
        CUmodule module = NULL;
        CUfunction fn = NULL;
        CUresult r = ev->d->cuModuleLoadData(&module, cubin->data);
        if (r == CUDA_SUCCESS)
            r = ev->d->cuModuleGetFunction(&fn, module, tuned__source_entry(&cfgs[i], &ev->shape));
        if (r != CUDA_SUCCESS) {
            tuned__err load_err = {0};
            tuned__cuda_check(ev->d, r, &load_err, "loading the variant");
            res->status = TUNED__EVAL_LAUNCH_ERROR;
            snprintf(res->detail, sizeof res->detail, "%s", load_err.msg);
        } else {
            if (ev->opts.on_variant != NULL)
                ev->opts.on_variant(ev->opts.on_variant_ctx, &cfgs[i]);
            rc = evaluate_loaded(ev, fn, &cfgs[i], res, e);
            if (rc != 0)
                judge_gpu_failure(ev, res, rc, e);
        }
        if (module != NULL)
            ev->d->cuModuleUnload(module);
    }
    tuned__compile_finish(batch);
    return rc;
}
